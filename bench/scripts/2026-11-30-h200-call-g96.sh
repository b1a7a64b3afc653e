# Call g96: TMA products let the next kernel launch as each block's products are done and its
# epilogue begins (ALPHA_PDL_TRIGGER=epilogue; the next kernel still waits for this one's
# memory in griddepcontrol.wait), so the next launch and its blocks' set-up overlap the last
# wave's epilogues. Both hashes with it (scheduling only: must stay 6271d3fb… and 8029d135…),
# the step alternating with the default (blocks exit), then the issue's bench with it.
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
export ALPHA_PDL_TRIGGER=epilogue
timeout 60 $A train coppelius --device cuda --data .gpu-bin/gut-bpe-small --steps 30 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d1 --quiet > /tmp/d1.txt 2>&1; echo "exit $?"; grep -o "sha256 [0-9a-f]*" /tmp/d1.txt
timeout 60 $A train coppelius --device cuda --batch 16 --data .gpu-bin/gut-bpe-small --steps 4 --heldout-windows 0 --sample-tokens 0 --run-dir /tmp/d3 --quiet > /tmp/d3.txt 2>&1; echo "exit $?"; grep -o "sha256 [0-9a-f]*" /tmp/d3.txt
unset ALPHA_PDL_TRIGGER
run() { local name=$1; shift
  env "$@" timeout 50 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline none > /tmp/bench-$name.txt 2>&1
  printf "%-12s %s\n" "$name" "$(grep -E "^ +(1|16) " /tmp/bench-$name.txt | awk '{printf "B=%s %s ms (%s launches)  ", $1, $2, $4}')"; }
echo "== step A/B"
for i in 1 2 3; do
  run exit$i A=1
  run epilogue$i ALPHA_PDL_TRIGGER=epilogue
done
echo "== the issue's bench (epilogue trigger)"
ALPHA_PDL_TRIGGER=epilogue timeout 300 $A bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats --baseline-arg=1 --baseline-arg=--deadline-s --baseline-arg=100 > $OUT/bench.txt 2>&1; echo "exit $?"
head -6 $OUT/bench.txt
