# Call g59: split-K over long K in parts that may differ by a K step (gemm_cr_bf16_store_tma_kparts):
# sixteen contexts' 44-tile weight gradients in 3 parts (one wave) instead of 8 (three waves);
# ALPHA_SPLITK_UNEVEN=off restores the power-of-two parts. The K grouping of those 48 products
# changes, so sixteen contexts' checkpoint hash changes; one context's does not (its K keeps
# power-of-two parts). Checks against the reference (timed), determinism (two runs agree), the
# step with and without.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check gemm-kparts (timed)"
timeout 120 .gpu-bin/kernel_check --only gemm-kparts --seed 59 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "kparts|FAIL|passed" $OUT/kc.txt | cut -c1-200 | tail -6
[ $rc -eq 0 ] || exit 1
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps twice (the two must agree)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
for r in a b; do
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3$r --quiet > /tmp/d3$r.txt 2>&1; echo "exit $?"; grep -E "train loss" /tmp/d3$r.txt
sha256sum /tmp/d3$r/checkpoints/step-000004.safetensors | cut -c1-64
done
ALPHA_SPLITK_UNEVEN=off timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3c --quiet > /tmp/d3c.txt 2>&1; echo "exit $? (knob off; expect d4ac8e9d…)"; grep -E "train loss" /tmp/d3c.txt
sha256sum /tmp/d3c/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
run uneven A=1
run even ALPHA_SPLITK_UNEVEN=off
run uneven2 A=1
run even2 ALPHA_SPLITK_UNEVEN=off
