//! Robustness cases: run directories, records and checkpoint integrity. A run directory belongs
//! to one run and one process; a resume from an older checkpoint writes a branch and never
//! touches the old line's files; a crash at a chosen write (the trainer's test hook,
//! `ALPHA_TEST_CRASH_AT`) leaves records that read, a `run.json` that says "interrupted", and a
//! run that resumes; bad step counts and edited checkpoints are clear errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use alpha_run::records::{jsonl, LineageRow, Point, Records};

use crate::common::{alpha, fails_with, prepared, succeeds, text};

/// `alpha train bob` on `data` into `run`, small and quiet, with `extra` flags and environment.
fn train_with(dir: &Path, data: &Path, run: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_alpha"));
    c.args(["train", "bob", "--batch", "4", "--heldout-windows", "0", "--sample-tokens", "0", "--quiet"])
        .args(["--data", data.to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
        .args(extra)
        .current_dir(dir);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("running alpha")
}

fn train(dir: &Path, data: &Path, run: &Path, extra: &[&str]) -> Output {
    train_with(dir, data, run, extra, &[])
}

/// An 8-step run checkpointing every 2 steps, made to fail at the crash point `point`.
fn crashed_at(dir: &Path, data: &Path, run: &Path, point: &str) -> Output {
    train_with(dir, data, run, &["--steps", "8", "--checkpoint-every", "2"], &[("ALPHA_TEST_CRASH_AT", point)])
}

/// A long run in the background, stopped by the test.
fn spawn_long(dir: &Path, data: &Path, run: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(["train", "bob", "--steps", "100000", "--batch", "4", "--heldout-windows", "0", "--quiet"])
        .args(["--data", data.to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting alpha")
}

/// Wait (up to a minute) until `ready` holds; the run it waits on makes it hold.
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ready() {
        assert!(t0.elapsed() < Duration::from_secs(60), "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ckpt(run: &Path, step: u64) -> PathBuf {
    run.join(format!("checkpoints/step-{step:06}.safetensors"))
}

/// Every file under `dir` with its bytes.
fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn rows<T: serde::de::DeserializeOwned>(path: &Path) -> jsonl::Rows<T> {
    jsonl::read(path).unwrap()
}

fn sha_of(path: &Path) -> String {
    alpha_run::checkpoint::load(path).unwrap().sha256
}

#[test]
fn a_second_train_on_one_run_dir_is_refused_naming_the_holder() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("shared-run");
    let first = spawn_long(tmp.path(), &data, &run);
    let pid = first.id();
    // The holder writes its pid into the lock file once it holds the lock.
    let lock = run.join("run.lock");
    wait_until("the first run's lock", || {
        std::fs::read_to_string(&lock).is_ok_and(|s| s.contains(&format!("pid {pid} ")))
    });
    wait_until("the first run's first step", || rows::<Point>(&run.join("points.jsonl")).rows.len() >= 2);
    let second = train(tmp.path(), &data, &run, &["--steps", "3", "--seed", "9"]);
    fails_with(&second, &format!("pid {pid}"));
    fails_with(&second, "in use");

    // SIGTERM stops the holder as Ctrl-C does: the step in flight finishes and is kept.
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    let out = first.wait_with_output().unwrap();
    fails_with(&out, "interrupted after step");
    let info = Records::read_run_info(&run).unwrap();
    assert_eq!(info.state, "stopped");
    assert_eq!(info.seed, Some(1), "the refused run's seed got in");
    let lineage = rows::<LineageRow>(&run.join("lineage.jsonl")).rows;
    assert_eq!(lineage.len(), 1);
    assert_eq!(lineage[0].sha256, sha_of(&run.join(&lineage[0].path)));
    let points = rows::<Point>(&run.join("points.jsonl"));
    assert_eq!(points.rows.len() as u64, info.steps_done);
    assert!(points.rows.iter().all(|p| p.invocation == Some(1)));
}

#[test]
fn a_stop_signal_sent_twice_at_once_still_keeps_the_step() {
    // `timeout` signals its child and then its process group, so the child gets SIGTERM twice
    // within a moment; that is one request to stop, not a second Ctrl-C that quits at once.
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("twice");
    let child = spawn_long(tmp.path(), &data, &run);
    let pid = child.id();
    wait_until("the run's first steps", || rows::<Point>(&run.join("points.jsonl")).rows.len() >= 2);
    let twice = format!("kill -TERM {pid}; kill -TERM {pid}");
    assert!(Command::new("sh").args(["-c", &twice]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    fails_with(&out, "interrupted after step");
    let info = Records::read_run_info(&run).unwrap();
    assert_eq!(info.state, "stopped", "{:?}", info.message);
    let lineage = rows::<LineageRow>(&run.join("lineage.jsonl")).rows;
    assert_eq!(lineage.len(), 1);
    assert_eq!(lineage[0].step, info.steps_done);
    assert_eq!(lineage[0].sha256, sha_of(&run.join(&lineage[0].path)));
}

#[test]
fn training_into_a_directory_holding_another_run_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let base = tmp.path().join("base");
    succeeds(&train(tmp.path(), &data, &base, &["--steps", "4", "--checkpoint-every", "2"]));
    let before = files_under(&base);

    let o = train(tmp.path(), &data, &base, &["--steps", "4", "--checkpoint-every", "2", "--seed", "7"]);
    fails_with(&o, "holds another run");
    fails_with(&o, "--run-dir");
    // Another run's checkpoint is not this run's to continue either.
    let other = tmp.path().join("other");
    succeeds(&train(tmp.path(), &data, &other, &["--steps", "2"]));
    let o = train(tmp.path(), &data, &base, &["--steps", "2", "--resume", ckpt(&other, 2).to_str().unwrap()]);
    fails_with(&o, "is not one of its checkpoints");
    // Nothing of the base run changed but the lock file the refused runs opened.
    let mut after = files_under(&base);
    after.remove(&base.join("run.lock"));
    let mut before = before;
    before.remove(&base.join("run.lock"));
    assert_eq!(before, after);
}

#[test]
fn resuming_from_an_older_checkpoint_starts_a_branch_and_keeps_the_old_line() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("base");
    succeeds(&train(tmp.path(), &data, &run, &["--steps", "4", "--checkpoint-every", "2"]));
    let main_line = files_under(&run.join("checkpoints"));
    let (c2, c4) = (ckpt(&run, 2), ckpt(&run, 4));

    // From step 2, with other settings: branch 1, in its own folder.
    let o = train(
        tmp.path(),
        &data,
        &run,
        &["--steps", "4", "--checkpoint-every", "2", "--lr", "0.05", "--resume"]
            .iter()
            .copied()
            .chain([c2.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    let (_, err) = text(&o);
    succeeds(&o);
    assert!(err.contains("branch 1"), "{err}");
    for (path, bytes) in &main_line {
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{} changed", path.display());
    }
    let b4 = run.join("checkpoints/branch-1/step-000004.safetensors");
    let b6 = run.join("checkpoints/branch-1/step-000006.safetensors");
    assert_eq!(alpha_run::checkpoint::load(&b4).unwrap().meta.parent, Some(sha_of(&c2)));
    assert_eq!(alpha_run::checkpoint::load(&b6).unwrap().meta.parent, Some(sha_of(&b4)));

    // The lineage says which line each checkpoint is on, and every row matches its file.
    let lineage = rows::<LineageRow>(&run.join("lineage.jsonl")).rows;
    let by_line: Vec<(u64, u64)> = lineage.iter().map(|r| (r.branch.unwrap_or(0), r.step)).collect();
    assert_eq!(by_line, vec![(0, 2), (0, 4), (1, 4), (1, 6)]);
    for r in &lineage {
        assert_eq!(r.sha256, sha_of(&run.join(&r.path)), "{}", r.path);
    }
    // The points tell the invocations and lines apart: steps 3 and 4 were run twice.
    let points = rows::<Point>(&run.join("points.jsonl")).rows;
    let seen: Vec<(Option<u64>, Option<u64>, u64)> = points.iter().map(|p| (p.invocation, p.branch, p.step)).collect();
    let expected: Vec<(Option<u64>, Option<u64>, u64)> =
        (1..=4).map(|s| (Some(1), Some(0), s)).chain((3..=6).map(|s| (Some(2), Some(1), s))).collect();
    assert_eq!(seen, expected);

    // From the main line's tip: the main line goes on.
    succeeds(&train(tmp.path(), &data, &run, &["--steps", "2", "--resume", c4.to_str().unwrap()]));
    assert_eq!(alpha_run::checkpoint::load(&ckpt(&run, 6)).unwrap().meta.parent, Some(sha_of(&c4)));
    // From inside branch 1 (step 4 has a child): branch 2.
    succeeds(&train(tmp.path(), &data, &run, &["--steps", "1", "--resume", b4.to_str().unwrap()]));
    let b2 = run.join("checkpoints/branch-2/step-000005.safetensors");
    assert_eq!(alpha_run::checkpoint::load(&b2).unwrap().meta.parent, Some(sha_of(&b4)));
    // Without --run-dir, a branch's checkpoint continues in its own run directory and line.
    succeeds(&alpha(
        &["train", "bob", "--batch", "4", "--steps", "1", "--heldout-windows", "0", "--sample-tokens", "0"]
            .iter()
            .copied()
            .chain(["--quiet", "--data", data.to_str().unwrap(), "--resume", b6.to_str().unwrap()])
            .collect::<Vec<_>>(),
        tmp.path(),
    ));
    let b7 = run.join("checkpoints/branch-1/step-000007.safetensors");
    assert_eq!(alpha_run::checkpoint::load(&b7).unwrap().meta.parent, Some(sha_of(&b6)));
    assert!(!tmp.path().join("runs").exists(), "a fresh run directory was made");
    for (path, bytes) in &main_line {
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{} changed", path.display());
    }
}

#[test]
fn a_crash_mid_row_leaves_records_that_read_and_a_run_that_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("crashed");
    // Half of step 5's points row written, then the process dies.
    let o = crashed_at(tmp.path(), &data, &run, "points-row:5");
    assert!(!o.status.success());
    let points = rows::<Point>(&run.join("points.jsonl"));
    assert_eq!(points.rows.iter().map(|p| p.step).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    assert!(points.torn_tail, "the hook should leave a row cut short");
    // The next reader sees the run interrupted, with its last checkpoint.
    let info = Records::read_run_info(&run).unwrap();
    assert_eq!(info.state, "interrupted");
    assert_eq!(info.steps_done, 4);
    assert!(info.message.unwrap().contains("step-000004.safetensors"));

    // The resume cuts the torn row off, so its own first row is whole.
    succeeds(&train(tmp.path(), &data, &run, &["--steps", "4", "--resume", ckpt(&run, 4).to_str().unwrap()]));
    let points = rows::<Point>(&run.join("points.jsonl"));
    assert!(!points.torn_tail && points.skipped.is_empty(), "{points:?}");
    assert_eq!(points.rows.iter().map(|p| p.step).collect::<Vec<_>>(), (1..=8).collect::<Vec<_>>());
    assert_eq!(Records::read_run_info(&run).unwrap().state, "finished");
}

#[test]
fn a_crash_before_the_lineage_row_keeps_the_checkpoint_resumable_and_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("crashed");
    let o = crashed_at(tmp.path(), &data, &run, "lineage-row:4");
    assert!(!o.status.success());
    let lineage = rows::<LineageRow>(&run.join("lineage.jsonl"));
    assert_eq!(lineage.rows.len(), 1);
    assert!(lineage.torn_tail);
    let c4 = ckpt(&run, 4);
    succeeds(&train(tmp.path(), &data, &run, &["--steps", "2", "--resume", c4.to_str().unwrap()]));
    // Checkpoint 4 is listed again and the rows chain: 2 → 4 → 6, each matching its file.
    let lineage = rows::<LineageRow>(&run.join("lineage.jsonl"));
    assert!(!lineage.torn_tail && lineage.skipped.is_empty());
    assert_eq!(lineage.rows.iter().map(|r| r.step).collect::<Vec<_>>(), vec![2, 4, 6]);
    for r in &lineage.rows {
        assert_eq!(r.sha256, sha_of(&run.join(&r.path)));
    }
    assert_eq!(lineage.rows[1].parent.as_deref(), Some(lineage.rows[0].sha256.as_str()));
    assert_eq!(lineage.rows[2].parent.as_deref(), Some(lineage.rows[1].sha256.as_str()));
}

#[test]
fn a_crash_before_a_checkpoint_is_renamed_leaves_no_temporary_file_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("crashed");
    let o = crashed_at(tmp.path(), &data, &run, "checkpoint-tmp:4");
    assert!(!o.status.success());
    let tmp_file = run.join("checkpoints/step-000004.safetensors.tmp");
    assert!(tmp_file.exists(), "the hook should leave the temporary file");
    assert!(!ckpt(&run, 4).exists());
    assert_eq!(Records::read_run_info(&run).unwrap().state, "interrupted");
    let o = train(tmp.path(), &data, &run, &["--steps", "2", "--resume", ckpt(&run, 2).to_str().unwrap()]);
    let (_, err) = text(&o);
    succeeds(&o);
    assert!(err.contains("removed") && err.contains("step-000004.safetensors.tmp"), "{err}");
    assert!(!tmp_file.exists());
    alpha_run::checkpoint::load(&ckpt(&run, 4)).unwrap();
}

#[test]
fn a_checkpoint_write_that_fails_removes_its_temporary_file_and_marks_the_run_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("full");
    // Checkpoint 4's write fails half way, as on a full disk.
    let o = crashed_at(tmp.path(), &data, &run, "checkpoint-full:4");
    fails_with(&o, "No space left");
    assert!(!run.join("checkpoints/step-000004.safetensors.tmp").exists());
    assert!(!ckpt(&run, 4).exists());
    let info = Records::read_run_info(&run).unwrap();
    assert_eq!(info.state, "failed");
    assert!(info.message.unwrap().contains("No space left"));
    succeeds(&train(tmp.path(), &data, &run, &["--steps", "2", "--resume", ckpt(&run, 2).to_str().unwrap()]));
}

#[test]
fn a_killed_run_reads_as_interrupted_with_its_last_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("killed");
    // Step 5 recorded, then the process ends as kill -9 ends it.
    let o = crashed_at(tmp.path(), &data, &run, "after-step:5");
    assert!(!o.status.success());
    let written = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(written.contains("\"running\""), "{written}");
    let info = Records::read_run_info(&run).unwrap();
    assert_eq!(info.state, "interrupted");
    assert_eq!(info.last_checkpoint.as_deref(), Some(ckpt(&run, 4).to_str().unwrap()));
    // The next run into the directory records it so before it starts.
    let o = train(tmp.path(), &data, &run, &["--steps", "1", "--resume", ckpt(&run, 4).to_str().unwrap()]);
    let (_, err) = text(&o);
    succeeds(&o);
    assert!(err.contains("interrupted"), "{err}");
    let points = rows::<Point>(&run.join("points.jsonl")).rows;
    // Step 5 was run by both invocations; the newer row is the one its checkpoint continues.
    let fifth: Vec<Option<u64>> = points.iter().filter(|p| p.step == 5).map(|p| p.invocation).collect();
    assert_eq!(fifth, vec![Some(1), Some(2)]);
    // The killed invocation's row is written from its points, so each invocation has one.
    let invocations = rows::<alpha_run::records::Invocation>(&run.join("invocations.jsonl")).rows;
    let spans: Vec<(u64, u64, u64)> = invocations.iter().map(|r| (r.k, r.first_step, r.last_step)).collect();
    assert_eq!(spans, vec![(1, 1, 5), (2, 5, 5)]);
    // Its device seconds are its recorded steps' device time.
    let killed: f64 = points.iter().filter(|p| p.invocation == Some(1)).filter_map(|p| p.device_ms).sum();
    let got = invocations[0].device_s.unwrap_or_default();
    assert!(killed > 0.0 && (got - killed / 1e3).abs() <= 1e-9 * got, "{got} s against its steps' {killed} ms");
}

#[test]
fn a_step_count_past_u64_is_a_clear_error_and_leaves_run_json_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("base");
    succeeds(&train(tmp.path(), &data, &run, &["--steps", "2"]));
    let before = files_under(&run);
    let c2 = ckpt(&run, 2);
    let o = alpha(
        &["train", "bob", "--data", data.to_str().unwrap(), "--resume", c2.to_str().unwrap(), "--quiet"]
            .iter()
            .copied()
            .chain(["--steps", "18446744073709551615", "--sample-tokens", "0"])
            .collect::<Vec<_>>(),
        tmp.path(),
    );
    fails_with(&o, "--steps");
    assert_eq!(files_under(&run), before);
}

use alpha_run::testhook::with_metadata_entry as with_meta;

#[test]
fn an_edited_checkpoint_or_sidecar_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("base");
    succeeds(&train(tmp.path(), &data, &run, &["--steps", "2"]));
    let c2 = ckpt(&run, 2);
    let bytes = std::fs::read(&c2).unwrap();
    let sidecar = PathBuf::from(format!("{}.sha256", c2.display()));
    let recorded = std::fs::read(&sidecar).unwrap();
    let score = || alpha(&["score", "bob", "--checkpoint", c2.to_str().unwrap(), "--windows", "4"], tmp.path());
    succeeds(&score());

    // Without the sidecar, the digest inside still covers step, cursor, system and data path.
    std::fs::remove_file(&sidecar).unwrap();
    for (key, value) in [
        ("step", "1000"),
        ("cursor", "{\"epoch\":0,\"position\":12345}"),
        ("system", "coppelius"),
        ("data", data.parent().unwrap().to_str().unwrap()),
    ] {
        std::fs::write(&c2, with_meta(&bytes, key, value)).unwrap();
        fails_with(&score(), "damaged or edited");
    }
    // With it, the whole file is checked first.
    std::fs::write(&c2, with_meta(&bytes, "step", "1000")).unwrap();
    std::fs::write(&sidecar, &recorded).unwrap();
    fails_with(&score(), "damaged");
    // A sidecar that is not text, or not a SHA-256, is an error, not ignored.
    std::fs::write(&c2, &bytes).unwrap();
    std::fs::write(&sidecar, b"\xff\xfe\xfd\n").unwrap();
    fails_with(&score(), "is not text");
    std::fs::write(&sidecar, b"not a digest\n").unwrap();
    fails_with(&score(), "does not hold a SHA-256");
    std::fs::write(&sidecar, &recorded).unwrap();
    succeeds(&score());
}

#[test]
fn a_resume_without_lr_goes_on_at_the_rate_the_run_had() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    // Four steps at --lr 0.05 in one go, against two and a resume of two with no --lr.
    let whole = tmp.path().join("whole");
    succeeds(&train(tmp.path(), &data, &whole, &["--steps", "4", "--lr", "0.05"]));
    let split = tmp.path().join("split");
    succeeds(&train(tmp.path(), &data, &split, &["--steps", "2", "--schedule-steps", "4", "--lr", "0.05"]));
    succeeds(&train(tmp.path(), &data, &split, &["--steps", "2", "--resume", ckpt(&split, 2).to_str().unwrap()]));
    let (a, b) = (
        alpha_run::checkpoint::load(&ckpt(&whole, 4)).unwrap(),
        alpha_run::checkpoint::load(&ckpt(&split, 4)).unwrap(),
    );
    assert_eq!(b.meta.peak, Some(0.05));
    assert_eq!(a.meta.schedule, b.meta.schedule);
    assert_eq!(a.tensors, b.tensors, "the resumed run's tensors differ from the uninterrupted run's");
}
