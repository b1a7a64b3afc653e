set -u
A=.gpu-bin/alpha; chmod +x $A .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
echo "== kernel_check"
timeout 200 .gpu-bin/kernel_check --seed 7 > $OUT/kc.txt 2>&1; echo "exit $?"
sed -n '/==== summary/,$p' $OUT/kc.txt | grep -E "FAIL|gemm-bench|graph|passed" | head -40
grep -E "✗|fail" $OUT/kc.txt | head -10
echo "== bench"
timeout 120 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none 2>&1 | grep -v "^\[" | tail -8
echo "== profile"
timeout 100 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 12 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/cp --quiet 2>&1 | tail -3
$A profile /tmp/cp > $OUT/profile.txt 2>&1; head -60 $OUT/profile.txt
