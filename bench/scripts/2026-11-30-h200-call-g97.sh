# Call g97: the review mend (452f490+): GPU tests (the backend's scalar writes and deferred
# waits), both hashes (must stay 6271d3fb… and 8029d135…), kernel_check fusion (walk and
# pingpong variants through walk_blocks) and gemm-trace (the trace read back as u64).
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"; grep -o "sha256 [0-9a-f]*" /tmp/d1.txt
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"; grep -o "sha256 [0-9a-f]*" /tmp/d3.txt
timeout 80 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "gpu tests exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
timeout 60 .gpu-bin/kernel_check --only fusion > $OUT/kc-fusion.txt 2>&1; echo "fusion exit $?"; grep -E "FAIL|passed" $OUT/kc-fusion.txt | tail -3
mkdir -p $OUT/trace; ALPHA_TRACE_DIR=$OUT/trace timeout 40 .gpu-bin/kernel_check --only gemm-trace > $OUT/kc-trace.txt 2>&1; echo "trace exit $?"; grep -E "gemm-trace " $OUT/kc-trace.txt | tail -3 | cut -c1-60,150-260
