//! Scoring a run on another preparation's held-out bytes (`--heldout-bytes`): the windows a
//! byte model is scored on, encoded in the scored model's tokens, count exactly those bytes,
//! and score as the model's own windows do to within what the shorter context and the first
//! byte's context allow.

mod common;

use std::path::Path;

use alpha_data::{Split, TokenStream};
use alpha_learn::inference_program;
use alpha_run::checkpoint;
use alpha_run::score::{score, ByteWindows, Heldout, Score};
use alpha_run::session::restore;
use alpha_run::{train, CpuBackend, TrainOptions};

/// `system` trained `steps` updates on `data`, then scored on `windows` of its own held-out
/// windows and on `windows` byte windows of `on`.
fn own_and_bytes(
    system: &str,
    data: &Path,
    on: &ByteWindows,
    run: &Path,
    steps: u64,
    windows: usize,
) -> (Score, Score) {
    let r = train(&TrainOptions { batch: Some(16), ..common::options(system, 16, 5, data, run, steps) }).unwrap();
    let system = alpha_systems::find(system).unwrap();
    let program = inference_program(system.model(8).unwrap()).unwrap();
    let mut backend = CpuBackend::compile(&program).unwrap();
    restore(&checkpoint::load(&r.checkpoint).unwrap(), system.as_ref(), &mut backend, "under test").unwrap();
    let own = score(&mut backend, system.as_ref(), 8, data, windows).unwrap();
    let bytes = Heldout::read(system.as_ref(), data, Some(on), windows)
        .unwrap()
        .score(&mut backend, system.as_ref(), 8)
        .unwrap();
    (own, bytes)
}

/// The document bytes the byte preparation's `windows` held-out windows of `window` predict,
/// counted here from the windows themselves.
fn window_bytes(on: &ByteWindows, windows: usize) -> u64 {
    let mut stream = TokenStream::open(&on.dir, Split::Valid).unwrap();
    let ws = stream.heldout_windows(on.window + 1, windows).unwrap();
    ws.iter().map(|w| w[1..].iter().filter(|&&b| b != stream.eot_id()).count() as u64).sum()
}

#[test]
fn a_byte_model_scored_on_its_own_byte_windows_counts_the_same_bytes_and_nearly_the_same_bits() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::bytes_stream(tmp.path()) else { return };
    // Bob's context is 256 bytes: windows of 256 bytes are the ones its own scoring reads.
    let on = ByteWindows { dir: data.clone(), window: 256 };
    let (own, bytes) = own_and_bytes("bob", &data, &on, &tmp.path().join("run"), 150, 32);
    eprintln!("own {:.4} ± {:.4}, as bytes {:.4}", own.bits_per_byte, own.bpb_se.unwrap(), bytes.bits_per_byte);
    assert_eq!(bytes.bytes, own.bytes, "the same windows predict the same bytes");
    assert_eq!(bytes.bytes, window_bytes(&on, 32));
    assert_eq!(bytes.windows, 32);
    // Only each window's first byte differs: predicted after an end-of-text instead of after the
    // window's first byte, one position of 256.
    assert!(bytes.bits_per_byte < 5.0, "Bob learned: {}", own.bits_per_byte);
    let gap = (bytes.bits_per_byte - own.bits_per_byte).abs();
    assert!(gap < 0.02 * own.bits_per_byte, "own {} against bytes {}", own.bits_per_byte, bytes.bits_per_byte);
}

#[test]
fn a_bpe_model_scored_on_byte_windows_counts_every_byte_once_and_scores_as_on_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bpe) = common::bpe_stream(tmp.path()) else { return };
    let bytes_dir = common::bytes_stream(tmp.path()).unwrap();
    // 256 bytes are about 80 of the miniature's BPE-4096 tokens, within its context of 128.
    let on = ByteWindows { dir: bytes_dir, window: 256 };
    let (own, bytes) = own_and_bytes("mini", &bpe, &on, &tmp.path().join("run"), 60, 32);
    eprintln!(
        "own {:.4} ± {:.4} ({} tokens), on bytes {:.4} ± {:.4} ({} tokens, {} bytes)",
        own.bits_per_byte,
        own.bpb_se.unwrap(),
        own.tokens,
        bytes.bits_per_byte,
        bytes.bpb_se.unwrap(),
        bytes.tokens,
        bytes.bytes
    );
    assert_eq!(bytes.bytes, window_bytes(&on, 32), "each window's bytes counted once, exactly");
    // Tokens of several bytes each: the windows are far fewer tokens than bytes.
    assert!(bytes.tokens * 2 < bytes.bytes, "{} tokens for {} bytes", bytes.tokens, bytes.bytes);
    // The same text read through the same model: close, though the windows differ and are
    // shorter (a token misplaced by one would score near the untrained 12 bits a token).
    assert!(bytes.bits_per_byte < 6.0, "the miniature learned: {}", bytes.bits_per_byte);
    let gap = (bytes.bits_per_byte - own.bits_per_byte).abs();
    assert!(gap < 0.1 * own.bits_per_byte, "own {} against bytes {}", own.bits_per_byte, bytes.bits_per_byte);
}

#[test]
fn byte_windows_that_do_not_fit_or_are_not_bytes_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bpe) = common::bpe_stream(tmp.path()) else { return };
    let bytes_dir = common::bytes_stream(tmp.path()).unwrap();
    let system = alpha_systems::find("mini").unwrap();
    // 2,048 bytes of Shakespeare are several hundred tokens, past the miniature's 128.
    let long = ByteWindows { dir: bytes_dir, window: 2048 };
    let e = Heldout::read(system.as_ref(), &bpe, Some(&long), 4).err().unwrap().to_string();
    assert!(e.contains("more than its context of 128"), "{e}");
    let not_bytes = ByteWindows { dir: bpe.clone(), window: 64 };
    let e = Heldout::read(system.as_ref(), &bpe, Some(&not_bytes), 4).err().unwrap().to_string();
    assert!(e.contains("not bytes") && e.contains("--tokenizer bytes"), "{e}");
    // A training run with them stops before it starts, naming the problem.
    let run = tmp.path().join("run");
    let opts =
        TrainOptions { heldout_windows: 4, heldout_bytes: Some(long), ..common::options("mini", 4, 1, &bpe, &run, 2) };
    let e = format!("{:#}", train(&opts).unwrap_err());
    assert!(e.contains("more than its context"), "{e}");
    assert!(!run.join("checkpoints").exists(), "nothing written");
}
