# Call g94: two math groups a block for more products. With ALPHA_STAGED_EPILOGUE=adds the tall
# plain stores (and the paired product) leave the ring and take turns too (g93's run of it
# failed: a launch whose chain moved its epilogue into the ring kept the two groups' block
# size; fixed). With ALPHA_STAGED_EPILOGUE=off the chain and residual adds too. Hashes (must
# stay 6271d3fb… and 8029d135…), the step alternating, and profiles.
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
hashes() { local name=$1; shift
  env "$@" timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1-$name --quiet > /tmp/d1-$name.txt 2>&1; echo "$name B=1 exit $?"; tail -1 /tmp/d1-$name.txt | cut -c1-300
  env "$@" timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3-$name --quiet > /tmp/d3-$name.txt 2>&1; echo "$name B=16 exit $?"; tail -2 /tmp/d3-$name.txt | head -1 | cut -c1-300; }
hashes ppAll ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on ALPHA_STAGED_EPILOGUE=adds
hashes ppNone ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on ALPHA_STAGED_EPILOGUE=off
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2; do
  run default$i A=1
  run ppAll$i ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on ALPHA_STAGED_EPILOGUE=adds
  run ppNone$i ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on ALPHA_STAGED_EPILOGUE=off
  run rings$i ALPHA_PERSISTENT=rings
done
prof() { local name=$1; shift
  env "$@" timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p-$name --quiet > /dev/null 2>&1; echo "$name exit $?"
  $A profile /tmp/p-$name > $OUT/profile-$name.txt 2>&1; grep -E "^step|^gemm " $OUT/profile-$name.txt; }
prof ppAll ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on ALPHA_STAGED_EPILOGUE=adds
prof ppNone ALPHA_PERSISTENT=rings ALPHA_PINGPONG=on ALPHA_STAGED_EPILOGUE=off
