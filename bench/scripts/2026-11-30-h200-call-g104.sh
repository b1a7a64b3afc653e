# Call g104: the embedding scatter-add skipping rounds that hit none of a block's rows (one
# bar.red.or.pred instead of a walk of 8 empty slots and their predicated adds), and stopping a
# batch's loads and adds at its first empty slot; BATCH 8 or 16 (ALPHA_SCATTER_BATCH, working
# tree). kernel_check embedding (bit-exact, repeatable, timed), hashes (must stay), the step
# alternating with the committed build (.gpu-bin/alpha-head), the profile's scatter-add.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-head .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
for b in 8 16; do
  ALPHA_SCATTER_BATCH=$b timeout 60 .gpu-bin/kernel_check --only embedding > $OUT/kc-emb-$b.txt 2>&1
  echo "batch $b: $(grep -E "scatter" $OUT/kc-emb-$b.txt | sort -u | cut -c1-40,90-160 | tr '\n' ' ')"
done
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "B1 hash: $(grep -o "sha256 [0-9a-f]*" /tmp/d1.txt)"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "B16 hash: $(grep -o "sha256 [0-9a-f]*" /tmp/d3.txt)"
run() { local name=$1; local bin=$2; shift 2
  env "$@" timeout 50 $bin bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
for i in 1 2 3; do
  run new8-$i $A ALPHA_SCATTER_BATCH=8
  run new16-$i $A ALPHA_SCATTER_BATCH=16
  run head-$i .gpu-bin/alpha-head A=1
done
for b in 8 16; do
ALPHA_SCATTER_BATCH=$b timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16-$b --quiet > /dev/null 2>&1; $A profile /tmp/p16-$b > $OUT/profile-b16-batch$b.txt 2>&1; echo "batch $b: $(grep -E "^step|scatter" $OUT/profile-b16-batch$b.txt | tr '\n' ' ')"
done
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet > /dev/null 2>&1; $A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; echo "B=1: $(grep -E "^step|scatter" $OUT/profile-b1.txt | tr '\n' ' ')"
