//! Step counts from the caller and from a checkpoint are checked before anything is written:
//! a resume asking for more steps than a u64 holds is a clear error and leaves the run's
//! records as they were (it used to wrap, mark the run finished at step 0 and panic).

mod common;

use alpha_run::{train, TrainOptions};

fn options(data: &std::path::Path, run: &std::path::Path, steps: u64) -> TrainOptions {
    common::options("bob", 2, 3, data, run, steps)
}

#[test]
fn a_step_count_past_u64_is_refused_before_any_record_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bytes_stream(tmp.path()) else { return };
    let run = tmp.path().join("run");
    let first = train(&options(&data, &run, 2)).unwrap();
    let records = |name: &str| std::fs::read(run.join(name)).unwrap();
    let before: Vec<Vec<u8>> = ["run.json", "points.jsonl", "lineage.jsonl"].map(records).to_vec();

    for steps in [u64::MAX, u64::MAX - 1] {
        let mut again = options(&data, &run, steps);
        again.resume = Some(first.checkpoint.clone());
        let e = format!("{:#}", train(&again).unwrap_err());
        assert!(e.contains("would pass the largest step count"), "{e}");
        assert!(e.contains(&steps.to_string()), "{e}");
    }
    let after: Vec<Vec<u8>> = ["run.json", "points.jsonl", "lineage.jsonl"].map(records).to_vec();
    assert_eq!(before, after);
    // A count that fits still trains.
    let mut fits = options(&data, &run, 1);
    fits.resume = Some(first.checkpoint.clone());
    assert_eq!(train(&fits).unwrap().last_step, 3);
}
