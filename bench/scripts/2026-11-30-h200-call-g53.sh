# Call g53: GEMM epilogues storing four consecutive values a thread after a quad exchange
# (ALPHA_WIDE_STORES=off for before). Every GEMM variant and fusion checked bit for bit,
# determinism at B = 1 and 16, the step with and without.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check gemm, fusion"
timeout 120 .gpu-bin/kernel_check --only gemm,fusion --seed 36 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "FAIL|passed" $OUT/kc.txt | tail -4
[ $rc -eq 0 ] || exit 1
echo "== determinism (expect 6271d3fb… and d4ac8e9d…)"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /dev/null 2>&1; echo "exit $?"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /dev/null 2>&1; echo "exit $?"
find /tmp/d1 /tmp/d3 -name "step-0000*.safetensors" | xargs sha256sum | sed "s@/tmp/d[13]/@@" | sort
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B"
run wide A=1
run narrow ALPHA_WIDE_STORES=off
run wide2 A=1
run narrow2 ALPHA_WIDE_STORES=off
