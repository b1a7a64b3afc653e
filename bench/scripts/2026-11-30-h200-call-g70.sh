# Call g70: the eighth session's final build (staged chain and add epilogues, tanh's inline quotient
# and shared GELU tanh) against PyTorch in one invocation at one and sixteen contexts; gates at one
# context; both hashes; kernel_check --quick; GPU tests; profiles at both batch sizes.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== bench against PyTorch"
timeout 300 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
tail -25 $OUT/bench.txt
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
echo "== gates"
timeout 150 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -cE "PASS" $OUT/gates.txt; grep -E "FAIL|lowest cosine" $OUT/gates.txt | head -4
echo "== profiles"
for b in 1 16; do
timeout 90 $A train coppelius --device cuda --batch $b --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p$b --quiet > /dev/null 2>&1
timeout 30 $A profile /tmp/p$b > $OUT/profile-b$b.txt 2>&1; head -14 $OUT/profile-b$b.txt
done
echo "== kernel_check --quick"
timeout 200 .gpu-bin/kernel_check --quick > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "FAIL|passed|failed" $OUT/kc.txt | cut -c1-200 | tail -3
echo "== GPU tests"
timeout 200 .gpu-bin/test_gpu > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
