set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
KC=.gpu-bin/kernel_check
echo "== gates (PDL)"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "loss device|lowest cosine|update 200|PASS|FAIL|✗" $OUT/gates.txt | head -20
echo "== bench PDL on"
timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-pdl.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench-pdl.txt | tail -4
echo "== bench PDL off"
ALPHA_PDL=off timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-nopdl.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench-nopdl.txt | tail -4
echo "== determinism: two 30-step runs (PDL)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "*.safetensors" | xargs sha256sum | sed 's#/tmp/d[12]/##' | sort
tail -2 $OUT/det1.txt; tail -2 $OUT/det2.txt
echo "== kernel_check quick families (checked mode)"
timeout 150 $KC --only gemm,fusion,attention,elementwise --quick --seed 11 > $OUT/kc.txt 2>&1; echo "exit $?"; grep -E "passed, |FAIL" $OUT/kc.txt | head
echo "== profile b1"
timeout 40 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; head -20 $OUT/profile-b1.txt; cp /tmp/p1/profile.jsonl $OUT/profile-b1.jsonl
