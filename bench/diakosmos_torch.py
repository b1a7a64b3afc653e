#!/usr/bin/env python3
"""An independent PyTorch Diakosmos (SYSTEMS.md §3), written from the equations and from the
choices `systems/diakosmos.rs` and `systems/diakosmos_wire.rs` make for the seed's unknowns,
sharing no code with Alpha.

Three jobs:

* agreement: `check` loads one of Alpha's safetensors checkpoints, computes the mean loss and the
  gradient of every parameter on given byte windows, and compares them with Alpha's own, which
  `crates/alpha-run/examples/diakosmos_reference.rs` writes for the same checkpoint and windows
  (relative loss difference, target <= 1e-3; each gradient's cosine, target >= 0.9999).
* learning equivalence: `train` starts from Alpha's checkpoint, trains on the same byte windows
  in the same order with the same learner (Muon on the output projections, rotational AdamW in
  REQ's form on W_qkv and the head, Adam on the rest; one schedule, one clip), and prints the
  held-out loss; with the example's `--updates` output it compares every update's loss and the
  parameters after the last.
* the speed baseline: `bench` times one whole training step (forward, backward, clip, the three
  optimizers, zero_grad) in coppelius_torch.py's four settings; `alpha bench diakosmos` runs it.

Every subcommand prints exactly one JSON object on its LAST line of stdout (progress goes to
stderr). Exit status 0 means that JSON is a result; on a failure the last line is
{"error": "..."} and the status is 1 (`check` also exits 1 when a target is missed).

The model, from SYSTEMS.md §3.2-3.4 with Alpha's choices for what the seed leaves open:

* the wire: a fixed [256, 1330] table built here from its definitions (Gray-coded QPSK phases
  of the four bit pairs, the three Hamming parities as sums of phases, Haar scales as sums and
  differences with partner g XOR 2^(s-1) (group 0 for the absent eighth), harmonic h = scale
  h mod 4 turned by (h div 4)·π/8; integer units of π/8, wrapped, then cos and sin
  interleaved); a byte's row is the stream's start. Nothing is learned in it.
* 14 blocks, each x_g <- x_g + σ(β_g)·T_g + (1 − σ(β_g))·P_g over the 7 groups of 190:
  T is the causal temporal path (LayerNorm, W_qkv, head j = the j-th 190-slice of q, k, v,
  harmonic scalars ⟨A_jl, q_j⟩ and ⟨B_jl, k_j⟩, the per-harmonic decaying recurrence
  S_t = γ·S_{t−1} + c·k̃_t·v_t with γ = σ(g_j + o_l) from zero in each window, the read
  y_j = Σ_l q̃_l·S_l, W_o); P is the spatial path (each group's unit vector, pairs (0,1), (2,3),
  (4,5) turned coordinate by coordinate by 0.3·θ counter-clockwise, group 6 unturned, times
  κ_g).
* the head: LN_f, then the 7 alignments of each group's unit vector with its running mean
  within the window and the 7 lengths of that mean, logits = W_head·f (no bias).

The recurrence is never the cumulative-sum shortcut (γ^−t overflows f32 past t·|ln γ| ≈ 83).
`--scan loop` steps it position by position; `--scan chunked` splits the window into chunks
and uses, inside a chunk, γ^(t−s) for s <= t and the carried state times γ^(t−t0+1): every
power has a non-negative exponent, so nothing overflows and it is the same sum in f32.
`--scan parallel` (the default) is that sum for all chunks at once: each chunk's summary, the
state entering every chunk as one product with a lower-triangular matrix of powers γ^(c·m),
m >= 0, and no Python loop, so torch.compile traces a few einsums a block instead of one group
a chunk (with `chunked`, 32 a block at 2,048, it did not finish compiling in 300 s). The three
large products (W_qkv, W_o, W_head) take bf16 operands with f32 sums as Alpha's do, and their
pullbacks take the incoming gradient rounded to bf16, as Alpha's pullback casts it to the
operands' type (`--precision fp32` turns all of it off).

The safetensors and token readers and the timing harness come from coppelius_torch.py beside
this file; nothing outside the standard library and PyTorch is needed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coppelius_torch as ct  # noqa: E402

torch, nn, F = ct.torch, ct.nn, ct.F
log = ct.log

GROUPS = 7
SCALES = 4
PAIRS = 3
VOCAB = 256
ANGLE_SCALE = 0.3
NORM_EPS = 1e-12


# ----------------------------------------------------------------------------------------------
# Configuration


@dataclass
class Config:
    blocks: int = 14
    phasors: int = 95
    harmonics: int = 8
    context: int = 2048
    vocab: int = VOCAB
    ln_eps: float = 1e-5

    @property
    def group_width(self) -> int:
        return 2 * self.phasors

    @property
    def width(self) -> int:
        return GROUPS * self.group_width

    @property
    def features(self) -> int:
        return self.width + 2 * GROUPS

    def parameter_count(self) -> int:
        w, d, h = self.width, self.group_width, self.harmonics
        per_block = (2 * w + 3 * w * w + 3 * w + 2 * GROUPS * h * d + GROUPS * h + GROUPS + h + w * w + w
                     + PAIRS * d + GROUPS + GROUPS)
        return self.blocks * per_block + 2 * w + VOCAB * self.features


# A smoke-test geometry (the size Alpha's own training test uses): seconds on a CPU.
TINY = dict(blocks=2, phasors=8, harmonics=4, context=64)


def config_from_args(args) -> Config:
    cfg = Config(**TINY) if getattr(args, "tiny", False) else Config()
    if getattr(args, "context", None):
        cfg.context = args.context
    return cfg


def config_from_shapes(shapes: dict, context: int, source: str) -> Config:
    """The geometry of a checkpoint's tensors: blocks counted, phasors from the stream's width,
    harmonics from `spectral_coeffs`. The context is not in them (nothing is positional)."""
    for name in ("ln_f.weight", "head.weight", "blocks.0.attn.spectral_coeffs"):
        if name not in shapes:
            raise ValueError(f"{source}: no tensor {name}; is this a Diakosmos checkpoint of Alpha's?")
    width = shapes["ln_f.weight"][0]
    if width % (2 * GROUPS):
        raise ValueError(f"{source}: a stream of {width} is not 7 groups of (cos, sin) pairs")
    blocks = 0
    while f"blocks.{blocks}.gate_logit" in shapes:
        blocks += 1
    harmonics = shapes["blocks.0.attn.spectral_coeffs"][1]
    return Config(blocks=blocks, phasors=width // (2 * GROUPS), harmonics=harmonics, context=context)


# ----------------------------------------------------------------------------------------------
# The wire (SYSTEMS.md §3.2; the open items as systems/diakosmos_wire.rs chooses them)


def wrap_units(u: int) -> int:
    """Units of π/8 wrapped to (−8, 8], the phase to (−π, π]."""
    m = u % 16
    return m - 16 if m > 8 else m


def base_phases(byte: int) -> list:
    """The 7 base phases in units of π/8: the bit pairs (7–6, 5–4, 3–2, 1–0) on Gray-coded QPSK,
    φ(k) = π/4 + k·π/2, then the Hamming parities p0 = a+c+d, p1 = a+b+d, p2 = b+c+d."""
    a, b, c, d = (wrap_units(2 + 4 * ((byte >> s) & 3)) for s in (6, 4, 2, 0))
    return [a, b, c, d, wrap_units(a + c + d), wrap_units(a + b + d), wrap_units(b + c + d)]


def haar_partner(group: int, scale: int) -> int:
    p = group ^ (1 << (scale - 1))
    return 0 if p >= GROUPS else p


def group_phases(byte: int) -> list:
    """[group][scale]: the base phase, then H1–H3: with partner p, the sum θ_g + θ_p when g is
    the pair's lower group, θ_p − θ_g (lower minus upper) when it is the upper."""
    base = base_phases(byte)
    out = []
    for g in range(GROUPS):
        row = [base[g]]
        for s in range(1, SCALES):
            p = haar_partner(g, s)
            row.append(wrap_units(base[g] + base[p]) if g < p else wrap_units(base[p] - base[g]))
        out.append(row)
    return out


