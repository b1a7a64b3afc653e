set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
KC=.gpu-bin/kernel_check
echo "== cast_multi GPU test"
timeout 60 .gpu-bin/test_gpu cast 2>&1 | grep -E "test |result" | head
echo "== gates (bf16 weights + wgmma)"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "loss device|lowest cosine|update 200|PASS|FAIL|✗" $OUT/gates.txt | head -20
echo "== bench default (4 stages)"
timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-s4.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench-s4.txt | tail -4
echo "== bench 6 stages"
ALPHA_GEMM_STAGES=6 timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-s6.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench-s6.txt | tail -4
echo "== profile b16"
timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; head -60 $OUT/profile-b16.txt
echo "== profile b1"
timeout 40 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; head -20 $OUT/profile-b1.txt
echo "== gemm-bench"
timeout 150 $KC --only gemm-bench --seed 7 > $OUT/kc-bench.txt 2>&1; echo "exit $?"; grep "_s[0-9]" $OUT/kc-bench.txt | head -40
