# Call g60: a gated unit's input gradient, dgate·W_gateᵀ + dup·W_upᵀ, in one paired launch summing
# both products in one accumulator over K = 2 × 1408 (gemm_rc_bf16_store_tma_s3_kpair), instead of
# the first product storing f32 and the second adding it; ALPHA_PAIRED=off restores the two.
# Sixteen contexts' sums round differently (new hash); one context's products are split and not
# paired (hash unchanged). Checks against the reference (timed), determinism, the step with and
# without.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check gemm-pair (timed)"
timeout 120 .gpu-bin/kernel_check --only gemm-pair --seed 60 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "kpair|FAIL|passed" $OUT/kc.txt | cut -c1-200 | tail -3
[ $rc -eq 0 ] || exit 1
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps twice (the two must agree)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
for r in a b; do
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3$r --quiet > /tmp/d3$r.txt 2>&1; echo "exit $?"; grep -E "train loss" /tmp/d3$r.txt
sha256sum /tmp/d3$r/checkpoints/step-000004.safetensors | cut -c1-64
done
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
run paired A=1
run two ALPHA_PAIRED=off
run paired2 A=1
run two2 ALPHA_PAIRED=off
