//! Optimizer health on real data: a CPU run of `mini-mixed` (Muon, rotational AdamW and Adam)
//! recording health every 2 updates, its figures checked against the same norms computed on the
//! host from the checkpoints of every update, and the gradient recomputed from the checkpoint
//! before and the windows the update read.

#[allow(dead_code)] // the helpers the other suites use
mod common;

use std::collections::BTreeMap;
use std::path::Path;

use alpha_data::{Cursor, Split, TokenStream};
use alpha_run::checkpoint::{self, Checkpoint};
use alpha_run::records::HealthRow;
use alpha_run::{train, Backend, CpuBackend, TrainOptions};
use common::bpe_stream;

const BATCH: usize = 2;

fn norm(x: &[f32]) -> f64 {
    x.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>().sqrt()
}

/// Equal within what f32 sums and roundings of the device's figures allow.
fn close(recorded: Option<f64>, host: f64, what: &str) {
    let r = recorded.unwrap_or_else(|| panic!("{what}: recorded as non-finite, the host's is {host}"));
    let tol = 2e-5 * host.abs().max(1e-12) + 1e-9;
    assert!((r - host).abs() <= tol, "{what}: recorded {r}, from the host {host} (off by {:e})", (r - host).abs());
}

fn rows(run: &Path) -> Vec<HealthRow> {
    alpha_records::jsonl::read::<HealthRow>(&run.join("health.jsonl")).expect("health.jsonl").rows
}

/// Every parameter's raw gradient for the update after `before`: the gradient program on the
/// checkpoint's parameters and the windows its cursor points at.
fn gradients(data: &Path, before: &Checkpoint) -> BTreeMap<String, Vec<f32>> {
    let system = alpha_systems::find("mini-mixed").unwrap();
    let program = alpha_learn::gradient_program(system.model(BATCH).unwrap()).unwrap();
    let mut cpu = CpuBackend::compile(&program).unwrap();
    let params: Vec<String> = program.graph.params().into_iter().map(|(_, n)| n).collect();
    for name in &params {
        cpu.write(name, &before.tensors[name].1).unwrap();
    }
    let t = system.context();
    let mut stream = TokenStream::open(data, Split::Train).unwrap();
    stream.seek(serde_json::from_str::<Cursor>(&before.meta.cursor).unwrap()).unwrap();
    let (mut inputs, mut targets, mut window) = (vec![0; BATCH * t], vec![0; BATCH * t], vec![0; t + 1]);
    for b in 0..BATCH {
        stream.fill_window(&mut window).unwrap();
        inputs[b * t..(b + 1) * t].copy_from_slice(&window[..t]);
        targets[b * t..(b + 1) * t].copy_from_slice(&window[1..]);
    }
    cpu.write_ids("tokens", &inputs).unwrap();
    cpu.write_ids("targets", &targets).unwrap();
    cpu.run("step").unwrap();
    params.iter().map(|n| (n.clone(), cpu.output(&format!("grad:{n}")).unwrap())).collect()
}

#[test]
fn health_figures_equal_the_checkpoints_norms() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = bpe_stream(tmp.path()) else { return };
    let run = tmp.path().join("run");
    let opts = TrainOptions {
        checkpoint_every: Some(1),
        health_every: 2,
        save_initial: true,
        ..common::options("mini-mixed", BATCH, 11, &data, &run, 5)
    };
    train(&opts).unwrap();
    let rows = rows(&run);
    // Every second update, and the invocation's last.
    assert_eq!(rows.iter().map(|r| r.step).collect::<Vec<_>>(), vec![2, 4, 5]);
    let ckpt = |s: u64| checkpoint::load(&run.join(alpha_run::rundir::checkpoint_rel(0, s))).unwrap();
    let mut optimizers_seen = std::collections::BTreeSet::new();
    for row in &rows {
        let (before, after) = (ckpt(row.step - 1), ckpt(row.step));
        let grads = gradients(&data, &before);
        assert_eq!(row.tensors.len(), grads.len(), "step {}: one entry a parameter tensor", row.step);
        for t in &row.tensors {
            let at = |what: &str| format!("step {} {} {what}", row.step, t.tensor);
            let p = &after.tensors[&t.tensor].1;
            let p0 = &before.tensors[&t.tensor].1;
            assert_eq!(t.numel as usize, p.len());
            close(t.norms["param"], norm(p), &at("param"));
            let change: Vec<f32> = p.iter().zip(p0).map(|(a, b)| a - b).collect();
            close(t.norms["update"], norm(&change), &at("update"));
            close(t.norms["grad"], norm(&grads[&t.tensor]), &at("grad"));
            let states: Vec<&String> =
                t.norms.keys().filter(|q| !["grad", "param", "update"].contains(&q.as_str())).collect();
            assert!(!states.is_empty(), "{}: no optimizer state", at(""));
            for q in states {
                let (_, s) = &after.tensors[&format!("{}.{q}", t.tensor)];
                close(t.norms[q], norm(s), &at(q));
                optimizers_seen.insert(q.clone());
            }
            for (q, &n) in &t.nonfinite {
                assert_eq!(n, 0, "{}: {n} non-finite", at(q));
            }
        }
    }
    // All three optimizers' states were measured.
    for q in ["adam_m", "adam_v", "muon_momentum", "rot_norm0", "rot_ms"] {
        assert!(optimizers_seen.contains(q), "no tensor recorded {q}");
    }
}

#[test]
fn no_health_phase_without_health_every() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = bpe_stream(tmp.path()) else { return };
    let run = tmp.path().join("run");
    train(&common::options("mini-mixed", BATCH, 11, &data, &run, 2)).unwrap();
    assert!(rows(&run).is_empty(), "health rows written with --health-every 0");
}
