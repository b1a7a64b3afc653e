# Call g108 (thirteenth session): the attention forward on wgmma (attention_wgmma, opt-in
# ALPHA_ATTN_WGMMA=on). kernel_check's attention-bf16 family with timing (the wgmma forward
# against the mma.sync one, bit for bit, at B = 1, 2x3x200 and B = 16), then if it passed: the
# hashes with the knob (B = 1 30 steps, B = 16 4 steps; equal to the default's if the bits
# are the same), and the step alternating knob on/off at one and sixteen contexts.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 150 .gpu-bin/kernel_check --only attention-bf16 > $OUT/kc.txt 2>&1; echo "kc exit $? $(tail -1 $OUT/kc.txt)"; grep -E "wgmma|FAIL|vs f32 turned" $OUT/kc.txt | cut -c1-230
grep -q "FAIL" $OUT/kc.txt && exit 1
for on in off on; do
timeout 40 env ALPHA_ATTN_WGMMA=$on $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1$on --quiet > /tmp/d1.txt 2>&1; echo "$on B1 $(grep -o "sha256 [0-9a-f]*" /tmp/d1.txt)"
timeout 40 env ALPHA_ATTN_WGMMA=$on $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3$on --quiet > /tmp/d3.txt 2>&1; echo "$on B16 $(grep -o "sha256 [0-9a-f]*" /tmp/d3.txt) $(grep "train loss" /tmp/d3.txt)"
done
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
for i in 1 2; do run wgmma$i ALPHA_ATTN_WGMMA=on; run mma$i ALPHA_ATTN_WGMMA=off; done
