# Call g48 (sixth session): the gated GELU's backward in the dh product's epilogue (chain
# epilogue), the three-stage TMA kernels held to two blocks' registers, epilogue loads one row
# at a time, eight vocabulary rows a scatter-add block. GPU tests, the fusion and embedding
# kernel checks (bit-exact), determinism, and the step with each change's knob.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== GPU tests"
timeout 200 .gpu-bin/test_gpu > $OUT/test-gpu.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/test-gpu.txt
echo "== kernel_check fusion, embedding"
timeout 120 .gpu-bin/kernel_check --only fusion,embedding --seed 30 > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "then|scatter|FAIL|passed" $OUT/kc.txt | cut -c1-200 | tail -12
echo "== determinism (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B"
run new A=1
run nochain ALPHA_CHAIN_EPILOGUE=off
run noregcap ALPHA_TWO_BLOCKS=off
run oldepi ALPHA_TWO_BLOCKS=off ALPHA_EPILOGUE_LOADS=together
run waves3 ALPHA_RING_WAVES=3
run new2 A=1
