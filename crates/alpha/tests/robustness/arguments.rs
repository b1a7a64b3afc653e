//! Bad arguments, end to end through the binary: each is refused with a message naming the flag
//! and the problem, a nonzero exit and no panic — before any corpus is read, so the table runs
//! on a fresh clone. The cases that need a trained checkpoint skip without `../shared`.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStringExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{alpha, fails_with, prepared, short_run, text};

/// (arguments, what stderr must say). `C` stands for a checkpoint that does not exist: the
/// argument is refused before it is opened.
const CASES: &[(&[&str], &str)] = &[
    // Panics and aborts the issue found.
    (&["score", "bob", "--checkpoint", "C", "--batch", "0"], "invalid value '0' for '--batch <BATCH>'"),
    (&["train", "bob", "--batch", "100000000"], "give sequences a step from 1 to 1,048,576"),
    (&["train", "gpt2", "--batch", "65536"], "lower --batch"),
    (
        &["train", "bob", "--resume", "C", "--steps", "18446744073709551615"],
        "give the number of updates from 1 to 1,000,000,000",
    ),
    (&["train", "bob", "--resume", "C", "--steps", "18446744073709551616"], "'--steps <STEPS>': is too large"),
    // Missing validation the issue found.
    (&["train", "bob", "--lr", "-1"], "'--lr <LR>': must be above 0 and at most 10"),
    (&["train", "bob", "--lr", "1e30"], "'--lr <LR>': must be above 0 and at most 10"),
    (&["train", "bob", "--lr", "0"], "'--lr <LR>': must be above 0"),
    (&["train", "bob", "--lr", "nan"], "'--lr <LR>': must be a finite number"),
    (&["train", "bob", "--lr", "inf"], "'--lr <LR>': must be a finite number"),
    (
        &["predict", "bob", "--checkpoint", "C", "--prompt", "a", "--temperature", "nan"],
        "'--temperature <TEMPERATURE>': must be a finite number",
    ),
    (
        &["predict", "bob", "--checkpoint", "C", "--prompt", "a", "--temperature", "-0.5"],
        "'--temperature <TEMPERATURE>': must not be negative",
    ),
    (
        &["score", "bob", "--checkpoint", "C", "--windows", "0"],
        "'--windows <WINDOWS>': is out of range: give held-out windows: at least 1",
    ),
    (&["train", "bob", "--steps", "1000000000000"], "give the number of updates from 1 to 1,000,000,000"),
    (
        &["predict", "bob", "--checkpoint", "C", "--prompt", "a", "--tokens", "1000000000000"],
        "give tokens to generate from 0 to 1,000,000",
    ),
    // Every other numeric flag: zero, negative, not a number, too large.
    (&["train", "bob", "--steps", "0"], "'--steps <STEPS>': is out of range"),
    (&["train", "bob", "--steps", "-5"], "'--steps <STEPS>': must not be negative"),
    (&["train", "bob", "--steps", "ten"], "'--steps <STEPS>': is not a whole number"),
    (&["train", "bob", "--batch", "0"], "'--batch <BATCH>': is out of range"),
    (&["train", "bob", "--accumulate", "0"], "give micro-batches an update from 1 to 65,536"),
    (&["train", "bob", "--accumulate", "1000000"], "give micro-batches an update from 1 to 65,536"),
    (&["train", "bob", "--checkpoint-every", "0"], "leave the flag out to checkpoint only at the end"),
    (&["train", "bob", "--schedule-steps", "0"], "give the schedule's horizon in updates from 1"),
    (&["train", "bob", "--heldout-windows", "-1"], "'--heldout-windows <HELDOUT_WINDOWS>': must not be negative"),
    (&["train", "bob", "--sample-tokens", "2000000"], "give tokens to generate from 0 to 1,000,000"),
    (&["train", "bob", "--seed", "-1"], "'--seed <SEED>': must not be negative"),
    (&["train", "bob", "--seed", "18446744073709551616"], "'--seed <SEED>': is too large"),
    (
        &["train", "bob", "--steps", "1000000000", "--batch", "1048576", "--accumulate", "65536"],
        "more tokens than a 64-bit count holds",
    ),
    (&["train", "bob", "--resume", "C"], "--resume C: the checkpoint does not exist"),
    (&["train", "bob", "--resume", "."], "--resume .: the checkpoint is not a file"),
    (&["train", "bob", "--device", "tpu"], "unknown device 'tpu'"),
    (&["train", "nosuch"], "unknown system 'nosuch'"),
    (
        &["predict", "bob", "--checkpoint", "C", "--prompt", "a", "--tokens", "-1"],
        "'--tokens <TOKENS>': must not be negative",
    ),
    (
        &["predict", "bob", "--checkpoint", "C", "--prompt", "a", "--seed", "x"],
        "'--seed <SEED>': is not a whole number",
    ),
    (&["predict", "bob", "--checkpoint", "C", "--prompt", "a"], "checkpoint C"),
    (&["score", "bob", "--checkpoint", "C", "--batch", "-2"], "'--batch <BATCH>': must not be negative"),
    (&["score", "bob", "--checkpoint", "C", "--windows", "-1"], "'--windows <WINDOWS>': must not be negative"),
    (&["score", "bob", "--checkpoint", "C"], "checkpoint C"),
    (&["plan", "bob", "--batch", "0"], "'--batch <BATCH>': is out of range"),
    (&["plan", "bob", "--batch", "1048577"], "give sequences a step from 1 to 1,048,576"),
    (&["build", "bob", "-o", "out", "--batch", "0"], "'--batch <BATCH>': is out of range"),
    (&["build", "bob", "-o", "no/such/folder/bob"], "the folder no/such/folder does not exist"),
    (&["build", "bob", "-o", "."], "is a folder; give the executable's file name"),
    (&["check", "forward", "bob", "--device", "cpu", "--batch", "0"], "'--batch <BATCH>': is out of range"),
    (&["check", "forward", "gpt2", "--device", "cpu", "--batch", "65536"], "lower --batch"),
    (&["check", "sideways", "bob", "--device", "cpu"], "sideways"),
    (
        &["bench", "bob", "--device", "cpu", "--steps", "0", "--baseline", "none"],
        "give timed steps from 1 to 1,000,000",
    ),
    (
        &["bench", "bob", "--device", "cpu", "--warmup", "-1", "--baseline", "none"],
        "'--warmup <WARMUP>': must not be negative",
    ),
    (&["bench", "bob", "--device", "cpu", "--batch", "0", "--baseline", "none"], "'--batch <BATCH>': is out of range"),
    (&["bench", "gpt2", "--device", "cpu", "--batch", "65536", "--baseline", "none"], "lower --batch"),
    (
        &["bench", "bob", "--device", "cpu", "--baseline", "no-such-script.py"],
        "--baseline no-such-script.py: no such script",
    ),
    (&["bench", "bob", "--device", "cpu"], "bob has no PyTorch baseline script"),
    (&["bench", "gpt2", "--device", "cpu"], "bench/gpt2_torch.py is not here: run from the repository root"),
    (&["serve", "--runs", "no-such-runs", "--port", "0"], "no-such-runs does not exist"),
    (&["serve", "--port", "70000"], "'--port <PORT>'"),
    (&["serve", "--host", "not-an-address"], "'--host <HOST>'"),
    (&["profile", "no-such-run"], "run directory no-such-run does not exist"),
    (&["train", "bob", "--budget", "600"], "has no unit"),
    (&["train", "bob", "--budget", "0s"], "from 1s to 168h"),
    (&["train", "bob", "--budget", "200h"], "is out of range"),
    (&["train", "bob", "--budget", "ten minutes"], "is not a time"),
    (&["train", "bob", "--budget", "1m", "--warmdown-updates", "0"], "'--warmdown-updates <WARMDOWN_UPDATES>'"),
    (&["train", "bob", "--warmdown-updates", "100"], "give --budget too"),
    (&["export", "bob", "--checkpoint", "no-such.safetensors", "-o", "x"], "x exists already; pass --force"),
    (&["export", "bob", "--checkpoint", "no-such.safetensors", "-o", "new.art"], "no-such.safetensors"),
    (&["export", "bob", "--checkpoint", "x", "-o", "y", "--limit", "0"], "'--limit <LIMIT>'"),
    (&["score", "bob", "--artifact", "x"], "artifact x is damaged or truncated"),
    (&["score", "bob"], "--checkpoint"),
    (&["data", "prepare", "--corpus", "no-such-corpus.txt", "--out", "out"], "does not exist"),
    (&["data", "prepare", "--corpus", "x", "--tokenizer", "bpe:0", "--out", "out"], "BPE vocabulary must be"),
];

