# Call g88: the review mend's checks (WALK_BLOCKS, poisoned buffers, the shared FIXUP_COUNTERS)
# and kernels (persistent walk: one arrival helper, the K step reset at each tile's top; every
# walk kernel's SASS identical on the CPU side): kernel_check fusion and gemm-fixup.
set -u
chmod +x .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
timeout 150 .gpu-bin/kernel_check --only fusion,gemm-fixup > $OUT/kc.txt 2>&1; echo "exit $?"
grep -E "walk|FAIL|passed|failed" $OUT/kc.txt | cut -c1-150 | tail -12
