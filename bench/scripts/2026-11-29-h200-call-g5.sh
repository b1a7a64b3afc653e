set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-old .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== gpu tests (HEAD)"
timeout 120 .gpu-bin/test_gpu --test-threads 1 > $OUT/gputest.txt 2>&1; T=$?; echo "exit $T"; grep -E "^test |test result" $OUT/gputest.txt
echo "== gates (HEAD)"
timeout 150 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; G=$?; echo "exit $G"; grep -E "loss device|lowest cosine|update 200|PASS|FAIL|✗" $OUT/gates.txt
if [ $T -ne 0 ] || [ $G -ne 0 ]; then echo "HEAD failed a check: the figures below use the build validated in call 4 (24c9388)"; A=.gpu-bin/alpha-old; fi
echo "using $A"
echo "== determinism and resume"
for r in a b; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 20 --schedule-steps 40 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/c-$r --quiet 2>&1 | grep -E "checkpoint|error"; done
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 20 --heldout-windows 0 --sample-tokens 0 --resume /tmp/c-a/checkpoints/step-000020.safetensors --run-dir /tmp/c-a --quiet 2>&1 | grep -E "checkpoint|error"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 40 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/c-w --quiet 2>&1 | grep -E "checkpoint|error"
echo "== profile b1"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; head -24 $OUT/profile-b1.txt
echo "== profile b16"
timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; head -24 $OUT/profile-b16.txt
echo "== alpha bench with the PyTorch baseline"
timeout 300 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=2 --baseline-arg=--deadline-s --baseline-arg=200 > $OUT/bench.txt 2>&1; echo "exit $?"
grep -v "^\[" $OUT/bench.txt | tail -24
