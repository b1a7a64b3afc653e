//! The q/k/v projection storing bf16 heads, turned by the rotary where attention has one, for
//! attention to copy.

use super::*;

/// The head-split q/k/v projections whose tensor only attention reads, through fused forward
/// rotaries for q and k: their epilogue then stores q and k turned and all three as bf16 (the
/// values the attention kernels would round on load, [`gemm::Heads::bf16_turned`]), and the
/// attention kernels copy them straight into shared memory. Records both in the fusion plan.
///
/// Conditions: heads of 64, three sections; every reader of the tensor (through slices and
/// reshapes) a fused forward Rotary of q or k, or the v of an attention host; every host of this
/// phase turning both q and k on load with one base; and no host writing into the tensor's slot
/// (the bf16 values sit at half their f32 offsets, so the slots the plan gives the f32 views
/// no longer say where each one is).
pub(crate) fn turned_heads(ph: &PhaseView, skip: &std::collections::HashSet<u32>, fp: &mut FusionPlan) {
    let (g, plan) = (ph.g, ph.plan);
    let val = |node: u32| Value { node, index: 0 };
    let mut found = vec![];
    'gemms: for (mm, pv, pr) in qkv_head_splits(ph, fp) {
        let section = (pr.1 - pr.0) / 3;
        // Walk the views of the tensor to what reads them.
        let (mut stack, mut leaves) = (vec![pv], vec![]);
        while let Some(x) = stack.pop() {
            for &r in ph.readers(x) {
                let n = &g.nodes[r as usize];
                if matches!(n.op, Op::Slice { axis: 0, .. } | Op::Reshape { .. }) {
                    stack.push(val(r));
                } else {
                    leaves.push((r, x));
                }
            }
        }
        let sec = |x: Value| range(plan, x).filter(|r| r.0 >= pr.0 && r.1 <= pr.1).map(|r| (r.0 - pr.0) / section);
        let mut hosts = std::collections::BTreeSet::new();
        for &(r, x) in &leaves {
            let n = &g.nodes[r as usize];
            match n.op {
                Op::Rotary { inverse: false, .. } if skip.contains(&r) && matches!(sec(x), Some(0 | 1)) => {
                    hosts.extend(ph.readers(val(r)));
                }
                Op::Attention { .. } | Op::AttentionBackward { .. } if n.inputs[2] == x && sec(x) == Some(2) => {
                    hosts.insert(r);
                }
                _ => continue 'gemms,
            }
        }
        let mut base = None;
        for &h in &hosts {
            let n = &g.nodes[h as usize];
            let host = matches!(n.op, Op::Attention { bf16: true, .. } | Op::AttentionBackward { bf16: true, .. });
            let Some([Some(q), Some(k)]) = fp.load_rotary(h).copied() else { continue 'gemms };
            let one_base = q.1 == k.1 && base.is_none_or(|b| b == q.1);
            let sections = (sec(q.0), sec(k.0), sec(n.inputs[2])) == (Some(0), Some(1), Some(2));
            // Outputs (as relocated by fused inverse rotaries) clear of the tensor.
            let rot = fp.store_rotary(h).copied().unwrap_or_default();
            let outs = (0..n.outputs.len() as u16)
                .map(|k| rot.get(k as usize).copied().flatten().map_or(Value { node: h, index: k }, |r| r.0));
            let clear = clear_of(pr, outs.map(|o| ph.range(o)));
            if !(host && ph.pos.contains_key(&h) && one_base && sections && clear) {
                continue 'gemms;
            }
            base = Some(q.1);
        }
        let Some(base) = base else { continue };
        found.push((mm, base, pr, hosts));
    }
    for (mm, base, tensor, hosts) in found {
        if let Some(h) = fp.product_mut(mm).heads.as_mut() {
            h.1.bf16_turned = true;
        }
        fp.product_mut(mm).turned_base = Some(base);
        for h in hosts {
            fp.attention_mut(h).bf16_heads = Some(tensor);
        }
    }
}

