# Call g81 (build ed1b0d3): (1) the next kernel launched as a kernel's blocks start
# (ALPHA_PDL_TRIGGER=start) or no dependent launches at all (ALPHA_PDL=off), against the
# default (launched as blocks exit), alternating; (2) PyTorch's compile+graph step at sixteen
# contexts, kernel by kernel (torch.profiler), to compare families with Alpha's profile.
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2; do
  run exit$i A=1
  run start$i ALPHA_PDL_TRIGGER=start
  run nopdl$i ALPHA_PDL=off
done
echo "== PyTorch B=16 compile+graph kernels"
timeout 300 python3 bench/scripts/torch_kernel_profile.py --batch 16 --settings compile+graph --graph-compile-mode default --warmup 5 --steps 20 > $OUT/torch-prof16.json 2> $OUT/torch-prof16.txt; echo "exit $?"
grep -v "^\[" $OUT/torch-prof16.txt | head -75
