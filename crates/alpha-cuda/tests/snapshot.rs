//! The lowering's output, pinned: a SHA-256 of every kernel Alpha can build (the catalogue) and,
//! for Bob (batch 4), Coppelius (batch 1 and 16) and GPT-2 (batch 1), of every distinct kernel's
//! PTX, every launch (kernel, grid, block, dynamic shared memory, arguments), the arena's size,
//! the phase boundaries, the constants written at load and the tensor maps. No GPU is needed.
//!
//! Why: a refactor of a kernel family or of the lowering that should change nothing is shown to
//! change nothing. The text hashed is written here in explicit fields (not `Debug`, which
//! changes with any struct), and the golden hashes are in `tests/snapshot.golden`. Every run
//! writes each listing to `target/snapshot-actual/<name>.txt` and the hashes it found to
//! `target/snapshot-actual/snapshot.golden`, so a mismatch is read by copying that folder aside
//! from a run at the golden's commit and `diff`ing the two listings. A change meant to change
//! the output updates the golden file and says why in its commit.

use std::fmt::Write as _;
use std::path::PathBuf;

use alpha_cuda::lower::{lower_program, LArg, Lowered};
use alpha_cuda::ptx::Kernel;
use alpha_cuda::CudaConfig;
use alpha_systems::System;
use sha2::{Digest, Sha256};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A kernel's launch-relevant header (what the loader requests beside the PTX) and its PTX.
fn kernel_text(out: &mut String, k: &Kernel) {
    let dynamic = match &k.dynamic_array {
        Some((name, align)) => format!("{} bytes through {name} align {align}", k.dynamic_shared),
        None => format!("{} bytes (no dynamic array)", k.dynamic_shared),
    };
    let _ = writeln!(out, "kernel {} params {} dynamic shared {dynamic}", k.name, k.params.len());
    out.push_str(&k.render());
}

fn triple(t: (u32, u32, u32)) -> String {
    format!("{}x{}x{}", t.0, t.1, t.2)
}

/// The listing of a lowered program in a stable text form.
fn listing(l: &Lowered) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "arena {} bytes, {} kernels", l.arena, l.kernels.len());
    for k in &l.kernels {
        kernel_text(&mut t, k);
    }
    for (i, ph) in l.phases.iter().enumerate() {
        let _ = writeln!(t, "phase {i} {} launches {}", l.plan.phases[i].name, ph.len());
        for x in ph {
            let k = &l.kernels[x.kernel];
            let node = x.node.map_or("copy".to_string(), |n| format!("node {n}"));
            let args: Vec<String> = x
                .args
                .iter()
                .map(|a| match a {
                    LArg::Ptr(o) => format!("ptr {o}"),
                    LArg::U32(v) => format!("u32 {v}"),
                    LArg::U64(v) => format!("u64 {v}"),
                })
                .collect();
            let _ = writeln!(
                t,
                "launch {} {node} grid {} block {} shared {} args [{}]",
                k.name,
                triple(x.grid),
                triple(x.block),
                k.dynamic_shared,
                args.join(", ")
            );
        }
    }
    for (offset, bytes) in &l.inits {
        let _ = writeln!(t, "init at {offset} len {} sha256 {}", bytes.len(), sha256(bytes));
    }
    for (at, operand, m) in &l.tensor_maps {
        let _ = writeln!(
            t,
            "tensor map at {at} over {operand} inner {} outer {} stride {} box {}x{}",
            m.inner, m.outer, m.stride_bytes, m.box_inner, m.box_outer
        );
    }
    t
}

/// The catalogue's listing and each system's, by name.
fn listings() -> Vec<(String, String)> {
    let mut catalogue = String::new();
    for k in alpha_cuda::catalog() {
        kernel_text(&mut catalogue, &k);
    }
    let mut out = vec![("catalogue".to_string(), catalogue)];
    let coppelius = alpha_systems::coppelius::Coppelius::default();
    let gpt2 = alpha_systems::gpt2::Gpt2::default();
    let systems: [(&str, &dyn System, usize); 4] = [
        ("bob-b4", &alpha_systems::bob::Bob, 4),
        ("coppelius-b1", &coppelius, 1),
        ("coppelius-b16", &coppelius, 16),
        ("gpt2-b1", &gpt2, 1),
    ];
    for (name, sys, batch) in systems {
        let program = sys.learner(10).training_program(sys.model(batch).expect("model")).expect("program");
        let lowered = lower_program(&program, &CudaConfig::default()).expect("lowering");
        out.push((name.to_string(), listing(&lowered)));
    }
    out
}

