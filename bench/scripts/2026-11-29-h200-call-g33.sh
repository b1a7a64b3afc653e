# Call g33: casts into GEMM loads (f32 operands on the cp.async ring) or launched (bf16 operands
# on the TMA engine); the TMA ring's depth.
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
run fold A=1
run nofold ALPHA_CAST_INTO_GEMM=off
run fold2 A=1
run nofold2 ALPHA_CAST_INTO_GEMM=off
run nofold-s4 ALPHA_CAST_INTO_GEMM=off ALPHA_GEMM_STAGES=4
echo "== determinism with nofold (expect 6271d3fb…)"
for i in 1 2; do ALPHA_CAST_INTO_GEMM=off timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort | tee $OUT/sha.txt
echo "== profile b16 nofold"
ALPHA_CAST_INTO_GEMM=off timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; cp /tmp/p16/profile.jsonl $OUT/profile-b16.jsonl; head -16 $OUT/profile-b16.txt
