# Call g71: the embedding scatter-add adds each hit to its row's accumulators through a binary tree
# of block-uniform branches (4 compares and the row's 4 adds, not 8 compares and 32 predicated
# adds) and loads 16 hits' gradients at a time (ALPHA_SCATTER_BATCH, was 8): the block of a
# frequent token ran its thousands of hits one after another (300 us at sixteen contexts, g61).
# Same additions in the same order: kernel_check embedding (bit for bit against the reference, at
# sixteen contexts' shape), both hashes. The step against g70's build, and batch 8 and 32; then
# the faster build against PyTorch in one invocation, and kernel_check --quick on the new build.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-g70 .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check embedding"
timeout 60 .gpu-bin/kernel_check --only embedding > $OUT/embedding.txt 2>&1; echo "exit $?"; grep -E "scatter|FAIL|passed" $OUT/embedding.txt | cut -c1-200
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1 bin=$2; shift 2
  env "$@" timeout 50 $bin bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
b16() { grep -E "^ +16 " /tmp/bench-$1.txt | awk '{print $2}'; }
echo "== step A/B"
run new $A A=1
run g70 .gpu-bin/alpha-g70 A=1
run batch8 $A ALPHA_SCATTER_BATCH=8
run batch32 $A ALPHA_SCATTER_BATCH=32
run new2 $A A=1
run g70b .gpu-bin/alpha-g70 A=1
NEW=$(echo "$(b16 new) $(b16 new2)" | awk '{print ($1+$2)/2}'); OLD=$(echo "$(b16 g70) $(b16 g70b)" | awk '{print ($1+$2)/2}')
echo "B=16 mean: new $NEW, g70 $OLD"
BEST=$A; awk -v n="$NEW" -v o="$OLD" 'BEGIN{exit !(n > o)}' && BEST=.gpu-bin/alpha-g70
echo "== bench against PyTorch with $BEST"
timeout 300 $BEST bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
head -6 $OUT/bench.txt
echo "== kernel_check --quick (new build)"
timeout 200 .gpu-bin/kernel_check --quick > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "FAIL|passed|failed" $OUT/kc.txt | cut -c1-200 | tail -3
