set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check: attention (the one-launch backward bit for bit against the two launches; timed)"
timeout 120 .gpu-bin/kernel_check --only attention,attention-bench > $OUT/kc-attn.txt 2>&1; echo "exit $?"; grep -E "one-launch|FAIL|JIT|bench.*mma bwd" $OUT/kc-attn.txt | head -16
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "lowest cosine|update 200|FAIL" $OUT/gates.txt | head -8
echo "== determinism: two 30-step runs (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-14s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== one-launch attention backward, by knob"
run joint A=1
run two-launches ALPHA_ATTN_JOINT=off
