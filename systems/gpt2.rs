//! GPT-2 small (SYSTEMS.md §8), llm.c's `d12`: 12 pre-LN blocks of width 768 with 12 heads,
//! context 1,024, learned positions, biases on every linear, tanh GELU MLP of 4·768, tied
//! embedding over 50,257 tokens — 124,439,808 parameters, stored as 124,475,904: the embedding
//! table has 50,304 rows (the vocabulary rounded up to a multiple of 128, as llm.c pads it), so
//! the head's three products (logits, their input gradient, the table's gradient) take whole
//! 128-wide tiles on the GPU's fast path instead of a ragged edge. The 47 padded rows are never
//! gathered (token ids stop at 50,256) and the cross-entropy takes the first 50,257 columns of
//! each row of logits, so they never enter the loss or a prediction; their gradient is zero.
//! llm.c's recipe: weights N(0, 0.02),
//! the two residual projections N(0, 0.02/√24), biases 0; AdamW β (0.9, 0.95), ε 1e-8, decay 0.1
//! on matrices only, peak 6e-4, cosine to 0, clip 1.0. Matrix products take bf16 operands, as in
//! Alpha's other transformers, and the loss reads the logits rounded to bf16, as llm.c's and
//! PyTorch's mixed precision do (the logits' gradient is f32 until the products round it). Why:
//! the 50,304-wide logits are the step's largest tensor; stored f32 they were 3.3 GB written by
//! the head's product and read back by the loss at sixteen contexts.
//!
//! The warm-up is llm.c's share of its run rather than its count: 700 of 18,865 updates there
//! (3.7%), so [`Gpt2::warmup`] of the run's updates here. Why: llm.c's 700 come from a 10B-token
//! run of 524,288-token updates; the Gutenberg training split is about 100M GPT-2 tokens, which at
//! the recommended 16 × 1,024 × 4 (65,536 tokens an update: one pass is about 1,550 updates) would
//! spend 45% of the run warming up at a fixed 700.

use alpha_ir::{DType, Graph, Init, IrError, Value};
use alpha_learn::{AdamW, Decay, Learner, Model, Optimizer, Schedule};

use crate::decode::{self, cached_blocks, Decoder, Feeds};
use crate::layers::{bf16_matmul, causal_self_attention, lm_inputs, tied_lm_loss_over};
use crate::{System, Tokens};

#[derive(Debug, Clone)]
pub struct Gpt2 {
    pub layers: usize,
    pub width: usize,
    pub heads: usize,
    pub vocab: usize,
    pub context: usize,
}

impl Default for Gpt2 {
    fn default() -> Self {
        Gpt2 { layers: 12, width: 768, heads: 12, vocab: 50257, context: 1024 }
    }
}

impl Gpt2 {
    /// Warm-up updates for a run of `steps`: llm.c's 700 of 18,865, in proportion (at least 1).
    pub fn warmup(steps: u64) -> u64 {
        (steps * 700 / 18_865).max(1)
    }

    /// Rows of the embedding table: the vocabulary rounded up to a multiple of 128.
    pub fn padded_vocab(&self) -> usize {
        self.vocab.div_ceil(128) * 128
    }

    /// A linear layer's weight and bias: `[fan_in, fan_out]` and `[fan_out]`.
    fn linear_params(&self, g: &mut Graph, name: &str, (fan_in, fan_out): (usize, usize), std: f64) -> [Value; 2] {
        let w = g.param(&format!("{name}.weight"), &[fan_in, fan_out], Init::Normal { std });
        let b = g.param(&format!("{name}.bias"), &[fan_out], Init::Zeros);
        [w, b]
    }

    fn layer_norm(&self, g: &mut Graph, x: Value, name: &str) -> Value {
        let c = self.width;
        let w = g.param(&format!("{name}.weight"), &[c], Init::Ones);
        let b = g.param(&format!("{name}.bias"), &[c], Init::Zeros);
        g.layer_norm(x, w, b, 1e-5)
    }

    fn block(&self, g: &mut Graph, x: Value, batch: usize) -> Value {
        let (t, h) = (self.context, self.heads);
        self.block_with(g, x, |g, qkv| causal_self_attention(g, qkv, batch, t, h, None))
    }

    /// One block over `x`, its attention over the fused projection given by `attend`: the
    /// window's causal attention in training, one position's over a cache in decoding.
    fn block_with(&self, g: &mut Graph, x: Value, attend: impl FnOnce(&mut Graph, Value) -> Value) -> Value {
        let c = self.width;
        let resid_std = 0.02 / ((2 * self.layers) as f64).sqrt();
        // The block's matrices rounded to bf16 together, before they are used (as Coppelius's):
        // the same values, and the device casts them in one launch instead of four.
        let params = [
            self.linear_params(g, "attn.qkv", (c, 3 * c), 0.02),
            self.linear_params(g, "attn.proj", (c, c), resid_std),
            self.linear_params(g, "mlp.fc", (c, 4 * c), 0.02),
            self.linear_params(g, "mlp.proj", (4 * c, c), resid_std),
        ];
        let [qkv_layer, proj_layer, fc_layer, out_layer] =
            params.map(|[w, b]| Linear { w16: g.cast(w, DType::BF16), b });
        let a = self.layer_norm(g, x, "ln1");
        let qkv = qkv_layer.apply(g, a);
        let o = attend(g, qkv);
        let proj = proj_layer.apply(g, o);
        let x = g.add(x, proj);
        let b = self.layer_norm(g, x, "ln2");
        let h = fc_layer.apply(g, b);
        let h = g.gelu(h);
        let out = out_layer.apply(g, h);
        g.add(x, out)
    }
}

