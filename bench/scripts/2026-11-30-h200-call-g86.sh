# Call g86: the session's final build (HEAD: the persistent walk in the tree, off by default;
# every default launch as ed1b0d3's): both hashes, gates, kernel_check (--only fusion with the
# persistent checks printed, then --quick), the GPU tests, and the bench once more.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -cE "PASS" $OUT/gates.txt; grep -E "FAIL|lowest cosine" $OUT/gates.txt | head -3
echo "== kernel_check fusion, then --quick"
timeout 150 .gpu-bin/kernel_check --only fusion > $OUT/kc-fusion.txt 2>&1; echo "exit $?"; grep -E "walk|FAIL|passed|failed" $OUT/kc-fusion.txt | cut -c1-160 | tail -9
timeout 150 .gpu-bin/kernel_check --quick > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "FAIL|passed|failed" $OUT/kc.txt | cut -c1-200 | tail -3
echo "== GPU tests"
timeout 150 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
echo "== the issue's bench"
timeout 200 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
head -6 $OUT/bench.txt
