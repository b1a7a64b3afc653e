# Call g105: the embedding scatter-add over segments of the tokens (4 at sixteen contexts, one
# a 4,096 tokens; 1 below 8,192 tokens, the plain kernel), each segment's sums added in turn
# through a counter a row block. kernel_check embedding (plain and segmented, bit-exact against
# their references, repeatable, timed), hashes (one context must stay 6271d3fb…; sixteen twice,
# equal), gates at one context with two segments forced, the step with 1, 4 (default) and 8
# segments alternating, the profile's scatter-add.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 60 .gpu-bin/kernel_check --only embedding > $OUT/kc-emb.txt 2>&1; echo "kc exit $?"; grep -E "scatter" $OUT/kc-emb.txt | sort -u | cut -c1-60,90-175
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "B1 hash: $(grep -o "sha256 [0-9a-f]*" /tmp/d1.txt)"
for r in a b; do timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3$r --quiet > /tmp/d3$r.txt 2>&1; echo "B16 hash: $(grep -o "sha256 [0-9a-f]*" /tmp/d3$r.txt) $(grep "train loss" /tmp/d3$r.txt)"; done
ALPHA_SCATTER_SEGMENTS=2 timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates-seg2.txt 2>&1; echo "gates exit $? PASS lines $(grep -cE "PASS" $OUT/gates-seg2.txt)"; grep -E "FAIL|lowest cosine" $OUT/gates-seg2.txt | head -3
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
for i in 1 2 3; do
  run seg4-$i A=1
  run seg1-$i ALPHA_SCATTER_SEGMENTS=1
  run seg8-$i ALPHA_SCATTER_SEGMENTS=8
done
for s in 1 4 8; do
ALPHA_SCATTER_SEGMENTS=$s timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16-$s --quiet > /dev/null 2>&1; $A profile /tmp/p16-$s > $OUT/profile-b16-seg$s.txt 2>&1; echo "segments $s: $(grep -E "^step|scatter" $OUT/profile-b16-seg$s.txt | tr '\n' ' ')"
done
