//! bf16 casts stored by the kernel producing their source, parameter casts grouped into one
//! launch, and the plan hints that keep cast sources alive for the GEMMs' loads.

use super::*;

/// Casts of parameters to bf16, read by two products or more, that stand next to another such
/// cast in the graph: a model that rounds a block's weights together (`systems/coppelius.rs`). They are launched as one
/// multi-tensor cast instead of being folded into every GEMM's loads, so the forward and the
/// input-gradient products read each weight as bf16, half the bytes.
pub(crate) fn grouped_param_casts(program: &alpha_ir::Program) -> std::collections::HashSet<u32> {
    let g = &program.graph;
    let (_, readers) = readers_of(program);
    // Read by two products or more (a training step's forward and input gradient): the bf16
    // copy is then read more than once, and pays for its launch.
    let is = |i: usize| {
        g.nodes.get(i).is_some_and(|n| {
            let out = Value { node: i as u32, index: 0 };
            matches!(n.op, Op::Cast { to: DType::BF16 })
                && g.dtype(n.inputs[0]) == DType::F32
                && matches!(g.nodes[n.inputs[0].node as usize].op, Op::Param { .. })
                && readers.get(&out).is_some_and(|r| r.len() >= 2)
        })
    };
    (0..g.nodes.len()).filter(|&i| is(i) && ((i > 0 && is(i - 1)) || is(i + 1))).map(|i| i as u32).collect()
}

/// f32 values (by the root they view) whose only reader is one bf16 cast and whose producer can
/// store bf16 itself (a unary or binary op, a permute, a LayerNorm's or an RMSNorm's output, the
/// logits' gradient):
/// value → cast.
/// Why: the GEMMs after such a cast then read bf16, half the bytes of their f32 loads, and the
/// cast costs no launch; on the H200 the tiled GEMM is bound by those bytes.
pub(crate) fn producer_cast_candidates(program: &alpha_ir::Program) -> HashMap<Value, u32> {
    let g = &program.graph;
    let (uses, _) = readers_of(program);
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    let mut out = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if !matches!(n.op, Op::Cast { to: DType::BF16 }) || g.dtype(n.inputs[0]) != DType::F32 {
            continue;
        }
        // Through reshapes to the value a kernel writes, each link read by the next alone.
        let mut x = n.inputs[0];
        while matches!(g.nodes[x.node as usize].op, Op::Reshape { .. }) && uses.get(&x) == Some(&1) {
            x = g.nodes[x.node as usize].inputs[0];
        }
        let single = uses.get(&x) == Some(&1) && uses.get(&n.inputs[0]) == Some(&1);
        let pn = &g.nodes[x.node as usize];
        let can = match pn.op {
            Op::Unary(_) | Op::Binary(_) | Op::Permute { .. } => true,
            Op::LayerNorm { .. } | Op::RmsNorm { .. } => x.index == 0,
            // Four logits a thread: a vocabulary of a multiple of 4.
            Op::CrossEntropyBackward { .. } => g.shape(x).last().is_some_and(|v| v % 4 == 0),
            _ => false,
        };
        let same_size = g.ty(x).numel() == n.outputs[0].numel();
        if single && can && phase(x.node) == phase(i as u32) && same_size {
            out.insert(x, i as u32);
        }
    }
    out
}

/// The candidates ([`producer_cast_candidates`]) that this phase's plan lets the producer store
/// as bf16 into the cast's slot: the producer launched (not fused elsewhere), before the cast,
/// and nothing from the producer up to the cast reading or writing that slot — the store moves
/// from the cast's position to the producer's. Returns (producer output → cast output).
pub(crate) fn casts_into_producers(
    plan: &Plan,
    nodes: &[u32],
    skip: &std::collections::HashSet<u32>,
    candidates: &HashMap<Value, u32>,
) -> Vec<(Value, Value)> {
    let g = &plan.program.graph;
    let pos: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut found = vec![];
    for (&x, &cast) in candidates {
        let (Some(&pp), Some(&pc)) = (pos.get(&x.node), pos.get(&cast)) else { continue };
        if pp >= pc || skip.contains(&x.node) || skip.contains(&cast) {
            continue;
        }
        let out = Value { node: cast, index: 0 };
        let Some(slot) = range(plan, out) else { continue };
        if touched_by(g, &nodes[pp..pc]).all(|v| range(plan, v).is_none_or(|r| !overlap(r, slot))) {
            found.push((x, out));
        }
    }
    found
}

