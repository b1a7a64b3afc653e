//! Activation epilogues: a product's epilogue also writing `u(product)` for the Unary after it
//! (a part of [`fuse_more`]).

use super::*;

/// Activation epilogue: the first f32 Unary (in launch order) reading the product.
pub(crate) fn activation_candidate(
    cx: &EpilogueView,
    fp: &mut FusionPlan,
    cands: &mut Vec<Moved>,
    i: usize,
    id: u32,
    node: &Node,
) {
    let EpilogueView { cfg, g, readers, pos, .. } = *cx;
    let val = |node: u32, index: u16| Value { node, index };
    let rng = |v: Value| cx.rng(v);
    let disjoint = |writes: &[Value], reads: &[Value]| cx.disjoint(writes, reads);
    if tiled_gemm(cfg, g, id).is_none() || fp.residual_add(id).is_some() {
        return;
    }
    let prod = val(id, 0);
    let Some(rs) = readers.get(&prod) else { return };
    let Some((j, u, un)) = rs
        .iter()
        .filter_map(|&r| {
            let rn = &g.nodes[r as usize];
            let Op::Unary(un) = rn.op else { return None };
            let j = *pos.get(&r)?;
            let ok = j > i && rn.outputs[0] == *g.ty(prod) && rn.outputs[0].dtype == DType::F32;
            ok.then_some((j, r, un))
        })
        .min_by_key(|x| x.0)
    else {
        return;
    };
    let (a, b) = fp.f32_operands(id).copied().unwrap_or((node.inputs[0], node.inputs[1]));
    if !disjoint(&[val(u, 0), prod], &[a, b]) {
        return;
    }
    let Some(ur) = rng(val(u, 0)) else { return };
    fp.product_mut(id).activation = Some((u, un));
    cands.push(Moved { host: id, skipped: vec![u], moved: vec![(ur, i, j)] });
}
