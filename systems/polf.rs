//! Polf (SYSTEMS.md §4): the parameter-golf baseline GPT, 17,059,912 parameters. 9 blocks of
//! width 512 whose first 4 ("encoder") push their outputs on a stack that the last 5 ("decoder")
//! pop, last in first out, each popped output added with a learned per-feature weight (a U-Net
//! of skips); 8 query heads of 64 over 4 key/value heads (grouped-query attention), each q and k
//! head RMS-normalised, q scaled per head by a learned gain (from 1.5), rotary positions of base
//! 10,000; a ReLU² MLP of 1,024; every RMSNorm without parameters; `resid_mix` blends each
//! block's input with x₀, the normalised embedding; a tied embedding over 1,024 tokens whose
//! logits are soft-capped to 30·tanh(s/30); no biases; both residual output projections start at
//! zero. Its learner has four roles: Adam (β 0.9, 0.95, ε 1e-8) on the tied embedding at 0.05,
//! Muon on the 54 block matrices at 0.04 with its momentum rising from 0.85 to 0.95 over the first
//! 500 updates, Adam on the controls (q gains, attention and MLP scales, `resid_mix`, skip
//! weights) at 0.04; no clip; the rate warms down linearly to zero over the last 1,200 updates.
//!
//! Where Alpha does not follow the reference exactly, or the reference leaves a choice open:
//!
//! - **Tokenizer.** The reference reads FineWeb through a SentencePiece BPE of 1,024 pieces
//!   (byte fallback, NFKC, split digits) with BOS before each document. Polf reads a byte-level
//!   BPE of 1,024 trained on the training split (`alpha data prepare --tokenizer bpe:1024
//!   --bos`): the 256 byte values, `<|endoftext|>` (id 0, here the BOS that opens each document;
//!   nothing closes one) and 767 merges. Byte-level BPE has byte fallback by construction — any
//!   text encodes, no unknown piece — and no normaliser, so a token's bytes are exactly the
//!   document's UTF-8 bytes and bits per byte needs no leading-space rule (BOS counts none).
//!   It is trained by the `tokenizers` crate Alpha already uses for its BPEs, where
//!   SentencePiece would add a C++ library to the product for no gain in the metric.
//! - **Corpus.** The reference trains on FineWeb and scores its first 50,000 documents; Polf's
//!   stream is Gutenberg, scored on the held-out authors of its split.
//! - **RMSNorm ε.** `F.rms_norm` without ε adds a machine epsilon; as we read ATen's `rms_norm`,
//!   that of its compute type, which is f32 for bf16 and f32 inputs alike: ε = 2⁻²³, which Alpha
//!   uses. (Were it bf16's 2⁻⁷, the embedding's first normalisation would be far from a norm:
//!   its rows' mean square starts at 0.005² = 2.5·10⁻⁵.)
//! - **Parameter-free norms** are Alpha's `RmsNorm` with a constant gain of ones: one op, one
//!   kernel and one pullback, whose gain gradient nothing reads.
//! - **Rotary direction.** The reference turns each half-split pair by −θ, Alpha's `Rotary` by
//!   +θ. With P the swap of a head's halves, R(−θ) = P·R(θ)·P, so one is the other with each q and
//!   k head's features swapped in halves: the QK norm and the dot product do not see the swap,
//!   and it only permutes the columns of `c_q` and `c_k`, whose kaiming-uniform start has the same
//!   law either way. The two models are the same family from the same law of starts; Alpha keeps
//!   the forward Rotary, which its attention kernels apply as they load q and k.
//! - **q gain before the rotary.** The gain is one number a head, so it commutes with the
//!   rotation; applied first, the Rotary's output feeds the attention alone (the fused form).
//! - **Precision.** Matrix products, attention and the tied head take bf16 operands with f32
//!   sums, as the reference under bf16 autocast; norms, softcap and loss run in f32 (the
//!   reference rounds some of those activations to bf16 too). The reference keeps the tied
//!   embedding itself in bf16, its Adam stepping the bf16 tensor; Alpha keeps every parameter in
//!   f32 (its checkpoints and optimizers are f32), so the embedding's small Adam steps are not
//!   lost to bf16 rounding as they can be in the reference.
//! - **Warmdown.** The reference warms down over the last 1,200 steps' worth of its wall-clock
//!   budget (over iterations 18,800–20,000 without one). `alpha train polf --budget 10m` follows
//!   that wall-clock rule exactly; a run by steps warms down over the last min(1,200, run)
//!   updates, so a run shorter than 1,200 updates warms down over all of it.
//! - **Muon's iterations.** The reference runs the whole Newton–Schulz iteration in bf16
//!   (normalisation included); Alpha's Muon rounds each product's operands to bf16 and keeps X in
//!   f32 between iterations (its learner's choice for every system), a little closer to the f32
//!   direction.
//! - **Batch.** The reference's update is 524,288 tokens: 512 sequences of 1,024 over 8 GPUs.
//!   The default batch here is 64 sequences, one GPU's micro-batch of the reference; its full
//!   update is `--batch 64 --accumulate 8`.
//! - **No compile warm-up.** The reference runs 20 steps to prime `torch.compile` and restores
//!   the weights; Alpha compiles ahead of the step, so there is nothing to prime.
//!
//! Parameters keep the reference's names (`tok_emb.weight`, `blocks.3.attn.c_q.weight`,
//! `skip_weights`, …), but matrices are stored `[inputs, outputs]` (Alpha multiplies `x·W`),
//! transposed from PyTorch's `nn.Linear`.

