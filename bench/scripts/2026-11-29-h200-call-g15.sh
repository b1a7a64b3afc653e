set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
KC=.gpu-bin/kernel_check
echo "== attention checks and bench (64/32/16 rows)"
timeout 200 $KC --only attention,attention-bench --seed 7 > $OUT/kc-attn.txt 2>&1; echo "exit $?"; grep -E "passed, |FAIL" $OUT/kc-attn.txt | head -20; grep -E "bit for bit|attention-bench" $OUT/kc-attn.txt | grep -E "r32|r16|B=1|b1" | head -40
echo "== gates (32-row attention at B=1)"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "lowest cosine|PASS|FAIL|✗" $OUT/gates.txt | head -20
echo "== bench default / rows 64 / rows 16"
timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench.txt | tail -4
ALPHA_ATTN_ROWS=64 timeout 60 $A bench coppelius --device cuda --batch 1 --warmup 5 --steps 20 --baseline none > $OUT/bench64.txt 2>&1; grep -v "^\[" $OUT/bench64.txt | tail -2
ALPHA_ATTN_ROWS=16 timeout 60 $A bench coppelius --device cuda --batch 1 --warmup 5 --steps 20 --baseline none > $OUT/bench16.txt 2>&1; grep -v "^\[" $OUT/bench16.txt | tail -2
echo "== determinism (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "*.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
