set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== GPU tests (every family's checks, quick sizes)"
timeout 150 .gpu-bin/test_gpu --test-threads 1 > $OUT/test-gpu.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED" $OUT/test-gpu.txt
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "lowest cosine|update 200|FAIL" $OUT/gates.txt | head -8
echo "== determinism: two 30-step runs (expect 6271d3fb…: every change bit-identical)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
echo "== alpha bench with the PyTorch baseline"
timeout 170 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
grep -v "^\[" $OUT/bench.txt | tail -6
echo "== profile b1"
timeout 40 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; cp /tmp/p1/profile.jsonl $OUT/profile-b1.jsonl; head -16 $OUT/profile-b1.txt
echo "== profile b16"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; cp /tmp/p16/profile.jsonl $OUT/profile-b16.jsonl; head -16 $OUT/profile-b16.txt
