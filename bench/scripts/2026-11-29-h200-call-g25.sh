set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
run() { # name, env...
  local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-18s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"
}
echo "== where kernels let their dependents launch (same binary)"
run new A=1
run trigger-exit ALPHA_PDL_TRIGGER=exit
run trigger-pw-exit ALPHA_PDL_TRIGGER=pw-exit
run not-after-pw ALPHA_PDL=not-after-pw
run pdl-off ALPHA_PDL=off
run trigger-exit-2 ALPHA_PDL_TRIGGER=exit
run trigger-pw-exit-2 ALPHA_PDL_TRIGGER=pw-exit
run not-after-pw-2 ALPHA_PDL=not-after-pw
