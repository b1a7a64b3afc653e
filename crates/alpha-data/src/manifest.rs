//! `manifest.json`: what a prepared directory holds and how it was made. Written last and
//! atomically (temporary file, sync, rename), so a directory with a manifest is complete and a
//! crash never leaves an empty one; everything in it is deterministic (no clocks, no host
//! names), so two preparations of the same input are byte-identical. Its `format` field
//! ([`FORMAT`]) is how a folder is recognised as an Alpha preparation.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::corpus::{CorpusKind, SourceFile, Split};
use crate::error::DataError;
use crate::shard::ShardHeader;
use crate::tokenizer::Tokenizer;

pub const MANIFEST_FILE: &str = "manifest.json";
pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const FORMAT: &str = "alpha-token-shards";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub tokenizer: TokenizerInfo,
    pub source: SourceInfo,
    pub split_rule: String,
    pub train: SplitInfo,
    pub valid: SplitInfo,
    pub totals: Totals,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TokenizerInfo {
    /// `bytes` or `bpe`.
    pub kind: String,
    pub vocab_size: usize,
    pub eot_id: u32,
    /// `eot_id` opens each document (a beginning-of-sequence mark) instead of closing it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bos: bool,
    pub sha256: String,
    /// `tokenizer.json` in the directory (BPE only).
    pub file: Option<String>,
    /// How it was obtained: trained (on what) or loaded (from where).
    pub origin: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SourceInfo {
    pub path: String,
    pub kind: CorpusKind,
    pub files: Vec<SourceFile>,
    /// [`crate::corpus::fingerprint`] of the inputs: what a data cache is keyed by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShardInfo {
    /// File name inside the prepared directory.
    pub file: String,
    pub tokens: u64,
    /// UTF-8 bytes of source text these tokens encode (end-of-text counts none).
    pub bytes: u64,
    pub documents: u64,
    pub sha256: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SplitInfo {
    pub documents: u64,
    pub tokens: u64,
    pub bytes: u64,
    pub bytes_per_token: f64,
    pub shards: Vec<ShardInfo>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Totals {
    pub documents: u64,
    pub tokens: u64,
    pub bytes: u64,
    pub bytes_per_token: f64,
}

impl Manifest {
    /// Reads `manifest.json` from a prepared directory.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} (is {} a prepared data directory?)", path.display(), dir.display()))?;
        let m: Manifest = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        anyhow::ensure!(m.format == FORMAT, "{}: format is {:?}, expected {FORMAT:?}", path.display(), m.format);
        Ok(m)
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        crate::atomic::write(&dir.join(MANIFEST_FILE), text.as_bytes(), "manifest")
    }

    pub fn split(&self, split: Split) -> &SplitInfo {
        match split {
            Split::Train => &self.train,
            Split::Valid => &self.valid,
        }
    }

    /// Fails with [`DataError::VocabMismatch`] unless the data's vocabulary is `expected`.
    pub fn check_vocab(&self, dir: &Path, expected: usize) -> Result<(), DataError> {
        if self.tokenizer.vocab_size != expected {
            return Err(DataError::VocabMismatch {
                dir: dir.to_path_buf(),
                expected,
                found: self.tokenizer.vocab_size,
            });
        }
        Ok(())
    }

    /// Loads the directory's tokenizer and checks it is the one the manifest names.
    pub fn tokenizer(&self, dir: &Path) -> Result<Tokenizer> {
        let tk = match self.tokenizer.kind.as_str() {
            "bytes" => Tokenizer::Bytes,
            "bpe" => {
                let file = self.tokenizer.file.as_deref().unwrap_or(TOKENIZER_FILE);
                anyhow::ensure!(
                    is_plain_name(file),
                    "{}: tokenizer file {file:?} is not a file name inside the directory",
                    dir.join(MANIFEST_FILE).display()
                );
                Tokenizer::from_file(&dir.join(file))?
            }
            other => anyhow::bail!("{}: unknown tokenizer kind {other:?}", dir.display()),
        };
        let sha = hex::encode(tk.sha256());
        if sha != self.tokenizer.sha256 {
            return Err(DataError::ManifestMismatch {
                path: dir.join(self.tokenizer.file.as_deref().unwrap_or(MANIFEST_FILE)),
                what: "tokenizer SHA-256",
                expected: self.tokenizer.sha256.clone(),
                found: sha,
            }
            .into());
        }
        if tk.vocab_size() != self.tokenizer.vocab_size {
            return Err(DataError::VocabMismatch {
                dir: dir.to_path_buf(),
                expected: self.tokenizer.vocab_size,
                found: tk.vocab_size(),
            }
            .into());
        }
        Ok(tk)
    }

    /// Checks a shard's header against the manifest (tokenizer hash, vocabulary, count).
    pub fn check_header(&self, path: &Path, shard: &ShardInfo, h: &ShardHeader) -> Result<(), DataError> {
        let mismatch = |what, expected: String, found: String| DataError::ManifestMismatch {
            path: path.to_path_buf(),
            what,
            expected,
            found,
        };
        if h.vocab_size as usize != self.tokenizer.vocab_size {
            return Err(mismatch("vocabulary size", self.tokenizer.vocab_size.to_string(), h.vocab_size.to_string()));
        }
        if hex::encode(h.tokenizer_sha256) != self.tokenizer.sha256 {
            return Err(mismatch("tokenizer SHA-256", self.tokenizer.sha256.clone(), hex::encode(h.tokenizer_sha256)));
        }
        if h.eot_id != self.tokenizer.eot_id {
            return Err(mismatch("end-of-text id", self.tokenizer.eot_id.to_string(), h.eot_id.to_string()));
        }
        if h.tokens != shard.tokens {
            return Err(mismatch("token count", shard.tokens.to_string(), h.tokens.to_string()));
        }
        Ok(())
    }

    /// The path of a shard the manifest names; the name must be a plain file name inside
    /// `dir` (a crafted manifest does not get to point at other files).
    pub fn shard_path(&self, dir: &Path, shard: &ShardInfo) -> Result<std::path::PathBuf> {
        anyhow::ensure!(
            is_plain_name(&shard.file),
            "{}: shard name {:?} is not a file name inside the directory",
            dir.join(MANIFEST_FILE).display(),
            shard.file
        );
        Ok(dir.join(&shard.file))
    }

    /// Recomputes one shard's SHA-256 and compares it with the manifest's.
    pub fn check_sha256(&self, path: &Path, shard: &ShardInfo) -> Result<()> {
        // A run opens a split more than once (the cache's check, the trainer, the baseline's
        // counts), so a shard already found to match, unchanged since (same length and
        // modification time), is not read and hashed again in this process.
        static MATCHED: std::sync::Mutex<Vec<MatchedShard>> = std::sync::Mutex::new(Vec::new());
        let stamp = std::fs::metadata(path).and_then(|m| Ok((m.len(), m.modified()?))).ok();
        let seen = |list: &Vec<MatchedShard>| {
            stamp.is_some_and(|(len, mtime)| {
                list.iter().any(|(p, l, t, sha)| p == path && *l == len && *t == mtime && *sha == shard.sha256)
            })
        };
        if seen(&MATCHED.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(());
        }
        let found = hex::encode(crate::shard::sha256_file(path)?);
        if found != shard.sha256 {
            return Err(
                DataError::ShaMismatch { path: path.to_path_buf(), expected: shard.sha256.clone(), found }.into()
            );
        }
        if let Some((len, mtime)) = stamp {
            MATCHED.lock().unwrap_or_else(|e| e.into_inner()).push((path.to_path_buf(), len, mtime, found));
        }
        Ok(())
    }

    /// Checks every shard of both splits: name, header against the manifest, and SHA-256.
    pub fn verify_shards(&self, dir: &Path) -> Result<()> {
        use rayon::prelude::*;
        self.train.shards.par_iter().chain(self.valid.shards.par_iter()).try_for_each(|s| -> Result<()> {
            let path = self.shard_path(dir, s)?;
            let h = ShardHeader::read(&path)?;
            self.check_header(&path, s, &h)?;
            self.check_sha256(&path, s)
        })
    }
}

/// A shard whose SHA-256 matched its manifest: path, length, modification time, digest.
type MatchedShard = (std::path::PathBuf, u64, std::time::SystemTime, String);

/// Whether `name` is one plain file name (no folder, no `..`, not absolute).
fn is_plain_name(name: &str) -> bool {
    matches!(Path::new(name).components().collect::<Vec<_>>().as_slice(), [std::path::Component::Normal(_)])
}
