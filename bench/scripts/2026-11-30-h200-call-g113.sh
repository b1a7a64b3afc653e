# Call g113: after the review mend (the wgmma attention kernels copy through attention_mma's
# Mover in the swizzled layout, take gemm_wgmma's descriptor parts, and the two-group forward
# is gone): kernel_check's attention-bf16 family with timing (bit for bit against the
# mma.sync kernels), both hashes (must stay 6271d3fb… and 8029d135…), one step bench.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
timeout 150 .gpu-bin/kernel_check --only attention-bf16 > $OUT/kc.txt 2>&1; echo "kc exit $? $(tail -1 $OUT/kc.txt)"
grep -E "wgmma.*us|FAIL" $OUT/kc.txt | cut -c1-200
timeout 40 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "B1 $(grep -o "sha256 [0-9a-f]*" /tmp/d1.txt)"
timeout 40 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "B16 $(grep -o "sha256 [0-9a-f]*" /tmp/d3.txt)"
timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench.txt 2>&1; grep -E "^ +(1|16) " $OUT/bench.txt
