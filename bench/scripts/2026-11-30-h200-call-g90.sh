# Call g90: the persistent walk measured 13% faster than a block a tile on a plain K = 512
# product alone (g89 trace: 51.4 against 59.0 µs), but not in the step (g83). Profiles of the
# sixteen-context step a block a tile, with the walk for the fragment epilogues (gated, q/k/v
# heads) and for every deep product (rings), to see which launches gain or lose.
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
prof() { local name=$1; shift
  env "$@" timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p-$name --quiet > /dev/null 2>&1; echo "$name exit $?"
  $A profile /tmp/p-$name > $OUT/profile-$name.txt 2>&1; grep -E "^step|^gemm " $OUT/profile-$name.txt; }
for i in 1 2; do
prof default$i A=1
prof fragments$i ALPHA_PERSISTENT=fragments
prof rings$i ALPHA_PERSISTENT=rings
done
