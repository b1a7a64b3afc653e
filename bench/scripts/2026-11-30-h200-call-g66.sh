# Call g66: after g64/g65 (prefetching the epilogue's f32 inputs into L2 from the producer warp
# before the main loop, in bulk or line by line, made sixteen contexts' step 0.3-0.6 ms slower),
# each consumer warp asks L2 for its own rows' lines of those inputs as its last products run
# (ALPHA_EPILOGUE_PREFETCH=epilogue) or two K steps before the last (=early). A hint: every bit
# stays (both hashes). The step with each, against none; each launch timed alone with each.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== determinism with =early: B=1 30 steps (expect 6271d3fb…), B=16 4 steps (expect 8029d135…)"
ALPHA_EPILOGUE_PREFETCH=early timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"
sha256sum /tmp/d1/checkpoints/step-000030.safetensors | cut -c1-64
ALPHA_EPILOGUE_PREFETCH=early timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"
sha256sum /tmp/d3/checkpoints/step-000004.safetensors | cut -c1-64
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
run off A=1
run epilogue ALPHA_EPILOGUE_PREFETCH=epilogue
run early ALPHA_EPILOGUE_PREFETCH=early
run off2 A=1
run epilogue2 ALPHA_EPILOGUE_PREFETCH=epilogue
run early2 ALPHA_EPILOGUE_PREFETCH=early
echo "== profile B=16"
for v in epilogue early; do
  env ALPHA_EPILOGUE_PREFETCH=$v timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p$v --quiet > /dev/null 2>&1
  timeout 30 $A profile /tmp/p$v > $OUT/profile-b16-$v.txt 2>&1
  echo "-- $v"; grep -E "^gemm|1408-k512|n512-k1408|n512-k512 " $OUT/profile-b16-$v.txt | head -8
done