#[test]
fn every_bad_argument_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("x"), "some text").unwrap();
    let mut failures = vec![];
    for (args, needle) in CASES {
        let started = Instant::now();
        let o = alpha(args, tmp.path());
        let (out, err) = text(&o);
        // Refused in validation: nothing trained, nothing read, so at once.
        let took = started.elapsed();
        if o.status.success() || !err.contains(needle) || err.contains("panicked") || took > Duration::from_secs(20) {
            failures.push(format!(
                "alpha {}\n  exit {:?} in {took:.1?}, wanted {needle:?}\n  stdout: {out}\n  stderr: {err}",
                args.join(" "),
                o.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), CASES.len(), failures.join("\n"));
    // No case left a run behind: each was refused before anything was written.
    assert!(!tmp.path().join("runs").exists(), "a refused command created runs/");
}

#[test]
fn a_non_utf8_argument_is_named_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (vec!["predict", "bob", "--checkpoint", "C", "--prompt", "\u{0}"], "argument 6 (after --prompt)"),
        (vec!["predict", "bob", "--checkpoint", "C", "--prompt=\u{0}"], "the value of --prompt"),
        (vec!["train", "\u{0}"], "argument 2"),
        (vec!["train", "bob", "--data", "\u{0}"], "argument 4 (after --data)"),
    ] {
        // "\0" marks where the byte 0xFF goes.
        let os: Vec<OsString> = args
            .iter()
            .map(|a| OsString::from_vec(a.bytes().map(|b| if b == 0 { 0xff } else { b }).collect()))
            .collect();
        let o = Command::new(env!("CARGO_BIN_EXE_alpha")).args(&os).current_dir(tmp.path()).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o).1);
        fails_with(&o, needle);
        fails_with(&o, "is not valid UTF-8");
    }
}

