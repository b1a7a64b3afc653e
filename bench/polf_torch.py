#!/usr/bin/env python3
"""An independent PyTorch Polf (SYSTEMS.md §4), written from the parameter-golf recipe and the
choices `systems/polf.rs` makes where Alpha departs from it, sharing no code with Alpha.

Three jobs:

* agreement: `check` loads one of Alpha's safetensors checkpoints, computes the mean loss and the
  gradient of every parameter on given token windows, and compares them with Alpha's own, which
  `crates/alpha-run/examples/polf_reference.rs` writes for the same checkpoint and windows
  (relative loss difference, target <= 1e-3; each gradient's cosine, target >= 0.9999).
* learning equivalence: `train` starts from Alpha's checkpoint and trains on the same windows in
  the same order with the same learner (Adam on the tied embedding, Muon on the block matrices,
  Adam on the controls; no clip) and schedule, for `--steps N` updates or to a wall-clock
  `--budget S` with `alpha train --budget`'s warmdown; it ends with the held-out loss and bits
  per byte on the windows Alpha scores. With the example's `--updates` output it also compares
  every update's loss and the parameters' changes. `score` gives those held-out figures for any
  checkpoint, as `alpha score polf` does. A run spans several invocations: `--stop-after S`
  stops it S wall seconds after the process started, `--save-state` writes what it needs to go
  on (parameters, Adam's and Muon's moments, the update count, the budget's spent time and the
  updates it was measured over, the stream's position, the losses), and `--resume-state`
  continues it: the same windows next, the same schedule, the budget spending what is left. By
  steps, N updates then M resumed equal N+M in one invocation bit for bit on the CPU; under a
  budget the warmdown's factor depends on measured times, as Alpha's does, so only the
  bookkeeping carries over exactly. The budget counts updates only: before the first timed
  update on CUDA or with `--compile`, one forward and backward on tokens of the step's shape
  (its gradient dropped; no parameter, moment or window changes) takes compilation and the
  libraries' start-up out of it, as Alpha compiles before its first timed update.
* the speed baseline: `bench` times one whole training step (forward, backward, the three
  optimizers, zero_grad) in coppelius_torch.py's four settings; `alpha bench polf` runs it.

Every subcommand prints exactly one JSON object on its LAST line of stdout (progress goes to
stderr). Exit status 0 means that JSON is a result; on a failure the last line is
{"error": "..."} and the status is 1 (`check` also exits 1 when a target is missed).

The model, as Alpha's Polf has it (the reference's choice is given where Alpha's differs):

* x0 = RMSNorm(E[ids]) with the f32 embedding (the reference keeps E in bf16), RMSNorm without
  parameters and with eps = 2^-23 (F.rms_norm's default for f32);
* 9 blocks of 512, the first 4 pushing their outputs on a stack that the last 5 pop (last in,
  first out) before running, adding skip_weights[i] * popped; each block
  x = mix0*x + mix1*x0, x += attn_scale*Attn(norm x), x += mlp_scale*MLP(norm x);
* attention: q, k, v products (8 query and 4 key/value heads of 64, query head h reading
  key/value head h // 2), RMSNorm per q and k head, q times its head's gain, then the rotary of
  base 10,000 on half-split pairs turned by +theta, (x1 cos - x2 sin, x1 sin + x2 cos), as
  Alpha's Rotary turns them (the reference turns by -theta: the same family with each head's
  halves swapped, which the norms and dot products do not see; a checkpoint of Alpha's is
  only read right with Alpha's direction); causal softmax at 1/8; the output projection;
* MLP proj(relu(fc x)^2); the tied head 30*tanh(norm(x) E^T / 30); mean cross-entropy in f32.

Matrices are stored as Alpha stores them, [inputs, outputs], used as x @ W. Products take bf16
operands with f32 sums; with `--products alpha` (the default on a CPU) they are Alpha's own
rounding: operands rounded as they enter, the pullback's incoming gradient rounded to bf16, and
attention written out (q, k, v and the probabilities rounded to bf16, f32 sums and softmax);
`--products autocast` (the default on CUDA) is PyTorch's bf16 autocast and its flash SDPA, the
fast form a PyTorch user would train with. Norms, softcap and loss run in f32 in both.

The safetensors and token readers and the timing harness come from coppelius_torch.py beside
this file, the bf16 product and Muon's Newton-Schulz iteration (Alpha's: bf16 operands, f32
sums, X kept in f32, five quintic steps) from diakosmos_torch.py; nothing outside the standard
library and PyTorch is needed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

PROCESS_START = time.perf_counter()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coppelius_torch as ct  # noqa: E402
import diakosmos_torch as dt  # noqa: E402

torch, nn, F = ct.torch, ct.nn, ct.F
log = ct.log

RMS_EPS = 2.0**-23
ROPE_BASE = 10000.0
SOFTCAP = 30.0
Q_GAIN = 1.5
EMBED_STD = 0.005


# ----------------------------------------------------------------------------------------------
# Configuration


@dataclass
class Config:
    blocks: int = 9
    width: int = 512
    heads: int = 8
    kv_heads: int = 4
    mlp: int = 1024
    vocab: int = 1024
    context: int = 1024

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def encoder(self) -> int:
        return self.blocks // 2

    @property
    def skips(self) -> int:
        return min(self.encoder, self.blocks - self.encoder)

    def parameter_count(self) -> int:
        c, kv = self.width, self.kv_heads * self.head_dim
        per_block = c * c + 2 * c * kv + c * c + 2 * c * self.mlp + self.heads + 2 * c + 2 * c
        return self.blocks * per_block + self.vocab * c + self.skips * c


# A smoke-test geometry: seconds on a CPU.
TINY = dict(blocks=3, width=128, heads=2, kv_heads=1, mlp=256, vocab=1024, context=64)


def config_from_args(args) -> Config:
    cfg = Config(**TINY) if getattr(args, "tiny", False) else Config()
    if getattr(args, "context", None):
        cfg.context = args.context
    return cfg


def config_from_shapes(shapes: dict, context: int, source: str) -> Config:
    """The geometry of a checkpoint's tensors: blocks counted; width and vocabulary from the
    embedding; query heads from q_gain; key/value heads from c_k's outputs over the head width;
    the MLP from fc. The context is not in them (the rotary has no parameters)."""
    for name in ("tok_emb.weight", "skip_weights", "blocks.0.attn.q_gain", "blocks.0.attn.c_k.weight"):
        if name not in shapes:
            raise ValueError(f"{source}: no tensor {name}; is this a Polf checkpoint of Alpha's?")
    vocab, width = shapes["tok_emb.weight"]
    blocks = 0
    while f"blocks.{blocks}.attn.c_q.weight" in shapes:
        blocks += 1
    heads = shapes["blocks.0.attn.q_gain"][0]
    kv_heads = shapes["blocks.0.attn.c_k.weight"][1] // (width // heads)
    mlp = shapes["blocks.0.mlp.fc.weight"][1]
    return Config(blocks=blocks, width=width, heads=heads, kv_heads=kv_heads, mlp=mlp, vocab=vocab, context=context)


# ----------------------------------------------------------------------------------------------
# The model

if torch is not None:

    def rotary_tables(cfg: Config):
        """cos and sin of t*base^(-2i/D), [T, D/2], computed in binary64 and rounded to f32."""
        d = cfg.head_dim
        pos = torch.arange(cfg.context, dtype=torch.float64)
        inv = ROPE_BASE ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
        theta = pos[:, None] * inv[None, :]
        return theta.cos().float(), theta.sin().float()

    def rotate(x, cos, sin):
        """Half-split pairs of [B, H, T, D] turned by +theta (Alpha's direction)."""
        d = x.shape[-1] // 2
        x1, x2 = x[..., :d], x[..., d:]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    def bf16_round(x):
        return x.to(torch.bfloat16).float()

    def causal_attention_alpha(q, k, v, scale: float):
        """Causal softmax attention as Alpha's bf16 attention rounds it: q, k, v and the
        probabilities rounded to bf16 as they enter their products, sums and softmax in f32.
        Query head h reads key/value head h // (H / G)."""
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        s = torch.matmul(bf16_round(q), bf16_round(k).transpose(-1, -2)) * scale
        t = s.shape[-1]
        mask = torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1)
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        return torch.matmul(bf16_round(p), bf16_round(v))

    Holder = dt.Holder  # parameters under Alpha's names

    class Attn(nn.Module):
        def __init__(self, cfg: Config):
            super().__init__()
            c, kv = cfg.width, cfg.kv_heads * cfg.head_dim
            self.c_q = Holder(weight=(c, c))
            self.c_k = Holder(weight=(c, kv))
            self.c_v = Holder(weight=(c, kv))
            self.q_gain = nn.Parameter(torch.empty(cfg.heads))
            self.proj = Holder(weight=(c, c))

    class MLP(nn.Module):
        def __init__(self, cfg: Config):
            super().__init__()
            self.fc = Holder(weight=(cfg.width, cfg.mlp))
            self.proj = Holder(weight=(cfg.mlp, cfg.width))

    class Block(nn.Module):
        def __init__(self, cfg: Config):
            super().__init__()
            c = cfg.width
            self.cfg = cfg
            self.resid_mix = nn.Parameter(torch.empty(2, c))
            self.attn_scale = nn.Parameter(torch.empty(c))
            self.mlp_scale = nn.Parameter(torch.empty(c))
            self.attn = Attn(cfg)
            self.mlp = MLP(cfg)

    def norm(x):
        return F.rms_norm(x.float(), (x.shape[-1],), eps=RMS_EPS)

    class Polf(nn.Module):
        def __init__(self, cfg: Config, products: str = "alpha"):
            super().__init__()
            self.cfg = cfg
            self.products = products
            self.tok_emb = Holder(weight=(cfg.vocab, cfg.width))
            self.skip_weights = nn.Parameter(torch.empty(cfg.skips, cfg.width))
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.blocks))
            cos, sin = rotary_tables(cfg)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

        def mm(self, x, w):
            """x @ W with bf16 operands: Alpha's rounding, or autocast's product."""
            if self.products == "alpha":
                lead = x.shape[:-1]
                y = dt.Bf16Product.apply(x.reshape(-1, x.shape[-1]), w.t())
                return y.reshape(*lead, w.shape[1])
            if self.products == "fp32":
                return x @ w
            return x @ w  # under autocast: bf16 operands, a bf16 result

        def attention(self, blk: Block, x):
            cfg, a = self.cfg, blk.attn
            b, t, c = x.shape
            h, g, d = cfg.heads, cfg.kv_heads, cfg.head_dim
            q = norm(self.mm(x, a.c_q.weight).view(b, t, h, d))
            k = norm(self.mm(x, a.c_k.weight).view(b, t, g, d))
            v = self.mm(x, a.c_v.weight).view(b, t, g, d)
            q = q * a.q_gain[None, None, :, None]
            cos, sin = self.rope_cos[:t], self.rope_sin[:t]
            q = rotate(q.transpose(1, 2), cos, sin)
            k = rotate(k.transpose(1, 2), cos, sin)
            v = v.transpose(1, 2)
            scale = 1.0 / math.sqrt(d)
            if self.products == "alpha":
                o = causal_attention_alpha(q, k, v.float(), scale)
            elif self.products == "fp32":
                o = F.scaled_dot_product_attention(q, k, v.float(), is_causal=True, scale=scale, enable_gqa=True)
            else:
                bf = torch.bfloat16
                o = F.scaled_dot_product_attention(q.to(bf), k.to(bf), v.to(bf), is_causal=True, scale=scale,
                                                   enable_gqa=True)
            return self.mm(o.transpose(1, 2).reshape(b, t, c), a.proj.weight)

        def block(self, blk: Block, x, x0):
            mix = blk.resid_mix
            x = mix[0] * x + mix[1] * x0
            x = x + blk.attn_scale * self.attention(blk, norm(x)).float()
            hidden = torch.relu(self.mm(norm(x), blk.mlp.fc.weight).float()).square()
            return x + blk.mlp_scale * self.mm(hidden, blk.mlp.proj.weight).float()

        def forward(self, tokens, targets, reduction: str = "mean"):
            cfg = self.cfg
            amp = self.products == "autocast"
            with torch.autocast(device_type=tokens.device.type, dtype=torch.bfloat16, enabled=amp,
                                cache_enabled=False):
                x0 = norm(F.embedding(tokens, self.tok_emb.weight))
                x = x0
                stack = []
                for i, blk in enumerate(self.blocks):
                    if i >= cfg.encoder and stack:
                        x = x + self.skip_weights[i - cfg.encoder] * stack.pop()
                    x = self.block(blk, x, x0)
                    if i < cfg.encoder:
                        stack.append(x)
                logits = self.mm(norm(x), self.tok_emb.weight.t()).float()
            logits = SOFTCAP * torch.tanh(logits / SOFTCAP)
            return F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1), reduction=reduction)

    def init_tensors(cfg: Config, seed: int) -> dict:
        """Alpha's initializer in distribution, by Alpha's names: E ~ N(0, 0.005); the residual
        output projections 0; the other matrices U(+-1/sqrt(fan_in)); q gains 1.5; resid_mix
        rows 1 and 0; scales and skip weights 1."""
        g = torch.Generator().manual_seed(seed)
        out = {}
        for name, p in Polf(cfg).named_parameters():
            shape = tuple(p.shape)
            if name == "tok_emb.weight":
                out[name] = torch.randn(shape, generator=g) * EMBED_STD
            elif name.endswith(("attn.proj.weight", "mlp.proj.weight")):
                out[name] = torch.zeros(shape)
            elif name.endswith(".weight"):
                out[name] = (torch.rand(shape, generator=g) * 2 - 1) / math.sqrt(shape[0])
            elif name.endswith("q_gain"):
                out[name] = torch.full(shape, Q_GAIN)
            elif name.endswith("resid_mix"):
                out[name] = torch.stack((torch.ones(shape[1]), torch.zeros(shape[1])))
            else:
                out[name] = torch.ones(shape)
        return out


