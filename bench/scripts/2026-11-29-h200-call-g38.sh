# Call g38: the delta kernel also writes dO as bf16; the one-launch attention backward copies it
# (and reads delta) instead of converting f32 dO and recomputing delta. Checks, timing, step.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 120 .gpu-bin/kernel_check --only attention-bf16 --seed 11 > $OUT/kc-bf16.txt 2>&1; echo "kernel_check exit $?"
grep -E "attention-bf16" $OUT/kc-bf16.txt | head -4 | cut -c1-60,150-400
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
run do16 A=1
run do16b A=1
echo "== determinism (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
