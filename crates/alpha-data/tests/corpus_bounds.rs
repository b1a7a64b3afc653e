//! A raw corpus is bounded before it is read, pseudo file systems and link loops are not
//! walked, and binary files are skipped with a warning naming them.

use std::path::Path;

use alpha_data::corpus::{self, CorpusLimits, LimitPurpose};
use alpha_data::DataError;

fn small(max_files: usize, max_bytes: u64) -> CorpusLimits {
    CorpusLimits { max_bytes, max_files, purpose: LimitPurpose::Training }
}

fn write_texts(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("{i}.txt")), format!("text number {i}\n").repeat(10)).unwrap();
    }
}

#[test]
fn too_many_files_or_bytes_are_refused_with_the_limit_and_the_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    write_texts(tmp.path(), 5);
    corpus::load_with(tmp.path(), &small(5, 1 << 20)).unwrap();
    let err = corpus::load_with(tmp.path(), &small(4, 1 << 20)).unwrap_err();
    let msg = format!("{err:#}");
    assert!(matches!(err.downcast_ref::<DataError>(), Some(DataError::CorpusTooLarge { .. })), "{msg}");
    assert!(msg.contains("more than 4 files") && msg.contains("alpha data prepare"), "{msg}");
    let err = corpus::load_with(tmp.path(), &small(100, 300)).unwrap_err();
    assert!(format!("{err:#}").contains("bytes"), "{err:#}");
    // A single file over the byte limit, and the fingerprint keeps to the same limits.
    let one = tmp.path().join("0.txt");
    assert!(corpus::load_with(&one, &small(1, 10)).is_err());
    assert!(corpus::fingerprint(tmp.path(), &small(4, 1 << 20)).is_err());
}

#[test]
fn pseudo_file_systems_and_link_loops_are_not_walked() {
    let err = corpus::load_with(Path::new("/proc/self"), &CorpusLimits::TRAINING).unwrap_err();
    assert!(format!("{err:#}").contains("pseudo file system"), "{err:#}");
    let tmp = tempfile::tempdir().unwrap();
    write_texts(tmp.path(), 2);
    std::os::unix::fs::symlink(tmp.path(), tmp.path().join("loop")).unwrap();
    std::os::unix::fs::symlink("/proc", tmp.path().join("proc")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("gone"), tmp.path().join("dangling")).unwrap();
    std::os::unix::fs::symlink("/proc/self/status", tmp.path().join("status.txt")).unwrap();
    let c = corpus::load_with(tmp.path(), &CorpusLimits::TRAINING).unwrap();
    assert_eq!(c.documents.len(), 2);
    assert!(c.warnings.iter().any(|w| w.contains("loop") && w.contains("already read")), "{:?}", c.warnings);
    assert!(c.warnings.iter().any(|w| w.contains("pseudo file system")), "{:?}", c.warnings);
    assert!(c.warnings.iter().any(|w| w.contains("dangling")), "{:?}", c.warnings);
    assert!(c.warnings.iter().any(|w| w.contains("status.txt") && w.contains("links into /proc")), "{:?}", c.warnings);
}

#[test]
fn binary_files_are_skipped_with_a_warning_and_an_all_binary_corpus_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mixed");
    write_texts(&dir, 1);
    std::fs::write(dir.join("image.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let mut random = Vec::new();
    let mut x = 12345u32;
    for _ in 0..4000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        random.push((x >> 16) as u8 | 0x80);
    }
    std::fs::write(dir.join("noise.dat"), &random).unwrap();
    // Latin-1 prose: a few invalid bytes, kept (replaced) with a warning.
    let mut latin1 = b"a caf".to_vec();
    latin1.push(0xe9);
    latin1.extend_from_slice(&b" and a long enough line of plain English text around it".repeat(3));
    std::fs::write(dir.join("latin1.txt"), &latin1).unwrap();
    let c = corpus::load(&dir).unwrap();
    let names: Vec<&str> = c.documents.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["0.txt", "latin1.txt"]);
    let has = |needle: &str, what: &str| c.warnings.iter().any(|w| w.contains(needle) && w.contains(what));
    assert!(has("image.png", "looks binary"), "{:?}", c.warnings);
    assert!(has("noise.dat", "looks binary"), "{:?}", c.warnings);
    assert!(has("latin1.txt", "invalid UTF-8 replaced"), "{:?}", c.warnings);
    assert!(c.notes.iter().any(|n| n.contains("image.png")), "recorded in the manifest's notes");

    let binary = tmp.path().join("binary");
    std::fs::create_dir(&binary).unwrap();
    std::fs::write(binary.join("a.bin"), b"\0\x01\x02").unwrap();
    std::fs::write(binary.join("b.bin"), b"\x7fELF\0\0").unwrap();
    let err = corpus::load(&binary).unwrap_err();
    let msg = format!("{err:#}");
    assert!(matches!(err.downcast_ref::<DataError>(), Some(DataError::NoText { binary_files: 2, .. })), "{msg}");
    assert!(msg.contains("a.bin") && msg.contains("look binary"), "{msg}");
    let err = corpus::load(&binary.join("b.bin")).unwrap_err();
    assert!(format!("{err:#}").contains("b.bin"), "{err:#}");
}

#[test]
fn the_fingerprint_follows_content_and_names() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write_texts(&a, 3);
    write_texts(&b, 3);
    let fp = |p: &Path| corpus::fingerprint(p, &CorpusLimits::TRAINING).unwrap();
    assert_eq!(fp(&a), fp(&b), "same names and bytes, same fingerprint");
    std::fs::write(b.join("1.txt"), "text number 1\n".repeat(10).replace('1', "7")).unwrap();
    assert_ne!(fp(&a), fp(&b), "a changed byte");
    std::fs::rename(a.join("2.txt"), a.join("9.txt")).unwrap();
    let renamed = fp(&a);
    std::fs::rename(a.join("9.txt"), a.join("2.txt")).unwrap();
    assert_ne!(renamed, fp(&a), "a renamed file");
    // Hidden files are not read, so they do not count.
    let before = fp(&a);
    std::fs::write(a.join(".hidden"), "x").unwrap();
    assert_eq!(before, fp(&a));
}
