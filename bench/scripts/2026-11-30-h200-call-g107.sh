# Call g107: the logits' product writing the cross-entropy's per-tile row statistics (max and
# sum of exponentials, GemmSpec::row_stats) where it stores through shared memory (sixteen
# contexts), and the cross-entropy forward combining them (12.6 MB) instead of re-reading the
# 805 MB of logits; ALPHA_CE_STATS=off restores the old forward. kernel_check (the product bit
# for bit, the loss against the f64 reference), hashes (one context must stay 6271d3fb…:
# unchanged path; sixteen twice, equal), gates at one context with every plain store staged
# (so the statistics run), the step alternating at sixteen contexts, and the profile.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 60 .gpu-bin/kernel_check --quick --only fusion,cross_entropy > $OUT/kc.txt 2>&1; echo "kc exit $? $(tail -1 $OUT/kc.txt)"; grep -E "rowstats|fwd_stats|FAIL" $OUT/kc.txt | sort -u | cut -c1-170
timeout 40 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "B1 $(grep -o "sha256 [0-9a-f]*" /tmp/d1.txt)"
for r in a b; do timeout 40 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3$r --quiet > /tmp/d3$r.txt 2>&1; echo "B16 $(grep -o "sha256 [0-9a-f]*" /tmp/d3$r.txt) $(grep "train loss" /tmp/d3$r.txt)"; done
ALPHA_STAGED_EPILOGUE=all timeout 90 $A check all coppelius --device cuda --batch 1 > $OUT/gates-staged.txt 2>&1; echo "gates exit $? PASS $(grep -cE "PASS" $OUT/gates-staged.txt)"; grep -E "FAIL|lowest cosine" $OUT/gates-staged.txt | head -3
run() { local name=$1; shift
  env "$@" timeout 40 $A bench coppelius --device cuda --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E "^ +16 " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
for i in 1 2; do run stats$i A=1; run off$i ALPHA_CE_STATS=off; done
timeout 40 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet > /dev/null 2>&1; $A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; grep -E "^step|cross|rc-m16384-n12288" $OUT/profile-b16.txt
