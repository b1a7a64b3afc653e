//! Shared set-up for the run-policy tests: real prose from ../shared/data, prepared as bytes or
//! with a BPE trained on it.

use std::path::{Path, PathBuf};

use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};
use alpha_run::{Device, TrainOptions};

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
#[allow(dead_code)]
pub fn bytes_stream(dir: &Path) -> Option<PathBuf> {
    stream(dir, TokenizerSpec::Bytes, "tiny-bytes")
}

/// Prepare tiny-shakespeare with `spec` into `dir/name`.
pub fn stream(dir: &Path, spec: TokenizerSpec, name: &str) -> Option<PathBuf> {
    let src = tinyshakespeare()?;
    let out = dir.join(name);
    let mut opts = PrepareOptions::new(src, spec, &out);
    opts.progress = false;
    prepare(&opts).expect("preparing tiny-shakespeare");
    Some(out)
}

/// Prepare tiny-shakespeare with a BPE of 4,096 tokens trained on it into `dir` (the
/// miniature's vocabulary).
#[allow(dead_code)]
pub fn bpe_stream(dir: &Path) -> Option<PathBuf> {
    stream(dir, TokenizerSpec::TrainBpe { vocab_size: 4096, bos: false }, "tiny-bpe4096")
}

/// A quiet CPU run of `system` for `steps` updates at `batch` sequences from seed `seed`, no
/// held-out scoring; tests change the fields they are about.
#[allow(dead_code)]
pub fn options(system: &str, batch: usize, seed: u64, data: &Path, run: &Path, steps: u64) -> TrainOptions {
    TrainOptions {
        system: system.into(),
        device: Device::Cpu,
        steps,
        batch: Some(batch),
        data: data.to_path_buf(),
        run_dir: run.to_path_buf(),
        resume: None,
        checkpoint_every: None,
        seed,
        schedule_steps: None,
        lr: None,
        accumulation: 1,
        profile: false,
        save_initial: false,
        heldout_windows: 0,
        heldout_bytes: None,
        progress: false,
        budget: None,
        warmdown_updates: None,
        checkpoint_sample_tokens: 0,
        gates: None,
        health_every: 0,
    }
}
