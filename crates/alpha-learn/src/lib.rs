//! The learner: turns a model's graph and loss into one training program — forward, backward
//! and the optimizer update — with global-norm clipping, gradient accumulation, and the
//! schedule's per-step scalars fed by the host.
//!
//! A learner is a list of groups by parameter role: each selects parameters by path pattern and
//! has an optimizer — AdamW, Adam, Muon or rotational AdamW ([`optim`]) — and a peak rate; one
//! schedule multiplies every peak, one clip covers every gradient. Every parameter must be in
//! exactly one group, every group must select one, and Muon and rotational AdamW take matrices
//! only; [`Learner::training_program`] refuses anything else naming the parameter.
//!
//! The optimizers are ordinary IR ops, so a backend runs them by lowering what it already knows:
//! AdamW and Adam the fused `AdamW` op; rotational AdamW elementwise ops and reductions over one
//! axis; Muon additionally batched matrix products `[k, r, c]·[k, c, r]` whose `k` entries are
//! independent matrices (same-shaped matrices of a group orthogonalised together), bf16
//! operands, f32 results. Optimizer state is persistent and named by parameter path —
//! `<p>.adam_m`, `<p>.adam_v`, `<p>.muon_momentum`, `<p>.rot_norm0`, `<p>.rot_ms` — so a
//! checkpoint carries it and a resume is exact: every host scalar is a function of the update
//! count alone.
//!
//! [`Learner::training_program_with_health`] adds a variant of the last phase that also measures
//! every parameter tensor's optimizer health on the device ([`health`]).

pub mod health;
pub mod init;
pub mod optim;
pub mod schedule;

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use alpha_ir::{Binary, DType, Graph, Init, IrError, Op, Phase, Program, TensorType, Value};
use serde::{Deserialize, Serialize};

pub use optim::{AdamW, Decay, Muon, Optimizer, Rotational, Rows};
pub use schedule::{MomentumRamp, Schedule, TimeBudget, DEFAULT_WARMDOWN_UPDATES};

/// A named set of parameters sharing one optimizer and one peak learning rate. `select` holds
/// path patterns: `*` matches any run of characters (dots included), anything else itself;
/// `blocks.*.attn.out.weight` selects every block's output projection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    pub select: Vec<String>,
    pub optimizer: Optimizer,
    /// The peak the schedule multiplies.
    pub peak: f64,
}

impl Group {
    pub fn new(name: &str, select: &[&str], optimizer: Optimizer, peak: f64) -> Group {
        Group { name: name.into(), select: select.iter().map(|s| s.to_string()).collect(), optimizer, peak }
    }

    /// Whether this group's patterns select the parameter `path`.
    pub fn selects(&self, path: &str) -> bool {
        self.select.iter().any(|p| glob(p, path))
    }
}

/// `pattern` against `text`, where `*` matches any run of characters.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

/// The training recipe: optimizer groups by parameter role, one schedule multiplying every
/// group's peak, one global gradient clip over every gradient, and accumulation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Learner {
    pub groups: Vec<Group>,
    pub schedule: Schedule,
    /// Clip the global gradient norm to this.
    pub clip: Option<f64>,
    /// Micro-batches whose mean gradient makes one update.
    pub accumulation: usize,
}

/// What a system's model builder returns.
pub struct Model {
    pub graph: Graph,
    /// The scalar mean loss.
    pub loss: Value,
    /// Per-position losses `[N]`, for percentiles and scoring.
    pub losses: Value,
    /// Logits `[N, V]`, for prediction.
    pub logits: Value,
}

/// The per-step scalars the host writes before running a step are named `<role>:<group>`:
/// `lr:<group>` (the group's rate), and as its optimizer needs them `bc1:`/`bc2:` (1 − βᵗ),
/// `momentum:` (Muon's μ), `angle:` (rotational η) and `bcs:` (1 − ρᵗ).
pub const LR: &str = "lr";
pub const BC1: &str = "bc1";
pub const BC2: &str = "bc2";
pub const MOMENTUM: &str = "momentum";
pub const ANGLE: &str = "angle";
pub const BCS: &str = "bcs";

