//! A Concat's part that is a permute or a slice (through a reshape) of another tensor: the
//! Concat's copy of that part reads the tensor itself, through the view's strides and offset,
//! and the permute or slice does not run.
//!
//! Why: a Concat along an axis with anything but size-1 axes before it is no view and the plan
//! cannot place its parts, so each part is copied; where the part is itself only a copy (a
//! permute, or a slice that is no contiguous run), that copy's store and the Concat's load of
//! it cross memory for nothing. Diakosmos concatenates its q/k/v gradients from two permutes
//! (`[7, N, 190]` back to `[N, 7, 190]`) and its spatial path's lone group from a slice. The
//! values copied are the same, so the Concat's output is bit for bit what it was. The same
//! holds for a Permute of a slice (`sliced_permutes`) and for elementwise nodes, alone or in a
//! fused chain, reading slices and their reshapes (`chain_slices`).

use super::*;
use crate::kernels::pointwise::contiguous_strides;

/// A Concat part read through a view: the view node (a Permute, or a Slice that is a kernel)
/// and the tensor it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ViewPart {
    pub(crate) view: u32,
    pub(crate) source: Value,
}

/// The view part `k` of Concat `c` may be read through, where the program allows it (each
/// value in between read by the Concat alone, the view a kernel, and its shape splitting at the
/// Concat's outer size so that the copy can be written over the view's own shape; see
/// [`view_part_strides`]). `uses` counts every read of a value (see [`readers_of`]).
pub(crate) fn view_part(g: &alpha_ir::Graph, uses: &HashMap<Value, usize>, c: u32, k: usize) -> Option<ViewPart> {
    let (x, outer) = sole_part(g, uses, c, k)?;
    let n = &g.nodes[c as usize];
    let vn = &g.nodes[x.node as usize];
    let source = *vn.inputs.first()?;
    let kernel = match vn.op {
        Op::Permute { .. } => true,
        // A slice of one contiguous run is a view in the plan, not a kernel.
        Op::Slice { .. } => !alpha_plan::one_run(g, x.node as usize),
        _ => false,
    };
    let same_type = g.dtype(source) == n.outputs[0].dtype && g.dtype(x) == n.outputs[0].dtype;
    let ok = kernel && same_type && x.index == 0 && split_at(g.shape(x), outer).is_some();
    ok.then_some(ViewPart { view: x.node, source })
}

/// Part `k` of Concat `c` as the value under at most one reshape, each read by `c` alone, and
/// `c`'s outer size (the product of the axes before its own), where that is more than one:
/// along an axis with only size-1 axes before it the plan may place the parts instead.
fn sole_part(g: &alpha_ir::Graph, uses: &HashMap<Value, usize>, c: u32, k: usize) -> Option<(Value, usize)> {
    let n = &g.nodes[c as usize];
    let Op::Concat { axis } = n.op else { return None };
    let outer: usize = n.outputs[0].shape[..axis].iter().product();
    (outer > 1).then_some(())?;
    Some((under_reshape(g, uses, n.inputs[k])?, outer))
}

/// `x`, or the value under it where it is a reshape, each read once (by the reader of `x`).
fn under_reshape(g: &alpha_ir::Graph, uses: &HashMap<Value, usize>, x: Value) -> Option<Value> {
    let sole = |v: Value| uses.get(&v).copied() == Some(1);
    let n = &g.nodes[x.node as usize];
    let y = if let Op::Reshape { .. } = n.op { n.inputs[0] } else { x };
    (sole(x) && sole(y)).then_some(y)
}

/// Every (Concat, part, what `f` finds for the part) of the program.
fn each_part<T>(
    program: &alpha_ir::Program,
    f: impl Fn(&alpha_ir::Graph, &HashMap<Value, usize>, u32, usize) -> Option<T>,
) -> Vec<(u32, usize, T)> {
    let g = &program.graph;
    let (uses, _) = readers_of(program);
    let mut v = vec![];
    for (i, n) in g.nodes.iter().enumerate() {
        if let Op::Concat { .. } = n.op {
            v.extend((0..n.inputs.len()).filter_map(|k| f(g, &uses, i as u32, k).map(|t| (i as u32, k, t))));
        }
    }
    v
}

