//! Diakosmos (SYSTEMS.md §3): harmonic-gpt's `spectral_kan_unified_scan_planar` at 100M, a byte
//! model with no attention matrix and no learned embedding — 99,823,934 parameters in 199
//! tensors, context 2,048 bytes.
//!
//! **Shape (from the seed).** A byte enters as its fixed row of the wire ([`crate::diakosmos_wire`]):
//! 7 groups × 95 phasors × (cos, sin) = 1,330 numbers, not learned. 14 blocks keep the stream in
//! those 7 groups of 190. Each block mixes two paths by a learned gate per group,
//! x_g ← x_g + σ(β_g)·T_g + (1 − σ(β_g))·P_g:
//!
//! - the temporal path T (causal): h = LN(x); [q; k; v] = W_qkv·h + b; head j (of 7) takes the
//!   j-th 190-slice of q, k and v; 8 harmonic scalars q̃_{j,ℓ} = ⟨A_{j,ℓ}, q_j⟩,
//!   k̃_{j,ℓ} = ⟨B_{j,ℓ}, k_j⟩; for each head and harmonic a state S ∈ R^190 in f32,
//!   S_t = γ_{j,ℓ}·S_{t−1} + (c_{j,ℓ}·k̃_{t,j,ℓ})·v_{t,j} with γ = σ(g_j + o_ℓ), from zero at every
//!   window; the read y_j = Σ_ℓ q̃_{j,ℓ}·S_{j,ℓ}; T = W_o·y + b_o. The recurrence and its read
//!   are one IR op, [`alpha_ir::Op::HarmonicScan`], stepped position by position (never the
//!   cumulative-sum shortcut, which overflows f32), its state never in memory;
//! - the spatial path P (within one position): each group's unit vector u_g = x_g/‖x_g‖; the pairs
//!   (0,1), (2,3), (4,5) turned coordinate by coordinate by 0.3·θ_{p,i}; P_g = κ_g·(turned u_g).
//!
//! The head: z = LN_f(x); features [z; ⟨û_g, m_g⟩ for 7 groups; ‖m_g‖ for 7 groups] (1,344);
//! logits = W_head·f, no bias; cross-entropy against the next byte.
//!
//! **Choices where the seed is silent** ([HYP] or [UNK] in SYSTEMS.md), each made to keep the
//! model causal and trainable; change one only with a measurement:
//!
//! - *The wire's open items* (Haar scales, the 95 harmonics' map, order, amplitude): the choices
//!   written in [`crate::diakosmos_wire`]. The table is built inside the graph from the byte
//!   values by those same definitions ([`wire`]: integer arithmetic in units of π/8, wrapped to
//!   (−π, π] before the cos and sin), because the IR has no constant tables; a test holds it
//!   to the host table.
//! - *Storage:* every matrix as the seed's table lists it, `[outputs, inputs]` (PyTorch's
//!   layout), multiplied transposed: a reference in PyTorch loads the checkpoint as it is.
//! - *q, k, v and the heads:* W_qkv's outputs are q, then k, then v, and head j is the
//!   contiguous slice j·190..(j+1)·190 of each, so heads coincide with wire groups.
//! - *LayerNorm ε:* 1e-5, PyTorch's default.
//! - *No extra scaling* (such as 1/√190) in the harmonic scalars: the seed says there is no
//!   polynomial or tanh there, and an unstated factor is more likely absent than present.
//! - *The current byte is written before the read* (S_t includes position t): the seed's
//!   causality gate (the loss at p changes only with bytes ≤ p) allows it, and without it a
//!   block could not see the byte it is predicting from.
//! - *Rotation sign:* counter-clockwise, (u_a, u_b) ↦ (u_a cos α − u_b sin α, u_a sin α + u_b cos α)
//!   for the pair's first and second group. With θ starting at 0 the sign only names the
//!   direction θ moves; training is symmetric under it.
//! - *Group 6, which has no partner:* P_6 = κ_6·u_6, its unit vector unturned. There are 7
//!   couplings, so group 6 must receive something scaled by κ_6; the identity is the turn it
//!   would get at θ = 0.
//! - *The spatial path's input is the stream x*, not LN(x): the LayerNorm is named `temporal.ln`,
//!   so it belongs to the temporal path, and a unit vector needs no normalisation before it.
//! - *P is the turned unit vector itself*, not its difference from u and not rescaled by ‖x_g‖:
//!   the seed draws "rotation on each group's unit vector · gain per group" and nothing more.
//! - *Unit vectors* divide by √(‖x‖² + 10⁻¹²) (PyTorch's `normalize` floors the norm at 10⁻¹²
//!   likewise); group norms start at √95 ≈ 9.7, far from the floor.
//! - *The running mean in the head* is causal within the window and includes position t:
//!   m_{t,g} = (1/(t+1))·Σ_{s≤t} û_{s,g}, the mean of the group's unit vectors û = z_g/‖z_g‖ of
//!   the final normalised stream (what the head reads). Alignment ⟨û_{t,g}, m_{t,g}⟩, length
//!   √(‖m_{t,g}‖² + 10⁻¹²). Features in the order the seed lists them: the stream, the 7
//!   alignments, the 7 lengths. The running sum is the IR's linear recurrence with γ = 1.
//! - *Initialisations:* LayerNorm gains 1 and biases 0; every linear weight and bias
//!   U(±1/√fan_in) (PyTorch's `nn.Linear` default, SYSTEMS.md's reading): 1/√1330 for W_qkv,
//!   its bias, W_o and its bias, 1/√1344 for W_head; the harmonic weights A and B U(±1/√190),
//!   the same rule for what is a 190 → 1 projection per head and harmonic; θ = 0, so the spatial
//!   path starts as each group's unit vector scaled by κ = 0.5 and turns only as training asks
//!   (its gradient at 0 is not zero: the derivative of a turn is a quarter turn). The seed's
//!   own: c = 1/(1+ℓ), g = 3, o = 0 … −1 linearly, κ = 0.5, β = 0. Rotational AdamW fixes each
//!   row of W_qkv and W_head at its initial norm, after centring it (REQ's construction, done
//!   by the optimizer's first update): rows start at norm ≈ 1/√3.
//! - *Precision:* f32 parameters, activations and recurrence state; the three large products
//!   (W_qkv, W_o, W_head) take bf16 operands with f32 sums, as the seed's Alpha did; the small
//!   harmonic products and the scan stay f32. [`Diakosmos::bf16`] turns the rounding off, for
//!   checking gradients in f64.
//! - *Optimizers* (SYSTEMS.md §3.6): Muon on the 14 W_o (μ 0.95 Nesterov, five quintic
//!   iterations, ε 1e-7, shape factor √max(1, out/in) = 1 on these square matrices), peak 0.002;
//!   rotational AdamW in REQ's form (β 0.9/0.999, ε 1e-8, λ 0.01, ρ 0.9, ε_rot 1e-8, per output
//!   row) on the 14 W_qkv and W_head, peak 0.003; Adam (β 0.9/0.999, ε 1e-8, no decay) on the
//!   rest, peak 0.003. One schedule: linear warm-up to update 200 (update t at t/200 of the
//!   peak), cosine to a tenth at the run's last update; a run of fewer than 1,990 updates warms
//!   over a tenth of them (⌊updates/10⌋ + 1), so a short run still reaches its peak. One clip of
//!   the global norm at 1.0.
//! - *Windows:* Alpha's byte stream gives each window 2,048 inputs and their 2,048 next bytes
//!   as targets; the state starts from zero in each. The seed's update is 64 windows:
//!   `--batch 2 --accumulate 32`.

