set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
KC=.gpu-bin/kernel_check
echo "== split-K fix-up checks (bit-identity with the reduction, counters) and timing"
timeout 150 $KC --only gemm-splitk --seed 7 > $OUT/kc-split.txt 2>&1; echo "exit $?"; grep -E "gemm-splitk|FAIL" $OUT/kc-split.txt | grep -E "fixup|FAIL|chosen" | head -40
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "lowest cosine|PASS|FAIL|✗" $OUT/gates.txt | head -20
echo "== bench"
timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench.txt | tail -4
echo "== determinism: two 30-step runs"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "*.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
echo "== profile b1"
timeout 40 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; head -20 $OUT/profile-b1.txt; cp /tmp/p1/profile.jsonl $OUT/profile-b1.jsonl