use alpha_ir::{DType, Graph, Init, IrError, Value};
use alpha_learn::{Group, Learner, Model, MomentumRamp, Muon, Optimizer, Rows, Schedule};

use crate::decode::{self, cached_heads, Decoder, Feeds};
use crate::layers::{lm_inputs, lm_loss};
use crate::{System, Tokens};

/// ε of every RMSNorm: f32's machine epsilon, 2⁻²³ (see the module docs).
pub const RMS_EPS: f64 = f32::EPSILON as f64;

#[derive(Debug, Clone)]
pub struct Polf {
    pub blocks: usize,
    pub width: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads; `heads` is a multiple of it.
    pub kv_heads: usize,
    /// The MLP's hidden width.
    pub mlp: usize,
    pub vocab: usize,
    pub context: usize,
    /// Matrix products and attention with bf16 operands and f32 sums (the reference's autocast).
    /// Off, every product is exact in the CPU's element type: the form whose gradient is checked
    /// against finite differences in f64, where bf16 rounding would swamp the difference.
    pub bf16: bool,
}

impl Default for Polf {
    fn default() -> Self {
        Polf { blocks: 9, width: 512, heads: 8, kv_heads: 4, mlp: 1024, vocab: 1024, context: 1024, bf16: true }
    }
}

/// Rotary base.
const ROPE_BASE: f64 = 10_000.0;
/// Logit soft-cap.
const SOFTCAP: f64 = 30.0;
/// The q gains' start.
const Q_GAIN: f64 = 1.5;
/// The tied embedding's start: N(0, 0.005²).
const EMBED_STD: f64 = 0.005;

impl Polf {
    /// Blocks that push their output for a skip: the first ⌊blocks/2⌋.
    pub fn encoder_blocks(&self) -> usize {
        self.blocks / 2
    }

    /// Skip weights: one per popped output, min(encoder, decoder) = the encoder's count.
    fn skips(&self) -> usize {
        self.encoder_blocks().min(self.blocks - self.encoder_blocks())
    }

    /// RMSNorm over the last axis without parameters (a constant gain of ones).
    fn norm(&self, g: &mut Graph, x: Value) -> Value {
        let c = *g.shape(x).last().expect("a tensor with a last axis");
        let ones = g.constant(1.0, &[c], DType::F32);
        g.rms_norm(x, ones, RMS_EPS)
    }

    /// `x` as a product reads it: rounded to bf16 when the system runs in bf16. An activation
    /// that feeds several products (q, k and v's input) is rounded once.
    fn operand(&self, g: &mut Graph, x: Value) -> Value {
        if self.bf16 {
            g.cast(x, DType::BF16)
        } else {
            x
        }
    }

    /// x·W (x·Wᵀ with `tb`) of an operand `x` (see [`Polf::operand`]).
    fn mm(&self, g: &mut Graph, x: Value, w: Value, tb: bool) -> Value {
        let w = self.operand(g, w);
        g.matmul_t(x, w, false, tb)
    }

