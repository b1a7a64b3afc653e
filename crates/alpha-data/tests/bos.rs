//! A BPE of 1,024 tokens prepared with `--bos` on real prose of many documents (the default
//! corpus's works): the reserved id opens every document and nothing closes one, the 256 byte
//! values are tokens of their own (so any text encodes), and the bytes a split's tokens stand
//! for are exactly its documents' UTF-8 bytes, the mark counting none.

mod common;

use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};
use alpha_data::shard::read_tokens;
use alpha_data::{Split, Tokenizer};

#[test]
fn every_document_opens_with_bos_and_its_bytes_are_exact() {
    let Some(corpus) = common::sdist() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bpe1024-bos");
    let spec = "bpe:1024".parse::<TokenizerSpec>().unwrap().with_bos().unwrap();
    let mut opts = PrepareOptions::new(&corpus, spec, &out);
    opts.progress = false;
    opts.bpe_train_bytes = 3_000_000;
    let m = prepare(&opts).unwrap();
    assert!(m.tokenizer.bos && m.tokenizer.vocab_size == 1024, "{:?}", m.tokenizer);
    assert!(m.tokenizer.origin.contains("opens each document"), "{}", m.tokenizer.origin);

    let tk = Tokenizer::load(&out).unwrap();
    let bos = tk.eot_id();
    assert!(tk.token_bytes(bos).is_empty(), "the mark stands for no document byte");
    let mut singles: Vec<u8> = (0..1024).map(|id| tk.token_bytes(id)).filter(|b| b.len() == 1).map(|b| b[0]).collect();
    singles.sort_unstable();
    assert_eq!(singles, (0..=255).collect::<Vec<u8>>(), "each byte value is one token");

    let parts = alpha_data::split::split(alpha_data::corpus::load(&corpus).unwrap());
    for (split, docs, info) in [(Split::Train, &parts.train, &m.train), (Split::Valid, &parts.valid, &m.valid)] {
        let mut tokens: Vec<u32> = vec![];
        for s in &info.shards {
            tokens.extend(read_tokens(&out.join(&s.file)).unwrap().1.iter().map(|&t| t as u32));
        }
        assert_eq!(tokens.first(), Some(&bos), "{split}: the first document opens with the mark");
        assert_ne!(tokens.last(), Some(&bos), "{split}: no mark closes the last document");
        // The documents, cut at each mark, decode to the texts in corpus order.
        let pieces: Vec<&[u32]> = tokens.split(|&t| t == bos).skip(1).collect();
        assert_eq!(pieces.len(), docs.len(), "{split}: one mark a document");
        assert!(docs.len() > 1, "{split}: a corpus of several documents");
        for (i, (piece, doc)) in pieces.iter().zip(docs.iter()).enumerate() {
            assert_eq!(tk.decode_bytes(piece), doc.text.as_bytes(), "{split} document {i}");
        }
        let text_bytes: u64 = docs.iter().map(|d| d.text.len() as u64).sum();
        assert_eq!(info.bytes, text_bytes, "{split}: bits per byte's denominator is the texts' bytes");
        assert_eq!(tk.decoded_bytes(&tokens), text_bytes);
    }
}

#[test]
fn bos_is_for_a_bpe_trained_here() {
    let gpt2 = "gpt2".parse::<TokenizerSpec>().unwrap().with_bos().unwrap_err().to_string();
    assert!(gpt2.contains("already puts <|endoftext|> before each document"), "{gpt2}");
    let bytes = "bytes".parse::<TokenizerSpec>().unwrap().with_bos().unwrap_err().to_string();
    assert!(bytes.contains("--bos is for bpe:<vocab> only"), "{bytes}");
    assert!(!"bpe:1024".parse::<TokenizerSpec>().unwrap().bos());
}
