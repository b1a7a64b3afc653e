//! Lowering whole systems needs no GPU: Bob's and Coppelius's training and inference programs
//! lower to launches whose kernels fit the launch budget, whose every pointer lies inside the
//! arena, and whose modules are shared across Coppelius's 16 identical blocks.

use alpha_cuda::lower::{lower_program, LArg, Lowered};
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
    let l = lower_program(&bob.learner(10).training_program(bob.model(4).unwrap()).unwrap()).unwrap();
    check_pointers(&l);
    assert_eq!(l.phases.len(), 1);

    let c = alpha_systems::coppelius::Coppelius::default();
    let l = lower_program(&c.learner(10).training_program(c.model(1).unwrap()).unwrap()).unwrap();
    check_pointers(&l);
    let launches = l.launch_count(0);
    assert!(launches > 1000, "{launches} launches");
    assert!(l.kernels.len() < 100, "{} distinct kernels: blocks should share modules", l.kernels.len());
    let names: Vec<&str> = l.kernels.iter().map(|k| k.name.as_str()).collect();
    for family in [
        "attention_fwd",
        "attention_bwd_dq_rotary",
        "attention_bwd_dkv_rotary",
        "layernorm_fwd",
        "rotary",
        "adamw_multi",
        "sumsq_multi",
    ] {
        assert!(names.contains(&family), "no {family} kernel");
    }
    assert!(
        names.iter().any(|n| n.starts_with("gemm_") && n.ends_with("_bf16_store")),
        "bf16 products use the tiled GEMM"
    );

    let inf = alpha_learn::inference_program(c.model(1).unwrap()).unwrap();
    check_pointers(&lower_program(&inf).unwrap());
}

#[test]
fn accumulation_phases_lower_with_their_copies() {
    let bob = alpha_systems::bob::Bob;
    let mut learner = bob.learner(10);
    learner.accumulation = 2;
    let l = lower_program(&learner.training_program(bob.model(2).unwrap()).unwrap()).unwrap();
    assert_eq!(l.phases.len(), 2);
    check_pointers(&l);
    // The accumulate phase ends by copying the summed gradient into its accumulator.
    assert!(l.phases[0].iter().any(|x| x.node.is_none()), "no phase-end copy in 'accumulate'");
}

fn training(system: &str) -> Lowered {
    match system {
        "bob" => {
            let bob = alpha_systems::bob::Bob;
            lower_program(&bob.learner(10).training_program(bob.model(4).unwrap()).unwrap()).unwrap()
        }
        _ => {
            let c = alpha_systems::coppelius::Coppelius::default();
            lower_program(&c.learner(10).training_program(c.model(1).unwrap()).unwrap()).unwrap()
        }
    }
}

/// Launch counts of the training step (B=4 Bob, B=1 T=1024 Coppelius) after the optimizer,
/// GEMM-epilogue and cast fusions (Bob 13 → 12, Coppelius 1,615 → 1,099), then the GELU
/// epilogue and the inverse rotaries folded into attention's backward (Coppelius 1,099 →
/// 1,051: 16 `pw_gelu` and 32 `rotary_inverse` launches gone).
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
        // The optimizer: one launch for every AdamW, two for the global sum of squares.
        assert_eq!(count("adamw_multi"), 1, "{s}");
        assert_eq!((count("sumsq_multi"), count("sumsq_multi_finish")), (1, 1), "{s}");
        assert_eq!(count("adamw_step") + count("pw_square") + count("reduce_sum"), 0, "{s}");
        if s == "coppelius" {
            // Every block's GELU is its gate GEMM's epilogue; every dq and dk leaves the
            // attention backward already turned back; the forward rotaries remain (see
            // `lower::fuse_more`).
            let gelu_gemms: usize = by.iter().filter(|x| x.0.ends_with("_store_gelu")).map(|x| x.1).sum();
            assert_eq!((gelu_gemms, count("pw_gelu")), (16, 0));
            assert_eq!((count("attention_bwd_dq_rotary"), count("attention_bwd_dkv_rotary")), (16, 16));
            assert_eq!((count("attention_bwd_dq"), count("attention_bwd_dkv"), count("rotary_inverse")), (0, 0, 0));
            assert_eq!((count("rotary"), count("attention_fwd")), (32, 16));
        }
        let expected = if s == "bob" { BOB_LAUNCHES } else { COPPELIUS_LAUNCHES };
        assert_eq!(l.launch_count(0), expected, "{s}");
    }
}