/// The number of leading axes of `shape` whose product is `outer`.
fn split_at(shape: &[usize], outer: usize) -> Option<usize> {
    let mut p = 1usize;
    for (i, &s) in shape.iter().enumerate() {
        if p == outer {
            return Some(i);
        }
        p *= s;
    }
    (p == outer).then_some(shape.len())
}

/// The copy of a view part into its Concat: (its shape, the view's shape; the output strides,
/// in elements from the part's place; the source's strides; the source's offset in elements).
/// The view's leading axes that make up the Concat's outer size step by the Concat's row of
/// `total · inner` elements, the rest contiguous within the part's block of `len · inner`.
pub(crate) fn view_part_strides(g: &alpha_ir::Graph, c: u32, vp: ViewPart) -> ViewCopy {
    let n = &g.nodes[c as usize];
    let Op::Concat { axis } = n.op else { unreachable!("view parts are a Concat's") };
    let os = &n.outputs[0].shape;
    let outer: usize = os[..axis].iter().product();
    let row: usize = os[axis..].iter().product();
    let shape = g.nodes[vp.view as usize].outputs[0].shape.clone();
    let k = split_at(&shape, outer).expect("view_part checked the split");
    let mut out = vec![0u64; shape.len()];
    let mut step = 1u64;
    for j in (k..shape.len()).rev() {
        out[j] = step;
        step *= shape[j] as u64;
    }
    let mut step = row as u64;
    for j in (0..k).rev() {
        out[j] = step;
        step *= shape[j] as u64;
    }
    let xs = contiguous_strides(g.shape(vp.source));
    let (ins, offset) = match &g.nodes[vp.view as usize].op {
        Op::Permute { perm } => (perm.iter().map(|&p| xs[p]).collect(), 0),
        Op::Slice { axis: sa, start, .. } => (xs.clone(), *start as u64 * xs[*sa]),
        _ => unreachable!("view parts are permutes and slices"),
    };
    ViewCopy { shape, out, ins, offset }
}

/// See [`view_part_strides`].
pub(crate) struct ViewCopy {
    pub(crate) shape: Vec<usize>,
    pub(crate) out: Vec<u64>,
    pub(crate) ins: Vec<u64>,
    pub(crate) offset: u64,
}

/// The casts their producers store early (`fp.store_as`) whose store may land in the window
/// from launch position `from` to `to`: the producer launched before `to`, the cast (where it
/// would have run) after `from`.
fn early_casts(ph: &PhaseView, fp: &FusionPlan, from: usize, to: usize) -> Vec<Value> {
    let at = |v: &Value| ph.pos.get(&v.node).copied();
    fp.store_as
        .iter()
        .filter(|(p, cast)| at(p).is_some_and(|p| p < to) && at(cast).is_none_or(|c| c > from))
        .map(|(_, &cast)| cast)
        .collect()
}

/// The slots of what the launches strictly between positions `from` and `to` write (their
/// outputs and what the fusions they host store), of the casts stored early into that window,
/// and of `also`: what a tensor read at `to` instead of at `from` must lie clear of.
fn written_over(
    ph: &PhaseView,
    fp: &FusionPlan,
    from: usize,
    to: usize,
    also: &[Value],
) -> Vec<Option<(usize, usize)>> {
    let g = ph.g;
    let outputs = ph.nodes[from + 1..to].iter().flat_map(|&id| {
        let outs = (0..g.nodes[id as usize].outputs.len() as u16).map(move |j| Value { node: id, index: j });
        outs.chain(fp.hosted_writes(id)).collect::<Vec<_>>()
    });
    outputs.chain(early_casts(ph, fp, from, to)).chain(also.iter().copied()).map(|v| ph.range(v)).collect()
}

/// Whether `reader` may read the source of the view `vp` itself, at its own launch instead of
/// the view's: the view launched before it and fused into nothing else, and the source's slot
/// clear of what is written in between and of `also` (what the reader writes).
fn read_late(
    ph: &PhaseView,
    fp: &FusionPlan,
    skip: &std::collections::HashSet<u32>,
    vp: ViewPart,
    reader: u32,
    also: &[Value],
) -> bool {
    let (Some(&pv), Some(&pr)) = (ph.pos.get(&vp.view), ph.pos.get(&reader)) else { return false };
    let vo = Value { node: vp.view, index: 0 };
    let free = pv < pr && !skip.contains(&vp.view) && !fp.store_as.contains_key(&vo);
    free && ph.range(vp.source).is_some_and(|src| clear_of(src, written_over(ph, fp, pv, pr, also)))
}

