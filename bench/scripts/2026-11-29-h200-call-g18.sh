set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
KC=.gpu-bin/kernel_check
echo "== gemm variants incl. 3-stage ring"
timeout 90 $KC --only gemm --quick --seed 5 > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "passed, |FAIL|_s3" $OUT/kc.txt | head -8
echo "== bench 4 stages (default) vs 3 (bf16 operands)"
timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench4.txt 2>&1; grep -v "^\[" $OUT/bench4.txt | tail -3 | head -2
ALPHA_GEMM_STAGES=3 timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench3.txt 2>&1; grep -v "^\[" $OUT/bench3.txt | tail -3 | head -2
