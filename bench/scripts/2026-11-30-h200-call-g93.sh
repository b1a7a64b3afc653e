# Call g93: the step with two math groups (g92's kernels; g91 and g92's step runs used a stale
# alpha binary with group 1's consumers off a warpgroup boundary). Hashes under each mode (must
# stay 6271d3fb… and 8029d135…), the step alternating default / rings + pingpong / the same
# with tall plain stores on the fragments (ALPHA_STAGED_EPILOGUE=adds, so they take turns too)
# / fragments + pingpong, and a profile of each pingpong mode.
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
hashes() { local name=$1; shift
  env "$@" timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1-$name --quiet > /tmp/d1-$name.txt 2>&1; echo "$name B=1 exit $?"; tail -2 /tmp/d1-$name.txt | cut -c1-300
  sha256sum /tmp/d1-$name/checkpoints/step-000030.safetensors | cut -c1-64
  env "$@" timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3-$name --quiet > /tmp/d3-$name.txt 2>&1; echo "$name B=16 exit $?"; tail -2 /tmp/d3-$name.txt | cut -c1-300
  sha256sum /tmp/d3-$name/checkpoints/step-000004.safetensors | cut -c1-64; }
hashes ppRings ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on
hashes ppAll ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on ALPHA_STAGED_EPILOGUE=adds
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2; do
  run default$i A=1
  run ppRings$i ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on
  run ppAll$i ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on ALPHA_STAGED_EPILOGUE=adds
  run ppFrag$i ALPHA_PERSISTENT=fragments ALPHA_PINGPONG=on
done
prof() { local name=$1; shift
  env "$@" timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p-$name --quiet > /dev/null 2>&1; echo "$name exit $?"
  $A profile /tmp/p-$name > $OUT/profile-$name.txt 2>&1; grep -E "^step|^gemm " $OUT/profile-$name.txt; }
prof default A=1
prof ppRings ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on
prof ppAll ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on ALPHA_STAGED_EPILOGUE=adds