use std::collections::BTreeMap;

use alpha_ir::{Binary, DType, Graph, Init, IrError, Value};
use alpha_learn::{Group, Learner, Model, Muon, Optimizer, Rotational, Rows, Schedule};

use crate::decode::{self, Decoder, Feeds};
use crate::diakosmos_wire::{haar_partner, GROUPS, SCALES};
use crate::layers::{bf16_matmul, lm_inputs, lm_loss, ramp};
use crate::views::{self, Content, Draw, LabelledPoint, ModelView, PointSet, Series, Tensors};
use crate::{System, Tokens};

pub const VOCAB: usize = 256;
/// Group pairs the spatial path turns: (0,1), (2,3), (4,5).
pub const PAIRS: usize = 3;
/// The spatial path's angle is this times θ.
pub const ANGLE_SCALE: f64 = 0.3;
/// Warm-up updates of the seed's schedule.
pub const WARMUP: u64 = 200;
/// LayerNorm's ε (PyTorch's default).
const LN_EPS: f64 = 1e-5;
/// Added to a squared norm before its root: a unit vector's, and the running mean's length.
const NORM_EPS: f64 = 1e-12;

/// The geometry: the seed's by default; tests build small ones of the same code.
#[derive(Debug, Clone)]
pub struct Diakosmos {
    pub blocks: usize,
    /// Phasors a wire group (95): the group is twice as wide.
    pub phasors: usize,
    /// Harmonics a head (8).
    pub harmonics: usize,
    /// Bytes a window (2,048).
    pub context: usize,
    /// Round the three large products' operands to bf16 (the device's numerics); off, the
    /// model runs in the arena's precision (f64 for finite differences).
    pub bf16: bool,
}

impl Default for Diakosmos {
    fn default() -> Self {
        Diakosmos { blocks: 14, phasors: 95, harmonics: 8, context: 2048, bf16: true }
    }
}

/// `units` (integers, in π/8) wrapped to (−8, 8]: less 16·n with n = ⌈(u − 8)/16⌉, counted as
/// the thresholds 16m + 9 (m from `lo` to `hi`) at or below u, plus `lo`. `lo` and `hi` must
/// bracket ⌊(u − 9)/16⌋ for every u.
fn wrap_units(g: &mut Graph, units: Value, lo: i64, hi: i64) -> Value {
    let shape = g.shape(units).to_vec();
    let count = (hi - lo + 1) as usize;
    let m = ramp(g, count);
    let thresholds = g.scale(m, 16.0);
    let first = g.scalar_like((16 * lo + 9) as f64, thresholds);
    let thresholds = g.add(thresholds, first);
    let mut wide = shape.clone();
    wide.push(1);
    let u = g.reshape(units, &wide);
    let at_or_below = g.binary(Binary::Ge, u, thresholds);
    let n = g.sum(at_or_below, &[shape.len()], false);
    let lo = g.scalar_like(lo as f64, n);
    let n = g.add(n, lo);
    let turns = g.scale(n, 16.0);
    g.sub(units, turns)
}

/// The wire table `[256, 7·2·phasors]`, built in the graph from the byte values by
/// [`crate::diakosmos_wire`]'s definitions: bit pairs as counts of thresholds, Gray-coded QPSK
/// phases 2 + 4k, Hamming parities as sums, Haar scales as sums and differences with the same
/// partners, harmonic h = 4r + s as scale s turned by r, all in integer units of π/8 (exact in
/// f32), wrapped to (−π, π], then cos and sin interleaved. Computed on 256 rows, whatever the
/// batch; nothing in it is learned, and no gradient reaches it.
pub fn wire(g: &mut Graph, phasors: usize) -> Value {
    let bytes = ramp(g, VOCAB);
    wire_rows(g, bytes, phasors)
}

/// The wire's rows `[N, 7·2·phasors]` of the byte values `bytes` `[N]` (f32, whole numbers
/// 0–255), by [`wire`]'s arithmetic element for element: a row is the same bits whether it is
/// built alone (the decode program, one byte a run) or in the 256-row table.
fn wire_rows(g: &mut Graph, bytes: Value, phasors: usize) -> Value {
    let rows = g.shape(bytes)[0];
    let column = g.reshape(bytes, &[rows, 1]);
    // ⌊x/d⌋ = the count of d, 2d, …, ⌊255/d⌋·d at or below x.
    let floor_div = |g: &mut Graph, d: usize| {
        let k = ramp(g, 255 / d);
        let t = g.scale(k, d as f64);
        let d = g.scalar_like(d as f64, t);
        let t = g.add(t, d);
        let ge = g.binary(Binary::Ge, column, t);
        g.sum(ge, &[1], false)
    };
    let (q4, q16, q64) = (floor_div(g, 4), floor_div(g, 16), floor_div(g, 64));
    let less_four = |g: &mut Graph, a: Value, b: Value| {
        let b4 = g.scale(b, 4.0);
        g.sub(a, b4)
    };
    // The pairs' values, bits 7–6 first, and their phases 2 + 4k.
    let pairs = [q64, less_four(g, q16, q64), less_four(g, q4, q16), less_four(g, bytes, q4)];
    let phase = |g: &mut Graph, k: Value| {
        let k4 = g.scale(k, 4.0);
        let two = g.scalar_like(2.0, k4);
        g.add(k4, two)
    };
    let [a, b, c, d] = pairs.map(|k| phase(g, k));
    let sum3 = |g: &mut Graph, x: Value, y: Value, z: Value| {
        let xy = g.add(x, y);
        g.add(xy, z)
    };
    let base = [a, b, c, d, sum3(g, a, c, d), sum3(g, a, b, d), sum3(g, b, c, d)];
    // 28 phases, group-major: [group][scale].
    let mut phases = Vec::with_capacity(GROUPS * SCALES);
    for group in 0..GROUPS {
        phases.push(base[group]);
        for scale in 1..SCALES {
            let partner = haar_partner(group, scale);
            phases.push(if group < partner {
                g.add(base[group], base[partner])
            } else {
                g.sub(base[partner], base[group])
            });
        }
    }
    let columns: Vec<Value> = phases.iter().map(|&p| g.reshape(p, &[rows, 1])).collect();
    let phases = g.concat(&columns, 1);
    let phases = g.reshape(phases, &[rows, GROUPS, 1, SCALES]);
    // Harmonic h = 4r + s: scale s turned by r·π/8.
    let turns = phasors.div_ceil(SCALES);
    let r = ramp(g, turns);
    let r = g.reshape(r, &[1, 1, turns, 1]);
    let units = g.add(phases, r);
    let units = g.reshape(units, &[rows, GROUPS, turns * SCALES]);
    let units = if turns * SCALES == phasors { units } else { g.slice(units, 2, 0, phasors) };
    // Bounds of the units: a phase is at least 2, a parity at most 42, so a Haar difference is
    // at least −40 and a Haar sum at most 84; turns add 0 … turns − 1.
    let (lowest, highest) = (-40i64, 84 + turns as i64 - 1);
    let wrapped = wrap_units(g, units, (lowest - 9).div_euclid(16), (highest - 9).div_euclid(16));
    let radians = g.scale(wrapped, std::f64::consts::FRAC_PI_8);
    let cos = g.unary(alpha_ir::Unary::Cos, radians);
    let sin = g.unary(alpha_ir::Unary::Sin, radians);
    let cos = g.reshape(cos, &[rows, GROUPS, phasors, 1]);
    let sin = g.reshape(sin, &[rows, GROUPS, phasors, 1]);
    let both = g.concat(&[cos, sin], 3);
    g.reshape(both, &[rows, GROUPS * 2 * phasors])
}

