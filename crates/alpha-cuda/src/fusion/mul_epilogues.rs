//! A gated unit's multiply as the up product's epilogue.

use super::*;

/// Multiplies `x · y` stored as bf16 by their producer (the cast that alone reads them, see
/// [`casts_into_producers`]) where one operand is the product of the tiled MatMul launched just
/// before, stored plainly and whole (no split), and the other was computed before it: the
/// product's epilogue writes the bf16 product too ([`gemm::Epilogue::StoreMul`], the same f32
/// multiply and rounding), and the multiply does not run — a gated unit's `gelu(gate) · up`,
/// which read both halves again. Over deep grids only (see below). Records them in
/// `fp.gemm_mul`; returns the multiplies.
///
/// The cast's slot must be clear of the product's operands, the product and the other operand
/// (it is written while they are read).
pub(crate) fn mul_epilogues(
    cfg: &CudaConfig,
    ph: &PhaseView,
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) -> Vec<u32> {
    let g = ph.g;
    let launched = |id: u32| !skip.contains(&id) && !matches!(g.nodes[id as usize].op, Op::Reshape { .. });
    let mut found = vec![];
    for (j, &m) in ph.nodes.iter().enumerate() {
        let mn = &g.nodes[m as usize];
        if skip.contains(&m) || mn.op != Op::Binary(alpha_ir::Binary::Mul) {
            continue;
        }
        let Some(&cast) = fp.store_as.get(&Value { node: m, index: 0 }) else { continue };
        let Some(i) = (0..j).rev().find(|&i| launched(ph.nodes[i])) else { continue };
        let gid = ph.nodes[i];
        let Some((spec, shape)) = tiled_gemm(cfg, g, gid) else { continue };
        let whole = !cfg.split_k || shape.split_k(spec.bk) == 1;
        // Deep grids only: measured on the H200, sixteen contexts' step 26.89 -> 26.79 /
        // 26.84 ms with the fusion, one context's 3.853 -> 3.869 / 3.866 ms (its shallow grid
        // leaves the epilogue's extra traffic exposed).
        let deep = deep_epilogue_grid(&spec, &shape);
        let plain = fp.residual_add(gid).is_none()
            && fp.activation(gid).is_none()
            && fp.heads(gid).is_none()
            && fp.mul(gid).is_none();
        let prod = Value { node: gid, index: 0 };
        let other = match (mn.inputs[0] == prod, mn.inputs[1] == prod) {
            (true, false) => mn.inputs[1],
            (false, true) => mn.inputs[0],
            _ => continue,
        };
        // Written before the product: by its own launch, or (an activation fused into an
        // earlier product's epilogue) by that product's. That activation is then computed from
        // the earlier product (`gelu(gate)` from the gate) instead of read: its value, which the
        // gated unit's backward recomputes too, then need not be stored at all
        // (`dead_activation_stores`).
        let host = fp.activations().into_iter().find(|&(_, (u, _))| u == other.node).map(|(host, (_, u))| (host, u));
        let writer = host.map_or(other.node, |(h, _)| h);
        let before = ph.pos.get(&writer).is_none_or(|&p| p < i);
        // The earlier product must still be alive here (read again at or after it); where it
        // is not (a forward alone), the activation is read as stored.
        let alive = |v: Value| ph.readers(v).iter().any(|r| ph.pos.get(r).is_some_and(|&p| p >= i));
        let (other, act) = match host {
            Some((h, u)) if cfg.mul_recompute && alive(Value { node: h, index: 0 }) => {
                (Value { node: h, index: 0 }, Some(u))
            }
            _ => (other, None),
        };
        let same = g.ty(other) == g.ty(prod) && mn.outputs[0] == *g.ty(prod) && g.dtype(prod) == DType::F32;
        let gn = &g.nodes[gid as usize];
        let (a, b) = fp.f32_operands(gid).copied().unwrap_or((gn.inputs[0], gn.inputs[1]));
        let clear = ph.range(cast).is_some_and(|cr| clear_of(cr, [a, b, prod, other].map(|v| ph.range(v))));
        if whole && deep && plain && before && same && clear {
            fp.product_mut(gid).mul = Some((m, other, cast, act));
            found.push(m);
        }
    }
    found
}
