# Call g83: persistent TMA products (GemmSpec::persistent, "_walk"): blocks walk the tiles of
# products over more than one wave (two blocks an SM), the producer loading a tile's first
# stages while the consumers store the one before. Default: where the epilogue does not work in
# the ring (the gated launch, the q/k/v heads store); ALPHA_PERSISTENT=rings: every deep TMA
# product (the producer then waits for the ring's epilogue). kernel_check fusion (five blocks
# walking 24-88 tiles, bit for bit against a block a tile), both hashes (must stay 6271d3fb… and
# 8029d135…), the step alternating default / off / rings, then the issue's bench once.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-old .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check fusion"
timeout 120 .gpu-bin/kernel_check --only fusion > $OUT/kc-fusion.txt 2>&1; echo "exit $?"; grep -E "walk|FAIL|passed|failed" $OUT/kc-fusion.txt | cut -c1-200 | tail -12
for mode in default rings; do
  echo "== hashes ($mode)"
  env ALPHA_PERSISTENT=$mode timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1-$mode --quiet > /tmp/d1-$mode.txt 2>&1; echo "exit $?"
  sha256sum /tmp/d1-$mode/checkpoints/step-000030.safetensors | cut -c1-64
  env ALPHA_PERSISTENT=$mode timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3-$mode --quiet > /tmp/d3-$mode.txt 2>&1; echo "exit $?"
  sha256sum /tmp/d3-$mode/checkpoints/step-000004.safetensors | cut -c1-64
done
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2 3; do
  run walk$i A=1
  run off$i ALPHA_PERSISTENT=off
  run rings$i ALPHA_PERSISTENT=rings
done
echo "== bench against PyTorch (default)"
timeout 200 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench1.txt 2>&1; echo "exit $?"
head -6 $OUT/bench1.txt