# ----------------------------------------------------------------------------------------------
# The learner (Polf::learner: four roles, no clip) and Alpha's schedule

BETAS = (0.9, 0.95)
EPS = 1e-8
PEAKS = {"embed": 0.05, "matrices": 0.04, "controls": 0.04}
MUON_MOMENTUM, MUON_FROM, MUON_RAMP = 0.95, 0.85, 500
WARMDOWN = 1200
NO_CAP = 1_000_000_000  # `alpha train --budget` without --steps: time alone ends the run


def role(name: str) -> str:
    if name == "tok_emb.weight":
        return "embed"
    if name.startswith("blocks.") and name.endswith(".weight"):
        return "matrices"
    return "controls"


def lr_at(peak: float, step: int, total: int, warmdown: int | None = None) -> float:
    """`Schedule::LinearWarmdown { total, warmdown: min(1200, total) }`: the peak, then
    peak*(total - step + 1)/warmdown over the last `warmdown` updates; 0 past `total`."""
    warmdown = max(1, min(WARMDOWN, total) if warmdown is None else warmdown)
    left = max(0, total + 1 - step)
    return peak if left >= warmdown else peak * left / warmdown


def momentum_at(step: int) -> float:
    """Muon's μ for update `step`: 0.85 rising linearly to 0.95 over the first 500 updates."""
    f = min(max(step - 1, 0) / MUON_RAMP, 1.0)
    return (1 - f) * MUON_FROM + f * MUON_MOMENTUM


