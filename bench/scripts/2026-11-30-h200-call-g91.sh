# Call g91 (run twice: the first run laid group 1's consumers from warp 9, not a warpgroup boundary — illegal instruction): two math groups a persistent block taking turns at the products
# (GemmSpec::pingpong, ALPHA_PINGPONG=on with ALPHA_PERSISTENT), so one group's epilogue runs
# under the other's products. kernel_check fusion (three blocks of two groups against a block a
# tile, bit for bit: plain, staged, add, accumulate, chain, gated, turned heads), the gemm-trace
# family (K sweep and traces, a block a tile / walk / pingpong), both hashes under rings +
# pingpong (must stay 6271d3fb… and 8029d135…), the step alternating, and a profile.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check fusion"
timeout 150 .gpu-bin/kernel_check --only fusion > $OUT/kc-fusion.txt 2>&1; echo "exit $?"; grep -E "pingpong|FAIL|passed|failed" $OUT/kc-fusion.txt | cut -c1-160 | tail -12
echo "== gemm-trace"
mkdir -p $OUT/trace
ALPHA_TRACE_DIR=$OUT/trace timeout 120 .gpu-bin/kernel_check --only gemm-trace > $OUT/kc-trace.txt 2>&1; echo "exit $?"
grep -E "gemm-(bench|trace)" $OUT/kc-trace.txt | tail -11 | cut -c1-60,100-230
echo "== hashes (rings + pingpong)"
export ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
unset ALPHA_PERSISTENT ALPHA_PINGPONG
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2; do
  run default$i A=1
  run ppRings$i ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on
  run ppFrag$i ALPHA_PERSISTENT=fragments ALPHA_PINGPONG=on
  run rings$i ALPHA_PERSISTENT=rings
done
prof() { local name=$1; shift
  env "$@" timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p-$name --quiet > /dev/null 2>&1; echo "$name exit $?"
  $A profile /tmp/p-$name > $OUT/profile-$name.txt 2>&1; grep -E "^step|^gemm " $OUT/profile-$name.txt; }
prof ppRings ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on
prof rings ALPHA_PERSISTENT=rings
