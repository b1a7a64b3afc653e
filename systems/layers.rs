//! Pieces the transformer systems share, written once against the builder.

use alpha_ir::{DType, Graph, IrError, Value};
use alpha_learn::Model;

/// x·W (or x·Wᵀ) with both operands rounded to bf16 and f32 accumulation, as the device does.
pub fn bf16_matmul(g: &mut Graph, x: Value, w: Value, tb: bool) -> Value {
    let x16 = g.cast(x, DType::BF16);
    bf16_matmul_of(g, x16, w, tb)
}

/// [`bf16_matmul`] of an x already rounded to bf16: when one activation feeds several products,
/// it is rounded once (one bf16 tensor, which the device can write beside its producer).
pub fn bf16_matmul_of(g: &mut Graph, x16: Value, w: Value, tb: bool) -> Value {
    let w16 = g.cast(w, DType::BF16);
    g.matmul_t(x16, w16, false, tb)
}

/// Causal self-attention from a fused projection `qkv` `[batch·t, 3·heads·hd]` whose columns
/// are ordered (q/k/v, head, dim). Rotary positions on q and k when `rotary_base` is given.
/// Returns the heads concatenated, `[batch·t, heads·hd]`.
pub fn causal_self_attention(
    g: &mut Graph,
    qkv: Value,
    batch: usize,
    t: usize,
    heads: usize,
    rotary_base: Option<f64>,
) -> Value {
    let width = g.shape(qkv)[1] / 3;
    let hd = width / heads;
    let qkv = g.reshape(qkv, &[batch, t, 3, heads, hd]);
    let qkv = g.permute(qkv, &[2, 0, 3, 1, 4]);
    let part = |g: &mut Graph, i: usize| {
        let s = g.slice(qkv, 0, i, i + 1);
        g.reshape(s, &[batch, heads, t, hd])
    };
    let (mut q, mut k, v) = (part(g, 0), part(g, 1), part(g, 2));
    if let Some(base) = rotary_base {
        q = g.rotary(q, base);
        k = g.rotary(k, base);
    }
    // bf16 operands, f32 sums: as the matrix products, and as PyTorch's bf16 flash attention.
    let o = g.attention_bf16(q, k, v, 1.0 / (hd as f64).sqrt(), None);
    let o = g.permute(o, &[0, 2, 1, 3]);
    g.reshape(o, &[batch * t, width])
}

/// 0, 1, …, n − 1 as f32 `[n]`: a running sum of ones, less one. The IR has no constant
/// tables; the linear recurrence with γ = 1 counts, exactly in f32 up to 2²⁴.
pub fn ramp(g: &mut Graph, n: usize) -> Value {
    let ones = g.constant(1.0, &[1, n, 1], DType::F32);
    let gamma = g.constant(1.0, &[1], DType::F32);
    let count = g.recurrence(ones, gamma);
    let count = g.reshape(count, &[n]);
    let one = g.constant(1.0, &[n], DType::F32);
    g.sub(count, one)
}

/// The inputs of a language model: `tokens` and `targets`, both i32 `[batch, t]`.
pub fn lm_inputs(g: &mut Graph, batch: usize, t: usize) -> (Value, Value) {
    (g.input("tokens", &[batch, t], DType::I32), g.input("targets", &[batch, t], DType::I32))
}

/// The tied head and loss: logits = h·Eᵀ over the embedding `embed` `[V, C]`, cross-entropy
/// against `targets` per position, and their mean. An embedding padded past the vocabulary
/// gives rows of logits wider than it; the cross-entropy takes their first `vocab` columns
/// (the padded rows' scores never enter the softmax, and their gradient is zero), and so does
/// prediction (the model's logits keep the padded width: see `alpha_run::predict`).
pub fn tied_lm_loss(g: Graph, h: Value, embed: Value, targets: Value, vocab: usize) -> Result<Model, IrError> {
    tied_lm_loss_over(g, h, embed, targets, vocab, DType::F32)
}

/// [`tied_lm_loss`] with the cross-entropy over the logits rounded to `logits` (bf16, as
/// mixed-precision training keeps them: PyTorch's autocast and llm.c). The model's `logits`
/// stay the f32 product (what scoring and prediction read); the loss and its gradient see
/// the rounded ones, and the gradient is f32 as before.
pub fn tied_lm_loss_over(
    mut g: Graph,
    h: Value,
    embed: Value,
    targets: Value,
    vocab: usize,
    logits_dtype: DType,
) -> Result<Model, IrError> {
    let logits = bf16_matmul(&mut g, h, embed, true);
    let n = g.shape(logits)[0];
    let flat = g.reshape(targets, &[n]);
    let scored = if logits_dtype == DType::F32 { logits } else { g.cast(logits, logits_dtype) };
    let losses = g.cross_entropy_over(scored, flat, vocab);
    let loss = g.mean_all(losses);
    Ok(Model { graph: g.finish()?, loss, losses, logits })
}

/// The loss of a language model over its logits `[N, V]`: cross-entropy against `targets`
/// (any shape of N ids) per position, and their mean.
pub fn lm_loss(mut g: Graph, logits: Value, targets: Value) -> Result<Model, IrError> {
    let n = g.shape(logits)[0];
    let flat = g.reshape(targets, &[n]);
    let losses = g.cross_entropy(logits, flat);
    let loss = g.mean_all(losses);
    Ok(Model { graph: g.finish()?, loss, losses, logits })
}
