//! `prepare` writes only into a new or empty folder or over an earlier Alpha preparation, and
//! never removes a file it did not write.

use std::path::{Path, PathBuf};

use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};
use alpha_data::{DataError, Manifest, Split, TokenStream};

fn corpus(tmp: &Path) -> PathBuf {
    let p = tmp.join("corpus.txt");
    let text: String = (0..3000).map(|i| format!("verse {i}: and so the story goes on, {}\n", i % 17)).collect();
    std::fs::write(&p, text).unwrap();
    p
}

fn options(corpus: &Path, out: &Path, shard_tokens: u64) -> PrepareOptions {
    let mut o = PrepareOptions::new(corpus, TokenizerSpec::Bytes, out);
    o.progress = false;
    o.max_shard_tokens = shard_tokens;
    o
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn a_folder_of_someone_elses_files_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(tmp.path());
    let out = tmp.path().join("app");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("manifest.json"), r#"{"name": "my web app", "version": 3}"#).unwrap();
    std::fs::write(out.join("tokenizer.json"), "my own tokenizer").unwrap();
    let err = prepare(&options(&c, &out, 1 << 20)).unwrap_err();
    let msg = format!("{err:#}");
    assert!(matches!(err.downcast_ref::<DataError>(), Some(DataError::ForeignOutput { .. })), "{msg}");
    assert!(msg.contains("not an Alpha data preparation") && msg.contains(&out.display().to_string()), "{msg}");
    assert_eq!(std::fs::read_to_string(out.join("manifest.json")).unwrap(), r#"{"name": "my web app", "version": 3}"#);
    assert_eq!(std::fs::read_to_string(out.join("tokenizer.json")).unwrap(), "my own tokenizer");
    assert_eq!(names(&out), ["manifest.json", "tokenizer.json"]);

    // Without a manifest at all, any file makes the folder someone else's.
    let notes = tmp.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("train-0000.tok"), "not a shard").unwrap();
    let err = prepare(&options(&c, &notes, 1 << 20)).unwrap_err();
    assert!(format!("{err:#}").contains("has no manifest.json"), "{err:#}");
    assert_eq!(std::fs::read_to_string(notes.join("train-0000.tok")).unwrap(), "not a shard");

    // A file is not a folder.
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    assert!(format!("{:#}", prepare(&options(&c, &file, 1 << 20)).unwrap_err()).contains("not a folder"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn an_earlier_preparation_is_replaced_and_other_files_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(tmp.path());
    let out = tmp.path().join("out");
    prepare(&options(&c, &out, 20_000)).unwrap();
    let before = names(&out);
    assert!(before.iter().filter(|n| n.starts_with("train-")).count() >= 3, "{before:?}");
    std::fs::write(out.join("README.txt"), "my notes about this data").unwrap();
    // Fewer, larger shards: the earlier ones the new manifest does not name are gone.
    prepare(&options(&c, &out, 1 << 20)).unwrap();
    assert_eq!(names(&out), ["README.txt", "manifest.json", "train-0000.tok", "valid-0000.tok"]);
    assert_eq!(std::fs::read_to_string(out.join("README.txt")).unwrap(), "my notes about this data");
    TokenStream::open(&out, Split::Train).unwrap();
}

#[test]
fn an_interrupted_preparation_is_recognised_and_completed() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(tmp.path());
    let out = tmp.path().join("out");
    prepare(&options(&c, &out, 20_000)).unwrap();
    // What a crash while writing leaves: the marker, shards, a manifest's temporary, no manifest.
    std::fs::write(out.join(".alpha-preparing"), "").unwrap();
    std::fs::remove_file(out.join("manifest.json")).unwrap();
    std::fs::write(out.join(".manifest.json.12345.tmp"), "{\"format\": \"alpha-tok").unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let err = alpha_data::corpus::load(&out).unwrap_err();
    assert!(format!("{err:#}").contains("interrupted"), "{err:#}");
    assert!(TokenStream::open(&out, Split::Train).is_err());
    prepare(&options(&c, &out, 1 << 20)).unwrap();
    assert_eq!(names(&out), ["keep.txt", "manifest.json", "train-0000.tok", "valid-0000.tok"]);
    Manifest::load(&out).unwrap().verify_shards(&out).unwrap();
}

#[test]
fn a_failed_preparation_leaves_no_folder_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(tmp.path());
    let out = tmp.path().join("out");
    // BPE training fails on this little text before anything is written.
    let mut o = options(&c, &out, 1 << 20);
    o.tokenizer = TokenizerSpec::TrainBpe { vocab_size: 60_000, bos: false };
    assert!(prepare(&o).is_err());
    assert!(!out.exists());
}

#[test]
fn a_folder_another_live_process_is_preparing_is_left_to_it() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(tmp.path());
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // This test's parent is alive; a preparation it is running must not be trampled.
    let parent = std::os::unix::process::parent_id();
    let marker = format!("an Alpha data preparation (process {parent}) is writing this folder\n");
    std::fs::write(out.join(".alpha-preparing"), &marker).unwrap();
    std::fs::write(out.join("train-0000.tok"), "being written").unwrap();
    let err = prepare(&options(&c, &out, 1 << 20)).unwrap_err();
    assert!(format!("{err:#}").contains(&format!("being prepared by process {parent}")), "{err:#}");
    assert_eq!(std::fs::read_to_string(out.join("train-0000.tok")).unwrap(), "being written");
}
