//! KickDelta (SYSTEMS.md §6): a harmonic byte model of exactly 7,227 parameters in which eight
//! oscillator groups feed a delta-rule memory whose read is the next-byte prediction. The seed
//! gives only that outline; every choice below is made here, with its reason.
//!
//! **Oscillator encoding (56 parameters).** A byte x (0–255) is a point on eight oscillators.
//! Group g has a learned base frequency f_g in cycles over the 256 byte values, starting at
//! 17 + 2g (17, 19, …, 31), and six harmonics h = 1…6 with a learned phase each; harmonic h of
//! group g contributes cos and sin of 2π·h·f_g·x/256 + φ_{g,h}: 8 × 6 × 2 = 96 numbers a byte.
//! Why these starts: with odd bases 17…31 and harmonics up to 6, the 48 frequencies are all
//! distinct once aliasing (f and 256 − f) is folded, so no feature repeats another, and they
//! span 17 to 186 cycles, fine enough to tell neighbouring byte values apart (a learned table
//! would cost 256 numbers a dimension; the oscillators cost 7 a group). As in Diakosmos's wire
//! (§3.2) the encoding is phasors of a byte's symbols; unlike it the frequencies move with
//! training, each group retuning all its harmonics at once, and the run records show where they
//! went. The frequency is stored ×16 (f_g = p_g / 16) so an Adam step moves it by a sixteenth of
//! the learning rate: at the peak rate one step moves the phase of harmonic 6 at x = 255 by ~0.05 rad.
//!
//! **Context, keys, queries (2,880 parameters).** The context at t is the two latest bytes'
//! encodings, c_t = [e(x_t); e(x_{t−1})] (192 numbers; zeros before the window starts). One map
//! W (192 × 15) gives the query q_t = W c_t and, from the context one position earlier, the key
//! k_t = W c_{t−1} / |W c_{t−1}|. Sharing W is what makes the memory a copier: the key written at
//! t describes the context that x_t followed, and a later query from the same two bytes points
//! the same way, so it reads back what followed them before (an in-window trigram). Unit keys
//! with β in (0, 1) keep every update a contraction, so the state stays bounded over any window.
//!
//! **Write strengths (193 parameters).** β_t = σ(w_β·c_{t−1} + b_β): the context decides how hard
//! the memory overwrites what it holds for it (b_β starts at 0: β = ½).
//!
//! **Values (2 parameters).** The value written at t must come from bytes up to t; it is
//! v_t = λ·M₀k_t + κ·onehot(x_t): the prior's scores for the key's context plus a boost κ of the
//! byte that actually followed. The delta rule writes only the error v_t − M_{t−1}k_t, so a
//! context met again adds nothing (its boost is already there) and a context followed by a new
//! byte moves its boost over. κ starts at 2 (nats), λ at 1.
//!
//! **Memory (3,840 parameters).** M ∈ R^{256×15}, M_t = M_{t−1} + β_t (v_t − M_{t−1}k_t) k_tᵀ,
//! restarted at each window from a learned M₀. M₀ is the part learned across the corpus: its read
//! M₀q_t is a rank-15 trigram predictor; the writes are what this window taught. The read
//! o_t = M_t q_t is the 256 next-byte scores, plus a learned bias of 256 (the unigram, 256
//! parameters), and the loss is their exact cross-entropy. M₀ starts at zero, so a fresh model
//! predicts uniformly (8 bits a byte); W starts N(0, 1/96) so queries start near unit size.
//!
//! 56 + 2,880 + 193 + 2 + 3,840 + 256 = 7,227. Windows of 512 bytes (the memory has more to
//! copy from than in 256), 32 a step, AdamW without decay (decay would pull M₀ toward a blank
//! prior and the frequencies toward zero), peak rate 0.02, warmed over 50 updates then cosine to
//! a tenth, gradients clipped at norm 1.

use alpha_ir::{DType, Graph, Init, IrError, Value};
use alpha_learn::{AdamW, Decay, Learner, Model, Optimizer, Schedule};

use crate::decode::{self, Decoder, Feeds};
use crate::layers::{lm_loss, ramp};
use crate::views::{self, Content, Draw, ModelView, Series, Tensors};
use crate::{System, Tokens};

pub struct KickDelta;