def wire_table(phasors: int):
    """[256, 7·2·phasors] f32: harmonic h of group g is scale h mod 4 turned by (h div 4)·π/8,
    at columns g·2P + 2h (cos) and + 1 (sin); cos and sin of the wrapped phase in binary64."""
    rows = []
    for byte in range(256):
        row = []
        for phases in group_phases(byte):
            for h in range(phasors):
                rad = wrap_units(phases[h % SCALES] + h // SCALES) * math.pi / 8
                row += [math.cos(rad), math.sin(rad)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64).float()


# ----------------------------------------------------------------------------------------------
# The model

if torch is not None:
    _MM_OUT_DTYPE = None

    def probe_out_dtype(device) -> bool:
        """Whether this PyTorch's mm and bmm take out_dtype (bf16 operands, an f32 result) on
        `device`; asked once, eagerly, so no compiled or captured step ever asks."""
        global _MM_OUT_DTYPE
        if _MM_OUT_DTYPE is None:
            try:
                a = torch.ones(1, 1, 1, dtype=torch.bfloat16, device=device)
                torch.mm(a[0], a[0], out_dtype=torch.float32)
                torch.bmm(a, a, out_dtype=torch.float32)
                _MM_OUT_DTYPE = True
            except (TypeError, RuntimeError):
                _MM_OUT_DTYPE = False
        return _MM_OUT_DTYPE

    def _mm16(a16, b16):
        """a·b of bf16 operands (matrices, or stacks of them) with f32 sums and an f32 result. On
        a CPU, bf16 values multiplied in f32 are exact products summed in f32; on CUDA, mm's and
        bmm's out_dtype where PyTorch has it, else a bf16 result widened."""
        if not a16.is_cuda:
            return torch.matmul(a16.float(), b16.float())
        mm = torch.mm if a16.dim() == 2 else torch.bmm
        if probe_out_dtype(a16.device):
            return mm(a16, b16, out_dtype=torch.float32)
        return mm(a16, b16).float()

    class Bf16Product(torch.autograd.Function):
        """x·Wᵀ with both operands rounded to bf16 and f32 sums; the pullback rounds the incoming
        gradient to bf16 and takes the same rounded operands (as Alpha's pullback of a bf16
        product casts dy to the operands' type)."""

        @staticmethod
        def forward(ctx, x, w):
            x16, w16 = x.to(torch.bfloat16), w.to(torch.bfloat16)
            ctx.save_for_backward(x16, w16)
            return _mm16(x16, w16.t())

        @staticmethod
        def backward(ctx, dy):
            x16, w16 = ctx.saved_tensors
            d16 = dy.to(torch.bfloat16)
            return _mm16(d16, w16), _mm16(d16.t(), x16)

    def product(x, w, bf16: bool):
        """x [..., in] times W [out, in] transposed (W stored as PyTorch's nn.Linear stores it)."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])
        y = Bf16Product.apply(x2, w) if bf16 else x2 @ w.t()
        return y.reshape(*lead, w.shape[0])

    def unit(x):
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + NORM_EPS)

    def scan_loop(r, w, v, log_gamma):
        """The recurrence stepped position by position: S_t = γ·S_{t−1} + w_t·v_t from S = 0,
        y_t = Σ_l r_{t,l}·S_{t,l}. r, w [B, T, H, L]; v [B, T, H, D]; log_gamma [H, L]."""
        b, t, h, l = r.shape
        gamma = log_gamma.exp()[None, :, :, None]
        s = v.new_zeros(b, h, l, v.shape[-1])
        ys = []
        for i in range(t):
            s = gamma * s + w[:, i, :, :, None] * v[:, i, :, None, :]
            ys.append((r[:, i, :, :, None] * s).sum(2))
        return torch.stack(ys, 1)

    def scan_chunked(r, w, v, log_gamma, chunk: int = 64):
        """The same recurrence a chunk at a time. Inside a chunk starting at t0, position t reads
        Σ_{t0<=s<=t} γ^(t−s)·w_s·v_s plus γ^(t−t0+1)·S_{t0−1}, and the state carried out is
        γ^c·S_{t0−1} + Σ_s γ^(c−1−(s−t0))·w_s·v_s: every power has a non-negative exponent
        (at most the chunk), so no factor grows and f32 holds it as it holds the loop."""
        b, t, h, l = r.shape
        s = v.new_zeros(b, h, l, v.shape[-1])
        lg = log_gamma[:, :, None]
        ys = []
        for t0 in range(0, t, chunk):
            c = min(chunk, t - t0)
            rc, wc, vc = r[:, t0:t0 + c], w[:, t0:t0 + c], v[:, t0:t0 + c]
            k = torch.arange(c, device=r.device, dtype=r.dtype)
            lag = k[:, None] - k[None, :]
            within = torch.exp(lg[..., None] * lag.clamp(min=0)) * (lag >= 0)  # [H, L, c, c]
            mix = torch.einsum("bthl,bshl,hlts->bhts", rc, wc, within)
            y = torch.einsum("bhts,bshd->bthd", mix, vc)
            carried = torch.exp(lg * (k + 1))  # [H, L, c]
            y = y + torch.einsum("bthl,hlt,bhld->bthd", rc, carried, s)
            ahead = torch.exp(lg * (c - 1 - k))
            s = torch.exp(log_gamma * c)[None, :, :, None] * s + torch.einsum("bshl,hls,bshd->bhld", wc, ahead, vc)
            ys.append(y)
        return torch.cat(ys, 1)

    def _powers(lg, steps):
        """γ^steps as exp(ln γ · steps) where steps >= 0, and 0 where steps < 0. The exponent is
        clamped before exp, not only masked after: exp of a negative one can overflow to inf, and
        though torch.where hands that branch a zero gradient, exp's pullback multiplies it by the
        inf, a NaN in ln γ's gradient."""
        p = torch.exp(lg * steps.clamp(min=0))
        return torch.where(steps >= 0, p, torch.zeros_like(p))

    def scan_parallel(r, w, v, log_gamma, chunk: int = 64):
        """The same recurrence with no Python loop over positions or chunks, so torch.compile
        traces a handful of einsums per block rather than a group a chunk (scan_chunked's 32 a
        block at T = 2048 never finished compiling). The window, zero-padded at its end to nC
        chunks of c (padded w writes nothing and padded r reads nothing; y is cut back to T), is
        laid out [B, nC, c, ·] and, for every chunk at once:
        * inside the chunk, y_t = Σ_{s<=t} r_t·γ^(t−s)·w_s·v_s, as scan_chunked;
        * its summary U_j = Σ_s γ^(c−1−s)·w_s·v_s, what chunk j adds to the state at its end;
        * the state entering chunk k, S_k = Σ_{j<k} γ^(c·(k−1−j))·U_j, one product with a
          lower-triangular [H, L, nC, nC] matrix of powers;
        * y_t += r_t·γ^(t−t0+1)·S_k.
        Every exponent is non-negative (at most the window), so nothing overflows; a power that
        underflows to 0 is a state that has decayed away, as it does in the loop."""
        b, t, h, l = r.shape
        d = v.shape[-1]
        c = min(chunk, t)
        n = -(-t // c)
        pad = n * c - t
        if pad:
            r, w, v = (F.pad(z, (0, 0, 0, 0, 0, pad)) for z in (r, w, v))
        rc, wc, vc = r.reshape(b, n, c, h, l), w.reshape(b, n, c, h, l), v.reshape(b, n, c, h, d)
        lg = log_gamma[:, :, None]
        k = torch.arange(c, device=r.device, dtype=r.dtype)
        within = _powers(lg[..., None], k[:, None] - k[None, :])  # [H, L, c, c]
        mix = torch.einsum("bnthl,bnshl,hlts->bnhts", rc, wc, within)
        y = torch.einsum("bnhts,bnshd->bnthd", mix, vc)
        summary = torch.einsum("bnshl,hls,bnshd->bnhld", wc, torch.exp(lg * (c - 1 - k)), vc)
        j = torch.arange(n, device=r.device, dtype=r.dtype)
        across = _powers(lg[..., None], c * (j[:, None] - 1 - j[None, :]))  # [H, L, nC, nC]
        entering = torch.einsum("hlkj,bjhld->bkhld", across, summary)
        y = y + torch.einsum("bnthl,hlt,bnhld->bnthd", rc, torch.exp(lg * (k + 1)), entering)
        return y.reshape(b, n * c, h, d)[:, :t]

    class Holder(nn.Module):
        """Holds parameters under the names given, so module paths are Alpha's parameter paths."""

        def __init__(self, **shapes):
            super().__init__()
            for name, shape in shapes.items():
                setattr(self, name, nn.Parameter(torch.empty(*shape)))

    class Attn(nn.Module):
        def __init__(self, cfg: Config):
            super().__init__()
            w, d, l = cfg.width, cfg.group_width, cfg.harmonics
            self.qkv_proj = Holder(weight=(3 * w, w), bias=(3 * w,))
            self.q_harmonic_weight = nn.Parameter(torch.empty(GROUPS, l, d))
            self.k_harmonic_weight = nn.Parameter(torch.empty(GROUPS, l, d))
            self.spectral_coeffs = nn.Parameter(torch.empty(GROUPS, l))
            self._gate_logit = nn.Parameter(torch.empty(GROUPS))
            self._harmonic_decay_offset = nn.Parameter(torch.empty(l))
            self.out_proj = Holder(weight=(w, w), bias=(w,))

    class Block(nn.Module):
        def __init__(self, cfg: Config, bf16: bool, scan: str = "parallel", chunk: int = 64):
            super().__init__()
            self.cfg, self.bf16, self.scan, self.chunk = cfg, bf16, scan, chunk
            w, d = cfg.width, cfg.group_width
            self.temporal = nn.Module()
            self.temporal.ln = Holder(weight=(w,), bias=(w,))
            self.attn = Attn(cfg)
            self.spatial = Holder(theta=(PAIRS, d), coupling=(GROUPS,))
            self.gate_logit = nn.Parameter(torch.empty(GROUPS))

        def temporal_path(self, x):
            cfg, a = self.cfg, self.attn
            b, t, w = x.shape
            d = cfg.group_width
            h = F.layer_norm(x, (w,), self.temporal.ln.weight, self.temporal.ln.bias, cfg.ln_eps)
            qkv = product(h, a.qkv_proj.weight, self.bf16) + a.qkv_proj.bias
            q, k, v = (z.reshape(b, t, GROUPS, d) for z in qkv.split(w, -1))
            read = torch.einsum("bthd,hld->bthl", q, a.q_harmonic_weight)
            write = torch.einsum("bthd,hld->bthl", k, a.k_harmonic_weight) * a.spectral_coeffs
            log_gamma = F.logsigmoid(a._gate_logit[:, None] + a._harmonic_decay_offset[None, :])
            if self.scan == "loop":
                y = scan_loop(read, write, v, log_gamma)
            elif self.scan == "chunked":
                y = scan_chunked(read, write, v, log_gamma, self.chunk)
            else:
                y = scan_parallel(read, write, v, log_gamma, self.chunk)
            return product(y.reshape(b, t, w), a.out_proj.weight, self.bf16) + a.out_proj.bias

        def spatial_path(self, groups):
            u = unit(groups)  # [B, T, 7, D]
            first, second = u[:, :, 0:2 * PAIRS:2], u[:, :, 1:2 * PAIRS:2]
            angle = ANGLE_SCALE * self.spatial.theta
            cos, sin = torch.cos(angle), torch.sin(angle)
            turned = torch.stack((first * cos - second * sin, first * sin + second * cos), 3)
            turned = turned.reshape(*u.shape[:2], 2 * PAIRS, u.shape[-1])
            return torch.cat((turned, u[:, :, 2 * PAIRS:]), 2) * self.spatial.coupling[:, None]

        def forward(self, x):
            b, t, w = x.shape
            groups = x.reshape(b, t, GROUPS, self.cfg.group_width)
            tp = self.temporal_path(x).reshape(groups.shape)
            sp = self.spatial_path(groups)
            share = torch.sigmoid(self.gate_logit)[:, None]
            return (groups + share * tp + (1 - share) * sp).reshape(b, t, w)

    class Head(nn.Module):
        """LN_f's output, each group's alignment with its running mean and that mean's length,
        the logits (no bias) and the cross-entropy (per position if asked)."""

        def __init__(self, cfg: Config, bf16: bool):
            super().__init__()
            self.cfg, self.bf16 = cfg, bf16
            self.weight = nn.Parameter(torch.empty(VOCAB, cfg.features))

        def forward(self, z, targets, reduction: str = "mean"):
            b, t, w = z.shape
            u = unit(z.reshape(b, t, GROUPS, self.cfg.group_width))
            seen = torch.arange(1, t + 1, device=z.device, dtype=z.dtype)[None, :, None, None]
            mean = u.cumsum(1) / seen  # a running mean of vectors of length 1: no growth
            align = (u * mean).sum(-1)
            length = torch.sqrt((mean * mean).sum(-1) + NORM_EPS)
            f = torch.cat((z, align, length), -1)
            logits = product(f, self.weight, self.bf16)
            return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), reduction=reduction)

    class Diakosmos(nn.Module):
        def __init__(self, cfg: Config, bf16: bool = True, scan: str = "parallel", chunk: int = 64):
            super().__init__()
            self.cfg = cfg
            self.register_buffer("wire", wire_table(cfg.phasors), persistent=False)
            self.blocks = nn.ModuleList(Block(cfg, bf16, scan, chunk) for _ in range(cfg.blocks))
            self.ln_f = Holder(weight=(cfg.width,), bias=(cfg.width,))
            self.head = Head(cfg, bf16)

        def forward(self, tokens, targets, reduction: str = "mean"):
            x = self.wire[tokens]
            for blk in self.blocks:
                x = blk(x)
            z = F.layer_norm(x, (self.cfg.width,), self.ln_f.weight, self.ln_f.bias, self.cfg.ln_eps)
            return self.head(z, targets, reduction)

    def init_tensors(cfg: Config, seed: int) -> dict:
        """Alpha's initializer in distribution, by Alpha's names: LayerNorm 1 and 0; linear
        weights and biases U(±1/√fan_in); A, B U(±1/√190); c = 1/(1+l); g = 3; o = 0 … −1;
        θ = 0; κ = 0.5; β = 0."""
        g = torch.Generator().manual_seed(seed)
        l = cfg.harmonics

        def uniform(shape, fan_in):
            return (torch.rand(shape, generator=g) * 2 - 1) / math.sqrt(fan_in)

        out = {}
        for name, p in Diakosmos(cfg).named_parameters():
            shape, last = tuple(p.shape), name.rsplit(".", 1)[-1]
            if ".ln." in name or name.startswith("ln_f."):
                out[name] = torch.ones(shape) if last == "weight" else torch.zeros(shape)
            elif "_proj." in name:
                out[name] = uniform(shape, cfg.width)
            elif name == "head.weight":
                out[name] = uniform(shape, cfg.features)
            elif last.endswith("harmonic_weight"):
                out[name] = uniform(shape, cfg.group_width)
            elif last == "spectral_coeffs":
                out[name] = (1.0 / (1 + torch.arange(l, dtype=torch.float64))).float().repeat(GROUPS, 1)
            elif last == "_gate_logit":
                out[name] = torch.full(shape, 3.0)
            elif last == "_harmonic_decay_offset":
                out[name] = torch.linspace(0, -1, l) if l > 1 else torch.zeros(shape)
            elif last == "coupling":
                out[name] = torch.full(shape, 0.5)
            else:  # θ and the gates
                out[name] = torch.zeros(shape)
        return out