/// `target/` of this build: the test binary lives in `target/<profile>/deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.ancestors().nth(3).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("target"))
}

#[test]
fn lowering_matches_the_golden_snapshot() {
    let golden_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshot.golden");
    let golden_text = std::fs::read_to_string(&golden_path).expect("tests/snapshot.golden");
    let golden: Vec<(&str, &str)> = golden_text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once(' ').expect("a golden line is `name sha256`"))
        .collect();

    let listings = listings();
    let actual: Vec<(String, String)> = listings.iter().map(|(n, t)| (n.clone(), sha256(t.as_bytes()))).collect();
    let mismatched: Vec<&str> = actual
        .iter()
        .filter(|(n, h)| !golden.iter().any(|(gn, gh)| gn == n && gh == h))
        .map(|(n, _)| n.as_str())
        .collect();
    let names: Vec<&str> = actual.iter().map(|(n, _)| n.as_str()).collect();
    let golden_names: Vec<&str> = golden.iter().map(|(n, _)| *n).collect();
    let dir = target_dir().join("snapshot-actual");
    std::fs::create_dir_all(&dir).expect("create target/snapshot-actual");
    for (name, text) in &listings {
        std::fs::write(dir.join(format!("{name}.txt")), text).expect("write a listing");
    }
    let mut hashes = String::new();
    for (n, h) in &actual {
        let _ = writeln!(hashes, "{n} {h}");
    }
    std::fs::write(dir.join("snapshot.golden"), &hashes).expect("write the hashes found");
    assert!(
        mismatched.is_empty() && names == golden_names,
        "the lowering's output differs from tests/snapshot.golden for {mismatched:?} (golden names {golden_names:?}).\n\
         The listings are in {dir}/<name>.txt and the hashes found in {dir}/snapshot.golden.\n\
         To see what changed: run this test at the golden's commit (e.g. in a `git worktree`), copy its \
         target/snapshot-actual aside, and `diff` the two <name>.txt files. If the change is meant, copy \
         {dir}/snapshot.golden to crates/alpha-cuda/tests/snapshot.golden and say why in the commit.",
        dir = dir.display()
    );
}

/// Each switch of the configuration, set against its default, as the lowering sees it: the
/// switch's name and the configuration with it set.
fn switched() -> Vec<(&'static str, CudaConfig)> {
    use alpha_cuda::config::ChainEpilogues;
    use alpha_cuda::kernels::gemm::{Engine, GemmTuning, StagedEpilogues};
    let d = CudaConfig::default;
    let tuning = |t: GemmTuning| CudaConfig { gemm_tuning: t, ..d() };
    let t = GemmTuning::default();
    vec![
        ("gemm_engine mma", CudaConfig { gemm_engine: Engine::Mma, ..d() }),
        ("gemm_engine wgmma", CudaConfig { gemm_engine: Engine::Wgmma, ..d() }),
        ("ring_stages 4", CudaConfig { ring_stages: 4, ..d() }),
        ("split_k off", CudaConfig { split_k: false, ..d() }),
        ("head_split off", CudaConfig { head_split: Some(false), ..d() }),
        ("pointwise_vector off", CudaConfig { pointwise_vector: false, ..d() }),
        ("ln_fold separate", CudaConfig { ln_fold: Some(false), ..d() }),
        ("fold_casts_into_gemms", CudaConfig { fold_casts_into_gemms: true, ..d() }),
        ("bf16_attention off", CudaConfig { bf16_attention: false, ..d() }),
        ("merged_gradients off", CudaConfig { merged_gradients: false, ..d() }),
        ("mul_epilogue off", CudaConfig { mul_epilogue: false, ..d() }),
        ("layernorm_copy off", CudaConfig { layernorm_copy: false, ..d() }),
        ("output_copy off", CudaConfig { output_copy: false, ..d() }),
        ("recompute_unary off", CudaConfig { recompute_unary: false, ..d() }),
        ("joint_attention_backward off", CudaConfig { joint_attention_backward: false, ..d() }),
        ("wgmma_attention off", CudaConfig { wgmma_attention: false, ..d() }),
        ("wgmma_attention_backward off", CudaConfig { wgmma_attention_backward: false, ..d() }),
        ("chain_epilogues never", CudaConfig { chain_epilogues: ChainEpilogues::Never, ..d() }),
        ("chain_epilogues everywhere", CudaConfig { chain_epilogues: ChainEpilogues::Everywhere, ..d() }),
        ("ln_partials off", CudaConfig { ln_partials: false, ..d() }),
        ("mul_recompute off", CudaConfig { mul_recompute: false, ..d() }),
        ("ln_fold_together off", CudaConfig { ln_fold_together: false, ..d() }),
        ("ring_waves 100", CudaConfig { ring_waves: 100, ..d() }),
        ("delta_epilogue off", CudaConfig { delta_epilogue: false, ..d() }),
        ("gated_products off", CudaConfig { gated_products: false, ..d() }),
        ("uneven_split off", CudaConfig { uneven_split: false, ..d() }),
        ("paired_products off", CudaConfig { paired_products: false, ..d() }),
        ("wide_stores off", tuning(GemmTuning { wide_stores: false, ..t })),
        ("two_blocks off", tuning(GemmTuning { two_blocks: false, ..t })),
        ("staged_epilogues none", tuning(GemmTuning { staged_epilogues: StagedEpilogues::None, ..t })),
        ("staged_epilogues chains", tuning(GemmTuning { staged_epilogues: StagedEpilogues::Chains, ..t })),
        ("staged_epilogues adds", tuning(GemmTuning { staged_epilogues: StagedEpilogues::Adds, ..t })),
    ]
}

