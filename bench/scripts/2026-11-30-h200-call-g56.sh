# Call g56: split-K parts summed by a thread-block cluster in distributed shared memory
# (gemm_*_tma_splitkN). Default: clusters for split launches of one wave; ALPHA_CLUSTER_SPLITK=on
# at every grid, =off scratch + reduction launch everywhere.
# Bit-exact kernel check against the reduction launch, determinism at B = 1 and 16 (the
# checkpoints must keep their hashes), the step with and without.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check gemm-cluster (timed)"
timeout 120 .gpu-bin/kernel_check --only gemm-cluster --seed 56 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "splitk|FAIL|passed" $OUT/kc.txt | cut -c1-170 | tail -12
[ $rc -eq 0 ] || exit 1
echo "== determinism with clusters everywhere: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect d4ac8e9d…)"
ALPHA_CLUSTER_SPLITK=on timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"; tail -3 /tmp/d1.txt
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
ALPHA_CLUSTER_SPLITK=on timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"; tail -3 /tmp/d3.txt
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B"
run shallow A=1
run everywhere ALPHA_CLUSTER_SPLITK=on
run reduce ALPHA_CLUSTER_SPLITK=off
run shallow2 A=1
run everywhere2 ALPHA_CLUSTER_SPLITK=on
run reduce2 ALPHA_CLUSTER_SPLITK=off
cat /tmp/bench-shallow.txt | tail -6
echo "== GPU tests"
timeout 150 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head