# ----------------------------------------------------------------------------------------------
# The learner (Diakosmos::learner: three optimizers by role, one schedule, one clip)

WARMUP = 200
FLOOR = 0.1
CLIP = 1.0
BETAS = (0.9, 0.999)
EPS = 1e-8
MUON_MOMENTUM, MUON_EPS, NS = 0.95, 1e-7, (3.4445, -4.7750, 2.0315)
ROT_DECAY, ROT_RHO, ROT_EPS = 0.01, 0.9, 1e-8
PEAKS = {"rotational": 3e-3, "muon": 2e-3, "adam": 3e-3}


def role(name: str) -> str:
    if name.endswith("attn.qkv_proj.weight") or name == "head.weight":
        return "rotational"
    if name.endswith("attn.out_proj.weight"):
        return "muon"
    return "adam"


def schedule(steps: int) -> tuple:
    """(warm-up, horizon) of a run of `steps` updates: the seed's 200, or a tenth of a short run
    plus one, so it still reaches its peak; the horizon at least one past the warm-up. The
    seed's horizon was 15,259 in a run of 15,360 (SYSTEMS.md §3.6): pass `--total 15259`, as
    `alpha train --schedule-steps 15259`, for that."""
    warmup = min(WARMUP, steps // 10 + 1)
    return warmup, max(steps, warmup + 1)


def lr_at(step: int, steps: int, peak: float) -> float:
    """Update `step` (from 1): linear warm-up (update `warmup` at the peak), cosine to a tenth
    of the peak at the horizon, a tenth after; in binary64."""
    warmup, total = schedule(steps)
    low = peak * FLOOR
    if step < warmup:
        return peak * step / warmup
    if step >= total:
        return low
    progress = (step - warmup) / max(total - warmup, 1)
    return low + 0.5 * (peak - low) * (1.0 + math.cos(math.pi * progress))


if torch is not None:

    def newton_schulz(u):
        """Per matrix of a stack [k, r, c] (r <= c): X0 = U/(|U|_F + ε), then five
        X <- aX + (bA + cA²)X with A = XXᵀ, every product's operands rounded to bf16 and summed
        in f32 (X itself stays f32); the stack goes through each product at once, as Alpha's."""
        a, b, c = NS
        x = u / (u.square().sum((1, 2), keepdim=True).sqrt() + MUON_EPS)
        for _ in range(5):
            xb = x.to(torch.bfloat16)
            gram = _mm16(xb, xb.transpose(1, 2))
            gb = gram.to(torch.bfloat16)
            poly = b * gram + c * _mm16(gb, gb)
            x = a * x + _mm16(poly.to(torch.bfloat16), xb)
        return x

    class Learner:
        """Muon (μ 0.95 Nesterov, ε 1e-7, shape factor √max(1, out/in)), rotational AdamW per
        output row in REQ's form (β 0.9/0.999, ε 1e-8, λ 0.01, ρ 0.9, ε_rot 1e-8; a row whose
        stored norm is 0 is centred and given back its norm at its first update), Adam (β
        0.9/0.999, ε 1e-8). `step()` reads the clipped `.grad`s. The update count and the rates
        are host numbers, or device tensors when `graph_safe` (a captured CUDA graph then
        counts the updates itself).

        The rotational rows are centred where Alpha centres them, inside the first update, so
        the first gradient is taken at the uncentred rows; REQ (SYSTEMS.md §3.5) centres them
        when the optimizer is built, before any gradient. The two differ at update 1 only."""

        def __init__(self, model, steps: int, device, graph_safe: bool = False, state: dict | None = None,
                     start: int = 0):
            self.steps = steps
            self.graph_safe = graph_safe
            self.named = [(n, p) for n, p in model.named_parameters()]
            self.param_groups = []
            for r in ("rotational", "muon", "adam"):
                lr = torch.tensor(PEAKS[r], device=device) if graph_safe else PEAKS[r]
                params = [(n, p) for n, p in self.named if role(n) == r]
                self.param_groups.append({"role": r, "peak": PEAKS[r], "lr": lr, "params": params})
            state = state or {}

            def kept(key, like):
                t = state.get(key)
                return t.to(device).clone() if t is not None else torch.zeros_like(like)

            self.state = {}
            for n, p in self.named:
                r = role(n)
                if r in ("rotational", "adam"):
                    self.state[n + ".adam_m"] = kept(n + ".adam_m", p)
                    self.state[n + ".adam_v"] = kept(n + ".adam_v", p)
                if r == "rotational":
                    rows = torch.zeros(p.shape[0], device=device)
                    self.state[n + ".rot_norm0"] = kept(n + ".rot_norm0", rows)
                    self.state[n + ".rot_ms"] = kept(n + ".rot_ms", rows)
                if r == "muon":
                    self.state[n + ".muon_momentum"] = kept(n + ".muon_momentum", p)
            self.t = start
            self.t_dev = torch.tensor(float(start), device=device) if graph_safe else None

        def set_step_rates(self, step: int):
            """Every group's rate for update `step` of the run's schedule."""
            for g in self.param_groups:
                lr = lr_at(step, self.steps, g["peak"])
                if torch.is_tensor(g["lr"]):
                    g["lr"].fill_(lr)
                else:
                    g["lr"] = lr

        def zero_grad(self, set_to_none: bool = True):
            for _, p in self.named:
                p.grad = None

        def _counts(self):
            if self.graph_safe:
                self.t_dev += 1
                t = self.t_dev
                return 1 - BETAS[0] ** t, 1 - BETAS[1] ** t, 1 - ROT_RHO ** t
            self.t += 1
            t = self.t
            return 1 - BETAS[0] ** t, 1 - BETAS[1] ** t, 1 - ROT_RHO ** t

        @torch.no_grad()
        def step(self):
            bc1, bc2, bcs = self._counts()
            b1, b2 = BETAS
            for g in self.param_groups:
                lr = g["lr"]
                if g["role"] == "muon":
                    self.muon_step(g["params"], lr)
                    continue
                for n, p in g["params"]:
                    grad = p.grad
                    m, v = self.state[n + ".adam_m"], self.state[n + ".adam_v"]
                    m.copy_(b1 * m + (1 - b1) * grad)
                    v.copy_(b2 * v + (1 - b2) * grad * grad)
                    d = (m / bc1) / ((v / bc2).sqrt() + EPS)
                    if g["role"] == "adam":
                        p.sub_(lr * d)
                        continue
                    n0, ms = self.state[n + ".rot_norm0"], self.state[n + ".rot_ms"]
                    fresh = (n0 <= 0)[:, None]
                    norm_now = p.norm(dim=1, keepdim=True)
                    centred = p - p.mean(1, keepdim=True)
                    w = torch.where(fresh, centred * (norm_now / centred.norm(dim=1, keepdim=True)), p)
                    nr = torch.where(fresh, norm_now, n0[:, None])
                    d = d - d.mean(1, keepdim=True)
                    d = d - w * ((d * w).sum(1, keepdim=True) / (nr * nr))
                    ms2 = (1 - ROT_RHO) * (d * d).sum(1, keepdim=True) + ROT_RHO * ms[:, None]
                    rms = (ms2 / bcs).sqrt()
                    angle = torch.sqrt(2 * lr * ROT_DECAY * (1 - b1) / (1 + b1)) if torch.is_tensor(lr) else \
                        math.sqrt(2 * lr * ROT_DECAY * (1 - b1) / (1 + b1))
                    w1 = w - d * (angle * nr / (rms + ROT_EPS))
                    p.copy_(w1 * (nr / w1.norm(dim=1, keepdim=True)))
                    n0.copy_(nr[:, 0])
                    ms.copy_(ms2[:, 0])

        def muon_step(self, params, lr):
            """Momentum and the Nesterov direction per matrix (B <- μB + G, U = G + μB), each
            oriented so its smaller side is the rows; matrices of one oriented shape
            orthogonalised as one stack; W <- W − lr·√max(1, out/in)·X."""
            oriented = []
            for n, p in params:
                buf = self.state[n + ".muon_momentum"]
                buf.copy_(MUON_MOMENTUM * buf + p.grad)
                u = p.grad + MUON_MOMENTUM * buf
                tall = u.shape[0] > u.shape[1]
                oriented.append((p, u.t() if tall else u, tall))
            for shape in dict.fromkeys(tuple(u.shape) for _, u, _ in oriented):
                members = [(p, u, tall) for p, u, tall in oriented if tuple(u.shape) == shape]
                xs = newton_schulz(torch.stack([u for _, u, _ in members]))
                for (p, _, tall), x in zip(members, xs):
                    x = x.t() if tall else x
                    p.sub_(x * (lr * math.sqrt(max(1.0, p.shape[0] / p.shape[1]))))

    def make_learner(steps: int):
        """`bench_setting`'s optimizer hook: the learner, a schedule of `steps`."""
        return lambda model, device, graph_safe=False: Learner(model, steps, device, graph_safe)


# ----------------------------------------------------------------------------------------------
# Checkpoints and bytes


def load_checkpoint_model(path: str, context: int, device, bf16: bool, scan: str, chunk: int):
    """The model of an Alpha checkpoint, its geometry from the tensors; also the optimizer state
    the checkpoint holds and its metadata."""
    header, meta, _ = ct.read_safetensors_header(path)
    if meta.get("system", "diakosmos") != "diakosmos":
        raise ValueError(f"{path}: a checkpoint of Alpha's {meta['system']}, not of diakosmos")
    cfg = config_from_shapes({k: v["shape"] for k, v in header.items()}, context, path)
    tensors, _ = ct.load_safetensors(path, skip_suffixes=())
    model = Diakosmos(cfg, bf16=bf16, scan=scan, chunk=chunk)
    ct.load_into(model, tensors, path, rename=lambda n: n)  # module paths are Alpha's names
    params = {n for n, _ in model.named_parameters()}
    state = {k: v for k, v in tensors.items() if k not in params}
    return model.to(device), cfg, state, meta


class Bytes:
    """A split of a prepared byte directory (Alpha's token shards, vocabulary 256), or a raw
    file's bytes, read as one sequence."""

    def __init__(self, data: str, split: str):
        if os.path.isfile(os.path.join(data, "manifest.json")):
            self.split = ct.TokenSplit(data, split)
            if self.split.vocab != VOCAB:
                raise ValueError(f"{data}: vocabulary {self.split.vocab}; Diakosmos reads bytes (256)")
            self.raw = None
        else:
            with open(data, "rb") as f:
                self.raw = f.read()
            self.split = None

    @property
    def total(self) -> int:
        return len(self.raw) if self.raw is not None else self.split.total

    def read_at(self, start: int, n: int) -> list:
        if self.raw is not None:
            if start + n > len(self.raw):
                raise ValueError("read past the end of the file")
            return list(self.raw[start:start + n])
        return self.split.read_at(start, n)

    def windows(self, first: int, count: int, context: int) -> list:
        """`count` windows of context + 1 bytes, window i from byte (first + i)·context."""
        return [self.read_at((first + i) * context, context + 1) for i in range(count)]


def cosine(a, b) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    na, nb = a.norm().item(), b.norm().item()
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return (a @ b).item() / (na * nb)

def gradients_against_alpha(model, ws, alpha: dict, name_width: int) -> dict:
    """The loss and every parameter's gradient of `model` on the windows `ws` [N, T + 1], and,
    where `alpha` holds Alpha's (`loss`, `grad:<name>`: the reference examples' file), each
    gradient's cosine with Alpha's, printed as a table, and whether the loss (relative) and the
    lowest cosine meet LOSS_TARGET and COSINE_TARGET: the result fields `check` reports."""
    t0 = time.perf_counter()
    loss = model(ws[:, :-1], ws[:, 1:])
    loss.backward()
    secs = time.perf_counter() - t0
    log(f"forward and backward: {secs:.1f} s, loss {loss.item():.6f}")
    rows, worst = [], (2.0, None)
    for name, p in model.named_parameters():
        row = {"name": name, "norm": p.grad.double().norm().item()}
        if f"grad:{name}" in alpha:
            a = alpha[f"grad:{name}"]
            row["cosine"] = cosine(p.grad.cpu(), a)
            row["alpha_norm"] = a.double().norm().item()
            if row["cosine"] < worst[0]:
                worst = (row["cosine"], name)
        rows.append(row)
    result = {"loss": loss.item(), "seconds": secs}
    if alpha:
        al = alpha["loss"].item()
        rel = abs(loss.item() - al) / abs(al)
        passed = rel <= LOSS_TARGET and worst[0] >= COSINE_TARGET
        print(f"{'parameter':{name_width}} {'cosine':>12} {'|g| torch':>12} {'|g| alpha':>12}")
        for r in rows:
            print(f"{r['name']:{name_width}} {r['cosine']:12.8f} {r['norm']:12.5e} {r['alpha_norm']:12.5e}")
        print(f"loss: torch {loss.item():.7f}, Alpha {al:.7f}, relative difference {rel:.3e} (target <= {LOSS_TARGET})")
        print(f"lowest gradient cosine {worst[0]:.8f} ({worst[1]}) (target >= {COSINE_TARGET}); "
              f"{'both targets met' if passed else 'A TARGET IS MISSED'}")
        result.update(alpha_loss=al, loss_relative_difference=rel, lowest_cosine=worst[0],
                      lowest_cosine_tensor=worst[1], cosines={r["name"]: r["cosine"] for r in rows}, passed=passed)
    return result



# ----------------------------------------------------------------------------------------------
# Subcommands

LOSS_TARGET = 1e-3
COSINE_TARGET = 0.9999


def cmd_check(args) -> dict:
    device = ct.pick_device(args.device, "auto")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    alpha, ameta = ({}, {})
    if args.alpha:
        alpha, ameta = ct.load_safetensors(args.alpha, skip_suffixes=())
    context = args.context or int(ameta.get("context", 2048))
    split = args.split or ameta.get("split", "valid")
    first = args.first if args.first is not None else int(ameta.get("first", 0))
    count = args.windows or (alpha["windows"].shape[0] if "windows" in alpha else 1)
    if args.precision is None:
        args.precision = "fp32" if ameta.get("products") == "f32" else "bf16"
    bf16 = args.precision == "bf16"
    if ameta and (ameta.get("products", "").startswith("bf16") != bf16):
        log(f"note: Alpha's products were {ameta.get('products')}; these are {args.precision}")
    model, cfg, _, _ = load_checkpoint_model(args.init, context, device, bf16, args.scan, args.chunk)
    log(f"model: {asdict(cfg)}, {sum(p.numel() for p in model.parameters()):,} parameters, {device}, "
        f"{args.precision}, scan {args.scan}")
    ws = Bytes(args.data, split).windows(first, count, context)
    ws = torch.tensor(ws, dtype=torch.long)
    if "windows" in alpha and not torch.equal(alpha["windows"].long(), ws):
        raise ValueError(f"the windows read from {args.data} are not the ones Alpha's {args.alpha} holds")
    ws = ws.to(device)
    result = {"init": args.init, "config": asdict(cfg), "windows": count, "first": first, "split": split,
              "precision": args.precision, "scan": args.scan, "device": str(device)}
    result.update(gradients_against_alpha(model, ws, alpha, 44))
    return result


def heldout(model, cfg: Config, data: str, windows: int, device, batch: int) -> dict:
    """Alpha's held-out windows (coppelius_torch's reader): mean loss and bits per byte."""
    s = ct.heldout_loss(model, ct.TokenSplit(data, "valid"), cfg, windows, device, batch)
    return {**s, "bits_per_byte": s["loss"] / math.log(2)}


def cmd_train(args) -> dict:
    device = ct.pick_device(args.device, "auto")
    bf16 = args.precision == "bf16"
    model, cfg, state, meta = load_checkpoint_model(args.init, args.context, device, bf16, args.scan, args.chunk)
    step0 = int(meta.get("step", 0) or 0)
    log(f"model: {asdict(cfg)}, {sum(p.numel() for p in model.parameters()):,} parameters, {device}, "
        f"{args.precision}; from update {step0}")
    raw = meta.get("cursor") or '{"position": 0, "epoch": 0}'
    cursor = json.loads(raw)
    stream = ct.TrainStream(ct.TokenSplit(args.data, "train"), int(cursor["position"]), int(cursor["epoch"]))
    total = args.total or args.updates
    opt = Learner(model, total, device, state=state, start=step0)
    params = [p for _, p in model.named_parameters()]
    t_len, b, a = cfg.context, args.batch, args.accumulate
    losses = []
    out = open(args.out, "w") if args.out else None
    t0 = time.perf_counter()
    for step in range(step0 + 1, step0 + args.updates + 1):
        opt.set_step_rates(step)
        # The mean gradient of `a` micro-batches, each micro-batch's gradient taken of its own
        # mean loss and then scaled by 1/a, as Alpha accumulates: scaling the loss before the
        # backward pass instead would move every bf16 rounding of the gradient in the products.
        loss_sum, acc = 0.0, None
        for _ in range(a):
            ws = torch.tensor([stream.next_window(t_len + 1) for _ in range(b)], dtype=torch.long, device=device)
            loss = model(ws[:, :-1], ws[:, 1:])
            loss.backward()
            loss_sum += loss.item()
            if a > 1:
                scaled = [p.grad * (1.0 / a) for p in params]
                acc = scaled if acc is None else [x + y for x, y in zip(acc, scaled)]
                opt.zero_grad()
        if a > 1:
            for p, g in zip(params, acc):
                p.grad = g
        norm = ct.clip_(params, CLIP).item()
        opt.step()
        opt.zero_grad()
        loss = loss_sum / a
        if not math.isfinite(loss):
            raise RuntimeError(f"loss became non-finite ({loss}) at update {step}")
        losses.append(loss)
        row = {"step": step, "loss": loss, "grad_norm": norm,
               "lr": {g["role"]: lr_at(step, total, g["peak"]) for g in opt.param_groups}}
        if out:
            out.write(json.dumps(row) + "\n")
        log(f"update {step}: loss {loss:.4f}, |g| {norm:.4f}")
    wall = time.perf_counter() - t0
    result = {"init": args.init, "updates": args.updates, "batch": b, "accumulate": a, "total": total,
              "warmup": schedule(total)[0], "first_loss": losses[0], "last_loss": losses[-1],
              "cursor": {"position": stream.position, "epoch": stream.epoch},
              "s_per_update": wall / args.updates, "device": str(device), "precision": args.precision}
    if args.heldout_windows:
        h = heldout(model, cfg, args.data, args.heldout_windows, device, args.eval_batch)
        log(f"held-out: {h['loss']:.4f} nats, {h['bits_per_byte']:.4f} bits per byte over {h['windows']} windows")
        result.update(heldout_loss=h["loss"], heldout_bits_per_byte=h["bits_per_byte"], heldout_windows=h["windows"])
        if out:
            out.write(json.dumps({"step": step0 + args.updates, "heldout_loss": h["loss"]}) + "\n")
    if out:
        out.close()
    if args.alpha:
        alpha, ameta = ct.load_safetensors(args.alpha, skip_suffixes=())
        ours = torch.tensor(losses, dtype=torch.float64)
        theirs = alpha["train_loss"].double()
        if theirs.numel() != ours.numel():
            raise ValueError(f"{args.alpha} holds {theirs.numel()} updates; this run made {ours.numel()}")
        rel = ((ours - theirs).abs() / theirs.abs()).max().item()
        start, _ = ct.load_safetensors(args.init)
        worst, cosines = (2.0, None, 0, 0), {}
        for n, p in model.named_parameters():
            ours_d, theirs_d = p.detach().cpu() - start[n], alpha[f"after:{n}"] - start[n]
            cosines[n] = c = cosine(ours_d, theirs_d)
            if c < worst[0]:
                # Adam's first steps are nearly lr·sign(g): an element whose gradient is near
                # zero moves the other way on a rounding, which the count of opposite signs shows.
                opposite = int(((ours_d * theirs_d) < 0).sum())
                worst = (c, n, opposite, ours_d.numel())
        print(f"update losses: largest relative difference from Alpha's {rel:.3e}")
        print(f"parameters' changes over {args.updates} updates: lowest cosine with Alpha's {worst[0]:.6f} "
              f"({worst[1]}: {worst[2]} of its {worst[3]} elements moved the other way)")
        result.update(alpha_losses=theirs.tolist(), losses=losses, loss_largest_relative_difference=rel,
                      lowest_change_cosine=worst[0], lowest_change_cosine_tensor=worst[1],
                      lowest_change_opposite_signs=worst[2], change_cosines=cosines)
    if args.save:
        tensors = {n: p for n, p in model.named_parameters()}
        ct.save_safetensors(args.save, tensors, {"format": "diakosmos-torch", "system": "diakosmos",
                                                "step": step0 + args.updates})
    return result


def cmd_bench(args) -> dict:
    cfg = config_from_args(args)
    bf16 = args.precision == "bf16"
    if torch.cuda.is_available() and args.device in ("auto", "cuda"):
        log(f"bf16 products with f32 results: {'mm out_dtype' if probe_out_dtype('cuda') else 'bf16, widened'}")
    return ct.run_bench(args, cfg, "Diakosmos", init_tensors,
                        build=lambda: Diakosmos(cfg, bf16=bf16, scan=args.scan, chunk=args.chunk),
                        make_opt=make_learner(1000), rename=lambda n: n)


def cmd_init(args) -> dict:
    cfg = config_from_args(args)
    tensors = init_tensors(cfg, args.seed)
    meta = {"format": "diakosmos-torch-init", "system": "diakosmos", "step": 0, "seed": args.seed,
            "cursor": json.dumps({"position": 0, "epoch": 0})}
    ct.save_safetensors(args.out, tensors, meta)
    return {"out": args.out, "parameters": sum(t.numel() for t in tensors.values()), "config": asdict(cfg)}


# ----------------------------------------------------------------------------------------------


def scan_args(p):
    p.add_argument("--scan", choices=("parallel", "chunked", "loop"), default="parallel",
                   help="the recurrence over all chunks at once (default), a chunk at a time, "
                        "or position by position")
    p.add_argument("--chunk", type=int, default=64, help="positions a chunk (--scan parallel, chunked)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    tiny = "2 blocks, 8 phasors a group, 4 harmonics, context 64: a smoke test"
    precision = dict(choices=("bf16", "fp32"), default="bf16",
                     help="bf16 operands with f32 sums for the three large products (default, as Alpha) or fp32")

    c = sub.add_parser("check", help="loss and every gradient on given windows, against Alpha's")
    c.add_argument("--init", required=True, help="Alpha's checkpoint (.safetensors); the geometry comes from it")
    c.add_argument("--data", required=True, help="a prepared byte directory or a raw file")
    c.add_argument("--alpha", default=None, help="the diakosmos_reference example's output for the same checkpoint")
    c.add_argument("--split", choices=("valid", "train"), default=None, help="default: Alpha's, else valid")
    c.add_argument("--first", type=int, default=None, help="first window's index (default: Alpha's, else 0)")
    c.add_argument("--windows", type=int, default=None, help="windows (default: Alpha's, else 1)")
    c.add_argument("--context", type=int, default=None, help="bytes a window (default: Alpha's, else 2048)")
    c.add_argument("--device", default="cpu")
    c.add_argument("--precision", **{**precision, "default": None,
                                     "help": "bf16 or fp32 products (default: what Alpha's file says it used)"})
    scan_args(c)

    t = sub.add_parser("train", help="train from Alpha's checkpoint on Alpha's windows; held-out loss")
    t.add_argument("--init", required=True)
    t.add_argument("--data", required=True, help="a prepared byte directory")
    t.add_argument("--updates", type=int, required=True)
    t.add_argument("--batch", type=int, default=2, help="windows a micro-batch (alpha train --batch)")
    t.add_argument("--accumulate", type=int, default=1, help="micro-batches an update (alpha train --accumulate)")
    t.add_argument("--total", type=int, default=None, help="the schedule's horizon (default --updates)")
    t.add_argument("--context", type=int, default=2048)
    t.add_argument("--heldout-windows", type=int, default=16)
    t.add_argument("--eval-batch", type=int, default=4)
    t.add_argument("--alpha", default=None, help="the example's --updates output: compare losses and parameters")
    t.add_argument("--out", default=None, help="JSON lines: one an update, then the held-out loss")
    t.add_argument("--save", default=None)
    t.add_argument("--device", default="auto")
    t.add_argument("--precision", **precision)
    scan_args(t)

    b = sub.add_parser("bench", help="time one whole training step in several settings")
    ct.add_common_args(b, tiny_help=tiny)
    ct.add_bench_args(b)
    scan_args(b)

    i = sub.add_parser("init", help="write a random initial checkpoint in Alpha's names (smoke tests)")
    i.add_argument("--tiny", action="store_true", help=tiny)
    i.add_argument("--seed", type=int, default=1)
    i.add_argument("--out", required=True)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    cmds = {"check": cmd_check, "train": cmd_train, "bench": cmd_bench, "init": cmd_init}
    # `check` exits 1 when a target is missed: its result then says "passed": false.
    return ct.run_command(cmds, args, without_torch=())


if __name__ == "__main__":
    sys.exit(main())