/// The names of the wire's groups and scales, as the seed's table gives them.
pub const GROUP_NAMES: [&str; GROUPS] =
    ["bits 7–6", "bits 5–4", "bits 3–2", "bits 1–0", "parity 0", "parity 1", "parity 2"];
pub const SCALE_NAMES: [&str; SCALES] = ["base", "H1", "H2", "H3"];

/// The wire's constellation: for each group and scale, the points on the unit circle its phases
/// take, each with the bytes that land there (from [`crate::diakosmos_wire`]'s definitions).
pub fn constellation() -> Vec<PointSet> {
    let phases: Vec<_> = (0..=255u8).map(crate::diakosmos_wire::phase_units).collect();
    let mut sets = vec![];
    for group in 0..GROUPS {
        for scale in 0..SCALES {
            let mut at: BTreeMap<i32, Vec<u8>> = BTreeMap::new();
            for (byte, p) in phases.iter().enumerate() {
                at.entry(p[group][scale]).or_default().push(byte as u8);
            }
            let points = at
                .into_iter()
                .map(|(units, bytes)| {
                    let radians = f64::from(units) * std::f64::consts::FRAC_PI_8;
                    LabelledPoint { x: radians.cos(), y: radians.sin(), bytes }
                })
                .collect();
            sets.push(PointSet { name: format!("{} · {}", GROUP_NAMES[group], SCALE_NAMES[scale]), points });
        }
    }
    sets
}

/// Every recurrence half-life ln ½ / ln γ with γ = σ(g_j + o_ℓ), in bytes, block by block (in
/// block order), head by head, harmonic by harmonic, with its label. Reads whatever blocks and
/// sizes the checkpoint holds, so any geometry of the model is read alike.
pub fn half_lives(tensors: &Tensors) -> Result<(Vec<String>, Vec<f64>), String> {
    let mut blocks: Vec<usize> = tensors
        .keys()
        .filter_map(|k| k.strip_prefix("blocks.")?.strip_suffix(".attn._gate_logit")?.parse().ok())
        .collect();
    blocks.sort_unstable();
    if blocks.is_empty() {
        return Err("the checkpoint has no blocks.*.attn._gate_logit".into());
    }
    let (mut labels, mut values) = (vec![], vec![]);
    for b in blocks {
        let gate = &tensors[&format!("blocks.{b}.attn._gate_logit")].1;
        let offsets = format!("blocks.{b}.attn._harmonic_decay_offset");
        let (_, offset) = tensors.get(&offsets).ok_or_else(|| format!("the checkpoint has no tensor {offsets}"))?;
        for (j, &g) in gate.iter().enumerate() {
            for (l, &o) in offset.iter().enumerate() {
                let gamma = 1.0 / (1.0 + (-(f64::from(g) + f64::from(o))).exp());
                labels.push(format!("block {b} head {j} ℓ{l}"));
                values.push(0.5f64.ln() / gamma.ln());
            }
        }
    }
    Ok((labels, values))
}

/// How a block's temporal path runs its recurrence: r, w, v, γ → y (see `Diakosmos::temporal`).
type Scan<'a> = dyn FnMut(&mut Graph, Value, Value, Value, Value) -> Value + 'a;

/// x / √(Σx² + ε) along the last axis.
fn unit(g: &mut Graph, x: Value) -> Value {
    let last = g.shape(x).len() - 1;
    let sq = g.square(x);
    let ss = g.sum(sq, &[last], true);
    let eps = g.scalar_like(NORM_EPS, ss);
    let ss = g.add(ss, eps);
    let inv = g.rsqrt(ss);
    g.mul(x, inv)
}

/// Each head's harmonic scalars: x `[N, 7, D]` against weights `[7, L, D]` → `[N, 7, L]`, one
/// product batched over the heads.
fn harmonic_scalars(g: &mut Graph, x: Value, weights: Value) -> Value {
    let by_head = g.permute(x, &[1, 0, 2]);
    let s = g.matmul_t(by_head, weights, false, true);
    g.permute(s, &[1, 0, 2])
}

impl Diakosmos {
    /// Numbers a group: cos and sin of each phasor.
    pub fn group_width(&self) -> usize {
        2 * self.phasors
    }
    /// The stream's width (1,330).
    pub fn width(&self) -> usize {
        GROUPS * self.group_width()
    }
    /// The head's features: the stream, 7 alignments, 7 lengths (1,344).
    pub fn features(&self) -> usize {
        self.width() + 2 * GROUPS
    }

    /// The next byte's scores from the head's features.
    fn head(&self, g: &mut Graph, f: Value) -> Value {
        let head = g.param(
            "head.weight",
            &[VOCAB, self.features()],
            Init::Uniform { bound: 1.0 / (self.features() as f64).sqrt() },
        );
        self.linear(g, f, head)
    }

    /// x·Wᵀ for W stored `[outputs, inputs]`, bf16 operands when the model says so.
    fn linear(&self, g: &mut Graph, x: Value, w: Value) -> Value {
        if self.bf16 {
            bf16_matmul(g, x, w, true)
        } else {
            g.matmul_t(x, w, false, true)
        }
    }

