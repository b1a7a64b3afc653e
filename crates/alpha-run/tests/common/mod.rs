//! Shared set-up for the run-policy tests: real prose from ../shared/data, prepared as bytes.

use std::path::{Path, PathBuf};

use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};

/// tiny-shakespeare, beside the repository as CI lays it out.
pub fn tinyshakespeare() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/tinyshakespeare.txt");
    if p.is_file() {
        Some(p)
    } else {
        eprintln!("skipped: {} is missing", p.display());
        None
    }
}

/// Prepare tiny-shakespeare as a byte stream into `dir`.
pub fn bytes_stream(dir: &Path) -> Option<PathBuf> {
    let src = tinyshakespeare()?;
    let out = dir.join("tiny-bytes");
    let mut opts = PrepareOptions::new(src, TokenizerSpec::Bytes, &out);
    opts.progress = false;
    prepare(&opts).expect("preparing tiny-shakespeare");
    Some(out)
}
