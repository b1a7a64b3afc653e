//! Lowering whole systems needs no GPU: Bob's and Coppelius's training and inference programs
//! lower to launches whose kernels fit the launch budget, whose every pointer lies inside the
//! arena, and whose modules are shared across Coppelius's 16 identical blocks.

use alpha_cuda::config::{ChainEpilogues, CudaConfig};
use alpha_cuda::lower::{lower_program, LArg, Lowered};
use alpha_ir::Op;
use alpha_systems::System;

fn check_pointers(l: &Lowered) {
    for ph in &l.phases {
        for launch in ph {
            for a in &launch.args {
                if let LArg::Ptr(o) = a {
                    assert!(*o < l.arena, "{}: offset {o} outside the {}-byte arena", l.describe(launch), l.arena);
                }
            }
            let k = &l.kernels[launch.kernel];
            assert_eq!(k.params.len(), launch.args.len(), "{}", l.describe(launch));
            if let Some(t) = k.block_threads() {
                assert_eq!(t, launch.block.0 * launch.block.1 * launch.block.2, "{}", l.describe(launch));
            }
            assert!(launch.grid.0 > 0 && launch.grid.1 > 0 && launch.grid.2 > 0);
        }
    }
    for k in &l.kernels {
        k.check_budget().unwrap();
    }
}

#[test]
fn bob_and_coppelius_lower_within_the_arena_and_share_kernels() {
    let bob = alpha_systems::bob::Bob;
    let l = lower_program(&bob.learner(10).training_program(bob.model(4).unwrap()).unwrap(), &CudaConfig::default())
        .unwrap();
    check_pointers(&l);
    assert_eq!(l.phases.len(), 1);

    let c = alpha_systems::coppelius::Coppelius::default();
    let l =
        lower_program(&c.learner(10).training_program(c.model(1).unwrap()).unwrap(), &CudaConfig::default()).unwrap();
    check_pointers(&l);
    let launches = l.launch_count(0);
    assert!(launches > 500, "{launches} launches");
    assert!(l.kernels.len() < 100, "{} distinct kernels: blocks should share modules", l.kernels.len());
    let names: Vec<&str> = l.kernels.iter().map(|k| k.name.as_str()).collect();
    for family in [
        "attention_wgmma_fwd_o16",
        "attention_mma_bwd_delta_do16",
        "attention_wgmma_bwd_rotary_merged",
        "layernorm_fwd_bf16",
        "adamw_multi",
        "sumsq_multi",
    ] {
        assert!(names.contains(&family), "no {family} kernel");
    }
    // Every rotary, forward and inverse, is done inside the attention kernels.
    assert!(!names.iter().any(|n| n.starts_with("rotary")), "{names:?}");
    // Every product is a tiled GEMM. A cast is stored as bf16 by the kernel producing its
    // source, done with its block's others in one multi-tensor launch (a block's weights), or
    // launched alone so that the GEMMs reading it take bf16 through the TMA engine: the tied
    // embedding, and the residual stream's gradient entering the last block's backward (the
    // logits' gradient is stored as bf16 by the cross-entropy, whose forward launches its
    // backward's work too; the residual gradient
    // of every other block's products by the LayerNorm backward that adds it, 31 of them).
    assert!(!names.contains(&"gemm_simple"), "{names:?}");
    assert!(names.contains(&"cross_entropy_joint_bf16_w12288"), "{names:?}");
    let g = &l.plan.program.graph;
    let casts: Vec<u32> = l.phases[0]
        .iter()
        .filter(|x| {
            x.node.is_some_and(|n| matches!(g.nodes[n as usize].op, Op::Cast { .. }))
                && l.kernels[x.kernel].name != "cast_multi_f32_bf16"
        })
        .filter_map(|x| x.node)
        .collect();
    assert_eq!(casts.len(), 2);
    // No permute runs either: the attention forward stores its output's permuted bf16 copy, the
    // backward its gradients'.
    let permutes = l.phases[0]
        .iter()
        .filter(|x| x.node.is_some_and(|n| matches!(g.nodes[n as usize].op, Op::Permute { .. })))
        .count();
    assert_eq!(permutes, 0);
    assert_eq!(l.phases[0].iter().filter(|x| l.kernels[x.kernel].name == "layernorm_bwd_dx_add_fold_bf16").count(), 31);
    for &c in &casts {
        let out = alpha_ir::Value { node: c, index: 0 };
        let readers: Vec<&alpha_ir::Node> = g.nodes.iter().filter(|n| n.inputs.contains(&out)).collect();
        assert!(!readers.is_empty() && readers.iter().all(|n| matches!(n.op, Op::MatMul { .. })), "cast %{c}");
    }
    let tma = |x: &&alpha_cuda::lower::Launch| {
        let name = &l.kernels[x.kernel].name;
        name.ends_with("_tma") || name.ends_with("_tma_s3")
    };
    assert!(l.phases[0]
        .iter()
        .filter(|x| l.kernels[x.kernel].name.starts_with("gemm_") && !l.kernels[x.kernel].name.contains("splitk"))
        .all(|x| tma(&x)));
    // The LayerNorms' outputs, read only by products, are written as bf16 straight away.
    assert_eq!(names.iter().filter(|n| **n == "layernorm_fwd_bf16").count(), 1);
    assert_eq!(l.phases[0].iter().filter(|x| l.kernels[x.kernel].name == "layernorm_fwd_bf16").count(), 33);

    let inf = alpha_learn::inference_program(c.model(1).unwrap()).unwrap();
    check_pointers(&lower_program(&inf, &CudaConfig::default()).unwrap());
}

#[test]
fn accumulation_phases_lower_with_their_copies() {
    let bob = alpha_systems::bob::Bob;
    let mut learner = bob.learner(10);
    learner.accumulation = 2;
    let l = lower_program(&learner.training_program(bob.model(2).unwrap()).unwrap(), &CudaConfig::default()).unwrap();
    assert_eq!(l.phases.len(), 2);
    check_pointers(&l);
    // The accumulate phase ends by copying the summed gradient into its accumulator.
    assert!(l.phases[0].iter().any(|x| x.node.is_none()), "no phase-end copy in 'accumulate'");
}

fn training(system: &str) -> Lowered {
    match system {
        "bob" => {
            let bob = alpha_systems::bob::Bob;
            lower_program(&bob.learner(10).training_program(bob.model(4).unwrap()).unwrap(), &CudaConfig::default())
                .unwrap()
        }
        _ => {
            let c = alpha_systems::coppelius::Coppelius::default();
            lower_program(&c.learner(10).training_program(c.model(1).unwrap()).unwrap(), &CudaConfig::default())
                .unwrap()
        }
    }
}

