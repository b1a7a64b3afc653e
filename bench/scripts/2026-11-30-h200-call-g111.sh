# Call g111: the thirteenth session's build (39f3379: attention on wgmma, forward and joint backward, the
# same bits as the mma.sync kernels). Hashes (must stay
# 6271d3fb… and 8029d135…), gates, GPU tests, kernel_check fusion, embedding and
# attention-bf16, then the issue's bench against PyTorch.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== hashes"
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $? $(grep -o "sha256 [0-9a-f]*" /tmp/d1.txt)"
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $? $(grep -o "sha256 [0-9a-f]*" /tmp/d3.txt)"
echo "== gates"
timeout 100 $A check all coppelius --device cuda --batch 1 > $OUT/gates.txt 2>&1; echo "exit $? PASS lines $(grep -cE "PASS" $OUT/gates.txt)"; grep -E "FAIL|lowest cosine" $OUT/gates.txt | head -3
echo "== GPU tests"
timeout 150 .gpu-bin/test_gpu --test-threads 1 > $OUT/gpu-tests.txt 2>&1; echo "exit $?"; grep -E "test result|FAILED|panicked" $OUT/gpu-tests.txt | head -5
echo "== kernel_check"
timeout 150 .gpu-bin/kernel_check --quick --only fusion,embedding,attention-bf16 > $OUT/kc.txt 2>&1; echo "exit $? PASS $(grep -c "^PASS" $OUT/kc.txt) FAIL $(grep -c "^FAIL" $OUT/kc.txt)"
echo "== the issue's bench"
timeout 330 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
head -8 $OUT/bench.txt
echo "== profile, sixteen contexts"
timeout 40 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p16 --quiet > /dev/null 2>&1; $A profile /tmp/p16 > $OUT/profile-b16.txt 2>&1; head -12 $OUT/profile-b16.txt
