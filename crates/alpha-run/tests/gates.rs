//! The gates with the CPU as the device: a small Coppelius-shaped transformer (every op of the
//! real one) passes each gate and is causal; without a GPU, the CUDA gates say so plainly.

use alpha_run::gates::{check, Gate};
use alpha_run::Device;
use alpha_systems::coppelius::Coppelius;
use alpha_systems::gpt2::Gpt2;

fn small() -> Coppelius {
    Coppelius { blocks: 2, width: 32, heads: 4, ffn: 48, vocab: 97, context: 16 }
}

#[test]
fn a_small_transformer_passes_every_gate_against_itself_and_is_causal() {
    for gate in [Gate::Forward, Gate::Gradient, Gate::Update, Gate::Causality] {
        let r = check(gate, &small(), Device::Cpu, 2, 3).unwrap();
        eprint!("{}", r.text);
        assert!(r.passed, "{}", r.text);
    }
    let r = check(Gate::Causality, &small(), Device::Cpu, 2, 3).unwrap();
    assert!(r.text.contains("rows before 8 that changed 0 of 16"), "{}", r.text);
    assert!(r.text.contains("rows from 8 on unchanged 0 of 16"), "{}", r.text);
}

#[test]
fn a_small_gpt2_passes_every_gate_against_itself_and_is_causal() {
    let small = Gpt2 { layers: 2, width: 32, heads: 4, vocab: 89, context: 16 };
    for gate in [Gate::Forward, Gate::Gradient, Gate::Update, Gate::Causality] {
        let r = check(gate, &small, Device::Cpu, 2, 5).unwrap();
        assert!(r.passed, "{}", r.text);
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
