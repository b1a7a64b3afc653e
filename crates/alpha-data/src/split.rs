//! The held-out split: which documents are scored and never trained on.
//!
//! Rules, in order of precedence (the one used is written into the manifest):
//! 1. the corpus brings its own split (Gutenberg's `train-*`/`valid-*` files): kept as is;
//! 2. grouped documents (the sdist): groups are ordered by SHA-256 of the group name and taken
//!    into the held-out side in that order until it holds at least [`HELDOUT_FRACTION`] of the
//!    bytes, so whole works are held out and every edition of a work is on one side;
//! 3. a single document (one text file): its last ~10% of bytes, cut at a newline, is held out;
//! 4. several documents: a document is held out when the first byte of SHA-256(text) is
//!    divisible by 10; if that leaves a side empty, the document with the smallest (largest)
//!    hash is moved so each side has at least one.

use sha2::{Digest, Sha256};

use crate::corpus::{Corpus, Document, Split};

/// Held-out share of bytes for the rules that choose it.
pub const HELDOUT_FRACTION: f64 = 0.10;

/// Documents of each side in corpus order, and the rule that put them there.
#[derive(Debug)]
pub struct SplitCorpus {
    pub train: Vec<Document>,
    pub valid: Vec<Document>,
    pub rule: String,
}

/// Splits a loaded corpus by the first rule that applies (see the module docs).
pub fn split(corpus: Corpus) -> SplitCorpus {
    let Corpus { documents, given_split_rule, .. } = corpus;
    if let Some(rule) = given_split_rule {
        let (valid, train) = documents.into_iter().partition(|d| d.split == Some(Split::Valid));
        return SplitCorpus { train, valid, rule };
    }
    if documents.iter().any(|d| d.group.is_some()) {
        return split_by_group(documents);
    }
    if documents.len() == 1 {
        return split_tail(documents.into_iter().next().unwrap());
    }
    split_by_hash(documents)
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn split_by_group(documents: Vec<Document>) -> SplitCorpus {
    let total: u64 = documents.iter().map(|d| d.text.len() as u64).sum();
    let mut groups: Vec<(String, u64)> = Vec::new();
    for d in &documents {
        let g = d.group.clone().unwrap_or_else(|| d.name.clone());
        match groups.iter_mut().find(|(n, _)| *n == g) {
            Some(e) => e.1 += d.text.len() as u64,
            None => groups.push((g, d.text.len() as u64)),
        }
    }
    groups.sort_by_key(|(g, _)| sha(g.as_bytes()));
    let target = (total as f64 * HELDOUT_FRACTION).ceil() as u64;
    let mut held = std::collections::HashSet::new();
    let mut held_bytes = 0u64;
    for (g, b) in &groups {
        if held_bytes >= target || held.len() + 1 == groups.len() {
            break;
        }
        held.insert(g.clone());
        held_bytes += b;
    }
    let mut names: Vec<&String> = held.iter().collect();
    names.sort();
    let rule = format!(
        "whole works held out: documents are grouped by work (edition suffixes _gut/_gut_f \
         stripped, spelling aliases joined, files sharing >= {} lines of 40+ chars joined, \
         byte-identical files dropped); groups ordered by sha256(group name) are held out in \
         that order until >= {:.0}% of bytes; held out: {}",
        crate::sdist::SHARED_LINES_TO_JOIN,
        HELDOUT_FRACTION * 100.0,
        names.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    );
    let (valid, train) = documents.into_iter().partition(|d| held.contains(d.group.as_ref().unwrap_or(&d.name)));
    SplitCorpus { train, valid, rule }
}

fn split_tail(doc: Document) -> SplitCorpus {
    let text = &doc.text;
    let want = text.len() - (text.len() as f64 * HELDOUT_FRACTION) as usize;
    // First newline at or after the 90% mark; the held-out part starts after it.
    let cut = text.as_bytes()[want.min(text.len())..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|p| want + p + 1)
        .filter(|&c| c < text.len())
        .or_else(|| text.as_bytes()[..want].iter().rposition(|&b| b == b'\n').map(|p| p + 1));
    let rule = format!(
        "single document: the tail from the first newline after {:.0}% of its bytes is held out",
        (1.0 - HELDOUT_FRACTION) * 100.0
    );
    match cut {
        Some(c) if c > 0 && c < text.len() => {
            let valid = Document {
                name: format!("{} (tail)", doc.name),
                text: text[c..].to_string(),
                split: Some(Split::Valid),
                group: None,
            };
            let train = Document {
                name: format!("{} (head)", doc.name),
                text: text[..c].to_string(),
                split: Some(Split::Train),
                group: None,
            };
            SplitCorpus { train: vec![train], valid: vec![valid], rule }
        }
        _ => SplitCorpus {
            train: vec![doc],
            valid: vec![],
            rule: format!("{rule} (no newline to cut at: nothing held out)"),
        },
    }
}

fn split_by_hash(documents: Vec<Document>) -> SplitCorpus {
    let hashes: Vec<[u8; 32]> = documents.iter().map(|d| sha(d.text.as_bytes())).collect();
    let mut valid_mask: Vec<bool> = hashes.iter().map(|h| h[0] % 10 == 0).collect();
    let mut rule = String::from("document-level: a document is held out when sha256(text)[0] % 10 == 0");
    if documents.len() >= 2 {
        if !valid_mask.iter().any(|&v| v) {
            let i = (0..hashes.len()).min_by_key(|&i| hashes[i]).unwrap();
            valid_mask[i] = true;
            rule.push_str("; none matched, so the document with the smallest hash is held out");
        } else if valid_mask.iter().all(|&v| v) {
            let i = (0..hashes.len()).max_by_key(|&i| hashes[i]).unwrap();
            valid_mask[i] = false;
            rule.push_str("; all matched, so the document with the largest hash is trained on");
        }
    }
    let mut train = Vec::new();
    let mut valid = Vec::new();
    for (d, v) in documents.into_iter().zip(valid_mask) {
        if v {
            valid.push(d)
        } else {
            train.push(d)
        }
    }
    SplitCorpus { train, valid, rule }
}