/// The strides of a tensor of `from` shape with `strides` read as `to` shape (a reshape of
/// it), where each group of axes that the reshape merges or splits is one contiguous run in
/// it; size-1 axes take any stride.
pub(crate) fn reshaped_strides(from: &[usize], strides: &[u64], to: &[usize]) -> Option<Vec<u64>> {
    let mut out = vec![0u64; to.len()];
    let (mut i, mut j) = (0, 0);
    loop {
        while i < from.len() && from[i] == 1 {
            i += 1;
        }
        while j < to.len() && to[j] == 1 {
            j += 1;
        }
        if i == from.len() || j == to.len() {
            return (i == from.len() && j == to.len()).then_some(out);
        }
        let (i0, j0) = (i, j);
        let (mut pf, mut pt) = (from[i], to[j]);
        (i, j) = (i + 1, j + 1);
        while pf != pt {
            if pf < pt {
                pf *= *from.get(i)?;
                i += 1;
            } else {
                pt *= *to.get(j)?;
                j += 1;
            }
        }
        let axes: Vec<usize> = (i0..i).filter(|&a| from[a] != 1).collect();
        if axes.windows(2).any(|w| strides[w[0]] != strides[w[1]] * from[w[1]] as u64) {
            return None;
        }
        let mut step = strides[*axes.last()?];
        for b in (j0..j).rev() {
            out[b] = step;
            step *= to[b] as u64;
        }
    }
}

/// The Slice kernel a Permute reads (through at most one reshape, each read by the Permute
/// alone), as a view part: the Permute may read the slice's source with the strides of the
/// slice, the reshape and its own order composed ([`sliced_permute_strides`]).
pub(crate) fn sliced_permute_input(g: &alpha_ir::Graph, uses: &HashMap<Value, usize>, p: u32) -> Option<ViewPart> {
    let n = &g.nodes[p as usize];
    let Op::Permute { .. } = n.op else { return None };
    let x = under_reshape(g, uses, n.inputs[0])?;
    let sn = &g.nodes[x.node as usize];
    let Op::Slice { .. } = sn.op else { return None };
    let source = sn.inputs[0];
    let kernel = !alpha_plan::one_run(g, x.node as usize);
    let vp = ViewPart { view: x.node, source };
    let ok = kernel && x.index == 0 && g.dtype(source) == g.dtype(x) && sliced_permute_strides(g, p, vp).is_some();
    ok.then_some(vp)
}

/// The strides over Permute `p`'s output with which it reads the source of the slice `vp`,
/// and the source's offset in elements.
pub(crate) fn sliced_permute_strides(g: &alpha_ir::Graph, p: u32, vp: ViewPart) -> Option<(Vec<u64>, u64)> {
    let n = &g.nodes[p as usize];
    let Op::Permute { perm } = &n.op else { return None };
    let Op::Slice { axis, start, .. } = g.nodes[vp.view as usize].op else { return None };
    let xs = contiguous_strides(g.shape(vp.source));
    let sliced = &g.nodes[vp.view as usize].outputs[0].shape;
    let st = reshaped_strides(sliced, &xs, g.shape(n.inputs[0]))?;
    Some((perm.iter().map(|&q| st[q]).collect(), start as u64 * xs[axis]))
}

/// Every (Permute, slice it reads through) of the program [`sliced_permute_input`] allows.
pub(crate) fn sliced_permute_candidates(program: &alpha_ir::Program) -> Vec<(u32, ViewPart)> {
    let g = &program.graph;
    let (uses, _) = readers_of(program);
    (0..g.nodes.len() as u32).filter_map(|p| sliced_permute_input(g, &uses, p).map(|vp| (p, vp))).collect()
}

