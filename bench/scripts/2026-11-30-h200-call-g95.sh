# Call g95: a phase's run returns once its graph is launched (the next read or copy waits, and
# names the phase if it faulted), and a step's scalars are set on the stream (cuMemsetD32Async)
# instead of copied after a wait: the host no longer idles the device between the steps of
# `alpha bench`'s timed loop, as PyTorch's loop (graph replays, one wait at the end) does not.
# Hashes (must stay 6271d3fb… and 8029d135…), gates, GPU tests, the step alternating with
# ALPHA_SYNC_RUN=on (the old wait after every run), then the issue's bench.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== hashes"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"; grep -o "sha256 [0-9a-f]*" /tmp/d1.txt
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"; grep -o "sha256 [0-9a-f]*" /tmp/d3.txt
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -cE "PASS" $OUT/gates.txt; grep -E "FAIL|lowest cosine" $OUT/gates.txt | head -3
echo "== GPU tests"
timeout 150 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2 3; do
  run async$i A=1
  run sync$i ALPHA_SYNC_RUN=on
done
echo "== the issue's bench"
timeout 300 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
head -6 $OUT/bench.txt