/// Without --device, generation runs on the GPU where one is present and on the CPU where not,
/// and says which.
#[test]
fn prediction_runs_on_the_gpu_where_one_is_present() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let ckpt = short_run(tmp.path(), &data, "3");
    let out = Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(["predict", "bob", "--checkpoint", ckpt.to_str().unwrap(), "--prompt", "ROMEO:"])
        .args(["--tokens", "4", "--temperature", "0"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    let present = alpha_run::session::Device::or_present(None).unwrap();
    let on = if present == alpha_run::session::Device::Cuda { "on the GPU" } else { "on the CPU" };
    assert!(said.contains("4 tokens in ") && said.contains(on), "{said}");
}

/// Prediction writes each token as it comes, and a reader that stops early ends it quietly.
#[test]
fn prediction_streams_and_stops_when_its_reader_does() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let ckpt = short_run(tmp.path(), &data, "3");
    let mut child = Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(["predict", "bob", "--checkpoint", ckpt.to_str().unwrap(), "--prompt", "ROMEO:"])
        .args(["--tokens", "1000000", "--temperature", "0"])
        .current_dir(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 16];
    child.stdout.as_mut().unwrap().read_exact(&mut head).unwrap();
    assert!(head.starts_with(b"ROMEO:"), "{:?}", String::from_utf8_lossy(&head));
    // A million tokens take minutes; the first bytes came long before: they were streamed.
    drop(child.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("predict went on for a minute after its reader closed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{status:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Training where stderr is not a terminal prints progress lines; `--quiet` prints none.
#[test]
fn training_shows_progress_lines_unless_quiet() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let train = |run: &str, quiet: bool| {
        let run = tmp.path().join(run);
        let mut args = vec!["train", "bob", "--steps", "20", "--batch", "2", "--data", data.to_str().unwrap()];
        args.extend(["--run-dir", run.to_str().unwrap(), "--sample-tokens", "0", "--heldout-windows", "2"]);
        if quiet {
            args.push("--quiet");
        }
        let o = alpha(&args, tmp.path());
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).1
    };
    let err = train("loud", false);
    for line in ["step 1/20  loss", "step 2/20  loss", "step 20/20  loss"] {
        assert!(err.contains(line), "no {line:?} in:\n{err}");
    }
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "a progress bar drawn into a log:\n{err:?}");
    let err = train("quiet", true);
    assert!(!err.contains("step 1/20"), "--quiet printed progress:\n{err}");
}

/// A reader that closes stdout early (`alpha plan gpt2 --print | head -1`) ends the command
/// quietly: no panic from a failed print.
#[test]
fn a_closed_stdout_ends_a_long_listing_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(["plan", "gpt2", "--print"])
        .current_dir(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 5];
    child.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    assert_eq!(&first, b"graph");
    // The listing is about 115 KB, past a pipe's 64 KB buffer, so later prints find it closed.
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{status:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A run whose stderr reader goes away (`alpha train … 2>&1 | head`) loses its progress lines,
/// not the run: it finishes and writes its checkpoint.
#[test]
fn a_closed_stderr_does_not_stop_training() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(["train", "bob", "--steps", "30", "--batch", "2", "--data", data.to_str().unwrap()])
        .args(["--run-dir", run.to_str().unwrap(), "--sample-tokens", "0", "--heldout-windows", "2"])
        .current_dir(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {out}");
    assert!(run.join("checkpoints/step-000030.safetensors").is_file(), "{out}");
}
