//! The data cache is keyed by content: a different file of the same name, or an edited or
//! emptied one, is prepared afresh; a damaged cache folder is prepared again; a preparation
//! killed midway leaves nothing that looks like a cache.

use std::path::{Path, PathBuf};

use alpha_data::cache::{self, prepared};
use alpha_data::prepare::TokenizerSpec;
use alpha_data::{DataError, Manifest, Split, TokenStream};

fn text(seed: usize, lines: usize) -> String {
    (0..lines).map(|i| format!("{seed}: line {i} of a text, said the writer {}\n", (i * seed) % 11)).collect()
}

fn cache_dirs(root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

#[test]
fn a_different_file_of_the_same_name_is_prepared_afresh() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data-cache");
    let (a, b) = (tmp.path().join("a/corpus.txt"), tmp.path().join("b/corpus.txt"));
    for (p, seed) in [(&a, 1), (&b, 2)] {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text(seed, 2000 + seed * 500)).unwrap();
    }
    let da = prepared(&root, &a, &TokenizerSpec::Bytes).unwrap();
    let db = prepared(&root, &b, &TokenizerSpec::Bytes).unwrap();
    assert_ne!(da, db);
    for (dir, src) in [(&da, &a), (&db, &b)] {
        let m = Manifest::load(dir).unwrap();
        assert_eq!(m.totals.bytes, std::fs::metadata(src).unwrap().len(), "{} holds {}", dir.display(), src.display());
    }
    // Asking again finds each one, without preparing anything new.
    assert_eq!(prepared(&root, &a, &TokenizerSpec::Bytes).unwrap(), da);
    assert_eq!(cache_dirs(&root), {
        let mut v = vec![da.clone(), db.clone()];
        v.sort();
        v
    });
    // The same file edited is another entry.
    std::fs::write(&a, text(3, 2200)).unwrap();
    let edited = prepared(&root, &a, &TokenizerSpec::Bytes).unwrap();
    assert_ne!(edited, da);
    assert_eq!(Manifest::load(&edited).unwrap().totals.bytes, std::fs::metadata(&a).unwrap().len());
}

#[test]
fn an_emptied_corpus_is_refused_instead_of_training_on_its_old_content() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data-cache");
    let c = tmp.path().join("corpus.txt");
    std::fs::write(&c, text(1, 2000)).unwrap();
    prepared(&root, &c, &TokenizerSpec::Bytes).unwrap();
    std::fs::write(&c, "").unwrap();
    let err = prepared(&root, &c, &TokenizerSpec::Bytes).unwrap_err();
    assert!(err.chain().any(|e| matches!(e.downcast_ref::<DataError>(), Some(DataError::EmptyCorpus(_)))), "{err:#}");
    // Nothing half-made is left beside the one good entry.
    assert_eq!(cache_dirs(&root).len(), 1);
}

/// Something done to a cache folder.
type Damage = dyn Fn(&Path);

#[test]
fn a_damaged_cache_folder_is_prepared_again() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data-cache");
    let c = tmp.path().join("corpus.txt");
    std::fs::write(&c, text(5, 3000)).unwrap();
    let spec = TokenizerSpec::Bytes;
    let dir = prepared(&root, &c, &spec).unwrap();
    let entry = cache::entry(&root, &c, &spec).unwrap();
    let good = std::fs::read(dir.join("train-0000.tok")).unwrap();
    let damages: [(&str, &Damage); 4] = [
        ("an empty manifest, as a kill mid-write left it", &|d| std::fs::write(d.join("manifest.json"), "").unwrap()),
        ("no manifest", &|d| std::fs::remove_file(d.join("manifest.json")).unwrap()),
        ("a flipped byte in a shard", &|d| {
            let p = d.join("train-0000.tok");
            let mut b = std::fs::read(&p).unwrap();
            b[100] ^= 0x20;
            std::fs::write(&p, b).unwrap();
        }),
        ("a missing shard", &|d| std::fs::remove_file(d.join("valid-0000.tok")).unwrap()),
    ];
    for (what, damage) in damages {
        damage(&dir);
        assert!(cache::check(&entry, &spec).is_err(), "{what}: the check must notice");
        assert_eq!(prepared(&root, &c, &spec).unwrap(), dir, "{what}");
        cache::check(&entry, &spec).unwrap();
        assert_eq!(std::fs::read(dir.join("train-0000.tok")).unwrap(), good, "{what}");
        TokenStream::open(&dir, Split::Train).unwrap();
        assert_eq!(cache_dirs(&root), std::slice::from_ref(&dir), "{what}: no staging or trash left");
    }
}

#[test]
fn a_preparation_abandoned_by_a_dead_process_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data-cache");
    // A staging folder whose process (an id no process has) is gone, and one of a live
    // process (this test's parent).
    let dead = root.join(".staging-corpus-bytes-0123456789abcdef-2147483000");
    std::fs::create_dir_all(&dead).unwrap();
    std::fs::write(dead.join("train-0000.tok"), "half").unwrap();
    let parent = std::os::unix::process::parent_id();
    let live = root.join(format!(".staging-other-bytes-0123456789abcdef-{parent}"));
    std::fs::create_dir_all(&live).unwrap();
    let c = tmp.path().join("corpus.txt");
    std::fs::write(&c, text(7, 2000)).unwrap();
    let dir = prepared(&root, &c, &TokenizerSpec::Bytes).unwrap();
    assert!(!dead.exists(), "the dead process's staging folder is removed");
    assert!(live.exists(), "a live process's staging folder is left alone");
    assert_eq!(cache_dirs(&root), {
        let mut v = vec![dir, live];
        v.sort();
        v
    });
}
