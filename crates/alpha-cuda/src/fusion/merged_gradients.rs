//! The attention backward storing the bf16 cast of its permuted, concatenated gradients.

use super::*;

/// The bf16 attention backwards (one launch, q heads equal to k heads) whose three gradients —
/// dq and dk as their fused inverse rotaries leave them, and dv — reach the q/k/v projection's
/// backward only as one Concat, permuted to `[B, T, 3, H, D]` and cast to bf16 (the permute
/// launched storing the cast): the backward then stores that bf16 tensor itself
/// ([`crate::kernels::attention::mma::backward_kernel_bf16_merged`]) and the permute does not run.
/// Records them in `fp.merged_grads`; returns the permutes to skip.
///
/// Conditions: the chain through single-reader reshapes exactly so; nothing launched between
/// the backward and the permute; the cast's slot clear of everything the backward reads (it is
/// now written while the backward's blocks read).
pub(crate) fn merged_gradients(ph: &PhaseView, skip: &std::collections::HashSet<u32>, fp: &mut FusionPlan) -> Vec<u32> {
    let g = ph.g;
    let mut permutes = vec![];
    'hosts: for (h, tensor) in fp.bf16_attentions() {
        let n = &g.nodes[h as usize];
        let (Op::AttentionBackward { .. }, Some(&at)) = (&n.op, ph.pos.get(&h)) else { continue };
        if g.shape(n.inputs[0]) != g.shape(n.inputs[1]) {
            continue;
        }
        let rot = fp.store_rotary(h).copied().unwrap_or_default();
        let part = |k: usize| rot.get(k).copied().flatten().map_or(Value { node: h, index: k as u16 }, |r| r.0);
        let mut concat = None;
        for s in 0..3usize {
            let Some((c, x)) = ph.through_reshapes(part(s)) else { continue 'hosts };
            let cn = &g.nodes[c as usize];
            let in_place = matches!(cn.op, Op::Concat { axis: 0 }) && cn.inputs.len() == 3 && cn.inputs[s] == x;
            if !in_place || concat.is_some_and(|c0| c0 != c) {
                continue 'hosts;
            }
            concat = Some(c);
        }
        let Some(c) = concat else { continue };
        let Some((p, _)) = ph.through_reshapes(Value { node: c, index: 0 }) else { continue };
        let reads = n.inputs[3..].iter().map(|&v| ph.range(v)).chain([Some(tensor)]);
        if let Some(cast) = ph.permute_cast_for(at, p, &[1, 3, 0, 2, 4], skip, &fp.store_as, reads) {
            fp.attention_mut(h).merged_gradients = Some(cast);
            permutes.push(p);
        }
    }
    permutes
}