/// The host scalar `<role>:<group>`, interned: the set of names is the learners' groups times
/// six roles, so each is allocated once for the life of the process and callers get `&str`s
/// that outlive the learner.
fn scalar_name(role: &str, group: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let name = format!("{role}:{group}");
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = names.get_or_insert_with(HashSet::new);
    if let Some(&s) = set.get(name.as_str()) {
        return s;
    }
    let s: &'static str = Box::leak(name.into_boxed_str());
    set.insert(s);
    s
}

/// A learner error at program building: names the system and what is wrong.
fn learner_error(system: &str, message: String) -> IrError {
    IrError {
        system: system.to_string(),
        op: "learner".into(),
        node: 0,
        scope: String::new(),
        inputs: String::new(),
        message,
    }
}

impl Learner {
    /// One group, `all`, of every parameter.
    pub fn single(optimizer: Optimizer, peak: f64, schedule: Schedule, clip: Option<f64>) -> Learner {
        Learner { groups: vec![Group::new("all", &["*"], optimizer, peak)], schedule, clip, accumulation: 1 }
    }

    /// The rate of update `step` of the first group (the one records show).
    pub fn lr(&self, step: u64) -> f64 {
        self.lr_scaled(step, 1.0)
    }

    /// The first group's rate of update `step` with every peak multiplied by `factor`.
    pub fn lr_scaled(&self, step: u64, factor: f64) -> f64 {
        self.groups.first().map_or(0.0, |g| self.schedule.lr(g.peak * factor, step))
    }

    /// Set the first group's peak to `peak`, scaling every other group's by the same factor so
    /// their ratios stay as the system set them.
    pub fn with_peak(mut self, peak: f64) -> Learner {
        if let Some(first) = self.groups.first().map(|g| g.peak) {
            for (i, g) in self.groups.iter_mut().enumerate() {
                g.peak = if i == 0 { peak } else { g.peak * (peak / first) };
            }
        }
        self
    }

