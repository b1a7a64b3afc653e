//! The attention backward storing its permuted, concatenated gradients: as the bf16 cast the
//! projection's products read, or as the f32 permute.

use super::*;

/// The `[B, T, 3, H, D]` order of the gradients' permute.
const MERGED: [usize; 5] = [1, 3, 0, 2, 4];

/// The bf16 attention backwards (one launch, q heads equal to k heads) whose three gradients —
/// dq and dk as their fused inverse rotaries leave them, and dv — reach the q/k/v projection's
/// backward only as one Concat, permuted to `[B, T, 3, H, D]`: the backward then stores the
/// permuted tensor itself and the permute does not run. Where the permute was launched storing
/// its bf16 cast (its only reader), the backward stores that cast
/// ([`crate::kernels::attention::mma::backward_kernel_bf16_merged`]); where the permute's f32
/// output is read by more (GPT-2's q/k/v bias gradient sums it, and a cast feeds the products),
/// the backward stores that f32 tensor ([`Gradients::MergedF32`]), and [`column_casts`] may have
/// the bias's column sum store the cast.
/// Records them in `fp.merged_gradients`; returns the permutes to skip.
///
/// Why f32 rather than both f32 and bf16 from the backward: at GPT-2's sixteen contexts the
/// permute read and wrote 151 MB a layer; storing f32 permuted leaves the backward writing
/// 151 MB, the column sum reading it and writing the 75 MB cast, as storing both would (151 +
/// 75 MB written, 151 MB read by a plain sum), with one store in the backward's epilogue.
///
/// Conditions: the chain through single-reader reshapes exactly so; the backward run as one
/// launch ([`joint_backward_apart`], which the lowering needs for either store); nothing
/// launched between the backward and the permute; the stored tensor's slot clear of everything
/// the backward reads (it is now written while the backward's blocks read).
pub(crate) fn merged_gradients(
    cfg: &CudaConfig,
    ph: &PhaseView,
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) -> Vec<u32> {
    let g = ph.g;
    let mut permutes = vec![];
    'hosts: for (h, tensor) in fp.bf16_attentions() {
        let n = &g.nodes[h as usize];
        let (Op::AttentionBackward { .. }, Some(&at)) = (&n.op, ph.pos.get(&h)) else { continue };
        if g.shape(n.inputs[0]) != g.shape(n.inputs[1])
            || !cfg.joint_attention_backward
            || !joint_backward_apart(ph.plan, fp, h, n)
        {
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
        // What the backward reads: lse, and q, k, v as bf16 in the heads tensor (o and dO only
        // through delta and dO's bf16 copy, which lie outside the plan's arena).
        let reads = [ph.range(n.inputs[4]), Some(tensor)];
        let merged = match ph.permute_cast_for(at, p, &MERGED, skip, &fp.store_as, reads.iter().copied()) {
            Some(cast) => (cast, Gradients::MergedBf16),
            None => match permute_f32_for(ph, at, p, skip, &fp.store_as, &reads) {
                Some(out) => (out, Gradients::MergedF32),
                None => continue,
            },
        };
        fp.attention_mut(h).merged_gradients = Some(merged);
        permutes.push(p);
    }
    permutes
}

/// The backwards storing their merged gradients f32 ([`Gradients::MergedF32`]) whose tensor
/// only a column sum launched right after them and that sum's bf16 cast read
/// ([`column_casts`]): the backward then stores the cast itself and each warp's column sums of
/// the f32 values ([`Gradients::MergedBf16Summed`]); the sum only finishes, the cast does not
/// launch, and the f32 tensor is never stored. Records each sum with its backward's fusions
/// and drops their column casts; returns the casts to skip. Why: GPT-2's q/k/v
/// bias gradient; at sixteen contexts each layer's backward wrote 151 MB of f32 that the sum
/// read back to store its 75 MB cast.
///
/// Conditions: T a multiple of 16 (a warp's rows); the tensor read through reshapes by the sum
/// and the cast alone; nothing launched between the backward and the sum; the cast's slot clear
/// of what the backward reads (it is now written while the backward's blocks read).
pub(crate) fn summed_merged_gradients(
    ph: &PhaseView,
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) -> Vec<u32> {
    let g = ph.g;
    let mut casts = vec![];
    for (h, tensor) in fp.bf16_attentions() {
        let n = &g.nodes[h as usize];
        let (Some(&(x, Gradients::MergedF32)), Some(&at)) = (fp.merged_gradients(h), ph.pos.get(&h)) else { continue };
        if g.shape(n.inputs[0]).get(2).is_none_or(|t| !t.is_multiple_of(16)) {
            continue;
        }
        // The value the sum and the cast read: x itself or its reshape.
        let v = past_reshapes(g, ph.readers, x);
        let Some((&sum, &cast)) =
            fp.column_casts.iter().find(|(s, c)| g.nodes[**s as usize].inputs[0] == v && !skip.contains(&c.node))
        else {
            continue;
        };
        let mut readers = ph.readers(v).to_vec();
        readers.sort_unstable();
        let mut want = vec![sum, cast.node];
        want.sort_unstable();
        let adjacent = ph.pos.get(&sum).is_some_and(|&ps| ph.nothing_launched(at, ps, skip));
        let reads = [ph.range(n.inputs[4]), Some(tensor)];
        let clear = ph.range(cast).is_some_and(|slot| clear_of(slot, reads));
        if readers == want && adjacent && clear && !skip.contains(&sum) {
            let a = fp.attention_mut(h);
            (a.merged_gradients, a.column_sum) = (Some((cast, Gradients::MergedBf16Summed)), Some(sum));
            fp.column_casts.remove(&sum);
            casts.push(cast.node);
        }
    }
    casts
}

