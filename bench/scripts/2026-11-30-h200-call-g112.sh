# Call g112: the wgmma attention forward software-pipelined (S of tile kt + 1 and P.V of tile kt
# in flight during the softmax; K and V rings; the two-group variant removed).
# kernel_check's attention-bf16 family with timing (bit for bit against the mma.sync kernels),
# then if it passed: hashes, and the step alternating with the mma.sync forward.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 150 .gpu-bin/kernel_check --only attention-bf16 > $OUT/kc.txt 2>&1; echo "kc exit $? $(tail -1 $OUT/kc.txt)"
grep -E "wgmma|FAIL" $OUT/kc.txt | cut -c1-200
grep -q "FAIL" $OUT/kc.txt && exit 1
for on in on off; do
timeout 40 env ALPHA_ATTN_WGMMA=$on $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1$on --quiet > /tmp/d1.txt 2>&1; echo "$on B1 $(grep -o "sha256 [0-9a-f]*" /tmp/d1.txt)"
timeout 40 env ALPHA_ATTN_WGMMA=$on $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3$on --quiet > /tmp/d3.txt 2>&1; echo "$on B16 $(grep -o "sha256 [0-9a-f]*" /tmp/d3.txt) $(grep "train loss" /tmp/d3.txt)"
done
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
for i in 1 2; do run wg$i A=1; run mma$i ALPHA_ATTN_WGMMA=off; done