class Budget:
    """`alpha train --budget`'s clock (alpha-run's budget.rs, alpha-learn's TimeBudget): the
    factor on every peak is 1 until the training time left is below 1,200 x the mean update
    time, then left / (1,200 x mean), falling linearly to 0 as the budget runs out; the run
    stops once the time is spent. Only the updates count: start-up, compilation and held-out
    scoring do not."""

    def __init__(self, seconds: float, warmdown_updates: int = WARMDOWN):
        self.seconds, self.warmdown_updates = seconds, warmdown_updates
        self.elapsed, self.steps = 0.0, 0

    def mean_step(self) -> float:
        return self.elapsed / self.steps if self.steps else 0.0

    def factor(self) -> float:
        remaining = max(self.seconds - self.elapsed, 0.0)
        warmdown = self.warmdown_updates * max(self.mean_step(), 0.0)
        return 1.0 if remaining >= warmdown else remaining / warmdown

    def add(self, seconds: float):
        self.elapsed += seconds
        self.steps += 1

    def spent(self) -> bool:
        return self.elapsed >= self.seconds


if torch is not None:

    class Learner:
        """Adam (β 0.9/0.95, ε 1e-8, p -= lr·(m/bc1)/(√(v/bc2) + ε)) on the tied embedding at
        0.05 and on the controls at 0.04; Muon at 0.04 on the block matrices: B <- μB + G,
        U = G + μB, each U turned so its rows are its shorter side, same-shaped ones stacked
        through the Newton-Schulz iteration, W -= lr·√max(1, outputs/inputs)·X. `step()` reads
        the `.grad`s unclipped. Rates are host numbers, or device tensors when `graph_safe`."""

        def __init__(self, model, horizon: int, device, graph_safe: bool = False):
            self.horizon = horizon
            self.graph_safe = graph_safe
            self.named = list(model.named_parameters())
            self.param_groups = []
            for r in ("embed", "matrices", "controls"):
                lr = torch.tensor(PEAKS[r], device=device) if graph_safe else PEAKS[r]
                params = [(n, p) for n, p in self.named if role(n) == r]
                self.param_groups.append({"role": r, "peak": PEAKS[r], "lr": lr, "params": params})
            self.state = {}
            for n, p in self.named:
                if role(n) == "matrices":
                    self.state[n + ".muon_momentum"] = torch.zeros_like(p)
                else:
                    self.state[n + ".adam_m"] = torch.zeros_like(p)
                    self.state[n + ".adam_v"] = torch.zeros_like(p)
            self.t = 0
            self.t_dev = torch.zeros((), device=device) if graph_safe else None
            self.momentum = torch.tensor(MUON_FROM, device=device) if graph_safe else MUON_FROM

        def set_step(self, step: int, factor: float = 1.0):
            """Every group's rate and Muon's momentum for update `step`; `factor` is a budget's."""
            for g in self.param_groups:
                lr = lr_at(g["peak"] * factor, step, self.horizon)
                if torch.is_tensor(g["lr"]):
                    g["lr"].fill_(lr)
                else:
                    g["lr"] = lr
            mu = momentum_at(step)
            if torch.is_tensor(self.momentum):
                self.momentum.fill_(mu)
            else:
                self.momentum = mu

        def zero_grad(self, set_to_none: bool = True):
            for _, p in self.named:
                p.grad = None

        @torch.no_grad()
        def step(self):
            if self.graph_safe:
                self.t_dev += 1
                t = self.t_dev
            else:
                self.t += 1
                t = self.t
            b1, b2 = BETAS
            bc1, bc2 = 1 - b1**t, 1 - b2**t
            for g in self.param_groups:
                if g["role"] == "matrices":
                    self.muon(g["params"], g["lr"])
                    continue
                for n, p in g["params"]:
                    m, v = self.state[n + ".adam_m"], self.state[n + ".adam_v"]
                    m.mul_(b1).add_(p.grad, alpha=1 - b1)
                    v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                    p.sub_(g["lr"] * (m / bc1) / ((v / bc2).sqrt() + EPS))

        def muon(self, params, lr):
            mu = self.momentum
            oriented = []
            for n, p in params:
                buf = self.state[n + ".muon_momentum"]
                buf.mul_(mu).add_(p.grad)
                u = p.grad + mu * buf
                tall = u.shape[0] > u.shape[1]
                oriented.append((p, u.t() if tall else u, tall))
            for shape in dict.fromkeys(tuple(u.shape) for _, u, _ in oriented):
                members = [(p, u, tall) for p, u, tall in oriented if tuple(u.shape) == shape]
                xs = dt.newton_schulz(torch.stack([u for _, u, _ in members]))
                for (p, _, tall), x in zip(members, xs):
                    x = x.t() if tall else x
                    # Stored [inputs, outputs]: the shape factor is √max(1, columns/rows).
                    p.sub_(x * (lr * math.sqrt(max(1.0, p.shape[1] / p.shape[0]))))

    def make_learner(horizon: int):
        """`bench_setting`'s optimizer hook: the learner, a schedule of `horizon` updates."""
        return lambda model, device, graph_safe=False: Learner(model, horizon, device, graph_safe)

    def train_step(fwd, params, opt, tokens, targets):
        """Forward, backward and the learner's step: no clip (the recipe's GRAD_CLIP_NORM=0)."""
        loss = fwd(tokens, targets)
        loss.backward()
        opt.step()
        return loss.detach(), torch.zeros((), device=loss.device)


