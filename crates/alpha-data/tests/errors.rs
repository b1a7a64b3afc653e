//! Damaged or mismatched data gives a clear, typed error instead of training on garbage.

mod common;

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};
use alpha_data::{DataError, Split, TokenStream};

/// A small prepared directory from real text (tinyshakespeare) or a fallback.
fn prepared(dir: &Path) {
    let corpus = match common::tinyshakespeare() {
        Some(p) => p,
        None => {
            let p = dir.join("corpus.txt");
            std::fs::write(&p, "line one\nline two\nline three\n".repeat(200)).unwrap();
            p
        }
    };
    let mut opts = PrepareOptions::new(corpus, TokenizerSpec::Bytes, dir.join("out"));
    opts.progress = false;
    prepare(&opts).unwrap();
}

fn data_error(e: anyhow::Error) -> DataError {
    e.downcast::<DataError>().expect("a typed DataError")
}

#[test]
fn bad_magic_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    prepared(tmp.path());
    let shard = tmp.path().join("out/train-0000.tok");
    let mut f = OpenOptions::new().write(true).open(&shard).unwrap();
    f.write_all(b"GPT2TOKS").unwrap();
    drop(f);
    let err = TokenStream::open(&tmp.path().join("out"), Split::Train).err().unwrap();
    let msg = format!("{err:#}");
    assert!(matches!(data_error(err), DataError::BadMagic { .. }));
    assert!(msg.contains("bad magic") && msg.contains("train-0000.tok"), "{msg}");
}

#[test]
fn truncated_shard_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    prepared(tmp.path());
    let shard = tmp.path().join("out/train-0000.tok");
    let len = std::fs::metadata(&shard).unwrap().len();
    OpenOptions::new().write(true).open(&shard).unwrap().set_len(len - 1000).unwrap();
    let err = TokenStream::open(&tmp.path().join("out"), Split::Train).err().unwrap();
    let msg = format!("{err:#}");
    match data_error(err) {
        DataError::Truncated { expected_len, actual_len, .. } => {
            assert_eq!(expected_len, len);
            assert_eq!(actual_len, len - 1000);
        }
        other => panic!("expected Truncated, got {other}"),
    }
    assert!(msg.contains("truncated"), "{msg}");
}

#[test]
fn unknown_version_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    prepared(tmp.path());
    let shard = tmp.path().join("out/valid-0000.tok");
    let mut f = OpenOptions::new().write(true).open(&shard).unwrap();
    f.seek(SeekFrom::Start(8)).unwrap();
    f.write_all(&7u32.to_le_bytes()).unwrap();
    drop(f);
    let err = TokenStream::open(&tmp.path().join("out"), Split::Valid).err().unwrap();
    assert!(matches!(data_error(err), DataError::UnsupportedVersion { found: 7, .. }));
}

#[test]
fn vocabulary_mismatch_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    prepared(tmp.path());
    let out = tmp.path().join("out");
    let stream = TokenStream::open(&out, Split::Train).unwrap();
    stream.check_vocab(256).unwrap();
    let err = stream.check_vocab(50257).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, DataError::VocabMismatch { expected: 50257, found: 256, .. }));
    assert!(msg.contains("256") && msg.contains("50257"), "{msg}");
    assert!(alpha_data::check_vocab(&out, 12288).is_err());
    alpha_data::check_vocab(&out, 256).unwrap();
}

#[test]
fn shard_sha_mismatch_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    prepared(tmp.path());
    let out = tmp.path().join("out");
    let stream = TokenStream::open(&out, Split::Train).unwrap();
    stream.verify().unwrap();
    // Same length, one token changed: header checks pass, the hash does not.
    let mut f = OpenOptions::new().write(true).open(out.join("train-0000.tok")).unwrap();
    f.seek(SeekFrom::Start(64 + 200)).unwrap();
    f.write_all(&[1, 0]).unwrap();
    drop(f);
    let err = stream.verify().unwrap_err();
    assert!(matches!(data_error(err), DataError::ShaMismatch { .. }));
}

#[test]
fn missing_and_empty_corpora_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = PrepareOptions::new(tmp.path().join("nope"), TokenizerSpec::Bytes, tmp.path().join("out"));
    opts.progress = false;
    let err = prepare(&opts).unwrap_err();
    assert!(matches!(data_error(err), DataError::MissingCorpus(_)));

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("a.txt"), "").unwrap();
    opts.corpus = empty;
    let err = prepare(&opts).unwrap_err();
    assert!(matches!(data_error(err), DataError::EmptyCorpus(_)));
}

#[test]
fn bad_tokenizer_specs_are_reported() {
    assert!("bpe:abc".parse::<TokenizerSpec>().is_err());
    assert!("wordpiece".parse::<TokenizerSpec>().is_err());
    assert_eq!(
        "bpe:12288".parse::<TokenizerSpec>().unwrap(),
        TokenizerSpec::TrainBpe { vocab_size: 12288, bos: false }
    );
    assert_eq!("bytes".parse::<TokenizerSpec>().unwrap(), TokenizerSpec::Bytes);
    // A tokenizer.json that is not byte-level BPE.
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("tokenizer.json");
    std::fs::write(
        &p,
        r#"{"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"model":{"type":"WordPiece","vocab":{}}}"#,
    )
    .unwrap();
    let err = alpha_data::Tokenizer::from_file(&p).unwrap_err();
    assert!(format!("{err:#}").contains("byte-level BPE"), "{err:#}");
}
