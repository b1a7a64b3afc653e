# Call g85: 256 x 128 tiles (ALPHA_TILE256=on; four consumer warpgroups, a four-stage ring of
# 48 KB stages, one block an SM) for the deep products storing from the fragments: sixteen
# contexts' q/k/v projection (turned bf16 heads) and gated launch. kernel_check fusion (every
# 256-row kernel bit for bit against 128-row tiles), both hashes with the knob (must stay
# 6271d3fb... and 8029d135...), then the step alternating default / tile256.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check fusion"
timeout 120 .gpu-bin/kernel_check --only fusion > $OUT/kc-fusion.txt 2>&1; echo "exit $?"; grep -E "256x128|FAIL|passed|failed" $OUT/kc-fusion.txt | cut -c1-200 | tail -10
echo "== hashes (ALPHA_TILE256=on)"
ALPHA_TILE256=on timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
ALPHA_TILE256=on timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2 3; do
  run base$i A=1
  run t256$i ALPHA_TILE256=on
done
echo "== profile B=16 with the knob"
ALPHA_TILE256=on timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet > /dev/null 2>&1; echo "exit $?"
$A profile /tmp/p16 > $OUT/profile-b16-t256.txt 2>&1; grep -E "^step|^gemm |rr-m16384-n1408-k512|rr-m16384-n1536-k512" $OUT/profile-b16-t256.txt