/// Every pointer inside the arena, every launch with as many arguments as its kernel's
/// parameters, and every kernel within the launch budget.
fn well_formed(l: &Lowered) -> Result<(), String> {
    for launch in l.phases.iter().flatten() {
        let k = &l.kernels[launch.kernel];
        if k.params.len() != launch.args.len() {
            return Err(format!(
                "{}: {} arguments for {} parameters",
                l.describe(launch),
                launch.args.len(),
                k.params.len()
            ));
        }
        for a in &launch.args {
            if let LArg::Ptr(o) = a {
                if *o >= l.arena {
                    return Err(format!("{}: offset {o} outside the {}-byte arena", l.describe(launch), l.arena));
                }
            }
        }
    }
    l.kernels.iter().try_for_each(|k| k.check_budget().map_err(|e| format!("{}: {e}", k.name)))
}

#[test]
fn every_switch_reaches_the_lowering_and_still_lowers_whole_programs() {
    let coppelius = alpha_systems::coppelius::Coppelius::default();
    let programs: Vec<_> = [1, 16]
        .map(|batch| coppelius.learner(10).training_program(coppelius.model(batch).expect("model")).expect("program"))
        .into();
    let hash = |p: &alpha_ir::Program, config: &CudaConfig, name: &str| {
        let l = lower_program(p, config).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        well_formed(&l).unwrap_or_else(|e| panic!("{name}: {e}"));
        sha256(listing(&l).as_bytes())
    };
    // (A switch whose effect another switch hides is measured against that one alone.)
    let no_partials = CudaConfig { ln_partials: false, ..CudaConfig::default() };
    let bases = [CudaConfig::default(), no_partials.clone()];
    let base_hashes: Vec<Vec<String>> =
        bases.iter().map(|b| programs.iter().map(|p| hash(p, b, "a base")).collect()).collect();
    let mut cases: Vec<(&str, usize, CudaConfig)> = switched().into_iter().map(|(n, c)| (n, 0, c)).collect();
    cases.push(("ln_fold beside, ln_partials off", 1, CudaConfig { ln_fold: Some(true), ..no_partials }));
    // One context first; sixteen only where one context shows no difference. The cases are
    // spread over the machine's threads.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let unchanged: Vec<&str> = std::thread::scope(|scope| {
        let workers: Vec<_> = cases
            .chunks(cases.len().div_ceil(threads))
            .map(|chunk| {
                let (programs, base_hashes, hash) = (&programs, &base_hashes, &hash);
                scope.spawn(move || {
                    chunk
                        .iter()
                        .filter(|(name, base, config)| {
                            !programs.iter().zip(&base_hashes[*base]).any(|(p, h)| hash(p, config, name) != *h)
                        })
                        .map(|(name, _, _)| *name)
                        .collect::<Vec<&str>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a worker")).collect()
    });
    assert!(unchanged.is_empty(), "switches that changed nothing at one or sixteen contexts: {unchanged:?}");
}
