//! The two tokenizers a prepared corpus can use, behind one type.
//!
//! - `bytes`: ids 0–255 are the UTF-8 bytes of the text, so the vocabulary is exactly 256 (Bob's
//!   table is 256×256). End-of-text is id 3, ASCII's own END OF TEXT control byte, which
//!   prose never holds (readers strip it); it stands for no document byte. Its identity (SHA-256)
//!   is the hash of a fixed descriptor string.
//! - byte-level BPE: a Hugging Face `tokenizer.json` (trained here or given); its identity is
//!   the SHA-256 of that file's bytes.
//!
//! Every token decodes to a known run of document bytes (end-of-text to none), which is what
//! bits-per-byte is measured over.

use std::path::Path;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::bpe::{BpeTokenizer, EOT_TEXT};

/// The bytes tokenizer's vocabulary: the 256 byte values.
pub const BYTES_VOCAB: usize = 256;
/// The bytes tokenizer's end-of-text id.
pub const BYTES_EOT: u32 = 3;
const BYTES_DESCRIPTOR: &[u8] = b"alpha bytes tokenizer v2: ids 0-255 are UTF-8 bytes, 3 (ETX) is <|endoftext|>";

/// A tokenizer that prepared data was (or will be) written with.
#[derive(Clone, Debug)]
pub enum Tokenizer {
    Bytes,
    Bpe(Box<BpeTokenizer>),
}

impl Tokenizer {
    /// Reads a `tokenizer.json` file (byte-level BPE).
    pub fn from_file(path: &Path) -> Result<Self> {
        let json = std::fs::read_to_string(path).with_context(|| format!("reading tokenizer {}", path.display()))?;
        let tk = BpeTokenizer::from_json(&json).with_context(|| format!("loading tokenizer {}", path.display()))?;
        Ok(Tokenizer::Bpe(Box::new(tk)))
    }

    /// The tokenizer of a prepared directory, checked against its manifest.
    pub fn load(dir: &Path) -> Result<Self> {
        let manifest = crate::manifest::Manifest::load(dir)?;
        manifest.tokenizer(dir)
    }

    /// `"bytes"` or `"bpe"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Tokenizer::Bytes => "bytes",
            Tokenizer::Bpe(_) => "bpe",
        }
    }

    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Bytes => BYTES_VOCAB,
            Tokenizer::Bpe(b) => b.vocab_size(),
        }
    }

    pub fn eot_id(&self) -> u32 {
        match self {
            Tokenizer::Bytes => BYTES_EOT,
            Tokenizer::Bpe(b) => b.eot_id(),
        }
    }

    /// SHA-256 identifying the tokenizer; it is stamped into every shard header.
    pub fn sha256(&self) -> [u8; 32] {
        match self {
            Tokenizer::Bytes => Sha256::digest(BYTES_DESCRIPTOR).into(),
            Tokenizer::Bpe(b) => b.sha256(),
        }
    }

    /// Encodes a document's text (no end-of-text is added; special-token text stays text).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_into(text, &mut out);
        out
    }

    /// Appends the ids of `text` to `out`.
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) {
        match self {
            Tokenizer::Bytes => out.extend(text.bytes().map(u32::from)),
            Tokenizer::Bpe(b) => b.encode_into(text, out),
        }
    }

    /// Appends the ids of any bytes, text or not: each valid UTF-8 run is encoded as text, and
    /// each byte that is not part of one (a character cut at a window's edge) as its own
    /// single-byte token, so `decode_bytes` gives `bytes` back exactly.
    pub fn encode_bytes_into(&self, bytes: &[u8], out: &mut Vec<u32>) {
        for chunk in bytes.utf8_chunks() {
            self.encode_into(chunk.valid(), out);
            out.extend(chunk.invalid().iter().map(|&b| match self {
                Tokenizer::Bytes => u32::from(b),
                Tokenizer::Bpe(t) => t.byte_id(b),
            }));
        }
    }

    /// The document bytes of a token; end-of-text (and any special token) has none.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        match self {
            Tokenizer::Bytes => {
                static BYTES: [u8; 256] = {
                    let mut t = [0u8; 256];
                    let mut i = 0;
                    while i < 256 {
                        t[i] = i as u8;
                        i += 1;
                    }
                    t
                };
                if id < 256 && id != BYTES_EOT {
                    &BYTES[id as usize..id as usize + 1]
                } else {
                    &[]
                }
            }
            Tokenizer::Bpe(b) => b.token_bytes(id),
        }
    }

    /// The document bytes of a token sequence, concatenated.
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.token_bytes(id));
        }
        out
    }

    /// Text for display: end-of-text shows as `<|endoftext|>`; a multi-byte character cut at
    /// either edge shows as U+FFFD. For `ids = encode(text)`, `decode(ids) == text`.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut out = String::new();
        let mut run: Vec<u8> = Vec::new();
        for &id in ids {
            let special = match self {
                Tokenizer::Bytes => (id == BYTES_EOT).then_some(EOT_TEXT),
                Tokenizer::Bpe(b) => b.special_text(id),
            };
            match special {
                Some(s) => {
                    out.push_str(&String::from_utf8_lossy(&run));
                    run.clear();
                    out.push_str(s);
                }
                None => run.extend_from_slice(self.token_bytes(id)),
            }
        }
        out.push_str(&String::from_utf8_lossy(&run));
        out
    }

    /// Number of document bytes the tokens stand for: the denominator of bits per byte.
    pub fn decoded_bytes(&self, ids: &[u32]) -> u64 {
        ids.iter().map(|&id| self.token_bytes(id).len() as u64).sum()
    }
}
