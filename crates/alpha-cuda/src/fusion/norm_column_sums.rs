//! A LayerNorm backward summing the columns of what it stores, for the bias gradient after it.

use super::*;
use crate::kernels::reduce::Reduction;

/// The LayerNorm backwards that run pass 1 in their rows ([`partials_in_rows`]) whose stored
/// input gradient — dx, or the residual sum of the Add right after them — a column sum over all
/// its rows (a bias gradient) reads, launched right after them (after the Add): the backward's
/// launch then also writes each band's column sums
/// ([`layernorm::backward_dx_column_partials_kernel`]) and the sum runs only its finishing pass
/// over them, the tensor not read back. Records them in `fp.norm_column_sums` (LayerNorm → sum).
///
/// The lowering applies one where the backward stores what the sum reads (for an Add, where it
/// adds the residual itself), and not where the sum stores the tensor's bf16 cast instead
/// ([`column_casts`]: the same bytes either way, and that sum then has a launch's work to do).
pub(crate) fn norm_column_sums(
    cfg: &CudaConfig,
    ph: &PhaseView,
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) {
    let g = ph.g;
    for (i, &ln) in ph.nodes.iter().enumerate() {
        let n = &g.nodes[ln as usize];
        let nm = norm_of(g, n);
        if n.op != Op::LayerNormBackward || !partials_in_rows(cfg, nm) {
            continue;
        }
        let dx = Value { node: ln, index: 0 };
        let add = ph.nodes.get(i + 1).copied().filter(|&a| {
            let an = &g.nodes[a as usize];
            an.op == Op::Binary(alpha_ir::Binary::Add) && an.inputs.contains(&dx)
        });
        let (stored, at) = match add {
            Some(a) => (Value { node: a, index: 0 }, i + 2),
            None => (dx, i + 1),
        };
        let Some(&sum) = ph.nodes.get(at) else { continue };
        let sn = &g.nodes[sum as usize];
        let Op::Reduce { kind, axes, .. } = &sn.op else { continue };
        let whole = Reduction::new(*kind, g.shape(stored), axes, g.dtype(stored), sn.outputs[0].dtype)
            .is_ok_and(|r| r.columns && r.outputs() == nm.c && r.count() == nm.rows);
        if sn.inputs[0] == stored && whole && !skip.contains(&sum) {
            fp.norm_column_sums.insert(ln, sum);
        }
    }
}
