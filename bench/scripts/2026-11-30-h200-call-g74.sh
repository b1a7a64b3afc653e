# Call g74: attention's delta and bf16 dO stored by the epilogue of the product computing dO
# (gemm::Heads::delta) instead of an f32 dO and a delta launch (sixteen contexts: 16 launches
# fewer). kernel_check fusion (delta and dO bit for bit against product + delta kernel), both
# hashes, the step with and without (ALPHA_DELTA_EPILOGUE=off) alternating three times.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-g70 .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check fusion"
timeout 120 .gpu-bin/kernel_check --only fusion > $OUT/fusion.txt 2>&1; echo "exit $?"; grep -E "delta|FAIL|passed" $OUT/fusion.txt | cut -c1-200
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1 bin=$2; shift 2
  env "$@" timeout 50 $bin bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2 3; do
  run delta$i $A A=1
  run off$i $A ALPHA_DELTA_EPILOGUE=off
done
run g70 .gpu-bin/alpha-g70 A=1
echo "== profile B=16"
timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet > /dev/null 2>&1; echo "exit $?"
timeout 30 $A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; head -14 $OUT/profile-b16.txt
