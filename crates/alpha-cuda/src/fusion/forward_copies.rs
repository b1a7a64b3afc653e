//! The attention forward storing the bf16 cast of its permuted output too.

use super::*;

/// The bf16 attention forwards whose output reaches the output projection through a permute to
/// `[B, T, H, D]` launched right after it, storing its bf16 cast: the forward stores that cast
/// itself as well ([`crate::kernels::attention::mma::forward_kernel_bf16_copying`]) and the permute does
/// not run. The cast's slot must be clear of what the forward reads and writes. Records them in
/// `fp.output_copy`; returns the permutes to skip.
pub(crate) fn forward_copies(ph: &PhaseView, skip: &std::collections::HashSet<u32>, fp: &mut FusionPlan) -> Vec<u32> {
    let g = ph.g;
    let mut permutes = vec![];
    for (a, tensor) in fp.bf16_attentions() {
        let n = &g.nodes[a as usize];
        let (Op::Attention { .. }, Some(&at)) = (&n.op, ph.pos.get(&a)) else { continue };
        if g.shape(n.inputs[0]) != g.shape(n.inputs[1]) {
            continue;
        }
        let o = Value { node: a, index: 0 };
        let is_permute = |r: &&u32| matches!(g.nodes[**r as usize].op, Op::Permute { .. });
        let &[p] = ph.readers(o).iter().filter(is_permute).copied().collect::<Vec<u32>>().as_slice() else { continue };
        let touched = [ph.range(o), ph.range(Value { node: a, index: 1 }), Some(tensor)];
        if let Some(cast) = ph.permute_cast_for(at, p, &[0, 2, 1, 3], skip, &fp.store_as, touched) {
            fp.attention_mut(a).output_copy = Some(cast);
            permutes.push(p);
        }
    }
    permutes
}
