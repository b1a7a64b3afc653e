#!/usr/bin/env python3
"""An independent PyTorch model of Coppelius (SYSTEMS.md §2).

Two jobs:

* learning equivalence: `train` starts from one of Alpha's safetensors checkpoints, trains on the
  same token windows with the same learner, and writes the loss of every step, so it can be laid
  beside Alpha's `points.jsonl`; `score` gives the held-out loss of any Alpha checkpoint.
* the speed baseline: `bench` times one whole training step (forward, backward, clip, AdamW,
  zero_grad) in four settings: eager, the whole step captured as a CUDA graph, torch.compile, and
  torch.compile inside a whole-step CUDA graph. `alpha bench coppelius` runs it as a subprocess.

Every subcommand prints exactly one JSON object on its LAST line of stdout (progress goes to
stderr; `bench` prints a table before the JSON). Exit status 0 means that JSON is a result; on a
failure the last line is {"error": "..."} and the status is 1.

The model mirrors `systems/coppelius.rs` (it shares no code with it): parameters are named and
shaped as in Alpha's checkpoints, matrices stored in x out and used as x @ W, never transposed.
Nothing outside the standard library and PyTorch is needed (safetensors and the token shards are
read by hand), and the data and checkpoint readers import without PyTorch.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import random
import signal
import struct
import sys
import time
from array import array
from dataclasses import asdict, dataclass

try:  # the data and file helpers work without PyTorch; the model needs it
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - exercised on machines without torch
    torch = None
    nn = None
    F = None


def log(*args):
    print(*args, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Configuration


@dataclass
class Config:
    blocks: int = 16
    width: int = 512
    heads: int = 8
    ffn: int = 1408
    vocab: int = 12288
    context: int = 1024
    rope_base: float = 10000.0
    ln_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def parameter_count(self) -> int:
        c, f = self.width, self.ffn
        per_block = 4 * c + c * 3 * c + c * c + 3 * c * f
        return self.vocab * c + self.blocks * per_block + 2 * c


# Heads are always of 64 (a checkpoint gives the width, so heads = width / 64).
TINY = dict(blocks=2, width=128, heads=2, ffn=352, vocab=12288, context=64)


def config_from_args(args) -> Config:
    cfg = Config(**TINY) if getattr(args, "tiny", False) else Config()
    if getattr(args, "context", None):
        cfg.context = args.context
    return cfg


def config_from_tensors(shapes: dict, context: int) -> Config:
    """Geometry read off a checkpoint's tensor shapes (heads: width / 64, as in Coppelius)."""
    vocab, width = shapes["embed.weight"]
    blocks = 0
    while f"blocks.{blocks}.attn.qkv.weight" in shapes:
        blocks += 1
    ffn = shapes["blocks.0.ffn.gate.weight"][1] if blocks else 4 * width
    heads = max(1, width // 64)
    return Config(blocks=blocks, width=width, heads=heads, ffn=ffn, vocab=vocab, context=context)


# ----------------------------------------------------------------------------------------------
# Learner: Alpha's schedule, AdamW and clip (alpha-learn)

PEAK_LR = 1e-3
WARMUP = 100
FLOOR = 0.1
BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1
CLIP = 1.0


def lr_at(step: int, total: int, peak: float = PEAK_LR, warmup: int = WARMUP, floor: float = FLOOR) -> float:
    """Learning rate of update `step` (from 1): `Schedule::WarmupCosine` with total = max(total, 101)."""
    total = max(total, warmup + 1)
    lo = peak * floor
    if step < warmup:
        return peak * step / warmup
    if step >= total:
        return lo
    span = max(total - warmup, 1)
    progress = (step - warmup) / span
    return lo + 0.5 * (peak - lo) * (1.0 + math.cos(math.pi * progress))


# ----------------------------------------------------------------------------------------------
# safetensors, by hand (F32 and BF16 read; F32 written)

_ST_DTYPES = {"F32": ("f", 4), "BF16": (None, 2), "F16": ("e", 2), "I32": ("i", 4), "I64": ("q", 8)}


def read_safetensors_header(path: str):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {}) or {}
    return header, meta, 8 + n


def load_safetensors(path: str, names=None, skip_suffixes=(".adam_m", ".adam_v")):
    """{name: torch.Tensor (float32, CPU)} and the metadata (optimizer moments skipped). Needs torch."""
    header, meta, base = read_safetensors_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            if name.endswith(skip_suffixes):
                continue
            start, end = info["data_offsets"]
            f.seek(base + start)
            raw = bytearray(f.read(end - start))
            dt = info["dtype"]
            if dt == "F32":
                t = torch.frombuffer(raw, dtype=torch.float32) if raw else torch.empty(0)
            elif dt == "BF16":
                t = torch.frombuffer(raw, dtype=torch.bfloat16).float() if raw else torch.empty(0)
            elif dt == "F16":
                t = torch.frombuffer(raw, dtype=torch.float16).float() if raw else torch.empty(0)
            else:
                raise ValueError(f"{path}: tensor {name} has dtype {dt}; expected F32")
            out[name] = t.reshape(info["shape"]).clone()
    return out, meta


