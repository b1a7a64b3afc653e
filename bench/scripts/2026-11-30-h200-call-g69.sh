# Call g69: every TMA epilogue that can (128 x 128 tiles; a chain, a residual or accumulating add,
# or a plain f32 store; no activation, heads, multiply, gate or cluster) through shared memory a
# row a warp (gemm_tma::store_staged); ALPHA_STAGED_EPILOGUE=off|chains|adds limits it. Same
# bits claimed: kernel_check --quick (every family), the GPU tests, both hashes. The step under
# each setting, alternating; each launch timed alone at sixteen contexts.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-prev .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
run all A=1
run chains ALPHA_STAGED_EPILOGUE=chains
run adds ALPHA_STAGED_EPILOGUE=adds
run off ALPHA_STAGED_EPILOGUE=off
run all2 A=1
run chains2 ALPHA_STAGED_EPILOGUE=chains
run adds2 ALPHA_STAGED_EPILOGUE=adds
echo "== profile B=16"
timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/pn --quiet > /dev/null 2>&1
timeout 30 $A profile /tmp/pn > $OUT/profile-b16.txt 2>&1
grep -E "^step|^gemm|k512 |k1408 |k1536 |k16384 " $OUT/profile-b16.txt | head -16
echo "== kernel_check --quick"
timeout 200 .gpu-bin/kernel_check --quick > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "FAIL|passed|failed" $OUT/kc.txt | cut -c1-200 | tail -5
echo "== GPU tests"
timeout 200 .gpu-bin/test_gpu > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
