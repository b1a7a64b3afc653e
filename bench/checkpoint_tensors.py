# SHA-256 over each safetensors file's tensors (names, dtypes, shapes, bytes), metadata left out:
# two builds whose checkpoints differ only in their metadata print the same digest (16 hex digits).
import hashlib, json, struct, sys
for path in sys.argv[1:]:
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    h = hashlib.sha256()
    for name in sorted(k for k in header if k != "__metadata__"):
        t = header[name]
        a, b = t["data_offsets"]
        h.update(name.encode() + t["dtype"].encode() + str(t["shape"]).encode())
        h.update(body[a:b])
    print(h.hexdigest()[:16], path)
