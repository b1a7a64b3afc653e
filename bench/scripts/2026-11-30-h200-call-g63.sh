# Call g63: the LayerNorm forward a warp a row (layernorm_fwd_warps_bf16; ALPHA_LN_WARPS=off for a
# block a row), the same bits. Bit-exact check (timed), determinism (both hashes must hold), the
# step with and without, then one alpha bench invocation with the PyTorch baseline on this build,
# then the GPU tests.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check layernorm (timed)"
timeout 60 .gpu-bin/kernel_check --only layernorm --seed 63 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "warps|FAIL|passed" $OUT/kc.txt | cut -c1-200 | tail -5
[ $rc -eq 0 ] || exit 1
echo "== determinism (expect 6271d3fb… and 8029d135…)"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /dev/null 2>&1; echo "exit $?"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /dev/null 2>&1; echo "exit $?"
find /tmp/d1 /tmp/d3 -name "step-0000*.safetensors" | xargs sha256sum | sed "s@/tmp/d[13]/@@" | sort
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B"
run warps A=1
run blocks ALPHA_LN_WARPS=off
run warps2 A=1
run blocks2 ALPHA_LN_WARPS=off
echo "== alpha bench with the PyTorch baseline"
timeout 230 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
grep -v "^\[" $OUT/bench.txt | tail -6
echo "== GPU tests"
timeout 60 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt
