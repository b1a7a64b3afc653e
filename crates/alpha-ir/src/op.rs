//! The op set. One enum carries every system in SYSTEMS.md: primitives (elementwise,
//! reductions, layout, matmul, gather/scatter) and composites kept whole (norms, rotary,
//! attention, cross-entropy, the linear recurrence, the delta rule, the harmonic scan, AdamW) so that a backend can give each a
//! dedicated kernel and autodiff a dedicated pullback. Backward composites are ops of their own.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;

/// How a parameter starts. Drawn by the run policy from its seeded generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Init {
    Zeros,
    Ones,
    Constant(f64),
    /// N(0, std²).
    Normal {
        std: f64,
    },
    /// U(−bound, bound).
    Uniform {
        bound: f64,
    },
    /// `start + i·step` over the flattened tensor.
    Linspace {
        start: f64,
        step: f64,
    },
    /// These values, in the flattened tensor's order: a small tensor whose start is a formula
    /// of its index that no other variant says (Diakosmos's spectral coefficients, 1/(1+ℓ)).
    Values(Vec<f64>),
    /// Row r of a `[R, …]` tensor filled with the r-th value: one tensor whose rows start apart
    /// (Polf's `resid_mix`, whose first row weighs the stream and starts at 1, and whose second
    /// weighs the embedding and starts at 0).
    Rows(Vec<f64>),
}

/// Elementwise functions of one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Unary {
    Neg,
    Exp,
    Log,
    Tanh,
    Sigmoid,
    /// The tanh form: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))).
    Gelu,
    /// d/dx of [`Unary::Gelu`]; exists for its pullback.
    GeluGrad,
    Relu,
    /// 1 where x > 0, else 0; the derivative of relu.
    Step,
    Sin,
    Cos,
    Rsqrt,
    Sqrt,
    Square,
    Recip,
    Abs,
    Sign,
}

/// Elementwise functions of two tensors, with numpy broadcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    /// 1 where a ≥ b, else 0 (not differentiable; used by pullbacks).
    Ge,
    /// aᵇ for a > 0.
    Pow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
}