# ----------------------------------------------------------------------------------------------
# Checkpoints, tokens and bytes


def load_checkpoint_model(path: str, context: int, device, products: str):
    """The model of an Alpha checkpoint (parameters only), its geometry from the tensors."""
    header, meta, _ = ct.read_safetensors_header(path)
    if meta.get("system", "polf") != "polf":
        raise ValueError(f"{path}: a checkpoint of Alpha's {meta['system']}, not of polf")
    cfg = config_from_shapes({k: v["shape"] for k, v in header.items()}, context, path)
    model = Polf(cfg, products)
    wanted = {n for n, _ in model.named_parameters()}
    tensors, _ = ct.load_safetensors(path, names=wanted)
    ct.load_into(model, tensors, path, rename=lambda n: n)  # module paths are Alpha's names
    return model.to(device), cfg, meta


def bytes_to_unicode() -> dict:
    """The byte-level BPE's printable stand-in for each byte (GPT-2's table), inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_byte_counts(data_dir: str, vocab: int) -> list:
    """Each token's UTF-8 byte count in the document, from the data's byte-level BPE
    (`tokenizer.json`): a piece's characters each stand for one byte; added tokens (the BOS)
    count none, as Alpha's `decoded_bytes` counts them."""
    with open(os.path.join(data_dir, "manifest.json")) as f:
        name = json.load(f)["tokenizer"].get("file", "tokenizer.json")
    with open(os.path.join(data_dir, name)) as f:
        tok = json.load(f)
    table = bytes_to_unicode()
    counts = [0] * vocab
    for piece, i in tok["model"]["vocab"].items():
        if i < vocab:
            counts[i] = sum(1 for ch in piece if ch in table)
    for added in tok.get("added_tokens", []):
        if added["id"] < vocab:
            counts[added["id"]] = 0
    return counts


