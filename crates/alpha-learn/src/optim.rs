//! The optimizers, each appended to the step's graph as ordinary ops, so every backend that runs
//! the model runs its optimizer: AdamW and Adam through the IR's fused `AdamW` op; Muon and
//! rotational AdamW from primitives (elementwise ops, reductions, casts and batched matrix
//! products), their state as persistent tensors named by parameter path.
//!
//! Muon's Newton–Schulz iterations run on every same-shaped matrix of a group at once: the
//! matrices are stacked into one `[k, r, c]` tensor and each iteration is three batched products
//! with bf16 operands and f32 accumulation, so a device lowers a step's orthogonalisation to a
//! handful of batched GEMMs whatever the number of matrices.

use alpha_ir::{Binary, DType, Graph, Init, Reduce, TensorType, Value};
use serde::{Deserialize, Serialize};

use crate::schedule::MomentumRamp;

/// Which parameters weight decay applies to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Decay {
    None,
    /// Tensors of rank two or more (matrices and embeddings), not gains and biases.
    MatricesOnly,
    All,
}

/// Decoupled AdamW (Loshchilov & Hutter), with bias corrections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdamW {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub decay: Decay,
}

/// What the rows of a stored matrix index. The rotational optimizer keeps each output feature's
/// weight vector on its sphere, and Muon's shape factor is √max(1, outputs/inputs), so both need
/// to know which axis holds the outputs. PyTorch's `nn.Linear` stores `[outputs, inputs]`; Alpha's
/// systems multiply `x·W` and store `[inputs, outputs]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rows {
    /// `[outputs, inputs]`: a row is one output feature's weights.
    Outputs,
    /// `[inputs, outputs]`: a column is one output feature's weights.
    Inputs,
}

/// Muon: momentum (Nesterov by default), then the update orthogonalised by a quintic
/// Newton–Schulz iteration. SYSTEMS.md §3.6 and §4.2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Muon {
    /// μ in `B ← μ·B + G`.
    pub momentum: f64,
    /// A ramp of μ over the first updates, if any.
    pub ramp: Option<MomentumRamp>,
    /// `U = G + μ·B` (else `U = B`).
    pub nesterov: bool,
    /// Newton–Schulz iterations (five).
    pub ns_steps: usize,
    /// ε in `X₀ = U / (‖U‖_F + ε)`.
    pub eps: f64,
    /// Decoupled decay `W ← W·(1 − lr·λ)` before the step; 0 in every seed.
    pub weight_decay: f64,
    pub rows: Rows,
    /// The iterations' products take bf16 operands (with f32 sums), as every seed trains;
    /// false runs them in f32 throughout — the exact direction the update gate judges the
    /// bf16 runs against.
    #[serde(default = "bf16_operands_by_default")]
    pub bf16_operands: bool,
}

fn bf16_operands_by_default() -> bool {
    true
}

impl Muon {
    /// The quintic's coefficients (a, b, c) (Keller Jordan's, as in `torch.optim.Muon`).
    pub const NS_COEFFICIENTS: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);

    /// μ 0.95, Nesterov, five iterations, ε 1e-7, no decay.
    pub fn standard(rows: Rows) -> Muon {
        Muon {
            momentum: 0.95,
            ramp: None,
            nesterov: true,
            ns_steps: 5,
            eps: 1e-7,
            weight_decay: 0.0,
            rows,
            bf16_operands: true,
        }
    }

    /// μ of update `step`.
    pub fn momentum_at(&self, step: u64) -> f64 {
        match &self.ramp {
            Some(r) => r.momentum(self.momentum, step),
            None => self.momentum,
        }
    }

    /// Muon's shape factor √max(1, outputs/inputs) for a stored `[r, c]` matrix.
    pub fn shape_scale(&self, r: usize, c: usize) -> f64 {
        let (outputs, inputs) = match self.rows {
            Rows::Outputs => (r, c),
            Rows::Inputs => (c, r),
        };
        (outputs as f64 / inputs as f64).max(1.0).sqrt()
    }
}

/// Rotational AdamW in REQ's form (Kosson et al., "Rotational equilibrium"; SYSTEMS.md §3.6):
/// each output feature's weight vector keeps its initial norm and turns by an angle set by the
/// learning rate, the decay and β1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rotational {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// λ: enters only the angular step √(2·lr·λ·(1−β1)/(1+β1)).
    pub decay: f64,
    /// ρ of the running mean square of the step's norm (REQ: 0.9).
    pub rho: f64,
    /// ε in `√ŝ + ε_rot` (REQ: 1e-8).
    pub eps_rot: f64,
    pub rows: Rows,
}

