set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== GPU test: LayerNorm's fold beside the rows, bit for bit"
timeout 60 .gpu-bin/test_gpu layernorm > $OUT/test-gpu.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/test-gpu.txt
echo "== determinism: two 30-step runs (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort | tee $OUT/sha.txt
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== the band fold beside the rows (default) or as its own launch"
run fold A=1
run separate ALPHA_LN_FOLD=separate
f=$(grep -E '^ +1 ' $OUT/bench-fold.txt | awk '{print $2}'); s=$(grep -E '^ +1 ' $OUT/bench-separate.txt | awk '{print $2}')
ok=$(grep -c 6271d3fb12fc1184bfb727ae07739f8123252e8eea5dd207d222352ab066e30d $OUT/sha.txt)
KNOB=A=1; if [ "$ok" != 2 ] || awk "BEGIN{exit !($f > $s)}"; then KNOB=ALPHA_LN_FOLD=separate; fi
echo "== alpha bench with the PyTorch baseline ($KNOB)"
env $KNOB timeout 170 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
grep -v "^\[" $OUT/bench.txt | tail -6
echo "== profile b1 ($KNOB)"
env $KNOB timeout 30 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 8 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p1 --quiet 2>&1 | tail -1
$A profile /tmp/p1 > $OUT/profile-b1.txt 2>&1; cp /tmp/p1/profile.jsonl $OUT/profile-b1.jsonl; head -14 $OUT/profile-b1.txt