def save_safetensors(path: str, tensors: dict, meta: dict | None = None):
    """Writes F32 tensors ({name: torch.Tensor or (shape, array('f'))}) in name order."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if isinstance(t, tuple):
            shape, values = t
            blob = array("f", values).tobytes()
        else:
            t = t.detach().to("cpu", torch.float32).contiguous()
            shape = list(t.shape)
            blob = ctypes.string_at(t.data_ptr(), t.numel() * 4) if t.numel() else b""
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if meta:
        header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# Alpha's prepared token directory (crates/alpha-data: shard.rs, stream.rs)

MAGIC = b"ALPHATOK"
HEADER_LEN = 64


class TokenSplit:
    """One split of a prepared directory read as a single sequence of u16 tokens."""

    def __init__(self, data_dir: str, split: str):
        with open(os.path.join(data_dir, "manifest.json")) as f:
            manifest = json.load(f)
        self.vocab = int(manifest["tokenizer"]["vocab_size"])
        self.eot = int(manifest["tokenizer"].get("eot_id", 0))
        self.shards = []  # (path, start, tokens)
        start = 0
        for s in manifest[split]["shards"]:
            path = os.path.join(data_dir, s["file"])
            with open(path, "rb") as f:
                h = f.read(HEADER_LEN)
            if len(h) < HEADER_LEN or h[:8] != MAGIC:
                raise ValueError(f"{path}: not an Alpha token shard (bad magic)")
            version, vocab, tokens, eot = struct.unpack("<IIQI", h[8:28])
            if version != 1:
                raise ValueError(f"{path}: shard version {version}, expected 1")
            if vocab != self.vocab:
                raise ValueError(f"{path}: vocabulary {vocab}, manifest says {self.vocab}")
            if tokens != int(s["tokens"]) or os.path.getsize(path) != HEADER_LEN + 2 * tokens:
                raise ValueError(f"{path}: holds the wrong number of tokens (truncated copy?)")
            self.shards.append((path, start, tokens))
            start += tokens
        if start == 0:
            raise ValueError(f"{data_dir}: the {split} split holds no tokens")
        self.total = start
        self._files = {}

    def read_at(self, start: int, n: int) -> list:
        if start + n > self.total:
            raise ValueError("read past the end of the split")
        out = array("H")
        pos = start
        for path, s0, count in self.shards:
            if pos >= s0 + count or len(out) == n:
                continue
            off = pos - s0
            take = min(count - off, n - len(out))
            f = self._files.get(path) or self._files.setdefault(path, open(path, "rb"))
            f.seek(HEADER_LEN + 2 * off)
            chunk = array("H")
            chunk.frombytes(f.read(2 * take))
            out.extend(chunk)
            pos += take
        if sys.byteorder != "little":
            out.byteswap()
        return out.tolist()

    def windows_per_epoch(self, length: int) -> int:
        if length < 2 or self.total < length:
            return 0
        return (self.total - 1) // (length - 1)

    def heldout_windows(self, length: int, max_windows: int) -> list:
        """stream.rs::heldout_windows: all windows if at most max, else window i·n/max."""
        n = self.windows_per_epoch(length)
        if n == 0:
            raise ValueError(f"the split ({self.total} tokens) is shorter than one window of {length}")
        count = min(n, max_windows)
        out = []
        for i in range(count):
            w = i if count == n else i * n // count
            out.append(self.read_at(w * (length - 1), length))
        return out


class TrainStream:
    """stream.rs::fill_window: windows of T+1 tokens, stride T, wrapping at the end."""

    def __init__(self, split: TokenSplit, position: int = 0, epoch: int = 0):
        self.split = split
        self.position = position
        self.epoch = epoch

    def next_window(self, length: int) -> list:
        if self.position + length > self.split.total:
            self.position = 0
            self.epoch += 1
        w = self.split.read_at(self.position, length)
        self.position += length - 1
        return w


def write_synthetic_data(out_dir: str, vocab: int, train_tokens: int, valid_tokens: int, seed: int):
    """A prepared directory in Alpha's format holding random tokens (for smoke tests)."""
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(seed)
    manifest = {
        "format": "alpha-token-shards",
        "version": 1,
        "tokenizer": {"kind": "synthetic", "vocab_size": vocab, "eot_id": 0, "sha256": "0" * 64},
    }
    for split, n in (("train", train_tokens), ("valid", valid_tokens)):
        name = f"{split}-0000.tok"
        toks = array("H", (rng.randrange(vocab) for _ in range(n)))
        if sys.byteorder != "little":
            toks.byteswap()
        header = MAGIC + struct.pack("<IIQII", 1, vocab, n, 0, 0) + b"\0" * 32
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(header)
            f.write(toks.tobytes())
        manifest[split] = {"tokens": n, "shards": [{"file": name, "tokens": n}]}
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


