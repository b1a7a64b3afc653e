# Call g68: the chain epilogue on the TMA engine through shared memory (gemm_tma::store_chain_staged):
# the product tile to the ring, then a row a warp, the other inputs' loads of 8 rows in flight
# at once. ALPHA_STAGED_CHAIN=off: on the fragments as before. Same bits claimed: kernel_check
# fusion (the chain epilogues against the product and the chain's kernel, bit for bit), both
# hashes. The step with and without, alternating; each launch timed alone at sixteen contexts.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-prev .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check fusion"
timeout 120 .gpu-bin/kernel_check --only fusion > $OUT/fusion.txt 2>&1; echo "exit $?"; grep -E "then|FAIL|passed" $OUT/fusion.txt | cut -c1-200
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
run staged A=1
run fragments ALPHA_STAGED_CHAIN=off
run staged2 A=1
run fragments2 ALPHA_STAGED_CHAIN=off
echo "== profile B=16"
timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/pn --quiet > /dev/null 2>&1
timeout 30 $A profile /tmp/pn > $OUT/profile-b16.txt 2>&1
grep -E "^step|^gemm|1408-k512|n512-k1408|n512-k512 " $OUT/profile-b16.txt | head -8