/// The phase's Permutes reading the source of the slice before them instead of the slice
/// (Diakosmos's q and k, sliced from the q/k/v projection's columns and turned to `[7, N,
/// 190]`: one copy instead of two): the slice launched before, neither fused otherwise, the
/// source's slot clear of what is written between them and of the Permute's output. Records
/// them in `fp.sliced_permutes`; returns the slices to skip.
pub(crate) fn sliced_permutes(
    ph: &PhaseView,
    uses: &HashMap<Value, usize>,
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) -> Vec<u32> {
    let g = ph.g;
    let mut slices = vec![];
    for &p in ph.nodes {
        if skip.contains(&p) {
            continue;
        }
        let Some(vp) = sliced_permute_input(g, uses, p) else { continue };
        let out = Value { node: p, index: 0 };
        let mut also = vec![out];
        also.extend(fp.store_as.get(&out).copied());
        if read_late(ph, fp, skip, vp, p, &also) {
            fp.sliced_permutes.insert(p, vp);
            slices.push(vp.view);
        }
    }
    slices
}

/// Each (Concat, part) of the phase's Concats that `skip` leaves.
fn concat_parts<'a>(
    ph: &'a PhaseView,
    skip: &'a std::collections::HashSet<u32>,
) -> impl Iterator<Item = (u32, usize)> + 'a {
    ph.nodes.iter().copied().filter(|c| !skip.contains(c)).flat_map(move |c| {
        let n = &ph.g.nodes[c as usize];
        let parts = if matches!(n.op, Op::Concat { .. }) { n.inputs.len() } else { 0 };
        (0..parts).map(move |k| (c, k))
    })
}

/// Every (Concat, part, view part) of the program [`view_part`] allows.
pub(crate) fn concat_view_candidates(program: &alpha_ir::Program) -> Vec<(u32, usize, ViewPart)> {
    each_part(program, view_part)
}

/// The phase's Concat parts read through their views: the view launched before the Concat,
/// neither fused into anything else, and the source's slot clear of the Concat's output and of
/// everything launched between them writes (their outputs, what fusions they host store, and
/// the casts their producers store early). Records them in `fp.concat_views`; returns the views
/// to skip.
pub(crate) fn concat_views(
    ph: &PhaseView,
    uses: &HashMap<Value, usize>,
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) -> Vec<u32> {
    let mut views = vec![];
    for (c, k) in concat_parts(ph, skip) {
        let Some(vp) = view_part(ph.g, uses, c, k) else { continue };
        let stored = fp.products_into_concats.values().any(|p| p.concat == c && p.part == k);
        if !stored && read_late(ph, fp, skip, vp, c, &[Value { node: c, index: 0 }]) {
            fp.concat_views.entry(c).or_default().push((k, vp));
            views.push(vp.view);
        }
    }
    views
}

/// A batched product stored straight into its place in a Concat through the permute `[1, 0, 2]`
/// (and a reshape) between them (`products_into_concats`): the product, element (z, i, j) of
/// its `[batch, M, N]` output at `z·batch + i·row + j` from `offset` in the Concat's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProductPart {
    pub(crate) product: u32,
    pub(crate) concat: u32,
    pub(crate) part: usize,
    /// The permute that does not run.
    pub(crate) permute: u32,
    /// (row, batch) steps in elements.
    pub(crate) view: (u32, u32),
    pub(crate) offset: u64,
}

/// Part `k` of Concat `c` as a [`ProductPart`], where the part is a view part ([`view_part`])
/// whose view is the permute `[1, 0, 2]` of the output of a MatMul that `simple` says runs on
/// the simple kernel in one part, read by that permute alone, its output's rows `c`'s rows.
pub(crate) fn product_part(
    g: &alpha_ir::Graph,
    uses: &HashMap<Value, usize>,
    c: u32,
    k: usize,
    simple: &dyn Fn(u32) -> bool,
) -> Option<ProductPart> {
    let vp = view_part(g, uses, c, k)?;
    let Op::Permute { perm } = &g.nodes[vp.view as usize].op else { return None };
    let mm = vp.source.node;
    let product = matches!(g.nodes[mm as usize].op, Op::MatMul { .. }) && simple(mm);
    if perm != &[1, 0, 2] || vp.source.index != 0 || uses.get(&vp.source) != Some(&1) || !product {
        return None;
    }
    let copy = view_part_strides(g, c, vp);
    let [row, batch, 1] = copy.out[..] else { return None };
    let n = &g.nodes[c as usize];
    let Op::Concat { axis } = n.op else { return None };
    let inner: u64 = n.outputs[0].shape[axis + 1..].iter().product::<usize>() as u64;
    let before: u64 = n.inputs[..k].iter().map(|&x| g.shape(x)[axis] as u64).sum();
    let fit = |x: u64| u32::try_from(x).ok();
    let view = (fit(row)?, fit(batch)?);
    Some(ProductPart { product: mm, concat: c, part: k, permute: vp.view, view, offset: before * inner })
}

