# Call g57: the gated product — a gated unit's gate and up products in one launch, the
# multiply on registers instead of reading the stored gate back (gemm_rr_bf16_storemul_gelu_
# tma_s3_gated; ALPHA_GATED=off restores the two launches). Fusion checks (bit-exact, the gated
# kernel against its two launches), determinism (the checkpoints must keep their hashes), the
# step with and without; the three-stage ring from 2 waves (ALPHA_RING_WAVES=2) as a side test.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check fusion"
timeout 90 .gpu-bin/kernel_check --only fusion --seed 57 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "gated|FAIL|passed" $OUT/kc.txt | cut -c1-170 | tail -4
[ $rc -eq 0 ] || exit 1
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect d4ac8e9d…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
run gated A=1
run two ALPHA_GATED=off
run waves2 ALPHA_RING_WAVES=2
run gated2 A=1
run two2 ALPHA_GATED=off
run waves2b ALPHA_RING_WAVES=2
echo "== GPU tests"
timeout 150 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head
