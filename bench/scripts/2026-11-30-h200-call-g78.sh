# Call g78: the g77 build against PyTorch's best setting (compile+graph) at steady state: 50
# warm-up and 200 timed steps on both sides (the default 5/20 and 10/30 steps end before the
# GPU's clocks settle, and each side then runs in the state the other left). Twice.
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
for i in 1 2; do
  echo "== steady-state bench against PyTorch ($i)"
  timeout 230 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 50 --steps 200 --baseline-arg=--settings --baseline-arg=compile+graph --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--warmup --baseline-arg=50 --baseline-arg=--steps --baseline-arg=200 --baseline-arg=--repeats --baseline-arg=1 > $OUT/bench-steady$i.txt 2>&1; echo "exit $?"
  head -6 $OUT/bench-steady$i.txt
done
