# Call g49: LayerNorm backward's pass 1 in the input gradient's launch over many bands
# (ALPHA_LN_PARTIALS=off for before), scatter-add loading eight hits' gradients at a time, the
# chain epilogue off by default. GPU tests, kernel checks (bit-exact), determinism, step A/B,
# the B = 16 profile, and Nsight Compute on the f32-epilogue products (why their epilogues cost).
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== GPU tests"
timeout 200 .gpu-bin/test_gpu > $OUT/test-gpu.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/test-gpu.txt
echo "== kernel_check fusion, embedding, layernorm"
timeout 150 .gpu-bin/kernel_check --only fusion,embedding,layernorm --seed 31 > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "then|scatter|layernorm|FAIL|passed" $OUT/kc.txt | cut -c1-260 | tail -12
echo "== determinism (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
echo "== B=16 determinism (two runs equal)"
for i in 3 4; do timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > /dev/null 2>&1; echo "exit $?"; done
find /tmp/d3 /tmp/d4 -name "step-000004.safetensors" | xargs sha256sum | sed "s@/tmp/d[34]/@@" | sort
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step A/B"
run new A=1
run lnsep ALPHA_LN_PARTIALS=off
run new2 A=1
run lnsep2 ALPHA_LN_PARTIALS=off
echo "== profile b16"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; head -40 $OUT/profile-b16.txt
echo "== ncu"
timeout 150 ncu -k "regex:storemul|store_gelu|rc_bf16_store_tma_s3|bf16rot" --launch-count 4 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 1 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/n16 --quiet > $OUT/ncu.txt 2>&1; echo "exit $?"
grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|No Eligible|Block Limit" $OUT/ncu.txt | head -60
