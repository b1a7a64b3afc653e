//! The output gradient's head-split product storing dO as bf16 with attention's delta.

use super::*;

/// Whether AttentionBackward `id`'s outputs (where fused inverse rotaries put dq and dk) all
/// lie clear of its inputs (where fused forward rotaries read q and k): the condition for its
/// two passes to run in one launch, where a block's dQ pass reads what others' dK/dV passes
/// have written.
pub(crate) fn joint_backward_apart(plan: &Plan, fp: &FusionPlan, id: u32, node: &Node) -> bool {
    let out = |k: u16| Value { node: id, index: k };
    let rot = fp.store_rotary(id).copied().unwrap_or_default();
    let load = fp.load_rotary(id).copied().unwrap_or_default();
    let dst = |k: usize| rot[k].map_or(out(k as u16), |x| x.0);
    let src = |k: usize| load[k].map_or(node.inputs[k], |x| x.0);
    let writes = [dst(0), dst(1), out(2)].map(|x| range(plan, x));
    let ins = &node.inputs;
    let reads = [src(0), src(1), ins[2], ins[3], ins[4], ins[5]].map(|x| range(plan, x));
    writes.iter().chain(&reads).all(Option::is_some)
        && writes.iter().flatten().all(|&w| reads.iter().flatten().all(|&r| !overlap(w, r)))
}

/// The head-split products ([`gemm::Heads`], S = 1) whose output is dO of a bf16 attention
/// backward run as one launch, and nothing else's: they store dO as bf16 with delta
/// ([`gemm::Heads::delta`]) into held memory, and the backward's delta launch does not run.
/// Conditions: heads of 64, O f32 in dO's layout, the product on the TMA engine with bf16
/// operands in 128 × 128 tiles whose ring holds the f32 tile, and the backward's joint-launch
/// conditions. Why: at sixteen contexts the product stored dO as f32 (34 MB) for the delta
/// launch to read back with O.
pub(crate) fn delta_heads(cfg: &CudaConfig, ph: &PhaseView, uses: &HashMap<Value, usize>, fp: &mut FusionPlan) {
    let g = ph.g;
    let mut found = vec![];
    for (mm, (p, heads)) in fp.head_splits() {
        let dov = Value { node: p, index: 0 };
        let Some(&[attn]) = ph.readers.get(&dov).map(Vec::as_slice) else { continue };
        let n = &g.nodes[attn as usize];
        let Op::AttentionBackward { bf16: true, .. } = n.op else { continue };
        let o = n.inputs[3];
        let Some((spec, shape)) = tiled_gemm(cfg, g, mm) else { continue };
        let spec = GemmSpec { heads: Some(gemm::Heads { delta: true, ..heads }), ..spec };
        let spec = with_ring(cfg, on_tma(cfg, spec, &shape), &shape);
        let (q_heads, kv_heads) = (g.shape(n.inputs[0]), g.shape(n.inputs[1]));
        let fits = ph.pos.contains_key(&mm)
            && ph.pos.contains_key(&attn)
            && n.inputs[5] == dov
            && uses.get(&dov) == Some(&1)
            && heads.d == 64
            && !heads.bf16_turned
            && g.shape(dov).len() == 4
            && g.shape(o) == g.shape(dov)
            && g.dtype(o) == DType::F32
            && q_heads.get(1) == kv_heads.get(1)
            && fp.f32_operands(mm).is_none()
            && spec.engine == gemm::Engine::Tma
            && gemm_tma::ring_holds_tile(&spec)
            && fp.bf16_heads(attn).is_some()
            && joint_backward_apart(ph.plan, fp, attn, n);
        if fits {
            found.push((mm, attn, o));
        }
    }
    for (mm, attn, o) in found {
        fp.product_mut(mm).delta = Some((attn, o));
    }
}
