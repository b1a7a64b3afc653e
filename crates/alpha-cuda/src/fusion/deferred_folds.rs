//! LayerNorm backwards whose gain and bias folds wait for one launch after the last of them.

use super::*;

/// The LayerNormBackwards of a phase whose pass 2 (the fold of pass 1's band partials into the
/// gain and bias gradients) can wait for one launch after the last of them
/// ([`layernorm::backward_finish_multi_kernel`]), and that last one: those whose pass 1 runs in
/// the input gradient's launch (many bands) and whose gain and bias gradients nothing in the
/// phase reads before that last one (the optimizer reads them at the end of a step).
pub(crate) fn deferred_folds(cfg: &CudaConfig, view: &PhaseView) -> (std::collections::HashSet<u32>, Option<u32>) {
    let g = view.g;
    let none = (std::collections::HashSet::new(), None);
    if !cfg.ln_fold_together {
        return none;
    }
    let deep: Vec<u32> = view
        .nodes
        .iter()
        .copied()
        .filter(|&id| {
            let n = &g.nodes[id as usize];
            n.op == Op::LayerNormBackward && partials_in_rows(cfg, norm_of(g, n))
        })
        .collect();
    let Some(&last) = deep.last() else { return none };
    let last_pos = view.pos[&last];
    // Read only after the last (program outputs and phase copies come after every launch).
    let waits = |id: u32| {
        (1..3u16).all(|k| {
            let v = Value { node: id, index: k };
            view.readers(v).iter().all(|r| view.pos.get(r).is_none_or(|&p| p > last_pos))
        })
    };
    let deferred: std::collections::HashSet<u32> = deep.iter().copied().filter(|&id| waits(id)).collect();
    let flush = deep.iter().rev().copied().find(|id| deferred.contains(id));
    (deferred, flush)
}

/// The shape of a LayerNorm (forward or backward) node: rows of its input's last axis.
pub(crate) fn norm_of(g: &alpha_ir::Graph, node: &Node) -> Norm {
    let c = *g.shape(node.inputs[0]).last().unwrap_or(&1);
    Norm { rows: node.outputs[0].numel() / c.max(1), c }
}

/// Whether a LayerNorm backward of shape `n` runs pass 1 in its input gradient's launch.
pub(crate) fn partials_in_rows(cfg: &CudaConfig, n: Norm) -> bool {
    cfg.ln_partials && n.bands() >= PARTIALS_IN_ROWS_MIN_BANDS
}

/// Bands from which a LayerNorm backward's pass 1 runs in its input gradient's launch: two
/// blocks an SM, so that the band-at-a-time rows still fill the GPU (sixteen contexts' 1,024
/// bands do; one context's 64 keep the row-a-block grid).
pub(crate) const PARTIALS_IN_ROWS_MIN_BANDS: usize = 2 * gemm::SMS as usize;
