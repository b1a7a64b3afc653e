//! Optimizer health: for every parameter tensor, the norms of its gradient, its values, its
//! update (the change this step) and each optimizer state it has, and how many of each one's
//! elements are not finite — computed on the device and written to one small output.
//!
//! Why a variant of the step, not outputs of every step: the figures are a few reductions per
//! tensor (a sum of squares, and a count of non-finite elements from elementwise ops and a
//! sum), so a system of 150 tensors adds thousands of small launches — more than its whole
//! step on a GPU. They are wanted every N updates, not every one. And they cannot be a phase of
//! their own run after the step: the gradient and the parameters before the update are values
//! inside the step, not persistent tensors, and keeping copies of them would cost every step
//! the memory and the writes. So the program gets one more phase, `health`: the step's last
//! phase (`step`, or `update` with accumulation) built again over the same leaves, its figures
//! appended. The trainer runs it in place of that phase on health steps; ordinary steps run
//! the phase as before, whose kernels are untouched (phases share no computed value, and the
//! arena's activations are reused across phases, so the variant costs no memory beyond its
//! own peak either).
//!
//! The figures are graph ops every backend has: `SumSquares` of one tensor then a square root
//! for a norm; for a count, `x − x` (NaN exactly where x is NaN or ±∞), `x − x ≥ 0` (1 where
//! finite: every comparison with NaN is false), one minus that, summed — a sum of zeros and ones
//! whose result is exact whenever it is below 2²⁴, and 0 exactly when every element is finite.

use std::collections::HashMap;

use alpha_ir::{Binary, DType, Graph, Op, Phase, Value};
use serde::{Deserialize, Serialize};

/// The phase a trainer runs on health steps in place of the program's last ordinary phase.
pub const PHASE: &str = "health";
/// The output holding every figure: `[rows, 2]`, each row a norm and a non-finite count, in
/// [`Row`] order.
pub const OUTPUT: &str = "health";
/// The health phase's own copies of the step's outputs (`health:loss`, `health:grad_norm`, …):
/// a phase cannot read another's values, so on a health step these hold what the step's do.
pub const PREFIX: &str = "health:";

/// What one row of [`OUTPUT`] measures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// The parameter's path.
    pub tensor: String,
    /// `grad`, `param`, `update`, or the state's suffix (`adam_m`, `adam_v`, `muon_momentum`,
    /// `rot_norm0`, `rot_ms`).
    pub quantity: String,
    /// Elements measured.
    pub numel: usize,
}

/// The quantities every tensor has, before its optimizer's states.
pub const QUANTITIES: [&str; 3] = ["grad", "param", "update"];

/// `[2]`: ‖x‖₂ and the count of x's non-finite elements, both f32.
fn figures(g: &mut Graph, x: Value) -> Value {
    let ss = g.push(Op::SumSquares, &[x])[0];
    let norm = g.sqrt(ss);
    let diff = g.sub(x, x);
    let zero = g.constant(0.0, &[], DType::F32);
    let finite = g.binary(Binary::Ge, diff, zero);
    let one = g.constant(1.0, &[], DType::F32);
    let bad = g.sub(one, finite);
    let count = g.sum_all(bad);
    let norm = g.reshape(norm, &[1]);
    let count = g.reshape(count, &[1]);
    g.concat(&[norm, count], 0)
}

/// The state suffix of `name` when it is `<param>.<suffix>` of an optimizer's state.
fn state_suffix<'a>(name: &'a str, param: &str) -> Option<&'a str> {
    let suffix = name.strip_prefix(param)?.strip_prefix('.')?;
    (suffix != "grad_acc").then_some(suffix)
}