pub const VOCAB: usize = 256;
/// Oscillator groups.
pub const GROUPS: usize = 8;
/// Harmonics a group.
pub const HARMONICS: usize = 6;
/// Numbers in one byte's encoding: a cos and a sin per harmonic.
pub const ENCODING: usize = GROUPS * HARMONICS * 2;
/// The memory's key width.
pub const KEY: usize = 15;
/// Group g's frequency starts at `FIRST_FREQUENCY + g·FREQUENCY_STEP` (see the module's doc).
pub const FIRST_FREQUENCY: f64 = 17.0;
pub const FREQUENCY_STEP: f64 = 2.0;
/// A frequency parameter is the frequency times this (see the module's doc).
pub const FREQUENCY_SCALE: f64 = 16.0;

/// Group g's frequency, in cycles over the 256 byte values, from the stored parameters.
pub fn frequencies(tensors: &Tensors) -> Result<Vec<f64>, String> {
    let p = views::tensor(tensors, "oscillators.frequency", GROUPS)?;
    Ok(p.iter().map(|&x| f64::from(x) / FREQUENCY_SCALE).collect())
}

/// Byte `x`'s encoding e(x) (the model's, in f64): group-major, each group's six cosines then
/// its six sines.
fn encode(frequency: &[f64], phase: &[f32], x: u8) -> [f64; ENCODING] {
    let mut e = [0.0; ENCODING];
    for g in 0..GROUPS {
        for h in 1..=HARMONICS {
            let angle = 2.0 * std::f64::consts::PI * h as f64 * frequency[g] * f64::from(x) / VOCAB as f64
                + f64::from(phase[g * HARMONICS + h - 1]);
            e[g * 2 * HARMONICS + h - 1] = angle.cos();
            e[g * 2 * HARMONICS + HARMONICS + h - 1] = angle.sin();
        }
    }
    e
}

/// The write strength β = σ(w_β·[e(a); e(b)] + b_β) the memory uses for the key of the context
/// "a, preceded by b", for every pair: `[a·256 + b]`. The model writes at t with a = x_{t−1} and
/// b = x_{t−2}; the whole table is what the parameters imply, whatever text comes.
pub fn write_strengths(tensors: &Tensors) -> Result<Vec<f64>, String> {
    let frequency = frequencies(tensors)?;
    let phase = views::tensor(tensors, "oscillators.phase", GROUPS * HARMONICS)?;
    let w = views::tensor(tensors, "keys.write_strength.weight", 2 * ENCODING)?;
    let bias = f64::from(views::tensor(tensors, "keys.write_strength.bias", 1)?[0]);
    // w_β·c splits into the newer byte's half and the older byte's: 2 × 256 dot products.
    let half = |offset: usize| -> Vec<f64> {
        (0..VOCAB)
            .map(|x| {
                let e = encode(&frequency, phase, x as u8);
                e.iter().zip(&w[offset..offset + ENCODING]).map(|(a, &b)| a * f64::from(b)).sum()
            })
            .collect()
    };
    let (newer, older) = (half(0), half(ENCODING));
    let mut out = Vec::with_capacity(VOCAB * VOCAB);
    for a in &newer {
        for b in &older {
            out.push(1.0 / (1.0 + (-(a + b + bias)).exp()));
        }
    }
    Ok(out)
}

/// The statistics of β the run page draws: over every pair of preceding bytes, and with no
/// context at all (a window's first two positions, where β = σ(b_β)).
pub fn write_strength_statistics(tensors: &Tensors) -> Result<Series, String> {
    let mut all = write_strengths(tensors)?;
    let mean = all.iter().sum::<f64>() / all.len() as f64;
    all.sort_by(f64::total_cmp);
    let bias = f64::from(views::tensor(tensors, "keys.write_strength.bias", 1)?[0]);
    let q = |p| views::quantile(&all, p);
    Ok(Series {
        name: "write strength".into(),
        unit: "β over every pair of preceding bytes".into(),
        draw: Draw::Lines,
        labels: ["lowest", "10th percentile", "median", "90th percentile", "highest", "mean", "no context: σ(b_β)"]
            .map(String::from)
            .to_vec(),
        values: vec![q(0.0), q(0.1), q(0.5), q(0.9), q(1.0), mean, 1.0 / (1.0 + (-bias).exp())],
        rows: None,
    })
}

