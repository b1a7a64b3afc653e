//! Robustness cases: data and its caches. A raw `--data` is cached by content and rebuilt when
//! damaged or half-written; prepared shards are verified; bad corpora and output folders are
//! refused with a message; nothing the user wrote is deleted.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{alpha, bob_args, fails_with, succeeds, text};

/// Varied prose-like lines (Bob's held-out split needs a few thousand bytes).
fn prose(seed: usize, lines: usize) -> String {
    let words = ["the", "king", "said", "and", "so", "night", "falls", "on", "a", "quiet", "town", "of", "ships"];
    (0..lines)
        .map(|i| {
            let n = 5 + (i * seed) % 7;
            let line: Vec<&str> = (0..n).map(|j| words[(i * 31 + j * seed + seed) % words.len()]).collect();
            format!("{}.\n", line.join(" "))
        })
        .collect()
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
    path.to_path_buf()
}

/// `alpha` with an extra environment variable (the crash hook).
fn alpha_env(args: &[&str], cwd: &Path, var: (&str, &str)) -> Output {
    Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(args)
        .env(var.0, var.1)
        .current_dir(cwd)
        .output()
        .expect("running alpha")
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

/// Arguments of a two-step Bob run on `data`, into a run folder of its own.
fn train_args(data: &Path, cwd: &Path) -> Vec<String> {
    let run = cwd.join(format!("runs/r{}", RUNS.fetch_add(1, Ordering::Relaxed)));
    bob_args(data, &run, &["--steps", "2", "--batch", "2", "--heldout-windows", "2"])
}

fn train(data: &Path, cwd: &Path) -> Output {
    let args = train_args(data, cwd);
    alpha(&args.iter().map(String::as_str).collect::<Vec<_>>(), cwd)
}

fn prepare(corpus: &Path, out: &Path) -> Vec<String> {
    ["data", "prepare", "--corpus", corpus.to_str().unwrap(), "--tokenizer", "bytes", "--out", out.to_str().unwrap()]
        .map(String::from)
        .to_vec()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Cache folders in `cwd/data-cache` (hidden staging and trash folders apart).
fn cache_entries(cwd: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(cwd.join("data-cache")) else { return (vec![], vec![]) };
    let mut all: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).collect();
    all.sort();
    all.into_iter().partition(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn another_corpus_of_the_same_name_is_prepared_not_taken_from_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let a = write(&tmp.path().join("a/corpus.txt"), prose(3, 3000));
    let b = write(&tmp.path().join("b/corpus.txt"), prose(5, 2000));
    succeeds(&train(&a, tmp.path()));
    let out = train(&b, tmp.path());
    succeeds(&out);
    assert!(text(&out).1.contains("preparing"), "b must be prepared, not found in a's cache:\n{}", text(&out).1);
    let (entries, hidden) = cache_entries(tmp.path());
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(hidden.is_empty(), "{hidden:?}");
    let mut bytes: Vec<u64> = entries.iter().map(|e| manifest(e)["totals"]["bytes"].as_u64().unwrap()).collect();
    bytes.sort();
    let mut want = vec![std::fs::metadata(&a).unwrap().len(), std::fs::metadata(&b).unwrap().len()];
    want.sort();
    assert_eq!(bytes, want, "each cache entry holds its own corpus");
}

#[test]
fn an_emptied_corpus_is_refused_not_trained_on_its_old_content() {
    let tmp = tempfile::tempdir().unwrap();
    let c = write(&tmp.path().join("corpus.txt"), prose(3, 3000));
    succeeds(&train(&c, tmp.path()));
    write(&c, "");
    fails_with(&train(&c, tmp.path()), "holds no text");
}

#[test]
fn a_cache_whose_manifest_was_left_empty_is_prepared_again() {
    let tmp = tempfile::tempdir().unwrap();
    let c = write(&tmp.path().join("corpus.txt"), prose(3, 3000));
    succeeds(&train(&c, tmp.path()));
    let (entries, _) = cache_entries(tmp.path());
    assert_eq!(entries.len(), 1);
    // What a kill during a non-atomic write of manifest.json leaves.
    write(&entries[0].join("manifest.json"), "");
    let out = train(&c, tmp.path());
    succeeds(&out);
    assert!(text(&out).1.contains("cannot be used"), "the rebuild is announced:\n{}", text(&out).1);
    assert_eq!(manifest(&entries[0])["format"], "alpha-token-shards");
}

#[test]
fn a_crash_while_caching_leaves_nothing_that_looks_prepared() {
    for point in ["shards", "manifest", "cache-install"] {
        let tmp = tempfile::tempdir().unwrap();
        let c = write(&tmp.path().join("corpus.txt"), prose(3, 3000));
        let args = train_args(&c, tmp.path());
        let out = alpha_env(&strs(&args), tmp.path(), ("ALPHA_DATA_CRASH_AT", point));
        assert!(!out.status.success(), "{point}: the hook aborts the process");
        assert!(text(&out).1.contains(point), "{point}: {}", text(&out).1);
        let (entries, hidden) = cache_entries(tmp.path());
        assert!(entries.is_empty(), "{point}: a half-made cache folder is in place: {entries:?}");
        assert_eq!(hidden.len(), 1, "{point}: the staging folder stays until the next run");
        let out = train(&c, tmp.path());
        succeeds(&out);
        let (entries, hidden) = cache_entries(tmp.path());
        assert_eq!(entries.len(), 1, "{point}");
        assert!(hidden.is_empty(), "{point}: the dead run's staging folder is removed: {hidden:?}");
    }
}

#[test]
fn an_interrupted_prepare_is_refused_as_data_and_completed_by_a_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let c = write(&tmp.path().join("corpus.txt"), prose(3, 3000));
    let out_dir = tmp.path().join("prepared");
    let args = prepare(&c, &out_dir);
    let crashed = alpha_env(&strs(&args), tmp.path(), ("ALPHA_DATA_CRASH_AT", "manifest"));
    assert!(!crashed.status.success());
    assert!(!out_dir.join("manifest.json").exists(), "no manifest, empty or otherwise");
    fails_with(&train(&out_dir, tmp.path()), "interrupted");
    succeeds(&alpha(&strs(&args), tmp.path()));
    let names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(names.is_empty(), "no marker or temporary left: {names:?}");
    succeeds(&train(&out_dir, tmp.path()));
}

/// A prepared byte stream of synthetic prose in `cwd/prepared`.
fn prepared(cwd: &Path) -> PathBuf {
    let c = write(&cwd.join("corpus.txt"), prose(3, 3000));
    let out = cwd.join("prepared");
    succeeds(&alpha(&strs(&prepare(&c, &out)), cwd));
    out
}

#[test]
fn a_shard_with_a_flipped_byte_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let out = prepared(tmp.path());
    let shard = out.join("train-0000.tok");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[64 + 500] ^= 0x04;
    std::fs::write(&shard, bytes).unwrap();
    let o = train(&out, tmp.path());
    fails_with(&o, "train-0000.tok");
    fails_with(&o, "SHA-256");
}

