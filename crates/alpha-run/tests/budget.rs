//! Training to a wall-clock budget on real prose: the run stops at the first update that spends
//! its budget, the rate's factor has warmed down to near 0 by then and is never negative, the
//! last update is checkpointed with the time spent, and a resume spends the rest of the same
//! budget, its factor going on from the checkpoint's instead of starting again at 1.

mod common;

use alpha_learn::TimeBudget;
use alpha_run::records::{read_rows, Point, RunInfo};
use alpha_run::{checkpoint, train, TrainOptions};

/// Bob at 16 sequences from seed 5, no step cap: the budget ends the run.
fn budgeted(data: &std::path::Path, run: &std::path::Path, seconds: f64, warmdown: u64) -> TrainOptions {
    TrainOptions {
        budget: Some(seconds),
        warmdown_updates: Some(warmdown),
        ..common::options("bob", 16, 5, data, run, 1_000_000)
    }
}

fn points(run: &std::path::Path) -> Vec<Point> {
    read_rows(&run.join("points.jsonl"))
}

/// Equal to the last bit or two: serde_json (without its `float_roundtrip` feature) may read a
/// number back one unit in the last place from the one written.
fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 4.0 * f64::EPSILON * a.abs().max(b.abs())
}

#[test]
fn a_budgeted_run_stops_at_its_budget_with_the_rate_warmed_down() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bytes_stream(tmp.path()) else { return };
    let run = tmp.path().join("run");
    let (seconds, warmdown) = (3.0, 40);
    let started = std::time::Instant::now();
    let r = train(&budgeted(&data, &run, seconds, warmdown)).unwrap();
    let wall = started.elapsed().as_secs_f64();
    let b = r.budget.expect("a budgeted run reports its budget");
    let p = points(&run);
    let n = p.len();
    eprintln!(
        "{n} updates in {:.3} s of training time ({:.3} s wall, {:.2} ms a step), last factor {:.4}, loss {:.3} → {:.3}",
        b.elapsed,
        wall,
        b.mean_step() * 1e3,
        r.last_factor,
        p[0].loss.unwrap(),
        r.last_loss
    );

    // It stopped at the first update that spent the budget, and trained for all of it.
    assert_eq!(n as u64, r.last_step);
    assert_eq!(b.timed_steps, r.last_step);
    assert!(b.elapsed >= seconds, "stopped early: {} s of {seconds}", b.elapsed);
    let before_last = p[n - 2].elapsed_s.unwrap();
    assert!(before_last < seconds, "the update before the last had spent the budget already ({before_last} s)");
    assert!(wall >= b.elapsed, "training time {} counts more than the wall clock {wall}", b.elapsed);
    assert!(n > warmdown as usize + 10, "too few updates ({n}) to see the warmdown of {warmdown}");

    // The factor: 1 at first, below 1 over about the last `warmdown` updates, near 0 at the end,
    // never negative; the recorded rate is the schedule's times it.
    let factors: Vec<f64> = p.iter().map(|q| q.lr_factor.expect("each point has its factor")).collect();
    assert_eq!(factors[0], 1.0);
    assert!(factors.iter().all(|f| (0.0..=1.0).contains(f)), "a factor outside [0, 1]");
    let warming = factors.iter().filter(|&&f| f < 1.0).count();
    assert!(
        warming >= warmdown as usize / 3 && warming <= 3 * warmdown as usize,
        "{warming} updates warmed down, for a warmdown of {warmdown}"
    );
    // The last update began with less than its own duration left, so its factor is below that
    // duration over the warmdown's time: about 1/warmdown at a steady step time.
    let last_took = b.elapsed - before_last;
    let mean_before = before_last / (n - 1) as f64;
    assert!(r.last_factor <= last_took / (warmdown as f64 * mean_before) * 1.01, "last factor {}", r.last_factor);
    assert!(r.last_factor < 0.25, "the last update ran at {} of the peak", r.last_factor);
    assert!(same(r.last_factor, factors[n - 1]), "{} recorded as {}", r.last_factor, factors[n - 1]);
    // Each factor is the rule's, from the time and steps before its update.
    for w in p.windows(2) {
        let (prev, q) = (&w[0], &w[1]);
        let spent = prev.elapsed_s.unwrap();
        let rule = TimeBudget { seconds, warmdown_updates: warmdown }.factor(spent, spent / prev.step as f64);
        // The point's elapsed time is taken just before its own record is written; the
        // budget's, just after: they differ by that write.
        assert!((q.lr_factor.unwrap() - rule).abs() < 0.02, "step {}: {} against {rule}", q.step, q.lr_factor.unwrap());
        assert!(q.elapsed_s.unwrap() > spent, "the time spent must grow");
    }
    let peak = 0.1;
    for q in &p {
        let lr = q.lr.unwrap();
        assert!(lr >= 0.0 && lr <= peak * q.lr_factor.unwrap() + 1e-12, "step {}: lr {lr}", q.step);
    }
    assert!(r.last_loss < p[0].loss.unwrap() - 1.0, "Bob did not learn: {} → {}", p[0].loss.unwrap(), r.last_loss);

    // The last update is checkpointed with the budget's state, and run.json says where it ended.
    let c = checkpoint::load(&r.checkpoint).unwrap();
    assert_eq!(c.meta.step, r.last_step);
    assert_eq!(c.meta.budget, Some(b));
    let info: RunInfo = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info.state, "finished");
    assert_eq!(
        (info.budget_s, info.elapsed_s, info.warmdown_updates),
        (Some(seconds), Some(b.elapsed), Some(warmdown))
    );
    assert_eq!((info.steps_done, info.steps_target), (r.last_step, r.last_step));

    // A spent budget does not train again: the resume is refused and nothing is written.
    let before = std::fs::read(run.join("points.jsonl")).unwrap();
    let mut again = budgeted(&data, &run, seconds, warmdown);
    again.resume = Some(r.checkpoint.clone());
    again.budget = None;
    let e = format!("{:#}", train(&again).unwrap_err());
    assert!(e.contains("is spent") && e.contains("larger --budget"), "{e}");
    assert_eq!(std::fs::read(run.join("points.jsonl")).unwrap(), before);
}