/// `x` `[B, T, C]` moved one position later along T, zeros first.
fn shift(g: &mut Graph, x: Value) -> Value {
    let s = g.shape(x).to_vec();
    let (b, t, c) = (s[0], s[1], s[2]);
    let zero = g.constant(0.0, &[b, 1, c], DType::F32);
    if t == 1 {
        return zero;
    }
    let head = g.slice(x, 1, 0, t - 1);
    g.concat(&[zero, head], 1)
}

/// The oscillators' encoding e(x) `[B, T, E]` of bytes `x` `[B, T, 1]` (f32):
/// angle = 2π·h·f_g·x/256 + φ_{g,h}, each group's cosines then its sines.
fn oscillators(g: &mut Graph, x: Value) -> Value {
    let (batch, t) = (g.shape(x)[0], g.shape(x)[1]);
    g.scoped("oscillators", |g| {
        let frequency = g.param(
            "frequency",
            &[GROUPS],
            Init::Linspace { start: FIRST_FREQUENCY * FREQUENCY_SCALE, step: FREQUENCY_STEP * FREQUENCY_SCALE },
        );
        let phase = g.param("phase", &[GROUPS, HARMONICS], Init::Zeros);
        let per_value = g.scale(frequency, 2.0 * std::f64::consts::PI / (VOCAB as f64 * FREQUENCY_SCALE));
        let base = g.mul(x, per_value); // [B, T, G]
        let harmonics: Vec<Value> = (1..=HARMONICS)
            .map(|h| {
                let a = g.scale(base, h as f64);
                g.reshape(a, &[batch, t, GROUPS, 1])
            })
            .collect();
        let angle = g.concat(&harmonics, 3);
        let angle = g.add(angle, phase);
        let cos = g.unary(alpha_ir::Unary::Cos, angle);
        let sin = g.unary(alpha_ir::Unary::Sin, angle);
        let both = g.concat(&[cos, sin], 3);
        g.reshape(both, &[batch, t, ENCODING])
    })
}

/// The query q_t = W c_t, the unit key k_t = W c_{t−1} / |W c_{t−1}| (`[B, T, K]`) and the write
/// strength β_t = σ(w_β·c_{t−1} + b_β) (`[B, T]`) from the contexts c_t and c_{t−1} `[B, T, 2E]`.
fn keys(g: &mut Graph, context: Value, written_context: Value) -> (Value, Value, Value) {
    let (batch, t) = (g.shape(context)[0], g.shape(context)[1]);
    g.scoped("keys", |g| {
        let w = g.param("weight", &[2 * ENCODING, KEY], Init::Normal { std: (1.0 / ENCODING as f64).sqrt() });
        let q = g.matmul(context, w);
        let raw = g.matmul(written_context, w);
        let sq = g.square(raw);
        let norm2 = g.sum(sq, &[2], true);
        let eps = g.scalar_like(1e-6, norm2);
        let norm2 = g.add(norm2, eps);
        let inv = g.rsqrt(norm2);
        let k = g.mul(raw, inv);
        let wb = g.param("write_strength.weight", &[2 * ENCODING, 1], Init::Zeros);
        let bb = g.param("write_strength.bias", &[1], Init::Zeros);
        let z = g.matmul(written_context, wb);
        let z = g.add(z, bb);
        let beta = g.sigmoid(z);
        (q, k, g.reshape(beta, &[batch, t]))
    })
}

/// The values v_t = λ·M₀k_t + κ·onehot(x_t) `[B, T, 256]` of bytes `x` `[B, T, 1]`, keys `k`.
fn values(g: &mut Graph, x: Value, k: Value, prior: Value) -> Value {
    g.scoped("values", |g| {
        let prior_gain = g.param("prior_gain", &[1], Init::Ones);
        let copy_gain = g.param("copy_gain", &[1], Init::Constant(2.0));
        let values = ramp(g, VOCAB);
        let above = g.binary(alpha_ir::Binary::Ge, x, values);
        let below = g.binary(alpha_ir::Binary::Ge, values, x);
        let onehot = g.mul(above, below); // [B, T, 256]
        let boost = g.mul(onehot, copy_gain);
        let read = g.matmul_t(k, prior, false, true);
        let read = g.mul(read, prior_gain);
        g.add(read, boost)
    })
}

