//! Byte-level BPE: GPT-2's pre-tokenizer, training through the Hugging Face `tokenizers`
//! trainer, and a fast encoder that reads the resulting `tokenizer.json`.
//!
//! Why our own encoder: `tokenizers::Tokenizer::encode` builds offsets and alignments for every
//! token and splits on special-token text found inside documents; preparing a corpus needs only
//! ids, at several MB/s per core, and a document that happens to contain the text
//! `<|endoftext|>` must round-trip as text. The encoder applies exactly the same rules as the
//! library (same regex classes from the `regex` crate, same merge order: lowest rank first,
//! leftmost on ties), and tests compare it id for id with `tokenizers` on real text.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::DataError;

/// The end-of-text token's text in every tokenizer Alpha writes.
pub const EOT_TEXT: &str = "<|endoftext|>";

/// GPT-2's split pattern without its `\s+(?!\S)` look-ahead, which the `regex` crate lacks;
/// [`pretokenize`] restores that rule by giving back the last whitespace character.
static PIECE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+").expect("valid pattern")
});

/// Splits text into GPT-2 pieces (the `ByteLevel` pre-tokenizer's regex), in order.
pub fn pretokenize(text: &str, mut piece: impl FnMut(&str)) {
    let re = &*PIECE;
    let mut pos = 0;
    while pos < text.len() {
        let Some(m) = re.find_at(text, pos) else {
            break;
        };
        let (start, mut end) = (m.start(), m.end());
        debug_assert_eq!(start, pos, "every character starts a piece");
        let s = &text[start..end];
        // `\s+(?!\S)`: a whitespace run followed by a non-space leaves its last character to
        // start the next piece (so " word" keeps its space).
        if end < text.len() && s.chars().all(char::is_whitespace) {
            if let Some((last, _)) = s.char_indices().next_back().filter(|&(i, _)| i > 0) {
                end = start + last;
            }
        }
        piece(&text[start..end]);
        pos = end;
    }
}

/// GPT-2's byte ↔ printable character table used by `ByteLevel`.
pub fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        table[b as usize] = if printable {
            char::from(b)
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
    }
    table
}

/// Small fast hasher for short keys (FxHash); the inputs are not adversarial.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);
impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }
    fn finish(&self) -> u64 {
        self.0
    }
}
type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
const CACHE_LIMIT: usize = 1 << 20;

/// Piece text → ids, for the tokenizer instance whose id is the first field.
type PieceCache = (u64, FxMap<Box<str>, Box<[u32]>>);

thread_local! {
    /// Per-thread piece → ids cache, tagged with the tokenizer instance it belongs to.
    static CACHE: RefCell<PieceCache> = RefCell::new((0, FxMap::default()));
}

/// A byte-level BPE tokenizer read from a Hugging Face `tokenizer.json`.
#[derive(Clone)]
pub struct BpeTokenizer {
    instance: u64,
    json: String,
    sha256: [u8; 32],
    vocab_size: usize,
    eot: u32,
    byte_ids: [u32; 256],
    merges: FxMap<(u32, u32), (u32, u32)>,
    ignore_merges: bool,
    vocab: FxMap<Vec<u8>, u32>,
    token_bytes: Vec<Vec<u8>>,
    special: Vec<Option<String>>,
}

impl std::fmt::Debug for BpeTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpeTokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("eot", &self.eot)
            .field("sha256", &hex::encode(self.sha256))
            .finish()
    }
}

fn unsupported(what: &str) -> anyhow::Error {
    DataError::UnsupportedTokenizer(
        "tokenizer.json".into(),
        format!("{what}; Alpha reads byte-level BPE tokenizers (GPT-2 style) only"),
    )
    .into()
}

/// A token id from `tokenizer.json`, if it fits the u16 shards (a crafted id of 4e9 must not
/// size the id tables).
fn token_id(id: Option<u64>) -> Option<u32> {
    id.filter(|&i| i <= u16::MAX as u64).map(|i| i as u32)
}

