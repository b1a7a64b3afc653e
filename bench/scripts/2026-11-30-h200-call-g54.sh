# Call g54: the final build of the sixth session (1cf4e59) — LayerNorm pass 2 folds in one
# launch after the last (ALPHA_LN_FOLD_TOGETHER=off for before) on top of the wide epilogue
# stores. Kernel checks (bit-exact), GPU tests, determinism, step A/B, one alpha bench
# invocation with the PyTorch baseline at B = 1 and 16, both profiles, the gates.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check layernorm, gemm, fusion"
timeout 120 .gpu-bin/kernel_check --only layernorm,gemm,fusion --seed 37 > $OUT/kc.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "FAIL|passed|rows16384" $OUT/kc.txt | cut -c1-250 | tail -4
[ $rc -eq 0 ] || exit 1
echo "== GPU tests"
timeout 120 .gpu-bin/test_gpu > /tmp/test-gpu.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" /tmp/test-gpu.txt
echo "== determinism (expect 6271d3fb… and d4ac8e9d…)"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /dev/null 2>&1; echo "exit $?"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /dev/null 2>&1; echo "exit $?"
find /tmp/d1 /tmp/d3 -name "step-0000*.safetensors" | xargs sha256sum | sed "s@/tmp/d[13]/@@" | sort
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B"
run together A=1
run apart ALPHA_LN_FOLD_TOGETHER=off
echo "== alpha bench with the PyTorch baseline"
timeout 200 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
grep -v "^\[" $OUT/bench.txt | tail -6
run together2 A=1
run apart2 ALPHA_LN_FOLD_TOGETHER=off
for b in 1 16; do
  echo "== profile b$b"
  timeout 40 $A train coppelius --device cuda --batch $b --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p$b --quiet 2>&1 | tail -1
  $A profile /tmp/p$b > /tmp/prof$b.txt 2>&1; head -14 /tmp/prof$b.txt | tail -12; cp /tmp/p$b/profile.jsonl $OUT/profile-b$b.jsonl
done
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > /tmp/gates.txt 2>&1; echo "exit $?"; grep -cE "PASS" /tmp/gates.txt; grep -E "FAIL|cosine" /tmp/gates.txt | head -3