#[test]
fn a_crafted_token_count_is_refused_without_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let out = prepared(tmp.path());
    let shard = out.join("train-0000.tok");
    let tokens = (std::fs::metadata(&shard).unwrap().len() - 64) / 2;
    let crafted = (1u64 << 63) + tokens;
    let mut f = std::fs::OpenOptions::new().write(true).open(&shard).unwrap();
    f.seek(SeekFrom::Start(16)).unwrap();
    f.write_all(&crafted.to_le_bytes()).unwrap();
    drop(f);
    let mut m = manifest(&out);
    m["train"]["shards"][0]["tokens"] = crafted.into();
    write(&out.join("manifest.json"), serde_json::to_string(&m).unwrap());
    fails_with(&train(&out, tmp.path()), "damaged shard");
}

#[test]
fn the_root_folder_as_data_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let o = train(Path::new("/"), tmp.path());
    fails_with(&o, "too large");
    fails_with(&o, "alpha data prepare");
    assert!(started.elapsed().as_secs() < 120, "refused only after {:?}", started.elapsed());
    assert!(cache_entries(tmp.path()).0.is_empty());
}

#[test]
fn binary_files_are_skipped_with_a_warning_and_a_folder_of_them_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mixed = tmp.path().join("mixed");
    write(&mixed.join("prose.txt"), prose(3, 3000));
    write(&mixed.join("more.txt"), prose(7, 1000));
    write(&mixed.join("blob.bin"), b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0".repeat(64));
    let o = train(&mixed, tmp.path());
    succeeds(&o);
    let err = text(&o).1;
    assert!(err.contains("warning") && err.contains("blob.bin") && err.contains("binary"), "{err}");

    let binary = tmp.path().join("binary");
    write(&binary.join("a.bin"), b"\0\x01\x02\x03".repeat(100));
    write(&binary.join("b.so"), b"\x7fELF\0\0".repeat(100));
    fails_with(&train(&binary, tmp.path()), "look binary");
}

#[test]
fn prepare_refuses_a_folder_that_is_not_an_alpha_preparation_and_deletes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let c = write(&tmp.path().join("corpus.txt"), prose(3, 3000));
    let app = tmp.path().join("app");
    write(&app.join("manifest.json"), r#"{"name": "my app"}"#);
    write(&app.join("tokenizer.json"), "my tokenizer");
    fails_with(&alpha(&strs(&prepare(&c, &app)), tmp.path()), "not an Alpha data preparation");
    assert_eq!(std::fs::read_to_string(app.join("manifest.json")).unwrap(), r#"{"name": "my app"}"#);
    assert_eq!(std::fs::read_to_string(app.join("tokenizer.json")).unwrap(), "my tokenizer");
    assert_eq!(std::fs::read_dir(&app).unwrap().count(), 2);
}