impl BpeTokenizer {
    /// Parses a `tokenizer.json` (byte-level BPE with an `<|endoftext|>` added token).
    pub fn from_json(json: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(json).context("tokenizer.json is not JSON")?;
        if !v["normalizer"].is_null() {
            return Err(unsupported("it has a normalizer"));
        }
        let pre = &v["pre_tokenizer"];
        if pre["type"] != "ByteLevel" {
            return Err(unsupported(&format!("pre_tokenizer is {}", pre["type"])));
        }
        if pre["add_prefix_space"] == true {
            return Err(unsupported("ByteLevel add_prefix_space is true"));
        }
        if pre["use_regex"] == false {
            return Err(unsupported("ByteLevel use_regex is false"));
        }
        let model = &v["model"];
        if model["type"] != "BPE" {
            return Err(unsupported(&format!("model is {}", model["type"])));
        }
        if !model["dropout"].is_null() {
            return Err(unsupported("BPE dropout is set"));
        }
        let ignore_merges = model["ignore_merges"] == true;
        let char_to_byte: HashMap<char, u8> = byte_to_char().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        let decode_token = |s: &str| -> Result<Vec<u8>> {
            s.chars()
                .map(|c| char_to_byte.get(&c).copied().ok_or_else(|| anyhow!("token {s:?} is not byte-level text")))
                .collect()
        };
        let vocab_json = model["vocab"].as_object().ok_or_else(|| anyhow!("tokenizer.json: model.vocab is missing"))?;
        let mut vocab: FxMap<Vec<u8>, u32> = FxMap::default();
        let mut by_id: Vec<(u32, Vec<u8>)> = Vec::with_capacity(vocab_json.len());
        for (tok, id) in vocab_json {
            let id = token_id(id.as_u64()).ok_or_else(|| anyhow!("bad id {id} for {tok:?} (ids are 0..65535)"))?;
            let bytes = decode_token(tok)?;
            vocab.insert(bytes.clone(), id);
            by_id.push((id, bytes));
        }
        let mut added: Vec<(u32, String, bool)> = Vec::new();
        if let Some(list) = v["added_tokens"].as_array() {
            for t in list {
                let id = token_id(t["id"].as_u64())
                    .ok_or_else(|| anyhow!("added token {} has no id in 0..65535", t["content"]))?;
                let content = t["content"].as_str().unwrap_or_default().to_string();
                added.push((id, content, t["special"] == true));
            }
        }
        let max_id = by_id
            .iter()
            .map(|(i, _)| *i)
            .chain(added.iter().map(|a| a.0))
            .max()
            .ok_or_else(|| anyhow!("tokenizer.json has an empty vocabulary"))?;
        let vocab_size = max_id as usize + 1;
        let mut token_bytes = vec![Vec::new(); vocab_size];
        let mut special = vec![None; vocab_size];
        for (id, bytes) in by_id {
            token_bytes[id as usize] = bytes;
        }
        for (id, content, _) in &added {
            // Added tokens are markers, not text: they decode to zero bytes of the document.
            token_bytes[*id as usize].clear();
            special[*id as usize] = Some(content.clone());
        }
        let eot = added
            .iter()
            .find(|a| a.1 == EOT_TEXT)
            .map(|a| a.0)
            .ok_or_else(|| unsupported("it has no <|endoftext|> added token"))?;
        let mut byte_ids = [0u32; 256];
        for b in 0..=255u8 {
            byte_ids[b as usize] =
                *vocab.get(&vec![b]).ok_or_else(|| unsupported(&format!("byte {b:#04x} is not in the vocabulary")))?;
        }
        let mut merges = FxMap::default();
        let list = model["merges"].as_array().ok_or_else(|| anyhow!("tokenizer.json: model.merges is missing"))?;
        for (rank, m) in list.iter().enumerate() {
            let (a, b) = match m {
                Value::String(s) => s.split_once(' ').ok_or_else(|| anyhow!("bad merge {s:?}"))?,
                Value::Array(p) if p.len() == 2 => {
                    (p[0].as_str().unwrap_or_default(), p[1].as_str().unwrap_or_default())
                }
                other => bail!("bad merge {other}"),
            };
            let (ba, bb) = (decode_token(a)?, decode_token(b)?);
            let ia = *vocab.get(&ba).ok_or_else(|| anyhow!("merge part {a:?} not in vocab"))?;
            let ib = *vocab.get(&bb).ok_or_else(|| anyhow!("merge part {b:?} not in vocab"))?;
            let joined = [ba, bb].concat();
            let new = *vocab.get(&joined).ok_or_else(|| anyhow!("merge result {a}{b} not in vocab"))?;
            merges.entry((ia, ib)).or_insert((rank as u32, new));
        }
        Ok(BpeTokenizer {
            instance: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            json: json.to_string(),
            sha256: Sha256::digest(json.as_bytes()).into(),
            vocab_size,
            eot,
            byte_ids,
            merges,
            ignore_merges,
            vocab,
            token_bytes,
            special,
        })
    }

