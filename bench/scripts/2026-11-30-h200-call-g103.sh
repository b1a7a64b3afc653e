# Call g103: the embedding scatter-add's hits loaded BATCH at a time before they are added
# (ALPHA_SCATTER_BATCH, a working-tree experiment: 8 today, 16 and 32 tried). Sixteen contexts'
# busiest block of 8 vocabulary rows takes ~1,500 hits (Gutenberg BPE), one batch of loads
# waited out after another. kernel_check embedding (bit-exact, repeatable, timed at 1,024 and
# 16,384 tokens), the step alternating, the profile's scatter-add; and the committed one-pass
# attention backward's check after the probe code went (must PASS as g101's base).
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
for b in 8 16 32; do
  ALPHA_SCATTER_BATCH=$b timeout 60 .gpu-bin/kernel_check --only embedding > $OUT/kc-emb-$b.txt 2>&1
  echo "batch $b: $(grep -E "scatter" $OUT/kc-emb-$b.txt | cut -c1-160 | tr '\n' ' ')"
done
timeout 120 .gpu-bin/kernel_check --only attention-bf16 > $OUT/kc-attn.txt 2>&1; grep -E "one-pass" $OUT/kc-attn.txt | cut -c1-200
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
for i in 1 2 3; do
  run b32-$i ALPHA_SCATTER_BATCH=32
  run b8-$i ALPHA_SCATTER_BATCH=8
done
for b in 8 32; do
ALPHA_SCATTER_BATCH=$b timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16-$b --quiet > /dev/null 2>&1; $A profile /tmp/p16-$b > $OUT/profile-b16-batch$b.txt 2>&1; echo "batch $b: $(grep -E "^step|scatter" $OUT/profile-b16-batch$b.txt | tr '\n' ' ')"
done
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "B16 default hash: $(grep -o "sha256 [0-9a-f]*" /tmp/d3.txt)"
ALPHA_SCATTER_BATCH=32 timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d4 --quiet > /tmp/d4.txt 2>&1; echo "B16 batch32 hash: $(grep -o "sha256 [0-9a-f]*" /tmp/d4.txt)"
