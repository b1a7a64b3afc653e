//! Prepared data is trusted only as far as it checks out: every shard's SHA-256 is recomputed
//! when a stream opens, and sizes read from files are checked before any arithmetic.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};
use alpha_data::{DataError, Split, TokenStream};

/// A small byte stream in `tmp/out`, one shard a split.
fn prepared(tmp: &Path) -> PathBuf {
    let corpus = tmp.join("corpus.txt");
    let text: String =
        (0..4000).map(|i| format!("line {i}: the quick brown fox jumps over {}\n", i * 7 % 13)).collect();
    std::fs::write(&corpus, text).unwrap();
    let mut opts = PrepareOptions::new(&corpus, TokenizerSpec::Bytes, tmp.join("out"));
    opts.progress = false;
    prepare(&opts).unwrap();
    tmp.join("out")
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let mut f = OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn a_flipped_byte_is_refused_when_the_stream_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let out = prepared(tmp.path());
    TokenStream::open(&out, Split::Train).unwrap();
    let shard = out.join("train-0000.tok");
    let bytes = std::fs::read(&shard).unwrap();
    write_at(&shard, 64 + 1000, &[bytes[64 + 1000] ^ 0x01]);
    let err = TokenStream::open(&out, Split::Train).err().expect("a damaged shard must not open");
    let msg = format!("{err:#}");
    assert!(matches!(err.downcast_ref::<DataError>(), Some(DataError::ShaMismatch { .. })), "{msg}");
    assert!(msg.contains("train-0000.tok") && msg.contains("SHA-256"), "{msg}");
    // The other split is untouched and still opens.
    TokenStream::open(&out, Split::Valid).unwrap();
}

#[test]
fn a_crafted_token_count_is_refused_without_overflow() {
    let tmp = tempfile::tempdir().unwrap();
    let out = prepared(tmp.path());
    let shard = out.join("valid-0000.tok");
    let len = std::fs::metadata(&shard).unwrap().len();
    let real = (len - 64) / 2;
    // 2^63 + n tokens: doubled with wrapping arithmetic, that is exactly the file's length.
    let crafted = (1u64 << 63) + real;
    write_at(&shard, 16, &crafted.to_le_bytes());
    let manifest = out.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    m["valid"]["shards"][0]["tokens"] = crafted.into();
    std::fs::write(&manifest, serde_json::to_string(&m).unwrap()).unwrap();
    let err = TokenStream::open(&out, Split::Valid).err().expect("a crafted count must not open");
    let msg = format!("{err:#}");
    assert!(matches!(err.downcast_ref::<DataError>(), Some(DataError::ImpossibleTokenCount { .. })), "{msg}");
    assert!(msg.contains("valid-0000.tok"), "{msg}");
}

#[test]
fn a_manifest_cannot_point_outside_its_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let out = prepared(tmp.path());
    std::fs::copy(out.join("train-0000.tok"), tmp.path().join("elsewhere.tok")).unwrap();
    let manifest = out.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["train"]["shards"][0]["file"] = "../elsewhere.tok".into();
    std::fs::write(&manifest, serde_json::to_string(&m).unwrap()).unwrap();
    let err = TokenStream::open(&out, Split::Train).err().expect("a path outside the folder must be refused");
    assert!(format!("{err:#}").contains("not a file name inside the directory"), "{err:#}");
    // Nor a tokenizer file.
    m["train"]["shards"][0]["file"] = "train-0000.tok".into();
    m["tokenizer"]["kind"] = "bpe".into();
    m["tokenizer"]["file"] = "/etc/passwd".into();
    std::fs::write(&manifest, serde_json::to_string(&m).unwrap()).unwrap();
    let err = TokenStream::open(&out, Split::Train).err().expect("a tokenizer outside the folder must be refused");
    assert!(format!("{err:#}").contains("tokenizer file \"/etc/passwd\" is not a file name"), "{err:#}");
}

#[test]
fn a_tokenizer_with_an_id_beyond_u16_is_refused() {
    let json = r#"{"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
        "added_tokens":[{"id":4000000000,"content":"<|endoftext|>","special":true}],
        "model":{"type":"BPE","dropout":null,"vocab":{"a":0},"merges":[]}}"#;
    let err = alpha_data::bpe::BpeTokenizer::from_json(json).unwrap_err();
    assert!(format!("{err:#}").contains("0..65535"), "{err:#}");
}

#[test]
fn the_manifest_is_written_whole_with_no_temporary_left() {
    let tmp = tempfile::tempdir().unwrap();
    let out = prepared(tmp.path());
    let mut names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["manifest.json", "train-0000.tok", "valid-0000.tok"]);
    alpha_data::Manifest::load(&out).unwrap().verify_shards(&out).unwrap();
}