def heldout(model, cfg: Config, data: str, windows: int, device, batch: int) -> dict:
    """Alpha's held-out windows (`alpha train --heldout-windows`): mean loss and bits per byte
    over the exact bytes the predicted tokens decode to."""
    split = ct.TokenSplit(data, "valid")
    counts = token_byte_counts(data, cfg.vocab)
    ws = split.heldout_windows(cfg.context + 1, windows)
    nll, tokens, nbytes = 0.0, 0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(ws), batch):
            chunk = torch.tensor(ws[i:i + batch], dtype=torch.long, device=device)
            losses = model(chunk[:, :-1], chunk[:, 1:], reduction="none")
            nll += losses.double().sum().item()
            tokens += losses.numel()
    model.train()
    for w in ws:
        nbytes += sum(counts[x] for x in w[1:])
    return {"loss": nll / tokens, "bits_per_byte": nll / math.log(2) / max(nbytes, 1), "windows": len(ws),
            "tokens": tokens, "bytes": nbytes}


def windows_at(data: str, split: str, first: int, count: int, context: int) -> list:
    """`count` windows of context + 1 tokens, window i from token (first + i)·context."""
    s = ct.TokenSplit(data, split)
    return [s.read_at((first + i) * context, context + 1) for i in range(count)]


# ----------------------------------------------------------------------------------------------
# Subcommands (`check`'s targets are diakosmos_torch's LOSS_TARGET and COSINE_TARGET)


def default_products(products, device) -> str:
    return products or ("autocast" if device.type == "cuda" else "alpha")


def cmd_check(args) -> dict:
    device = ct.pick_device(args.device, "auto")
    torch.backends.cuda.matmul.allow_tf32 = False
    alpha, ameta = ({}, {})
    if args.alpha:
        alpha, ameta = ct.load_safetensors(args.alpha, skip_suffixes=())
    context = args.context or int(ameta.get("context", 1024))
    split = args.split or ameta.get("split", "valid")
    first = args.first if args.first is not None else int(ameta.get("first", 0))
    count = args.windows or (alpha["windows"].shape[0] if "windows" in alpha else 1)
    products = args.products or ("fp32" if ameta.get("products") == "f32" else "alpha")
    model, cfg, _ = load_checkpoint_model(args.init, context, device, products)
    log(f"model: {asdict(cfg)}, {sum(p.numel() for p in model.parameters()):,} parameters, {device}, {products}")
    ws = torch.tensor(windows_at(args.data, split, first, count, context), dtype=torch.long)
    if "windows" in alpha and not torch.equal(alpha["windows"].long(), ws):
        raise ValueError(f"the windows read from {args.data} are not the ones Alpha's {args.alpha} holds")
    ws = ws.to(device)
    result = {"init": args.init, "config": asdict(cfg), "windows": count, "first": first, "split": split,
              "products": products, "device": str(device)}
    result.update(dt.gradients_against_alpha(model, ws, alpha, 34))
    return result