/// The head-split q/k/v projections of this phase into heads of 64 in three sections: (MatMul,
/// the heads tensor, its slot).
fn qkv_head_splits(ph: &PhaseView, fp: &FusionPlan) -> Vec<(u32, Value, (usize, usize))> {
    let mut out = vec![];
    for (mm, (p, heads)) in fp.head_splits() {
        let pv = Value { node: p, index: 0 };
        let shape = ph.g.shape(pv);
        if !ph.pos.contains_key(&mm) || heads.d != 64 || shape.len() != 5 || shape[0] != 3 {
            continue;
        }
        if let Some(pr) = ph.range(pv) {
            out.push((mm, pv, pr));
        }
    }
    out
}

/// The head-split q/k/v projections of attentions without a rotary (GPT-2's learned positions)
/// whose tensor only attention reads: their epilogue then stores q, k and v as bf16 as they are
/// ([`gemm::Heads::bf16`]: the values the attention kernels would round on load), and the bf16
/// attention kernels copy them. Records both in the fusion plan. Why: attention read f32 heads
/// and rounded them itself, which kept it off the `wgmma` kernels that copy bf16 tiles.
///
/// Conditions: heads of 64, three sections; every reader of the tensor (through slices and
/// reshapes) a bf16 Attention or AttentionBackward of this phase reading section k as its input
/// k, with no rotary fused on its loads or stores; and no host writing into the tensor's slot.
pub(crate) fn plain_bf16_heads(ph: &PhaseView, fp: &mut FusionPlan) {
    let (g, plan) = (ph.g, ph.plan);
    let val = |node: u32| Value { node, index: 0 };
    let mut found = vec![];
    'gemms: for (mm, pv, pr) in qkv_head_splits(ph, fp) {
        if fp.heads(mm).is_some_and(|h| h.1.bf16_turned) {
            continue;
        }
        let section = (pr.1 - pr.0) / 3;
        let sec = |x: Value| range(plan, x).filter(|r| r.0 >= pr.0 && r.1 <= pr.1).map(|r| (r.0 - pr.0) / section);
        let (mut stack, mut hosts) = (vec![pv], std::collections::BTreeSet::new());
        while let Some(x) = stack.pop() {
            for &r in ph.readers(x) {
                let n = &g.nodes[r as usize];
                match n.op {
                    Op::Slice { axis: 0, .. } | Op::Reshape { .. } => stack.push(val(r)),
                    Op::Attention { bf16: true, .. } | Op::AttentionBackward { bf16: true, .. } => {
                        // Each section read as the input of its own place, and only there.
                        let k = sec(x);
                        let places: Vec<usize> = (0..3).filter(|&j| n.inputs[j] == x).collect();
                        let own = k.is_some_and(|k| places == [k]) && n.inputs[3..].iter().all(|&y| y != x);
                        if !own {
                            continue 'gemms;
                        }
                        hosts.insert(r);
                    }
                    _ => continue 'gemms,
                }
            }
        }
        for &h in &hosts {
            let n = &g.nodes[h as usize];
            let rotary = fp.load_rotary(h).is_some_and(|l| l.iter().any(Option::is_some))
                || fp.store_rotary(h).is_some_and(|s| s.iter().any(Option::is_some));
            let sections = (sec(n.inputs[0]), sec(n.inputs[1]), sec(n.inputs[2])) == (Some(0), Some(1), Some(2));
            let outs = (0..n.outputs.len() as u16).map(|k| ph.range(Value { node: h, index: k }));
            if rotary || !sections || !ph.pos.contains_key(&h) || !clear_of(pr, outs) {
                continue 'gemms;
            }
        }
        if hosts.is_empty() {
            continue;
        }
        found.push((mm, pr, hosts));
    }
    for (mm, tensor, hosts) in found {
        if let Some(h) = fp.product_mut(mm).heads.as_mut() {
            h.1.bf16 = true;
        }
        for h in hosts {
            fp.attention_mut(h).bf16_heads = Some(tensor);
        }
    }
}
