# Call g77: plain f32 stores of tall products (16,384 token rows: the logits, their input
# gradient, the q/k/v projection's input gradient, the paired FFN input gradient) through shared
# memory a row a warp (GemmSpec::staged_store; ALPHA_STAGED_EPILOGUE default "tall"), one
# context unchanged. Both hashes; the step alternating tall / adds (before) / all; then the
# faster of tall and adds against PyTorch twice, gates, kernel_check --quick, the GPU tests.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-g70 .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
b16() { grep -E "^ +16 " /tmp/bench-$1.txt | awk '{print $2}'; }
echo "== step A/B"
for i in 1 2; do
  run tall$i A=1
  run adds$i ALPHA_STAGED_EPILOGUE=adds
  run all$i ALPHA_STAGED_EPILOGUE=all
done
T=$(echo "$(b16 tall1) $(b16 tall2)" | awk '{print ($1+$2)/2}'); D=$(echo "$(b16 adds1) $(b16 adds2)" | awk '{print ($1+$2)/2}')
echo "B=16 mean: tall $T, adds $D"
MODE=tall; awk -v t="$T" -v d="$D" 'BEGIN{exit !(t > d)}' && MODE=adds
echo "== bench against PyTorch with ALPHA_STAGED_EPILOGUE=$MODE"
for i in 1 2; do
  ALPHA_STAGED_EPILOGUE=$MODE timeout 200 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench$i.txt 2>&1; echo "exit $?"
  head -6 $OUT/bench$i.txt
done
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -cE "PASS" $OUT/gates.txt; grep -E "FAIL|lowest cosine" $OUT/gates.txt | head -2
echo "== kernel_check --quick"
timeout 100 .gpu-bin/kernel_check --quick > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "FAIL|passed|failed" $OUT/kc.txt | cut -c1-200 | tail -3
echo "== GPU tests"
timeout 100 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