/// Products whose f32 output only a bf16 cast after them reads, stored rounded by the product
/// itself into the cast's slot ([`GemmSpec::store_bf16`]): each a tiled product whole on the
/// TMA engine, of bf16 operands, whose store runs staged (a tall output), with no other
/// fusion on it, and nothing from the product up to the cast reading or writing the cast's
/// slot. Returns (product output → cast output). Why: GPT-2's logits, which its loss reads
/// rounded to bf16, were stored as f32 (3.3 GB at sixteen contexts) for a cast to round them.
pub(crate) fn casts_into_products(
    cfg: &CudaConfig,
    plan: &Plan,
    nodes: &[u32],
    skip: &std::collections::HashSet<u32>,
    fp: &FusionPlan,
) -> Vec<(Value, Value)> {
    let g = &plan.program.graph;
    let (uses, readers) = readers_of(&plan.program);
    let pos: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut found = vec![];
    for (pp, &mm) in nodes.iter().enumerate() {
        let out = Value { node: mm, index: 0 };
        if skip.contains(&mm) || !matches!(g.nodes[mm as usize].op, Op::MatMul { .. }) || uses.get(&out) != Some(&1) {
            continue;
        }
        let Some(&[cast]) = readers.get(&out).map(Vec::as_slice) else { continue };
        let is_cast = matches!(g.nodes[cast as usize].op, Op::Cast { to: DType::BF16 });
        let Some(&pc) = pos.get(&cast) else { continue };
        if !is_cast || skip.contains(&cast) || pc <= pp {
            continue;
        }
        let Some((spec, shape)) = tiled_gemm(cfg, g, mm) else { continue };
        let bf16_operands =
            fp.f32_operands(mm).is_none() && g.nodes[mm as usize].inputs.iter().all(|&x| g.dtype(x) == DType::BF16);
        let alone = fp.residual_add(mm).is_none()
            && fp.activation(mm).is_none()
            && fp.mul(mm).is_none()
            && fp.heads(mm).is_none()
            && fp.delta(mm).is_none();
        if !(bf16_operands && alone) || k_parts(cfg, &spec, &shape).is_some() {
            continue;
        }
        let settled = settled(with_ring(cfg, on_tma(cfg, spec, &shape), &shape), &shape);
        let staged = settled.engine == gemm::Engine::Tma && gemm_tma::staged(&settled) == Some(gemm_tma::Staged::Store);
        let cast_out = Value { node: cast, index: 0 };
        let Some(slot) = range(plan, cast_out) else { continue };
        if staged && touched_by(g, &nodes[pp..pc]).all(|v| range(plan, v).is_none_or(|r| !overlap(r, slot))) {
            found.push((out, cast_out));
        }
    }
    found
}

/// (f32 source, last position) of every bf16 cast that only tiled GEMMs of its phase read:
/// kept alive through those GEMMs (and the Adds that may become their epilogues), so that
/// [`fuse`] finds each source unwritten and the GEMMs convert on load instead of the cast.
/// Why: a plain plan frees an activation once its forward readers are done, so the backward's
/// GEMMs would read the bf16 copy and every such cast would stay a launch (196 in Coppelius's
/// step); an f32 source kept instead of a bf16 copy costs 2 bytes an element of memory.
pub(crate) fn cast_sources_through_their_gemms(cfg: &CudaConfig, program: &alpha_ir::Program) -> Vec<(Value, u32)> {
    let g = &program.graph;
    let (uses, readers) = readers_of(program);
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    let mut keep = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let id = i as u32;
        if !matches!(n.op, Op::Cast { to: DType::BF16 }) || g.dtype(n.inputs[0]) != DType::F32 {
            continue;
        }
        let v = Value { node: id, index: 0 };
        let rs = readers.get(&v).cloned().unwrap_or_default();
        let only_gemms = !rs.is_empty()
            && uses.get(&v) == Some(&rs.len())
            && rs.iter().all(|&r| phase(r) == phase(id) && tiled_gemm(cfg, g, r).is_some());
        if !only_gemms {
            continue;
        }
        for &gemm in &rs {
            let prod = Value { node: gemm, index: 0 };
            let add = readers
                .get(&prod)
                .into_iter()
                .flatten()
                .copied()
                .find(|&a| g.nodes[a as usize].op == Op::Binary(alpha_ir::Binary::Add) && phase(a) == phase(gemm));
            keep.push((n.inputs[0], add.unwrap_or(gemm).max(gemm)));
        }
    }
    keep
}
