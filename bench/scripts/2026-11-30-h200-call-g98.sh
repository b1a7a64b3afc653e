# Call g98: the one-pass attention backward (dQ summed in the dK/dV pass, in a fixed order
# through per-tile counters; ALPHA_ATTN_ONEPASS, default over deep grids = sixteen contexts).
# kernel_check attention-bf16 (one pass vs the joint kernel: dk|dv bits, dq, repeat, timing),
# hashes (one context must stay 6271d3fb…; sixteen twice, equal), gates with the one pass
# forced at one context, the step alternating with ALPHA_ATTN_ONEPASS=off, a B=16 profile.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check attention-bf16"
timeout 120 .gpu-bin/kernel_check --only attention-bf16 > $OUT/kc-attn.txt 2>&1; echo "exit $?"; grep -E "one-pass|FAIL" $OUT/kc-attn.txt | cut -c1-400
echo "== hashes"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"; grep -o "sha256 [0-9a-f]*" /tmp/d1.txt
for r in a b; do
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3$r --quiet > /tmp/d3$r.txt 2>&1; echo "exit $?"; grep -o "sha256 [0-9a-f]*" /tmp/d3$r.txt; grep -iE "loss" /tmp/d3$r.txt | tail -2
done
echo "== gates, one pass forced, one context"
ALPHA_ATTN_ONEPASS=on timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates-onepass.txt 2>&1; echo "exit $?"; grep -cE "PASS" $OUT/gates-onepass.txt; grep -E "FAIL|lowest cosine|largest" $OUT/gates-onepass.txt | head -4
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2 3; do
  run onepass$i A=1
  run joint$i ALPHA_ATTN_ONEPASS=off
done
echo "== profile B=16"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet > /dev/null 2>&1; $A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; head -8 $OUT/profile-b16.txt
