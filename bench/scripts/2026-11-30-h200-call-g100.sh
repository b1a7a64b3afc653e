# Call g100: the one-pass backward's dQ share under Nsight Compute (stall reasons), and two
# more probes: nostore (the share's products only, no partial sums read or written) and
# nobar2 (no barrier after the share; races on the dS tile, timing only).
set -u
chmod +x .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
for p in base nostore nobar2 nodq; do
  printf "%-10s " $p
  ALPHA_ONEPASS_PROBE=$p timeout 120 .gpu-bin/kernel_check --only attention-bf16 > $OUT/kc-$p.txt 2>&1
  grep -E "one-pass" $OUT/kc-$p.txt | grep -E "us one pass" | sed -E 's/.*(PASS|FAIL) attention-bf16 one-pass bwd: dk\|dv = joint, dq ~ joint, repeats (b[0-9]+).* (one pass [0-9.]+ us against the joint kernel.s [0-9.]+).*/\1 \2 \3/' | sort -u | tr '\n' ' '; echo
done
chmod +x .gpu-bin/alpha
for p in joint onepass nodq; do
  env ALPHA_ATTN_ONEPASS=$([ $p = joint ] && echo off || echo on) ALPHA_ONEPASS_PROBE=$p timeout 200 ncu --clock-control none --graph-profiling node -k "regex:bwd_(onepass_)?rotary_merged" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
    .gpu-bin/alpha bench coppelius --device cuda --batch 16 --warmup 1 --steps 1 --baseline none > $OUT/ncu-$p.txt 2>&1; echo "ncu $p exit $?"
  grep -E "attention_mma|Duration|Warp Cycles Per Issued|Issue Slots Busy|Achieved Occupancy|Registers Per|Executed Instructions  |Compute \(SM\)" $OUT/ncu-$p.txt | head -12
  grep -iE "stall" $OUT/ncu-$p.txt | head -6
done
