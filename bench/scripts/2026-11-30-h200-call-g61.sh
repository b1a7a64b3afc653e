# Call g61: checks of the seventh session's final build (gated products, uneven split-K parts,
# paired products): every kernel family (--quick), GPU tests, determinism, both profiles, gates.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check --quick"
start=$(date +%s)
timeout 200 .gpu-bin/kernel_check --quick --seed 61 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc ($(( $(date +%s) - start )) s)"; grep -E "FAIL|passed" $OUT/kc.txt | cut -c1-200 | tail -4
echo "== GPU tests"
timeout 120 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt
echo "== determinism (expect 6271d3fb… and 8029d135…)"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /dev/null 2>&1; echo "exit $?"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /dev/null 2>&1; echo "exit $?"
find /tmp/d1 /tmp/d3 -name "step-0000*.safetensors" | xargs sha256sum | sed "s@/tmp/d[13]/@@" | sort
for b in 1 16; do
  echo "== profile b$b"
  timeout 40 $A train coppelius --device cuda --batch $b --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p$b --quiet 2>&1 | tail -1
  $A profile /tmp/p$b > $OUT/profile-b$b.txt 2>&1; head -16 $OUT/profile-b$b.txt | tail -14; cp /tmp/p$b/profile.jsonl $OUT/profile-b$b.jsonl
done
echo "== gates"
start=$(date +%s)
timeout 150 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $? ($(( $(date +%s) - start )) s)"; grep -cE "PASS" $OUT/gates.txt; grep -E "FAIL|cosine" $OUT/gates.txt | head -3