/// One operation. Output types are inferred by [`crate::infer::infer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// A learned tensor, named by path (`blocks.3.attn.qkv.weight`).
    Param {
        name: String,
        init: Init,
    },
    /// Persistent non-learned state (optimizer moments, accumulators), named by path.
    State {
        name: String,
        init: Init,
    },
    /// Data fed each step (tokens, targets), named.
    Input {
        name: String,
    },
    /// A scalar the host writes before each step (learning rate, bias corrections).
    HostScalar {
        name: String,
    },
    /// A tensor filled with one value.
    Constant {
        value: f64,
    },
    Unary(Unary),
    Binary(Binary),
    /// Convert to the node's output dtype (bf16 rounds to nearest even).
    Cast {
        to: DType,
    },
    Reduce {
        kind: Reduce,
        axes: Vec<usize>,
        keep_dims: bool,
    },
    /// Same elements, new shape.
    Reshape {
        shape: Vec<usize>,
    },
    /// Numpy-style broadcast to a shape.
    Broadcast {
        shape: Vec<usize>,
    },
    Permute {
        perm: Vec<usize>,
    },
    Slice {
        axis: usize,
        start: usize,
        end: usize,
    },
    Concat {
        axis: usize,
    },
    /// `a·b` over the last two axes, batched over leading axes. `ta`/`tb` read an operand
    /// transposed. A 2-D `b` is shared across the batch. bf16 operands accumulate in f32.
    MatMul {
        ta: bool,
        tb: bool,
    },
    /// Rows of a table: table `[V, D…]`, int ids `[N…]` → `[N…, D…]`.
    Gather,
    /// The pullback of gather, in a fixed order: src `[N…, D…]`, ids `[N…]` → `[rows, D…]`.
    ScatterAdd {
        rows: usize,
    },
    /// Over the last axis: x `[…, C]`, gain `[C]`, bias `[C]` → y, mean `[…]`, rstd `[…]`.
    LayerNorm {
        eps: f64,
    },
    /// x, gain, mean, rstd, dy → dx, dgain, dbias.
    LayerNormBackward,
    /// Over the last axis: x `[…, C]`, gain `[C]` → y, rstd `[…]`.
    RmsNorm {
        eps: f64,
    },
    /// x, gain, rstd, dy → dx, dgain.
    RmsNormBackward,
    /// Rotary position embedding on x `[B, H, T, D]`, half-split pairs (i, i + D/2) at
    /// position t rotated by t·base^(−2i/D). `inverse` rotates back (the pullback).
    Rotary {
        base: f64,
        inverse: bool,
    },
    /// Causal softmax attention. q `[B, H, T, D]`, k and v `[B, G, T, D]` with H a multiple of
    /// G (grouped-query) → o `[B, H, T, D]`, lse `[B, H, T]`. Optional logit soft-cap
    /// `c·tanh(s/c)`. With `bf16`, the operands of its products — q, k, v, the probabilities,
    /// and in the backward dO and the score gradients — are rounded to bf16 as they enter them,
    /// with every sum in f32: the precision of tensor-core attention (and of PyTorch's bf16
    /// flash attention), which the reference then models.
    Attention {
        scale: f64,
        softcap: Option<f64>,
        bf16: bool,
    },
    /// q, k, v, o, lse, do → dq, dk, dv.
    AttentionBackward {
        scale: f64,
        softcap: Option<f64>,
        bf16: bool,
    },
    /// Full-vocabulary cross-entropy: logits `[N, W]`, int targets `[N]` → loss `[N]`, lse `[N]`,
    /// over the first `classes` columns of each row (all W when `None`). Why the bound: a
    /// vocabulary padded for the products' tiles (GPT-2's 50,257 in rows of 50,304) keeps its
    /// padded columns out of the softmax without a copy of the logits that leaves them out.
    CrossEntropy {
        classes: Option<usize>,
    },
    /// logits, lse, targets, dloss `[N]` → dlogits `[N, W]`, zero past `classes`.
    CrossEntropyBackward {
        classes: Option<usize>,
    },
    /// The linear recurrence along axis 1: u `[B, T, C…]`, γ `[C…]` →
    /// s_t = γ·s_{t−1} + u_t (s_{−1} = 0). `reverse` runs from the end (the pullback).
    Recurrence {
        reverse: bool,
    },
    /// The delta-rule memory along axis 1, started afresh from `m0` in every window: q, k
    /// `[B, T, K]`, v `[B, T, V]`, β `[B, T]`, m0 `[V, K]` → o `[B, T, V]`, where
    /// M_t = M_{t−1} + β_t (v_t − M_{t−1} k_t) k_tᵀ from M_{−1} = m0, and o_t = M_t q_t.
    /// Kept whole so the state (V×K a window) never goes to memory: the kernel steps it.
    DeltaRule,
    /// q, k, v, β, m0, do → dq, dk, dv, dβ, dm0 (summed over the batch). The backward
    /// recomputes the states it needs rather than reading stored ones (see the CPU kernel).
    DeltaRuleBackward,
    /// A bank of decaying linear recurrences, each written by a scalar times a shared value and
    /// read by a weighted sum, along axis 1 and started from zero in every window: r, w
    /// `[B, T, H, L]`, v `[B, T, H, D]`, γ `[H, L]` → y `[B, T, H, D]`, where for head h and
    /// harmonic ℓ the state S ∈ R^D steps S_t = γ_{h,ℓ}·S_{t−1} + w_{t,h,ℓ}·v_{t,h} from
    /// S_{−1} = 0, and y_{t,h} = Σ_ℓ r_{t,h,ℓ}·S_{t,h,ℓ}. Stepped one position at a time (the
    /// true scan: a cumulative sum scaled by γ^{−t} overflows f32 once t·|ln γ| passes ~88).
    /// Kept whole so the H·L·D state never goes to memory.
    HarmonicScan,
    /// r, w, v, γ, dy → dr, dw, dv, dγ (summed over the batch). The backward recomputes the
    /// states it needs from checkpoints (see the CPU kernel).
    HarmonicScanBackward,
    /// One decoupled AdamW update. p, g, m, v, lr, bc1 = 1−β1ᵗ, bc2 = 1−β2ᵗ, gscale
    /// (clip factor) → p', m', v'. The outputs overwrite p, m, v in place.
    AdamW {
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    },
    /// Σ x² over every element of every input (any shapes, one float dtype) → an f32 scalar
    /// (the global gradient norm's square). The reference accumulates in f64, input by input in
    /// order. Not differentiable.
    SumSquares,
}

impl Op {
    /// A short family name, for printing and profiles.
    pub fn family(&self) -> &'static str {
        match self {
            Op::Param { .. } => "param",
            Op::State { .. } => "state",
            Op::Input { .. } => "input",
            Op::HostScalar { .. } => "host-scalar",
            Op::Constant { .. } => "constant",
            Op::Unary(_) => "unary",
            Op::Binary(_) => "binary",
            Op::Cast { .. } => "cast",
            Op::Reduce { .. } => "reduce",
            Op::Reshape { .. } => "reshape",
            Op::Broadcast { .. } => "broadcast",
            Op::Permute { .. } => "permute",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::MatMul { .. } => "gemm",
            Op::Gather => "gather",
            Op::ScatterAdd { .. } => "scatter-add",
            Op::LayerNorm { .. } => "layernorm-forward",
            Op::LayerNormBackward => "layernorm-backward",
            Op::RmsNorm { .. } => "rmsnorm-forward",
            Op::RmsNormBackward => "rmsnorm-backward",
            Op::Rotary { .. } => "rotary",
            Op::Attention { .. } => "attention-forward",
            Op::AttentionBackward { .. } => "attention-backward",
            Op::CrossEntropy { .. } => "cross-entropy",
            Op::CrossEntropyBackward { .. } => "cross-entropy-backward",
            Op::Recurrence { .. } => "recurrence",
            Op::DeltaRule => "delta-rule-forward",
            Op::DeltaRuleBackward => "delta-rule-backward",
            Op::HarmonicScan => "harmonic-scan-forward",
            Op::HarmonicScanBackward => "harmonic-scan-backward",
            Op::AdamW { .. } => "adamw",
            Op::SumSquares => "sum-squares",
        }
    }

    /// Leaves hold data that lives outside any one step's computation.
    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Param { .. } | Op::State { .. } | Op::Input { .. } | Op::HostScalar { .. })
    }
}
