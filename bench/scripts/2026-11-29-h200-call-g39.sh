# Call g39: turned heads stored in whole sectors (quad shuffles); the cross-entropy backward
# stores bf16 dlogits (no cast). Checks, step, determinism, B=16 profile.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 120 .gpu-bin/kernel_check --only fusion,cross_entropy --seed 13 > $OUT/kc.txt 2>&1; echo "kernel_check exit $?"
grep -E "bf16rot|cross_entropy|FAIL" $OUT/kc.txt | cut -c1-200 | head -8; grep passed $OUT/kc.txt | tail -1
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
run a A=1
run b A=1
echo "== determinism (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; cp /tmp/p16/profile.jsonl $OUT/profile-b16.jsonl; head -8 $OUT/profile-b16.txt