    /// A bias-free linear layer of `fan_out` features on an operand `x`: kaiming-uniform
    /// U(±1/√fan_in), as PyTorch's `nn.Linear`, or zeros for the residual output projections.
    fn linear(&self, g: &mut Graph, x: Value, name: &str, fan_out: usize, zero: bool) -> Value {
        let fan_in = g.shape(x)[1];
        let init = if zero { Init::Zeros } else { Init::Uniform { bound: 1.0 / (fan_in as f64).sqrt() } };
        let w = g.param(&format!("{name}.weight"), &[fan_in, fan_out], init);
        self.mm(g, x, w, false)
    }

    /// Grouped-query attention with QK norm, per-head q gain and rotary: `[B·T, C]` → `[B·T, C]`.
    fn attention(&self, g: &mut Graph, x: Value, batch: usize) -> Value {
        let scale = 1.0 / ((self.width / self.heads) as f64).sqrt();
        let rotate = |g: &mut Graph, x: Value| g.rotary(x, ROPE_BASE);
        self.attention_with(g, x, batch, self.context, rotate, |g, q, k, v| {
            if self.bf16 {
                g.attention_bf16(q, k, v, scale, None)
            } else {
                g.attention(q, k, v, scale, None)
            }
        })
    }

    /// The attention's projections, QK norm, q gain and `rotate` (the positions' rotary, or
    /// nothing where `attend` turns them itself) over `batch`×`t` positions, `attend` taking
    /// q `[B, heads, T, hd]` and k, v `[B, kv_heads, T, hd]` to the heads' outputs
    /// `[B, heads, T, hd]`, and the output projection: the window's causal attention in
    /// training, one position's over a cache in decoding.
    fn attention_with(
        &self,
        g: &mut Graph,
        x: Value,
        batch: usize,
        t: usize,
        rotate: impl Fn(&mut Graph, Value) -> Value,
        attend: impl FnOnce(&mut Graph, Value, Value, Value) -> Value,
    ) -> Value {
        let (c, h, kvh) = (self.width, self.heads, self.kv_heads);
        let hd = c / h;
        let x = self.operand(g, x);
        let q = self.linear(g, x, "c_q", c, false);
        let k = self.linear(g, x, "c_k", kvh * hd, false);
        let v = self.linear(g, x, "c_v", kvh * hd, false);
        let gain = g.param("q_gain", &[h], Init::Constant(Q_GAIN));
        // Per head: [B, T, heads, hd] normalised over hd, then to [B, heads, T, hd].
        let heads = |g: &mut Graph, y: Value, n: usize| g.reshape(y, &[batch, t, n, hd]);
        let to_bhtd = |g: &mut Graph, y: Value| g.permute(y, &[0, 2, 1, 3]);
        let q = heads(g, q, h);
        let q = self.norm(g, q);
        let gain = g.reshape(gain, &[1, 1, h, 1]);
        let q = g.mul(q, gain);
        let q = to_bhtd(g, q);
        let q = rotate(g, q);
        let k = heads(g, k, kvh);
        let k = self.norm(g, k);
        let k = to_bhtd(g, k);
        let k = rotate(g, k);
        let v = heads(g, v, kvh);
        let v = to_bhtd(g, v);
        let o = attend(g, q, k, v);
        let o = g.permute(o, &[0, 2, 1, 3]);
        let o = g.reshape(o, &[batch * t, c]);
        let o = self.operand(g, o);
        self.linear(g, o, "proj", c, true)
    }

    /// proj(relu(fc(x))²).
    fn mlp(&self, g: &mut Graph, x: Value) -> Value {
        let x = self.operand(g, x);
        let hidden = self.linear(g, x, "fc", self.mlp, false);
        let r = g.relu(hidden);
        let sq = g.square(r);
        let sq = self.operand(g, sq);
        self.linear(g, sq, "proj", self.width, true)
    }