/// Append the health phase to `graph`, built again from `last` (the program's last phase, whose
/// update assigns the parameters) with `grads[i]` the gradient the update of `params[i]` reads.
/// Adds `health:<name>` for each of `outputs` computed in `last`, and [`OUTPUT`]. Returns the
/// phase and its rows.
pub(crate) fn append(
    g: &mut Graph,
    last: &Phase,
    params: &[(Value, String)],
    grads: &[Value],
    outputs: &mut std::collections::BTreeMap<String, Value>,
) -> (Phase, Vec<Row>) {
    let start = g.nodes.len();
    let index: HashMap<Value, usize> = params.iter().enumerate().map(|(i, (p, _))| (*p, i)).collect();
    let mut copy: HashMap<Value, Value> = HashMap::new();
    let at = |copy: &HashMap<Value, Value>, v: Value| copy.get(&v).copied().unwrap_or(v);
    // (param index, quantity order, row, figures)
    let mut found: Vec<(usize, usize, Row, Value)> = vec![];
    let row = |g: &mut Graph, found: &mut Vec<_>, i: usize, order: usize, quantity: &str, x: Value| {
        let numel = g.ty(x).numel();
        let f = figures(g, x);
        found.push((i, order, Row { tensor: params[i].1.clone(), quantity: quantity.into(), numel }, f));
    };
    let mut in_place = vec![false; params.len()];
    for n in last.nodes.clone() {
        let node = &g.nodes[n];
        if node.op.is_leaf() || matches!(node.op, Op::Constant { .. }) {
            continue;
        }
        let inputs: Vec<Value> = node.inputs.iter().map(|&v| at(&copy, v)).collect();
        let adamw = matches!(node.op, Op::AdamW { .. });
        // AdamW overwrites its parameter and moments in place: keep the parameter as it was,
        // just before, for the update's norm (only for as long as that takes).
        let before = adamw.then(|| {
            let one = g.constant(1.0, &[], DType::F32);
            g.mul(inputs[0], one)
        });
        let outs = g.copy_node(n, &inputs);
        for (k, o) in outs.iter().enumerate() {
            copy.insert(Value { node: n as u32, index: k as u16 }, *o);
        }
        if let (Some(before), Some(&i)) = (before, index.get(&inputs[0])) {
            in_place[i] = true;
            let grad = at(&copy, grads[i]);
            row(g, &mut found, i, 0, "grad", grad);
            row(g, &mut found, i, 1, "param", outs[0]);
            let update = g.sub(outs[0], before);
            row(g, &mut found, i, 2, "update", update);
            row(g, &mut found, i, 3, "adam_m", outs[1]);
            row(g, &mut found, i, 4, "adam_v", outs[2]);
        }
    }
    let assign: Vec<(Value, Value)> = last.assign.iter().map(|&(d, s)| (d, at(&copy, s))).collect();
    for (i, (p, name)) in params.iter().enumerate() {
        if in_place[i] {
            continue;
        }
        let Some(&(_, new)) = assign.iter().find(|(d, _)| d == p) else { continue };
        let grad = at(&copy, grads[i]);
        row(g, &mut found, i, 0, "grad", grad);
        row(g, &mut found, i, 1, "param", new);
        let update = g.sub(new, *p);
        row(g, &mut found, i, 2, "update", update);
        let mut order = 3;
        for &(d, s) in &assign {
            let Op::State { name: state, .. } = &g.node(d).op else { continue };
            let Some(suffix) = state_suffix(state, name).map(str::to_string) else { continue };
            row(g, &mut found, i, order, &suffix, s);
            order += 1;
        }
    }
    found.sort_by_key(|f| (f.0, f.1));
    let parts: Vec<Value> = found.iter().map(|f| f.3).collect();
    let rows: Vec<Row> = found.into_iter().map(|f| f.2).collect();
    if !parts.is_empty() {
        let all = g.concat(&parts, 0);
        let table = g.reshape(all, &[rows.len(), 2]);
        outputs.insert(OUTPUT.to_string(), table);
    }
    let mirrored: Vec<(String, Value)> =
        outputs.iter().filter(|(_, v)| copy.contains_key(v)).map(|(k, v)| (format!("{PREFIX}{k}"), copy[v])).collect();
    outputs.extend(mirrored);
    (Phase { name: PHASE.into(), nodes: start..g.nodes.len(), assign }, rows)
}
