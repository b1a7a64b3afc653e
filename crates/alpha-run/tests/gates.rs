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