    /// One block: x ← mix₀⊙x + mix₁⊙x₀; x += attn_scale⊙Attn(norm x); x += mlp_scale⊙MLP(norm x),
    /// its attention's (normed) output given by `attention`.
    fn block(&self, g: &mut Graph, x: Value, x0: Value, attention: impl FnOnce(&mut Graph, Value) -> Value) -> Value {
        let c = self.width;
        let mix = g.param("resid_mix", &[2, c], Init::Rows(vec![1.0, 0.0]));
        let attn_scale = g.param("attn_scale", &[c], Init::Ones);
        let mlp_scale = g.param("mlp_scale", &[c], Init::Ones);
        let (m0, m1) = (g.slice(mix, 0, 0, 1), g.slice(mix, 0, 1, 2));
        let a = g.mul(x, m0);
        let b = g.mul(x0, m1);
        let x = g.add(a, b);
        let n = self.norm(g, x);
        let attn = g.scoped("attn", |g| attention(g, n));
        let attn = g.mul(attn, attn_scale);
        let x = g.add(x, attn);
        let n = self.norm(g, x);
        let mlp = g.scoped("mlp", |g| self.mlp(g, n));
        let mlp = g.mul(mlp, mlp_scale);
        g.add(x, mlp)
    }

    /// From the token ids `tokens` to the soft-capped logits `[N, V]`, N the ids' count, each
    /// block's attention given by `attention(g, block, x)`: the embedding, its norm x₀, the
    /// blocks with their U-Net skips and the tied head.
    fn forward(
        &self,
        g: &mut Graph,
        tokens: Value,
        mut attention: impl FnMut(&mut Graph, usize, Value) -> Value,
    ) -> Value {
        let (c, v) = (self.width, self.vocab);
        let n = g.ty(tokens).numel();
        let embed = g.param("tok_emb.weight", &[v, c], Init::Normal { std: EMBED_STD });
        let skip_weights = g.param("skip_weights", &[self.skips(), c], Init::Ones);
        let x = g.gather(embed, tokens);
        let x = g.reshape(x, &[n, c]);
        let x0 = self.norm(g, x);
        let mut x = x0;
        let encoder = self.encoder_blocks();
        let mut stack = Vec::with_capacity(encoder);
        for i in 0..self.blocks {
            if i >= encoder {
                if let Some(skip) = stack.pop() {
                    let j = i - encoder;
                    let w = g.slice(skip_weights, 0, j, j + 1);
                    let weighted = g.mul(skip, w);
                    x = g.add(x, weighted);
                }
            }
            x = g.scoped(format!("blocks.{i}"), |g| self.block(g, x, x0, |g, n| attention(g, i, n)));
            if i < encoder {
                stack.push(x);
            }
        }
        let hf = self.norm(g, x);
        // The tied head, soft-capped: 30·tanh(h·Eᵀ/30).
        let hf = self.operand(g, hf);
        let logits = self.mm(g, hf, embed, true);
        let s = g.scale(logits, 1.0 / SOFTCAP);
        let capped = g.tanh(s);
        g.scale(capped, SOFTCAP)
    }
}

