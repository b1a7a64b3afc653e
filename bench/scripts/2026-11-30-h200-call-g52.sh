# Call g52: the final build of the sixth session — the cross-entropy forward loading each
# thread's logits once (cross_entropy_fwd_v12288), checked bit for bit first (stop if not), then
# GPU tests, kernel_check --quick, gates, determinism at B = 1 and 16, one alpha bench
# invocation with the PyTorch baseline (four settings) at B = 1 and 16, and both profiles.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check cross_entropy (bench)"
timeout 60 .gpu-bin/kernel_check --only cross_entropy --seed 34 > /tmp/kc-ce.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "cross_entropy|passed" /tmp/kc-ce.txt | cut -c1-170
[ $rc -eq 0 ] || exit 1
echo "== GPU tests"
timeout 200 .gpu-bin/test_gpu > /tmp/test-gpu.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" /tmp/test-gpu.txt
echo "== kernel_check --quick"
timeout 240 .gpu-bin/kernel_check --quick --seed 35 > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "FAIL|passed" $OUT/kc.txt | tail -3
echo "== gates"
timeout 150 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -cE "PASS" $OUT/gates.txt; grep -E "FAIL" $OUT/gates.txt | head -3
echo "== determinism (expect 6271d3fb… and d4ac8e9d…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
for i in 3 4; do timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d3 /tmp/d4 -name "step-000004.safetensors" | xargs sha256sum | sed "s@/tmp/d[34]/@@" | sort
echo "== alpha bench with the PyTorch baseline"
timeout 220 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
grep -v "^\[" $OUT/bench.txt | tail -8
for b in 1 16; do
  echo "== profile b$b"
  timeout 60 $A train coppelius --device cuda --batch $b --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p$b --quiet 2>&1 | tail -1
  $A profile /tmp/p$b > /tmp/prof$b.txt 2>&1; cat /tmp/prof$b.txt | head -48; cp /tmp/p$b/profile.jsonl $OUT/profile-b$b.jsonl
done
