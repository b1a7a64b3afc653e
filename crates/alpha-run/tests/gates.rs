//! The gates with the CPU as the device: a small Coppelius-shaped transformer, a small GPT-2 and
//! a small Diakosmos (every op of the real ones) pass each gate and are causal; without a GPU,
//! the CUDA gates say so plainly, and the CUDA lowering names the op it has no kernel for.

use alpha_run::gates::{check, Gate};
use alpha_run::Device;
use alpha_systems::coppelius::Coppelius;
use alpha_systems::diakosmos::Diakosmos;
use alpha_systems::gpt2::Gpt2;

fn small() -> Coppelius {
    Coppelius { blocks: 2, width: 32, heads: 4, ffn: 48, vocab: 97, context: 16 }
}

/// Every gate passes for `system` against itself on the CPU, and the causality gate's cut at
/// the middle of 16 positions left the 16 rows before it alone and changed the 16 after; the
/// health step (its phase built again with the figures) updates every tensor bit for bit as the
/// step does.
fn passes_every_gate_and_is_causal(system: &dyn alpha_systems::System, seed: u64) {
    for gate in [Gate::Forward, Gate::Gradient, Gate::Update, Gate::Causality, Gate::Health] {
        let r = check(gate, system, Device::Cpu, 2, seed).unwrap();
        eprint!("{}", r.text);
        assert!(r.passed, "{}", r.text);
    }
    let r = check(Gate::Causality, system, Device::Cpu, 2, seed).unwrap();
    assert!(r.text.contains("rows before 8 that changed 0 of 16"), "{}", r.text);
    assert!(r.text.contains("rows from 8 on unchanged 0 of 16"), "{}", r.text);
    let r = check(Gate::Health, system, Device::Cpu, 2, seed).unwrap();
    let line = r.text.lines().find(|l| l.contains("the health step against the step")).expect("the update's line");
    let counts: Vec<usize> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    let params = alpha_systems::System::model(system, 1).unwrap().graph.params().len();
    assert!(counts.len() >= 2 && counts[0] == counts[1] && counts[1] > params, "{line}");
}

#[test]
fn a_small_transformer_passes_every_gate_against_itself_and_is_causal() {
    passes_every_gate_and_is_causal(&small(), 3);
}

#[test]
fn a_small_gpt2_passes_every_gate_against_itself_and_is_causal() {
    passes_every_gate_and_is_causal(&Gpt2 { layers: 2, width: 32, heads: 4, vocab: 89, context: 16 }, 5);
}

/// Diakosmos's code at a small geometry: every op of the full model (the wire built in the
/// graph, the harmonic scan, the spatial turns, the running-mean features, bf16 products).
fn small_diakosmos() -> Diakosmos {
    Diakosmos { blocks: 2, phasors: 3, harmonics: 2, context: 16, bf16: true }
}

/// The update gate steps all three of its optimizers: Muon, rotational AdamW and Adam.
#[test]
fn a_small_diakosmos_passes_every_gate_against_itself_and_is_causal() {
    passes_every_gate_and_is_causal(&small_diakosmos(), 4);
}

/// The CUDA lowering, as the product configures it, takes the harmonic scan (no GPU needed):
/// the gates' forward and gradient programs lower, at the small geometry and at the seed's,
/// each block's scan to its forward kernel and, in the gradient program, its backward.
#[test]
fn the_cuda_lowering_takes_the_harmonic_scan() {
    for system in [small_diakosmos(), Diakosmos::default()] {
        let model = || alpha_systems::System::model(&system, 1).unwrap();
        let kernels = |program: &alpha_ir::Program| -> Vec<String> {
            let l = alpha_cuda::lower::lower_program(program, &alpha_run::session::cuda_config())
                .unwrap_or_else(|e| panic!("{e:#}"));
            l.phases[0].iter().map(|x| l.kernels[x.kernel].name.clone()).collect()
        };
        let count = |names: &[String], k: &str| names.iter().filter(|n| *n == k).count();
        let forward = kernels(&alpha_learn::inference_program(model()).unwrap());
        assert_eq!(count(&forward, "harmonic_scan_fwd"), system.blocks);
        let gradient = kernels(&alpha_learn::gradient_program(model()).unwrap());
        assert_eq!(count(&gradient, "harmonic_scan_fwd"), system.blocks);
        assert_eq!(count(&gradient, "harmonic_scan_bwd"), system.blocks);
    }
}

#[test]
fn the_cuda_gates_say_plainly_when_there_is_no_gpu() {
    match check(Gate::Forward, &small(), Device::Cuda, 1, 1) {
        Ok(r) => eprintln!("a GPU is here:\n{}", r.text),
        Err(e) => {
            let msg = format!("{e:#}");
            eprintln!("skipped: {msg}");
            assert!(msg.to_lowercase().contains("cuda"), "{msg}");
        }
    }
}

/// Muon's matrices are judged against the same update with f32 iterations: on the CPU the
/// device is the reference, and both sit close to, but not on, the f32 direction (bf16
/// operands), which the gate reports.
#[test]
fn muon_is_judged_against_its_f32_iterations() {
    let mini = alpha_systems::find("mini-muon").unwrap();
    let r = check(Gate::Update, mini.as_ref(), Device::Cpu, 1, 1).unwrap();
    assert!(r.passed, "{}", r.text);
    let line = r.text.lines().find(|l| l.contains("against the f32 iterations")).expect(&r.text);
    let reference: f64 = line.split("reference ").nth(1).and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
    assert!(reference > 0.999 && reference < 1.0, "{line}");
    assert!(line.contains("device to reference 1.0000000"), "{line}");
}