    /// The causal temporal path: `[N, W]` → `[N, W]`, its recurrence run by `scan` (r, w
    /// `[N, 7, L]`, v `[N, 7, D]`, γ `[7, L]` → y `[N, 7, D]`): the whole window's
    /// [`alpha_ir::Op::HarmonicScan`] in the model, one step from a carried state in the decode.
    fn temporal(&self, g: &mut Graph, x: Value, scan: &mut Scan) -> Value {
        let (d, l, w) = (self.group_width(), self.harmonics, self.width());
        let n = g.shape(x)[0];
        let h = g.scoped("temporal", |g| {
            let gain = g.param("ln.weight", &[w], Init::Ones);
            let bias = g.param("ln.bias", &[w], Init::Zeros);
            g.layer_norm(x, gain, bias, LN_EPS)
        });
        g.scoped("attn", |g| {
            let bound = 1.0 / (w as f64).sqrt();
            let qkv_w = g.param("qkv_proj.weight", &[3 * w, w], Init::Uniform { bound });
            let qkv_b = g.param("qkv_proj.bias", &[3 * w], Init::Uniform { bound });
            let harmonic = Init::Uniform { bound: 1.0 / (d as f64).sqrt() };
            let a = g.param("q_harmonic_weight", &[GROUPS, l, d], harmonic.clone());
            let b = g.param("k_harmonic_weight", &[GROUPS, l, d], harmonic);
            let starts = (0..GROUPS * l).map(|i| 1.0 / (1 + i % l) as f64).collect();
            let coeffs = g.param("spectral_coeffs", &[GROUPS, l], Init::Values(starts));
            let gate = g.param("_gate_logit", &[GROUPS], Init::Constant(3.0));
            let step = if l > 1 { -1.0 / (l - 1) as f64 } else { 0.0 };
            let offset = g.param("_harmonic_decay_offset", &[l], Init::Linspace { start: 0.0, step });
            let out_w = g.param("out_proj.weight", &[w, w], Init::Uniform { bound });
            let out_b = g.param("out_proj.bias", &[w], Init::Uniform { bound });

            let qkv = self.linear(g, h, qkv_w);
            let qkv = g.add(qkv, qkv_b);
            let part = |g: &mut Graph, i: usize| {
                let s = g.slice(qkv, 1, i * w, (i + 1) * w);
                g.reshape(s, &[n, GROUPS, d])
            };
            let (q, k, v) = (part(g, 0), part(g, 1), part(g, 2));
            let read = harmonic_scalars(g, q, a);
            let keys = harmonic_scalars(g, k, b);
            let write = g.mul(keys, coeffs);
            let gate = g.reshape(gate, &[GROUPS, 1]);
            let logit = g.add(gate, offset);
            let gamma = g.sigmoid(logit);
            let y = scan(g, read, write, v, gamma);
            let y = g.reshape(y, &[n, w]);
            let o = self.linear(g, y, out_w);
            g.add(o, out_b)
        })
    }

    /// The spatial path within each position: the stream's groups `[N, 7, D]` → `[N, 7, D]`.
    fn spatial(&self, g: &mut Graph, groups: Value) -> Value {
        let (d, n) = (self.group_width(), g.shape(groups)[0]);
        g.scoped("spatial", |g| {
            let theta = g.param("theta", &[PAIRS, d], Init::Zeros);
            let coupling = g.param("coupling", &[GROUPS], Init::Constant(0.5));
            let u = unit(g, groups);
            let paired = g.slice(u, 1, 0, 2 * PAIRS);
            let paired = g.reshape(paired, &[n, PAIRS, 2, d]);
            let first = g.slice(paired, 2, 0, 1);
            let second = g.slice(paired, 2, 1, 2);
            let angle = g.scale(theta, ANGLE_SCALE);
            let angle = g.reshape(angle, &[PAIRS, 1, d]);
            let (cos, sin) = (g.unary(alpha_ir::Unary::Cos, angle), g.unary(alpha_ir::Unary::Sin, angle));
            let (fc, fs) = (g.mul(first, cos), g.mul(first, sin));
            let (sc, ss) = (g.mul(second, cos), g.mul(second, sin));
            let turned_first = g.sub(fc, ss);
            let turned_second = g.add(fs, sc);
            let turned = g.concat(&[turned_first, turned_second], 2);
            let turned = g.reshape(turned, &[n, 2 * PAIRS, d]);
            let lone = g.slice(u, 1, 2 * PAIRS, GROUPS);
            let all = g.concat(&[turned, lone], 1);
            let kappa = g.reshape(coupling, &[GROUPS, 1]);
            g.mul(all, kappa)
        })
    }

    /// One block: x ← x + σ(β)·T + (1 − σ(β))·P per group.
    fn block(&self, g: &mut Graph, x: Value, scan: &mut Scan) -> Value {
        let (d, w) = (self.group_width(), self.width());
        let n = g.shape(x)[0];
        let temporal = self.temporal(g, x, scan);
        let groups = g.reshape(x, &[n, GROUPS, d]);
        let spatial = self.spatial(g, groups);
        let beta = g.param("gate_logit", &[GROUPS], Init::Zeros);
        let beta = g.reshape(beta, &[GROUPS, 1]);
        let share = g.sigmoid(beta);
        let temporal = g.reshape(temporal, &[n, GROUPS, d]);
        let apart = g.sub(temporal, spatial);
        let weighted = g.mul(apart, share);
        let mixed = g.add(spatial, weighted);
        let x = g.add(groups, mixed);
        g.reshape(x, &[n, w])
    }

    /// The head's features `[N, 1344]`: the normalised stream, then each group's alignment
    /// with its running mean, then that mean's length; `running_mean` maps the unit vectors
    /// `[N, 7, D]` to their means so far `[N, 7, D]` (over the window in the model, from a
    /// carried sum and count in the decode).
    fn features_of(&self, g: &mut Graph, x: Value, running_mean: &mut dyn FnMut(&mut Graph, Value) -> Value) -> Value {
        let (d, w) = (self.group_width(), self.width());
        let n = g.shape(x)[0];
        let gain = g.param("ln_f.weight", &[w], Init::Ones);
        let bias = g.param("ln_f.bias", &[w], Init::Zeros);
        let z = g.layer_norm(x, gain, bias, LN_EPS);
        let groups = g.reshape(z, &[n, GROUPS, d]);
        let u = unit(g, groups);
        let mean = running_mean(g, u);
        let along = g.mul(u, mean);
        let alignment = g.sum(along, &[2], false);
        let sq = g.square(mean);
        let ss = g.sum(sq, &[2], false);
        let eps = g.scalar_like(NORM_EPS, ss);
        let ss = g.add(ss, eps);
        let length = g.sqrt(ss);
        g.concat(&[z, alignment, length], 1)
    }
}