def compare_updates(args, model, losses: list) -> dict:
    """Every update's loss and each parameter's change against the example's `--updates` file."""
    alpha, _ = ct.load_safetensors(args.alpha, skip_suffixes=())
    ours = torch.tensor(losses, dtype=torch.float64)
    theirs = alpha["train_loss"].double()
    if theirs.numel() != ours.numel():
        raise ValueError(f"{args.alpha} holds {theirs.numel()} updates; this run made {ours.numel()}")
    rel = ((ours - theirs).abs() / theirs.abs()).max().item()
    start, _ = ct.load_safetensors(args.init)
    worst, cosines = (2.0, None), {}
    for n, p in model.named_parameters():
        cosines[n] = c = dt.cosine(p.detach().cpu() - start[n], alpha[f"after:{n}"] - start[n])
        if c < worst[0]:
            worst = (c, n)
    print(f"update losses: largest relative difference from Alpha's {rel:.3e}")
    print(f"parameters' changes: lowest cosine with Alpha's {worst[0]:.6f} ({worst[1]})")
    return {"alpha_losses": theirs.tolist(), "loss_largest_relative_difference": rel,
            "lowest_change_cosine": worst[0], "lowest_change_cosine_tensor": worst[1], "change_cosines": cosines}


STATE_FORMAT = "polf-torch-train-state"


