# Call g50: the TMA engine's three-stage kernels held to two blocks an SM (.minnctapersm 2;
# ALPHA_TWO_BLOCKS=off for before), the GEMM epilogue loading one fragment row's residual at a
# time, the three-stage ring from 3 waves (ALPHA_RING_WAVES=3), scatter-add batching hits across
# groups. Kernel checks (bit-exact), determinism, step A/B, B = 16 profile.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check gemm, fusion, embedding"
timeout 150 .gpu-bin/kernel_check --only gemm,fusion,embedding --seed 32 > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "scatter|FAIL|passed" $OUT/kc.txt | cut -c1-200 | tail -6
echo "== determinism (expect 6271d3fb… and d4ac8e9d…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
for i in 3 4; do env ALPHA_RING_WAVES=3 timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d5 --quiet > /dev/null 2>&1; echo "exit $?"
find /tmp/d3 /tmp/d4 /tmp/d5 -name "step-000004.safetensors" | xargs sha256sum | sed "s@/tmp/d[345]/@@" | sort
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B"
run new A=1
run onefree ALPHA_TWO_BLOCKS=off
run waves3 ALPHA_RING_WAVES=3
run new2 A=1
run onefree2 ALPHA_TWO_BLOCKS=off
run waves3b ALPHA_RING_WAVES=3
echo "== profile b16"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; head -20 $OUT/profile-b16.txt
