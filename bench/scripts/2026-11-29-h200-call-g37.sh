# Call g37: profiles of dcfba54 (TMA GEMMs, casts launched, bf16 attention inputs).
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
for b in 1 16; do
  echo "== profile b$b"
  timeout 60 $A train coppelius --device cuda --batch $b --data .gpu-bin/gut-bpe-small --steps 6 --heldout-windows 0 --sample-tokens 0 --profile --run-dir /tmp/p$b --quiet 2>&1 | tail -1
  $A profile /tmp/p$b > $OUT/profile-b$b.txt 2>&1; cp /tmp/p$b/profile.jsonl $OUT/profile-b$b.jsonl; head -16 $OUT/profile-b$b.txt
done
