# Call g36: the projection stores q and k turned and q, k, v as bf16; attention reads them.
# Checks (turned heads bit for bit against the host; fusion family; GPU tests), the step with and
# without (ALPHA_ATTN_BF16=off), determinism, gates.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 120 .gpu-bin/kernel_check --only fusion --seed 9 > $OUT/kc-fusion.txt 2>&1; echo "kernel_check fusion exit $?"
grep -E "bf16rot|FAIL" $OUT/kc-fusion.txt | head; grep -E "passed" $OUT/kc-fusion.txt | tail -1
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
run bf16 A=1
run f32 ALPHA_ATTN_BF16=off
run bf16b A=1
echo "== determinism (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
echo "== gates"
timeout 120 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; tail -8 $OUT/gates.txt
echo "== GPU tests"
timeout 200 .gpu-bin/test_gpu > $OUT/test-gpu.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/test-gpu.txt
