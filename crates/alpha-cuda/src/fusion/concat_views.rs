//! A Concat's part that is a permute or a slice (through a reshape) of another tensor: the
//! Concat's copy of that part reads the tensor itself, through the view's strides and offset,
//! and the permute or slice does not run.
//!
//! Why: a Concat along an axis with anything but size-1 axes before it is no view and the plan
//! cannot place its parts, so each part is copied; where the part is itself only a copy (a
//! permute, or a slice that is no contiguous run), that copy's store and the Concat's load of
//! it cross memory for nothing. Diakosmos concatenates its q/k/v gradients from two permutes
//! (`[7, N, 190]` back to `[N, 7, 190]`) and its spatial path's lone group from a slice. The
//! values copied are the same, so the Concat's output is bit for bit what it was.

use super::*;

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
        Op::Slice { axis: sa, .. } => g.shape(source)[..sa].iter().product::<usize>() > 1,
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
    let xs = contiguous(g.shape(vp.source));
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

fn contiguous(shape: &[usize]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1] as u64;
    }
    s
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
    let Op::Slice { axis, .. } = sn.op else { return None };
    let source = sn.inputs[0];
    let kernel = g.shape(source)[..axis].iter().product::<usize>() > 1;
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
    let xs = contiguous(g.shape(vp.source));
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
    let g = ph.g;
    let mut views = vec![];
    for &c in ph.nodes {
        let n = &g.nodes[c as usize];
        if !matches!(n.op, Op::Concat { .. }) || skip.contains(&c) {
            continue;
        }
        for k in 0..n.inputs.len() {
            let Some(vp) = view_part(g, uses, c, k) else { continue };
            if read_late(ph, fp, skip, vp, c, &[Value { node: c, index: 0 }]) {
                fp.concat_views.entry(c).or_default().push((k, vp));
                views.push(vp.view);
            }
        }
    }
    views
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
            if pi >= pc || skip.contains(&inner) || fp.concat_views.contains_key(&inner) {
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
