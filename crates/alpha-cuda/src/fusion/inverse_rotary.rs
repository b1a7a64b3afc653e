//! Inverse rotaries stored turned back by the attention backward (a part of [`fuse_more`]).

use super::*;

/// The inverse Rotaries of AttentionBackward `id`'s dq and dk, stored turned back by the
/// backward kernel; also its fallback, checked against the pre-rotary and the rotated q, k both
/// (used where a forward rotary fusion fails).
pub(crate) fn inverse_rotary_candidate(
    cx: &EpilogueView,
    fp: &mut FusionPlan,
    cands: &mut Vec<Moved>,
    fallback: &mut HashMap<u32, (Turned, Moved)>,
    i: usize,
    id: u32,
    node: &Node,
) {
    let EpilogueView { g, uses, readers, pos, fwd, .. } = *cx;
    let val = |node: u32, index: u16| Value { node, index };
    let rng = |v: Value| cx.rng(v);
    let rotary = |r: u32| match g.nodes[r as usize].op {
        Op::Rotary { base, inverse } => Some((base, inverse)),
        _ => None,
    };
    let qs = g.shape(node.inputs[0]);
    if qs.len() != 4 || !attention::rotary_fits(qs[3]) {
        return;
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
    let pick = |reads: &[Value]| choices.iter().copied().find(|c| c.iter().any(Option::is_some) && safe(c, reads));
    let fusion = |pick: [Option<(Value, f64, usize, u32)>; 2]| {
        let rot: Turned = pick.map(|x| x.map(|(ro, base, _, _)| (ro, base)));
        let moved = pick.iter().flatten().map(|&(ro, _, pr, _)| (rng(ro).unwrap(), i, pr)).collect();
        let skipped = pick.iter().flatten().map(|x| x.3).collect();
        (rot, Moved { host: id, skipped, moved })
    };
    if let Some(u) = pick(&union) {
        fallback.insert(id, fusion(u));
    }
    let Some(a) = pick(&assumed) else { return };
    let (rot, m) = fusion(a);
    fp.attention_mut(id).store_rotary = Some(rot);
    cands.push(m);
}
