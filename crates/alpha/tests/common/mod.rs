#![allow(dead_code)]
//! Shared by the CLI's end-to-end suites: running the `alpha` binary, judging its outcome, and
//! real text to train on (skipped, with a message, where `../shared` is absent).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn alpha(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_alpha")).args(args).current_dir(cwd).output().expect("running alpha")
}

pub fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// A clean failure: nonzero exit, the message on stderr, no panic.
pub fn fails_with(o: &Output, needle: &str) {
    let (out, err) = text(o);
    assert!(!o.status.success(), "expected failure, got success:\n{out}\n{err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}:\n{err}");
    assert!(!err.contains("panicked"), "a panic instead of a message:\n{err}");
}

pub fn succeeds(o: &Output) -> String {
    let (out, err) = text(o);
    assert!(o.status.success(), "alpha failed:\n{out}\n{err}");
    out
}

pub fn tiny() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/tinyshakespeare.txt");
    if p.is_file() {
        Some(p.canonicalize().unwrap())
    } else {
        eprintln!("skipped: {} is missing", p.display());
        None
    }
}

/// A prepared byte stream of tiny-shakespeare in `dir`.
pub fn prepared(dir: &Path) -> Option<PathBuf> {
    let src = tiny()?;
    let out = dir.join("tiny-bytes");
    succeeds(&alpha(
        &["data", "prepare", "--corpus", src.to_str().unwrap(), "--tokenizer", "bytes", "--out", out.to_str().unwrap()],
        dir,
    ));
    Some(out)
}

/// The arguments of a quiet Bob run on `data` into `run`, no closing sample, with `extra`'s
/// flags.
pub fn bob_args(data: &Path, run: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["train", "bob", "--data", data.to_str().unwrap(), "--run-dir", run.to_str().unwrap()];
    args.extend_from_slice(&["--sample-tokens", "0", "--quiet"]);
    args.extend_from_slice(extra);
    args.into_iter().map(String::from).collect()
}

/// A quiet Bob run on `data` into `dir/run` with `extra`'s flags; returns what it printed.
pub fn bob_run(dir: &Path, data: &Path, extra: &[&str]) -> String {
    let args = bob_args(data, &dir.join("run"), extra);
    succeeds(&alpha(&args.iter().map(String::as_str).collect::<Vec<_>>(), dir))
}

/// A short Bob run; returns its final checkpoint.
pub fn short_run(dir: &Path, data: &Path, steps: &str) -> PathBuf {
    bob_run(dir, data, &["--steps", steps, "--batch", "4", "--heldout-windows", "4"]);
    dir.join("run").join(format!("checkpoints/step-{:0>6}.safetensors", steps))
}
