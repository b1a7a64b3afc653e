//! Same input, same bytes: shards, manifest and tokenizer.json.

mod common;

use std::path::Path;

use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

fn run(corpus: &Path, spec: &str, out: &Path, shard_tokens: u64) {
    let mut opts = PrepareOptions::new(corpus, spec.parse::<TokenizerSpec>().unwrap(), out);
    opts.progress = false;
    opts.max_shard_tokens = shard_tokens;
    opts.bpe_train_bytes = 1_500_000;
    prepare(&opts).unwrap();
}

/// A corpus of several documents: the first Gutenberg books as a folder, tinyshakespeare, or
/// the default corpus's archive.
fn corpus(tmp: &Path) -> Option<std::path::PathBuf> {
    if let Some(g) = common::gutenberg_sample(2_000_000) {
        let dir = tmp.join("corpus");
        std::fs::create_dir(&dir).unwrap();
        for (i, t) in g.iter().enumerate() {
            std::fs::write(dir.join(format!("{i:03}.txt")), t).unwrap();
        }
        return Some(dir);
    }
    common::tinyshakespeare().or_else(common::sdist)
}

#[test]
fn bpe_preparation_is_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = corpus(tmp.path()) else { return };
    run(&c, "bpe:2048", &tmp.path().join("a"), 150_000);
    run(&c, "bpe:2048", &tmp.path().join("b"), 150_000);
    let (a, b) = (files(&tmp.path().join("a")), files(&tmp.path().join("b")));
    assert!(a.iter().any(|(n, _)| n == "tokenizer.json"));
    assert!(a.iter().filter(|(n, _)| n.starts_with("train-")).count() >= 2, "several shards");
    assert_eq!(a.len(), b.len());
    for ((na, da), (nb, db)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        assert!(da == db, "{na} differs between two preparations");
    }
    // Loading the written tokenizer.json instead of training gives the same shards.
    let tj = tmp.path().join("a/tokenizer.json");
    run(&c, tj.to_str().unwrap(), &tmp.path().join("c"), 150_000);
    let cfiles = files(&tmp.path().join("c"));
    for (name, data) in a.iter().filter(|(n, _)| n.ends_with(".tok") || n == "tokenizer.json") {
        let other = cfiles.iter().find(|(n, _)| n == name).expect(name);
        assert!(&other.1 == data, "{name} differs with a loaded tokenizer.json");
    }
    // And a re-run of the trainer alone gives the same tokenizer.json.
    let text = match common::tinyshakespeare() {
        Some(p) => std::fs::read_to_string(p).unwrap(),
        None => common::sdist_text(1_200_000).expect("the corpus above came from somewhere"),
    };
    let j1 = alpha_data::bpe::train(std::iter::once(text.as_str()), 700).unwrap();
    let j2 = alpha_data::bpe::train(std::iter::once(text.as_str()), 700).unwrap();
    assert_eq!(j1, j2);
}

#[test]
fn bytes_preparation_is_byte_identical_and_shards_sum_up() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = corpus(tmp.path()) else { return };
    run(&c, "bytes", &tmp.path().join("a"), 400_000);
    run(&c, "bytes", &tmp.path().join("b"), 400_000);
    assert_eq!(files(&tmp.path().join("a")), files(&tmp.path().join("b")));
    let m = alpha_data::Manifest::load(&tmp.path().join("a")).unwrap();
    // Bytes: one token per byte plus one end-of-text per document.
    assert_eq!(m.train.tokens, m.train.bytes + m.train.documents);
    assert_eq!(m.valid.tokens, m.valid.bytes + m.valid.documents);
    assert_eq!(m.train.shards.iter().map(|s| s.documents).sum::<u64>(), m.train.documents);
    assert!(m.train.shards.len() >= 2);
    assert_eq!(m.tokenizer.vocab_size, 256);
}