/// A linear layer with a bias, its weight already rounded to bf16.
struct Linear {
    w16: Value,
    b: Value,
}

impl Linear {
    /// `bf16(x)·W + b`.
    fn apply(&self, g: &mut Graph, x: Value) -> Value {
        let x16 = g.cast(x, DType::BF16);
        let y = g.matmul_t(x16, self.w16, false, false);
        g.add(y, self.b)
    }
}

impl System for Gpt2 {
    fn name(&self) -> &'static str {
        "gpt2"
    }
    fn description(&self) -> &'static str {
        "GPT-2 small (llm.c d12): 12 blocks, width 768, 12 heads, learned positions, biases, GELU MLP, tied embedding, vocab 50,257"
    }
    fn vocab(&self) -> usize {
        self.vocab
    }
    fn tokens(&self) -> Tokens {
        Tokens::Bpe(self.vocab)
    }
    fn context(&self) -> usize {
        self.context
    }
    fn default_batch(&self) -> usize {
        4
    }
    fn default_steps(&self) -> u64 {
        2000
    }

    fn model(&self, batch: usize) -> Result<Model, IrError> {
        let (c, t, v) = (self.width, self.context, self.vocab);
        let mut g = Graph::new("gpt2");
        let (tokens, targets) = lm_inputs(&mut g, batch, t);
        let wte = g.param("wte.weight", &[self.padded_vocab(), c], Init::Normal { std: 0.02 });
        let wpe = g.param("wpe.weight", &[t, c], Init::Normal { std: 0.02 });
        let x = g.gather(wte, tokens);
        let x = g.add(x, wpe);
        let mut x = g.reshape(x, &[batch * t, c]);
        for i in 0..self.layers {
            x = g.scoped(format!("blocks.{i}"), |g| self.block(g, x, batch));
        }
        let hf = self.layer_norm(&mut g, x, "ln_f");
        tied_lm_loss_over(g, hf, wte, targets, v, DType::BF16)
    }

    fn decoder(&self) -> Option<Result<Decoder, IrError>> {
        let (c, t, h) = (self.width, self.context, self.heads);
        let build = || {
            let mut g = Graph::new("gpt2-decode");
            let token = g.input("token", &[1, 1], DType::I32);
            let position = g.input("position", &[1, 1], DType::I32);
            let feeds = Feeds::new(&mut g, t, None);
            let wte = g.param("wte.weight", &[self.padded_vocab(), c], Init::Normal { std: 0.02 });
            let wpe = g.param("wpe.weight", &[t, c], Init::Normal { std: 0.02 });
            let x = g.gather(wte, token);
            let p = g.gather(wpe, position);
            let x = g.add(x, p);
            let x = g.reshape(x, &[1, c]);
            let (x, assign) =
                cached_blocks(&mut g, x, self.layers, h, &feeds, |g, x, attend| self.block_with(g, x, attend));
            let hf = self.layer_norm(&mut g, x, "ln_f");
            let logits = bf16_matmul(&mut g, hf, wte, true);
            Ok(Decoder {
                program: decode::program(g, logits, assign)?,
                positions: t,
                rotary: None,
                learned_positions: true,
            })
        };
        Some(build())
    }

    fn learner(&self, steps: u64) -> Learner {
        Learner::single(
            Optimizer::AdamW(AdamW {
                beta1: 0.9,
                beta2: 0.95,
                eps: 1e-8,
                weight_decay: 0.1,
                decay: Decay::MatricesOnly,
            }),
            6e-4,
            Schedule::WarmupCosine { warmup: Gpt2::warmup(steps), total: steps.max(1), floor: 0.0 },
            Some(1.0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warm_up_is_llm_c_share_of_the_run() {
        assert_eq!(Gpt2::warmup(18_865), 700);
        assert_eq!(Gpt2::warmup(1_550), 57);
        assert_eq!(Gpt2::warmup(10), 1);
    }

    #[test]
    fn parameter_count_is_llm_c_d12() {
        let m = Gpt2::default().model(1).unwrap();
        // llm.c's padded count; less the 47 padded rows, SYSTEMS.md's 124,439,808.
        assert_eq!(m.graph.parameter_count(), 124_475_904);
        assert_eq!(m.graph.parameter_count() - (50_304 - 50_257) * 768, 124_439_808);
        // The logits keep the padded width; the loss takes the vocabulary's columns only.
        assert_eq!(m.graph.shape(m.logits), &[1024, 50_304]);
        let ce = m.graph.nodes.iter().find(|n| matches!(n.op, alpha_ir::Op::CrossEntropy { .. })).unwrap();
        assert_eq!(ce.op, alpha_ir::Op::CrossEntropy { classes: Some(50_257) });
    }
}