    /// One line for records: the schedule at each group's peak (one group: the schedule alone).
    pub fn describe(&self) -> String {
        match self.groups.as_slice() {
            [g] if matches!(g.optimizer, Optimizer::AdamW(_)) => self.schedule.describe(g.peak),
            groups => groups
                .iter()
                .map(|g| format!("{} ({}): {}", g.name, g.optimizer.name(), self.schedule.describe(g.peak)))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }

    /// Host scalars for update `step` (from 1), every group's, the first group's rate first.
    /// Computed in binary64; the device reads them as f32.
    pub fn scalars(&self, step: u64) -> Vec<(&'static str, f64)> {
        self.scalars_scaled(step, 1.0)
    }

    /// [`Learner::scalars`] with every group's peak multiplied by `factor` (a wall-clock
    /// budget's warmdown, [`TimeBudget::factor`]) before the schedule shapes it. Every schedule
    /// is linear in the peak, so this is the schedule's rate times the factor; a factor of 1
    /// leaves each peak, and so every scalar, bit for bit as [`Learner::scalars`] gives it.
    /// Rotational AdamW's angle follows the scaled rate; bias corrections and Muon's momentum
    /// do not depend on it.
    pub fn scalars_scaled(&self, step: u64, factor: f64) -> Vec<(&'static str, f64)> {
        let t = step as i32;
        let mut out = vec![];
        for g in &self.groups {
            let lr = self.schedule.lr(g.peak * factor, step);
            let name = |role| scalar_name(role, &g.name);
            out.push((name(LR), lr));
            let adam = |b1: f64, b2: f64, out: &mut Vec<_>| {
                out.push((name(BC1), 1.0 - b1.powi(t)));
                out.push((name(BC2), 1.0 - b2.powi(t)));
            };
            match &g.optimizer {
                Optimizer::AdamW(a) => adam(a.beta1, a.beta2, &mut out),
                Optimizer::Adam { beta1, beta2, .. } => adam(*beta1, *beta2, &mut out),
                Optimizer::Muon(m) => out.push((name(MOMENTUM), m.momentum_at(step))),
                Optimizer::RotationalAdamW(r) => {
                    adam(r.beta1, r.beta2, &mut out);
                    out.push((name(ANGLE), r.angular_step(lr)));
                    out.push((name(BCS), 1.0 - r.rho.powi(t)));
                }
            }
        }
        out
    }

    /// Which group each parameter belongs to (indices into `groups`, in `params`' order), or an
    /// error naming the parameter in no group or in two, the group selecting nothing, or the
    /// parameter whose shape its group's optimizer cannot take.
    pub fn assign_groups(&self, system: &str, params: &[(String, Vec<usize>)]) -> Result<Vec<usize>, IrError> {
        let fail = |m: String| Err(learner_error(system, m));
        if self.groups.is_empty() {
            return fail("the learner has no optimizer group".into());
        }
        let mut seen = HashSet::new();
        for g in &self.groups {
            if !seen.insert(g.name.as_str()) {
                return fail(format!("two optimizer groups are named '{}'", g.name));
            }
            if !(g.peak.is_finite() && g.peak > 0.0) {
                return fail(format!("optimizer group '{}' has peak learning rate {}, not above 0", g.name, g.peak));
            }
        }
        let mut out = vec![];
        for (path, shape) in params {
            let hits: Vec<usize> = (0..self.groups.len()).filter(|&i| self.groups[i].selects(path)).collect();
            match hits.as_slice() {
                [] => {
                    let names: Vec<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
                    return fail(format!("parameter {path} is in no optimizer group (groups: {})", names.join(", ")));
                }
                [i] => {
                    let g = &self.groups[*i];
                    if let Some(why) = g.optimizer.refuses(shape) {
                        return fail(format!("parameter {path} cannot be in group '{}': {why}", g.name));
                    }
                    out.push(*i);
                }
                [a, b, ..] => {
                    return fail(format!(
                        "parameter {path} is in two optimizer groups: '{}' and '{}'",
                        self.groups[*a].name, self.groups[*b].name
                    ))
                }
            }
        }
        for (i, g) in self.groups.iter().enumerate() {
            if !out.contains(&i) {
                return fail(format!("optimizer group '{}' selects no parameter (patterns {:?})", g.name, g.select));
            }
        }
        Ok(out)
    }

    /// Append clipping and every group's update of `params` by `grads`; returns the
    /// assignments. The global norm goes to `outputs["grad_norm"]`.
    fn append_update(
        &self,
        g: &mut Graph,
        params: &[(Value, String)],
        grads: &[Value],
        outputs: &mut BTreeMap<String, Value>,
    ) -> Result<Vec<(Value, Value)>, IrError> {
        let shapes: Vec<(String, Vec<usize>)> = params.iter().map(|(v, n)| (n.clone(), g.shape(*v).to_vec())).collect();
        let group_of = self.assign_groups(&g.system, &shapes)?;
        let update_grads = grads;
        // Global norm and the clip factor, in-graph so the step needs no host round trip: one
        // sum of squares over every gradient (one op, so a device can do it in one pass).
        let total = if update_grads.is_empty() {
            g.constant(0.0, &[], DType::F32)
        } else {
            g.push(Op::SumSquares, update_grads)[0]
        };
        let norm = g.sqrt(total);
        outputs.insert("grad_norm".to_string(), norm);
        let gscale = match self.clip {
            Some(c) => {
                let floor = g.constant(1e-6, &[], DType::F32);
                let denom = g.binary(Binary::Max, norm, floor);
                let c = g.constant(c, &[], DType::F32);
                let ratio = g.div(c, denom);
                let one = g.constant(1.0, &[], DType::F32);
                g.binary(Binary::Min, ratio, one)
            }
            None => g.constant(1.0, &[], DType::F32),
        };
        let mut assign = vec![];
        for (gi, group) in self.groups.iter().enumerate() {
            let host = |g: &mut Graph, role: &str| g.host_scalar(scalar_name(role, &group.name), DType::F32);
            let lr = host(g, LR);
            let members: Vec<(Value, String, Value)> = params
                .iter()
                .zip(update_grads)
                .zip(&group_of)
                .filter(|(_, &i)| i == gi)
                .map(|(((p, n), gr), _)| (*p, n.clone(), *gr))
                .collect();
            let mut scalars = optim::GroupScalars { lr, bc1: None, bc2: None, momentum: None, angle: None, bcs: None };
            match &group.optimizer {
                Optimizer::AdamW(_) | Optimizer::Adam { .. } => {
                    scalars.bc1 = Some(host(g, BC1));
                    scalars.bc2 = Some(host(g, BC2));
                    for (p, name, gr) in &members {
                        let hyper = match &group.optimizer {
                            Optimizer::AdamW(a) => {
                                let decays = match a.decay {
                                    Decay::None => false,
                                    Decay::MatricesOnly => g.shape(*p).len() >= 2,
                                    Decay::All => true,
                                };
                                (a.beta1, a.beta2, a.eps, if decays { a.weight_decay } else { 0.0 })
                            }
                            Optimizer::Adam { beta1, beta2, eps } => (*beta1, *beta2, *eps, 0.0),
                            _ => unreachable!("an Adam group"),
                        };
                        assign.extend(optim::adamw(g, *p, name, *gr, &scalars, gscale, hyper));
                    }
                }
                Optimizer::Muon(m) => {
                    scalars.momentum = Some(host(g, MOMENTUM));
                    assign.extend(optim::muon(g, m, &members, &scalars, gscale));
                }
                Optimizer::RotationalAdamW(r) => {
                    scalars.bc1 = Some(host(g, BC1));
                    scalars.bc2 = Some(host(g, BC2));
                    scalars.angle = Some(host(g, ANGLE));
                    scalars.bcs = Some(host(g, BCS));
                    for (p, name, gr) in &members {
                        assign.extend(optim::rotational(g, r, *p, name, *gr, &scalars, gscale));
                    }
                }
            }
        }
        Ok(assign)
    }

    /// A program of the update alone: gradients are state tensors named `<param>.grad`, so a
    /// device's optimizer can be checked against the reference on identical inputs.
    pub fn update_program(&self, model: &Model) -> Result<Program, IrError> {
        let mut g = Graph::new(model.graph.system.clone());
        let mut params = vec![];
        let mut grads = vec![];
        for (v, name) in model.graph.params() {
            let shape = model.graph.shape(v).to_vec();
            let p = g.param(&name, &shape, Init::Zeros);
            let gr = g.state(&format!("{name}.grad"), TensorType::new(shape, DType::F32), Init::Zeros);
            params.push((p, name));
            grads.push(gr);
        }
        let mut outputs = BTreeMap::new();
        let assign = self.append_update(&mut g, &params, &grads, &mut outputs)?;
        let n = g.nodes.len();
        let program =
            Program { graph: g.finish()?, phases: vec![Phase { name: "step".into(), nodes: 0..n, assign }], outputs };
        program.verify()?;
        Ok(program)
    }

    /// Compile the training program. With accumulation K = 1 it has one phase, `step`; with
    /// K > 1, `accumulate` (run K times, adding gradient/K into accumulators) then `update`.
    pub fn training_program(&self, model: Model) -> Result<Program, IrError> {
        Ok(self.compile(model, false)?.0)
    }

    /// [`Learner::training_program`] with one more phase, [`health::PHASE`]: its last phase built
    /// again with every parameter tensor's health figures as the output [`health::OUTPUT`]
    /// (see [`health`] for why a variant phase). Returns the rows of that output.
    pub fn training_program_with_health(&self, model: Model) -> Result<(Program, Vec<health::Row>), IrError> {
        self.compile(model, true)
    }

    fn compile(&self, model: Model, with_health: bool) -> Result<(Program, Vec<health::Row>), IrError> {
        let Model { mut graph, loss, losses, logits } = model;
        let g = &mut graph;
        let params = g.params();
        let wrt: Vec<Value> = params.iter().map(|p| p.0).collect();
        let grads = alpha_grad::backward(g, loss, &wrt)?;
        let k = self.accumulation.max(1);
        let mut outputs = BTreeMap::new();
        outputs.insert("loss".to_string(), loss);
        outputs.insert("losses".to_string(), losses);
        let _ = logits;

        let mut phases = vec![];
        let update_grads: Vec<Value> = if k == 1 {
            grads
        } else {
            let mut accs = vec![];
            let mut assign = vec![];
            for ((p, name), gr) in params.iter().zip(&grads) {
                let ty = g.ty(*p).clone();
                let acc = g.state(&format!("{name}.grad_acc"), ty, Init::Zeros);
                let scaled = g.scale(*gr, 1.0 / k as f64);
                let sum = g.add(acc, scaled);
                assign.push((acc, sum));
                accs.push(acc);
            }
            phases.push(Phase { name: "accumulate".into(), nodes: 0..g.nodes.len(), assign });
            accs
        };
        let start = phases.last().map_or(0, |p: &Phase| p.nodes.end);

        let mut assign = self.append_update(g, &params, &update_grads, &mut outputs)?;
        if k > 1 {
            for acc in &update_grads {
                let shape = g.shape(*acc).to_vec();
                let zero = g.constant(0.0, &shape, DType::F32);
                assign.push((*acc, zero));
            }
        }
        let name = if k == 1 { "step" } else { "update" };
        phases.push(Phase { name: name.into(), nodes: start..g.nodes.len(), assign });
        let mut rows = vec![];
        if with_health {
            let last = phases.last().expect("a training program has a phase").clone();
            let (phase, r) = health::append(g, &last, &params, &update_grads, &mut outputs);
            phases.push(phase);
            rows = r;
        }
        if let Some(e) = graph.error() {
            return Err(e.clone());
        }
        let program = Program { graph: graph.finish()?, phases, outputs };
        program.verify()?;
        Ok((program, rows))
    }
}

/// The forward-only program for scoring and prediction: per-position losses and logits.
pub fn inference_program(model: Model) -> Result<Program, IrError> {
    let Model { graph, loss, losses, logits } = model;
    let mut outputs = BTreeMap::new();
    outputs.insert("loss".to_string(), loss);
    outputs.insert("losses".to_string(), losses);
    outputs.insert("logits".to_string(), logits);
    Ok(Program::single(graph.finish()?, "forward", outputs))
}

/// Forward and backward without an update: outputs `loss`, `losses`, `logits` and
/// `grad:<param>` for every parameter, for the gradient gate.
pub fn gradient_program(model: Model) -> Result<Program, IrError> {
    let Model { mut graph, loss, losses, logits } = model;
    let params = graph.params();
    let wrt: Vec<Value> = params.iter().map(|p| p.0).collect();
    let grads = alpha_grad::backward(&mut graph, loss, &wrt)?;
    let mut outputs = BTreeMap::new();
    outputs.insert("loss".to_string(), loss);
    outputs.insert("losses".to_string(), losses);
    outputs.insert("logits".to_string(), logits);
    for ((_, name), g) in params.iter().zip(grads) {
        outputs.insert(format!("grad:{name}"), g);
    }
    Ok(Program::single(graph.finish()?, "step", outputs))
}
