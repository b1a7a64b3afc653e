//! A column sum storing the bf16 cast of the tensor it sums.

use super::*;
use crate::kernels::reduce::Reduction;

/// The column sums (an f32 `[rows, width]` summed over its rows: a bias's gradient) whose
/// tensor a bf16 cast also reads, the cast launched after the sum with nothing launched
/// between: the sum's first pass then stores the cast as it reads each element
/// ([`Reduction::column_cast_kernel`]), one read of the tensor instead of two and one launch
/// fewer. Records them in `fp.column_casts` (sum → the cast's output).
///
/// The cast is not put in `skip` here: a LayerNorm backward launched before the sum may store it
/// as its copy, decided as the lowering reaches it; the lowering fuses the cast into the sum only
/// where it is still a launch of its own by then ([`FusionPlan::column_cast`]).
///
/// Conditions: the sum on the column path; the cast reading the very value the sum reads, as
/// the same number of elements; the cast's slot clear of everything from the sum up to the cast
/// reads and writes (the store moves from the cast's launch to the sum's).
pub(crate) fn column_casts(ph: &PhaseView, skip: &std::collections::HashSet<u32>, fp: &mut FusionPlan) {
    let g = ph.g;
    for (at, &r) in ph.nodes.iter().enumerate() {
        let n = &g.nodes[r as usize];
        let Op::Reduce { kind, axes, .. } = &n.op else { continue };
        let x = n.inputs[0];
        let on_columns =
            Reduction::new(*kind, g.shape(x), axes, g.dtype(x), n.outputs[0].dtype).is_ok_and(|c| c.columns);
        if !on_columns || skip.contains(&r) {
            continue;
        }
        let cast = ph.readers(x).iter().copied().find(|&c| {
            let cn = &g.nodes[c as usize];
            let to_bf16 = matches!(cn.op, Op::Cast { to: DType::BF16 }) && cn.outputs[0].numel() == g.ty(x).numel();
            let after = ph.pos.get(&c).is_some_and(|&pc| ph.nothing_launched(at, pc, skip));
            to_bf16 && after && !skip.contains(&c)
        });
        let Some(c) = cast else { continue };
        let out = Value { node: c, index: 0 };
        let Some(slot) = ph.range(out) else { continue };
        if clear_of(slot, touched_by(g, &ph.nodes[at..ph.pos[&c]]).map(|v| ph.range(v))) {
            fp.column_casts.insert(r, out);
        }
    }
}