const BOB_LAUNCHES: usize = 12;
const COPPELIUS_LAUNCHES: usize = 1051;

/// Every distinct kernel of Bob's and Coppelius's training programs assembles for sm_90a with
/// ptxas 13 (the PyPI wheel at `PTXAS` or `$ALPHA_PTXAS`); prints "skipped" where it is absent.
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
    let mut failed = vec![];
    for f in &files {
        let out = std::process::Command::new(&ptxas)
            .args(["-arch=sm_90a", "-o", "/dev/null"])
            .arg(f)
            .output()
            .expect("running ptxas");
        if !out.status.success() {
            failed.push(format!("{}: {}", f.display(), String::from_utf8_lossy(&out.stderr)));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("ptxas: {} of {} kernels assembled for sm_90a", files.len() - failed.len(), files.len());
    assert!(failed.is_empty(), "ptxas rejected:\n{}", failed.join("\n"));
}

#[test]
#[ignore]
fn diagnose() {
    use alpha_ir::{Op, Value};
    let l = training("coppelius");
    let g = &l.plan.program.graph;
    let nodes: Vec<u32> = l.plan.phases[0].kernels.iter().map(|k| k.node).collect();
    let pos: std::collections::HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut readers: std::collections::HashMap<Value, Vec<u32>> = Default::default();
    for (i, n) in g.nodes.iter().enumerate() {
        for &x in &n.inputs {
            readers.entry(x).or_default().push(i as u32);
        }
    }
    let launched: std::collections::HashSet<u32> = l.phases[0].iter().filter_map(|x| x.node).collect();
    let mut shown = 0;
    for &id in &nodes {
        let n = &g.nodes[id as usize];
        if !launched.contains(&id) || shown > 40 || (matches!(n.op, Op::Cast { .. }) && std::env::var("ADDS").is_ok()) {
            continue;
        }
        let v = Value { node: id, index: 0 };
        match &n.op {
            Op::Cast { .. } => {
                let rs: Vec<String> = readers[&v]
                    .iter()
                    .map(|r| {
                        let rn = &g.nodes[*r as usize];
                        let others: Vec<String> =
                            rn.inputs.iter().map(|x| g.nodes[x.node as usize].op.family().to_string()).collect();
                        format!("{}@{:?}({})", rn.op.family(), pos.get(r), others.join(","))
                    })
                    .collect();
                let src = &g.nodes[n.inputs[0].node as usize];
                println!("cast %{id}@{} of {} '{}': {}", pos[&id], src.op.family(), n.scope, rs.join("; "));
                shown += 1;
            }
            Op::Binary(alpha_ir::Binary::Add) => {
                let p0 = pos[&id];
                let around: Vec<String> = nodes[p0.saturating_sub(6)..p0]
                    .iter()
                    .map(|&x| {
                        format!("{}{}", g.nodes[x as usize].op.family(), if launched.contains(&x) { "" } else { "*" })
                    })
                    .collect();
                println!("  before: {}", around.join(" "));
                let ins: Vec<String> = n
                    .inputs
                    .iter()
                    .map(|x| {
                        format!("{}@{:?} r{}", g.nodes[x.node as usize].op.family(), pos.get(&x.node), readers[x].len())
                    })
                    .collect();
                println!("add %{id}@{} '{}': {}", pos[&id], n.scope, ins.join(", "));
                shown += 1;
            }
            _ => {}
        }
    }
}
