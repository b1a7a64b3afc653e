//! Coppelius (SYSTEMS.md §2): a 57,705,472-parameter pre-norm transformer. Tied embedding of
//! 12,288 × 512, 16 blocks of width 512 with 8 heads of 64, rotary positions, a gated-GELU FFN of
//! 1,408, LayerNorm with gains and biases, no linear biases, context 1,024. Matrix products take
//! bf16 operands and accumulate in f32.
//!
//! Where the spec says unknown: tanh GELU, rotary base 10,000 on half-split pairs,
//! LayerNorm ε 1e-5, weights N(0, 0.02) with the two residual output projections scaled by
//! 1/√(2·16), AdamW β (0.9, 0.95), ε 1e-8, decay 0.1 on matrices only, peak 1e-3 with 100 warm-up
//! updates and cosine to a tenth, clip at 1.0.

use alpha_ir::{DType, Graph, Init, IrError, Value};
use alpha_learn::{AdamW, Decay, Learner, Model, Optimizer, Schedule};

use crate::decode::{self, cached_blocks, Decoder, Feeds};
use crate::layers::{bf16_matmul, causal_self_attention, lm_inputs, tied_lm_loss};
use crate::{System, Tokens};

#[derive(Debug, Clone)]
pub struct Coppelius {
    pub blocks: usize,
    pub width: usize,
    pub heads: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub context: usize,
}

impl Default for Coppelius {
    fn default() -> Self {
        Coppelius { blocks: 16, width: 512, heads: 8, ffn: 1408, vocab: 12288, context: 1024 }
    }
}

impl Coppelius {
    /// One block over `x`, its attention over the fused projection given by `attend`: the
    /// window's causal attention in training, one position's over a cache in decoding.
    fn block_with(&self, g: &mut Graph, x: Value, attend: impl FnOnce(&mut Graph, Value) -> Value) -> Value {
        let c = self.width;
        let std = 0.02;
        let resid_std = std / ((2 * self.blocks) as f64).sqrt();
        let ln1_g = g.param("ln1.weight", &[c], Init::Ones);
        let ln1_b = g.param("ln1.bias", &[c], Init::Zeros);
        let w_qkv = g.param("attn.qkv.weight", &[c, 3 * c], Init::Normal { std });
        let w_o = g.param("attn.out.weight", &[c, c], Init::Normal { std: resid_std });
        let ln2_g = g.param("ln2.weight", &[c], Init::Ones);
        let ln2_b = g.param("ln2.bias", &[c], Init::Zeros);
        let w_gate = g.param("ffn.gate.weight", &[c, self.ffn], Init::Normal { std });
        let w_up = g.param("ffn.up.weight", &[c, self.ffn], Init::Normal { std });
        let w_down = g.param("ffn.down.weight", &[self.ffn, c], Init::Normal { std: resid_std });

        // The block's matrices rounded to bf16 together, before they are used: the device casts
        // them in one launch, and the products read them in bf16.
        let [w_qkv, w_o, w_gate, w_up, w_down] = [w_qkv, w_o, w_gate, w_up, w_down].map(|w| g.cast(w, DType::BF16));
        let mm = |g: &mut Graph, x16: Value, w16: Value| g.matmul(x16, w16);

        let a = g.layer_norm(x, ln1_g, ln1_b, 1e-5);
        let a16 = g.cast(a, DType::BF16);
        let qkv = mm(g, a16, w_qkv);
        let o = attend(g, qkv);
        let o16 = g.cast(o, DType::BF16);
        let proj = mm(g, o16, w_o);
        let x = g.add(x, proj);

        let bn = g.layer_norm(x, ln2_g, ln2_b, 1e-5);
        let bn16 = g.cast(bn, DType::BF16);
        let gate = mm(g, bn16, w_gate);
        let up = mm(g, bn16, w_up);
        let act = g.gelu(gate);
        let hidden = g.mul(act, up);
        let hidden16 = g.cast(hidden, DType::BF16);
        let down = mm(g, hidden16, w_down);
        g.add(x, down)
    }
}

/// Rotary base of the attention's positions.
const ROTARY_BASE: f64 = 10000.0;

impl Coppelius {
    fn block(&self, g: &mut Graph, x: Value, b: usize) -> Value {
        let (h, t) = (self.heads, self.context);
        self.block_with(g, x, |g, qkv| causal_self_attention(g, qkv, b, t, h, Some(ROTARY_BASE)))
    }
}

impl System for Coppelius {
    fn name(&self) -> &'static str {
        "coppelius"
    }
    fn description(&self) -> &'static str {
        "57.7M transformer: 16 blocks, width 512, 8 heads, rotary, gated-GELU FFN 1408, tied embedding, vocab 12,288"
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
        1
    }
    fn default_steps(&self) -> u64 {
        2000
    }

    fn model(&self, batch: usize) -> Result<Model, IrError> {
        let (c, t, v) = (self.width, self.context, self.vocab);
        let mut g = Graph::new("coppelius");
        let (tokens, targets) = lm_inputs(&mut g, batch, t);
        let embed = g.param("embed.weight", &[v, c], Init::Normal { std: 0.02 });
        let x = g.gather(embed, tokens);
        let mut x = g.reshape(x, &[batch * t, c]);
        for i in 0..self.blocks {
            x = g.scoped(format!("blocks.{i}"), |g| self.block(g, x, batch));
        }
        let lnf_g = g.param("ln_f.weight", &[c], Init::Ones);
        let lnf_b = g.param("ln_f.bias", &[c], Init::Zeros);
        let hf = g.layer_norm(x, lnf_g, lnf_b, 1e-5);
        tied_lm_loss(g, hf, embed, targets, self.vocab)
    }

    fn decoder(&self) -> Option<Result<Decoder, IrError>> {
        let (c, t, v, h) = (self.width, self.context, self.vocab, self.heads);
        let build = || {
            let mut g = Graph::new("coppelius-decode");
            let token = g.input("token", &[1, 1], DType::I32);
            let feeds = Feeds::new(&mut g, t, Some(c / h));
            let embed = g.param("embed.weight", &[v, c], Init::Normal { std: 0.02 });
            let x = g.gather(embed, token);
            let x = g.reshape(x, &[1, c]);
            let (x, assign) =
                cached_blocks(&mut g, x, self.blocks, h, &feeds, |g, x, attend| self.block_with(g, x, attend));
            let lnf_g = g.param("ln_f.weight", &[c], Init::Ones);
            let lnf_b = g.param("ln_f.bias", &[c], Init::Zeros);
            let hf = g.layer_norm(x, lnf_g, lnf_b, 1e-5);
            let logits = bf16_matmul(&mut g, hf, embed, true);
            Ok(Decoder {
                program: decode::program(g, logits, assign)?,
                positions: t,
                rotary: Some((ROTARY_BASE, c / h)),
                learned_positions: false,
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
            1e-3,
            Schedule::WarmupCosine { warmup: 100, total: steps.max(101), floor: 0.1 },
            Some(1.0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_count_matches_the_seed() {
        let m = Coppelius::default().model(1).unwrap();
        assert_eq!(m.graph.parameter_count(), 57_705_472);
    }

    #[test]
    fn bob_has_one_256_by_256_table() {
        let m = crate::bob::Bob.model(2).unwrap();
        assert_eq!(m.graph.parameter_count(), 65_536);
        assert_eq!(m.graph.params().len(), 1);
    }
}
