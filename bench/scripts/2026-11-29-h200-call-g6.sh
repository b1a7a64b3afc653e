set -u
chmod +x .gpu-bin/alpha .gpu-bin/alpha-old .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha-old
echo "== resume (build 24c9388): 20 + resume 20 against 40 in one go, checkpoints every 20 in both"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 40 --checkpoint-every 20 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/r-w --quiet 2>&1 | grep -E "checkpoint|error"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 20 --schedule-steps 40 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/r-a --quiet 2>&1 | grep -E "checkpoint|error"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 20 --heldout-windows 0 --sample-tokens 0 --resume /tmp/r-a/checkpoints/step-000020.safetensors --run-dir /tmp/r-a --quiet 2>&1 | grep -E "checkpoint|error"
echo "== HEAD (ef806d1) speed, no baseline"
timeout 60 .gpu-bin/alpha bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none 2>&1 | grep -v "^\[" | tail -4
echo "== learning equivalence (build 24c9388): Alpha from its step-0 checkpoint, then PyTorch from the same"
timeout 90 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 2000 --checkpoint-every 1000 --heldout-windows 64 --save-initial --sample-tokens 0 --run-dir /tmp/runs/c2k --quiet > $OUT/alpha2k.txt 2>&1; echo "exit $?"; tail -5 $OUT/alpha2k.txt
cp /tmp/runs/c2k/points.jsonl $OUT/alpha-points.jsonl; cp /tmp/runs/c2k/lineage.jsonl $OUT/alpha-lineage.jsonl
timeout 200 python3 bench/coppelius_torch.py train --init /tmp/runs/c2k/checkpoints/step-000000.safetensors --data .gpu-bin/gut-bpe-small --steps 2000 --batch 1 --total 2000 --heldout-windows 64 --out $OUT/torch-losses.jsonl 2>$OUT/torch.err | tail -2; echo "exit $?"; tail -2 $OUT/torch.err
echo "== kernel_check (HEAD kernels, bench)"
timeout 100 .gpu-bin/kernel_check --seed 11 > $OUT/kc.txt 2>&1; echo "exit $?"
sed -n '/==== summary/,$p' $OUT/kc.txt | grep -E "FAIL|gemm-splitk|graph|passed" | head -30
