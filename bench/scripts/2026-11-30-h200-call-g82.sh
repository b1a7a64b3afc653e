# Call g82: Coppelius's gated unit rounds gate and up to bf16 (as bf16 autocast keeps them):
# the gated launch stores them as bf16 (GemmSpec::c_bf16), the dh product's chain epilogue
# reads them as bf16, the upcasts are never launched. New numerics, so new hashes: each run
# twice for determinism. Then the new kernels bit for bit (kernel_check fusion), gates,
# kernel_check --quick, GPU tests, and the step alternating with the previous build (ed1b0d3).
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-old .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== determinism: B=1 30 steps twice, B=16 4 steps twice (new numerics)"
for i in 1 2; do
  timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1-$i --quiet > /tmp/d1-$i.txt 2>&1; echo "exit $?"; tail -2 /tmp/d1-$i.txt
  sha256sum /tmp/d1-$i/checkpoints/step-000030.safetensors | cut -c1-64
  timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3-$i --quiet > /tmp/d3-$i.txt 2>&1; echo "exit $?"
  sha256sum /tmp/d3-$i/checkpoints/step-000004.safetensors | cut -c1-64
done
echo "== kernel_check fusion"
timeout 120 .gpu-bin/kernel_check --only fusion > $OUT/kc-fusion.txt 2>&1; echo "exit $?"; grep -E "c16|in16|FAIL|passed|failed" $OUT/kc-fusion.txt | cut -c1-220 | tail -14
run() { local name=$1; local bin=$2
  timeout 50 $bin bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2 3; do
  run new$i $A
  run old$i .gpu-bin/alpha-old
done
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -cE "PASS" $OUT/gates.txt; grep -E "FAIL|lowest cosine|cos" $OUT/gates.txt | head -12
echo "== kernel_check --quick"
timeout 120 .gpu-bin/kernel_check --quick > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "FAIL|passed|failed" $OUT/kc.txt | cut -c1-200 | tail -3
echo "== GPU tests"
timeout 150 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
