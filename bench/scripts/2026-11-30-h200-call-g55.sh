# Call g55: the chain epilogue with wide (16-byte) loads and stores after the quad exchange
# (ALPHA_CHAIN_EPILOGUE=on; off by default). Fusion checks (bit-exact), B = 16 determinism with
# it on, the step with and without.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check fusion"
timeout 60 .gpu-bin/kernel_check --only fusion --seed 38 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "then|FAIL|passed" $OUT/kc.txt | cut -c1-150 | tail -3
[ $rc -eq 0 ] || exit 1
echo "== B=16 determinism with the chain epilogue (expect d4ac8e9d…)"
env ALPHA_CHAIN_EPILOGUE=on timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /dev/null 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B"
run plain A=1
run chain ALPHA_CHAIN_EPILOGUE=on
run plain2 A=1
run chain2 ALPHA_CHAIN_EPILOGUE=on
