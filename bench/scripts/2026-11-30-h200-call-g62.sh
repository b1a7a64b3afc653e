# Call g62: one alpha bench invocation with the PyTorch baseline (four settings) at B = 1 and 16
# on the seventh session's final build; then kernels' early dependent-launch trigger
# (ALPHA_PDL_TRIGGER=start) against the default, as a side test.
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== alpha bench with the PyTorch baseline"
timeout 260 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
grep -v "^\[" $OUT/bench.txt | tail -6
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B: dependent-launch trigger"
run exit A=1
run start ALPHA_PDL_TRIGGER=start
run exit2 A=1
run start2 ALPHA_PDL_TRIGGER=start
