# Call g102: the one-pass backward (fragment-ordered partial sums) with probes (working tree):
#   bulk     shares other than the last staged in shared memory and stored (diagonal) or added
#            in L2 by one bulk copy (cp.reduce.async.bulk .add.f32), no loads in those blocks
#   nofinal  the last share not stored (dq wrong): the cost of key tile 0's final stores
set -u
chmod +x .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
for p in base bulk nofinal bulk,nofinal; do
  printf "%-14s " $p
  ALPHA_ONEPASS_PROBE=$p timeout 120 .gpu-bin/kernel_check --only attention-bf16 > "$OUT/kc-${p/,/-}.txt" 2>&1
  grep -E "one-pass" "$OUT/kc-${p/,/-}.txt" | grep -E "us one pass" | sed -E 's/.*(PASS|FAIL) attention-bf16 one-pass bwd: dk\|dv = joint, dq ~ joint, repeats (b[0-9]+).* (one pass [0-9.]+ us against the joint kernel.s [0-9.]+).*/\1 \2 \3/' | sort -u | tr '\n' ' '; echo
done
grep -E "one-pass" $OUT/kc-bulk.txt | cut -c1-330