/// Launch counts of the training step (B=4 Bob, B=1 T=1024 Coppelius). Coppelius, fusion by
/// fusion: the optimizer, GEMM-epilogue and cast fusions (1,615 → 1,099); the GELU epilogue
/// and the inverse rotaries folded into attention's backward (→ 1,051); the forward rotaries
/// turned on load (→ 1,019); every cast folded into GEMM loads, its f32 source kept alive
/// (→ 823); q, k, v's adjoints settled as one Concat and their slices made views (→ 679);
/// runs of elementwise ops as one kernel (→ 628); that Concat's parts computed in place
/// (→ 580); the residual Add after each LayerNorm backward done as it stores dx (→ 548); the
/// one long-K product of a context (K = 12,288) split, adding its reduction (→ 549); casts
/// stored by their producers as bf16 (the plan keeps more alive, and 3 residual Adds no longer
/// fit their LayerNorm's store: → 552); the products of K = 1,024–1,536 split again, as the
/// whole step measured faster with them split (→ 696); each block's weights cast to bf16 in one
/// launch instead of converted on every GEMM load (→ 709); the gate and up input gradients
/// summed by the second product's reduction (→ 693); the q/k/v projection and the output
/// gradient stored split into heads at one context too (→ 661); each LayerNorm backward's band
/// fold run beside its input gradient's rows (→ 628). The embedding gradient's fill and
/// scatter-add as five launches that sort the tokens by id first (three more: Bob 12 → 15,
/// Coppelius 595 → 598).
#[test]
fn training_steps_launch_counts() {
    for s in ["bob", "coppelius"] {
        let l = training(s);
        check_pointers(&l);
        let by = alpha_cuda::lower::launches_by_kernel(&l, 0);
        println!("{s}: {} launches, {} kernels", l.launch_count(0), l.kernels.len());
        for (k, n) in &by {
            println!("  {n:5} {k}");
        }
        let count = |name: &str| by.iter().find(|x| x.0 == name).map_or(0, |x| x.1);
        if s == "coppelius" {
            // Each block's five matrices in one cast launch.
            assert_eq!(count("cast_multi_f32_bf16"), 16);
        }
        // The optimizer: one launch for every AdamW, two for the global sum of squares.
        assert_eq!(count("adamw_multi"), 1, "{s}");
        assert_eq!((count("sumsq_multi"), count("sumsq_multi_finish")), (1, 1), "{s}");
        assert_eq!(count("adamw_step") + count("pw_square") + count("reduce_sum"), 0, "{s}");
        if s == "coppelius" {
            // Every block's GELU is its gate GEMM's epilogue; every dq and dk leaves the
            // attention backward already turned back; every q and k is turned by the projection's
            // epilogue, which stores q, k and v as bf16 (see `lower::turned_heads`).
            let gelu_gemms: usize = by.iter().filter(|x| x.0.contains("_store_gelu")).map(|x| x.1).sum();
            assert_eq!((gelu_gemms, count("pw_gelu")), (16, 0));
            // Its product with the up half stays a launch at one context (a shallow grid; see
            // `sixteen_contexts_multiply_the_gated_halves_in_the_up_products`).
            let mul_gemms: usize = by.iter().filter(|x| x.0.contains("_storemul")).map(|x| x.1).sum();
            assert_eq!((mul_gemms, count("pw_mul_v4")), (0, 16));
            // Both backward passes in one launch, after delta alone (no output over an input).
            assert_eq!((count("attention_mma_bwd_delta_do16"), count("attention_wgmma_bwd_rotary_merged")), (16, 16));
            assert_eq!(
                (count("attention_mma_bwd_dq_rotload_rotary"), count("attention_mma_bwd_dkv_rotload_rotary")),
                (0, 0)
            );
            assert_eq!(
                (count("attention_mma_bwd_dq"), count("attention_mma_bwd_dkv"), count("rotary_inverse")),
                (0, 0, 0)
            );
            assert_eq!((count("rotary"), count("attention_mma_fwd"), count("attention_wgmma_fwd_o16")), (0, 0, 16));
            let turned: usize = by.iter().filter(|x| x.0.contains("_bf16rot")).map(|x| x.1).sum();
            assert_eq!(turned, 16);
        }
        let expected = if s == "bob" { BOB_LAUNCHES } else { COPPELIUS_LAUNCHES };
        assert_eq!(l.launch_count(0), expected, "{s}");
    }
}

const BOB_LAUNCHES: usize = 15;
const COPPELIUS_LAUNCHES: usize = 598;

/// With chain epilogues everywhere (`LowerOptions::chain_epilogues`; by default over deep grids
/// only, which one context's are not), each block's gated GELU backward
/// runs in the epilogue of the product of its dh, which is then never stored: d_up and d_gate
/// stored as bf16 and gelu(gate) recomputed, one launch fewer a block.
#[test]
fn chain_epilogues_take_the_gated_gelu_backward_into_the_dh_products() {
    let c = alpha_systems::coppelius::Coppelius::default();
    let program = c.learner(10).training_program(c.model(1).unwrap()).unwrap();
    let config = CudaConfig { chain_epilogues: ChainEpilogues::Everywhere, ..CudaConfig::default() };
    let l = lower_program(&program, &config).unwrap();
    check_pointers(&l);
    let by = alpha_cuda::lower::launches_by_kernel(&l, 0);
    let chained: usize = by
        .iter()
        .filter(|x| x.0.starts_with("gemm_rc_bf16_store_") && x.0.contains("_then_gelui2_"))
        .map(|x| x.1)
        .sum();
    let chains: usize = by.iter().filter(|x| x.0.starts_with("ew")).map(|x| x.1).sum();
    assert_eq!((chained, chains), (16, 1), "{by:?}");
    assert_eq!(l.launch_count(0), COPPELIUS_LAUNCHES - 16);
}

/// At sixteen contexts the gated unit's `gelu(gate) · up`, stored as bf16, is written by the up
/// half's product (the StoreMul epilogue): its R is the gate product, whose GELU it computes
/// (the gate product then stores no GELU output: the backward recomputes it too), its U the
/// cast's slot that the down product reads.
#[test]
fn sixteen_contexts_multiply_the_gated_halves_in_the_up_products() {
    let c = alpha_systems::coppelius::Coppelius::default();
    let l =
        lower_program(&c.learner(10).training_program(c.model(16).unwrap()).unwrap(), &CudaConfig::default()).unwrap();
    check_pointers(&l);
    let names: Vec<&str> = l.phases[0].iter().map(|x| l.kernels[x.kernel].name.as_str()).collect();
    let fused: Vec<usize> = (0..names.len()).filter(|&i| names[i].contains("_storemul")).collect();
    assert_eq!(fused.len(), 16);
    assert_eq!(names.iter().filter(|n| **n == "pw_mul_v4").count(), 0);
    // Every LayerNorm backward's pass 1 in its input gradient, and their pass 2 in one launch
    // after the last (before the optimizer reads the gradients).
    let count = |name: &str| names.iter().filter(|n| **n == name).count();
    assert_eq!((count("layernorm_bwd_params"), count("layernorm_bwd_params_finish")), (0, 0));
    assert_eq!((count("layernorm_bwd_dx_add_partials_bf16"), count("layernorm_bwd_params_finish_multi")), (31, 1));
    let fold = names.iter().position(|n| *n == "layernorm_bwd_params_finish_multi").unwrap();
    let last_ln = names.iter().rposition(|n| n.starts_with("layernorm_bwd_dx")).unwrap();
    let first_opt = names.iter().position(|n| n.starts_with("sumsq")).unwrap();
    assert!(last_ln < fold && fold < first_opt, "{last_ln} < {fold} < {first_opt}");
    // The catalog holds only launched kernels (not the gate product's GELU-storing one, which
    // its launch had before its output was found unread).
    let launched = |i: usize| l.phases.iter().flatten().any(|x| x.kernel == i);
    assert!((0..l.kernels.len()).all(launched));
    assert!(!l.kernels.iter().any(|k| k.name.contains("_store_gelu")));
    let gelu_gemms =
        names.iter().filter(|n| n.starts_with("gemm_") && n.contains("_gelu") && !n.contains("_then_")).count();
    assert_eq!(gelu_gemms, 16, "GELU only in the StoreMul epilogues");
    // Over this deep grid the gated GELU's backward runs in the dh products' epilogues.
    let chained = names.iter().filter(|n| n.starts_with("gemm_rc_bf16_store_then_gelui2_")).count();
    assert_eq!((chained, names.iter().filter(|n| n.starts_with("ewh_")).count()), (16, 0));
    for &i in &fused {
        // One gated launch computes the gate (stored at R) and the up product (C) from the same
        // A tile and multiplies on registers; U is what the next launch (the down product)
        // reads as A, and the gate is read again only by a later launch (the backward's).
        let (up, down) = (&l.phases[0][i], &l.phases[0][i + 1]);
        assert!(names[i].ends_with("_storemul_gelu_tma_s3_gated"), "{}", names[i]);
        assert_eq!(up.args.len(), 13 + 4, "u and three tensor maps (A, B, the gate's B)");
        assert_ne!(up.args[3], up.args[2], "R (the gate) apart from C (the up product)");
        assert_eq!(up.args[13], down.args[0], "U = the down product's A");
        assert!(l.phases[0][i + 1..].iter().any(|x| x.args.contains(&up.args[3])), "the gate read later");
    }
    // No gate product launched alone (the one plain rr launch left is the logits' input gradient,
    // its 16,384 rows stored through shared memory a row a warp).
    assert_eq!((count("gemm_rr_bf16_store_tma_s3"), count("gemm_rr_bf16_store_tma_s3_rows")), (0, 1));
    // The 44-tile weight gradients (gate, up, down) in 3 parts of uneven K: one wave of blocks.
    let kparts: Vec<_> = (0..names.len()).filter(|&i| names[i] == "gemm_cr_bf16_store_tma_kparts").collect();
    assert_eq!(kparts.len(), 48);
    assert!(kparts.iter().all(|&i| l.phases[0][i].grid.2 == 3 && names[i + 1] == "gemm_splitk3_store_v4"));
    // Each gated unit's input gradient, dgate·W_gateᵀ + dup·W_upᵀ, in one paired launch over
    // K = 2 × 1408, storing what the LayerNorm backward reads.
    let pairs: Vec<_> = (0..names.len()).filter(|&i| names[i] == "gemm_rc_bf16_store_tma_s3_kpair_rows").collect();
    assert_eq!(pairs.len(), 16);
    for &i in &pairs {
        let p = &l.phases[0][i];
        assert_eq!((p.args.len(), &p.args[6]), (13 + 4, &LArg::U32(2816)));
        let reader = (i + 1..names.len()).find(|&j| names[j].starts_with("layernorm_bwd")).unwrap();
        assert!(l.phases[0][reader].args.contains(&p.args[2]), "the LayerNorm backward reads the sum");
    }
}