def save_state(path: str, model, opt, stream, step: int, horizon: int, batch: int, budget, timed: list,
               losses: list, finished: bool, products: str, init: str):
    """Everything `--resume-state` needs to go on as if never stopped: the parameters, the
    learner's moments (Adam's m and v, Muon's momentum) and update count, the stream's
    position, the budget's spent time and the update count it was measured over, the timing
    of a run by steps, and every update's loss so far. Written whole, then renamed into place."""
    state = {
        "format": STATE_FORMAT, "version": 1, "step": step, "horizon": horizon, "batch": batch,
        "products": products, "init": init, "finished": finished,
        "params": {n: p.detach().cpu().clone() for n, p in model.named_parameters()},
        "learner": {"t": int(opt.t_dev.item()) if opt.graph_safe else opt.t,
                    "state": {n: t.detach().cpu().clone() for n, t in opt.state.items()}},
        "cursor": {"position": stream.position, "epoch": stream.epoch},
        "budget": None if budget is None else {"seconds": budget.seconds, "warmdown_updates": budget.warmdown_updates,
                                               "elapsed": budget.elapsed, "steps": budget.steps},
        "timed": list(timed), "losses": list(losses),
    }
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_state(path: str, model, opt, device) -> dict:
    """Reads `save_state`'s file into the model and learner; returns the rest."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("format") != STATE_FORMAT:
        raise ValueError(f"{path}: not a polf_torch.py train state")
    with torch.no_grad():
        params = dict(model.named_parameters())
        if set(params) != set(state["params"]):
            raise ValueError(f"{path}: its parameters are not this model's")
        for n, p in params.items():
            p.copy_(state["params"][n].to(device))
        if set(opt.state) != set(state["learner"]["state"]):
            raise ValueError(f"{path}: its optimizer state is not this learner's")
        for n, t in opt.state.items():
            t.copy_(state["learner"]["state"][n].to(device))
    if opt.graph_safe:
        opt.t_dev.fill_(state["learner"]["t"])
    else:
        opt.t = state["learner"]["t"]
    return state


def cmd_train(args) -> dict:
    device = ct.pick_device(args.device, args.attention)
    products = default_products(args.products, device)
    model, cfg, meta = load_checkpoint_model(args.init, args.context, device, products)
    step0 = int(meta.get("step", 0) or 0)
    if step0 != 0 and not args.resume_state:
        log(f"note: {args.init} is at step {step0}; training restarts from update 1 with fresh moments")
    log(f"model: {asdict(cfg)}, {sum(p.numel() for p in model.parameters()):,} parameters, {device}, {products}")
    resumed = None
    if args.resume_state:
        resumed = torch.load(args.resume_state, map_location="cpu", weights_only=True)
    if args.steps is None and args.budget is None and not (resumed and resumed["budget"]):
        raise ValueError("give --steps N, --budget SECONDS, or both (the steps then cap the budget's run)")
    steps = args.steps or NO_CAP
    horizon = resumed["horizon"] if resumed else (args.total or steps)
    if resumed and args.total and args.total != horizon:
        raise ValueError(f"{args.resume_state} has a schedule of {horizon} updates, not --total {args.total}")
    if resumed and resumed["batch"] != args.batch:
        raise ValueError(f"{args.resume_state} trained at batch {resumed['batch']}, not --batch {args.batch}")
    opt = Learner(model, horizon, device)
    budget = None
    if resumed:
        load_state(args.resume_state, model, opt, device)
        cursor = resumed["cursor"]
        step, losses, timed = resumed["step"], list(resumed["losses"]), list(resumed["timed"])
        if resumed["budget"]:
            b = resumed["budget"]
            budget = Budget(args.budget or b["seconds"], b["warmdown_updates"])
            budget.elapsed, budget.steps = b["elapsed"], b["steps"]
        elif args.budget:
            raise ValueError(f"{args.resume_state} is a run by steps; it cannot take a --budget now")
        log(f"resumed {args.resume_state} after update {step}"
            + (f", {budget.elapsed:.1f} s of {budget.seconds:.0f} spent" if budget else ""))
    else:
        cursor = json.loads(meta.get("cursor") or '{"position": 0, "epoch": 0}')
        step, losses, timed = 0, [], [0.0, 0]
        budget = Budget(args.budget, args.warmdown_updates) if args.budget else None
    stream = ct.TrainStream(ct.TokenSplit(args.data, "train"), int(cursor["position"]), int(cursor["epoch"]))
    fwd = torch.compile(model) if args.compile else model
    t_len, b = cfg.context, args.batch
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    factor = 1.0
    out = open(args.out, "a" if resumed else "w") if args.out else None

    def done() -> bool:
        return step >= steps or (budget is not None and budget.spent())

    if (args.compile or device.type == "cuda") and not done():
        # Compilation and the libraries' start-up, outside the budget: one forward and backward
        # on tokens of the step's shape, its gradient dropped (no parameter, moment or window
        # changes), as Alpha compiles before its first timed update.
        g = torch.Generator().manual_seed(0)
        prime = torch.randint(0, cfg.vocab, (b, t_len + 1), generator=g).to(device)
        fwd(prime[:, :-1], prime[:, 1:]).backward()
        opt.zero_grad()
        sync()
    stopped = False
    t_start = time.perf_counter()
    first_step = step + 1
    while not done():
        if args.stop_after is not None and time.perf_counter() - PROCESS_START >= args.stop_after:
            stopped = True
            break
        step += 1
        t0 = time.perf_counter()
        factor = budget.factor() if budget else 1.0
        opt.set_step(step, factor)
        ws = torch.tensor([stream.next_window(t_len + 1) for _ in range(b)], dtype=torch.long, device=device)
        loss = fwd(ws[:, :-1], ws[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss = loss.item()  # waits for the step, as Alpha's trainer reads its loss back
        if not math.isfinite(loss):
            raise RuntimeError(f"loss became non-finite ({loss}) at update {step}")
        losses.append(loss)
        took = time.perf_counter() - t0
        timed[0] += took
        timed[1] += 1
        row = {"step": step, "loss": loss, "lr": {g["role"]: lr_at(g["peak"] * factor, step, horizon)
                                                  for g in opt.param_groups}, "momentum": momentum_at(step)}
        if budget:
            budget.add(took)
            row.update(lr_factor=factor, elapsed_s=budget.elapsed)
        if out:
            out.write(json.dumps(row) + "\n")
        if step <= 5 or step % 50 == 0:
            log(f"update {step}: loss {loss:.5f}" + (f", lr x{factor:.3f}, {budget.elapsed:.1f} s" if budget else ""))
    sync()
    wall = time.perf_counter() - t_start
    finished = not stopped
    if not losses and not stopped:
        raise ValueError("no update was made")
    result = {"init": args.init, "updates": step, "batch": b, "horizon": horizon,
              "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None, "cursor": {"position": stream.position, "epoch": stream.epoch},
              "ms_per_update": 1e3 * (budget.mean_step() if budget else timed[0] / max(timed[1], 1)),
              "device": str(device), "products": products, "compiled": bool(args.compile), "finished": finished,
              "this_invocation": {"first_update": first_step, "updates": step - first_step + 1, "wall_s": wall}}
    if budget:
        result.update(budget_s=budget.seconds, elapsed_s=budget.elapsed, last_factor=factor,
                      warmdown_updates=budget.warmdown_updates)
    if args.save_state:
        save_state(args.save_state, model, opt, stream, step, horizon, b, budget, timed, losses, finished,
                   products, args.init)
        result["state"] = args.save_state
    if stopped:
        log(f"stopped after update {step} at {args.stop_after:.0f} s of this invocation"
            + (f" ({budget.elapsed:.1f} s of the budget spent)" if budget else "")
            + (f"; continue with --resume-state {args.save_state}" if args.save_state else ""))
        if out:
            out.close()
        return result
    if args.alpha:
        result.update(compare_updates(args, model, losses), losses=losses)
    if args.save:
        ct.save_safetensors(args.save, dict(model.named_parameters()),
                            {"format": "polf-torch", "system": "polf", "step": step})
    if args.heldout_windows:
        h = heldout(model, cfg, args.data, args.heldout_windows, device, args.eval_batch)
        log(f"held-out: {h['loss']:.4f} nats, {h['bits_per_byte']:.4f} bits per byte over {h['windows']} windows")
        result.update(heldout_loss=h["loss"], heldout_bits_per_byte=h["bits_per_byte"],
                      heldout_windows=h["windows"], heldout_bytes=h["bytes"])
        if out:
            out.write(json.dumps({"step": step, "heldout_loss": h["loss"], "heldout_bits_per_byte": h["bits_per_byte"]})
                      + "\n")
    if out:
        out.close()
    return result


def cmd_score(args) -> dict:
    device = ct.pick_device(args.device, args.attention)
    products = default_products(args.products, device)
    model, cfg, meta = load_checkpoint_model(args.checkpoint, args.context, device, products)
    h = heldout(model, cfg, args.data, args.windows, device, args.eval_batch)
    return {"checkpoint": args.checkpoint, "step": int(meta.get("step", 0) or 0), **h, "device": str(device),
            "products": products}


def cmd_bench(args) -> dict:
    cfg = config_from_args(args)
    device = ct.pick_device(args.device, args.attention)
    products = default_products(args.products, device)
    return ct.run_bench(args, cfg, "Polf", init_tensors, build=lambda: Polf(cfg, products),
                        make_opt=make_learner(20_000), rename=lambda n: n, step_fn=train_step)


def cmd_init(args) -> dict:
    cfg = config_from_args(args)
    tensors = init_tensors(cfg, args.seed)
    meta = {"format": "polf-torch-init", "system": "polf", "step": 0, "seed": args.seed,
            "cursor": json.dumps({"position": 0, "epoch": 0})}
    ct.save_safetensors(args.out, tensors, meta)
    return {"out": args.out, "parameters": sum(t.numel() for t in tensors.values()), "config": asdict(cfg)}


# ----------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    tiny = "3 blocks of 128, 2 query heads over 1 key/value head, MLP 256, context 64: a smoke test"
    products = dict(choices=("alpha", "autocast", "fp32"), default=None,
                    help="bf16 products rounded as Alpha rounds them (default on a CPU), PyTorch's bf16 autocast "
                         "with flash SDPA (default on CUDA), or fp32")

    c = sub.add_parser("check", help="loss and every gradient on given windows, against Alpha's")
    c.add_argument("--init", required=True, help="Alpha's checkpoint (.safetensors); the geometry comes from it")
    c.add_argument("--data", required=True, help="Alpha's prepared token directory")
    c.add_argument("--alpha", default=None, help="the polf_reference example's output for the same checkpoint")
    c.add_argument("--split", choices=("valid", "train"), default=None, help="default: Alpha's, else valid")
    c.add_argument("--first", type=int, default=None, help="first window's index (default: Alpha's, else 0)")
    c.add_argument("--windows", type=int, default=None, help="windows (default: Alpha's, else 1)")
    c.add_argument("--context", type=int, default=None, help="tokens a window (default: Alpha's, else 1024)")
    c.add_argument("--device", default="cpu")
    c.add_argument("--products", **{**products, "help": "alpha (default; fp32 when Alpha's file says f32), autocast or fp32"})

    t = sub.add_parser("train", help="train from Alpha's checkpoint on Alpha's windows; held-out bits per byte")
    t.add_argument("--init", required=True, help="Alpha's initial checkpoint (.safetensors)")
    t.add_argument("--data", required=True, help="Alpha's prepared token directory")
    t.add_argument("--steps", type=int, default=None, help="updates to run (with --budget, a cap)")
    t.add_argument("--budget", type=float, default=None,
                   help="seconds of training time (alpha train --budget): the rate warms down to 0 as it ends")
    t.add_argument("--warmdown-updates", type=int, default=WARMDOWN,
                   help="the budget's warmdown in updates' worth of time (default 1,200)")
    t.add_argument("--total", type=int, default=None,
                   help="the schedule's horizon (alpha train --schedule-steps; default --steps, no cap under --budget)")
    t.add_argument("--batch", type=int, default=64, help="windows an update (alpha train --batch; default 64)")
    t.add_argument("--context", type=int, default=1024)
    t.add_argument("--heldout-windows", type=int, default=256)
    t.add_argument("--eval-batch", type=int, default=8)
    t.add_argument("--compile", action="store_true", help="torch.compile the model (default eager)")
    t.add_argument("--alpha", default=None, help="the example's --updates output: compare losses and parameters")
    t.add_argument("--out", default=None, help="JSON lines: one an update, then the held-out figures")
    t.add_argument("--save", default=None)
    t.add_argument("--save-state", default=None,
                   help="at the end, or when --stop-after stops it: parameters, the learner's moments, the budget's "
                        "spent time and step count, the update count, the stream's position and the losses so far")
    t.add_argument("--resume-state", default=None,
                   help="go on from a --save-state file: the same windows next, the budget (and schedule) continuing; "
                        "--steps then caps the run's total updates, not this invocation's")
    t.add_argument("--stop-after", type=float, default=None,
                   help="wall-clock seconds of this invocation (from the process's start) after which no update "
                        "starts: the run stops unfinished, writes --save-state and skips the held-out score")
    t.add_argument("--device", default="auto")
    t.add_argument("--attention", choices=ct.ATTENTION, default="flash")
    t.add_argument("--products", **products)

    s = sub.add_parser("score", help="held-out loss and bits per byte of an Alpha checkpoint (alpha score)")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--data", required=True, help="Alpha's prepared token directory")
    s.add_argument("--windows", type=int, default=256)
    s.add_argument("--context", type=int, default=1024)
    s.add_argument("--eval-batch", type=int, default=8)
    s.add_argument("--device", default="auto")
    s.add_argument("--attention", choices=ct.ATTENTION, default="flash")
    s.add_argument("--products", **products)

    b = sub.add_parser("bench", help="time one whole training step in several settings")
    ct.add_common_args(b, tiny_help=tiny)
    ct.add_bench_args(b)
    b.add_argument("--products", **products)

    i = sub.add_parser("init", help="write a random initial checkpoint in Alpha's names (smoke tests)")
    i.add_argument("--tiny", action="store_true", help=tiny)
    i.add_argument("--context", type=int, default=None)
    i.add_argument("--seed", type=int, default=1)
    i.add_argument("--out", required=True)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    cmds = {"check": cmd_check, "train": cmd_train, "score": cmd_score, "bench": cmd_bench, "init": cmd_init}
    # `check` exits 1 when a target is missed: its result then says "passed": false.
    return ct.run_command(cmds, args, without_torch=())


if __name__ == "__main__":
    sys.exit(main())
