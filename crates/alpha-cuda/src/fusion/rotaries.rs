//! Forward rotaries whose attention kernels may turn q and k on load.

use super::*;

/// A forward Rotary that the attention kernels can apply on load (see [`fuse_more`]): its
/// output is read only by one Attention, as q (`operand` 0) or k (1), and by that attention's
/// AttentionBackward as the same operand; all three in one phase, in that order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ForwardRotary {
    pub(crate) rotary: u32,
    pub(crate) input: Value,
    pub(crate) base: f64,
    pub(crate) attention: u32,
    pub(crate) backward: u32,
    pub(crate) operand: usize,
}

/// The forward Rotaries of `program` that qualify for rotation on load by their shape and
/// readers alone. Whether each is fused is decided against the plan ([`fuse_more`]);
/// [`lower_program`] keeps their inputs alive through the backward so that it can be.
pub(crate) fn forward_rotaries(program: &alpha_ir::Program) -> Vec<ForwardRotary> {
    let g = &program.graph;
    let (uses, readers) = readers_of(program);
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    let mut found = vec![];
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::Rotary { base, inverse: false } = n.op else { continue };
        let id = i as u32;
        let (x, out) = (n.inputs[0], Value { node: id, index: 0 });
        let xs = g.shape(x);
        if g.dtype(x) != DType::F32 || xs.len() != 4 || !attention::rotary_fits(xs[3]) {
            continue;
        }
        let Some(rs) = readers.get(&out) else { continue };
        if rs.len() != 2 || uses.get(&out) != Some(&2) {
            continue;
        }
        let (a, b) = (rs[0].min(rs[1]), rs[0].max(rs[1]));
        let (an, bn) = (&g.nodes[a as usize], &g.nodes[b as usize]);
        if !matches!(an.op, Op::Attention { .. }) || !matches!(bn.op, Op::AttentionBackward { .. }) {
            continue;
        }
        let Some(operand) = an.inputs.iter().position(|&v| v == out) else { continue };
        let ok = operand < 2
            && bn.inputs.get(operand) == Some(&out)
            && bn.inputs[3] == Value { node: a, index: 0 }
            && bn.inputs[4] == Value { node: a, index: 1 }
            && id < a
            && phase(id).is_some()
            && phase(id) == phase(a)
            && phase(a) == phase(b);
        if ok {
            found.push(ForwardRotary { rotary: id, input: x, base, attention: a, backward: b, operand });
        }
    }
    found
}