#[test]
fn a_resume_spends_the_rest_of_the_budget_and_continues_its_factor() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bytes_stream(tmp.path()) else { return };
    let run = tmp.path().join("run");
    // A warmdown longer than the budget: the factor is below 1 from the second update on, so
    // one that started again at 1 shows.
    let (seconds, warmdown) = (2.5, 5000);
    let mut first = budgeted(&data, &run, seconds, warmdown);
    first.steps = 25;
    let a = train(&first).unwrap();
    let carried = a.budget.unwrap();
    assert_eq!(a.last_step, 25, "the first leg ends at its step cap, inside the budget");
    assert!(!carried.spent(), "25 updates of Bob took the whole budget: {} s", carried.elapsed);
    let expected = carried.factor();
    assert!(expected < 1.0, "the checkpoint's factor {expected} is not yet in the warmdown");

    // The resume names no budget: the checkpoint's goes on.
    let mut second = budgeted(&data, &run, seconds, warmdown);
    second.budget = None;
    second.warmdown_updates = None;
    second.resume = Some(a.checkpoint.clone());
    let b = train(&second).unwrap();
    let end = b.budget.expect("the resume trains to the checkpoint's budget");
    let p = points(&run);
    let resumed: Vec<&Point> = p.iter().filter(|q| q.step > 25).collect();
    eprintln!(
        "leg 1: 25 updates, {:.3} s, factor {expected:.5}; leg 2: {} updates to {:.3} s, last factor {:.5}",
        carried.elapsed,
        resumed.len(),
        end.elapsed,
        b.last_factor
    );
    assert_eq!(end.budget, carried.budget, "the budget and its warmdown come from the checkpoint");
    // The first resumed update runs at exactly the factor the checkpoint's state gives.
    assert_eq!(resumed[0].step, 26);
    let first_factor = resumed[0].lr_factor.unwrap();
    assert!(same(first_factor, expected), "the resume ran at {first_factor}, the checkpoint gives {expected}");
    assert!(resumed[0].elapsed_s.unwrap() > carried.elapsed, "the resumed time starts from the checkpoint's");
    // Both legs together spend the budget once.
    assert_eq!(end.timed_steps, b.last_step);
    assert!(end.elapsed >= seconds && resumed[resumed.len() - 2].elapsed_s.unwrap() < seconds);
    assert!(b.last_factor < expected && b.last_factor >= 0.0);
    assert!(resumed.iter().all(|q| q.lr_factor.unwrap() < 1.0 && q.lr.unwrap() >= 0.0));
}
