# Call g35: attention kernels taking q, k, v as bf16 (turned beforehand): bit for bit against the
# f32 kernels turning on load, and timed at one and 16 contexts; the existing attention checks.
set -u
chmod +x .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
timeout 120 .gpu-bin/kernel_check --only attention-bf16 --seed 5 > $OUT/kc-bf16.txt 2>&1; echo "exit $?"
grep -E "attention-bf16|FAIL|error" $OUT/kc-bf16.txt | head -12
timeout 120 .gpu-bin/kernel_check --only attention --seed 5 > $OUT/kc-attn.txt 2>&1; echo "exit $?"
grep -E "passed|FAIL" $OUT/kc-attn.txt | tail -3
