# Call g76: LayerNorm forwards a warp a row (layernorm::forward_warp_rows_kernel; four rows a block,
# no barriers, the block kernel's sums in its order). kernel_check layernorm (bit for bit against
# the block-a-row kernel) and fusion, both hashes, the step with and without (ALPHA_LN_WARP_ROWS=off)
# alternating three times, the GPU tests (the fusion test's arena now holds sixteen contexts).
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-g70 .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check layernorm"
timeout 120 .gpu-bin/kernel_check --only layernorm > $OUT/layernorm.txt 2>&1; echo "exit $?"; grep -E "rows|FAIL|passed" $OUT/layernorm.txt | cut -c1-160
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1 bin=$2; shift 2
  env "$@" timeout 50 $bin bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2 3; do
  run rows$i $A A=1
  run off$i $A ALPHA_LN_WARP_ROWS=off
done
run g70 .gpu-bin/alpha-g70 A=1
echo "== GPU tests"
timeout 200 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
