# Call g99: where the one-pass attention backward's time goes. Probe builds of its kernel
# (ALPHA_ONEPASS_PROBE, a working-tree experiment, not committed: most give wrong dq) timed by
# kernel_check attention-bf16 at one and sixteen contexts against the joint kernel:
#   red     middle shares added in L2 by red.global.add (correct: the counters order them)
#   nowait  no wait for the counter; noload  no read of the partial sums; nofence  no fence
#   nosync  none of wait, fence or count; nodq  no dQ share at all (the dK/dV pass + dS stores)
#   nomin   without .minnctapersm 3 (ptxas takes 251 registers: two blocks an SM)
set -u
chmod +x .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
for p in base red nowait noload nofence nosync nodq nomin red,nomin; do
  s=$(date +%s.%N)
  ALPHA_ONEPASS_PROBE=$p timeout 120 .gpu-bin/kernel_check --only attention-bf16 > $OUT/kc-$p.txt 2>&1
  e=$(date +%s.%N)
  printf "%-10s %5.1fs " $p $(echo "$e - $s" | bc)
  grep -E "one-pass" $OUT/kc-$p.txt | grep -E "us one pass" | sed -E 's/.*(PASS|FAIL) attention-bf16 one-pass bwd: dk\|dv = joint, dq ~ joint, repeats (b[0-9]+).* (one pass [0-9.]+ us against the joint kernel.s [0-9.]+).*/\1 \2 \3/' | tr '\n' ' '; echo
done