    /// The exact `tokenizer.json` text this tokenizer was read from.
    pub fn json(&self) -> &str {
        &self.json
    }
    pub fn sha256(&self) -> [u8; 32] {
        self.sha256
    }
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    pub fn eot_id(&self) -> u32 {
        self.eot
    }

    /// The document bytes a token stands for (empty for added/special tokens).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map_or(&[], |v| v)
    }

    /// The single-byte token of byte `b` (every byte-level BPE has all 256).
    pub fn byte_id(&self, b: u8) -> u32 {
        self.byte_ids[b as usize]
    }

    /// The text of an added token (`<|endoftext|>`), if `id` is one.
    pub fn special_text(&self, id: u32) -> Option<&str> {
        self.special.get(id as usize).and_then(|s| s.as_deref())
    }

    /// Encodes text as plain text (special-token text inside it is not special).
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) {
        CACHE.with(|cell| {
            let mut guard = cell.borrow_mut();
            let (owner, cache) = &mut *guard;
            if *owner != self.instance || cache.len() > CACHE_LIMIT {
                cache.clear();
                *owner = self.instance;
            }
            let mut work = Vec::new();
            pretokenize(text, |piece| {
                if piece.len() == 1 {
                    out.push(self.byte_ids[piece.as_bytes()[0] as usize]);
                    return;
                }
                if let Some(ids) = cache.get(piece) {
                    out.extend_from_slice(ids);
                    return;
                }
                let start = out.len();
                self.encode_piece(piece.as_bytes(), &mut work, out);
                cache.insert(piece.into(), out[start..].into());
            });
        });
    }

    fn encode_piece(&self, bytes: &[u8], work: &mut Vec<u32>, out: &mut Vec<u32>) {
        if self.ignore_merges {
            if let Some(&id) = self.vocab.get(bytes) {
                out.push(id);
                return;
            }
        }
        work.clear();
        work.extend(bytes.iter().map(|&b| self.byte_ids[b as usize]));
        loop {
            let mut best: Option<(u32, usize, u32)> = None;
            for i in 0..work.len().saturating_sub(1) {
                if let Some(&(rank, new)) = self.merges.get(&(work[i], work[i + 1])) {
                    if best.is_none_or(|(r, _, _)| rank < r) {
                        best = Some((rank, i, new));
                    }
                }
            }
            let Some((_, i, new)) = best else { break };
            work[i] = new;
            work.remove(i + 1);
        }
        out.extend_from_slice(work);
    }
}

/// Trains a byte-level BPE of `vocab_size` tokens in all (256 byte tokens, merges, and
/// `<|endoftext|>` at id 0) on `texts`, with the `tokenizers` trainer, and returns its
/// `tokenizer.json`. The trainer is deterministic: word counts are summed exactly, the merge
/// queue breaks count ties by pair ids, and ids are assigned in merge order.
pub fn train<'a, I>(texts: I, vocab_size: usize) -> Result<String>
where
    I: Iterator<Item = &'a str> + Send,
{
    use tokenizers::models::bpe::{BpeTrainer, BPE};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::{AddedToken, Trainer};

    anyhow::ensure!(
        (258..=65536).contains(&vocab_size),
        "BPE vocabulary must be 258..=65536 tokens (u16 shards, 256 bytes + end-of-text), got {vocab_size}"
    );
    let table = byte_to_char();
    let mut trainer = BpeTrainer::builder()
        .vocab_size(vocab_size)
        .min_frequency(0)
        .show_progress(false)
        .special_tokens(vec![AddedToken::from(EOT_TEXT, true)])
        .initial_alphabet(byte_to_char().into_iter().collect())
        .build();
    trainer
        .feed(texts, |text| {
            let mut words = Vec::new();
            pretokenize(text, |p| words.push(p.bytes().map(|b| table[b as usize]).collect()));
            Ok(words)
        })
        .map_err(|e| anyhow!("BPE training failed: {e}"))?;
    let mut model = BPE::default();
    let specials = trainer.train(&mut model).map_err(|e| anyhow!("BPE training failed: {e}"))?;
    let mut tk = tokenizers::Tokenizer::new(model);
    tk.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tk.with_decoder(Some(ByteLevel::new(false, true, true)));
    tk.add_special_tokens(&specials);
    let json = tk.to_string(true).map_err(|e| anyhow!("serialising tokenizer.json: {e}"))?;
    Ok(json)
}
