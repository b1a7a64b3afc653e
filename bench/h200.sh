#!/usr/bin/env bash
# The H200 figures of bench/results/2026-11-29-h200-gates-training-bench.md: gates, GPU training
# with records and profiles, determinism and resume, PyTorch learning equivalence, alpha bench.
# Run from the repository root on the GPU machine with the alpha binary in .gpu-bin/ and two
# prepared streams there (tiny-bytes: tiny-shakespeare as bytes; gut-bpe-small: a Gutenberg
# subset in the BPE-12288 tokenizer); $OUT names a folder for logs.
set -u
A=.gpu-bin/alpha
chmod +x $A
R=/tmp/runs
mkdir -p $R
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export ALPHA_CUDA_PTX_DIR=/tmp/ptx
echo "== gates"
$A check all bob --device cuda --batch 4 > $R/gates-bob.txt 2>&1; echo "exit $?"; grep -E "gate|PASS|FAIL|loss|tensors|update|tokens|error" $R/gates-bob.txt
timeout 300 $A check all coppelius --device cuda --batch 1 > $R/gates-coppelius.txt 2>&1; echo "exit $?"; grep -E "gate|PASS|FAIL|loss|tensors|update|tokens|error" $R/gates-coppelius.txt
unset ALPHA_CUDA_PTX_DIR
echo "== ptxas over every kernel the gates compiled"
ok=0; bad=0; for f in /tmp/ptx/*.ptx; do if ptxas -arch=sm_90a "$f" -o /tmp/k.cubin 2>>$R/ptxas.err; then ok=$((ok+1)); else bad=$((bad+1)); fi; done; echo "ptxas -arch=sm_90a accepted $ok kernels, rejected $bad"
echo "== bob on the GPU"
$A train bob --device cuda --data .gpu-bin/tiny-bytes --steps 600 --checkpoint-every 200 --profile --run-dir $R/bob-h200 --quiet 2>&1 | tail -6
$A profile $R/bob-h200 | head -16
echo "== coppelius on the GPU: determinism and resume"
for r in a b; do $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 20 --schedule-steps 40 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/c-$r --quiet 2>&1 | grep -E "checkpoint|error"; done
$A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 20 --heldout-windows 0 --sample-tokens 0 --resume /tmp/c-a/checkpoints/step-000020.safetensors --run-dir /tmp/c-a --quiet 2>&1 | grep -E "checkpoint|error"
$A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 40 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/c-whole --quiet 2>&1 | grep -E "checkpoint|error"
rm -rf /tmp/c-a /tmp/c-b /tmp/c-whole
echo "== coppelius 2000 steps"
timeout 200 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 2000 --checkpoint-every 1000 --heldout-windows 64 --profile --save-initial --run-dir $R/coppelius-h200 --sample-tokens 60 --quiet 2>&1 | tail -8
$A profile $R/coppelius-h200 > $R/coppelius-profile.txt 2>&1; head -42 $R/coppelius-profile.txt
echo "== the PyTorch model from Alpha's initial checkpoint on the same windows"
timeout 170 python3 bench/coppelius_torch.py train --init $R/coppelius-h200/checkpoints/step-000000.safetensors --data .gpu-bin/gut-bpe-small --steps 2000 --batch 1 --total 2000 --heldout-windows 64 --out $R/torch-losses.jsonl 2>$R/torch-train.err | tail -1
tail -3 $R/torch-train.err
echo "== update gate (CPU reference now sums in f64) and bob's forward"
timeout 120 $A check update coppelius --device cuda --batch 1 2>&1 | grep -v "✗" | tail -8
$A check forward bob --device cuda --batch 4 2>&1 | tail -6
echo "== coppelius resume: 20 + 20 against 40, checkpoints every 20 in both"
$A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 40 --checkpoint-every 20 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/c-whole --quiet 2>&1 | grep -E "checkpoint|error"
$A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 20 --schedule-steps 40 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/c-a --quiet 2>&1 | grep -E "checkpoint|error"
$A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 20 --heldout-windows 0 --sample-tokens 0 --resume /tmp/c-a/checkpoints/step-000020.safetensors --quiet 2>&1 | grep -E "checkpoint|error"
sha256sum /tmp/c-whole/checkpoints/*.safetensors /tmp/c-a/checkpoints/*.safetensors | sed 's/ .*\/tmp/  \/tmp/'
rm -rf /tmp/c-a /tmp/c-whole
echo "== alpha bench coppelius"
timeout 420 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=2 --baseline-arg=--deadline-s --baseline-arg=170 2>&1 | grep -v "^\[" | tail -20
tar czf $OUT/runs.tgz --exclude='*.safetensors' --exclude='*.sha256' -C /tmp runs
