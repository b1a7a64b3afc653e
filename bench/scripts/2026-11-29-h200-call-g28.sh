set -u
chmod +x .gpu-bin/alpha .gpu-bin/kernel_check .gpu-bin/test_gpu
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check: attention (the one-launch backward bit for bit against the two launches; timed)"
timeout 120 .gpu-bin/kernel_check --only attention,attention-bench > $OUT/kc-attn.txt 2>&1; echo "exit $?"; grep -E "one-launch|FAIL|JIT|bench.*mma bwd" $OUT/kc-attn.txt | head -16
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-14s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== one-launch attention backward, each block both passes of one tile, by knob"
run joint A=1
run two-launches ALPHA_ATTN_JOINT=off
