//! Activation epilogues, head-split stores and rotaries fused into attention's loads and
//! stores, checked together against the plan's slots.

use super::*;

/// A fusion of [`fuse_more`]: the node positions it removes from the launch list, the host
/// node, and the ranges whose write or read it moves from one position to another, each with
/// the open interval of positions that must neither read nor write it.
pub(crate) struct Moved {
    pub(crate) host: u32,
    pub(crate) skipped: Vec<u32>,
    pub(crate) moved: Vec<((usize, usize), usize, usize)>,
}

/// Fusions decided after [`fuse`] (whose choices they respect), each moving a write or a read
/// of whole tensors from one launch to another:
///
/// * GEMM activation epilogue: a `Unary` of f32 reading a tiled MatMul's product: the GEMM also
///   writes `u(acc)` to the Unary's slot (the product is still stored: pullbacks such as
///   GeluGrad read it). The Unary's write moves from its position to the GEMM's.
/// * Inverse rotary into attention's stores: an inverse Rotary whose only input is an
///   AttentionBackward's dq (or dk), read by nothing else: the backward kernel writes the
///   turned-back gradient straight into the Rotary's slot. The write moves from the Rotary's
///   position to the AttentionBackward's.
///
/// Memory discipline (the plan reuses slots by liveness in the original order): a moved range
/// must not be touched — read or written, by a node's own inputs and outputs or by any fusion
/// hosted there — by any launch strictly between the two positions; and within the host
/// launch, the ranges it writes must not overlap each other or the ranges it reads, except
/// where one coincides exactly with a row read only by the thread that writes it (see the
/// backward case). The first is checked until no fusion fails (a dropped fusion never comes
/// back, so the fusions left pass against the launches as finally lowered).
///
/// * Forward rotary into attention's loads ([`forward_rotaries`]): the attention forward and
///   both backward kernels read the Rotary's input and turn each q (k) row on load, with the
///   rotary kernel's table and arithmetic; the Rotary is not launched and its output never
///   written. The Rotary's read moves from its position to the Attention's and the
///   AttentionBackward's, so nothing from the Rotary through the backward may write the input:
///   a plain plan gives its space away at once (in Coppelius the attention's o landed exactly on
///   the pre-rotary k, the rotated k on the pre-rotary q); [`lower_program`] plans with the
///   input kept alive through the backward (`alpha_plan::plan_keeping`), and this checks it
///   against every write in between, those moved there by the other fusions included, and
///   against the backward's own (dk may still coincide exactly with the pre-rotary k: the
///   dK/dV kernel's thread j reads k row j only, before it writes dk row j).
pub(crate) fn fuse_more(
    cfg: &CudaConfig,
    plan: &Plan,
    nodes: &[u32],
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) -> std::collections::HashSet<u32> {
    let g = &plan.program.graph;
    let p = &plan.program;
    let (uses, readers) = readers_of(p);
    let pos: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let val = |node: u32, index: u16| Value { node, index };
    let rng = |v: Value| range(plan, v);
    // Pairwise: writes disjoint from each other and from reads. None if a range is missing.
    let disjoint = |writes: &[Value], reads: &[Value]| -> bool {
        let (Some(w), Some(r)) = (
            writes.iter().map(|&x| rng(x)).collect::<Option<Vec<_>>>(),
            reads.iter().map(|&x| rng(x)).collect::<Option<Vec<_>>>(),
        ) else {
            return false;
        };
        w.iter()
            .enumerate()
            .all(|(i, a)| w[i + 1..].iter().all(|b| !overlap(*a, *b)) && r.iter().all(|b| !overlap(*a, *b)))
    };
    let rotary = |id: u32| match g.nodes[id as usize].op {
        Op::Rotary { base, inverse } => Some((base, inverse)),
        _ => None,
    };
    let mut cands: Vec<Moved> = vec![];
    // AttentionBackward → its inverse-rotary fusion checked against pre-rotary and rotated q, k.
    let mut fallback: HashMap<u32, (Turned, Moved)> = HashMap::new();
    // Forward Rotaries that may be turned on load here: (candidate, its position, the
    // Attention's, the backward's).
    let fwd: Vec<(ForwardRotary, usize, usize, usize)> = forward_rotaries(p)
        .into_iter()
        .filter_map(|f| {
            let (pr, pa, pb) = (*pos.get(&f.rotary)?, *pos.get(&f.attention)?, *pos.get(&f.backward)?);
            let ok = pr < pa && pa < pb && !skip.contains(&f.rotary) && rng(f.input).is_some();
            ok.then_some((f, pr, pa, pb))
        })
        .collect();

    for (i, &id) in nodes.iter().enumerate() {
        let node = &g.nodes[id as usize];
        match &node.op {
            // A product split into heads by the Permute after it (through reshapes, each value
            // read once): the product's epilogue stores the Permute's output.
            Op::Permute { perm } => {
                let Some((mm, heads)) = head_split(cfg, g, &uses, node, perm) else { continue };
                // Measured on the H200 (bench/results/2026-11-29-h200-coppelius-speedups.md):
                // 16 contexts' step 35.31 → 34.23 ms with the split stores, one context's 4.81
                // → 4.72 ms (slower there, 5.18 → 5.37 ms, while kernels let their dependents
                // launch as they started). `CudaConfig::head_split` turns them off.
                if !cfg.head_split.unwrap_or(true) {
                    continue;
                }
                let Some(&pm) = pos.get(&mm) else { continue };
                let taken = fp.residual_add(mm).is_some() || fp.activation(mm).is_some() || skip.contains(&id);
                let reads_cast = readers
                    .get(&val(id, 0))
                    .is_some_and(|rs| rs.iter().any(|&r| matches!(g.nodes[r as usize].op, Op::Cast { .. })));
                if taken || reads_cast || pm >= i {
                    continue;
                }
                let mn = &g.nodes[mm as usize];
                let (a, b) = fp.f32_operands(mm).copied().unwrap_or((mn.inputs[0], mn.inputs[1]));
                if !disjoint(&[val(id, 0)], &[a, b]) {
                    continue;
                }
                let Some(pr) = rng(val(id, 0)) else { continue };
                fp.product_mut(mm).heads = Some((id, heads));
                cands.push(Moved { host: mm, skipped: vec![id], moved: vec![(pr, pm, i)] });
            }
            // Activation epilogue: the first f32 Unary (in launch order) reading the product.
            Op::MatMul { .. } => {
                if tiled_gemm(cfg, g, id).is_none() || fp.residual_add(id).is_some() {
                    continue;
                }
                let prod = val(id, 0);
                let Some(rs) = readers.get(&prod) else { continue };
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
                    continue;
                };
                let (a, b) = fp.f32_operands(id).copied().unwrap_or((node.inputs[0], node.inputs[1]));
                if !disjoint(&[val(u, 0), prod], &[a, b]) {
                    continue;
                }
                let Some(ur) = rng(val(u, 0)) else { continue };
                fp.product_mut(id).activation = Some((u, un));
                cands.push(Moved { host: id, skipped: vec![u], moved: vec![(ur, i, j)] });
            }
            Op::AttentionBackward { .. } => {
                let qs = g.shape(node.inputs[0]);
                if qs.len() != 4 || !attention::rotary_fits(qs[3]) {
                    continue;
                }
                // Per dq, dk: (the inverse Rotary's output, base, its position, its node).
                let mut found: [Option<(Value, f64, usize, u32)>; 2] = [None, None];
                for kk in 0..2u16 {
                    let dx = val(id, kk);
                    let Some(rs) = readers.get(&dx) else { continue };
                    if rs.len() != 1 || uses.get(&dx) != Some(&1) {
                        continue;
                    }
                    let r = rs[0];
                    let Some((base, true)) = rotary(r) else { continue };
                    let Some(&pr) = pos.get(&r) else { continue };
                    let ro = val(r, 0);
                    if pr <= i || g.ty(ro) != g.ty(dx) || g.dtype(dx) != DType::F32 || rng(ro).is_none() {
                        continue;
                    }
                    found[kk as usize] = Some((ro, base, pr, r));
                }
                // Exactly coinciding is safe for a row that only its writer reads, and only in
                // the launch that writes it: dq with o (the dQ kernel's thread i reads o row i,
                // then writes dq row i; the dK/dV kernel does not read o), dk with k and dv with
                // v (the dK/dV kernel's thread j reads k and v row j, then writes dk and dv row
                // j; the dQ kernel, which reads every k and v row, has finished); so may dk with
                // v, and with the pre-rotary k where the dK/dV kernel reads that instead.
                // Where the forward Rotary of q (k) is a candidate, the kernels read its input
                // instead of its output, which nothing reads after them: `assumed` checks
                // against what they read if every candidate fuses, `union` against both
                // tensors, for whatever mix fuses (used where a forward fusion fails below).
                let mut assumed = node.inputs.clone();
                let mut union = node.inputs.clone();
                for (f, ..) in fwd.iter().filter(|x| x.0.backward == id) {
                    assumed[f.operand] = f.input;
                    union.push(f.input);
                }
                let k_pre = fwd.iter().find(|x| x.0.backward == id && x.0.operand == 1).map(|x| x.0.input);
                let (k_, v_, o_) = (node.inputs[1], node.inputs[2], node.inputs[3]);
                // Which write (dq, dk, dv) may coincide exactly with which tensor read.
                let exact_ok = |a: usize, x: Value| match a {
                    0 => x == o_,
                    1 => x == k_ || Some(x) == k_pre || x == v_,
                    _ => x == v_,
                };
                let safe = |rot: &[Option<(Value, f64, usize, u32)>; 2], reads: &[Value]| -> bool {
                    let Some(rr) = reads.iter().map(|&x| rng(x)).collect::<Option<Vec<_>>>() else { return false };
                    let writes: Vec<Value> =
                        (0..2).map(|kk| rot[kk].map_or(val(id, kk as u16), |r| r.0)).chain([val(id, 2)]).collect();
                    let Some(wr) = writes.iter().map(|&x| rng(x)).collect::<Option<Vec<_>>>() else { return false };
                    wr.iter().enumerate().all(|(a, &wa)| {
                        wr[a + 1..].iter().all(|&wb| !overlap(wa, wb))
                            && reads.iter().zip(&rr).all(|(&x, &xr)| !overlap(wa, xr) || (wa == xr && exact_ok(a, x)))
                    })
                };
                // Both if safe, else whichever one is.
                let choices = [found, [found[0], None], [None, found[1]]];
                let pick =
                    |reads: &[Value]| choices.iter().copied().find(|c| c.iter().any(Option::is_some) && safe(c, reads));
                let fusion = |pick: [Option<(Value, f64, usize, u32)>; 2]| {
                    let rot: Turned = pick.map(|x| x.map(|(ro, base, _, _)| (ro, base)));
                    let moved = pick.iter().flatten().map(|&(ro, _, pr, _)| (rng(ro).unwrap(), i, pr)).collect();
                    let skipped = pick.iter().flatten().map(|x| x.3).collect();
                    (rot, Moved { host: id, skipped, moved })
                };
                if let Some(u) = pick(&union) {
                    fallback.insert(id, fusion(u));
                }
                let Some(a) = pick(&assumed) else { continue };
                let (rot, m) = fusion(a);
                fp.attention_mut(id).store_rotary = Some(rot);
                cands.push(m);
            }
            _ => {}
        }
    }

    // Forward rotaries: the input must not be written from after the Rotary up to the backward
    // (its raw outputs included; its fused stores were checked with its reads above), counting
    // every write the candidate fusions move into that span (they only move writes earlier, and
    // dropping one below only removes writes).
    let writes_at = |q: usize, with_hosted: bool| -> Vec<(usize, usize)> {
        let id = nodes[q];
        let mut vs: Vec<Value> = (0..g.nodes[id as usize].outputs.len()).map(|k| val(id, k as u16)).collect();
        if with_hosted {
            if let Some(&(add, _)) = fp.residual_add(id) {
                vs.push(val(add, 0));
            }
            if let Some(&(u, _)) = fp.activation(id) {
                vs.push(val(u, 0));
            }
            if let Some(&(pm, _)) = fp.heads(id) {
                vs.push(val(pm, 0));
            }
            if let Some(rot) = fp.store_rotary(id) {
                vs.extend(rot.iter().flatten().map(|r| r.0));
            }
        }
        vs.into_iter().filter_map(rng).collect()
    };
    let clean: Vec<bool> = fwd
        .iter()
        .map(|&(f, pr, _, pb)| {
            let xr = rng(f.input).expect("checked above");
            (pr + 1..=pb).all(|q| writes_at(q, q < pb).iter().all(|&w| !overlap(w, xr)))
        })
        .collect();
    let mut fused_rotaries = vec![];
    for (&(f, ..), clean) in fwd.iter().zip(clean) {
        if !clean {
            // The backward's fused stores were checked assuming this fusion: check them against
            // the pre-rotary and the rotated tensors both instead.
            if fp.attention_mut(f.backward).store_rotary.take().is_some() {
                cands.retain(|m| m.host != f.backward);
                if let Some((rot, m)) = fallback.remove(&f.backward) {
                    fp.attention_mut(f.backward).store_rotary = Some(rot);
                    cands.push(m);
                }
            }
            continue;
        }
        for host in [f.attention, f.backward] {
            fp.attention_mut(host).load_rotary.get_or_insert_with(Turned::default)[f.operand] = Some((f.input, f.base));
        }
        fused_rotaries.push(f.rotary);
    }

    // What each launch position touches: its node's inputs and outputs and what the fusions it
    // hosts read and write; nothing for a node that is not launched (every effect of a fused
    // node is at its host: a skipped cast's read moves to its GEMM, a fused Add's to its
    // GEMM, a fused Unary's or Rotary's write to its host, and their reads disappear).
    let touched = |fp: &FusionPlan, gone: &std::collections::HashSet<u32>| -> Vec<Vec<(usize, usize)>> {
        nodes
            .iter()
            .map(|&id| {
                if skip.contains(&id) || gone.contains(&id) {
                    return vec![];
                }
                let n = &g.nodes[id as usize];
                let mut vs: Vec<Value> = n.inputs.clone();
                vs.extend((0..n.outputs.len()).map(|k| val(id, k as u16)));
                if let Some(&(a, b)) = fp.f32_operands(id) {
                    vs.extend([a, b]);
                }
                if let Some(&(add, _)) = fp.residual_add(id) {
                    let an = &g.nodes[add as usize];
                    vs.extend(an.inputs.iter().copied());
                    vs.push(val(add, 0));
                }
                if let Some(&(u, _)) = fp.activation(id) {
                    vs.push(val(u, 0));
                }
                if let Some(&(pm, _)) = fp.heads(id) {
                    vs.push(val(pm, 0));
                }
                if let Some(rot) = fp.store_rotary(id) {
                    vs.extend(rot.iter().flatten().map(|r| r.0));
                }
                if let Some(load) = fp.load_rotary(id) {
                    vs.extend(load.iter().flatten().map(|r| r.0));
                }
                vs.into_iter().filter_map(rng).collect()
            })
            .collect()
    };
    loop {
        let gone: std::collections::HashSet<u32> =
            cands.iter().flat_map(|m| m.skipped.iter().copied()).chain(fused_rotaries.iter().copied()).collect();
        let t = touched(fp, &gone);
        let bad: Vec<usize> = (0..cands.len())
            .filter(|&c| {
                cands[c].moved.iter().any(|&(r, lo, hi)| (lo + 1..hi).any(|q| t[q].iter().any(|&x| overlap(x, r))))
            })
            .collect();
        if bad.is_empty() {
            break;
        }
        for &c in bad.iter().rev() {
            let m = cands.remove(c);
            fp.product_mut(m.host).activation.take();
            fp.product_mut(m.host).heads.take();
            fp.attention_mut(m.host).store_rotary.take();
        }
    }
    cands.into_iter().flat_map(|m| m.skipped).chain(fused_rotaries).collect()
}

