set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
for t in 128x128 128x64 64x128 64x64; do
echo "== split parts tile $t"
ALPHA_SPLIT_TILE=$t timeout 60 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > $OUT/bench-$t.txt 2>&1; echo "exit $?"; grep -v "^\[" $OUT/bench-$t.txt | tail -3 | head -2
done