# ----------------------------------------------------------------------------------------------
# The model

if torch is not None:

    class Weight(nn.Module):
        """Holds one tensor as `.weight` (and optionally `.bias`), so parameter names match Alpha's."""

        def __init__(self, *shape, bias_shape=None):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(*shape))
            if bias_shape is not None:
                self.bias = nn.Parameter(torch.empty(*bias_shape))

    class Attn(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.qkv = Weight(c, 3 * c)  # x @ W, stored in x out
            self.out = Weight(c, c)

    class FFN(nn.Module):
        def __init__(self, c, f):
            super().__init__()
            self.gate = Weight(c, f)
            self.up = Weight(c, f)
            self.down = Weight(f, c)

    def rotary(x, cos, sin):
        """Half-split rotary on [B, T, H, D] in f32: (x_i, x_{i+D/2}) rotated by t·base^(-2i/D)."""
        d = x.shape[-1] // 2
        x = x.float()
        x1, x2 = x[..., :d], x[..., d:]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    class Block(nn.Module):
        def __init__(self, cfg: Config):
            super().__init__()
            c = cfg.width
            self.cfg = cfg
            self.ln1 = Weight(c, bias_shape=(c,))
            self.attn = Attn(c)
            self.ln2 = Weight(c, bias_shape=(c,))
            self.ffn = FFN(c, cfg.ffn)

        def forward(self, x, cos, sin):
            cfg = self.cfg
            b, t, c = x.shape
            h, d = cfg.heads, cfg.head_dim
            a = F.layer_norm(x, (c,), self.ln1.weight, self.ln1.bias, cfg.ln_eps)
            qkv = (a @ self.attn.qkv.weight).view(b, t, 3, h, d)  # columns: (q/k/v, head, dim)
            q, k, v = qkv.unbind(2)
            q = rotary(q, cos, sin).to(v.dtype).transpose(1, 2)
            k = rotary(k, cos, sin).to(v.dtype).transpose(1, 2)
            v = v.transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(d))
            o = o.transpose(1, 2).reshape(b, t, c)
            x = x + o @ self.attn.out.weight
            bn = F.layer_norm(x, (c,), self.ln2.weight, self.ln2.bias, cfg.ln_eps)
            hidden = F.gelu(bn @ self.ffn.gate.weight, approximate="tanh") * (bn @ self.ffn.up.weight)
            return x + hidden @ self.ffn.down.weight

    class Head(nn.Module):
        """Final LayerNorm, tied logits and the mean cross-entropy (losses per position if asked)."""

        def __init__(self, cfg: Config):
            super().__init__()
            self.cfg = cfg
            self.ln_f = Weight(cfg.width, bias_shape=(cfg.width,))

        def forward(self, x, embed, targets, reduction: str = "mean"):
            c = self.cfg.width
            hf = F.layer_norm(x, (c,), self.ln_f.weight, self.ln_f.bias, self.cfg.ln_eps)
            logits = hf @ embed.t()
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction=reduction)

    class Coppelius(nn.Module):
        def __init__(self, cfg: Config, amp: bool = True):
            super().__init__()
            self.cfg = cfg
            self.amp = amp
            self.embed = Weight(cfg.vocab, cfg.width)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.blocks))
            self.head = Head(cfg)
            d = cfg.head_dim
            pos = torch.arange(cfg.context, dtype=torch.float64)
            inv = cfg.rope_base ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
            theta = pos[:, None] * inv[None, :]  # [T, D/2], in f64 as Alpha's reference does
            self.register_buffer("rope_cos", theta.cos().float().view(cfg.context, 1, d // 2), persistent=False)
            self.register_buffer("rope_sin", theta.sin().float().view(cfg.context, 1, d // 2), persistent=False)

        def forward(self, tokens, targets, reduction: str = "mean"):
            t = tokens.shape[1]
            cos, sin = self.rope_cos[:t], self.rope_sin[:t]
            # cache_enabled=False: the autocast weight cache must be off inside a captured CUDA graph
            # (and each weight is cast once a step anyway).
            with torch.autocast(device_type=tokens.device.type, dtype=torch.bfloat16, enabled=self.amp,
                                cache_enabled=False):
                x = F.embedding(tokens, self.embed.weight)
                for blk in self.blocks:
                    x = blk(x, cos, sin)
                return self.head(x, self.embed.weight, targets, reduction)

    def alpha_names(model) -> list:
        return [n for n, _ in model.named_parameters()]

    def init_tensors(cfg: Config, seed: int) -> dict:
        """Alpha's initializer in distribution (N(0, 0.02); residual outputs / √(2·blocks); LN 1, 0)."""
        g = torch.Generator().manual_seed(seed)
        std, resid = 0.02, 0.02 / math.sqrt(2 * cfg.blocks)
        model = Coppelius(cfg)
        out = {}
        for name, p in model.named_parameters():
            if p.dim() == 1:  # LayerNorm gains 1, biases 0
                out[name] = torch.zeros(p.shape) if name.endswith(".bias") else torch.ones(p.shape)
            else:
                s = resid if name.endswith(("attn.out.weight", "ffn.down.weight")) else std
                out[name] = torch.randn(p.shape, generator=g) * s
        return {to_alpha_name(k): v for k, v in out.items()}

    def to_alpha_name(name: str) -> str:
        # The module tree nests ln_f under head; Alpha's checkpoint calls it `ln_f.*`.
        return name[len("head."):] if name.startswith("head.") else name

    def from_alpha_name(name: str) -> str:
        return "head." + name if name.startswith("ln_f.") else name

    def load_into(model, tensors: dict, source: str, rename=None):
        """Copy `tensors` (by Alpha's names) into `model`; `rename` turns a parameter's name in
        the model into Alpha's (default `to_alpha_name`, Coppelius's and GPT-2's module tree)."""
        want = {(rename or to_alpha_name)(n): p for n, p in model.named_parameters()}
        missing = sorted(set(want) - set(tensors))
        if missing:
            raise ValueError(f"{source}: lacks {len(missing)} parameters, e.g. {missing[:3]}")
        with torch.no_grad():
            for name, p in want.items():
                t = tensors[name]
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"{source}: {name} is {list(t.shape)}, the model expects {list(p.shape)}")
                p.copy_(t)

    def make_optimizer(model, device, graph_safe: bool = False):
        """torch.optim.AdamW with Alpha's groups: decay 0.1 on rank >= 2 (embedding too), none else."""
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        cuda = device.type == "cuda"
        lr = torch.tensor(PEAK_LR, device=device) if graph_safe else PEAK_LR
        groups = [
            {"params": decay, "weight_decay": WEIGHT_DECAY, "lr": lr},
            {"params": rest, "weight_decay": 0.0, "lr": lr},
        ]
        kw = dict(betas=BETAS, eps=EPS)
        if cuda:
            kw.update(fused=True, capturable=graph_safe)
        else:
            kw.update(foreach=True)
        return torch.optim.AdamW(groups, lr=lr, **kw)

    def set_lr(opt, lr: float):
        for g in opt.param_groups:
            if torch.is_tensor(g["lr"]):
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr

    def clip_(params, max_norm: float = CLIP):
        """Global-norm clip as Alpha does it: g *= min(1, c / max(norm, 1e-6)); returns the norm.
        No host synchronisation, so it can live inside a CUDA graph."""
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        scale = torch.clamp(max_norm / torch.clamp(norm, min=1e-6), max=1.0)
        torch._foreach_mul_(grads, scale)
        return norm

    def train_step(fwd, params, opt, tokens, targets):
        """Forward, backward, clip, AdamW. (zero_grad is the caller's: outside a captured graph.)"""
        loss = fwd(tokens, targets)
        loss.backward()
        norm = clip_(params)
        opt.step()
        return loss.detach(), norm


# ----------------------------------------------------------------------------------------------
# Scoring


def heldout_loss(model, split: TokenSplit, cfg: Config, windows: int, device, batch: int = 8) -> dict:
    ws = split.heldout_windows(cfg.context + 1, windows)
    nll, tokens = 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(ws), batch):
            chunk = torch.tensor(ws[i : i + batch], dtype=torch.long, device=device)
            losses = model(chunk[:, :-1], chunk[:, 1:], reduction="none")
            nll += losses.double().sum().item()
            tokens += losses.numel()
    model.train(was_training)
    return {"loss": nll / tokens, "windows": len(ws), "tokens": tokens}


ATTENTION = ("flash", "cudnn", "auto")


def configure_attention(choice: str, device) -> None:
    """Which SDPA backend CUDA runs. "flash" (the default) allows only PyTorch's FlashAttention
    kernels, so a step fails rather than falling back; "cudnn" only cuDNN's attention (which
    PyTorch 2.11 picks by default on an H200); "auto" leaves PyTorch's own choice."""
    if device.type != "cuda" or choice == "auto":
        return
    torch.backends.cuda.enable_flash_sdp(choice == "flash")
    torch.backends.cuda.enable_cudnn_sdp(choice == "cudnn")
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_math_sdp(False)


def pick_device(name: str, attention: str = "flash"):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    configure_attention(attention, device)
    return device


def check_vocab(cfg: Config, split: TokenSplit, data_dir: str):
    if split.vocab != cfg.vocab:
        raise ValueError(f"{data_dir}: vocabulary {split.vocab}, the model's is {cfg.vocab}")


def load_checkpoint_model(path: str, context: int, device, amp: bool):
    tensors, meta = load_safetensors(path)
    shapes = {k: list(v.shape) for k, v in tensors.items()}
    cfg = config_from_tensors(shapes, context)
    model = Coppelius(cfg, amp=amp)
    load_into(model, tensors, path)
    return model.to(device), cfg, meta


def default_context(args) -> int:
    return args.context or (TINY["context"] if args.tiny else 1024)


# ----------------------------------------------------------------------------------------------
# Subcommands


def score_result(args, meta: dict, s: dict, device) -> dict:
    """`score`'s JSON: the checkpoint, the step its metadata gives, its held-out loss."""
    return {
        "checkpoint": args.checkpoint,
        "step": int(meta.get("step", 0) or 0),
        "loss": s["loss"],
        "windows": s["windows"],
        "tokens": s["tokens"],
        "device": str(device),
        "precision": args.precision,
    }


def cmd_score(args) -> dict:
    device = pick_device(args.device, args.attention)
    amp = args.precision == "bf16"
    model, cfg, meta = load_checkpoint_model(args.checkpoint, default_context(args), device, amp)
    split = TokenSplit(args.data, "valid")
    check_vocab(cfg, split, args.data)
    s = heldout_loss(model, split, cfg, args.windows, device, args.eval_batch)
    return score_result(args, meta, s, device)


def cmd_train(args) -> dict:
    device = pick_device(args.device, args.attention)
    amp = args.precision == "bf16"
    model, cfg, meta = load_checkpoint_model(args.init, default_context(args), device, amp)
    if int(meta.get("step", 0) or 0) != 0:
        log(f"note: {args.init} is at step {meta.get('step')}; training restarts from update 1, fresh moments")
    log(f"model: {asdict(cfg)}, {sum(p.numel() for p in model.parameters()):,} parameters, {device}, {args.precision}")
    train = TokenSplit(args.data, "train")
    valid = TokenSplit(args.data, "valid")
    check_vocab(cfg, train, args.data)
    stream = TrainStream(train)
    params = list(model.parameters())
    opt = make_optimizer(model, device)
    total = args.total or args.steps
    fwd = torch.compile(model) if args.compile else model
    t_len, b = cfg.context, args.batch
    out = open(args.out, "w")
    first = last = float("nan")
    t0 = time.perf_counter()
    heldout = None
    for step in range(1, args.steps + 1):
        lr = lr_at(step, total)
        set_lr(opt, lr)
        ws = torch.tensor([stream.next_window(t_len + 1) for _ in range(b)], dtype=torch.long)
        ws = ws.to(device, non_blocking=True)
        loss, norm = train_step(fwd, params, opt, ws[:, :-1], ws[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss, norm = loss.item(), norm.item()
        if not math.isfinite(loss):
            raise RuntimeError(f"loss became non-finite ({loss}) at step {step}")
        first = loss if step == 1 else first
        last = loss
        row = {"step": step, "loss": loss, "lr": lr, "grad_norm": norm, "tokens": step * b * t_len}
        if args.heldout_every and step % args.heldout_every == 0 and step != args.steps:
            row["heldout_loss"] = heldout_loss(model, valid, cfg, args.heldout_windows, device, args.eval_batch)["loss"]
        out.write(json.dumps(row) + "\n")
        out.flush()
        if step % max(1, args.steps // 10) == 0 or step == 1:
            log(f"step {step}/{args.steps}  loss {loss:.4f}  lr {lr:.3e}  |g| {norm:.3f}")
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if args.heldout_windows > 0:
        heldout = heldout_loss(model, valid, cfg, args.heldout_windows, device, args.eval_batch)
        out.write(json.dumps({"step": args.steps, "heldout_loss": heldout["loss"], "heldout_windows": heldout["windows"],
                              "heldout_tokens": heldout["tokens"]}) + "\n")
    out.close()
    if args.save:
        tensors = {to_alpha_name(n): p for n, p in model.named_parameters()}
        save_safetensors(args.save, tensors, {"format": "coppelius-torch", "step": args.steps})
    return {
        "steps": args.steps,
        "batch": b,
        "total": max(total, WARMUP + 1),
        "first_loss": first,
        "last_loss": last,
        "heldout_loss": heldout["loss"] if heldout else None,
        "heldout_windows": heldout["windows"] if heldout else 0,
        "cursor": {"position": stream.position, "epoch": stream.epoch},
        "ms_per_step": 1e3 * wall / args.steps,
        "tokens_per_s": args.steps * b * t_len / wall,
        "device": str(device),
        "precision": args.precision,
        "out": args.out,
    }


def cmd_init(args) -> dict:
    if torch is None:
        raise RuntimeError("init needs PyTorch")
    cfg = config_from_args(args)
    tensors = init_tensors(cfg, args.seed)
    save_safetensors(args.out, tensors, {"format": "coppelius-torch-init", "system": "coppelius", "step": 0, "seed": args.seed})
    return {"out": args.out, "parameters": sum(t.numel() for t in tensors.values()), "config": asdict(cfg)}


def cmd_synth_data(args) -> dict:
    write_synthetic_data(args.out, args.vocab, args.train_tokens, args.valid_tokens, args.seed)
    return {"out": args.out, "vocab": args.vocab, "train_tokens": args.train_tokens, "valid_tokens": args.valid_tokens}


# ---- bench -------------------------------------------------------------------------------------

SETTINGS = ("eager", "graph", "compile", "compile+graph")


def attention_kernels(run_once) -> list:
    """Names of the attention kernels one step launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run_once()
        torch.cuda.synchronize()
    names = set()
    for e in prof.events():
        n = e.name
        if any(s in n.lower() for s in ("flash", "fmha", "attention", "sdpa", "attn")):
            names.add(n if len(n) <= 100 else n[:97] + "...")
    return sorted(names)


def bench_setting(name, cfg, state, batches, args, device, build=None, make_opt=None, step_fn=None) -> dict:
    """One setting's timing. `build()` makes the model (default: Coppelius of `cfg`); any model
    whose forward is `(tokens, targets) -> mean loss`, with `blocks` and `head` for
    `--compile-scope blocks`, and whose parameters `state` names, can be timed.
    `make_opt(model, device, graph_safe)` makes its optimizer (default: Alpha's AdamW groups);
    it must take `set_lr`, `step()` and `zero_grad(set_to_none=True)`, with tensor rates and
    no host synchronisation when `graph_safe`. `step_fn(fwd, params, opt, tokens, targets)` is
    one training step returning (loss, gradient norm) (default `train_step`: Alpha's clip, then
    the optimizer); a learner without a clip passes its own."""
    one_step = step_fn or train_step
    use_graph = name in ("graph", "compile+graph")
    compiled = name in ("compile", "compile+graph")
    t_setup = time.perf_counter()
    model = (build or (lambda: Coppelius(cfg, amp=args.precision == "bf16")))().to(device)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(state[n])
    params = list(model.parameters())
    opt = (make_opt or make_optimizer)(model, device, graph_safe=use_graph)
    fwd = model
    if compiled:
        # Inside a whole-step graph, PyTorch's own graphs must stay off; max-autotune's kernel
        # search takes minutes a shape, so it is a choice (--graph-compile-mode).
        mode = (None if args.graph_compile_mode == "default" else args.graph_compile_mode) if use_graph else None
        if args.compile_scope == "blocks":
            for blk in model.blocks:
                blk.compile(mode=mode)
            model.head.compile(mode=mode)
        else:
            fwd = torch.compile(model, mode=mode)
    cuda = device.type == "cuda"
    static_x = batches[0][0].clone()
    static_y = batches[0][1].clone()
    lr = lr_at(50, 1000)  # any mid-warm-up rate; the value does not change the cost
    set_lr(opt, lr)

    def load(i):
        x, y = batches[i % len(batches)]
        static_x.copy_(x, non_blocking=True)
        static_y.copy_(y, non_blocking=True)

    if use_graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(max(3, args.warmup)):
                load(i)
                opt.zero_grad(set_to_none=True)
                one_step(fwd, params, opt, static_x, static_y)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)  # backward allocates .grad from the graph's pool
        with torch.cuda.graph(graph):
            g_loss, g_norm = one_step(fwd, params, opt, static_x, static_y)

        def step(i):
            load(i)
            set_lr(opt, lr)  # a device tensor: fill_ is a plain copy outside the graph
            graph.replay()

        for i in range(2):
            step(i)
    else:
        graph = None

        def step(i):
            load(i)
            set_lr(opt, lr)
            one_step(fwd, params, opt, static_x, static_y)
            opt.zero_grad(set_to_none=True)

        for i in range(args.warmup):
            step(i)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    setup_s = time.perf_counter() - t_setup
    rounds = []
    for r in range(args.repeats):
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for i in range(args.steps):
                step(i)
            e1.record()
            e1.synchronize()
            rounds.append(e0.elapsed_time(e1) / args.steps)
        else:
            t0 = time.perf_counter()
            for i in range(args.steps):
                step(i)
            rounds.append(1e3 * (time.perf_counter() - t0) / args.steps)
    rounds.sort()
    ms = rounds[len(rounds) // 2]
    res = {
        "ms_per_step": ms,
        "tokens_per_s": batches[0][0].numel() / (ms / 1e3),
        "ms_min": rounds[0],
        "ms_max": rounds[-1],
        "rounds": len(rounds),
        "steps_per_round": args.steps,
        "setup_s": setup_s,
    }
    if use_graph:
        sync()
        res["loss"] = float(g_loss.item())
    if cuda and not args.no_profile:
        try:
            res["attention_kernels"] = attention_kernels(lambda: step(0))
        except Exception as e:  # the profiler is a check, not the measurement
            res["attention_kernels_error"] = f"{type(e).__name__}: {e}"
    del graph, opt, model, fwd, params
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return res


def flash_check(cfg, device, build=None) -> dict:
    """One forward and backward of the eager model (`build()`, default Coppelius) with only the
    flash backend allowed: this says whether PyTorch can use flash attention for the model's
    shapes on this GPU."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = (build or (lambda: Coppelius(cfg)))().to(device)
    x = torch.randint(0, cfg.vocab, (1, cfg.context), device=device)
    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            model(x, x).backward()
        torch.cuda.synchronize()
        ok, err = True, None
    except Exception as e:
        ok, err = False, f"{type(e).__name__}: {str(e)[:300]}"
    del model
    torch.cuda.empty_cache()
    return {"flash_only_step": ok, **({"flash_error": err} if err else {})}


def cmd_bench(args) -> dict:
    return run_bench(args, config_from_args(args), "Coppelius", init_tensors)


class SettingTimeout(Exception):
    """A setting (its compile and its timed steps) ran past `--setting-timeout-s`."""


class time_limit:
    """Raises SettingTimeout in the main thread once `seconds` have passed (0: no limit). Why:
    torch.compile of a large step can run for many minutes (Diakosmos's did not finish in
    300 s on the H200), and the settings after it, and the result, would never come."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def _expire(self, signum, frame):
        raise SettingTimeout(f"ran past its {self.seconds:g} s limit (--setting-timeout-s)")

    def __enter__(self):
        if self.seconds > 0:
            self.previous = signal.signal(signal.SIGALRM, self._expire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        if self.seconds > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
        return False


def run_bench(args, cfg, title: str, init, build=None, make_opt=None, rename=None, step_fn=None) -> dict:
    """The `bench` subcommand for any model: `init(cfg, seed)` gives its initial tensors by
    Alpha's names, `build()` makes it (default Coppelius); `cfg` has `vocab`, `context` and
    `parameter_count()`. `make_opt` is `bench_setting`'s; `rename` turns an Alpha name into the
    model's parameter name (default Coppelius's `from_alpha_name`); `step_fn` is
    `bench_setting`'s. Times each of `--settings`,
    prints the table and returns the JSON."""
    device = pick_device(args.device, args.attention)
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    for s in settings:
        if s not in SETTINGS:
            raise ValueError(f"unknown setting {s!r}; choose from {','.join(SETTINGS)}")
    if device.type != "cuda":
        dropped = [s for s in settings if "graph" in s]
        settings = [s for s in settings if "graph" not in s]
        if dropped:
            log(f"no CUDA: skipping {','.join(dropped)}")
    torch.manual_seed(args.seed)
    state = {(rename or from_alpha_name)(k): v.to(device) for k, v in init(cfg, args.seed).items()}
    g = torch.Generator().manual_seed(args.seed)
    batches = []
    for _ in range(4):
        w = torch.randint(0, cfg.vocab, (args.batch, cfg.context + 1), generator=g)
        batches.append((w[:, :-1].contiguous().to(device), w[:, 1:].contiguous().to(device)))
    info = {
        "batch": args.batch,
        "context": cfg.context,
        "tokens_per_step": args.batch * cfg.context,
        "parameters": cfg.parameter_count(),
        "config": asdict(cfg),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "compile_scope": args.compile_scope,
        "attention": args.attention,
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
    }
    if device.type == "cuda" and not args.no_profile:
        info.update(flash_check(cfg, device, build))
    results = {}
    deadline = time.perf_counter() + args.deadline_s if args.deadline_s else None
    for s in settings:
        if deadline and time.perf_counter() > deadline:
            results[s] = {"skipped": "deadline"}
            continue
        log(f"[B={args.batch}] {s} ...")
        try:
            with time_limit(args.setting_timeout_s):
                results[s] = bench_setting(s, cfg, state, batches, args, device, build, make_opt, step_fn)
            log(f"[B={args.batch}] {s}: {results[s]['ms_per_step']:.3f} ms/step (setup {results[s]['setup_s']:.1f} s)")
        except Exception as e:
            results[s] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            log(f"[B={args.batch}] {s} failed: {results[s]['error']}")
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if args.partial:
            with open(args.partial, "w") as f:
                json.dump({**info, "settings": results}, f)
        torch._dynamo.reset()
    timed = {k: v for k, v in results.items() if "ms_per_step" in v}
    best = min(timed, key=lambda k: timed[k]["ms_per_step"]) if timed else None
    print(f"{title}, PyTorch {info['torch']} on {info['device']}: batch {args.batch} x {cfg.context} tokens")
    print(f"{'setting':<15}{'ms/step':>10}{'tokens/s':>12}{'vs best':>9}")
    for k, v in results.items():
        if "ms_per_step" in v:
            ratio = v["ms_per_step"] / timed[best]["ms_per_step"]
            print(f"{k:<15}{v['ms_per_step']:>10.3f}{v['tokens_per_s']:>12.0f}{ratio:>8.2f}x")
        else:
            print(f"{k:<15}  {v.get('error') or v.get('skipped')}")
    return {**info, "settings": results, "best": best,
            "best_ms_per_step": timed[best]["ms_per_step"] if best else None}


# ----------------------------------------------------------------------------------------------


def add_common_args(sp, model=True, tiny_help="2 blocks of width 128, context 64: a smoke test", context=True):
    """The options every subcommand that runs a model takes (`--context` where the model's
    context is not read off a checkpoint)."""
    sp.add_argument("--device", default="auto", help="cuda, cpu or auto (cuda when present)")
    sp.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="bf16 autocast for matrix products (default) or plain fp32")
    if context:
        sp.add_argument("--context", type=int, default=None, help="tokens a window (default 1024; 64 with --tiny)")
    sp.add_argument("--attention", choices=ATTENTION, default="flash",
                    help="SDPA backend on CUDA: flash (PyTorch's FlashAttention only; default), cudnn, auto")
    if model:
        sp.add_argument("--tiny", action="store_true", help=tiny_help)


def add_bench_args(b):
    """`bench`'s options beyond the common ones (`run_bench` reads them)."""
    b.add_argument("--batch", type=int, default=1)
    b.add_argument("--steps", type=int, default=30, help="timed steps a round")
    b.add_argument("--warmup", type=int, default=10)
    b.add_argument("--repeats", type=int, default=3, help="timed rounds; the median round is reported")
    b.add_argument("--settings", default=",".join(SETTINGS))
    b.add_argument("--compile-scope", choices=("model", "blocks"), default="model",
                   help="torch.compile the whole model (default) or each block and the head separately")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--graph-compile-mode", default="max-autotune-no-cudagraphs",
                   help="torch.compile mode under the whole-step graph: max-autotune-no-cudagraphs or default")
    b.add_argument("--no-profile", action="store_true", help="skip the flash-attention checks")
    b.add_argument("--deadline-s", type=float, default=0, help="skip settings not started by then (0: none)")
    b.add_argument("--setting-timeout-s", type=float, default=900,
                   help="stop a setting (compile and timing) that runs longer, record why, go on "
                        "(default 900, so that a compile that never finishes cannot keep the bench from ending; "
                        "0: no limit)")
    b.add_argument("--partial", default=None, help="rewrite this JSON file after each setting")


def add_synth_data_parser(sub, vocab: int):
    d = sub.add_parser("synth-data", help="write a prepared token directory of random tokens (smoke tests)")
    d.add_argument("--out", required=True)
    d.add_argument("--vocab", type=int, default=vocab)
    d.add_argument("--train-tokens", type=int, default=200_000)
    d.add_argument("--valid-tokens", type=int, default=20_000)
    d.add_argument("--seed", type=int, default=1)


def run_command(cmds: dict, args, without_torch=("synth-data",)) -> int:
    """Runs `cmds[args.cmd]` and prints its result as the last stdout line (JSON); on a failure
    the traceback goes to stderr, {"error": ...} to stdout, and the status is 1. A result that
    says `"passed": false` (a check whose target is missed) is printed, and the status is 1."""
    try:
        if torch is None and args.cmd not in without_torch:
            raise RuntimeError("PyTorch is not installed (python3 -c 'import torch' fails)")
        result = cmds[args.cmd](args)
    except Exception as e:
        import traceback

        traceback.print_exc(file=sys.stderr)
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 1 if result.get("passed") is False else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    common = add_common_args

    b = sub.add_parser("bench", help="time one whole training step in several settings")
    common(b)
    add_bench_args(b)

    t = sub.add_parser("train", help="train from an Alpha checkpoint on Alpha's windows; loss per step")
    common(t, model=False)
    t.add_argument("--tiny", action="store_true", help="context 64 (the geometry comes from the checkpoint)")
    t.add_argument("--init", required=True, help="Alpha's initial checkpoint (.safetensors)")
    t.add_argument("--data", required=True, help="Alpha's prepared token directory")
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--batch", type=int, default=1)
    t.add_argument("--total", type=int, default=None, help="the schedule's horizon (default --steps)")
    t.add_argument("--heldout-windows", type=int, default=64)
    t.add_argument("--heldout-every", type=int, default=0, help="also score held-out every K steps")
    t.add_argument("--eval-batch", type=int, default=8)
    t.add_argument("--compile", action="store_true", help="torch.compile the model (default eager)")
    t.add_argument("--save", default=None, help="write the final parameters here (safetensors)")
    t.add_argument("--out", required=True, help="JSON lines: one a step, then the held-out loss")

    s = sub.add_parser("score", help="held-out loss of an Alpha checkpoint")
    common(s, model=False)
    s.add_argument("--tiny", action="store_true", help="context 64")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--windows", type=int, default=64)
    s.add_argument("--eval-batch", type=int, default=8)

    i = sub.add_parser("init", help="write a random initial checkpoint in Alpha's names (for smoke tests)")
    i.add_argument("--tiny", action="store_true")
    i.add_argument("--context", type=int, default=None)
    i.add_argument("--seed", type=int, default=1)
    i.add_argument("--out", required=True)

    add_synth_data_parser(sub, 12288)

    args = p.parse_args(argv)
    cmds = {"bench": cmd_bench, "train": cmd_train, "score": cmd_score, "init": cmd_init, "synth-data": cmd_synth_data}
    return run_command(cmds, args)


if __name__ == "__main__":
    sys.exit(main())
