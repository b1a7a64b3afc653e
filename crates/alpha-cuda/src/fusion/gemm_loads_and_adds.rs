//! Casts folded into GEMM operand loads, and residual Adds as GEMM epilogues.

use super::*;

/// The fusions of one phase (`nodes`, in launch order), decided before lowering it.
///
/// * GEMM add epilogue: `Add(x, MatMul)` or `Add(MatMul, x)` right after its MatMul, the
///   product read by nothing else, x of the output's shape in f32: the GEMM computes
///   `acc + x` (the same f32 addition) straight into the Add's slot. Its slot must not overlap
///   the GEMM's operands (the planner may reuse their space once the MatMul is done), and may
///   coincide with x only exactly (each element is read, then written, by one thread).
/// * Casts into GEMM loads (with `fold_casts`): a MatMul operand that is a `Cast{BF16}` of an f32 tensor, unwritten
///   from the cast through the MatMul, may read the source with the GEMM's round-to-nearest-even
///   convert-on-load (the cast's own rounding). A cast every reading operand of which may do so
///   is skipped, and those operands load f32; each operand chooses alone.
///
/// Casts among `producer_casts` ([`producer_cast_candidates`]) are left to their producers.
/// Returns the nodes not to launch (fused casts and Adds); fills `f32_gemm` and `gemm_add`.
pub(crate) fn fuse(
    cfg: &CudaConfig,
    plan: &Plan,
    nodes: &[u32],
    producer_casts: &HashMap<Value, u32>,
    fold_casts: bool,
    fp: &mut FusionPlan,
) -> std::collections::HashSet<u32> {
    let g = &plan.program.graph;
    let p = &plan.program;
    let (uses, readers) = readers_of(p);
    let pos: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let outs = |id: u32| -> Vec<(usize, usize)> {
        (0..g.nodes[id as usize].outputs.len())
            .filter_map(|k| range(plan, Value { node: id, index: k as u16 }))
            .collect()
    };
    let is_bf16_cast = |id: u32| {
        let n = &g.nodes[id as usize];
        matches!(n.op, Op::Cast { to: DType::BF16 }) && g.dtype(n.inputs[0]) == DType::F32
    };
    // The Add that a MatMul at position i may fuse: the next node that is neither a cast nor
    // another MatMul (at most MAX_BETWEEN of those: a backward's weight-gradient product between
    // the two input-gradient products whose sum the Add makes). Casts in between must all end up
    // skipped, and nothing in between may touch the Add's slot; checked below. Returns (add
    // position, add, residual).
    const MAX_BETWEEN: usize = 2;
    let is_matmul = |id: u32| matches!(g.nodes[id as usize].op, Op::MatMul { .. });
    let add_partner = |i: usize| -> Option<(usize, u32, Value)> {
        let mm = nodes[i];
        let mut j = i + 1;
        let mut products = 0;
        while j < nodes.len() && (is_bf16_cast(nodes[j]) || (is_matmul(nodes[j]) && products < MAX_BETWEEN)) {
            products += usize::from(is_matmul(nodes[j]));
            j += 1;
        }
        let add = *nodes.get(j)?;
        let an = &g.nodes[add as usize];
        if an.op != Op::Binary(alpha_ir::Binary::Add) {
            return None;
        }
        let prod = Value { node: mm, index: 0 };
        let r = match (an.inputs[0] == prod, an.inputs[1] == prod) {
            (true, false) => an.inputs[1],
            (false, true) => an.inputs[0],
            _ => return None,
        };
        let ok = uses.get(&prod) == Some(&1)
            && g.ty(r) == &an.outputs[0]
            && g.ty(prod) == &an.outputs[0]
            && an.outputs[0].dtype == DType::F32;
        ok.then_some((j, add, r))
    };
    // What each launch position may write: its node's outputs (none for a skipped cast), and a
    // MatMul's possibly-fused Add's outputs too (written early when fused).
    let writes = |skip: &std::collections::HashSet<u32>| -> Vec<Vec<(usize, usize)>> {
        (0..nodes.len())
            .map(|i| {
                if skip.contains(&nodes[i]) {
                    return vec![];
                }
                let mut w = outs(nodes[i]);
                if matches!(g.nodes[nodes[i] as usize].op, Op::MatMul { .. }) {
                    if let Some((_, add, _)) = add_partner(i) {
                        w.extend(outs(add));
                    }
                }
                w
            })
            .collect()
    };

    // Casts into GEMM loads: start from every cast all of whose readers are tiled MatMuls of
    // this phase, and drop casts until each skipped cast's readers can all read the f32
    // sources (skipping a cast removes its write, so this is a fixpoint from above).
    let readers_of = |id: u32| {
        let v = Value { node: id, index: 0 };
        let rs = readers.get(&v).cloned().unwrap_or_default();
        let ok = !rs.is_empty()
            && uses.get(&v) == Some(&rs.len())
            && rs.iter().all(|r| pos.contains_key(r) && tiled_gemm(cfg, g, *r).is_some());
        ok.then_some(rs)
    };
    // Casts a producer may store itself (bf16, half the GEMMs' bytes) are left to it, and so are
    // runs of parameter casts: one launch casts them all (see `grouped_param_casts`).
    let to_producers: std::collections::HashSet<u32> = producer_casts.values().copied().collect();
    let grouped = grouped_param_casts(p);
    let mut skip: std::collections::HashSet<u32> = nodes
        .iter()
        .copied()
        .filter(|&id| {
            fold_casts
                && is_bf16_cast(id)
                && readers_of(id).is_some()
                && !to_producers.contains(&id)
                && !grouped.contains(&id)
        })
        .collect();
    // (GEMM, operand) → the f32 source that operand may read instead of its cast.
    let mut eligible: HashMap<(u32, usize), Value>;
    loop {
        let w = writes(&skip);
        let source = |v: Value, at: usize| -> Option<Value> {
            if !is_bf16_cast(v.node) {
                return None;
            }
            let src = g.nodes[v.node as usize].inputs[0];
            let pc = *pos.get(&v.node)?;
            let r = range(plan, src)?;
            let clean = (pc + 1..=at).all(|q| w[q].iter().all(|&x| !overlap(x, r)));
            (pc < at && clean).then_some(src)
        };
        eligible = HashMap::new();
        for (i, &id) in nodes.iter().enumerate() {
            if tiled_gemm(cfg, g, id).is_none() {
                continue;
            }
            let ins = &g.nodes[id as usize].inputs;
            for (k, &operand) in ins.iter().take(2).enumerate() {
                if let Some(src) = source(operand, i) {
                    eligible.insert((id, k), src);
                }
            }
        }
        // A cast is skipped when every operand slot of every GEMM reading it may read its source.
        let next: std::collections::HashSet<u32> = skip
            .iter()
            .copied()
            .filter(|&id| {
                let out = Value { node: id, index: 0 };
                readers_of(id).is_some_and(|rs| {
                    rs.iter().all(|&r| {
                        let ins = &g.nodes[r as usize].inputs;
                        (0..2).filter(|&k| ins[k] == out).all(|k| eligible.contains_key(&(r, k)))
                    })
                })
            })
            .collect();
        if next == skip {
            break;
        }
        skip = next;
    }
    // Each operand reads the f32 source of a skipped cast, or what the program gives it.
    for &id in nodes {
        if tiled_gemm(cfg, g, id).is_none() {
            continue;
        }
        let ins = &g.nodes[id as usize].inputs;
        let read = |k: usize| if skip.contains(&ins[k].node) { eligible[&(id, k)] } else { ins[k] };
        let (a, b) = (read(0), read(1));
        if (a, b) != (ins[0], ins[1]) {
            fp.product_mut(id).f32_operands = Some((a, b));
        }
    }

    // GEMM add epilogues, checked against the operands the GEMM actually reads. A product
    // between a fused MatMul and its Add keeps its own Add unfused (its early write could land
    // on the slot the first Add's output holds until its readers).
    let mut between_products: std::collections::HashSet<u32> = std::collections::HashSet::new();
    for i in 0..nodes.len() {
        let id = nodes[i];
        if tiled_gemm(cfg, g, id).is_none() || between_products.contains(&id) {
            continue;
        }
        let Some((j, add, r)) = add_partner(i) else { continue };
        let ins = &g.nodes[id as usize].inputs;
        let (a, b) = fp.f32_operands(id).copied().unwrap_or((ins[0], ins[1]));
        let (Some(c), Some(ra), Some(rb), Some(rr)) =
            (range(plan, Value { node: add, index: 0 }), range(plan, a), range(plan, b), range(plan, r))
        else {
            continue;
        };
        if overlap(c, ra) || overlap(c, rb) || (overlap(c, rr) && c != rr) {
            continue;
        }
        // Casts between the MatMul and the Add: all skipped, and their sources (read later by
        // f32 GEMMs) not under the Add's slot, which is now written before them. Products in
        // between: neither reading nor writing the Add's slot, nor writing the residual (read
        // now, before them).
        let between_ok = nodes[i + 1..j].iter().all(|&x| {
            if is_matmul(x) {
                let xi = &g.nodes[x as usize].inputs;
                let (xa, xb) = fp.f32_operands(x).copied().unwrap_or((xi[0], xi[1]));
                let reads_ok = [xa, xb].iter().all(|&v| range(plan, v).is_some_and(|vr| !overlap(c, vr)));
                let writes_ok = outs(x).iter().all(|&w| !overlap(c, w) && !overlap(rr, w));
                return reads_ok && writes_ok && !skip.contains(&x);
            }
            skip.contains(&x) && range(plan, g.nodes[x as usize].inputs[0]).is_some_and(|sr| !overlap(c, sr))
        });
        if !between_ok {
            continue;
        }
        between_products.extend(nodes[i + 1..j].iter().copied().filter(|&x| is_matmul(x)));
        fp.product_mut(id).residual_add = Some((add, r));
        skip.insert(add);
    }
    skip
}