/// Coppelius's forward rotaries, turned on load: the attention forward and both backward
/// kernels get the pre-rotary q and k (the Rotaries' inputs) and the host-computed rotary table,
/// and the plan keeps those tensors unwritten from their Rotary's position through the backward.
#[test]
fn forward_rotaries_are_turned_on_load_from_kept_pre_rotary_tensors() {
    use alpha_ir::{Op, Value};
    // (With the attention reading f32 q, k, v: the bf16 path is `the_projection_stores_...`.)
    let c = alpha_systems::coppelius::Coppelius::default();
    let program = c.learner(10).training_program(c.model(1).unwrap()).unwrap();
    let config = CudaConfig { bf16_attention: false, ..CudaConfig::default() };
    let l = lower_program(&program, &config).unwrap();
    let plan = &l.plan;
    let g = &plan.program.graph;
    let nodes: Vec<u32> = plan.phases[0].kernels.iter().map(|k| k.node).collect();
    let pos: std::collections::HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let ptr = |v: Value| LArg::Ptr(plan.slot(v).offset);
    let span = |v: Value| {
        let s = plan.slot(v);
        (s.offset, s.offset + g.ty(v).numel() * g.dtype(v).size())
    };
    let overlap = |a: (usize, usize), b: (usize, usize)| a.0 < b.1 && b.0 < a.1;
    // The Rotary behind attention operand `k` of node `a`: (its node, its input).
    let rotary_of = |a: u32, k: usize| -> (u32, Value) {
        let r = g.nodes[a as usize].inputs[k].node;
        let rn = &g.nodes[r as usize];
        assert!(matches!(rn.op, Op::Rotary { inverse: false, .. }), "operand {k} of %{a} is not a forward Rotary");
        (r, rn.inputs[0])
    };
    let (mut fwd, mut bwd) = (0, 0);
    for launch in &l.phases[0] {
        let name = l.kernels[launch.kernel].name.as_str();
        let Some(id) = launch.node else { continue };
        let node = &g.nodes[id as usize];
        // (the forward Attention, q's argument, q_tab's argument)
        let (attn, args_q, args_tab) = match name {
            "attention_mma_fwd_rotload" => {
                fwd += 1;
                (id, 2, 5)
            }
            "attention_mma_bwd_dq_rotload_rotary" | "attention_mma_bwd_dkv_rotload_rotary" => {
                bwd += 1;
                (node.inputs[3].node, 2, 9)
            }
            "attention_mma_bwd_rotload_rotary" => {
                bwd += 1;
                (node.inputs[3].node, 4, 12)
            }
            _ => continue,
        };
        let (rq, q_pre) = rotary_of(attn, 0);
        let (rk, k_pre) = rotary_of(attn, 1);
        let qk = (launch.args[args_q], launch.args[args_q + 1]);
        assert_eq!(qk, (ptr(q_pre), ptr(k_pre)), "{}", l.describe(launch));
        // q_tab and k_tab: the rotary table of (T, D, base), written once at load.
        let s = g.shape(q_pre);
        let Op::Rotary { base, .. } = g.nodes[rq as usize].op else { unreachable!() };
        let want: Vec<u8> =
            alpha_cuda::kernels::rotary::table(s[2], s[3], base).iter().flat_map(|x| x.to_le_bytes()).collect();
        for a in [launch.args[args_tab], launch.args[args_tab + 1]] {
            let LArg::Ptr(tab) = a else { panic!("table pointer") };
            assert!(tab >= plan.arena && l.inits.iter().any(|(o, b)| *o == tab && *b == want));
        }
        if name == "attention_mma_fwd_rotload" {
            continue;
        }
        // Nothing from the Rotary through the backward writes the pre-rotary tensors, the
        // backward's own stores included (dk may lie exactly on the pre-rotary k: each row is
        // read, then written, by one thread).
        let b = id;
        for (r, x) in [(rq, q_pre), (rk, k_pre)] {
            let xr = span(x);
            for &n in &nodes[pos[&r] + 1..pos[&b]] {
                for k in 0..g.nodes[n as usize].outputs.len() {
                    let w = Value { node: n, index: k as u16 };
                    assert!(!overlap(span(w), xr), "%{n} ({}) writes over {x}", g.nodes[n as usize].op.family());
                }
            }
            let dv = Value { node: b, index: 2 };
            assert!(!overlap(span(dv), xr), "dv of %{b} lies over {x}");
            if name == "attention_mma_bwd_rotload_rotary" {
                // Both passes at once: neither dq nor dk may touch a pre-rotary tensor.
                for (a, input) in [(0, 0), (1, 1)] {
                    let LArg::Ptr(dst) = launch.args[a] else { panic!() };
                    let dlen = g.ty(node.inputs[input]).numel() * 4;
                    assert!(!overlap((dst, dst + dlen), xr), "{} stores over {x}", l.describe(launch));
                }
                continue;
            }
            let LArg::Ptr(dst) = launch.args[0] else { panic!() };
            let dlen = g.ty(node.inputs[if name.contains("_dq_") { 0 } else { 1 }]).numel() * 4;
            let exact_k = name.contains("_dkv_") && x == k_pre && dst == xr.0;
            assert!(!overlap((dst, dst + dlen), xr) || exact_k, "{} stores over {x}", l.describe(launch));
        }
    }
    assert_eq!((fwd, bwd), (16, 16));
}

/// Coppelius's q/k/v projections store q and k turned and all three as bf16, split into heads,
/// and the attention kernels read them there: each at half its f32 view's offset within the
/// heads tensor; the projection's last argument is the rotary table; no attention output lies on
/// the heads tensor.
#[test]
fn the_projection_stores_turned_bf16_heads_that_attention_reads() {
    use alpha_ir::{Op, Value};
    let l = training("coppelius");
    let plan = &l.plan;
    let g = &plan.program.graph;
    let span = |v: Value| {
        let s = plan.slot(v);
        (s.offset, s.offset + g.ty(v).numel() * g.dtype(v).size())
    };
    // Each turned projection's heads tensor (its C argument) and table.
    let mut heads = vec![];
    for launch in &l.phases[0] {
        let name = l.kernels[launch.kernel].name.as_str();
        if !name.contains("_bf16rot") {
            continue;
        }
        let (LArg::Ptr(c), Some(LArg::Ptr(tab))) = (launch.args[2], launch.args.last().copied()) else { panic!() };
        let want: Vec<u8> =
            alpha_cuda::kernels::rotary::table(1024, 64, 10000.0).iter().flat_map(|x| x.to_le_bytes()).collect();
        assert!(l.inits.iter().any(|(o, b)| *o == tab && *b == want), "{}", l.describe(launch));
        heads.push(c);
    }
    assert_eq!(heads.len(), 16);
    let (mut fwd, mut bwd) = (0, 0);
    for launch in &l.phases[0] {
        let name = l.kernels[launch.kernel].name.as_str();
        let Some(id) = launch.node else { continue };
        let node = &g.nodes[id as usize];
        let (attn, at_q) = match name {
            "attention_wgmma_fwd_o16" => {
                fwd += 1;
                (id, 2)
            }
            "attention_wgmma_bwd_rotary_merged" => {
                bwd += 1;
                (node.inputs[3].node, 4)
            }
            _ => continue,
        };
        // The graph's q, k (through their Rotaries) and v of the forward Attention.
        let an = &g.nodes[attn as usize];
        let pre = |k: usize| {
            let r = &g.nodes[an.inputs[k].node as usize];
            assert!(matches!(r.op, Op::Rotary { inverse: false, .. }));
            r.inputs[0]
        };
        let views = [pre(0), pre(1), an.inputs[2]];
        let p = *heads.iter().filter(|&&p| p <= span(views[0]).0).max().expect("a heads tensor below q");
        let tensor = (p, p + 3 * (span(views[0]).1 - span(views[0]).0));
        for (j, v) in views.iter().enumerate() {
            let (lo, hi) = span(*v);
            assert!(lo >= tensor.0 && hi <= tensor.1, "view {j} outside the heads tensor");
            assert_eq!(launch.args[at_q + j], LArg::Ptr(p + (lo - p) / 2), "{}", l.describe(launch));
        }
        // The forward's o and lse; the backward's one merged bf16 gradient (dq, dk and dv
        // arguments alike), 3 · numel bf16.
        let outs: Vec<(LArg, usize)> = if at_q == 2 {
            (0..2).map(|k| (launch.args[k], g.ty(Value { node: id, index: k as u16 }).numel() * 4)).collect()
        } else {
            assert!(launch.args[0] == launch.args[1] && launch.args[1] == launch.args[2]);
            vec![(launch.args[0], 3 * g.ty(Value { node: id, index: 0 }).numel() * 2)]
        };
        for (a, n) in outs {
            let LArg::Ptr(o) = a else { panic!() };
            assert!(o + n <= tensor.0 || o >= tensor.1, "an output of {} lies on the heads tensor", l.describe(launch));
        }
    }
    assert_eq!((fwd, bwd), (16, 16));
}