/// Every [`ProductPart`] of the program.
pub(crate) fn product_part_candidates(program: &alpha_ir::Program, simple: &dyn Fn(u32) -> bool) -> Vec<ProductPart> {
    each_part(program, |g, uses, c, k| product_part(g, uses, c, k, simple)).into_iter().map(|(_, _, p)| p).collect()
}

/// Batched products whose output only a Concat reads through a permute store straight into
/// their place in the Concat, which does not copy that part, and the permute does not run:
/// Diakosmos's per-head products (`[7, N, 190]`) make its q/k/v gradients' parts of
/// `[N, 3,990]` this way, where each part was copied (0.7 GB read and written) at the Concat.
/// The Concat's slot is written from the product's launch on, so it must lie clear of
/// everything read or written from there to the Concat (but the product's own output and the
/// permute's, which are never written) and of what the Concat reads. Runs before
/// [`concat_views`], which leaves these parts alone. Records them in
/// `fp.products_into_concats`; returns the permutes to skip.
pub(crate) fn products_into_concats(
    ph: &PhaseView,
    uses: &HashMap<Value, usize>,
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
    simple: &dyn Fn(u32) -> bool,
) -> Vec<u32> {
    let g = ph.g;
    let mut permutes = vec![];
    for (c, k) in concat_parts(ph, skip) {
        let Some(pp) = product_part(g, uses, c, k, simple) else { continue };
        let (Some(&pm), Some(&pc)) = (ph.pos.get(&pp.product), ph.pos.get(&c)) else { continue };
        let launched = ph.pos.contains_key(&pp.permute) && !skip.contains(&pp.permute);
        if pm >= pc || !launched || skip.contains(&pp.product) {
            continue;
        }
        let Some(slot) = ph.range(Value { node: c, index: 0 }) else { continue };
        let unwritten = [Value { node: pp.product, index: 0 }, Value { node: pp.permute, index: 0 }];
        let span = &ph.nodes[pm..pc];
        let hosted = span.iter().flat_map(|&id| fp.hosted_writes(id)).chain(early_casts(ph, fp, pm, pc));
        let ins = g.nodes[c as usize].inputs.iter().copied();
        let met: Vec<_> = touched_by(g, span)
            .chain(hosted)
            .chain(ins)
            .filter(|v| !unwritten.contains(v))
            .map(|v| ph.range(v))
            .collect();
        if clear_of(slot, met) {
            fp.products_into_concats.insert(pp.product, pp);
            permutes.push(pp.permute);
        }
    }
    permutes
}

/// The Concat that part `k` of Concat `c` is (through a reshape), where its copies may write
/// straight into `c`'s output: it read by `c` alone, of `c`'s type, and its output splitting
/// at `c`'s outer size no later than its own axis (so each of its rows lies whole in one row of
/// `c`'s part; see [`nested_strides`]).
pub(crate) fn nested_part(g: &alpha_ir::Graph, uses: &HashMap<Value, usize>, c: u32, k: usize) -> Option<u32> {
    let (x, outer) = sole_part(g, uses, c, k)?;
    let n = &g.nodes[c as usize];
    let inner = &g.nodes[x.node as usize];
    let Op::Concat { axis: a } = inner.op else { return None };
    let split = split_at(&inner.outputs[0].shape, outer);
    let ok = inner.outputs[0].dtype == n.outputs[0].dtype && split.is_some_and(|s| s <= a);
    ok.then_some(x.node)
}

/// The strides of a nested Concat's output (`shape`, its own contiguous `strides`) inside the
/// Concat `outer` it is a part of: its leading axes that make up `outer`'s rows step by the
/// row of `outer`, the rest as they were.
pub(crate) fn nested_strides(g: &alpha_ir::Graph, outer: u32, shape: &[usize], strides: &[u64]) -> Vec<u64> {
    let n = &g.nodes[outer as usize];
    let Op::Concat { axis } = n.op else { unreachable!("nested into a Concat") };
    let os = &n.outputs[0].shape;
    let rows: usize = os[..axis].iter().product();
    let row: u64 = os[axis..].iter().product::<usize>() as u64;
    let k = split_at(shape, rows).expect("nested_part checked the split");
    let mut out = strides.to_vec();
    let mut step = row;
    for j in (0..k).rev() {
        out[j] = step;
        step *= shape[j] as u64;
    }
    out
}

