//! Head-split stores: a product stored split into attention heads by its epilogue instead of
//! the Permute after it (a part of [`fuse_more`]).

use super::*;

/// A bias Add a head-split store takes over: (the Add node, the bias row).
pub(crate) type BiasAdd = (u32, Value);

/// The MatMul whose product Permute `p` (with `perm`) splits into attention heads, and the
/// split: the product `[B·T, S·H·D]` reshaped (each link read once) to `[B, T, S, H, D]` and
/// permuted to `[S, B, H, T, D]`, or to `[B, T, H, D]` and permuted to `[B, H, T, D]`; an
/// unbatched f32 tiled product that split-K leaves whole, D a multiple of 8. Between the
/// product and the reshapes may stand an Add of a bias (an f32 row of `S·H·D`, read once),
/// which the store then adds ([`gemm::Heads::bias`]): with it, (the Add node, the bias).
pub(crate) fn head_split(
    cfg: &CudaConfig,
    g: &alpha_ir::Graph,
    uses: &HashMap<Value, usize>,
    p: &Node,
    perm: &[usize],
) -> Option<(u32, gemm::Heads, Option<BiasAdd>)> {
    let mut x = p.inputs[0];
    let shape = g.shape(x).to_vec();
    let (b, t, h, d) = match (perm, shape.as_slice()) {
        ([2, 0, 3, 1, 4], &[b, t, _, h, d]) | ([0, 2, 1, 3], &[b, t, h, d]) => (b, t, h, d),
        _ => return None,
    };
    while matches!(g.nodes[x.node as usize].op, Op::Reshape { .. }) && uses.get(&x) == Some(&1) {
        x = g.nodes[x.node as usize].inputs[0];
    }
    let mut bias = None;
    let an = &g.nodes[x.node as usize];
    if an.op == Op::Binary(alpha_ir::Binary::Add) && x.index == 0 && uses.get(&x) == Some(&1) {
        let width = g.shape(x).last().copied().unwrap_or(0);
        let row = |v: Value| {
            let s = g.shape(v);
            g.dtype(v) == DType::F32 && s.iter().product::<usize>() == width && s.last() == Some(&width)
        };
        let product = |v: Value| matches!(g.nodes[v.node as usize].op, Op::MatMul { .. });
        let (l, r) = (an.inputs[0], an.inputs[1]);
        let found = match (product(l) && row(r), product(r) && row(l)) {
            (true, _) => Some((l, r)),
            (_, true) => Some((r, l)),
            _ => None,
        };
        let (prod, row_value) = found?;
        bias = Some((x.node, row_value));
        x = prod;
    }
    let mm = x.node;
    let (spec, shape) = tiled_gemm(cfg, g, mm)?;
    let whole = shape.batch == 1 && shape.split_k(spec.bk) == 1;
    let ok = x.index == 0
        && uses.get(&x) == Some(&1)
        && whole
        && shape.m as usize == b * t
        && d.is_multiple_of(8)
        && p.outputs[0].dtype == DType::F32;
    let heads = gemm::Heads {
        batch: b as u32,
        t: t as u32,
        heads: h as u32,
        d: d as u32,
        bf16_turned: false,
        bf16: false,
        bias: bias.is_some(),
        delta: false,
    };
    ok.then_some((mm, heads, bias))
}

/// A product split into heads by Permute `id` after it (through reshapes, each value read
/// once): the product's epilogue stores the Permute's output ([`head_split`]).
pub(crate) fn heads_candidate(
    cx: &EpilogueView,
    fp: &mut FusionPlan,
    cands: &mut Vec<Moved>,
    perm: &[usize],
    i: usize,
    id: u32,
    node: &Node,
) {
    let EpilogueView { cfg, g, uses, readers, pos, skip, .. } = *cx;
    let val = |node: u32, index: u16| Value { node, index };
    let rng = |v: Value| cx.rng(v);
    let disjoint = |writes: &[Value], reads: &[Value]| cx.disjoint(writes, reads);
    let Some((mm, heads, bias)) = head_split(cfg, g, uses, node, perm) else { return };
    // Measured on the H200 (bench/results/2026-11-29-h200-coppelius-speedups.md):
    // 16 contexts' step 35.31 → 34.23 ms with the split stores, one context's 4.81
    // → 4.72 ms (slower there, 5.18 → 5.37 ms, while kernels let their dependents
    // launch as they started). `CudaConfig::head_split` turns them off.
    if !cfg.head_split.unwrap_or(true) {
        return;
    }
    let Some(&pm) = pos.get(&mm) else { return };
    let taken = fp.residual_add(mm).is_some()
        || fp.activation(mm).is_some()
        || skip.contains(&id)
        || bias.is_some_and(|(add, _)| skip.contains(&add));
    let reads_cast = readers
        .get(&val(id, 0))
        .is_some_and(|rs| rs.iter().any(|&r| matches!(g.nodes[r as usize].op, Op::Cast { .. })));
    if taken || reads_cast || pm >= i {
        return;
    }
    let mn = &g.nodes[mm as usize];
    let (a, b) = fp.f32_operands(mm).copied().unwrap_or((mn.inputs[0], mn.inputs[1]));
    if !disjoint(&[val(id, 0)], &[a, b]) {
        return;
    }
    let Some(pr) = rng(val(id, 0)) else { return };
    let skipped = bias.map(|(add, _)| add).into_iter().chain([id]).collect();
    // The bias is read at the product instead of at its Add: nothing between may touch it.
    let mut moved = vec![(pr, pm, i)];
    if let Some((add, row)) = bias {
        let (Some(br), Some(&pa)) = (rng(row), pos.get(&add)) else { return };
        moved.push((br, pm, pa));
    }
    fp.product_mut(mm).heads = Some((id, heads));
    fp.product_mut(mm).heads_bias = bias;
    cands.push(Moved { host: mm, skipped, moved });
}
