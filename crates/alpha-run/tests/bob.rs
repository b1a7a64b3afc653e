//! Bob on real prose: held-out bits per byte against the best bigram table the training bytes
//! allow; same seed, same bytes; resume exact to the byte.

mod common;

use alpha_run::baseline::bigram_optimum;
use alpha_run::{train, TrainOptions};

fn options(data: &std::path::Path, run: &std::path::Path, steps: u64) -> TrainOptions {
    TrainOptions { heldout_windows: 256, ..common::options("bob", 16, 7, data, run, steps) }
}

#[test]
fn bob_learns_to_within_0_05_bits_per_byte_of_the_bigram_optimum() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bytes_stream(tmp.path()) else { return };
    let mut o = options(&data, &tmp.path().join("run"), 400);
    o.batch = Some(64);
    let r = train(&o).unwrap();
    let held = r.heldout.expect("the last step is scored");
    let best = bigram_optimum(&data, 256, 256, 256, None).unwrap();
    eprintln!(
        "Bob {:.4} bits/byte, bigram optimum {:.4} (add-{}), gap {:+.4}",
        held.bits_per_byte,
        best.bits_per_byte,
        best.k,
        held.bits_per_byte - best.bits_per_byte
    );
    assert!(held.bits_per_byte < 8.0 - 3.0, "Bob did not learn: {}", held.bits_per_byte);
    assert!(
        (held.bits_per_byte - best.bits_per_byte).abs() <= 0.05,
        "Bob {:.4} vs optimum {:.4}",
        held.bits_per_byte,
        best.bits_per_byte
    );
    // Every step was recorded, and the lineage names the checkpoint.
    let points = std::fs::read_to_string(tmp.path().join("run/points.jsonl")).unwrap();
    assert_eq!(points.lines().count(), 400);
    let lineage = std::fs::read_to_string(tmp.path().join("run/lineage.jsonl")).unwrap();
    assert!(lineage.contains(&r.sha256));
}

#[test]
fn the_same_seed_gives_the_same_bytes_and_resume_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bytes_stream(tmp.path()) else { return };
    let n = 12;

    let mut whole = options(&data, &tmp.path().join("whole"), 2 * n);
    whole.checkpoint_every = Some(n);
    whole.heldout_windows = 8;
    let a = train(&whole).unwrap();
    whole.run_dir = tmp.path().join("again");
    let b = train(&whole).unwrap();
    assert_eq!(a.sha256, b.sha256, "two runs from one seed differ");

    let mut first = options(&data, &tmp.path().join("halves"), n);
    first.schedule_steps = Some(2 * n);
    first.heldout_windows = 8;
    let h1 = train(&first).unwrap();
    let mut second = first.clone();
    second.resume = Some(h1.checkpoint.clone());
    let h2 = train(&second).unwrap();
    assert_eq!(h2.last_step, 2 * n);
    assert_eq!(
        std::fs::read(&a.checkpoint).unwrap(),
        std::fs::read(&h2.checkpoint).unwrap(),
        "{} steps then a resume for {} more differs from {} in one go",
        n,
        n,
        2 * n
    );
    // The lineage carries each checkpoint's held-out score and the training seconds from the
    // run's first step: the resumed invocation's checkpoint counts the first one's too.
    let rows: Vec<alpha_records::LineageRow> =
        alpha_records::jsonl::read(&tmp.path().join("halves/lineage.jsonl")).unwrap().rows;
    assert_eq!(rows.iter().map(|r| r.step).collect::<Vec<_>>(), [n, 2 * n]);
    let (s1, s2) = (rows[0].device_s.unwrap(), rows[1].device_s.unwrap());
    assert!(s1 > 0.0 && s2 > s1 * 1.5, "training seconds {s1} then {s2}");
    assert!(rows.iter().all(|r| r.heldout_bpb.is_some_and(|b| b > 0.0 && b < 8.0)));
}

#[test]
fn accumulating_two_half_batches_matches_one_whole_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bytes_stream(tmp.path()) else { return };
    let mut whole = options(&data, &tmp.path().join("whole"), 6);
    whole.batch = Some(8);
    whole.heldout_windows = 0;
    let mut halves = whole.clone();
    halves.run_dir = tmp.path().join("halves");
    halves.batch = Some(4);
    halves.accumulation = 2;
    let (a, b) = (train(&whole).unwrap(), train(&halves).unwrap());
    let ta = &alpha_run::checkpoint::load(&a.checkpoint).unwrap().tensors["logits"].1;
    let tb = &alpha_run::checkpoint::load(&b.checkpoint).unwrap().tensors["logits"].1;
    let moved = ta.iter().fold(0f32, |m, x| m.max(x.abs()));
    let diff = ta.iter().zip(tb).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(moved > 0.01, "the table did not move");
    assert!(diff <= 1e-4 * moved, "accumulated update differs by {diff} (table moved {moved})");
    assert!((a.last_loss - b.last_loss).abs() < 1e-5, "{} vs {}", a.last_loss, b.last_loss);
}