/// Every (inner, outer) pair of Concats of the program that [`nested_part`] allows.
pub(crate) fn nested_concat_candidates(program: &alpha_ir::Program) -> Vec<(u32, u32)> {
    each_part(program, nested_part).into_iter().map(|(outer, _, inner)| (inner, outer)).collect()
}

/// Concats whose only reader is another Concat (through a reshape) copy their parts straight
/// into their place in that Concat, which then does not copy that part: Diakosmos's spatial
/// path turns its paired groups, concatenates the two halves and then the lone group, so each
/// turned element was copied twice. The inner Concat launched before the outer, neither fused
/// otherwise (no part of the inner read through a view, the outer not itself nested), and the
/// outer's slot clear of everything read or written from the inner's launch to the outer's and
/// of what the outer reads (through views too): it is written that much earlier. Records them in
/// `fp.nested_concats`.
pub(crate) fn nested_concats(
    ph: &PhaseView,
    uses: &HashMap<Value, usize>,
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) {
    let g = ph.g;
    let mut found: HashMap<u32, (u32, usize)> = HashMap::new();
    for &c in ph.nodes {
        let n = &g.nodes[c as usize];
        if !matches!(n.op, Op::Concat { .. }) || skip.contains(&c) {
            continue;
        }
        for k in 0..n.inputs.len() {
            let Some(inner) = nested_part(g, uses, c, k) else { continue };
            let (Some(&pi), Some(&pc)) = (ph.pos.get(&inner), ph.pos.get(&c)) else { continue };
            let products_in = fp.products_into_concats.values().any(|p| p.concat == inner);
            if pi >= pc || skip.contains(&inner) || fp.concat_views.contains_key(&inner) || products_in {
                continue;
            }
            let Some(slot) = ph.range(Value { node: c, index: 0 }) else { continue };
            let span = &ph.nodes[pi..pc];
            let early = early_casts(ph, fp, pi, pc);
            let hosted = span.iter().flat_map(|&id| fp.hosted_writes(id)).chain(early);
            // What Concats read through views launched before the outer and read after the
            // inner (the outer's among them) must not be overwritten by the early stores.
            let views = fp
                .concat_views
                .iter()
                .filter(|(c2, _)| ph.pos.get(c2).is_some_and(|&p| p > pi))
                .flat_map(|(_, parts)| parts.iter().filter(|p| ph.pos.get(&p.1.view).is_some_and(|&v| v < pc)))
                .map(|p| p.1.source)
                .collect::<Vec<_>>();
            let ins = n.inputs.iter().copied();
            let met: Vec<_> = touched_by(g, span).chain(hosted).chain(views).chain(ins).map(|v| ph.range(v)).collect();
            if clear_of(slot, met) {
                found.insert(inner, (c, k));
            }
        }
    }
    // An outer Concat that is itself nested writes elsewhere: its inner ones stay as they are.
    let outers: Vec<u32> = found.keys().copied().collect();
    found.retain(|_, (c, _)| !outers.contains(c));
    fp.nested_concats.extend(found);
}

/// A tree of slices and reshapes over one tensor whose leaves are elementwise nodes: each
/// leaf may read the tensor in place through the composed view, and the slices do not run
/// ([`chain_slices`]).
pub(crate) struct SlicedTree {
    /// The tensor under the views.
    pub(crate) root: Value,
    /// The views' nodes (slices and reshapes), root side first.
    pub(crate) views: Vec<u32>,
    /// Each (reader, the view value it reads, how it reads the root).
    pub(crate) reads: Vec<(u32, Value, SlicedRead)>,
}

/// A view value read in place: the root tensor, the offset of the view's first element in it
/// and the strides over the view's own shape, in elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlicedRead {
    pub(crate) source: Value,
    pub(crate) offset: u64,
    pub(crate) strides: Vec<u64>,
}