impl System for Polf {
    fn name(&self) -> &'static str {
        "polf"
    }
    fn description(&self) -> &'static str {
        "parameter-golf GPT, 17.1M: 9 blocks of 512 with U-Net skips, 8 query / 4 KV heads, QK norm, ReLU² MLP 1024, tied vocab 1,024, softcap 30"
    }
    fn vocab(&self) -> usize {
        self.vocab
    }
    fn tokens(&self) -> Tokens {
        Tokens::BpeBos(self.vocab)
    }
    fn context(&self) -> usize {
        self.context
    }
    fn default_batch(&self) -> usize {
        64
    }
    fn default_steps(&self) -> u64 {
        20_000
    }

    fn model(&self, batch: usize) -> Result<Model, IrError> {
        let mut g = Graph::new("polf");
        let (tokens, targets) = lm_inputs(&mut g, batch, self.context);
        let logits = self.forward(&mut g, tokens, |g, _, n| self.attention(g, n, batch));
        lm_loss(g, logits, targets)
    }

    /// One position over each block's cache of its key/value heads (normed and rotated keys,
    /// values), the rest of the arithmetic the window's at that position. Its attention reads
    /// bf16 operands whatever [`Polf::bf16`] says: the exact form is for gradient checks, not
    /// for generating.
    fn decoder(&self) -> Option<Result<Decoder, IrError>> {
        let (t, h, hd) = (self.context, self.heads, self.width / self.heads);
        let build = || {
            let mut g = Graph::new("polf-decode");
            let token = g.input("token", &[1, 1], DType::I32);
            let feeds = Feeds::new(&mut g, t, Some(hd));
            let mut assign = vec![];
            let logits = self.forward(&mut g, token, |g, i, n| {
                // cached_heads turns q and k by the position's angles.
                self.attention_with(
                    g,
                    n,
                    1,
                    1,
                    |_, x| x,
                    |g, q, k, v| {
                        let [q, k, v] =
                            [(q, h), (k, self.kv_heads), (v, self.kv_heads)].map(|(x, n)| g.reshape(x, &[n, 1, hd]));
                        let (o, cache) = cached_heads(g, q, k, v, &feeds, &format!("blocks.{i}"));
                        assign.extend(cache);
                        g.reshape(o, &[1, h, 1, hd])
                    },
                )
            });
            Ok(Decoder {
                program: decode::program(g, logits, assign)?,
                positions: t,
                rotary: Some((ROPE_BASE, hd)),
                learned_positions: false,
            })
        };
        Some(build())
    }

    fn learner(&self, steps: u64) -> Learner {
        let adam = Optimizer::Adam { beta1: 0.9, beta2: 0.95, eps: 1e-8 };
        let muon = Muon { ramp: Some(MomentumRamp { from: 0.85, updates: 500 }), ..Muon::standard(Rows::Inputs) };
        Learner {
            groups: vec![
                Group::new("embed", &["tok_emb.weight"], adam.clone(), 0.05),
                Group::new(
                    "matrices",
                    &[
                        "blocks.*.attn.c_q.weight",
                        "blocks.*.attn.c_k.weight",
                        "blocks.*.attn.c_v.weight",
                        "blocks.*.attn.proj.weight",
                        "blocks.*.mlp.fc.weight",
                        "blocks.*.mlp.proj.weight",
                    ],
                    Optimizer::Muon(muon),
                    0.04,
                ),
                Group::new(
                    "controls",
                    &[
                        "blocks.*.attn.q_gain",
                        "blocks.*.attn_scale",
                        "blocks.*.mlp_scale",
                        "blocks.*.resid_mix",
                        "skip_weights",
                    ],
                    adam,
                    0.04,
                ),
            ],
            schedule: Schedule::LinearWarmdown { total: steps, warmdown: 1200.min(steps) },
            clip: None,
            accumulation: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alpha_cpu::Cpu;
    use alpha_ir::Op;

    /// Polf's shape in miniature: 3 blocks (one skip), 4 query heads of 4 over 2 key/value heads.
    fn small(bf16: bool) -> Polf {
        Polf { blocks: 3, width: 16, heads: 4, kv_heads: 2, mlp: 32, vocab: 37, context: 8, bf16 }
    }

    #[test]
    fn parameter_count_matches_the_reference_log() {
        let model = Polf::default().model(1).unwrap();
        assert_eq!(model.graph.parameter_count(), 17_059_912);
        assert_eq!(model.graph.shape(model.logits), &[1024, 1024]);
    }

    #[test]
    fn the_learner_takes_the_four_roles_of_the_reference() {
        let polf = Polf::default();
        let model = polf.model(1).unwrap();
        let learner = polf.learner(20_000);
        let params: Vec<(String, Vec<usize>)> =
            model.graph.params().iter().map(|(v, n)| (n.clone(), model.graph.shape(*v).to_vec())).collect();
        let groups = learner.assign_groups("polf", &params).unwrap();
        let names = |k: usize| -> Vec<&str> {
            params.iter().zip(&groups).filter(|(_, &g)| g == k).map(|(p, _)| p.0.as_str()).collect()
        };
        assert_eq!(names(0), ["tok_emb.weight"]);
        let matrices = names(1);
        assert_eq!(matrices.len(), 54, "{matrices:?}");
        assert!(matrices.iter().all(|n| params.iter().any(|p| p.0 == *n && p.1.len() == 2)));
        let controls = names(2);
        assert_eq!(controls.len(), 9 * 4 + 1, "{controls:?}");
        assert!(controls.contains(&"skip_weights") && controls.contains(&"blocks.8.resid_mix"));
        // Muon's momentum ramps 0.85 → 0.95 over 500 updates; the rate holds, then warms down.
        assert_eq!(learner.scalars(1).iter().find(|s| s.0 == "momentum:matrices").unwrap().1, 0.85);
        assert_eq!(learner.scalars(501).iter().find(|s| s.0 == "momentum:matrices").unwrap().1, 0.95);
        assert_eq!(learner.schedule.lr(0.04, 18_800), 0.04);
        assert!(learner.schedule.lr(0.04, 19_999) < 1e-4);
        assert!(learner.clip.is_none());
    }

    #[test]
    fn the_controls_start_as_the_reference_and_output_projections_at_zero() {
        let model = Polf::default().model(1).unwrap();
        let leaves: std::collections::HashMap<String, Vec<f32>> =
            alpha_learn::init::initial_leaves(&model.graph, 1337).into_iter().collect();
        let mix = &leaves["blocks.4.resid_mix"];
        assert!(mix[..512].iter().all(|&x| x == 1.0) && mix[512..].iter().all(|&x| x == 0.0));
        assert!(leaves["blocks.0.attn.q_gain"].iter().all(|&x| x == 1.5));
        assert!(leaves["skip_weights"].iter().all(|&x| x == 1.0));
        for zero in ["blocks.2.attn.proj.weight", "blocks.7.mlp.proj.weight"] {
            assert!(leaves[zero].iter().all(|&x| x == 0.0), "{zero}");
        }
        let fc = &leaves["blocks.0.mlp.fc.weight"];
        let bound = 1.0 / 512f32.sqrt();
        assert!(fc.iter().all(|x| x.abs() <= bound) && fc.iter().any(|x| x.abs() > 0.9 * bound));
        let e = &leaves["tok_emb.weight"];
        let std = (e.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / e.len() as f64).sqrt();
        assert!((std - 0.005).abs() < 1e-4, "embedding std {std}");
    }

    /// Every parameter's gradient, in f64 with exact products, against central finite
    /// differences at a random point (the zero-initialised projections made nonzero, so every
    /// path carries gradient).
    #[test]
    fn the_gradient_matches_finite_differences() {
        let polf = small(false);
        let batch = 2;
        let program = alpha_learn::gradient_program(polf.model(batch).unwrap()).unwrap();
        let mut cpu = Cpu::<f64>::compile(&program).unwrap();
        let mut values = vec![];
        for (v, name) in program.graph.params() {
            let n = program.graph.ty(v).numel();
            let noise = alpha_learn::init::draw(&Init::Normal { std: 0.4 }, n, 7, &name);
            let start = match &program.graph.nodes[v.node as usize].op {
                Op::Param { init, .. } => alpha_learn::init::draw(init, n, 7, &name),
                _ => unreachable!(),
            };
            let x: Vec<f64> = start.iter().zip(&noise).map(|(&s, &e)| s as f64 + e as f64).collect();
            cpu.write(v, &x);
            values.push((v, name, x));
        }
        let t = polf.context;
        let ids = |k: usize| (0..batch * t).map(|i| ((i * 7 + k * 13 + i * i) % polf.vocab) as f64).collect::<Vec<_>>();
        cpu.write(cpu.leaf("tokens").unwrap(), &ids(0));
        cpu.write(cpu.leaf("targets").unwrap(), &ids(1));
        cpu.run_all();
        let loss = program.outputs["loss"];
        let base = cpu.read(loss)[0];
        assert!(base.is_finite() && base > 0.0);
        // Every gradient read before the differences run the program again.
        let grads: Vec<Vec<f64>> =
            values.iter().map(|(_, name, _)| cpu.read(program.outputs[&format!("grad:{name}")]).to_vec()).collect();
        let h = 1e-5;
        let mut checked = 0;
        for ((v, name, x), grad) in values.iter().zip(&grads) {
            assert!(grad.iter().any(|g| *g != 0.0), "{name}: the gradient is zero");
            for k in 0..4 {
                let i = (k * 7919 + name.len() * 31) % x.len();
                let mut y = x.clone();
                y[i] += h;
                cpu.write(*v, &y);
                cpu.run_all();
                let up = cpu.read(loss)[0];
                y[i] -= 2.0 * h;
                cpu.write(*v, &y);
                cpu.run_all();
                let down = cpu.read(loss)[0];
                cpu.write(*v, x);
                let fd = (up - down) / (2.0 * h);
                let a = grad[i];
                assert!(
                    (a - fd).abs() <= 1e-9 + 1e-6 * a.abs().max(fd.abs()),
                    "d loss / d {name}[{i}]: pullback {a:.10} against finite difference {fd:.10}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 4 * (2 + 3 * 10));
    }
}
