set -u
A=.gpu-bin/alpha; chmod +x $A .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
echo "== gpu tests"
timeout 120 .gpu-bin/test_gpu --test-threads 1 > $OUT/gputest.txt 2>&1; echo "exit $?"; grep -E "^test |test result|FAIL" $OUT/gputest.txt | head -20
echo "== gates coppelius"
timeout 240 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "gate|PASS|FAIL|loss|cosine|update|causal|error" $OUT/gates.txt | head -30
echo "== bench"
timeout 100 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none 2>&1 | grep -v "^\[" | tail -5
echo "== determinism"
for r in a b; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 20 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/c-$r --quiet 2>&1 | grep -E "checkpoint|error"; done
echo "== profile b1"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; head -24 $OUT/profile-b1.txt
echo "== profile b16"
timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; head -60 $OUT/profile-b16.txt
