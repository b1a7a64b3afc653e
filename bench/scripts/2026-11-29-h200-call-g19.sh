set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-prev
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== gates (head-split stores, gated FFN epilogue, 3-stage ring for deep grids)"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; G=$?; echo "exit $G"; grep -E "loss device|lowest cosine|update 200|PASS|FAIL|✗" $OUT/gates.txt | head -20
echo "== determinism (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "*.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort | tee $OUT/sha.txt
if [ $G -ne 0 ] || [ "$(grep -c 6271d3fb12fc1184bfb727ae07739f8123252e8eea5dd207d222352ab066e30d $OUT/sha.txt)" != "2" ]; then echo "NEW BUILD REJECTED: measuring the previous build"; A=.gpu-bin/alpha-prev; fi
echo "== alpha bench with the PyTorch baseline ($A)"
timeout 150 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
grep -v "^\[" $OUT/bench.txt | tail -8
echo "== profile b1"
timeout 30 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; cp /tmp/p1/profile.jsonl $OUT/profile-b1.jsonl; head -20 $OUT/profile-b1.txt
echo "== profile b16"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; cp /tmp/p16/profile.jsonl $OUT/profile-b16.jsonl; head -40 $OUT/profile-b16.txt
