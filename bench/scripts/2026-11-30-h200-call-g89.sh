# Call g89 (eleventh session): where a short-K product's time goes, tile by tile. kernel_check's
# gemm-trace family times sixteen contexts' q/k/v shape (16384 × 1536, bf16, 128 × 128 tiles on
# the three-stage ring) at K = 512 … 4096 and traces K = 512 (each tile's SM and the global
# timer at its start, first stage, last product and epilogue's end), a block a tile and
# persistent, with and without the first wave's second-slot blocks held back 2 µs
# (ALPHA_STAGGER_NS). Then the whole step with the hold-back, alternating with the default.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
for ns in 0 2000; do
  mkdir -p $OUT/trace-$ns
  ALPHA_STAGGER_NS=$ns ALPHA_TRACE_DIR=$OUT/trace-$ns timeout 120 .gpu-bin/kernel_check --only gemm-trace > $OUT/kc-trace-$ns.txt 2>&1; echo "trace ns=$ns exit $?"
  grep -E "gemm-(bench|trace)" $OUT/kc-trace-$ns.txt | tail -6
done
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2; do
  run default$i A=1
  run st1500-$i ALPHA_STAGGER_NS=1500
  run st3000-$i ALPHA_STAGGER_NS=3000
done
