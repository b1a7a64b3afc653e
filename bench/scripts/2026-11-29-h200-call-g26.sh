set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
run() { # name, env...
  local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-18s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"
}
echo "== build with dependents launched as blocks exit (default); each knob alone (same binary)"
run default A=1
run heads-on ALPHA_FUSE_HEADS=on
run heads-off ALPHA_FUSE_HEADS=off
run splitk-off ALPHA_GEMM_SPLITK=off
run no-vector ALPHA_PW_VECTOR=off
run interleaved ALPHA_EPILOGUE_LOADS=interleaved
run serial-ln ALPHA_LN_FINISH=serial
run pdl-off ALPHA_PDL=off
run trigger-start ALPHA_PDL_TRIGGER=start
run default-2 A=1
run heads-on-2 ALPHA_FUSE_HEADS=on