#[test]
fn each_scored_checkpoint_records_its_standard_error_its_cost_and_a_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bytes_stream(tmp.path()) else { return };
    let run = tmp.path().join("run");
    let mut o = options(&data, &run, 40);
    o.checkpoint_every = Some(20);
    o.heldout_windows = 32;
    o.checkpoint_sample_tokens = 24;
    // What the CLI passes a GPU run started with --skip-gates; run.json keeps it.
    o.gates = Some(alpha_records::RunGates {
        build: "b".repeat(64),
        device: "cuda".into(),
        skipped: true,
        passed: vec![],
        missing: alpha_records::GATES.iter().map(|g| g.to_string()).collect(),
        ledger: "runs/.gates/bob.jsonl".into(),
    });
    let r = train(&o).unwrap();
    let rows: Vec<alpha_records::LineageRow> = alpha_run::records::read_rows(&run.join("lineage.jsonl"));
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let (bpb, se) = (row.heldout_bpb.unwrap(), row.heldout_bpb_se.unwrap());
        // Over 32 windows of real prose the error is small but not zero.
        assert!(se > 0.0 && se < 0.1 * bpb, "{bpb} ± {se}");
        assert!(row.heldout_loss_se.unwrap() > 0.0);
        assert!(row.device_s.unwrap() > 0.0);
        assert_eq!(row.sample_prompt.as_deref(), Some("The "));
        assert!(!row.sample.as_deref().unwrap().is_empty(), "a sample of 24 bytes");
    }
    assert!(rows[1].device_s > rows[0].device_s, "the cost grows along the run");
    let se = r.heldout.unwrap().bpb_se.unwrap();
    assert!((se - rows[1].heldout_bpb_se.unwrap()).abs() <= 1e-12 * se, "the last row is the run's own score");
    let info = alpha_run::records::Records::read_run_info(&run).unwrap();
    assert!(info.gates.unwrap().skipped, "run.json records that the gates were skipped");
}

/// Whether `a` is `b` to rounding.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-9)
}

#[test]
fn every_step_records_its_device_time_and_the_cost_counts_it_across_a_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bytes_stream(tmp.path()) else { return };
    let run = tmp.path().join("run");
    let mut first = options(&data, &run, 4);
    first.heldout_windows = 0;
    first.schedule_steps = Some(7);
    // The profiled step (the invocation's second) runs launch by launch: it has no device time
    // of its own, and its cost is its wall time.
    first.profile = true;
    let a = train(&first).unwrap();
    let mut second = options(&data, &run, 3);
    second.heldout_windows = 0;
    second.resume = Some(a.checkpoint.clone());
    train(&second).unwrap();

    let points: Vec<alpha_records::Point> = alpha_run::records::read_rows(&run.join("points.jsonl"));
    assert_eq!(points.iter().map(|p| p.step).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6, 7]);
    for p in &points {
        match p.step {
            2 => assert_eq!(p.device_ms, None, "the profiled step"),
            _ => assert!(p.device_ms.is_some_and(|d| d > 0.0 && d <= p.ms.unwrap()), "step {}: {p:?}", p.step),
        }
    }
    let invocations: Vec<alpha_records::Invocation> = alpha_run::records::read_rows(&run.join("invocations.jsonl"));
    assert_eq!(invocations.len(), 2);
    for inv in &invocations {
        let mine = points.iter().filter(|p| p.invocation == Some(inv.k));
        let sum: f64 = mine.filter_map(|p| p.device_ms).sum();
        let got = inv.device_s.unwrap();
        assert!(close(got, sum / 1e3), "invocation {}: {got} s, its steps {sum} ms", inv.k);
    }
    // The lineage's cost: each step's device time, the profiled step's wall time, carried over
    // the resume from the first invocation's checkpoint.
    let cost = |upto: u64| -> f64 {
        points.iter().filter(|p| p.step <= upto).map(|p| p.device_ms.or(p.ms).unwrap()).sum::<f64>() / 1e3
    };
    let lineage: Vec<alpha_records::LineageRow> = alpha_run::records::read_rows(&run.join("lineage.jsonl"));
    assert_eq!(lineage.iter().map(|r| r.step).collect::<Vec<_>>(), [4, 7]);
    for row in &lineage {
        let got = row.device_s.unwrap();
        assert!(close(got, cost(row.step)), "step {}: {got} s, want {} s", row.step, cost(row.step));
    }
}