/// Every distinct kernel of Bob's, Coppelius's, KickDelta's and Diakosmos's (one block, at one
/// and 32 windows) training programs, and the rotating attention kernels at the GPU check's shape (fp32 and
/// tensor-core), assemble for sm_90a with ptxas 13 (the PyPI wheel at `PTXAS` or
/// `$ALPHA_PTXAS`), the tensor-core attention kernels without spilling registers; prints
/// "skipped" where ptxas is absent.
#[test]
fn every_training_kernel_assembles_with_ptxas() {
    const PTXAS: &str = "/tmp/nvccwhl/ex/nvidia/cu13/bin/ptxas";
    let ptxas = std::env::var("ALPHA_PTXAS").unwrap_or_else(|_| PTXAS.to_string());
    if !std::path::Path::new(&ptxas).exists() {
        println!("ptxas: skipped ({ptxas} not found)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("alpha-ptxas-{}", std::process::id()));
    let mut files = vec![];
    for s in ["bob", "coppelius"] {
        files.extend(training(s).dump_ptx(&dir).unwrap());
    }
    // The recurrences' kernels: KickDelta's delta rule, Diakosmos's harmonic scan.
    files.extend(training_of(&alpha_systems::kickdelta::KickDelta, 2).dump_ptx(&dir).unwrap());
    let diakosmos = alpha_systems::diakosmos::Diakosmos { blocks: 1, ..Default::default() };
    files.extend(training_of(&diakosmos, 1).dump_ptx(&dir).unwrap());
    // At 32 windows its weight gradients' K (65,536) splits in parts on the TMA engine.
    files.extend(training_of(&diakosmos, 32).dump_ptx(&dir).unwrap());
    // GPT-2's (its cross-entropy over padded rows, its bias chains) and Polf's (RMSNorm).
    files
        .extend(training_of(&alpha_systems::gpt2::Gpt2 { layers: 2, ..Default::default() }, 1).dump_ptx(&dir).unwrap());
    files.extend(training_of(&alpha_systems::polf::Polf::default(), 1).dump_ptx(&dir).unwrap());
    // GPT-2's tall kernels at sixteen contexts: the logits stored bf16 by the head's product,
    // the GELU backward summing its bias gradient's columns.
    files.extend(
        training_of(&alpha_systems::gpt2::Gpt2 { layers: 1, ..Default::default() }, 16).dump_ptx(&dir).unwrap(),
    );
    // The attention kernels at the GPU fusion check's shape (GQA, a partial tile), every way of
    // turning q and k on load.
    use alpha_cuda::kernels::attention::{self, Dims};
    let dims = Dims { b: 1, h: 4, g: 2, t: 200, d: 64, scale: 0.125, softcap: None };
    for (i, load) in [[true, true], [true, false], [false, true]].into_iter().enumerate() {
        for r in [false, true] {
            for k in [
                attention::forward_kernel_rotating(&dims, load),
                attention::backward_dq_kernel_rotating(&dims, r, load),
                attention::backward_dkv_kernel_rotating(&dims, r, load),
            ] {
                let f = dir.join(format!("check_{i}_{r}_{}.ptx", k.name));
                std::fs::write(&f, k.render()).unwrap();
                files.push(f);
            }
        }
    }
    // Their tensor-core forms, every option (and a soft-cap), which must not spill.
    use alpha_cuda::kernels::attention::mma as attention_mma;
    let capped = Dims { softcap: Some(30.0), ..dims };
    for (i, load) in [[false, false], [true, true], [true, false], [false, true]].into_iter().enumerate() {
        for r in [false, true] {
            for (j, d) in [dims, capped].iter().enumerate() {
                for k in [
                    attention_mma::forward_kernel_rotating(d, load),
                    attention_mma::backward_dq_kernel_rotating(d, r, load),
                    attention_mma::backward_dkv_kernel_rotating(d, r, load),
                ] {
                    let f = dir.join(format!("check_mma_{i}_{r}_{j}_{}.ptx", k.name));
                    std::fs::write(&f, k.render()).unwrap();
                    files.push(f);
                }
            }
        }
    }
    let mut failed = vec![];
    for f in &files {
        let out = std::process::Command::new(&ptxas)
            .args(["-arch=sm_90a", "-v", "-o", "/dev/null"])
            .arg(f)
            .output()
            .expect("running ptxas");
        let info = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            failed.push(format!("{}: {info}", f.display()));
        } else if f.to_string_lossy().contains("attention_mma")
            && !info.contains("0 bytes spill stores, 0 bytes spill loads")
        {
            failed.push(format!("{} spills registers: {info}", f.display()));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("ptxas: {} of {} kernels assembled for sm_90a", files.len() - failed.len(), files.len());
    assert!(failed.is_empty(), "ptxas rejected:\n{}", failed.join("\n"));
}

/// The LayerNorm parameter pass sums rows in the CPU reference's bands, so its sums are the
/// reference's operation for operation.
#[test]
fn layernorm_bands_are_the_references() {
    assert_eq!(alpha_cuda::kernels::layernorm::BAND, alpha_cpu::kernels::norms::BAND);
}

/// At one context and at sixteen the q/k/v projection and the attention-output gradient store
/// their products split into heads, so the two Permutes of each block never run: 32 head-split
/// products, and no copy is left (the last, the broadcast of the cross-entropy's scale, went
/// with its separate backward). The layout of the stores is checked on the GPU by
/// `kernel_check --only fusion`, the gates and the 30-step checkpoint (the same bits as with
/// the Permutes).
#[test]
fn the_projections_store_the_head_split_from_the_products() {
    let c = alpha_systems::coppelius::Coppelius::default();
    for batch in [1usize, 16] {
        let l =
            lower_program(&c.learner(10).training_program(c.model(batch).unwrap()).unwrap(), &CudaConfig::default())
                .unwrap();
        check_pointers(&l);
        let by = alpha_cuda::lower::launches_by_kernel(&l, 0);
        let tag = format!("_heads_b{batch}t1024h8d64");
        let heads: usize = by.iter().filter(|x| x.0.contains(&tag)).map(|x| x.1).sum();
        let copies: usize = by.iter().filter(|x| x.0.starts_with("pw_copy")).map(|x| x.1).sum();
        assert_eq!((heads, copies), (32, 0), "{by:?}");
    }
}

/// At sixteen contexts the product computing attention's output gradient stores it as bf16
/// heads with delta (R = the attention output, U = delta, both in memory no other launch
/// reuses), no delta launch runs, and each attention backward reads that delta and bf16 dO.
/// One context's 64 × 64 tiles keep the delta launch.
#[test]
fn the_output_gradients_product_stores_attentions_delta_at_sixteen_contexts() {
    let c = alpha_systems::coppelius::Coppelius::default();
    for (batch, fused) in [(16, 16), (1, 0)] {
        let l =
            lower_program(&c.learner(10).training_program(c.model(batch).unwrap()).unwrap(), &CudaConfig::default())
                .unwrap();
        check_pointers(&l);
        let launches = &l.phases[0];
        let names: Vec<&str> = launches.iter().map(|x| l.kernels[x.kernel].name.as_str()).collect();
        let products: Vec<usize> = (0..names.len()).filter(|&i| names[i].contains("_delta_tma")).collect();
        let delta_launches = names.iter().filter(|n| n.starts_with("attention_mma_bwd_delta")).count();
        assert_eq!((products.len(), delta_launches), (fused, 16 - fused), "{batch} contexts");
        for &i in &products {
            let p = &launches[i];
            let backward = (i..names.len()).find(|&j| names[j].starts_with("attention_wgmma_bwd")).unwrap();
            let b = &launches[backward];
            // The backward's params: (dq, dk, dv, delta, q, k, v, o, lse, do, do16, ...).
            assert_eq!(p.args[13], b.args[3], "delta");
            assert_eq!(p.args[2], b.args[10], "dO as bf16");
            assert_eq!(p.args[3], b.args[7], "R = the attention output");
            assert!(!launches[i + 1..backward]
                .iter()
                .any(|x| x.args.contains(&p.args[2]) || x.args.contains(&p.args[13])));
        }
    }
}

/// Polf's training step (one context, its four-role learner with Muon's batched stacks) lowers
/// whole: every launch inside the arena and within the launch budget, one attention a block on
/// grouped heads with the rotaries of q and k turned on load, and its 38 RMSNorms each one
/// launch forward and one backward — the stream's (rows of 512) a block a row, the q and k
/// heads' (rows of 64) a warp a row, the gain passes never launched since every gain is a
/// constant whose gradient nothing reads, the stream norms that only products read stored as
/// bf16 by the norm, and most stream backwards adding the residual gradient as they store. The programs of the gates lower too.
#[test]
fn polf_lowers_its_training_step_with_its_rmsnorms() {
    let p = alpha_systems::polf::Polf::default();
    let program = p.learner(20_000).training_program(p.model(1).unwrap()).unwrap();
    let l = lower_program(&program, &CudaConfig::default()).unwrap();
    check_pointers(&l);
    let g = &l.plan.program.graph;
    let launched = |family: &str| {
        l.phases.iter().flatten().filter(|x| x.node.is_some_and(|n| g.nodes[n as usize].op.family() == family)).count()
    };
    assert_eq!(launched("attention-forward"), 9, "one attention a block");
    assert_eq!(launched("rotary"), 0, "q and k are turned as the attention kernels load them");
    let norms = g.nodes.iter().filter(|n| matches!(n.op, Op::RmsNorm { .. })).count();
    // x0, then per block the two stream norms and the q and k head norms, then the last.
    assert_eq!(norms, 1 + 9 * 4 + 1);
    assert_eq!((launched("rmsnorm-forward"), launched("rmsnorm-backward")), (norms, norms));
    let by: std::collections::HashMap<String, usize> =
        alpha_cuda::lower::launches_by_kernel(&l, 0).into_iter().collect();
    let count = |name: &str| by.get(name).copied().unwrap_or(0);
    // The heads: 9 blocks' q and k, forward and backward, a warp a row.
    assert_eq!(count("rmsnorm_fwd_warp"), 18, "{by:?}");
    assert_eq!(count("rmsnorm_bwd_dx_warp"), 18, "{by:?}");
    // The stream: the block norms and the last, read by products alone, stored as bf16;
    // x0, read by every block's mix, in f32.
    assert_eq!((count("rmsnorm_fwd_bf16"), count("rmsnorm_fwd")), (19, 1), "{by:?}");
    // The stream's backwards, 18 of them adding the residual gradient as they store (the Add
    // after them is no launch; the plan puts each sum exactly on a gradient that dies there).
    assert_eq!((count("rmsnorm_bwd_dx"), count("rmsnorm_bwd_dx_add")), (2, 18), "{by:?}");
    assert!(by.keys().all(|k| !k.starts_with("rmsnorm_bwd_params")), "{by:?}");
    // Every RMSNorm backward reads its node's slots and writes dx's, or the sum's of the Add
    // after it, adding that Add's other operand.
    for launch in l.phases.iter().flatten() {
        let Some(n) = launch.node.filter(|&n| matches!(g.nodes[n as usize].op, Op::RmsNormBackward)) else {
            continue;
        };
        let node = &g.nodes[n as usize];
        let ptr = |v: alpha_ir::Value| LArg::Ptr(l.plan.slot(v).offset);
        let dx = alpha_ir::Value { node: n, index: 0 };
        let [x, gain, rstd, dy] = [0, 1, 2, 3].map(|i| node.inputs[i]);
        let want: Vec<LArg> = match l.kernels[launch.kernel].name.ends_with("_add") {
            false => [dx, x, gain, rstd, dy].map(ptr).to_vec(),
            true => {
                let add = g.nodes.iter().position(|a| a.inputs.contains(&dx)).expect("the Add reading dx") as u32;
                let sum = alpha_ir::Value { node: add, index: 0 };
                let r = *g.nodes[add as usize].inputs.iter().find(|&&v| v != dx).expect("the residual");
                assert_eq!(g.nodes[add as usize].op, Op::Binary(alpha_ir::Binary::Add));
                assert!(!l.phases[0].iter().any(|x| x.node == Some(add)), "the Add is no launch of its own");
                [sum, x, gain, rstd, dy, r].map(ptr).to_vec()
            }
        };
        assert_eq!(launch.args, want, "{}", l.describe(launch));
    }

    // What `alpha check all polf --device cuda --batch 1` compiles: the forward and causality
    // gates' inference program, the gradient gate's, and the update gate's.
    for program in [
        alpha_learn::inference_program(p.model(1).unwrap()).unwrap(),
        alpha_learn::gradient_program(p.model(1).unwrap()).unwrap(),
        p.learner(20_000).update_program(&p.model(1).unwrap()).unwrap(),
    ] {
        check_pointers(&lower_program(&program, &CudaConfig::default()).unwrap());
    }
}

/// `system`'s training step at `batch`, lowered; its gates' forward and gradient programs
/// (what `alpha check` runs on the device) must lower too.
fn training_of(system: &dyn System, batch: usize) -> Lowered {
    let config = CudaConfig::default();
    for program in [
        alpha_learn::inference_program(system.model(batch).unwrap()).unwrap(),
        alpha_learn::gradient_program(system.model(batch).unwrap()).unwrap(),
    ] {
        let l = lower_program(&program, &config).unwrap_or_else(|e| panic!("{}: {e:#}", system.name()));
        check_pointers(&l);
    }
    let program = system.learner(10).training_program(system.model(batch).unwrap()).unwrap();
    lower_program(&program, &config).unwrap_or_else(|e| panic!("{}: {e:#}", system.name()))
}

/// The launches of kernel `name`, in order.
fn launches_of<'l>(l: &'l Lowered, name: &str) -> Vec<(usize, &'l alpha_cuda::lower::Launch)> {
    l.phases[0].iter().enumerate().filter(|(_, x)| l.kernels[x.kernel].name == name).collect()
}

/// A recurrence's backward launch (`bwd`, at `at`) and the window sum right after it: the
/// backward's three scratch pointers (the parts, the checkpoints, the replayed chunk, from
/// argument `first`) are distinct and lie past the plan's values, and the sum reads the parts
/// the backward wrote, into the node's shared gradient (output `shared`), one block a window.
fn check_backward_then_window_sum(l: &Lowered, at: usize, first: usize, shared: u16, blocks: u32) {
    let (bwd, sum) = (&l.phases[0][at], &l.phases[0][at + 1]);
    assert_eq!(l.kernels[sum.kernel].name, "scan_window_sum", "{}", l.describe(bwd));
    assert_eq!(sum.node, bwd.node);
    assert_eq!(bwd.grid, (blocks, 1, 1));
    let ptr = |a: &LArg| match *a {
        LArg::Ptr(o) => o,
        other => panic!("{other:?} is not a pointer"),
    };
    let scratch: Vec<usize> = bwd.args[first..first + 3].iter().map(ptr).collect();
    assert!(scratch.iter().all(|&o| o >= l.plan.arena), "{scratch:?} within the plan's {} bytes", l.plan.arena);
    assert!(scratch[0] != scratch[1] && scratch[1] != scratch[2] && scratch[0] != scratch[2]);
    assert_eq!(ptr(&sum.args[1]), scratch[0]);
    let out = alpha_ir::Value { node: bwd.node.unwrap(), index: shared };
    assert_eq!(ptr(&sum.args[0]), l.plan.slot(out).offset);
}

/// KickDelta's training step lowers at its default batch (32) and the gate's (2): its delta
/// rule runs as the forward kernel (one thread a window's memory row), the backward (one block
/// a window) and dm0's window sum right after it.
#[test]
fn kickdelta_lowers_its_delta_rule_to_the_gpu_kernels() {
    let kd = alpha_systems::kickdelta::KickDelta;
    for batch in [32, 2] {
        let l = training_of(&kd, batch);
        check_pointers(&l);
        let fwd = launches_of(&l, "delta_rule_fwd");
        let bwd = launches_of(&l, "delta_rule_bwd");
        assert_eq!((fwd.len(), bwd.len()), (1, 1), "batch {batch}");
        // B·V = batch·256 threads of 256 a block.
        assert_eq!(fwd[0].1.grid, (batch as u32, 1, 1));
        check_backward_then_window_sum(&l, bwd[0].0, 4, 4, batch as u32);
        assert!(fwd[0].0 < bwd[0].0);
        let text = l.kernels[bwd[0].1.kernel].render();
        assert!(text.contains(".extern .shared") && text.contains("bar.sync 0"), "{text}");
    }
}

/// Diakosmos's training step lowers, in a small geometry and the seed's (14 blocks, context
/// 2,048) at the gate's batch: each block's harmonic scan runs as the forward kernel and the
/// backward (one block a window's head), dγ's window sum right after it; the blocks share the
/// modules.
#[test]
fn diakosmos_lowers_its_harmonic_scans_to_the_gpu_kernels() {
    use alpha_systems::diakosmos::Diakosmos;
    let small = Diakosmos { blocks: 2, phasors: 8, harmonics: 4, context: 64, bf16: true };
    for (system, batch) in [(small, 4), (Diakosmos::default(), 1)] {
        let l = training_of(&system, batch);
        check_pointers(&l);
        let fwd = launches_of(&l, "harmonic_scan_fwd");
        let bwd = launches_of(&l, "harmonic_scan_bwd");
        assert_eq!((fwd.len(), bwd.len()), (system.blocks, system.blocks));
        let heads = alpha_systems::diakosmos_wire::GROUPS;
        for &(at, _) in &bwd {
            check_backward_then_window_sum(&l, at, 3, 3, (batch * heads) as u32);
        }
        let modules = |v: &[(usize, &alpha_cuda::lower::Launch)]| {
            v.iter().map(|(_, x)| x.kernel).collect::<std::collections::BTreeSet<_>>().len()
        };
        assert_eq!((modules(&fwd), modules(&bwd)), (1, 1));
    }
}

/// The health variant of the step lowers for the GPU, and adding it leaves the ordinary step's
/// launches as they were (the same kernels, grids and blocks in the same order): ordinary steps
/// pay nothing for it. Over Coppelius (AdamW in place, every fusion), the miniatures with Muon
/// and with all three optimizers, and an update phase after accumulation.
#[test]
fn the_health_phase_lowers_and_leaves_the_step_as_it_was() {
    // Each launch as its kernel's name, grid and block.
    let shape = |l: &Lowered, p: usize| -> Vec<String> {
        l.phases[p].iter().map(|x| format!("{} {:?} {:?}", l.kernels[x.kernel].name, x.grid, x.block)).collect()
    };
    let coppelius = alpha_systems::coppelius::Coppelius::default();
    let mixed = alpha_systems::find("mini-mixed").unwrap();
    let muon = alpha_systems::find("mini-muon").unwrap();
    let cases: Vec<(&dyn System, usize, usize)> =
        vec![(&coppelius, 1, 1), (mixed.as_ref(), 2, 1), (muon.as_ref(), 2, 1), (mixed.as_ref(), 2, 2)];
    for (system, batch, accumulation) in cases {
        let mut learner = system.learner(10);
        learner.accumulation = accumulation;
        let plain =
            lower_program(&learner.training_program(system.model(batch).unwrap()).unwrap(), &CudaConfig::default())
                .unwrap();
        let (program, rows) = learner.training_program_with_health(system.model(batch).unwrap()).unwrap();
        assert!(rows.len() >= 4 * program.graph.params().len(), "{}: {} rows", system.name(), rows.len());
        let with = lower_program(&program, &CudaConfig::default()).unwrap();
        check_pointers(&with);
        assert_eq!(with.phases.len(), plain.phases.len() + 1, "{}", system.name());
        for p in 0..plain.phases.len() {
            assert_eq!(shape(&with, p), shape(&plain, p), "{}: phase {p} changed", system.name());
        }
        let health = with.phases.len() - 1;
        assert!(with.launch_count(health) > plain.launch_count(plain.phases.len() - 1), "{}", system.name());
    }
}

/// Diakosmos's training step at 64 windows (its measured geometry on the H200): each f32
/// weight gradient `xᵀ·dy` over every position (M 8, N 190, K = 131,072, 7 groups: 84 blocks
/// of the simple kernel, each thread a chain over all of K) runs as 12 parts of K into scratch
/// and their fixed-order sum (10,640 outputs, four a thread: 11 blocks); its products with a
/// short K or many outputs keep one launch.
#[test]
fn diakosmos_weight_gradients_split_k_at_64_windows() {
    use alpha_systems::diakosmos::Diakosmos;
    let system = Diakosmos::default();
    let program = system.learner(10).training_program(system.model(64).unwrap()).unwrap();
    let l = lower_program(&program, &CudaConfig::default()).unwrap();
    check_pointers(&l);
    let g = &l.plan.program.graph;
    // Each simple product's shape (layout, M, N, K, batch) and its launches: kernel and grid.
    let mut products: std::collections::BTreeMap<String, Vec<Vec<String>>> = Default::default();
    let launches = &l.phases[0];
    for (i, x) in launches.iter().enumerate() {
        let name = &l.kernels[x.kernel].name;
        let Some(id) = x.node.filter(|_| name.starts_with("gemm_simple")) else { continue };
        let node = &g.nodes[id as usize];
        let Op::MatMul { ta, tb } = node.op else { panic!("{name} for {:?}", node.op) };
        let (sa, os) = (&g.node(node.inputs[0]).outputs[0].shape, &node.outputs[0].shape);
        let r = sa.len();
        let (m, k) = if ta { (sa[r - 1], sa[r - 2]) } else { (sa[r - 2], sa[r - 1]) };
        let batch: usize = sa[..r - 2].iter().product();
        let layout = format!("{}{}", if ta { "c" } else { "r" }, if tb { "c" } else { "r" });
        let shape = format!("{layout}-m{m}-n{}-k{k}-b{batch}", os[os.len() - 1]);
        let mut these = vec![format!("{name} {:?}", x.grid)];
        if let Some(next) = launches.get(i + 1).filter(|n| n.node == x.node) {
            these.push(format!("{} {:?}", l.kernels[next.kernel].name, next.grid));
        }
        products.entry(shape).or_default().push(these);
    }
    for (shape, runs) in &products {
        println!("{shape}: {} × {:?}", runs.len(), runs[0]);
    }
    let runs = |shape: &str| products.get(shape).cloned().unwrap_or_default();
    let split = runs("cr-m8-n190-k131072-b7");
    assert_eq!(split.len(), 28);
    for r in &split {
        assert_eq!(r, &["gemm_simple_deep_split12 (6, 1, 84)", "gemm_splitk12_store_v4 (11, 1, 1)"]);
    }
    // The thin products whole, each on its covering (simple.rs's `Product::tiling`).
    for (shape, launch) in [
        ("rc-m131072-n8-k190-b7", "gemm_simple_rows (1, 256, 7)"),
        // (Stored through C's row and head steps into the q/k/v gradient's Concat.)
        ("rr-m131072-n190-k8-b7", "gemm_simple_lanes4x6_c3990x190 (1, 8192, 7)"),
    ] {
        let whole = runs(shape);
        assert_eq!(whole.len(), 28, "{shape}");
        assert!(whole.iter().all(|r| r == &[launch]), "{shape}: {whole:?}");
    }
}

/// Each with the states its decode phase assigns: a key and a value cache a block for the
/// transformers; for Diakosmos a scan state a block and the head's running sum and count.
#[test]
fn decode_programs_lower_with_their_caches_written_back() {
    let systems: [(Box<dyn System>, usize); 3] = [
        (Box::new(alpha_systems::coppelius::Coppelius::default()), 2 * 16),
        (Box::new(alpha_systems::gpt2::Gpt2::default()), 2 * 12),
        (Box::new(alpha_systems::diakosmos::Diakosmos::default()), 14 + 2),
    ];
    for (system, carried) in systems {
        let decoder = system.decoder().expect("the system decodes").unwrap();
        let l = lower_program(&decoder.program, &CudaConfig::default()).unwrap();
        check_pointers(&l);
        // Assigned at the phase's end.
        assert_eq!(decoder.program.phases[0].assign.len(), carried, "{}", system.name());
        let products = l.phases[0].iter().filter(|x| l.kernels[x.kernel].name.starts_with("gemm_")).count();
        assert!(products > 0, "{}: the decode's products run as launches", system.name());
    }
}

/// GPT-2 at sixteen contexts lowers with its biases in its products and its attention on bf16
/// heads: every q/k/v projection adds its bias and stores bf16 heads (no bias add or permute
/// launch before attention), attention forward and backward run on the `wgmma` kernels, every
/// fc product adds its bias and the GELU in its epilogue, every GELU backward runs in its `dh`
/// product's epilogue storing only its bf16 result for the products and summing the f32 one's
/// columns for the bias gradient (which then only finishes), each attention backward stores
/// its gradients permuted as the bf16 cast the products read, with their column sums for the
/// q/k/v bias gradient (which only finishes), most LayerNorm backwards store the residual
/// gradient's bf16 copy, and every other bf16 cast of a tensor whose bias gradient sums its
/// columns is stored by that sum's first pass (the residual gradients no LayerNorm backward
/// copied): no cast launch reads a tensor a column sum reads; no permute launches at all; the
/// other 768-wide bias gradients finish the column sums of the LayerNorm backward before them.
#[test]
fn gpt2_lowers_with_its_biases_in_the_products_and_bf16_heads() {
    let s = alpha_systems::gpt2::Gpt2::default();
    let program = s.learner(20_000).training_program(s.model(16).unwrap()).unwrap();
    let l = lower_program(&program, &CudaConfig::default()).unwrap();
    check_pointers(&l);
    let by: std::collections::HashMap<String, usize> =
        alpha_cuda::lower::launches_by_kernel(&l, 0).into_iter().collect();
    let count = |name: &str| by.get(name).copied().unwrap_or(0);
    let layers = 12;
    assert_eq!(count("gemm_rr_bf16_store_heads_b16t1024h12d64_bf16_bias_tma_s3"), layers, "{by:?}");
    // The backward stores its gradients permuted to [B, T, 3, H, D] as bf16, with their column
    // sums: no permute or cast launches after it, and the bias gradient only finishes.
    let (fwd, bwd) = (count("attention_wgmma_fwd_o16"), count("attention_wgmma_bwd_merged_sums"));
    assert_eq!((fwd, bwd), (layers, layers), "{by:?}");
    assert_eq!(count("gemm_rr_bf16_store_then_addi0i1_gelus0_out0f1h_p0_row1_tma_s3"), layers, "{by:?}");
    assert_eq!(count("gemm_rc_bf16_store_then_gelugradi0_muli1s0_out1h_p1_colsum1_tma_s3"), layers, "{by:?}");
    // Each block's four weights rounded in one launch.
    assert_eq!(count("cast_multi_f32_bf16"), layers, "{by:?}");
    // The LayerNorm backwards that copy the residual gradient also sum its columns for the
    // bias gradient after them, which then only finishes.
    assert_eq!(count("layernorm_bwd_dx_add_partials_bf16"), 0, "{by:?}");
    let copied = count("layernorm_bwd_dx_add_partials_bf16_cols");
    assert!(copied >= 23, "{by:?}");
    // Of the 768-wide residual gradients whose columns are summed (two a layer: the final
    // LayerNorm's input gradient and 23 sums a LayerNorm backward adds), those no LayerNorm
    // backward copied (the q/k/v gradients' the attention backwards sum).
    assert_eq!(count("reduce_sum_columns_cast"), 2 * layers - copied, "{by:?}");
    let g = &l.plan.program.graph;
    let summed: std::collections::HashSet<alpha_ir::Value> = l.phases[0]
        .iter()
        .filter_map(|x| x.node)
        .filter(|&n| matches!(g.nodes[n as usize].op, Op::Reduce { .. }))
        .map(|n| g.nodes[n as usize].inputs[0])
        .collect();
    let casts_beside_sums = l.phases[0]
        .iter()
        .filter_map(|x| x.node)
        .filter(|&n| {
            matches!(g.nodes[n as usize].op, Op::Cast { .. }) && summed.contains(&g.nodes[n as usize].inputs[0])
        })
        .count();
    assert_eq!(casts_beside_sums, 0, "{by:?}");
    // Every 768-wide bias gradient either stores the cast or finishes a LayerNorm's column sums,
    // and every 3072-wide one finishes its product's: the first passes left are the position
    // embedding's and the q/k/v ones over their attention backward's partials (a chunk of
    // sixteen rows a row).
    assert_eq!(count("reduce_sum_columns"), 1 + layers, "{by:?}");
    // Switched off, each of those casts is a launch again, and each of those sums' first pass.
    let off =
        CudaConfig { column_casts: false, norm_column_sums: false, chain_column_sums: false, ..CudaConfig::default() };
    let apart = lower_program(&program, &off).unwrap();
    // (Each layer's q/k/v bias gradient then sums the backward's f32 gradients, and their cast
    // launches.)
    assert_eq!(apart.launch_count(0), l.launch_count(0) + count("reduce_sum_columns_cast") + copied + layers + layers);
    // The forward's only permute launches are none: the heads are stored split, the attention
    // output's copy by attention.
    let forward_permutes = l.phases[0]
        .iter()
        .take_while(|x| x.node.is_none_or(|n| !matches!(g.nodes[n as usize].op, Op::CrossEntropy { .. })))
        .filter(|x| x.node.is_some_and(|n| matches!(g.nodes[n as usize].op, Op::Permute { .. })))
        .count();
    assert_eq!(forward_permutes, 0);
    let permutes = l.phases[0]
        .iter()
        .filter(|x| x.node.is_some_and(|n| matches!(g.nodes[n as usize].op, Op::Permute { .. })))
        .count();
    assert_eq!(permutes, 0);
    // The MLP's weight gradients (144 tiles, a ragged wave) run in four parts, each with its
    // reduction.
    assert_eq!(count("gemm_splitk4_store_v4"), 2 * layers, "{by:?}");
    // The embedding gradient's fill and scatter-add are five launches (357 → 360).
    assert!(l.launch_count(0) <= 360, "{} launches", l.launch_count(0));
}

/// By default the cross-entropy's forward launches its bf16 backward (the mean's `1/rows` its
/// one scale), so the logits are read once; with `ALPHA_JOINT_CE=off`, two launches each read
/// them. Its loss reads the logits rounded to bf16, which the head's product stores as such.
#[test]
fn gpt2s_cross_entropy_reads_its_logits_once() {
    let s = alpha_systems::gpt2::Gpt2::default();
    let program = s.learner(20_000).training_program(s.model(16).unwrap()).unwrap();
    let count = |config: &CudaConfig| {
        let (by, launches) = kernel_counts(&program, config);
        assert_eq!(by.get("gemm_rc_bf16_store_tma_s3_rows_h"), Some(&1), "{by:?}");
        let names = [
            "cross_entropy_joint_bf16_from_bf16_w50304",
            "cross_entropy_fwd_from_bf16",
            "cross_entropy_bwd_bf16_from_bf16",
        ];
        (names.map(|n| by.get(n).copied().unwrap_or(0)), launches)
    };
    let (joint, joint_launches) = count(&CudaConfig { joint_cross_entropy: true, ..CudaConfig::default() });
    let (separate, separate_launches) = count(&CudaConfig { joint_cross_entropy: false, ..CudaConfig::default() });
    assert_eq!(joint, [1, 0, 0]);
    assert_eq!(separate, [0, 1, 1]);
    // The backward, and the broadcast and product that made its per-row scale, are gone.
    assert_eq!(separate_launches - joint_launches, 3);
}

/// Diakosmos's training step at one window, lowered with the copy rule `off` turns off and
/// without it (pointers checked): for each, the launches computing a node each of `kinds`
/// matches, then the launches of fused chains.
fn diakosmos_with_and_without(off: fn(&mut CudaConfig), kinds: &[&dyn Fn(&alpha_ir::Node) -> bool]) -> [Vec<usize>; 2] {
    diakosmos_from_with_and_without(|_| {}, off, kinds)
}

/// [`diakosmos_with_and_without`] from the configuration `base` makes of the default.
fn diakosmos_from_with_and_without(
    base: fn(&mut CudaConfig),
    off: fn(&mut CudaConfig),
    kinds: &[&dyn Fn(&alpha_ir::Node) -> bool],
) -> [Vec<usize>; 2] {
    let system = alpha_systems::diakosmos::Diakosmos::default();
    let program = system.learner(10).training_program(system.model(1).unwrap()).unwrap();
    [true, false].map(|on| {
        let mut cfg = CudaConfig::default();
        base(&mut cfg);
        if !on {
            off(&mut cfg);
        }
        let l = lower_program(&program, &cfg).unwrap();
        check_pointers(&l);
        let g = &l.plan.program.graph;
        let launches: Vec<_> = l.phases.iter().flatten().collect();
        let mut v: Vec<usize> = kinds
            .iter()
            .map(|f| launches.iter().filter(|x| x.node.is_some_and(|id| f(&g.nodes[id as usize]))).count())
            .collect();
        v.push(launches.iter().filter(|x| l.kernels[x.kernel].name.starts_with("ew_")).count());
        v
    })
}

/// Diakosmos's Concats whose parts are copies of other tensors, its q/k/v gradient's dq and dk
/// (permuted back from `[7, N, 190]`) and its spatial path's lone group (a slice), copy those
/// parts through the permute and the slice (`concat_views`): per block, the two permutes and,
/// but for one, the slices (two a block, forward and backward) do not launch, and every Concat
/// launches as before.
#[test]
fn diakosmos_concats_copy_permuted_and_sliced_parts_through_the_views() {
    let blocks = alpha_systems::diakosmos::Diakosmos::default().blocks;
    // (Without the products storing into their places, which takes the permutes too.)
    let [on, off] = diakosmos_from_with_and_without(
        |c| c.products_into_concats = false,
        |c| c.concat_views = false,
        &[&|n| matches!(n.op, Op::Permute { .. }), &|n| matches!(n.op, Op::Slice { .. }), &|n| {
            matches!(n.op, Op::Concat { .. })
        }],
    );
    assert_eq!((off[0] - on[0], off[1] - on[1]), (2 * blocks, 2 * blocks - 1), "{on:?} {off:?}");
    assert_eq!(on[2], off[2]);
}

/// Diakosmos's per-head products of dq and dk (`[7, N, 190]`, permuted back into its q/k/v
/// gradient's Concat) store straight into their places there (`products_into_concats`): per
/// block, two Concat copies fewer, and no permute launches either way.
#[test]
fn diakosmos_products_store_into_the_qkv_gradient() {
    let blocks = alpha_systems::diakosmos::Diakosmos::default().blocks;
    let [on, off] = diakosmos_with_and_without(
        |c| c.products_into_concats = false,
        &[&|n| matches!(n.op, Op::Permute { .. }), &|n| matches!(n.op, Op::Concat { .. })],
    );
    assert_eq!(on[0], off[0], "{on:?} {off:?}");
    assert_eq!(off[1] - on[1], 2 * blocks, "{on:?} {off:?}");
}

/// Diakosmos's spatial path joins its turned halves (`[N, 3, 2, 190]`) and then, as
/// `[N, 6, 190]`, those with the lone group: the inner Concat copies its halves straight into
/// the outer's output (`nested_concats`), so each block's outer Concat launches one copy (the
/// lone group's) instead of two, forward and again where the backward recomputes it; the
/// inner Concats launch as before.
#[test]
fn diakosmos_turned_halves_are_copied_into_the_joined_groups() {
    let blocks = alpha_systems::diakosmos::Diakosmos::default().blocks;
    let [on, off] = diakosmos_with_and_without(
        |c| c.nested_concats = false,
        &[&|n| n.op == Op::Concat { axis: 1 } && n.outputs[0].shape[1..] == [7, 190], &|n| {
            n.op == Op::Concat { axis: 2 }
        }],
    );
    assert_eq!((off[0], on[0]), (2 * on[0], 2 * blocks - 1), "{on:?} {off:?}");
    assert_eq!(on[1], off[1]);
}

/// Diakosmos's q and k, column blocks of the q/k/v projection turned to `[7, N, 190]` for the
/// harmonic scalars, are read by their Permutes straight from the projection
/// (`sliced_permutes`): the two slices a block (forward and where the backward recomputes them)
/// do not launch, v's slice (read by the scan) and every Permute still do.
#[test]
fn diakosmos_turns_q_and_k_straight_from_the_projection() {
    let system = alpha_systems::diakosmos::Diakosmos::default();
    let w = system.width();
    let [on, off] = diakosmos_with_and_without(
        |c| c.sliced_permutes = false,
        &[
            &|n| matches!(n.op, Op::Slice { axis: 1, start, end } if end - start == w && start < 2 * w),
            &|n| matches!(n.op, Op::Slice { axis: 1, start, .. } if start == 2 * w),
            &|n| matches!(n.op, Op::Permute { .. }),
        ],
    );
    assert_eq!(off[0] - on[0], 2 * system.blocks, "{on:?} {off:?}");
    assert_eq!((on[1], on[2]), (off[1], off[2]), "{on:?} {off:?}");
}

/// Diakosmos's head spreads sums' gradients over each group with explicit Broadcasts (`[N, 7,
/// 1]` to `[N, 7, 190]`); the chains after them read the sums held instead
/// (`read_broadcast_sources`), so none of those Broadcasts launches and the chains keep their
/// number.
#[test]
fn diakosmos_reads_spread_gradients_held() {
    let [on, off] = diakosmos_with_and_without(
        |c| c.held_broadcasts = false,
        &[&|n| matches!(&n.op, Op::Broadcast { shape } if shape.len() == 3)],
    );
    assert_eq!((on[0], off[0]), (0, 16), "{on:?} {off:?}");
    assert_eq!(on[1], off[1]);
}

/// Diakosmos's spatial path slices 6 of its 7 groups (`[N, 7, 190]` to `[N, 6, 190]`), pairs
/// them and slices each half (`[N, 3, 1, 190]`) into the rotation's fused chains; those read
/// the groups in place through the composed strides (`chain_slices`), so none of these slices
/// launches (forward and where the backward recomputes them: three a block each time), and two
/// slices of the head that feed chains do not either.
#[test]
fn diakosmos_chains_read_the_spatial_slices_in_place() {
    let blocks = alpha_systems::diakosmos::Diakosmos::default().blocks;
    let [on, off] = diakosmos_with_and_without(
        |c| c.chain_slices = false,
        &[
            &|n| n.op == Op::Slice { axis: 1, start: 0, end: 6 },
            &|n| matches!(n.op, Op::Slice { axis: 2, .. }) && n.outputs[0].shape[1..] == [3, 1, 190],
            &|n| matches!(n.op, Op::Slice { .. }),
        ],
    );
    assert_eq!((on[0], off[0]), (0, 2 * blocks), "{on:?} {off:?}");
    assert_eq!((on[1], off[1]), (0, 4 * blocks), "{on:?} {off:?}");
    assert_eq!(off[2] - on[2], 6 * blocks + 2, "{on:?} {off:?}");
}

/// Polf's step ends with its Muon matrices and their momenta copied home from the batched
/// stacks: one multi-tensor launch for all of them, not a launch each (`ALPHA_MULTI_COPY=off`).
#[test]
fn polfs_state_copies_run_as_one_launch() {
    let s = alpha_systems::polf::Polf::default();
    let program = s.learner(20_000).training_program(s.model(1).unwrap()).unwrap();
    let count = |config: &CudaConfig| {
        let (by, launches) = kernel_counts(&program, config);
        (by.get("copy_multi_b32").copied().unwrap_or(0), launches)
    };
    let (multi, together) = count(&CudaConfig::default());
    let (none, apart) = count(&CudaConfig { multi_copies: false, ..CudaConfig::default() });
    assert_eq!((multi, none), (1, 0));
    // The 54 matrices and their 54 momenta.
    assert_eq!(apart - together, 107, "{apart} launches apart, {together} together");
}

/// `program`'s first phase lowered with `config` (pointers checked): launches by kernel name,
/// and their number.
fn kernel_counts(
    program: &alpha_ir::Program,
    config: &CudaConfig,
) -> (std::collections::HashMap<String, usize>, usize) {
    let l = lower_program(program, config).unwrap();
    check_pointers(&l);
    (alpha_cuda::lower::launches_by_kernel(&l, 0).into_iter().collect(), l.launch_count(0))
}
