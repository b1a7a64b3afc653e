# Call g43: the bf16 attention forward also stores its output's permuted bf16 copy (16 permute-and-
# cast launches gone). Checks, the step with and without (ALPHA_ATTN_OCOPY=off), determinism.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 120 .gpu-bin/kernel_check --only attention-bf16 --seed 23 > $OUT/kc.txt 2>&1; echo "kernel_check exit $?"
grep -E "o16|FAIL" $OUT/kc.txt | cut -c1-120 | head -3; grep passed $OUT/kc.txt | tail -1
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
run ocopy A=1
run permute ALPHA_ATTN_OCOPY=off
run ocopy2 A=1
echo "== determinism (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
