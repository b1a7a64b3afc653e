# Call g110: the wgmma backward's score chunks software-pipelined (default), and the wgmma
# forward in blocks of two warpgroups sharing K and V (opt-in ALPHA_ATTN_FWD_GROUPS=2).
# kernel_check's attention-bf16 family with timing (bit for bit against the mma.sync kernels),
# then if it passed: hashes (default, and with two groups), and the step alternating.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 150 .gpu-bin/kernel_check --only attention-bf16 > $OUT/kc.txt 2>&1; echo "kc exit $? $(tail -1 $OUT/kc.txt)"
grep -E "wgmma|FAIL" $OUT/kc.txt | cut -c1-200
grep -q "FAIL" $OUT/kc.txt && exit 1
for on in 1 2; do
timeout 40 env ALPHA_ATTN_FWD_GROUPS=$on $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1$on --quiet > /tmp/d1.txt 2>&1; echo "$on B1 $(grep -o "sha256 [0-9a-f]*" /tmp/d1.txt)"
timeout 40 env ALPHA_ATTN_FWD_GROUPS=$on $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3$on --quiet > /tmp/d3.txt 2>&1; echo "$on B16 $(grep -o "sha256 [0-9a-f]*" /tmp/d3.txt) $(grep "train loss" /tmp/d3.txt)"
done
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
for i in 1 2; do run g2_$i ALPHA_ATTN_FWD_GROUPS=2; run g1_$i A=1; done
