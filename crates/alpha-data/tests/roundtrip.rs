//! decode(encode(text)) == text on real documents, and our BPE encoder agrees id for id with
//! the Hugging Face `tokenizers` library on the same tokenizer.json.

mod common;

use alpha_data::bpe::{pretokenize, BpeTokenizer};
use alpha_data::Tokenizer;

fn sample_texts() -> Vec<String> {
    let mut texts = Vec::new();
    match common::tinyshakespeare() {
        Some(p) => texts.push(std::fs::read_to_string(p).unwrap()),
        None => texts.extend(common::sdist_text(1_200_000)),
    }
    if let Some(g) = common::gutenberg_sample(3_000_000) {
        texts.extend(g);
    }
    // Edge cases the pre-tokenizer must get right.
    texts.push("  leading spaces,\ttabs\t\tand  double  spaces  \n\n\n".into());
    texts.push("contractions: it's, we're, they've, I'm, we'll, he'd, O'Brien's 'quoted'".into());
    texts.push("unicode: café naïve Ægir ﬁ ß 東京 ١٢٣ 𝔘𝔫𝔦 🙂👍🏽 \u{00a0}nbsp \u{2003}em".into());
    texts.push("numbers 1234567 3.14 ½ Ⅻ and <|endoftext|> as plain text".into());
    texts.push("trailing whitespace   ".into());
    texts
}

/// A BPE trained on tinyshakespeare, else on the sample texts (the default corpus's texts
/// where present, and the edge cases).
fn trained_tokenizer(vocab: usize) -> (String, Tokenizer) {
    let train = match common::tinyshakespeare() {
        Some(p) => std::fs::read_to_string(p).unwrap(),
        None => sample_texts().join("\n"),
    };
    let json = alpha_data::bpe::train(std::iter::once(train.as_str()), vocab).unwrap();
    let tk = Tokenizer::Bpe(Box::new(BpeTokenizer::from_json(&json).unwrap()));
    (json, tk)
}

#[test]
fn bytes_round_trip_every_document() {
    let tk = Tokenizer::Bytes;
    let texts = sample_texts();
    for t in &texts {
        let ids = tk.encode(t);
        assert_eq!(ids.len(), t.len());
        assert!(ids.iter().all(|&i| i < 256));
        assert_eq!(tk.decode(&ids), *t);
        assert_eq!(tk.decoded_bytes(&ids), t.len() as u64);
    }
    assert_eq!(tk.vocab_size(), 256);
    assert_eq!(tk.decode(&[104, 105, 3]), "hi<|endoftext|>");
    assert_eq!(tk.decoded_bytes(&[104, 105, 3]), 2);
}

#[test]
fn bpe_round_trip_every_document() {
    let (_, tk) = trained_tokenizer(1024);
    let texts = sample_texts();
    let mut bytes = 0;
    let mut tokens = 0;
    for t in &texts {
        let ids = tk.encode(t);
        assert!(ids.iter().all(|&i| (i as usize) < tk.vocab_size() && i != tk.eot_id()));
        assert_eq!(tk.decode(&ids), *t, "round trip failed");
        assert_eq!(tk.decode_bytes(&ids), t.as_bytes());
        assert_eq!(tk.decoded_bytes(&ids), t.len() as u64);
        bytes += t.len();
        tokens += ids.len();
    }
    // A trained BPE compresses English text well beyond one byte a token.
    assert!(bytes as f64 / tokens as f64 > 2.0, "{bytes} bytes / {tokens} tokens");
}

/// Spans of a document's bytes cut anywhere, characters split at either edge included, encode
/// to tokens that give back exactly those bytes: how one model is scored on another's byte
/// windows.
#[test]
fn any_byte_span_round_trips_through_both_tokenizers() {
    let (_, bpe) = trained_tokenizer(1024);
    let text = sample_texts().join("\n");
    let bytes = text.as_bytes();
    let mut cut_characters = 0;
    for tk in [&Tokenizer::Bytes, &bpe] {
        // Spans of 61 bytes every 37: edges fall inside the multi-byte characters too.
        let mut start = 0;
        while start + 61 <= bytes.len() {
            let span = &bytes[start..start + 61];
            cut_characters += usize::from(std::str::from_utf8(span).is_err());
            let mut ids = vec![];
            tk.encode_bytes_into(span, &mut ids);
            assert_eq!(tk.decode_bytes(&ids), span, "span at byte {start}");
            assert_eq!(tk.decoded_bytes(&ids), 61);
            start += 37;
        }
    }
    // The edge-case texts' characters of 2 to 4 bytes are cut by some spans.
    assert!(cut_characters > 0, "no span cut a character");
    // Whole text encodes as encode() does.
    let mut ids = vec![];
    bpe.encode_bytes_into(bytes, &mut ids);
    assert_eq!(ids, bpe.encode(&text));
}

#[test]
fn bpe_encoder_matches_huggingface_tokenizers() {
    let (json, tk) = trained_tokenizer(1024);
    let hf: tokenizers::Tokenizer = json.parse().unwrap();
    for t in sample_texts() {
        // HF splits on the special token's text; our encoder deliberately does not.
        if t.contains("<|endoftext|>") {
            continue;
        }
        // Compare on slices to keep the test fast (HF builds offsets for every token).
        for chunk in t.as_bytes().chunks(200_000).take(2) {
            let text = String::from_utf8_lossy(chunk);
            let ours = tk.encode(&text);
            let theirs = hf.encode(text.as_ref(), false).unwrap().get_ids().to_vec();
            assert_eq!(ours, theirs, "encoders disagree");
            assert_eq!(hf.decode(&ours, false).unwrap(), text);
        }
    }
}

#[test]
fn pretokenizer_matches_gpt2_pattern_on_whitespace() {
    let mut pieces = Vec::new();
    pretokenize("a  b\n\nc   ", |p| pieces.push(p.to_string()));
    assert_eq!(pieces, ["a", " ", " b", "\n", "\n", "c", "   "]);
    let mut pieces = Vec::new();
    pretokenize("x \t\ny's", |p| pieces.push(p.to_string()));
    assert_eq!(pieces, ["x", " \t", "\n", "y", "'s"]);
}
