# Call g87 (final build): where the K = 512 products lose time. The sixteen-context step's
# profile with the epilogue fusions off (no heads store, no gated launch or StoreMul, no staged
# epilogues), so the q/k/v, gate and up products are plain f32 stores on the fragments, next to
# the default's: the plain products' TFLOP/s against the fused ones'.
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
prof() { local name=$1; shift
  env "$@" timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p-$name --quiet > /dev/null 2>&1; echo "$name exit $?"
  $A profile /tmp/p-$name > $OUT/profile-$name.txt 2>&1; grep -E "^step|^gemm |k512 " $OUT/profile-$name.txt; }
prof default A=1
prof plain ALPHA_FUSE_HEADS=off ALPHA_GATED=off ALPHA_MUL_EPILOGUE=off ALPHA_STAGED_EPILOGUE=off ALPHA_CHAIN_EPILOGUE=off