/// The MatMul whose product Permute `p` (with `perm`) splits into attention heads, and the
/// split: the product `[B·T, S·H·D]` reshaped (each link read once) to `[B, T, S, H, D]` and
/// permuted to `[S, B, H, T, D]`, or to `[B, T, H, D]` and permuted to `[B, H, T, D]`; an
/// unbatched f32 tiled product that split-K leaves whole, D a multiple of 8.
pub(crate) fn head_split(
    cfg: &CudaConfig,
    g: &alpha_ir::Graph,
    uses: &HashMap<Value, usize>,
    p: &Node,
    perm: &[usize],
) -> Option<(u32, gemm::Heads)> {
    let mut x = p.inputs[0];
    let shape = g.shape(x).to_vec();
    let (b, t, h, d) = match (perm, shape.as_slice()) {
        ([2, 0, 3, 1, 4], &[b, t, _, h, d]) | ([0, 2, 1, 3], &[b, t, h, d]) => (b, t, h, d),
        _ => return None,
    };
    while matches!(g.nodes[x.node as usize].op, Op::Reshape { .. }) && uses.get(&x) == Some(&1) {
        x = g.nodes[x.node as usize].inputs[0];
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
    let heads =
        gemm::Heads { batch: b as u32, t: t as u32, heads: h as u32, d: d as u32, bf16_turned: false, delta: false };
    ok.then_some((mm, heads))
}
