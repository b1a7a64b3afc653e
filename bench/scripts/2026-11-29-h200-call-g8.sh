set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
KC=.gpu-bin/kernel_check
echo "== kernel_check gemm,fusion correctness (wgmma engine)"
timeout 150 $KC --only gemm,fusion --quick --seed 7 > $OUT/kc-correct.txt 2>&1; echo "exit $?"
grep -E "FAIL|passed, " $OUT/kc-correct.txt | sort | uniq | tail -40
grep "_wg " $OUT/kc-correct.txt | head -4
if grep -q "FAIL" $OUT/kc-correct.txt; then
  echo "== sanitizer on the first failing family"
  timeout 150 compute-sanitizer --print-limit 4 $KC --only gemm --quick --seed 7 > $OUT/sanitizer.txt 2>&1; grep -v "^gemm\|^ *$" $OUT/sanitizer.txt | head -40
fi
echo "== gates (wgmma)"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "loss device|lowest cosine|update 200|PASS|FAIL|✗" $OUT/gates.txt | head -20
echo "== bench wgmma"
timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-wg.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench-wg.txt | tail -6
echo "== bench mma (same binary)"
ALPHA_GEMM_ENGINE=mma timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-mma.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench-mma.txt | tail -6
echo "== gemm-bench"
timeout 120 $KC --only gemm-bench --seed 7 > $OUT/kc-bench.txt 2>&1; echo "exit $?"; grep "gemm-bench" $OUT/kc-bench.txt | head -70
echo "== profile b1"
timeout 40 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; head -24 $OUT/profile-b1.txt
