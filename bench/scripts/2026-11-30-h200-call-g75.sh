# Call g75: the build of g74 (attention's delta in the output gradient's product epilogue) against
# PyTorch in one invocation at one and sixteen contexts, twice; gates at one context;
# kernel_check --quick; the GPU tests.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
for i in 1 2; do
  echo "== bench against PyTorch ($i)"
  timeout 280 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench$i.txt 2>&1; echo "exit $?"
  head -6 $OUT/bench$i.txt
done
echo "== gates"
timeout 150 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -cE "PASS" $OUT/gates.txt; grep -E "FAIL|lowest cosine" $OUT/gates.txt | head -4
echo "== kernel_check --quick"
timeout 200 .gpu-bin/kernel_check --quick > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "FAIL|passed|failed" $OUT/kc.txt | cut -c1-200 | tail -3
echo "== GPU tests"
timeout 200 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
