#!/usr/bin/env python3
"""An independent PyTorch GPT-2 small (SYSTEMS.md §8), written from `systems/gpt2.rs` without
sharing code with Alpha.

Two jobs, as `coppelius_torch.py` does them for Coppelius:

* learning equivalence: `train` starts from one of Alpha's safetensors checkpoints (the step-0
  checkpoint of `alpha train gpt2 --save-initial`), trains on the same token windows in the same
  order with the same learner, update size and schedule, writes the loss of every update and
  ends with the held-out loss on the same windows Alpha scores; `score` gives the held-out loss
  of any Alpha checkpoint.
* the speed baseline: `bench` times one whole training step (forward, backward, clip, AdamW,
  zero_grad) in the four settings eager, whole-step CUDA graph, torch.compile, and torch.compile
  inside a whole-step CUDA graph. `alpha bench gpt2` runs it as a subprocess.

Every subcommand prints exactly one JSON object on its LAST line of stdout (progress goes to
stderr; `bench` prints a table before the JSON). Exit status 0 means that JSON is a result; on a
failure the last line is {"error": "..."} and the status is 1.

The model is Alpha's: 12 pre-LN blocks of width 768 with 12 heads of 64, context 1,024, learned
positions, a bias on every linear, LayerNorm with gain and bias (eps 1e-5), tanh-GELU MLP of
4 x 768, an embedding of 50,304 rows (the 50,257-token vocabulary rounded up to a multiple of 128)
tied to the head, whose logits are sliced back to the vocabulary before the loss, so the padded
rows never enter the softmax. Parameters are named and shaped as in Alpha's checkpoints
(`wte.weight` [50304, 768], `blocks.{i}.attn.qkv.weight` [768, 2304] used as x @ W, ...,
`ln_f.bias`), so a checkpoint loads with no transposes. Matrix products take bf16 operands under
autocast as Alpha's take bf16 operands; a product's bias is added in f32 (bf16 + f32 promotes),
so the biases, GELU, LayerNorm, residual stream and loss are f32 as in Alpha's graph.

The data and checkpoint readers, Alpha's AdamW groups and clip, and the timing harness are
model-independent and come from `coppelius_torch.py` beside this file; nothing outside the
standard library and PyTorch is needed, and `synth-data` and the readers work without PyTorch.
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


# ----------------------------------------------------------------------------------------------
# Configuration


@dataclass
class Config:
    layers: int = 12
    width: int = 768
    heads: int = 12
    vocab: int = 50257
    context: int = 1024
    ln_eps: float = 1e-5

    @property
    def rows(self) -> int:
        """Rows of the embedding table: the vocabulary rounded up to a multiple of 128, as
        Alpha's `Gpt2::padded_vocab` (whole 128-wide tiles for the head's products)."""
        return padded_rows(self.vocab)

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def parameter_count(self) -> int:
        """Stored parameters, the padded rows included (GPT-2 small: 124,475,904)."""
        c = self.width
        per_block = 2 * 2 * c + (c * 3 * c + 3 * c) + (c * c + c) + (c * 4 * c + 4 * c) + (4 * c * c + c)
        return self.rows * c + self.context * c + self.layers * per_block + 2 * c


def padded_rows(vocab: int) -> int:
    return -(-vocab // 128) * 128


# A smoke-test geometry: runs on a CPU in seconds, and its vocabulary (1,000 in 1,024 rows) is
# padded as GPT-2's is. Heads are always of 64, as in GPT-2 small.
TINY = dict(layers=2, width=128, heads=2, vocab=1000, context=64)


def config_from_args(args) -> Config:
    cfg = Config(**TINY) if getattr(args, "tiny", False) else Config()
    if getattr(args, "context", None):
        cfg.context = args.context
    return cfg


def config_from_tensors(shapes: dict, vocab: int, source: str) -> Config:
    """Geometry read off a checkpoint's tensor shapes; `vocab` is the data's vocabulary, which
    the embedding's rows must pad exactly as Alpha pads it."""
    for name in ("wte.weight", "wpe.weight", "ln_f.weight"):
        if name not in shapes:
            raise ValueError(f"{source}: no tensor {name}; is this a GPT-2 checkpoint of Alpha's?")
    rows, width = shapes["wte.weight"]
    if rows != padded_rows(vocab):
        raise ValueError(
            f"{source}: the embedding has {rows} rows; a vocabulary of {vocab} tokens pads to {padded_rows(vocab)}"
        )
    layers = 0
    while f"blocks.{layers}.attn.qkv.weight" in shapes:
        layers += 1
    context = shapes["wpe.weight"][0]
    return Config(layers=layers, width=width, heads=max(1, width // 64), vocab=vocab, context=context)


# ----------------------------------------------------------------------------------------------
# Learner: Alpha's gpt2 learner (systems/gpt2.rs, alpha-learn's schedule.rs)

PEAK_LR = 6e-4


def warmup_for(total: int) -> int:
    """Warm-up updates for a horizon of `total`: llm.c's 700 of 18,865, in proportion, at least 1
    (`Gpt2::warmup`)."""
    return max(1, total * 700 // 18_865)


def lr_at(step: int, total: int, peak: float = PEAK_LR) -> float:
    """The rate of update `step` (from 1) for a schedule horizon of `total` updates, as Alpha's
    gpt2 learner sets it: `Schedule::WarmupCosine { warmup: Gpt2::warmup(total), total: max(total, 1),
    floor: 0 }` at peak 6e-4 (`alpha train --lr` sets another), in binary64 as alpha-learn
    computes it."""
    warmup = warmup_for(total)
    total = max(total, 1)
    if step < warmup:
        return peak * step / warmup
    if step >= total:
        return 0.0
    span = max(total - warmup, 1)
    progress = (step - warmup) / span
    return 0.5 * peak * (1.0 + math.cos(math.pi * progress))


# ----------------------------------------------------------------------------------------------
# The model

if torch is not None:
    Weight = ct.Weight

    def linear(x, layer):
        """x @ W + b: under autocast the product is bf16 and the bias add promotes it to f32."""
        return x @ layer.weight + layer.bias

    class Attn(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.qkv = Weight(c, 3 * c, bias_shape=(3 * c,))  # x @ W, stored in x out
            self.proj = Weight(c, c, bias_shape=(c,))

    class MLP(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc = Weight(c, 4 * c, bias_shape=(4 * c,))
            self.proj = Weight(4 * c, c, bias_shape=(c,))

    class Block(nn.Module):
        def __init__(self, cfg: Config, amp: bool):
            super().__init__()
            c = cfg.width
            self.cfg = cfg
            # Alpha's attention takes bf16 q, k, v (f32 sums) where its products take bf16.
            self.attn_dtype = torch.bfloat16 if amp else torch.float32
            self.ln1 = Weight(c, bias_shape=(c,))
            self.attn = Attn(c)
            self.ln2 = Weight(c, bias_shape=(c,))
            self.mlp = MLP(c)

        def forward(self, x):
            cfg = self.cfg
            b, t, c = x.shape
            h, d = cfg.heads, cfg.head_dim
            a = F.layer_norm(x, (c,), self.ln1.weight, self.ln1.bias, cfg.ln_eps)
            qkv = linear(a, self.attn.qkv).view(b, t, 3, h, d)  # columns: (q/k/v, head, dim)
            q, k, v = qkv.unbind(2)
            q = q.to(self.attn_dtype).transpose(1, 2)
            k = k.to(self.attn_dtype).transpose(1, 2)
            v = v.to(self.attn_dtype).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(d))
            x = x + linear(o.transpose(1, 2).reshape(b, t, c), self.attn.proj)
            m = F.layer_norm(x, (c,), self.ln2.weight, self.ln2.bias, cfg.ln_eps)
            return x + linear(F.gelu(linear(m, self.mlp.fc), approximate="tanh"), self.mlp.proj)

    class Head(nn.Module):
        """Final LayerNorm, logits against the tied table sliced to the vocabulary, and the mean
        cross-entropy (losses per position if asked)."""

        def __init__(self, cfg: Config):
            super().__init__()
            self.cfg = cfg
            self.ln_f = Weight(cfg.width, bias_shape=(cfg.width,))

        def forward(self, x, table, targets, reduction: str = "mean"):
            c, v = self.cfg.width, self.cfg.vocab
            hf = F.layer_norm(x, (c,), self.ln_f.weight, self.ln_f.bias, self.cfg.ln_eps)
            logits = (hf @ table.t())[..., :v]  # the padded rows' scores never reach the softmax
            return F.cross_entropy(logits.reshape(-1, v).float(), targets.reshape(-1), reduction=reduction)

    class GPT2(nn.Module):
        def __init__(self, cfg: Config, amp: bool = True):
            super().__init__()
            self.cfg = cfg
            self.amp = amp
            self.wte = Weight(cfg.rows, cfg.width)
            self.wpe = Weight(cfg.context, cfg.width)
            self.blocks = nn.ModuleList(Block(cfg, amp) for _ in range(cfg.layers))
            self.head = Head(cfg)

        def forward(self, tokens, targets, reduction: str = "mean"):
            t = tokens.shape[1]
            # cache_enabled=False: the autocast weight cache must be off inside a captured CUDA
            # graph (and each weight is cast once a step anyway).
            with torch.autocast(device_type=tokens.device.type, dtype=torch.bfloat16, enabled=self.amp,
                                cache_enabled=False):
                x = F.embedding(tokens, self.wte.weight) + self.wpe.weight[:t]
                for blk in self.blocks:
                    x = blk(x)
                return self.head(x, self.wte.weight, targets, reduction)

    def init_tensors(cfg: Config, seed: int) -> dict:
        """Alpha's initializer in distribution, by Alpha's names: N(0, 0.02); the two residual
        projections N(0, 0.02/sqrt(2 layers)); biases 0; LayerNorm gains 1."""
        g = torch.Generator().manual_seed(seed)
        resid = 0.02 / math.sqrt(2 * cfg.layers)
        out = {}
        for name, p in GPT2(cfg).named_parameters():
            name = ct.to_alpha_name(name)
            if name.endswith(".bias"):
                out[name] = torch.zeros(p.shape)
            elif p.dim() == 1:
                out[name] = torch.ones(p.shape)
            else:
                std = resid if name.endswith(("attn.proj.weight", "mlp.proj.weight")) else 0.02
                out[name] = torch.randn(p.shape, generator=g) * std
        return out


# ----------------------------------------------------------------------------------------------
# Checkpoints and data


def load_checkpoint_model(path: str, data_dir: str, device, amp: bool):
    """The model of an Alpha checkpoint (parameters only; optimizer state is not read), its
    geometry from the tensors and the vocabulary from the data's manifest."""
    header, meta, _ = ct.read_safetensors_header(path)
    if meta.get("system", "gpt2") != "gpt2":
        raise ValueError(f"{path}: a checkpoint of Alpha's {meta['system']}, not of gpt2")
    vocab = ct.TokenSplit(data_dir, "valid").vocab
    cfg = config_from_tensors({k: v["shape"] for k, v in header.items()}, vocab, path)
    model = GPT2(cfg, amp=amp)
    wanted = {ct.to_alpha_name(n) for n, _ in model.named_parameters()}
    tensors, _ = ct.load_safetensors(path, names=wanted)
    ct.load_into(model, tensors, path)
    return model.to(device), cfg, meta


def checkpoint_cursor(meta: dict, source: str) -> tuple:
    """(position, epoch) of the training stream a checkpoint stored: where Alpha reads its next
    window (0, 0 at step 0)."""
    raw = meta.get("cursor") or '{"position": 0, "epoch": 0}'
    try:
        c = json.loads(raw)
        return int(c["position"]), int(c["epoch"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{source}: the data cursor {raw!r} does not parse ({e})") from None


def micro_batch(stream, batch: int, context: int, device):
    """The next `batch` training windows, as Alpha's trainer fills a micro-batch: window after
    window from the stream, row b of the batch the b-th."""
    ws = torch.tensor([stream.next_window(context + 1) for _ in range(batch)], dtype=torch.long)
    ws = ws.to(device, non_blocking=True)
    return ws[:, :-1], ws[:, 1:]


# ----------------------------------------------------------------------------------------------
# Subcommands


def cmd_score(args) -> dict:
    device = ct.pick_device(args.device, args.attention)
    model, cfg, meta = load_checkpoint_model(args.checkpoint, args.data, device, args.precision == "bf16")
    s = ct.heldout_loss(model, ct.TokenSplit(args.data, "valid"), cfg, args.windows, device, args.eval_batch)
    return ct.score_result(args, meta, s, device)


def cmd_train(args) -> dict:
    device = ct.pick_device(args.device, args.attention)
    model, cfg, meta = load_checkpoint_model(args.init, args.data, device, args.precision == "bf16")
    step0 = int(meta.get("step", 0) or 0)
    if step0 != 0:
        log(f"note: {args.init} is at step {step0}; training restarts from update 1 with fresh moments")
    log(f"model: {asdict(cfg)}, {sum(p.numel() for p in model.parameters()):,} parameters, {device}, {args.precision}")
    train = ct.TokenSplit(args.data, "train")
    valid = ct.TokenSplit(args.data, "valid")
    position, epoch = checkpoint_cursor(meta, args.init)
    stream = ct.TrainStream(train, position, epoch)
    params = list(model.parameters())
    opt = ct.make_optimizer(model, device)
    total = args.total or args.steps
    fwd = torch.compile(model) if args.compile else model
    t_len, b, a = cfg.context, args.batch, args.accumulate
    tokens_per_update = a * b * t_len
    first = last = float("nan")
    t0 = time.perf_counter()
    with open(args.out, "w") as out:
        for step in range(1, args.steps + 1):
            lr = lr_at(step, total, args.lr)
            ct.set_lr(opt, lr)
            # Alpha's update: the mean gradient of `a` micro-batches, then one clip and AdamW.
            loss_sum = torch.zeros((), device=device)
            for _ in range(a):
                x, y = micro_batch(stream, b, t_len, device)
                loss = fwd(x, y)
                (loss / a).backward()
                loss_sum += loss.detach()
            norm = ct.clip_(params)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss, norm = loss_sum.item() / a, norm.item()
            if not math.isfinite(loss):
                raise RuntimeError(f"loss became non-finite ({loss}) at update {step}")
            first = loss if step == 1 else first
            last = loss
            row = {"step": step, "loss": loss, "lr": lr, "grad_norm": norm, "tokens": step * tokens_per_update}
            if args.heldout_every and step % args.heldout_every == 0 and step != args.steps:
                row["heldout_loss"] = ct.heldout_loss(model, valid, cfg, args.heldout_windows, device,
                                                      args.eval_batch)["loss"]
            out.write(json.dumps(row) + "\n")
            out.flush()
            if step % max(1, args.steps // 20) == 0 or step == 1:
                log(f"update {step}/{args.steps}  loss {loss:.4f}  lr {lr:.3e}  |g| {norm:.3f}")
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        heldout = None
        if args.heldout_windows > 0:
            heldout = ct.heldout_loss(model, valid, cfg, args.heldout_windows, device, args.eval_batch)
            out.write(json.dumps({"step": args.steps, "heldout_loss": heldout["loss"],
                                  "heldout_windows": heldout["windows"], "heldout_tokens": heldout["tokens"]}) + "\n")
    if args.save:
        tensors = {ct.to_alpha_name(n): p for n, p in model.named_parameters()}
        ct.save_safetensors(args.save, tensors, {"format": "gpt2-torch", "system": "gpt2", "step": args.steps})
    return {
        "init": args.init,
        "steps": args.steps,
        "batch": b,
        "accumulate": a,
        "tokens_per_update": tokens_per_update,
        "total": total,
        "warmup": warmup_for(total),
        "peak_lr": args.lr,
        "first_loss": first,
        "last_loss": last,
        "heldout_loss": heldout["loss"] if heldout else None,
        "heldout_windows": heldout["windows"] if heldout else 0,
        "heldout_tokens": heldout["tokens"] if heldout else 0,
        "cursor": {"position": stream.position, "epoch": stream.epoch},
        "ms_per_update": 1e3 * wall / args.steps,
        "tokens_per_s": args.steps * tokens_per_update / wall,
        "device": str(device),
        "precision": args.precision,
        "out": args.out,
    }


def cmd_bench(args) -> dict:
    cfg = config_from_args(args)
    amp = args.precision == "bf16"
    return ct.run_bench(args, cfg, "GPT-2 small", init_tensors, build=lambda: GPT2(cfg, amp=amp))


def cmd_init(args) -> dict:
    cfg = config_from_args(args)
    if args.vocab:
        cfg.vocab = args.vocab
    tensors = init_tensors(cfg, args.seed)
    meta = {"format": "gpt2-torch-init", "system": "gpt2", "step": 0, "seed": args.seed,
            "cursor": json.dumps({"position": 0, "epoch": 0})}
    ct.save_safetensors(args.out, tensors, meta)
    return {"out": args.out, "parameters": sum(t.numel() for t in tensors.values()), "config": asdict(cfg)}


def cmd_synth_data(args) -> dict:
    ct.write_synthetic_data(args.out, args.vocab, args.train_tokens, args.valid_tokens, args.seed)
    return {"out": args.out, "vocab": args.vocab, "train_tokens": args.train_tokens, "valid_tokens": args.valid_tokens}


# ----------------------------------------------------------------------------------------------


def at_least(low: int):
    """An argparse type: an integer of at least `low`, refused with the range otherwise."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"{n} is below {low}")
        return n

    return parse


def positive_rate(text: str) -> float:
    """An argparse type: a learning rate above 0 and at most 10, as `alpha train --lr` takes."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(x) and 0 < x <= 10):
        raise argparse.ArgumentTypeError(f"{text} must be above 0 and at most 10")
    return x


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    tiny = "2 blocks of width 128, vocabulary 1,000 in 1,024 rows, context 64: a smoke test"

    b = sub.add_parser("bench", help="time one whole training step in several settings")
    ct.add_common_args(b, tiny_help=tiny)
    ct.add_bench_args(b)

    t = sub.add_parser("train", help="train from an Alpha checkpoint on Alpha's windows; loss per update")
    ct.add_common_args(t, model=False, context=False)
    t.add_argument("--init", required=True, help="Alpha's initial checkpoint (.safetensors); the geometry comes from it")
    t.add_argument("--data", required=True, help="Alpha's prepared token directory (GPT-2 tokens)")
    t.add_argument("--steps", type=at_least(1), required=True, help="updates to run")
    t.add_argument("--batch", type=at_least(1), default=16, help="contexts a micro-batch (alpha train --batch)")
    t.add_argument("--accumulate", type=at_least(1), default=1,
                   help="micro-batches whose mean gradient makes one update (alpha train --accumulate)")
    t.add_argument("--total", type=at_least(1), default=None,
                   help="the schedule's horizon in updates (alpha train --steps of the whole run; default --steps)")
    t.add_argument("--lr", type=positive_rate, default=PEAK_LR, help="the schedule's peak (alpha train --lr; default 6e-4)")
    t.add_argument("--heldout-windows", type=at_least(0), default=256,
                   help="held-out windows scored at the end (alpha train --heldout-windows; 0: none)")
    t.add_argument("--heldout-every", type=at_least(0), default=0, help="also score held-out every K updates")
    t.add_argument("--eval-batch", type=at_least(1), default=8)
    t.add_argument("--compile", action="store_true", help="torch.compile the model (default eager)")
    t.add_argument("--save", default=None, help="write the final parameters here (safetensors)")
    t.add_argument("--out", required=True, help="JSON lines: one an update, then the held-out loss")

    s = sub.add_parser("score", help="held-out loss of an Alpha checkpoint")
    ct.add_common_args(s, model=False, context=False)
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--windows", type=at_least(1), default=256)
    s.add_argument("--eval-batch", type=at_least(1), default=8)

    i = sub.add_parser("init", help="write a random initial checkpoint in Alpha's names (for smoke tests)")
    i.add_argument("--tiny", action="store_true", help=tiny)
    i.add_argument("--context", type=at_least(1), default=None)
    i.add_argument("--vocab", type=at_least(2), default=None, help="the vocabulary (its rows are padded to 128)")
    i.add_argument("--seed", type=int, default=1)
    i.add_argument("--out", required=True)

    ct.add_synth_data_parser(sub, Config.vocab)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    cmds = {"bench": cmd_bench, "train": cmd_train, "score": cmd_score, "init": cmd_init, "synth-data": cmd_synth_data}
    return ct.run_command(cmds, args)


if __name__ == "__main__":
    sys.exit(main())
