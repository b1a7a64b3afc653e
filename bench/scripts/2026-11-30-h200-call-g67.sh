# Call g67: (1) a chain's steps on one input share the tanh-GELU's inner tanh (gelu and gelu'
# of the gate in the gated unit's backward computed it twice); (2) tanh's quotient 2/(e^{2x}+1)
# by div.rn's own fast path inline (reciprocal, Newton step, residual correction), without the
# called slow path that made ptxas save every live predicate around each division. Both claim
# the same bits: tanh checked on all 2^32 inputs (kernel_check tanh-exhaustive), both hashes,
# every family of kernel_check --quick. The step against the build before (alpha-prev = g66's,
# kernels of c98488f), alternating; each launch timed alone at sixteen contexts.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-prev .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check tanh-exhaustive"
timeout 120 .gpu-bin/kernel_check --only tanh-exhaustive > $OUT/tanh.txt 2>&1; echo "exit $?"; grep -E "tanh|FAIL" $OUT/tanh.txt | cut -c1-220
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1 bin=$2
  timeout 50 $bin bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
run new $A
run prev .gpu-bin/alpha-prev
run new2 $A
run prev2 .gpu-bin/alpha-prev
echo "== profile B=16"
timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/pn --quiet > /dev/null 2>&1
timeout 30 $A profile /tmp/pn > $OUT/profile-b16.txt 2>&1
grep -E "^step|^gemm|1408-k512|n512-k1408|n512-k512 " $OUT/profile-b16.txt | head -8
echo "== kernel_check --quick"
timeout 200 .gpu-bin/kernel_check --quick > $OUT/kc.txt 2>&1; echo "exit $?"; grep -cE "^PASS|pass" $OUT/kc.txt; grep -E "FAIL|passed|failed" $OUT/kc.txt | cut -c1-200 | tail -5