/// The f32 output of the merging permute `p` where the backward launched at `at` may store it
/// instead: `p` launched right after it (nothing launched between), storing f32 (no cast taken
/// into it), its slot clear of `reads`.
fn permute_f32_for(
    ph: &PhaseView,
    at: usize,
    p: u32,
    skip: &std::collections::HashSet<u32>,
    store_as: &HashMap<Value, Value>,
    reads: &[Option<(usize, usize)>],
) -> Option<Value> {
    let out = Value { node: p, index: 0 };
    let Op::Permute { perm } = &ph.g.nodes[p as usize].op else { return None };
    let launched = !skip.contains(&p) && ph.pos.get(&p).is_some_and(|&pos| ph.nothing_launched(at, pos, skip));
    let f32_out = ph.g.dtype(out) == DType::F32 && !store_as.contains_key(&out);
    let slot = ph.range(out)?;
    (perm.as_slice() == MERGED && launched && f32_out && clear_of(slot, reads.iter().copied())).then_some(out)
}

/// (input, permute) for every bf16 attention backward whose gradients a merging permute reads
/// (through reshapes, the Concat and inverse rotaries), where that permute's f32 output is read
/// by more than a cast it could store: the backward's inputs (q, k, v, lse) are kept alive
/// through the permute, so that the plan does not put the permute's output where the backward
/// reads them and the backward may store it itself ([`merged_gradients`]); and through the
/// bf16 cast of the permuted tensor, which the backward may store with its column sums
/// ([`summed_merged_gradients`]). Why: at GPT-2's sixteen contexts the plan put each layer's
/// permuted gradient exactly on the bf16 heads the backward reads, and 11 of the 12 permutes
/// stayed launches; then half the casts.
pub(crate) fn merged_f32_windows(
    program: &alpha_ir::Program,
    into_producers: &HashMap<Value, u32>,
) -> Vec<(Value, u32)> {
    let g = &program.graph;
    let (_, readers) = readers_of(program);
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    // Back from `v` through reshapes and inverse rotaries to the node that computes it.
    let source = |mut v: Value| loop {
        match g.nodes[v.node as usize].op {
            Op::Reshape { .. } | Op::Rotary { inverse: true, .. } => v = g.nodes[v.node as usize].inputs[0],
            _ => return v.node,
        }
    };
    let mut keep = vec![];
    for (p, n) in g.nodes.iter().enumerate() {
        let out = Value { node: p as u32, index: 0 };
        let Op::Permute { perm } = &n.op else { continue };
        if perm.as_slice() != MERGED || into_producers.contains_key(&out) {
            continue;
        }
        let c = &g.nodes[source(n.inputs[0]) as usize];
        if !matches!(c.op, Op::Concat { axis: 0 }) || c.inputs.len() != 3 {
            continue;
        }
        let h = source(c.inputs[0]);
        let hn = &g.nodes[h as usize];
        if matches!(hn.op, Op::AttentionBackward { bf16: true, .. }) && c.inputs.iter().all(|&x| source(x) == h) {
            // Through the permute, or through the bf16 cast of it (through reshapes) that the
            // backward may store with the column sums ([`summed_merged_gradients`]).
            let v = past_reshapes(g, &readers, out);
            let cast = readers.get(&v).into_iter().flatten().copied().find(|&r| {
                matches!(g.nodes[r as usize].op, Op::Cast { to: DType::BF16 }) && phase(r) == phase(p as u32)
            });
            let until = cast.map_or(p as u32, |c| c.max(p as u32));
            // (Inputs from an earlier phase are never reused within this one.)
            let ins = [0, 1, 2, 4].map(|k| hn.inputs[k]);
            keep.extend(ins.into_iter().filter(|v| phase(v.node) == phase(p as u32)).map(|v| (v, until)));
        }
    }
    keep
}
