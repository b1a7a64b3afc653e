# The best add-k bigram table counted from the first N training tokens of a prepared bytes
# directory, scored on the held-out windows alpha score reads (evenly spread windows of
# context + 1 tokens), as alpha-run's baseline::bigram_optimum does for Bob, for any context.
# Usage: python3 bench/bigram_optimum.py DIR CONTEXT WINDOWS TRAINED_TOKENS
import glob, sys, numpy as np
d, ctx, nwin, trained = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def load(name):
    return np.fromfile(f"{d}/{name}", dtype="<u2", offset=64)
# Shards: a 64-byte header, then little-endian u16 ids.
shards = sorted(glob.glob(f"{d}/train-*.tok"))
train = np.concatenate([np.fromfile(f, dtype="<u2", offset=64) for f in shards])[:trained].astype(np.int64)
valid = load("valid-0000.tok").astype(np.int64)
counts = np.bincount(train[:-1] * 256 + train[1:], minlength=65536).reshape(256, 256).astype(np.float64)
L = ctx + 1
n = (len(valid) - 1) // (L - 1)
count = min(n, nwin)
ws = [valid[(i if count == n else i * n // count) * (L - 1):][:L] for i in range(count)]
a = np.concatenate([w[:-1] for w in ws]); b = np.concatenate([w[1:] for w in ws])
nbytes = int((b != 3).sum())  # the end-of-text id 3 decodes to no bytes
best = None
for k in [0.01, 0.03, 0.1, 0.3, 1.0]:
    p = (counts[a, b] + k) / (counts[a].sum(1) + 256 * k)
    bpb = -np.log(p).sum() / np.log(2) / nbytes
    if best is None or bpb < best[0]: best = (bpb, k)
print(f"bigram optimum {best[0]:.4f} bits/byte (add-{best[1]}), {count} windows of {L}, {nbytes} bytes, {len(train)} training tokens")
