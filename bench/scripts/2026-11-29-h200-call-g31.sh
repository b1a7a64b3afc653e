# Call g31: the TMA-fed wgmma engine — checks (against the f64 reference and bit for bit against
# the cp.async ring), product timings, the step on either engine, determinism.
set -u
chmod +x .gpu-bin/alpha .gpu-bin/test_gpu .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
echo "== kernel_check gemm"
timeout 150 .gpu-bin/kernel_check --only gemm --seed 7 > $OUT/kc-gemm.txt 2>&1; rc=$?; echo "exit $rc"
grep -E "_tma" $OUT/kc-gemm.txt | grep -v "^PASS" | head -20; grep -E "passed|FAIL" $OUT/kc-gemm.txt | tail -5
if [ $rc != 0 ]; then exit 1; fi
echo "== gemm-bench"
timeout 200 .gpu-bin/kernel_check --only gemm-bench --seed 7 > $OUT/kc-bench.txt 2>&1; echo "exit $?"
grep -E "m16384|m8192" $OUT/kc-bench.txt | grep -v "^PASS gemm-bench.*m16384.*$" | head -5
grep -E "m16384|m8192" $OUT/kc-bench.txt | awk '{print $3, $4, $5, $6, $(NF-2), $(NF-1)}' | sort -u | head -60
run() { local name=$1; shift
  env "$@" timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$name.txt 2>&1
  printf "%-10s %s\n" "$name" "$(grep -E '^ +(1|16) ' $OUT/bench-$name.txt | awk '{printf "B=%s %s ms  ", $1, $2}')"; }
echo "== step: TMA engine (default) vs the cp.async ring"
run tma A=1
run ring ALPHA_GEMM_ENGINE=wgmma
run tma2 A=1
echo "== determinism: two 30-step runs (expect 6271d3fb…)"
for i in 1 2; do timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d$i --quiet > $OUT/det$i.txt 2>&1; echo "exit $?"; done
find /tmp/d1 /tmp/d2 -name "step-000030.safetensors" | xargs sha256sum | sed "s@/tmp/d[12]/@@" | sort | tee $OUT/sha.txt
