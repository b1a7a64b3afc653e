# A copy of a KickDelta checkpoint with the memory's writes turned off (the write strength's
# bias set to -40, so beta ~ 4e-18 and the memory stays at its learned prior M0), its digest
# recomputed as alpha-run's checkpoint.rs does, so `alpha score` loads it.
# Usage: python3 bench/kickdelta_no_writes.py IN.safetensors OUT.safetensors
import sys, json, struct, hashlib, numpy as np
src, dst = sys.argv[1], sys.argv[2]
raw = open(src, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
head = json.loads(raw[8:8 + n]); body = bytearray(raw[8 + n:])
meta = head.pop('__metadata__')
name = 'keys.write_strength.bias'
s, e = head[name]['data_offsets']
body[s:e] = np.array([-40.0], dtype='<f4').tobytes()
h = hashlib.sha256()
for k in sorted(head):
    t = head[k]; assert t['dtype'] == 'F32'
    h.update(struct.pack('<Q', len(k))); h.update(k.encode())
    for d in t['shape']: h.update(struct.pack('<Q', d))
    a, b = t['data_offsets']; h.update(bytes(body[a:b]))
td = h.digest()
h = hashlib.sha256()
for k in sorted(meta):
    if k == 'sha256': continue
    v = meta[k]; h.update(struct.pack('<Q', len(k.encode()))); h.update(k.encode()); h.update(struct.pack('<Q', len(v.encode()))); h.update(v.encode())
h.update(td)
meta['sha256'] = h.hexdigest()
head['__metadata__'] = meta
hb = json.dumps(head, separators=(',', ':')).encode()
hb += b' ' * ((8 - len(hb) % 8) % 8)
open(dst, 'wb').write(struct.pack('<Q', len(hb)) + hb + bytes(body))
