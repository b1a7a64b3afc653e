# Call g51: the StoreMul epilogue computes gelu(gate) from the gate product, and the gate
# product no longer stores its f32 GELU output, which no launch then reads (ALPHA_MUL_RECOMPUTE=off
# for before); the chain epilogue again (ALPHA_CHAIN_EPILOGUE=on) now that its kernel is held
# to two blocks an SM. GPU tests, kernel checks, determinism at B = 1 and 16, step A/B.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== GPU tests"
timeout 200 .gpu-bin/test_gpu > $OUT/test-gpu.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/test-gpu.txt
echo "== kernel_check fusion"
timeout 120 .gpu-bin/kernel_check --only fusion --seed 33 > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "storemul|then|FAIL|passed" $OUT/kc.txt | cut -c1-160 | tail -8
echo "== determinism (expect 6271d3fb… and d4ac8e9d…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
for i in 3 4; do timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
env ALPHA_CHAIN_EPILOGUE=on timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d5 --quiet > /dev/null 2>&1; echo "exit $?"
find /tmp/d3 /tmp/d4 /tmp/d5 -name "step-000004.safetensors" | xargs sha256sum | sed "s@/tmp/d[345]/@@" | sort
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B"
run new A=1
run storeact ALPHA_MUL_RECOMPUTE=off
run chain ALPHA_CHAIN_EPILOGUE=on
run new2 A=1
run storeact2 ALPHA_MUL_RECOMPUTE=off
run chain2 ALPHA_CHAIN_EPILOGUE=on
