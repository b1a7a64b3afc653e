set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "lowest cosine|PASS|FAIL|✗" $OUT/gates.txt | head -20
echo "== bench"
timeout 80 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench.txt | tail -4
echo "== determinism: two 30-step runs (expect 6271d3fb… as before: LN caching and the add fusion change no bit)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "*.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort
echo "== profile b16"
timeout 90 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet 2>&1 | tail -1
$A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; head -22 $OUT/profile-b16.txt; cp /tmp/p16/profile.jsonl $OUT/profile-b16.jsonl
