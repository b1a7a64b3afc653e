//! The learner: turns a model's graph and loss into one training program — forward, backward
//! and the optimizer update — with global-norm clipping, gradient accumulation, and the
//! schedule's per-step scalars fed by the host.

pub mod init;
pub mod schedule;

use std::collections::BTreeMap;

use alpha_ir::{Binary, DType, Graph, Init, IrError, Op, Phase, Program, TensorType, Value};
use serde::{Deserialize, Serialize};

pub use schedule::Schedule;

/// Which parameters weight decay applies to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Decay {
    None,
    /// Tensors of rank two or more (matrices and embeddings), not gains and biases.
    MatricesOnly,
    All,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdamW {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub decay: Decay,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Learner {
    pub adamw: AdamW,
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

/// The per-step scalars the host writes before running a step.
pub const LR: &str = "lr";
pub const BC1: &str = "bc1";
pub const BC2: &str = "bc2";

impl Learner {
    /// Host scalars for update `step` (from 1): learning rate and bias corrections.
    pub fn scalars(&self, step: u64) -> [(&'static str, f64); 3] {
        let t = step as i32;
        [(LR, self.schedule.lr(step)), (BC1, 1.0 - self.adamw.beta1.powi(t)), (BC2, 1.0 - self.adamw.beta2.powi(t))]
    }

    fn decays(&self, shape: &[usize]) -> bool {
        match self.adamw.decay {
            Decay::None => false,
            Decay::MatricesOnly => shape.len() >= 2,
            Decay::All => true,
        }
    }

    /// Append clipping and the AdamW update of `params` by `grads`; returns the assignments.
    /// The global norm goes to `outputs["grad_norm"]`.
    fn append_update(
        &self,
        g: &mut Graph,
        params: &[(Value, String)],
        grads: &[Value],
        outputs: &mut BTreeMap<String, Value>,
    ) -> Vec<(Value, Value)> {
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
        let lr = g.host_scalar(LR, DType::F32);
        let bc1 = g.host_scalar(BC1, DType::F32);
        let bc2 = g.host_scalar(BC2, DType::F32);
        let mut assign = vec![];
        for ((p, name), gr) in params.iter().zip(update_grads) {
            let ty: TensorType = g.ty(*p).clone();
            let m = g.state(&format!("{name}.adam_m"), ty.clone(), Init::Zeros);
            let v = g.state(&format!("{name}.adam_v"), ty.clone(), Init::Zeros);
            let wd = if self.decays(&ty.shape) { self.adamw.weight_decay } else { 0.0 };
            let op =
                Op::AdamW { beta1: self.adamw.beta1, beta2: self.adamw.beta2, eps: self.adamw.eps, weight_decay: wd };
            let outs = g.push(op, &[*p, *gr, m, v, lr, bc1, bc2, gscale]);
            // AdamW writes p, m, v in place; recording the assignment keeps that explicit.
            assign.extend([(*p, outs[0]), (m, outs[1]), (v, outs[2])]);
        }
        assign
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
        let assign = self.append_update(&mut g, &params, &grads, &mut outputs);
        let n = g.nodes.len();
        let program =
            Program { graph: g.finish()?, phases: vec![Phase { name: "step".into(), nodes: 0..n, assign }], outputs };
        program.verify()?;
        Ok(program)
    }

    /// Compile the training program. With accumulation K = 1 it has one phase, `step`; with
    /// K > 1, `accumulate` (run K times, adding gradient/K into accumulators) then `update`.
    pub fn training_program(&self, model: Model) -> Result<Program, IrError> {
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

        let mut assign = self.append_update(g, &params, &update_grads, &mut outputs);
        if k > 1 {
            for acc in &update_grads {
                let shape = g.shape(*acc).to_vec();
                let zero = g.constant(0.0, &shape, DType::F32);
                assign.push((*acc, zero));
            }
        }
        let name = if k == 1 { "step" } else { "update" };
        phases.push(Phase { name: name.into(), nodes: start..g.nodes.len(), assign });
        if let Some(e) = graph.error() {
            return Err(e.clone());
        }
        let program = Program { graph: graph.finish()?, phases, outputs };
        program.verify()?;
        Ok(program)
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
