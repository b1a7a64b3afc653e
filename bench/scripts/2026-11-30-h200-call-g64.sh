# Call g64: TMA products whose epilogue reads f32 tensors (the gated GELU's backward chain reads
# gate and up; the residual-adding products read the residual) ask L2 for their tile's rows from
# the producer warp before the main loop (cp.async.bulk.prefetch.L2). A hint: every bit stays.
# ALPHA_EPILOGUE_PREFETCH=off restores the kernels without it. Determinism (both hashes must not
# change), the step with and without, and each launch timed alone (profile) with and without.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== determinism: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
run prefetch A=1
run off ALPHA_EPILOGUE_PREFETCH=off
run prefetch2 A=1
run off2 ALPHA_EPILOGUE_PREFETCH=off
echo "== profile B=16, with and without"
for v in on off; do
  env ALPHA_EPILOGUE_PREFETCH=$v timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p$v --quiet > /dev/null 2>&1
  timeout 30 $A profile /tmp/p$v > $OUT/profile-b16-$v.txt 2>&1
  echo "-- $v"; grep -E "^\| *(gemm|family)|16384×1408×512|16384×512×1408|16384×512×512 " $OUT/profile-b16-$v.txt | head -12
done
