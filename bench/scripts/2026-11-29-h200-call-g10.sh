set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
KC=.gpu-bin/kernel_check
echo "== cast_multi GPU test (vectorized)"
timeout 60 .gpu-bin/test_gpu cast 2>&1 | grep -E "test |result" | head
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "lowest cosine|PASS|FAIL|✗" $OUT/gates.txt | head -20
echo "== bench default"
timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench.txt | tail -4
echo "== bench split-K off"
ALPHA_GEMM_SPLITK=off timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-nosplit.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench-nosplit.txt | tail -4
echo "== profile b1"
timeout 40 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; head -20 $OUT/profile-b1.txt; cp /tmp/p1/profile.jsonl $OUT/profile-b1.jsonl
echo "== gemm-bench tiles"
timeout 150 $KC --only gemm-bench --seed 7 > $OUT/kc-bench.txt 2>&1; echo "exit $?"; grep "gemm-bench" $OUT/kc-bench.txt | tail -30