impl Rotational {
    /// Diakosmos's: β (0.9, 0.999), ε 1e-8, λ 0.01, ρ 0.9, ε_rot 1e-8.
    pub fn standard(rows: Rows) -> Rotational {
        Rotational { beta1: 0.9, beta2: 0.999, eps: 1e-8, decay: 0.01, rho: 0.9, eps_rot: 1e-8, rows }
    }

    /// The angular step η(t) = √(2·lr·λ·(1−β1)/(1+β1)), in binary64.
    pub fn angular_step(&self, lr: f64) -> f64 {
        (2.0 * lr * self.decay * (1.0 - self.beta1) / (1.0 + self.beta1)).sqrt()
    }
}

/// One optimizer, as a group of parameters uses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Optimizer {
    AdamW(AdamW),
    /// Adam with bias corrections and no decay.
    Adam {
        beta1: f64,
        beta2: f64,
        eps: f64,
    },
    Muon(Muon),
    RotationalAdamW(Rotational),
}

impl Optimizer {
    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::AdamW(_) => "AdamW",
            Optimizer::Adam { .. } => "Adam",
            Optimizer::Muon(_) => "Muon",
            Optimizer::RotationalAdamW(_) => "rotational AdamW",
        }
    }

    /// Why a parameter of `shape` cannot take this optimizer, if it cannot.
    pub fn refuses(&self, shape: &[usize]) -> Option<String> {
        match self {
            Optimizer::Muon(_) | Optimizer::RotationalAdamW(_) if shape.len() != 2 || shape.contains(&0) => {
                Some(format!("{} updates matrices (rank 2), and this parameter has shape {shape:?}", self.name()))
            }
            _ => None,
        }
    }
}

/// The host scalars one group's update reads, by their role.
pub(crate) struct GroupScalars {
    pub lr: Value,
    pub bc1: Option<Value>,
    pub bc2: Option<Value>,
    /// Muon's μ of this update.
    pub momentum: Option<Value>,
    /// Rotational: η of this update and 1 − ρᵗ.
    pub angle: Option<Value>,
    pub bcs: Option<Value>,
}

fn scalar(g: &mut Graph, x: f64) -> Value {
    g.constant(x, &[], DType::F32)
}

/// Append the AdamW (or Adam, decay 0) update of one parameter; returns its assignments.
#[allow(clippy::too_many_arguments)]
pub(crate) fn adamw(
    g: &mut Graph,
    p: Value,
    name: &str,
    grad: Value,
    s: &GroupScalars,
    gscale: Value,
    (beta1, beta2, eps, weight_decay): (f64, f64, f64, f64),
) -> Vec<(Value, Value)> {
    let ty: TensorType = g.ty(p).clone();
    let m = g.state(&format!("{name}.adam_m"), ty.clone(), Init::Zeros);
    let v = g.state(&format!("{name}.adam_v"), ty, Init::Zeros);
    let op = alpha_ir::Op::AdamW { beta1, beta2, eps, weight_decay };
    let (bc1, bc2) = (s.bc1.expect("Adam has bc1"), s.bc2.expect("Adam has bc2"));
    let outs = g.push(op, &[p, grad, m, v, s.lr, bc1, bc2, gscale]);
    // AdamW writes p, m, v in place; recording the assignment keeps that explicit.
    vec![(p, outs[0]), (m, outs[1]), (v, outs[2])]
}

