# Call g72: the embedding scatter-add over many tokens bucketed by row first (embedding_bucket_v12288:
# one block counts the rows, scans, and one warp walks the tokens in order into each row's slots;
# embedding_bucket_sum: a warp a row sums its tokens' gradients in token order), instead of every
# one of 1,536 blocks scanning all 16,384 indices (300 us at sixteen contexts). Same additions in
# the same order: kernel_check embedding (both paths against the reference, bit for bit, with a
# row hit by every seventh token), sixteen contexts' hash. ALPHA_BUCKETED_SCATTER=off for the
# old kernel. Then the build against PyTorch in one invocation.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check embedding"
timeout 60 .gpu-bin/kernel_check --only embedding > $OUT/embedding.txt 2>&1; rc=$?; echo "exit $rc"; grep -E "scatter|bucket|FAIL|passed" $OUT/embedding.txt | cut -c1-220
[ $rc -eq 0 ] || exit 1
echo "== determinism: B=16 4 steps (expect 8029d135…)"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
H=$(sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64); echo $H
[ "$H" = "8029d135e8a6a602ab9109083ce1bc8c6fcee857ddb7482483ebf524492757e9" ] || { tail -5 /tmp/d3.txt; exit 1; }
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B (sixteen contexts)"
run bucketed A=1
run scan ALPHA_BUCKETED_SCATTER=off
run bucketed2 A=1
run scan2 ALPHA_BUCKETED_SCATTER=off
echo "== bench against PyTorch"
timeout 240 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
head -6 $OUT/bench.txt
