set -u
A=.gpu-bin/alpha; chmod +x $A
exec > >(tee $OUT/log.txt) 2>&1
echo "== gates coppelius (reference models the bf16 attention's running maximum)"
timeout 200 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $?"; grep -E "loss device|lowest cosine|update 200|PASS|FAIL|✗" $OUT/gates.txt | head -30
echo "== prepare 3 of 8 training shards and the held-out shard"
t0=$(date +%s.%N)
$A data prepare --corpus .gpu-bin/gut-xz --tokenizer .gpu-bin/tokenizer.json --out /tmp/gut3 2>&1 | tail -3
echo "prepare s: $(echo "$(date +%s.%N) - $t0" | bc)"
python3 -c "import json;m=json.load(open('/tmp/gut3/manifest.json'));print({k:v for k,v in m.items() if k in ('train_tokens','heldout_tokens','valid_tokens','tokens')})" 2>/dev/null; grep -E '"tokens"|_tokens' /tmp/gut3/manifest.json | head -6
echo "== 20,000 steps"
t0=$(date +%s.%N)
timeout 420 $A train coppelius --device cuda --data /tmp/gut3 --steps 20000 --checkpoint-every 2500 --heldout-windows 128 --sample-tokens 120 --run-dir /tmp/runs/c20k --quiet > $OUT/train20k.txt 2>&1; echo "exit $?"
echo "train s: $(echo "$(date +%s.%N) - $t0" | bc)"
tail -12 $OUT/train20k.txt
echo "== predict"
$A predict coppelius --device cuda --checkpoint /tmp/runs/c20k/checkpoints/step-020000.safetensors --prompt "It was a dark and stormy night, and" --tokens 80 --temperature 0.8 2>&1 | tail -4
tar czf $OUT/c20k.tgz --exclude='*.safetensors' -C /tmp/runs c20k
