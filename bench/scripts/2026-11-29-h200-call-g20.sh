set -u
chmod +x .gpu-bin/alpha
A=.gpu-bin/alpha
for v in "x=1" "ALPHA_FUSE_HEADS=off" "ALPHA_FUSE_GATED=off" "ALPHA_FUSE_HEADS=off ALPHA_FUSE_GATED=off"; do
echo "== $v"
env $v timeout 40 $A bench coppelius --device cuda --batch 1 --warmup 5 --steps 20 --baseline none 2>&1 | grep -v "^\[" | tail -2 | head -1
done