impl SlicedRead {
    /// The read as a chain input: (inner, mid, mid step, outer step) with element `i` at
    /// `(i / (inner * mid)) * outer + ((i / inner) % mid) * mid_step + i % inner`, where the
    /// view is at most three runs of contiguous elements deep.
    pub(crate) fn chain_steps(&self, shape: &[usize]) -> Option<(u32, u32, u32, u32)> {
        let mut dims: Vec<(u64, u64)> = vec![];
        for (&n, &st) in shape.iter().zip(&self.strides) {
            if n == 1 {
                continue;
            }
            match dims.last_mut() {
                Some(last) if last.1 == st * n as u64 => *last = (last.0 * n as u64, st),
                _ => dims.push((n as u64, st)),
            }
        }
        let fit = |x: u64| u32::try_from(x).ok();
        match dims.as_slice() {
            [] => Some((1, 1, 0, 0)),
            [(n, 1)] => Some((fit(*n)?, 1, 0, 0)),
            [(_, so), (n, 1)] => Some((fit(*n)?, 1, 0, fit(*so)?)),
            [(_, so), (m, sm), (n, 1)] => Some((fit(*n)?, fit(*m)?, fit(*sm)?, fit(*so)?)),
            _ => None,
        }
    }
}

/// Whether `r` reads `x` as an f32 elementwise node at its own element (a unary, or a binary
/// whose output has `x`'s shape), and not as an Add beside a norm's backward, which the norm's
/// launch may take with its operands as they are.
fn reads_in_place(g: &alpha_ir::Graph, r: u32, x: Value) -> bool {
    let rn = &g.nodes[r as usize];
    let f32 = rn.outputs[0].dtype == DType::F32 && g.dtype(x) == DType::F32;
    let own = match rn.op {
        Op::Unary(_) => true,
        Op::Binary(b) => {
            let beside_norm = rn
                .inputs
                .iter()
                .any(|y| matches!(g.nodes[y.node as usize].op, Op::LayerNormBackward | Op::RmsNormBackward));
            rn.outputs[0].shape == g.shape(x) && !(b == alpha_ir::Binary::Add && beside_norm)
        }
        _ => false,
    };
    f32 && own
}

/// Whether every read of the slice or reshape `v` is by an in-place elementwise reader or by
/// another slice or reshape of which the same holds.
fn absorbable(g: &alpha_ir::Graph, uses: &HashMap<Value, usize>, readers: &HashMap<Value, Vec<u32>>, v: Value) -> bool {
    let rs = readers.get(&v).map(Vec::as_slice).unwrap_or(&[]);
    let view = |id: u32| matches!(g.nodes[id as usize].op, Op::Slice { .. } | Op::Reshape { .. });
    v.index == 0
        && view(v.node)
        && g.dtype(v) == DType::F32
        && uses.get(&v).copied() == Some(rs.len())
        && rs.iter().all(|&r| {
            let out = Value { node: r, index: 0 };
            if view(r) {
                absorbable(g, uses, readers, out)
            } else {
                reads_in_place(g, r, v)
            }
        })
}

/// The tree under Slice `s`, where `s` is a kernel (no contiguous run) of an f32 tensor no
/// view itself absorbed, and every read below it is in place ([`absorbable`]) through views that
/// compose ([`reshaped_strides`]).
pub(crate) fn sliced_tree(
    g: &alpha_ir::Graph,
    uses: &HashMap<Value, usize>,
    readers: &HashMap<Value, Vec<u32>>,
    s: u32,
) -> Option<SlicedTree> {
    let sn = &g.nodes[s as usize];
    let Op::Slice { .. } = sn.op else { return None };
    let root = sn.inputs[0];
    let top = Value { node: s, index: 0 };
    let kernel = !alpha_plan::one_run(g, s as usize);
    // Not the top slice where the views above it are absorbed too (that slice's tree holds it).
    let mut up = root;
    let mut under_view = false;
    while absorbable(g, uses, readers, up) {
        let n = &g.nodes[up.node as usize];
        if let Op::Slice { .. } = n.op {
            under_view = true;
            break;
        }
        up = n.inputs[0];
    }
    let small = g.ty(root).numel() <= u32::MAX as usize;
    if !(kernel && !under_view && small && g.dtype(root) == DType::F32 && absorbable(g, uses, readers, top)) {
        return None;
    }
    let mut tree = SlicedTree { root, views: vec![], reads: vec![] };
    let base = SlicedRead { source: root, offset: 0, strides: contiguous_strides(g.shape(root)) };
    let mut todo = vec![(s, base)];
    while let Some((id, at)) = todo.pop() {
        let n = &g.nodes[id as usize];
        let from = g.shape(n.inputs[0]);
        let out = Value { node: id, index: 0 };
        let read = match n.op {
            Op::Slice { axis, start, .. } => SlicedRead { offset: at.offset + start as u64 * at.strides[axis], ..at },
            Op::Reshape { .. } => SlicedRead { strides: reshaped_strides(from, &at.strides, g.shape(out))?, ..at },
            _ => return None,
        };
        tree.views.push(id);
        for &r in readers.get(&out).map(Vec::as_slice).unwrap_or(&[]) {
            match g.nodes[r as usize].op {
                Op::Slice { .. } | Op::Reshape { .. } => todo.push((r, read.clone())),
                _ => {
                    read.chain_steps(g.shape(out))?;
                    if !tree.reads.iter().any(|(r2, x, _)| *r2 == r && *x == out) {
                        tree.reads.push((r, out, read.clone()));
                    }
                }
            }
        }
    }
    Some(tree)
}

