# Call g58: the bf16 attention forward in 128-row blocks, two 16-row tiles a warp, so each K and
# V fragment read from shared memory feeds two products (attention_mma_bf16_fwd_wide_o16;
# ALPHA_ATTN_WIDE=off restores the 64-row kernel). Bit-exact attention check (timed at B = 16),
# determinism (hashes must hold), the step with and without.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check attention-bf16 (timed)"
timeout 150 .gpu-bin/kernel_check --only attention-bf16 --seed 58 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "wide|bf16 q/k/v|FAIL|passed" $OUT/kc.txt | cut -c1-250 | tail -8
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
run wide A=1
run narrow ALPHA_ATTN_WIDE=off
run wide2 A=1
run narrow2 ALPHA_ATTN_WIDE=off
