//! Polf on the CPU on real prose, tokenized as it reads its streams (a BPE of 1,024 tokens
//! trained here, each document opened by BOS): the full model's first loss is the uniform
//! guess its tiny embedding makes and every gradient is finite; Polf's shape in miniature,
//! trained by Polf's own four-role learner (Muon with its ramp, Adam, the warmdown), lowers its
//! held-out loss.

#[allow(dead_code)] // the helpers the other suites use
mod common;

use alpha_data::prepare::TokenizerSpec;
use alpha_data::{Split, TokenStream};
use alpha_learn::{gradient_program, inference_program};
use alpha_run::{Backend, CpuBackend};
use alpha_systems::polf::Polf;
use alpha_systems::System;

fn bpe_bos_stream(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    common::stream(dir, TokenizerSpec::TrainBpe { vocab_size: 1024, bos: true }, "tiny-bpe1024-bos")
}

/// `batch` windows of `t + 1` tokens as (inputs, targets).
fn batch_of(stream: &mut TokenStream, batch: usize, t: usize) -> (Vec<u32>, Vec<u32>) {
    let (mut x, mut y) = (vec![], vec![]);
    for _ in 0..batch {
        let w = stream.next_window(t + 1).unwrap();
        x.extend(&w[..t]);
        y.extend(&w[1..]);
    }
    (x, y)
}

fn write_batch(backend: &mut dyn Backend, (x, y): &(Vec<u32>, Vec<u32>)) {
    backend.write_ids("tokens", x).unwrap();
    backend.write_ids("targets", y).unwrap();
}

#[test]
fn the_full_model_starts_uniform_with_finite_gradients() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = bpe_bos_stream(tmp.path()) else { return };
    let polf = Polf::default();
    let program = gradient_program(polf.model(1).unwrap()).unwrap();
    let mut cpu = CpuBackend::compile(&program).unwrap();
    for (name, values) in alpha_run::init::initial_leaves(&program.graph, 1337) {
        cpu.write(&name, &values).unwrap();
    }
    let mut stream = TokenStream::open(&data, Split::Train).unwrap();
    write_batch(&mut cpu, &batch_of(&mut stream, 1, polf.context));
    cpu.run("step").unwrap();
    let loss = cpu.output("loss").unwrap()[0] as f64;
    // An N(0, 0.005²) table against a unit-RMS feature: logits of ~0.1, nearly uniform.
    assert!((loss - 1024f64.ln()).abs() < 0.05, "first loss {loss} against ln 1024 = {}", 1024f64.ln());
    // At the start the output projections are zero: the loss reaches the embedding, the skip
    // weights, each block's resid_mix and its two output projections, and nothing behind those
    // projections (the attention and MLP inputs' matrices, the q gains, the two scales).
    for (_, name) in program.graph.params() {
        let g = cpu.output(&format!("grad:{name}")).unwrap();
        assert!(g.iter().all(|x| x.is_finite()), "{name}: a non-finite gradient");
        let reached = name == "tok_emb.weight"
            || name == "skip_weights"
            || name.ends_with(".resid_mix")
            || name.ends_with("attn.proj.weight")
            || name.ends_with("mlp.proj.weight");
        assert_eq!(g.iter().any(|&x| x != 0.0), reached, "{name}");
    }
}

#[test]
fn the_miniature_lowers_its_heldout_loss_under_polfs_learner() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = bpe_bos_stream(tmp.path()) else { return };
    let polf = Polf { blocks: 4, width: 64, heads: 4, kv_heads: 2, mlp: 128, vocab: 1024, context: 64, bf16: true };
    let (batch, steps) = (8, 40);
    let learner = polf.learner(steps);
    let program = learner.training_program(polf.model(batch).unwrap()).unwrap();
    let mut train = CpuBackend::compile(&program).unwrap();
    for (name, values) in alpha_run::init::initial_leaves(&program.graph, 1337) {
        train.write(&name, &values).unwrap();
    }
    let eval_program = inference_program(polf.model(batch).unwrap()).unwrap();
    let mut eval = CpuBackend::compile(&eval_program).unwrap();
    let mut valid = TokenStream::open(&data, Split::Valid).unwrap();
    let heldout: Vec<_> = (0..4).map(|_| batch_of(&mut valid, batch, polf.context)).collect();
    let mut heldout_loss = |train: &mut CpuBackend| -> f64 {
        for (_, name) in eval_program.graph.params() {
            eval.write(&name, &train.read(&name).unwrap()).unwrap();
        }
        let mut sum = 0.0;
        for b in &heldout {
            write_batch(&mut eval, b);
            eval.run("forward").unwrap();
            sum += eval.output("loss").unwrap()[0] as f64;
        }
        sum / heldout.len() as f64
    };
    let before = heldout_loss(&mut train);
    let mut stream = TokenStream::open(&data, Split::Train).unwrap();
    let phase = program.phases[0].name.clone();
    let mut losses = vec![];
    for step in 1..=steps {
        for (name, value) in learner.scalars(step) {
            train.write(name, &[value as f32]).unwrap();
        }
        write_batch(&mut train, &batch_of(&mut stream, batch, polf.context));
        train.run(&phase).unwrap();
        losses.push(train.output("loss").unwrap()[0] as f64);
    }
    let after = heldout_loss(&mut train);
    eprintln!(
        "held-out loss {before:.4} → {after:.4} nats over {steps} updates; train {:.4} → {:.4}",
        losses[0],
        losses[losses.len() - 1]
    );
    assert!(losses.iter().all(|l| l.is_finite()));
    assert!((before - 1024f64.ln()).abs() < 0.05, "a fresh model guesses uniformly: {before}");
    assert!(after < before - 1.0, "held-out loss {before} → {after}");
}
