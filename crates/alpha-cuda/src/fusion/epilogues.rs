//! The fusions that move a whole tensor's write or read from one launch to another, checked
//! together against the plan's slots ([`fuse_more`]). Each kind's candidates are found in its
//! own file: activation epilogues (`activation.rs`), head-split stores (`heads.rs`), inverse
//! rotaries into attention's stores (`inverse_rotary.rs`), forward rotaries into its loads
//! (`rotaries.rs`).

use super::*;

/// A fusion of [`fuse_more`]: the node positions it removes from the launch list, the host
/// node, and the ranges whose write or read it moves from one position to another, each with
/// the open interval of positions that must neither read nor write it.
pub(crate) struct Moved {
    pub(crate) host: u32,
    pub(crate) skipped: Vec<u32>,
    pub(crate) moved: Vec<((usize, usize), usize, usize)>,
}

/// One phase as [`fuse_more`]'s candidate finders see it.
#[derive(Clone, Copy)]
pub(crate) struct EpilogueView<'a> {
    pub(crate) cfg: &'a CudaConfig,
    pub(crate) plan: &'a Plan,
    pub(crate) g: &'a alpha_ir::Graph,
    pub(crate) skip: &'a std::collections::HashSet<u32>,
    pub(crate) uses: &'a HashMap<Value, usize>,
    pub(crate) readers: &'a HashMap<Value, Vec<u32>>,
    /// Each node's launch position.
    pub(crate) pos: &'a HashMap<u32, usize>,
    /// Forward Rotaries that may be turned on load: (candidate, its position, the Attention's,
    /// the backward's).
    pub(crate) fwd: &'a [(ForwardRotary, usize, usize, usize)],
}

impl EpilogueView<'_> {
    pub(crate) fn rng(&self, v: Value) -> Option<(usize, usize)> {
        range(self.plan, v)
    }

    /// Pairwise: writes disjoint from each other and from reads. False if a range is missing.
    pub(crate) fn disjoint(&self, writes: &[Value], reads: &[Value]) -> bool {
        let (Some(w), Some(r)) = (
            writes.iter().map(|&x| self.rng(x)).collect::<Option<Vec<_>>>(),
            reads.iter().map(|&x| self.rng(x)).collect::<Option<Vec<_>>>(),
        ) else {
            return false;
        };
        w.iter()
            .enumerate()
            .all(|(i, a)| w[i + 1..].iter().all(|b| !overlap(*a, *b)) && r.iter().all(|b| !overlap(*a, *b)))
    }
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

    let cx = EpilogueView { cfg, plan, g, skip, uses: &uses, readers: &readers, pos: &pos, fwd: &fwd };
    for (i, &id) in nodes.iter().enumerate() {
        let node = &g.nodes[id as usize];
        match &node.op {
            Op::Permute { perm } => heads_candidate(&cx, fp, &mut cands, perm, i, id, node),
            Op::MatMul { .. } => activation_candidate(&cx, fp, &mut cands, i, id, node),
            Op::AttentionBackward { .. } => inverse_rotary_candidate(&cx, fp, &mut cands, &mut fallback, i, id, node),
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
            vs.extend(fp.hosted_writes(id));
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
                    vs.extend(g.nodes[add as usize].inputs.iter().copied());
                }
                vs.extend(fp.hosted_writes(id));
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
            fp.product_mut(m.host).heads_bias.take();
            fp.attention_mut(m.host).store_rotary.take();
        }
    }
    cands.into_iter().flat_map(|m| m.skipped).chain(fused_rotaries).collect()
}