/// Append Muon's update of a group's matrices; returns the assignments. Matrices of one shape
/// are orthogonalised together, batched, in the order the group lists them.
pub(crate) fn muon(
    g: &mut Graph,
    cfg: &Muon,
    params: &[(Value, String, Value)],
    s: &GroupScalars,
    gscale: Value,
) -> Vec<(Value, Value)> {
    let mu = s.momentum.expect("Muon has a momentum scalar");
    let mut assign = vec![];
    // Momentum and the Nesterov direction, per matrix; oriented so the smaller side is the rows.
    let mut oriented: Vec<(Value, Value, bool)> = vec![]; // (param, U oriented, transposed)
    for (p, name, grad) in params {
        let ty = g.ty(*p).clone();
        let buf = g.state(&format!("{name}.muon_momentum"), ty.clone(), Init::Zeros);
        let gr = g.mul(*grad, gscale);
        let kept = g.mul(buf, mu);
        let buf2 = g.add(kept, gr);
        assign.push((buf, buf2));
        let u = if cfg.nesterov {
            let ahead = g.mul(buf2, mu);
            g.add(gr, ahead)
        } else {
            buf2
        };
        let (r, c) = (ty.shape[0], ty.shape[1]);
        let transposed = r > c;
        let u = if transposed { g.permute(u, &[1, 0]) } else { u };
        oriented.push((*p, u, transposed));
    }
    // One rate a distinct shape factor (lr·factor, the same f32 product for every matrix
    // that shares it).
    let mut rates: Vec<(u64, Value)> = vec![];
    // Batches of one oriented shape, in first-appearance order.
    let mut shapes: Vec<Vec<usize>> = vec![];
    for (_, u, _) in &oriented {
        let sh = g.shape(*u).to_vec();
        if !shapes.contains(&sh) {
            shapes.push(sh);
        }
    }
    for sh in shapes {
        let members: Vec<&(Value, Value, bool)> = oriented.iter().filter(|(_, u, _)| g.shape(*u) == sh).collect();
        let (r, c, k) = (sh[0], sh[1], members.len());
        let stacked: Vec<Value> = members.iter().map(|(_, u, _)| g.reshape(*u, &[1, r, c])).collect();
        let x = if k == 1 { stacked[0] } else { g.concat(&stacked, 0) };
        let x = newton_schulz(g, x, cfg);
        for (i, (p, _, transposed)) in members.into_iter().enumerate() {
            let xi = if k == 1 { x } else { g.slice(x, 0, i, i + 1) };
            let xi = g.reshape(xi, &[r, c]);
            let xi = if *transposed { g.permute(xi, &[1, 0]) } else { xi };
            let pshape = g.shape(*p).to_vec();
            let scale = cfg.shape_scale(pshape[0], pshape[1]);
            let rate = match rates.iter().find(|(bits, _)| *bits == scale.to_bits()) {
                Some(&(_, rate)) => rate,
                None => {
                    let factor = scalar(g, scale);
                    let rate = g.mul(s.lr, factor);
                    rates.push((scale.to_bits(), rate));
                    rate
                }
            };
            let step = g.mul(xi, rate);
            let w = if cfg.weight_decay != 0.0 {
                let wd = scalar(g, cfg.weight_decay);
                let lw = g.mul(s.lr, wd);
                let one = scalar(g, 1.0);
                let keep = g.sub(one, lw);
                g.mul(*p, keep)
            } else {
                *p
            };
            let w2 = g.sub(w, step);
            assign.push((*p, w2));
        }
    }
    assign
}

/// X₀ = U/(‖U‖_F + ε) per matrix of a `[k, r, c]` stack (r ≤ c), then the quintic iterations
/// X ← a·X + (b·A + c·A²)·X with A = X·Xᵀ, every product's operands rounded to bf16 (unless
/// [`Muon::bf16_operands`] is off) and its sums in f32; X itself stays f32 between iterations.
pub(crate) fn newton_schulz(g: &mut Graph, u: Value, cfg: &Muon) -> Value {
    let (ca, cb, cc) = Muon::NS_COEFFICIENTS;
    let sq = g.square(u);
    let ss = g.reduce(Reduce::Sum, sq, &[1, 2], true);
    let norm = g.sqrt(ss);
    let eps = scalar(g, cfg.eps);
    let den = g.add(norm, eps);
    let mut x = g.div(u, den);
    let operand = |g: &mut Graph, v: Value| if cfg.bf16_operands { g.cast(v, DType::BF16) } else { v };
    for _ in 0..cfg.ns_steps {
        let xb = operand(g, x);
        let a = g.matmul_t(xb, xb, false, true);
        let ab = operand(g, a);
        let a2 = g.matmul(ab, ab);
        let ba = g.scale(a, cb);
        let ca2 = g.scale(a2, cc);
        let poly = g.add(ba, ca2);
        let pb = operand(g, poly);
        let px = g.matmul(pb, xb);
        let ax = g.scale(x, ca);
        x = g.add(ax, px);
    }
    x
}

