//! A learner with three optimizers by parameter role — Muon, rotational AdamW and Adam, the
//! miniature's `mini-mixed` — through the run policy: every optimizer's state is in the
//! checkpoint by parameter path, and N steps then a resume for M give the same file as N + M.

#[allow(dead_code)] // the helpers the other suites use
mod common;

use alpha_run::{train, TrainOptions};
use common::bpe_stream;

fn options(data: &std::path::Path, run: &std::path::Path, steps: u64) -> TrainOptions {
    common::options("mini-mixed", 2, 11, data, run, steps)
}

#[test]
fn three_optimizers_resume_to_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = bpe_stream(tmp.path()) else { return };
    let n = 3;

    let mut whole = options(&data, &tmp.path().join("whole"), 2 * n);
    whole.checkpoint_every = Some(n);
    let a = train(&whole).unwrap();

    let mut first = options(&data, &tmp.path().join("halves"), n);
    first.schedule_steps = Some(2 * n);
    let h1 = train(&first).unwrap();
    let mut second = first.clone();
    second.resume = Some(h1.checkpoint.clone());
    let h2 = train(&second).unwrap();
    assert_eq!(h2.last_step, 2 * n);
    assert_eq!(
        std::fs::read(&a.checkpoint).unwrap(),
        std::fs::read(&h2.checkpoint).unwrap(),
        "{n} steps then a resume for {n} more differs from {} in one go",
        2 * n
    );

    // Every optimizer's state, by parameter path, moved from its start.
    let ckpt = alpha_run::checkpoint::load(&a.checkpoint).unwrap();
    let nonzero = |name: &str| {
        let (_, v) = ckpt.tensors.get(name).unwrap_or_else(|| panic!("the checkpoint lacks {name}"));
        v.iter().any(|&x| x != 0.0)
    };
    for name in [
        "blocks.0.attn.out.weight.muon_momentum",
        "blocks.3.ffn.down.weight.muon_momentum",
        "blocks.0.attn.qkv.weight.adam_m",
        "blocks.0.attn.qkv.weight.adam_v",
        "blocks.0.attn.qkv.weight.rot_norm0",
        "blocks.0.attn.qkv.weight.rot_ms",
        "embed.weight.adam_m",
        "ln_f.weight.adam_v",
    ] {
        assert!(nonzero(name), "{name} is all zero");
    }
    assert!(!ckpt.tensors.contains_key("blocks.0.attn.out.weight.adam_m"), "Muon's matrices carry no Adam moments");
    // The rotational rows (columns of x·W's [inputs, outputs]) kept the norms stored for them.
    let (shape, w) = &ckpt.tensors["blocks.1.attn.qkv.weight"];
    let n0 = &ckpt.tensors["blocks.1.attn.qkv.weight.rot_norm0"].1;
    assert_eq!(n0.len(), shape[1]);
    for j in 0..shape[1] {
        let norm = (0..shape[0]).map(|i| (w[i * shape[1] + j] as f64).powi(2)).sum::<f64>().sqrt();
        assert!((norm - n0[j] as f64).abs() < 1e-5 * n0[j] as f64, "feature {j}: {norm} against {}", n0[j]);
    }
}
