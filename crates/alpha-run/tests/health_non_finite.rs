//! A non-finite gradient shows in the health figures: the test hook makes one element of the
//! first parameter's gradient NaN before update 2 (through its accumulator), and that update's
//! health row counts exactly it. Its own test binary, since the hook is armed for the process.

#[allow(dead_code)] // the helpers the other suites use
mod common;

use alpha_run::records::HealthRow;
use alpha_run::{train, TrainOptions};

#[test]
fn an_injected_non_finite_gradient_is_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bpe_stream(tmp.path()) else { return };
    let run = tmp.path().join("run");
    alpha_run::testhook::arm("non-finite-grad:2").unwrap();
    let opts =
        TrainOptions { health_every: 2, accumulation: 2, ..common::options("mini-mixed", 2, 11, &data, &run, 2) };
    // The NaN reaches the parameters; whether the run ends or fails at its last step, the row
    // of update 2 is written first.
    let _ = train(&opts);
    let rows = alpha_records::jsonl::read::<HealthRow>(&run.join("health.jsonl")).unwrap().rows;
    let row = rows.iter().find(|r| r.step == 2).expect("a health row for update 2");
    let first = &row.tensors[0];
    assert_eq!(first.nonfinite["grad"], 1, "{}: the NaN put in its gradient", first.tensor);
    assert_eq!(first.norms["grad"], None, "a NaN gradient's norm is not a number");
    assert!(first.nonfinite["param"] >= 1, "{}: the NaN reached the parameter", first.tensor);
    for t in &row.tensors[1..] {
        assert_eq!(t.nonfinite["grad"], 0, "{}: its gradient was left finite", t.tensor);
    }
}