/// Append rotational AdamW's update of one matrix; returns the assignments. State beside the
/// Adam moments: `<name>.rot_norm0`, each output feature's norm, and `<name>.rot_ms`, the running
/// mean square of its step's norm. A feature whose stored norm is still 0 (a fresh run, or a
/// checkpoint without this state) is first centred and rescaled to its norm, and that norm is
/// stored: REQ's construction, done by the first update.
pub(crate) fn rotational(
    g: &mut Graph,
    cfg: &Rotational,
    p: Value,
    name: &str,
    grad: Value,
    s: &GroupScalars,
    gscale: Value,
) -> Vec<(Value, Value)> {
    let ty = g.ty(p).clone();
    let (r, c) = (ty.shape[0], ty.shape[1]);
    // The axis a feature's weights lie along, and the keep-dims shape of per-feature values.
    let (ax, features, kept) = match cfg.rows {
        Rows::Outputs => (1, r, vec![r, 1]),
        Rows::Inputs => (0, c, vec![1, c]),
    };
    let m = g.state(&format!("{name}.adam_m"), ty.clone(), Init::Zeros);
    let v = g.state(&format!("{name}.adam_v"), ty.clone(), Init::Zeros);
    let feat_ty = TensorType::new(vec![features], DType::F32);
    let n0 = g.state(&format!("{name}.rot_norm0"), feat_ty.clone(), Init::Zeros);
    let ms = g.state(&format!("{name}.rot_ms"), feat_ty, Init::Zeros);
    let (bc1, bc2) = (s.bc1.expect("bc1"), s.bc2.expect("bc2"));
    let (angle, bcs) = (s.angle.expect("angle"), s.bcs.expect("bcs"));

    // Adam's direction d = m̂ / (√v̂ + ε).
    let gr = g.mul(grad, gscale);
    let b1 = scalar(g, cfg.beta1);
    let ob1 = scalar(g, 1.0 - cfg.beta1);
    let b2 = scalar(g, cfg.beta2);
    let ob2 = scalar(g, 1.0 - cfg.beta2);
    let m_old = g.mul(m, b1);
    let m_new = g.mul(gr, ob1);
    let m2 = g.add(m_old, m_new);
    let v_old = g.mul(v, b2);
    let g2 = g.square(gr);
    let v_new = g.mul(g2, ob2);
    let v2 = g.add(v_old, v_new);
    let mh = g.div(m2, bc1);
    let vh = g.div(v2, bc2);
    let vs = g.sqrt(vh);
    let eps = scalar(g, cfg.eps);
    let den = g.add(vs, eps);
    let d = g.div(mh, den);

    let row_sum = |g: &mut Graph, x: Value| g.reduce(Reduce::Sum, x, &[ax], true);
    let row_norm = |g: &mut Graph, x: Value| {
        let sq = g.square(x);
        let ss = g.reduce(Reduce::Sum, sq, &[ax], true);
        g.sqrt(ss)
    };

    // A feature not yet set up: centre it and give it back its norm.
    let n_old = g.reshape(n0, &kept);
    let zero = scalar(g, 0.0);
    let fresh = g.binary(Binary::Ge, zero, n_old);
    let one = scalar(g, 1.0);
    let settled = g.sub(one, fresh);
    let n_init = row_norm(g, p);
    let mean = g.reduce(Reduce::Mean, p, &[ax], true);
    let centred = g.sub(p, mean);
    let n_centred = row_norm(g, centred);
    let back = g.div(n_init, n_centred);
    let restored = g.mul(centred, back);
    let w_new = g.mul(restored, fresh);
    let w_kept = g.mul(p, settled);
    let w = g.add(w_new, w_kept);
    let n_new = g.mul(n_init, fresh);
    let n_kept = g.mul(n_old, settled);
    let n = g.add(n_new, n_kept);

    // The step, centred and with its radial part removed.
    let d_mean = g.reduce(Reduce::Mean, d, &[ax], true);
    let dc = g.sub(d, d_mean);
    let dw = g.mul(dc, w);
    let dot = row_sum(g, dw);
    let n2 = g.square(n);
    let radial = g.div(dot, n2);
    let wr = g.mul(w, radial);
    let dr = g.sub(dc, wr);

    // Running mean square of its norm, bias-corrected.
    let rho = scalar(g, cfg.rho);
    let orho = scalar(g, 1.0 - cfg.rho);
    let ms_old = g.reshape(ms, &kept);
    let dr2 = g.square(dr);
    let dn2 = row_sum(g, dr2);
    let ms_a = g.mul(dn2, orho);
    let ms_b = g.mul(ms_old, rho);
    let ms2 = g.add(ms_a, ms_b);
    let msh = g.div(ms2, bcs);
    let rms = g.sqrt(msh);
    let eps_rot = scalar(g, cfg.eps_rot);
    let rden = g.add(rms, eps_rot);

    // Turn, then back onto the sphere.
    let an = g.mul(angle, n);
    let k = g.div(an, rden);
    let turn = g.mul(dr, k);
    let w1 = g.sub(w, turn);
    let n1 = row_norm(g, w1);
    let back1 = g.div(n, n1);
    let w2 = g.mul(w1, back1);

    let n_flat = g.reshape(n, &[features]);
    let ms_flat = g.reshape(ms2, &[features]);
    vec![(p, w2), (m, m2), (v, v2), (n0, n_flat), (ms, ms_flat)]
}
