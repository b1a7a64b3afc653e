# Call g101: the one-pass backward with its dQ partial sums in fragment order (each warp access
# 256 contiguous bytes; before: 8 rows' 32-byte pieces, 4x the L1 wavefronts). Probes as g99
# (working tree): base, red, nosync, noload, nostore.
set -u
chmod +x .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
for p in base red nosync noload nostore; do
  printf "%-10s " $p
  ALPHA_ONEPASS_PROBE=$p timeout 120 .gpu-bin/kernel_check --only attention-bf16 > $OUT/kc-$p.txt 2>&1
  grep -E "one-pass" $OUT/kc-$p.txt | grep -E "us one pass" | sed -E 's/.*(PASS|FAIL) attention-bf16 one-pass bwd: dk\|dv = joint, dq ~ joint, repeats (b[0-9]+).* (one pass [0-9.]+ us against the joint kernel.s [0-9.]+).*/\1 \2 \3/' | sort -u | tr '\n' ' '; echo
done
grep -E "one-pass" $OUT/kc-base.txt | cut -c1-300