/// Every slice tree of the program ([`sliced_tree`]).
pub(crate) fn sliced_tree_candidates(program: &alpha_ir::Program) -> Vec<SlicedTree> {
    let g = &program.graph;
    let (uses, readers) = readers_of(program);
    (0..g.nodes.len() as u32).filter_map(|s| sliced_tree(g, &uses, &readers, s)).collect()
}

/// The phase's slices whose elementwise readers read the tensor under them in place instead
/// (Diakosmos's spatial path slices 6 of its 7 groups, splits them in pairs and slices each
/// half straight into a rotation's arithmetic: three whole copies): every slice of the tree
/// launched in this phase and fused into nothing else, its reshapes views of the plan (no
/// launch), and for each reader the tensor's slot clear of what is written from the first
/// slice's launch to it, of its own output, and of any Concat's early store into that window
/// (`nested_concats`). Records the reads in `fp.chain_slices`; returns the slices to skip. A
/// chain that takes a reader checks its own stores against the tensor
/// (`Lowerer::elementwise_chain`).
pub(crate) fn chain_slices(
    ph: &PhaseView,
    uses: &HashMap<Value, usize>,
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) -> Vec<u32> {
    let g = ph.g;
    let mut slices = vec![];
    for &s in ph.nodes {
        let Some(tree) = sliced_tree(g, uses, ph.readers, s) else { continue };
        let tree_slices: Vec<u32> =
            tree.views.iter().copied().filter(|&v| matches!(g.nodes[v as usize].op, Op::Slice { .. })).collect();
        let launched = tree.views.iter().all(|&v| {
            let free = !skip.contains(&v) && !fp.store_as.contains_key(&Value { node: v, index: 0 });
            match g.nodes[v as usize].op {
                Op::Reshape { .. } => !ph.pos.contains_key(&v),
                Op::Slice { .. } => free && (ph.pos.contains_key(&v) || alpha_plan::one_run(g, v as usize)),
                _ => false,
            }
        });
        let Some(&first) = tree_slices.iter().filter(|v| ph.pos.contains_key(v)).min_by_key(|v| ph.pos[v]) else {
            continue;
        };
        let src = ph.range(tree.root).unwrap_or((0, usize::MAX));
        let each = tree.reads.iter().all(|&(r, _, _)| {
            let Some(&pr) = ph.pos.get(&r) else { return false };
            let out = Value { node: r, index: 0 };
            let mut also = vec![out];
            also.extend(fp.store_as.get(&out).copied());
            let pv = ph.pos[&first];
            let nested_early = fp.nested_concats.iter().any(|(inner, &(outer, _))| {
                let (Some(&pi), Some(&pc)) = (ph.pos.get(inner), ph.pos.get(&outer)) else { return true };
                pi < pr && pc > pv && !clear_of(src, [ph.range(Value { node: outer, index: 0 })])
            });
            let vp = ViewPart { view: first, source: tree.root };
            !skip.contains(&r) && !nested_early && read_late(ph, fp, skip, vp, r, &also)
        });
        if launched && each {
            for (r, x, read) in tree.reads {
                fp.chain_slices.entry(x).or_insert_with(|| (vec![], read)).0.push(r);
            }
            slices.extend(tree_slices.into_iter().filter(|v| ph.pos.contains_key(v)));
        }
    }
    slices
}