impl System for Diakosmos {
    fn name(&self) -> &'static str {
        "diakosmos"
    }
    fn description(&self) -> &'static str {
        "harmonic byte model, 99.8M: fixed 1,330-number wire (7 groups × 95 phasors), 14 blocks of a causal \
         per-harmonic decaying recurrence (7 heads × 8) and planar rotations of group pairs mixed by a gate per \
         group, Muon/rotational AdamW/Adam by role (systems/diakosmos.rs says each choice)"
    }
    fn vocab(&self) -> usize {
        VOCAB
    }
    fn tokens(&self) -> Tokens {
        Tokens::Bytes
    }
    fn context(&self) -> usize {
        self.context
    }
    fn default_batch(&self) -> usize {
        2
    }
    fn default_steps(&self) -> u64 {
        15_360
    }

    fn model(&self, batch: usize) -> Result<Model, IrError> {
        let t = self.context;
        let n = batch * t;
        let mut g = Graph::new("diakosmos");
        let (tokens, targets) = lm_inputs(&mut g, batch, t);
        let width = self.width();
        // The GPU's gather moves rows in 16-byte pieces: the table is padded with zero columns
        // to a multiple of 4 floats, and the padding is cut off before the first block.
        let padded = width.next_multiple_of(4);
        let table = g.scoped("wire", |g| {
            let table = wire(g, self.phasors);
            if padded == width {
                return table;
            }
            let zeros = g.constant(0.0, &[VOCAB, padded - width], DType::F32);
            g.concat(&[table, zeros], 1)
        });
        let x = g.gather(table, tokens);
        let x = g.reshape(x, &[n, padded]);
        let mut x = if padded == width { x } else { g.slice(x, 1, 0, width) };
        let (d, w) = (self.group_width(), width);
        let mut scan = |g: &mut Graph, r: Value, wr: Value, v: Value, gamma: Value| {
            let l = g.shape(r)[2];
            let r = g.reshape(r, &[batch, t, GROUPS, l]);
            let wr = g.reshape(wr, &[batch, t, GROUPS, l]);
            let v = g.reshape(v, &[batch, t, GROUPS, d]);
            g.harmonic_scan(r, wr, v, gamma)
        };
        for i in 0..self.blocks {
            x = g.scoped(format!("blocks.{i}"), |g| self.block(g, x, &mut scan));
        }
        let f = self.features_of(&mut g, x, &mut |g, u| {
            let by_window = g.reshape(u, &[batch, t, w]);
            let ones = g.constant(1.0, &[w], DType::F32);
            let running = g.recurrence(by_window, ones);
            let seen = ramp(g, t);
            let one = g.scalar_like(1.0, seen);
            let seen = g.add(seen, one);
            let seen = g.reshape(seen, &[1, t, 1]);
            let mean = g.div(running, seen);
            g.reshape(mean, &[n, GROUPS, d])
        });
        let logits = self.head(&mut g, f);
        lm_loss(g, logits, targets)
    }

    /// One byte a run. The state carried between runs is everything in the model that mixes
    /// positions: each block's harmonic-scan state S `[7, L, D]` (f32, as the scan keeps it),
    /// and the head's running sum of unit vectors `[1, W]` with its count of positions. The
    /// rest of the model (the wire, LayerNorms, the spatial path, the products) reads one
    /// position. All start again at position 0, as a window starts them from zero.
    ///
    /// Past the window the states restart rather than run on: the host refills the program
    /// from the sequence's last half window (its rule for every decode program), and
    /// [`Feeds::carried`] restarts each state at that refill's position 0. The model is
    /// trained and scored with states from zero at every window and a mean over at most a
    /// window's positions; a state run on would feed the head a mean over more bytes than it
    /// ever saw, while a restart gives what scoring computes for a window of the latest bytes.
    /// The price is one half window of positions run again each half window generated.
    ///
    /// The one step is the scan's own arithmetic in elementwise ops (γ·S + w·v, then Σ_ℓ r_ℓ·S_ℓ
    /// added in ℓ order), and the bf16 roundings are the model's (the three large products'
    /// operands, one position's row each): on the CPU the scores are the window's to the bit;
    /// elsewhere they differ only as far as a backend sums a product's one row in another
    /// order than a window's rows.
    fn decoder(&self) -> Option<Result<Decoder, IrError>> {
        let build = || {
            let (d, w) = (self.group_width(), self.width());
            let mut g = Graph::new("diakosmos-decode");
            let token = g.input("token", &[1, 1], DType::I32);
            let feeds = Feeds::new(&mut g, self.context, None);
            let byte = g.cast(token, DType::F32);
            let byte = g.reshape(byte, &[1]);
            let mut x = g.scoped("wire", |g| wire_rows(g, byte, self.phasors));
            let mut assign = vec![];
            for i in 0..self.blocks {
                let mut scan = |g: &mut Graph, r: Value, wr: Value, v: Value, gamma: Value| {
                    let l = g.shape(r)[2];
                    let none = g.constant(0.0, &[GROUPS, l, d], DType::F32);
                    let (state, s) = feeds.carried(g, &format!("scan.blocks.{i}"), none);
                    // S ← γ·S + w·v, per head and harmonic.
                    let gamma = g.reshape(gamma, &[GROUPS, l, 1]);
                    let kept = g.mul(gamma, s);
                    let wr = g.reshape(wr, &[GROUPS, l, 1]);
                    let v = g.reshape(v, &[GROUPS, 1, d]);
                    let written = g.mul(wr, v);
                    let s = g.add(kept, written);
                    assign.push((state, s));
                    // y = Σ_ℓ r_ℓ·S_ℓ, added in ℓ order in f32 as the scan's kernel adds them
                    // (a Sum would accumulate in f64 on the CPU and round differently).
                    let r = g.reshape(r, &[GROUPS, l, 1]);
                    let read = g.mul(r, s);
                    let mut y = g.slice(read, 1, 0, 1);
                    for k in 1..l {
                        let next = g.slice(read, 1, k, k + 1);
                        y = g.add(y, next);
                    }
                    g.reshape(y, &[1, GROUPS, d])
                };
                x = g.scoped(format!("blocks.{i}"), |g| self.block(g, x, &mut scan));
            }
            let f = self.features_of(&mut g, x, &mut |g, u| {
                let u = g.reshape(u, &[1, w]);
                let none = g.constant(0.0, &[1, w], DType::F32);
                let (sum_state, sum) = feeds.carried(g, "head.running_sum", none);
                let running = g.add(sum, u);
                let none = g.constant(0.0, &[1, 1], DType::F32);
                let (count_state, count) = feeds.carried(g, "head.seen", none);
                let one = g.scalar_like(1.0, count);
                let seen = g.add(count, one);
                assign.push((sum_state, running));
                assign.push((count_state, seen));
                let mean = g.div(running, seen);
                g.reshape(mean, &[1, GROUPS, d])
            });
            let logits = self.head(&mut g, f);
            Ok(Decoder {
                program: decode::program(g, logits, assign)?,
                positions: self.context,
                rotary: None,
                learned_positions: false,
            })
        };
        Some(build())
    }

    fn model_views(&self) -> Vec<ModelView> {
        let mut out = vec![
            ModelView {
                id: "wire",
                title: "The wire's constellation".into(),
                about: "Where each byte enters: for each of the 7 groups and 4 scales, the points of the unit circle \
                        its phase takes and the bytes on each. Fixed by the wire's definition, not learned."
                    .into(),
                content: Content::Points(constellation()),
            },
            ModelView {
                id: "half-lives",
                title: "Recurrence half-lives".into(),
                about: "Each block's, head's and harmonic's memory ln ½ / ln γ, γ = σ(g_j + o_ℓ), in bytes, read from \
                        every kept checkpoint: they start between 5.5 and 14.3 bytes, identical in every head, and \
                        move apart as g and o train."
                    .into(),
                content: Content::Tracked {
                    tensors: vec!["blocks.*.attn._gate_logit".into(), "blocks.*.attn._harmonic_decay_offset".into()],
                    compute: std::sync::Arc::new(|t| {
                        let (labels, values) = half_lives(t)?;
                        // A row a block: its heads' harmonics side by side.
                        let rows =
                            labels.iter().filter_map(|l| l.strip_suffix(" head 0 ℓ0")).map(str::to_string).collect();
                        Ok(vec![Series {
                            name: "half-life".into(),
                            unit: "bytes".into(),
                            draw: Draw::Spread,
                            labels,
                            values,
                            rows: Some(rows),
                        }])
                    }),
                },
            },
        ];
        if let Ok(table) = views::parameter_table(self) {
            out.push(ModelView {
                id: "parameters",
                title: "Parameters by optimizer".into(),
                about:
                    "Every parameter role (blocks written *), its shape, how many tensors and parameters it holds \
                        and the optimizer the learner gives it: Muon, rotational AdamW or Adam, with each one's totals."
                        .into(),
                content: Content::Table(table),
            });
        }
        out
    }

    fn learner(&self, steps: u64) -> Learner {
        let warmup = WARMUP.min(steps / 10 + 1);
        let schedule = Schedule::WarmupCosine { warmup, total: steps.max(warmup + 1), floor: 0.1 };
        let adam = Optimizer::Adam { beta1: 0.9, beta2: 0.999, eps: 1e-8 };
        let groups = vec![
            Group::new(
                "rotational",
                &["blocks.*.attn.qkv_proj.weight", "head.weight"],
                Optimizer::RotationalAdamW(Rotational::standard(Rows::Outputs)),
                3e-3,
            ),
            Group::new(
                "muon",
                &["blocks.*.attn.out_proj.weight"],
                Optimizer::Muon(Muon::standard(Rows::Outputs)),
                2e-3,
            ),
            Group::new(
                "adam",
                &[
                    "blocks.*.temporal.ln.*",
                    "blocks.*.attn.qkv_proj.bias",
                    "blocks.*.attn.*_harmonic_weight",
                    "blocks.*.attn.spectral_coeffs",
                    "blocks.*.attn._gate_logit",
                    "blocks.*.attn._harmonic_decay_offset",
                    "blocks.*.attn.out_proj.bias",
                    "blocks.*.spatial.*",
                    "blocks.*.gate_logit",
                    "ln_f.*",
                ],
                adam,
                3e-3,
            ),
        ];
        Learner { groups, schedule, clip: Some(1.0), accumulation: 1 }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use alpha_cpu::Cpu;
    use alpha_ir::Program;
    use alpha_learn::init::initial_leaves;
    use alpha_learn::{gradient_program, inference_program};

    use super::*;

    /// The same code at a size the CPU checks in milliseconds: 3 phasors a group (a stream of
    /// 42), 2 harmonics a head, 2 blocks.
    fn tiny(context: usize, bf16: bool) -> Diakosmos {
        Diakosmos { blocks: 2, phasors: 3, harmonics: 2, context, bf16 }
    }

    /// Bytes of real prose (tiny-shakespeare beside the repository), or None with a note.
    fn prose() -> Option<Vec<u8>> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/tinyshakespeare.txt");
        match std::fs::read(&p) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("skipped: {}: {e}", p.display());
                None
            }
        }
    }

    /// A deterministic generator for perturbations (a 64-bit LCG's top bits, in [−1, 1)).
    fn noise(state: &mut u64) -> f64 {
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*state >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    /// Every parameter and state at its start from `seed`, each parameter then moved by noise of
    /// a tenth of its RMS (0.3 where it is all zeros, so θ and the gates leave their symmetric
    /// starts and every index shows).
    fn perturbed(program: &Program, seed: u64) -> Vec<(String, Vec<f64>)> {
        let params: Vec<String> = program.graph.params().into_iter().map(|p| p.1).collect();
        let mut state = seed;
        initial_leaves(&program.graph, seed)
            .into_iter()
            .map(|(name, v)| {
                let mut v: Vec<f64> = v.into_iter().map(f64::from).collect();
                if params.contains(&name) {
                    let rms = (v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64).sqrt();
                    let scale = if rms > 0.0 { 0.1 * rms } else { 0.3 };
                    v.iter_mut().for_each(|x| *x += scale * noise(&mut state));
                }
                (name, v)
            })
            .collect()
    }

    fn load<T: alpha_cpu::Real>(cpu: &mut Cpu<T>, leaves: &[(String, Vec<f64>)], tokens: &[u8], targets: &[u8]) {
        for (name, v) in leaves {
            cpu.write_named(name, v);
        }
        let ids = |b: &[u8]| b.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        cpu.write_named("tokens", &ids(tokens));
        cpu.write_named("targets", &ids(targets));
    }

    #[test]
    fn the_parameter_table_is_the_seeds() {
        let m = Diakosmos::default().model(1).unwrap();
        let params = m.graph.params();
        assert_eq!(m.graph.parameter_count(), 99_823_934);
        assert_eq!(params.len(), 199);
        let shape = |name: &str| {
            let v = params.iter().find(|p| p.1 == name).unwrap_or_else(|| panic!("no {name}")).0;
            m.graph.shape(v).to_vec()
        };
        let table: [(&str, &[usize]); 16] = [
            ("blocks.0.temporal.ln.weight", &[1330]),
            ("blocks.0.temporal.ln.bias", &[1330]),
            ("blocks.0.attn.qkv_proj.weight", &[3990, 1330]),
            ("blocks.0.attn.qkv_proj.bias", &[3990]),
            ("blocks.0.attn.q_harmonic_weight", &[7, 8, 190]),
            ("blocks.0.attn.k_harmonic_weight", &[7, 8, 190]),
            ("blocks.0.attn.spectral_coeffs", &[7, 8]),
            ("blocks.0.attn._gate_logit", &[7]),
            ("blocks.0.attn._harmonic_decay_offset", &[8]),
            ("blocks.13.attn.out_proj.weight", &[1330, 1330]),
            ("blocks.13.attn.out_proj.bias", &[1330]),
            ("blocks.13.spatial.theta", &[3, 190]),
            ("blocks.13.spatial.coupling", &[7]),
            ("blocks.13.gate_logit", &[7]),
            ("ln_f.weight", &[1330]),
            ("head.weight", &[256, 1344]),
        ];
        for (name, want) in table {
            assert_eq!(shape(name), want, "{name}");
        }
        let block: usize =
            params.iter().filter(|p| p.1.starts_with("blocks.5.")).map(|p| m.graph.ty(p.0).numel()).sum();
        assert_eq!(block, 7_105_515);
    }

    #[test]
    fn the_learner_takes_muon_rotational_adamw_and_adam_by_the_seeds_roles() {
        let system = Diakosmos::default();
        let m = system.model(1).unwrap();
        let params: Vec<(String, Vec<usize>)> =
            m.graph.params().into_iter().map(|(v, n)| (n, m.graph.shape(v).to_vec())).collect();
        let learner = system.learner(15_360);
        let group_of = learner.assign_groups("diakosmos", &params).unwrap();
        let mut totals: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for ((_, shape), &gi) in params.iter().zip(&group_of) {
            let e = totals.entry(learner.groups[gi].optimizer.name()).or_default();
            e.0 += 1;
            e.1 += shape.iter().product::<usize>();
        }
        assert_eq!(totals["Muon"], (14, 24_764_600));
        assert_eq!(totals["rotational AdamW"], (15, 74_637_864));
        assert_eq!(totals["Adam"], (170, 421_470));
        // The seed's schedule: update 200 at the peak, a tenth of it from the horizon on.
        for g in &learner.groups {
            assert_eq!(learner.schedule.lr(g.peak, 200), g.peak);
            assert!((learner.schedule.lr(g.peak, 15_360) - 0.1 * g.peak).abs() < 1e-12);
        }
        let peaks: Vec<(&str, f64)> = learner.groups.iter().map(|g| (g.optimizer.name(), g.peak)).collect();
        assert_eq!(peaks, [("rotational AdamW", 3e-3), ("Muon", 2e-3), ("Adam", 3e-3)]);
    }

    /// γ = σ(g + o) from the seed's starts gives its half-lives: 14.27 bytes at ℓ = 0 to 5.46 at
    /// ℓ = 7, median 8.81; the spectral coefficients start at 1/(1+ℓ).
    #[test]
    fn the_initial_memories_are_the_seeds() {
        let m = Diakosmos::default().model(1).unwrap();
        let leaves: BTreeMap<String, Vec<f32>> = initial_leaves(&m.graph, 0).into_iter().collect();
        let (g, o) = (&leaves["blocks.3.attn._gate_logit"], &leaves["blocks.3.attn._harmonic_decay_offset"]);
        let mut lives: Vec<f64> = vec![];
        for &gj in g.iter() {
            for &ol in o.iter() {
                let gamma = 1.0 / (1.0 + (-(f64::from(gj) + f64::from(ol))).exp());
                lives.push(0.5f64.ln() / gamma.ln());
            }
        }
        assert!((lives[0] - 14.27).abs() < 0.005, "{}", lives[0]);
        assert!((lives[7] - 5.46).abs() < 0.005, "{}", lives[7]);
        lives.sort_by(f64::total_cmp);
        let median = 0.5 * (lives[27] + lives[28]);
        assert!((median - 8.81).abs() < 0.005, "median {median}");
        let c = &leaves["blocks.3.attn.spectral_coeffs"];
        for (i, &x) in c.iter().enumerate() {
            assert_eq!(x, 1.0 / (1 + i % 8) as f32, "spectral_coeffs[{i}]");
        }
    }

    /// The page's constellation: 7 groups × 4 scales, 4 points each, 64 bytes on each point,
    /// every byte once a panel, each point on the unit circle at its bytes' phase.
    #[test]
    fn the_constellation_is_seven_groups_by_four_scales_of_four_points_of_64_bytes() {
        let sets = constellation();
        assert_eq!(sets.len(), 28);
        for (i, set) in sets.iter().enumerate() {
            let (group, scale) = (i / SCALES, i % SCALES);
            assert_eq!(set.points.len(), 4, "{}", set.name);
            let mut seen: Vec<u8> = vec![];
            for p in &set.points {
                assert_eq!(p.bytes.len(), 64, "{}", set.name);
                for &b in &p.bytes {
                    let units = crate::diakosmos_wire::phase_units(b)[group][scale];
                    let angle = f64::from(units) * std::f64::consts::FRAC_PI_8;
                    assert!(
                        (p.x - angle.cos()).abs() < 1e-12 && (p.y - angle.sin()).abs() < 1e-12,
                        "{} byte {b}",
                        set.name
                    );
                }
                seen.extend(&p.bytes);
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..=255).collect::<Vec<u8>>(), "{}", set.name);
        }
    }

    /// The half-life view on the initial weights: 14 × 7 × 8 = 784 values, 14.27 bytes at ℓ0 to
    /// 5.46 at ℓ7 in every block and head; only the tensors it names are needed.
    #[test]
    fn the_half_life_view_reads_only_the_decay_tensors() {
        let system = Diakosmos::default();
        let m = system.model(1).unwrap();
        let views = system.model_views();
        let view = views.iter().find(|v| v.id == "half-lives").unwrap();
        let params: Vec<String> = m.graph.params().into_iter().map(|p| p.1).collect();
        let read: Vec<&String> = params.iter().filter(|n| view.reads(n)).collect();
        assert_eq!(read.len(), 28);
        let leaves: Tensors = initial_leaves(&m.graph, 0)
            .into_iter()
            .filter(|(n, _)| view.reads(n))
            .map(|(n, v)| (n, (vec![v.len()], v)))
            .collect();
        let series = view.compute(&leaves).unwrap();
        let lives = &series[0].values;
        assert_eq!(lives.len(), 784);
        assert_eq!(series[0].labels[783], "block 13 head 6 ℓ7");
        for (i, &x) in lives.iter().enumerate() {
            let want = if i % 8 == 0 {
                14.27
            } else if i % 8 == 7 {
                5.46
            } else {
                continue;
            };
            assert!((x - want).abs() < 0.005, "{i}: {x}");
        }
        let table = views.iter().find(|v| v.id == "parameters").unwrap();
        let Content::Table(t) = &table.content else { panic!("not a table") };
        let totals: Vec<(&str, &str, &str)> = t
            .rows
            .iter()
            .filter(|r| r[0].starts_with("all "))
            .map(|r| (r[4].as_str(), r[2].as_str(), r[3].as_str()))
            .collect();
        assert_eq!(
            totals,
            [("rotational AdamW", "15", "74637864"), ("Muon", "14", "24764600"), ("Adam", "170", "421470")]
        );
    }

    /// The table the graph builds equals the host's wire table, entry for entry, to the
    /// rounding of one f32 cos or sin.
    #[test]
    fn the_wire_the_graph_builds_is_the_wire_table() {
        let mut g = Graph::new("wire");
        let table = wire(&mut g, crate::diakosmos_wire::HARMONICS);
        let outputs = BTreeMap::from([("wire".to_string(), table)]);
        let program = Program::single(g.finish().unwrap(), "forward", outputs);
        let mut cpu = Cpu::<f32>::compile(&program).unwrap();
        cpu.run_all();
        let got = cpu.read(table);
        let want = crate::diakosmos_wire::wire_table();
        assert_eq!(got.len(), want.len());
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst <= 4e-7, "largest difference {worst}");
    }

    #[test]
    fn gradients_match_finite_differences() {
        let Some(text) = prose() else { return };
        let system = tiny(9, false);
        let (batch, t) = (2, system.context);
        let program = gradient_program(system.model(batch).unwrap()).unwrap();
        let mut cpu = Cpu::<f64>::compile(&program).unwrap();
        let leaves = perturbed(&program, 5);
        let (tokens, targets) = (&text[1000..1000 + batch * t], &text[1001..1001 + batch * t]);
        load(&mut cpu, &leaves, tokens, targets);
        cpu.run_all();
        let loss = program.outputs["loss"];
        let grads: Vec<(String, Vec<f64>)> = program
            .graph
            .params()
            .into_iter()
            .map(|(_, name)| {
                let g = program.outputs[&format!("grad:{name}")];
                (name, cpu.read(g).to_vec())
            })
            .collect();
        let h = 1e-5;
        let mut state = 17u64;
        let mut checked = 0;
        for (name, grad) in &grads {
            let start = leaves.iter().find(|l| &l.0 == name).unwrap().1.clone();
            let n = start.len();
            let picks: Vec<usize> = if n <= 8 {
                (0..n).collect()
            } else {
                (0..8).map(|_| ((noise(&mut state) + 1.0) * 0.5 * n as f64) as usize % n).collect()
            };
            for i in picks {
                let mut at = |x: f64| {
                    let mut v = start.clone();
                    v[i] = x;
                    cpu.write_named(name, &v);
                    cpu.run_all();
                    cpu.read(loss)[0]
                };
                let fd = (at(start[i] + h) - at(start[i] - h)) / (2.0 * h);
                let a = grad[i];
                assert!(
                    (a - fd).abs() <= 1e-7 * (1.0 + a.abs().max(fd.abs())),
                    "d loss / d {name}[{i}]: pullback {a:.10} vs finite difference {fd:.10}"
                );
                checked += 1;
            }
            cpu.write_named(name, &start);
        }
        assert_eq!(grads.len(), 31);
        assert!(checked > 150, "{checked}");
    }

    /// Changing the bytes from position p on never changes a logit before p and changes every
    /// row from p on, for several p, on perturbed weights with the device's bf16 products.
    #[test]
    fn no_output_depends_on_a_later_byte() {
        let Some(text) = prose() else { return };
        let system = tiny(16, true);
        let (batch, t, v) = (2, system.context, VOCAB);
        let program = inference_program(system.model(batch).unwrap()).unwrap();
        let mut cpu = Cpu::<f32>::compile(&program).unwrap();
        let leaves = perturbed(&program, 9);
        let (tokens, targets) = (&text[5000..5000 + batch * t], &text[5001..5001 + batch * t]);
        let logits = program.outputs["logits"];
        load(&mut cpu, &leaves, tokens, targets);
        cpu.run_all();
        let before = cpu.read(logits).to_vec();
        for p in [1, 6, 11, 15] {
            let mut changed = tokens.to_vec();
            for b in 0..batch {
                for i in p..t {
                    let x = &mut changed[b * t + i];
                    *x = x.wrapping_add(1 + (i % 7) as u8);
                }
            }
            load(&mut cpu, &leaves, &changed, targets);
            cpu.run_all();
            let after = cpu.read(logits);
            for b in 0..batch {
                for i in 0..t {
                    let r = (b * t + i) * v;
                    let same = before[r..r + v].iter().zip(&after[r..r + v]).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert_eq!(same, i < p, "window {b} position {i}, bytes changed from {p} on");
                }
            }
        }
    }

    /// A small Diakosmos trained on tiny-shakespeare with its three optimizers: each step's loss
    /// is measured on windows it has not trained on, so a fall is learning, not memory.
    #[test]
    fn a_few_steps_on_real_text_lower_the_loss() {
        let Some(text) = prose() else { return };
        let system = Diakosmos { blocks: 2, phasors: 8, harmonics: 4, context: 64, bf16: true };
        let (batch, t, steps) = (4, system.context, 100u64);
        let learner = system.learner(steps);
        let program = learner.training_program(system.model(batch).unwrap()).unwrap();
        let mut cpu = Cpu::<f32>::compile(&program).unwrap();
        for (name, v) in initial_leaves(&program.graph, 1) {
            let v: Vec<f64> = v.into_iter().map(f64::from).collect();
            cpu.write_named(&name, &v);
        }
        let loss = program.outputs["loss"];
        let mut losses = vec![];
        for step in 1..=steps {
            let at = (step as usize - 1) * batch * t;
            load(&mut cpu, &[], &text[at..at + batch * t], &text[at + 1..at + 1 + batch * t]);
            for (name, x) in learner.scalars(step) {
                cpu.write_named(name, &[x]);
            }
            cpu.run_all();
            let l = f64::from(cpu.read(loss)[0]);
            assert!(l.is_finite(), "step {step}: loss {l}");
            losses.push(l);
        }
        let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
        let (first, last) = (mean(&losses[..5]), mean(&losses[losses.len() - 5..]));
        eprintln!("loss of the first five steps {first:.4} nats, of the last five {last:.4}: {losses:.3?}");
        // A fresh model is near uniform over 256 bytes (ln 256 = 5.55 nats); byte frequencies
        // alone are worth about 2 nats of that.
        assert!(first > 5.0, "{first}");
        assert!(last < first - 1.5, "first five {first}, last five {last}");
    }
}
