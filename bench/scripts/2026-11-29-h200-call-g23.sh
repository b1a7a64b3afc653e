set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
OLD="ALPHA_EPILOGUE_LOADS=interleaved ALPHA_PW_VECTOR=off ALPHA_LN_FINISH=serial"
run() { # name, env...
  local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-16s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"
}
echo "== one binary, knobs (all three off = the previous build's launches, byte-identical)"
run new A=1
run old $OLD
run no-vector ALPHA_PW_VECTOR=off
run serial-ln ALPHA_LN_FINISH=serial
run interleaved ALPHA_EPILOGUE_LOADS=interleaved
run new-2 A=1
run old-2 $OLD
run new-nopdl ALPHA_PDL=off
run old-nopdl $OLD ALPHA_PDL=off