/// The next byte's scores: the memory's read plus the learned unigram bias.
fn scores(g: &mut Graph, read: Value) -> Value {
    let bias = g.param("scores.bias", &[VOCAB], Init::Zeros);
    g.add(read, bias)
}

impl System for KickDelta {
    fn name(&self) -> &'static str {
        "kickdelta"
    }
    fn description(&self) -> &'static str {
        "harmonic byte model, 7,227 parameters: 8 learned-frequency oscillator groups × 6 harmonics → \
         keys, queries, write strengths → a 256×15 delta-rule memory from a learned prior, read as the \
         next-byte scores (systems/kickdelta.rs says why each choice)"
    }
    fn vocab(&self) -> usize {
        VOCAB
    }
    fn tokens(&self) -> Tokens {
        Tokens::Bytes
    }
    fn context(&self) -> usize {
        512
    }
    fn default_batch(&self) -> usize {
        32
    }
    fn default_steps(&self) -> u64 {
        1000
    }

    fn model(&self, batch: usize) -> Result<Model, IrError> {
        let t = self.context();
        let mut g = Graph::new("kickdelta");
        let tokens = g.input("tokens", &[batch, t], DType::I32);
        let targets = g.input("targets", &[batch, t], DType::I32);
        let x = g.cast(tokens, DType::F32);
        let x = g.reshape(x, &[batch, t, 1]);
        let encoding = oscillators(&mut g, x);
        let previous = shift(&mut g, encoding);
        let context = g.concat(&[encoding, previous], 2); // c_t, [B, T, 2E]
        let written_context = shift(&mut g, context); // c_{t−1}
        let (q, k, beta) = keys(&mut g, context, written_context);
        let prior = g.param("memory.initial", &[VOCAB, KEY], Init::Zeros);
        let v = values(&mut g, x, k, prior);
        let o = g.delta_rule(q, k, v, beta, prior);
        let logits = scores(&mut g, o);
        let logits = g.reshape(logits, &[batch * t, VOCAB]);
        lm_loss(g, logits, targets)
    }

    /// One byte a run: the program carries the memory M after the last byte and the last
    /// context c_{t−1} (the two latest bytes' encodings, all the history the keys read), both
    /// restarted at position 0 (M from the learned M₀, c from zeros) as a window restarts them.
    /// Of the host's feeds it reads the token and the position's one-hot (the mask goes unused).
    ///
    /// The step M_t = M_{t−1} + β_t (v_t − M_{t−1}k_t) k_tᵀ, o_t = M_t q_t is written with
    /// products and elementwise ops rather than the DeltaRule op: that op reads only its
    /// initial state and returns only the reads, so the state after the step, which the next
    /// run needs, would have to be recomputed beside it anyway; the explicit step is one
    /// position's arithmetic (two V×K products and one V×K update) in ops every backend has.
    fn decoder(&self) -> Option<Result<Decoder, IrError>> {
        let build = || {
            let t = self.context();
            let mut g = Graph::new("kickdelta-decode");
            let token = g.input("token", &[1, 1], DType::I32);
            let feeds = Feeds::new(&mut g, t, None);
            let x = g.cast(token, DType::F32);
            let x = g.reshape(x, &[1, 1, 1]);
            let encoding = oscillators(&mut g, x);
            let none = g.constant(0.0, &[1, 1, 2 * ENCODING], DType::F32);
            let (last_context, written_context) = feeds.carried(&mut g, "history.context", none);
            let previous = g.slice(written_context, 2, 0, ENCODING);
            let context = g.concat(&[encoding, previous], 2);
            let (q, k, beta) = keys(&mut g, context, written_context);
            let prior = g.param("memory.initial", &[VOCAB, KEY], Init::Zeros);
            let v = values(&mut g, x, k, prior);
            let (memory, m) = feeds.carried(&mut g, "memory.state", prior);
            // M ← M + β (v − M·k) kᵀ, then the read M·q.
            let k_column = g.reshape(k, &[KEY, 1]);
            let k_row = g.reshape(k, &[1, KEY]);
            let known = g.matmul(m, k_column);
            let v = g.reshape(v, &[VOCAB, 1]);
            let error = g.sub(v, known);
            let beta = g.reshape(beta, &[1, 1]);
            let weighted = g.mul(error, beta);
            let written = g.matmul(weighted, k_row);
            let m_next = g.add(m, written);
            let q = g.reshape(q, &[1, KEY]);
            let o = g.matmul_t(q, m_next, false, true);
            let logits = scores(&mut g, o);
            Ok(Decoder {
                program: decode::program(g, logits, vec![(memory, m_next), (last_context, context)])?,
                positions: t,
                rotary: None,
                learned_positions: false,
            })
        };
        Some(build())
    }

    fn model_views(&self) -> Vec<ModelView> {
        let mut out = vec![
            ModelView {
                id: "oscillators",
                title: "Oscillator frequencies".into(),
                about:
                    "Each group's base frequency f_g, in cycles over the 256 byte values, at every kept checkpoint. \
                        The groups start at 17, 19, …, 31; a group that moves retunes all six of its harmonics at once."
                        .into(),
                content: Content::Tracked {
                    tensors: vec!["oscillators.frequency".into()],
                    // Beside the frequencies, each one's move from its start: a tenth of a cycle
                    // is what retunes the sixth harmonic at the top byte values, and it would be
                    // a hair on an axis spanning 17 to 31.
                    compute: std::sync::Arc::new(|t| {
                        let f = frequencies(t)?;
                        let labels: Vec<String> = (0..GROUPS).map(|g| format!("group {g}")).collect();
                        let moved = f
                            .iter()
                            .enumerate()
                            .map(|(g, x)| x - (FIRST_FREQUENCY + FREQUENCY_STEP * g as f64))
                            .collect();
                        Ok(vec![
                            Series {
                                name: "frequency".into(),
                                unit: "cycles over the byte values".into(),
                                draw: Draw::Lines,
                                labels: labels.clone(),
                                values: f,
                                rows: None,
                            },
                            Series {
                                name: "moved from its start".into(),
                                unit: "cycles".into(),
                                draw: Draw::Lines,
                                labels,
                                values: moved,
                                rows: None,
                            },
                        ])
                    }),
                },
            },
            ModelView {
                id: "write-strengths",
                title: "Memory write strengths".into(),
                about: "β = σ(w_β·c + b_β), how hard the delta rule overwrites what the memory holds for a context, \
                        computed from each kept checkpoint for all 65,536 pairs of the two bytes the key is made of: \
                        its spread over the pairs, and its value before a window has any context."
                    .into(),
                content: Content::Tracked {
                    tensors: vec!["oscillators.*".into(), "keys.write_strength.*".into()],
                    compute: std::sync::Arc::new(|t| Ok(vec![write_strength_statistics(t)?])),
                },
            },
        ];
        if let Ok(table) = views::parameter_table(self) {
            out.push(ModelView {
                id: "parameters",
                title: "Parameters by optimizer".into(),
                about: "Every parameter tensor, its shape and the optimizer its learner gives it.".into(),
                content: Content::Table(table),
            });
        }
        out
    }

    fn learner(&self, steps: u64) -> Learner {
        Learner::single(
            Optimizer::AdamW(AdamW { beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.0, decay: Decay::None }),
            0.02,
            Schedule::WarmupCosine { warmup: 50.min(steps / 10 + 1), total: steps, floor: 0.1 },
            Some(1.0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_exactly_7227_parameters() {
        let m = KickDelta.model(2).unwrap();
        assert_eq!(m.graph.parameter_count(), 7_227);
    }

    /// The views on the initial weights: the frequencies start at 17, 19, …, 31 and every β at
    /// ½ (the write strength's weights and bias start at zero); on moved weights β is σ of the
    /// dot product the doc comment gives, pair by pair.
    #[test]
    fn the_views_read_frequencies_and_write_strengths() {
        let m = KickDelta.model(1).unwrap();
        let mut t: Tensors =
            alpha_learn::init::initial_leaves(&m.graph, 0).into_iter().map(|(n, v)| (n, (vec![v.len()], v))).collect();
        assert_eq!(frequencies(&t).unwrap(), (0..8).map(|g| 17.0 + 2.0 * g as f64).collect::<Vec<_>>());
        let s = write_strength_statistics(&t).unwrap();
        assert!(s.values.iter().all(|&b| (b - 0.5).abs() < 1e-15), "{s:?}");
        // One weight on group 0's first cosine of the newer byte: β(a, b) = σ(0.7·cos(2π·17·a/256) − 0.2).
        t.get_mut("keys.write_strength.weight").unwrap().1[0] = 0.7;
        t.get_mut("keys.write_strength.bias").unwrap().1[0] = -0.2;
        let all = write_strengths(&t).unwrap();
        for (a, b) in [(0usize, 0usize), (65, 32), (255, 7)] {
            let z = 0.7 * (2.0 * std::f64::consts::PI * 17.0 * a as f64 / 256.0).cos() - 0.2f32 as f64;
            let want = 1.0 / (1.0 + (-z).exp());
            assert!((all[a * 256 + b] - want).abs() < 1e-7, "({a}, {b}): {} against {want}", all[a * 256 + b]);
        }
        let views = KickDelta.model_views();
        let ids: Vec<&str> = views.iter().map(|v| v.id).collect();
        assert_eq!(ids, ["oscillators", "write-strengths", "parameters"]);
    }

    /// The view's table of β is the model's own: on moved weights and real bytes, the β the
    /// compiled model computes at each position t ≥ 2 is the table's entry for (x_{t−1}, x_{t−2}),
    /// and at t = 0, with no context, σ(b_β).
    #[test]
    fn the_write_strength_table_is_what_the_model_computes() {
        use alpha_cpu::Cpu;
        let m = KickDelta.model(1).unwrap();
        let sigmoid = m
            .graph
            .nodes
            .iter()
            .position(|n| matches!(n.op, alpha_ir::Op::Unary(alpha_ir::Unary::Sigmoid)) && n.scope == "keys")
            .expect("the write strength's sigmoid");
        let beta = alpha_ir::Value { node: sigmoid as u32, index: 0 };
        let outputs = std::collections::BTreeMap::from([("logits".to_string(), m.logits), ("beta".to_string(), beta)]);
        let program = alpha_ir::Program::single(m.graph.finish().unwrap(), "forward", outputs);
        let mut cpu = Cpu::<f32>::compile(&program).unwrap();
        let mut state = 7u64;
        let mut noise = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        };
        let mut t: Tensors = Tensors::new();
        for (name, v) in alpha_learn::init::initial_leaves(&program.graph, 0) {
            let moved: Vec<f32> = match name.as_str() {
                "oscillators.frequency" => v.iter().map(|&x| x + (4.0 * noise()) as f32).collect(),
                "oscillators.phase" | "keys.write_strength.weight" => {
                    v.iter().map(|_| (0.4 * noise()) as f32).collect()
                }
                "keys.write_strength.bias" => vec![0.1],
                _ => v,
            };
            cpu.write_named(&name, &moved.iter().map(|&x| f64::from(x)).collect::<Vec<_>>());
            t.insert(name, (vec![moved.len()], moved));
        }
        let text: Vec<u8> = b"ROMEO: But soft, what light through yonder window breaks? It is the east. "
            .iter()
            .cycle()
            .take(KickDelta.context())
            .copied()
            .collect();
        let ids: Vec<f64> = text.iter().map(|&b| f64::from(b)).collect();
        cpu.write_named("tokens", &ids);
        cpu.write_named("targets", &ids);
        cpu.run_all();
        let got = cpu.read(beta).to_vec();
        let table = write_strengths(&t).unwrap();
        let no_context = 1.0 / (1.0 + (-0.1f32 as f64).exp());
        assert!((f64::from(got[0]) - no_context).abs() < 1e-6, "{} against {no_context}", got[0]);
        // The model's angles reach ~1,300 rad in f32 (one ulp ≈ 1e-4), the view's are f64: a
        // few 1e-5 apart in β; a wrong feature order or pair would be tenths apart.
        for p in 2..text.len() {
            let want = table[usize::from(text[p - 1]) * VOCAB + usize::from(text[p - 2])];
            assert!(
                (f64::from(got[p]) - want).abs() < 2e-4,
                "position {p}: model {} against the view's {want}",
                got[p]
            );
        }
    }

    #[test]
    fn its_graph_uses_the_delta_rule() {
        let m = KickDelta.model(1).unwrap();
        assert_eq!(m.graph.nodes.iter().filter(|n| matches!(n.op, alpha_ir::Op::DeltaRule)).count(), 1);
    }
}
