//! Typed errors for the failures a user can cause and must be told about plainly: a damaged or
//! foreign shard, a tokenizer that does not fit the system, a corpus with nothing in it.

use std::path::PathBuf;

/// Errors with a message that names the file and says what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: not an Alpha token shard (bad magic {found:?}, expected \"ALPHATOK\")")]
    BadMagic { path: PathBuf, found: String },
    #[error("{path}: unsupported shard version {found} (this build reads version {expected})")]
    UnsupportedVersion { path: PathBuf, found: u32, expected: u32 },
    #[error(
        "{path}: truncated shard: header says {tokens} tokens ({expected_len} bytes) \
         but the file has {actual_len} bytes"
    )]
    Truncated { path: PathBuf, tokens: u64, expected_len: u64, actual_len: u64 },
    #[error(
        "vocabulary mismatch: the data in {dir} was tokenized with a vocabulary of {found} \
         tokens but the system expects {expected}"
    )]
    VocabMismatch { dir: PathBuf, expected: usize, found: usize },
    #[error(
        "{path}: damaged shard: header claims {tokens} tokens, more than any file can hold \
         (the file has {actual_len} bytes)"
    )]
    ImpossibleTokenCount { path: PathBuf, tokens: u64, actual_len: u64 },
    #[error("{path}: {what} mismatch: manifest says {expected}, file has {found}")]
    ManifestMismatch { path: PathBuf, what: &'static str, expected: String, found: String },
    #[error(
        "{path}: shard SHA-256 mismatch: manifest says {expected}, file hashes to {found} \
         (the shard was changed or damaged after preparation; prepare the data again)"
    )]
    ShaMismatch { path: PathBuf, expected: String, found: String },
    #[error("corpus path {0} does not exist")]
    MissingCorpus(PathBuf),
    #[error("corpus {0} holds no text (no non-empty documents found)")]
    EmptyCorpus(PathBuf),
    #[error(
        "corpus {path} is too large to read ({what}; the limit is {max_files} files and \
         {max_gib:.0} GiB): {advice}"
    )]
    CorpusTooLarge { path: PathBuf, what: String, max_files: usize, max_gib: f64, advice: String },
    #[error(
        "corpus {path} holds no text: {binary_files} file(s) look binary and were skipped, \
         e.g. {example}"
    )]
    NoText { path: PathBuf, binary_files: usize, example: String },
    #[error(
        "{dir} is not empty and is not an Alpha data preparation ({why}); nothing was written \
         or deleted: choose a new or empty folder for --out"
    )]
    ForeignOutput { dir: PathBuf, why: String },
    #[error("unsupported tokenizer {0}: {1}")]
    UnsupportedTokenizer(String, String),
}
