//! The cross-entropy's forward launching its backward too: one read of the logits instead of
//! two ([`crate::kernels::cross_entropy::joint_kernel_bf16`]).
//!
//! Why a decision of its own: the backward runs at the forward's place, before the launches
//! between them, so its bf16 gradient must land where none of those reads or writes anything;
//! and its per-row scale, which the graph computes after the forward (the mean's backward), is
//! taken as the one value it is when it comes from constants alone.

use std::collections::HashSet;

use super::*;
use crate::kernels::cross_entropy::JOINT_MAX_WIDTH;

/// A cross-entropy whose backward its own launch runs: (the backward node, its per-row scale).
pub(crate) type JointCrossEntropy = (u32, f32);

/// The launches that computed the backward's per-row scale for it alone (a broadcast of the
/// constant and its product with the mean's `1/rows`): with the scale taken as a value, nothing
/// reads what they write. Walks back from `v` while each node has no reader but the last.
fn scale_launches(view: &PhaseView, mut v: Value, mut reader: u32) -> Vec<u32> {
    let mut dead = vec![];
    loop {
        let n = &view.g.nodes[v.node as usize];
        let launched = matches!(n.op, Op::Reshape { .. } | Op::Broadcast { .. } | Op::Binary(_));
        if !launched || view.readers(v) != [reader] || !view.pos.contains_key(&v.node) {
            return dead;
        }
        dead.push(v.node);
        // On through the one input that is not a constant (constants are not launched).
        let mut launched_inputs =
            n.inputs.iter().filter(|x| !matches!(view.g.nodes[x.node as usize].op, Op::Constant { .. }));
        let (Some(&x), None) = (launched_inputs.next(), launched_inputs.next()) else { return dead };
        (reader, v) = (v.node, x);
    }
}

/// The value every element of `v` holds, where it is a constant through reshapes, broadcasts
/// and products of such (each product rounded as the f32 multiply rounds it): the per-row
/// scale a mean loss's backward gives every row.
pub(crate) fn uniform_value(g: &alpha_ir::Graph, v: Value) -> Option<f32> {
    if g.dtype(v) != DType::F32 {
        return None;
    }
    let n = &g.nodes[v.node as usize];
    match &n.op {
        Op::Constant { value } => Some(*value as f32),
        Op::Reshape { .. } | Op::Broadcast { .. } => uniform_value(g, n.inputs[0]),
        Op::Binary(alpha_ir::Binary::Mul) => Some(uniform_value(g, n.inputs[0])? * uniform_value(g, n.inputs[1])?),
        _ => None,
    }
}

/// The phase's cross-entropies that launch their backward: each forward whose log-sum-exp only
/// its backward reads, over the same logits and targets, later in the phase, with a per-row
/// scale that is one constant, its gradient stored bf16 (the cast it alone feeds, see
/// `casts_into_producers`), rows that fit the kernel's shared memory, and the gradient's slot
/// clear of everything the forward and the launches up to the backward touch.
///
/// Returns each forward with its joint backward, and the nodes no longer launched (the
/// backwards, and the launches that computed their scale alone).
pub(crate) fn joint_cross_entropy(
    view: &PhaseView,
    skip: &HashSet<u32>,
    store_as: &HashMap<Value, Value>,
) -> (Vec<(u32, JointCrossEntropy)>, Vec<u32>) {
    let g = view.g;
    let (mut out, mut gone) = (vec![], vec![]);
    for (at, &f) in view.nodes.iter().enumerate() {
        let fwd = &g.nodes[f as usize];
        let Op::CrossEntropy { classes } = fwd.op else { continue };
        let input = g.dtype(fwd.inputs[0]);
        if skip.contains(&f) || !matches!(input, DType::F32 | DType::BF16) {
            continue;
        }
        let &[b] = view.readers(Value { node: f, index: 1 }) else { continue };
        let bwd = &g.nodes[b as usize];
        let same = matches!(bwd.op, Op::CrossEntropyBackward { classes: c } if c == classes)
            && bwd.inputs[0] == fwd.inputs[0]
            && bwd.inputs[2] == fwd.inputs[1];
        let Some(&to) = view.pos.get(&b) else { continue };
        if !same || skip.contains(&b) || to <= at {
            continue;
        }
        let Some(scale) = uniform_value(g, bwd.inputs[3]) else { continue };
        let Some(&cast) = store_as.get(&Value { node: b, index: 0 }) else { continue };
        // Rows of whole 16-byte copies that fit shared memory (twice as many bf16 logits).
        let width = *g.shape(fwd.inputs[0]).last().unwrap_or(&0) as u32;
        let es = input.size() as u32;
        if !width.is_multiple_of(16 / es) || width > JOINT_MAX_WIDTH * 4 / es {
            continue;
        }
        let touched = touched_by(g, &view.nodes[at..to]).map(|v| view.range(v));
        let Some(slot) = view.range(cast) else { continue };
        if clear_of(slot, touched) {
            out.push((f, (b, scale)));
            gone.push(b);
            gone.extend(scale_launches(view, bwd.inputs[3], b));
        }
    }
    (out, gone)
}

#[cfg(test)]
mod tests {
    use alpha_ir::{Binary, Graph};

    use super::*;

    /// The mean's backward scale is one value through its reshape, broadcast and product; a
    /// value read from an input is not.
    #[test]
    fn a_constant_through_reshapes_broadcasts_and_products_is_one_value() {
        let mut g = Graph::default();
        let one = g.constant(1.0, &[], DType::F32);
        let r = g.reshape(one, &[1]);
        let b = g.broadcast(r, &[8]);
        let third = g.constant(1.0 / 3.0, &[], DType::F32);
        let scaled = g.binary(Binary::Mul, b, third);
        assert_eq!(uniform_value(&g, scaled), Some(1.0f32 * (1.0 / 3.0) as f32));
        let x = g.input("x", &[8], DType::F32);
        let mixed = g.binary(Binary::Mul, x, third);
        assert_eq!(uniform_value(&g, mixed), None);
    }
}
