//! Held-out scoring: mean loss and bits per byte over a split's fixed windows. Bits per byte
//! counts the exact UTF-8 bytes the predicted tokens decode to.
//!
//! Each figure comes with its standard error over windows, so two checkpoints (or two runs)
//! can be told apart from the noise of which text was held out. Bits per byte is a ratio of two
//! sums over windows (nats over bytes), so its error is the ratio's by the delta method:
//! √(Σ rᵢ² / (n(n−1))) / b̄ with rᵢ = nᵢ/ln 2 − bpb·bᵢ, which is 0 when every window has the same
//! bits per byte, and needs at least two windows.

use std::path::{Path, PathBuf};

use alpha_data::{Split, TokenStream};
use alpha_systems::System;
use anyhow::{bail, ensure, Context, Result};

use crate::backend::Backend;
use crate::session::check_ids;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// Mean cross-entropy a token, nats.
    pub loss: f64,
    pub bits_per_byte: f64,
    pub tokens: u64,
    pub bytes: u64,
    pub windows: usize,
    /// Standard errors over windows of `bits_per_byte` and of `loss` (None with one window).
    pub bpb_se: Option<f64>,
    pub loss_se: Option<f64>,
}

/// The standard errors over windows of bits per byte and of the mean loss a token, from each
/// window's summed nats, bytes and tokens (see the module's note).
pub fn standard_errors(per_window: &[(f64, u64, u64)]) -> (Option<f64>, Option<f64>) {
    let n = per_window.len();
    if n < 2 {
        return (None, None);
    }
    let nats: f64 = per_window.iter().map(|w| w.0).sum();
    let bytes: f64 = per_window.iter().map(|w| w.1 as f64).sum();
    let tokens: f64 = per_window.iter().map(|w| w.2 as f64).sum();
    let ratio_se = |total: f64, unit: &dyn Fn(&(f64, u64, u64)) -> f64| -> Option<f64> {
        let (mean_unit, value) = (total / n as f64, nats / total);
        let ss: f64 = per_window.iter().map(|w| (w.0 - value * unit(w)).powi(2)).sum();
        (total > 0.0).then(|| (ss / (n * (n - 1)) as f64).sqrt() / mean_unit)
    };
    let bpb = ratio_se(bytes, &|w| w.1 as f64).map(|se| se / std::f64::consts::LN_2);
    let loss = ratio_se(tokens, &|w| w.2 as f64);
    (bpb, loss)
}

/// Another preparation's held-out bytes to score a run on: `windows` windows of `window` bytes
/// from the held-out split of `dir` (`alpha data prepare --tokenizer bytes`), chosen as that
/// preparation's own scoring chooses them for a byte model of context `window`. Models with
/// different tokenizers are then scored on the same bytes: each window's predicted bytes are
/// encoded in the scored model's tokenizer after an end-of-text (the model predicts every one
/// of them; a byte model reading the window itself has its first byte as context instead).
#[derive(Debug, Clone, PartialEq)]
pub struct ByteWindows {
    pub dir: PathBuf,
    pub window: usize,
}

impl ByteWindows {
    /// Says what is scored, for a run's records: "64 windows of 2,048 bytes from DIR".
    fn describe(&self, windows: usize) -> String {
        format!("{windows} windows of {} bytes from {}", alpha_plan::group(self.window), self.dir.display())
    }
}

/// One held-out sequence: `ids[..n]` in, `ids[1..=n]` predicted (n = `ids.len() - 1`, at most
/// the context), standing for `bytes` document bytes.
struct Sequence {
    ids: Vec<u32>,
    bytes: u64,
}

/// A run's held-out sequences, read (and for byte windows, encoded) once and scored at every
/// checkpoint.
pub struct Heldout {
    sequences: Vec<Sequence>,
    /// The model's end-of-text, which pads a sequence shorter than the context.
    pad: u32,
    /// What is scored, when not the data's own held-out windows (for the run's records).
    described: Option<String>,
}

impl Heldout {
    /// Up to `max_windows` held-out windows of `data`, the model's own preparation; or, with
    /// `on`, of another preparation's held-out bytes (see [`ByteWindows`]). Windows that cannot
    /// be scored are refused here, by name.
    pub fn read(system: &dyn System, data: &Path, on: Option<&ByteWindows>, max_windows: usize) -> Result<Heldout> {
        if max_windows == 0 {
            bail!("scoring needs at least one window");
        }
        match on {
            Some(on) => Heldout::bytes(system, data, on, max_windows),
            None => Heldout::own(system, data, max_windows),
        }
    }

    fn own(system: &dyn System, data: &Path, max_windows: usize) -> Result<Heldout> {
        let mut stream = TokenStream::open(data, Split::Valid)?;
        stream.check_vocab(crate::data::token_vocab(system))?;
        let sequences = stream
            .heldout_windows(system.context() + 1, max_windows)?
            .into_iter()
            .map(|ids| Sequence { bytes: stream.decoded_bytes(&ids[1..]), ids })
            .collect();
        Ok(Heldout { sequences, pad: stream.eot_id(), described: None })
    }

    fn bytes(system: &dyn System, data: &Path, on: &ByteWindows, max_windows: usize) -> Result<Heldout> {
        let own = TokenStream::open(data, Split::Valid)?;
        own.check_vocab(crate::data::token_vocab(system))?;
        let tokenizer = own.tokenizer();
        let mut bytes = TokenStream::open(&on.dir, Split::Valid)
            .with_context(|| format!("opening the held-out bytes {}", on.dir.display()))?;
        if bytes.tokenizer().kind() != "bytes" {
            bail!(
                "{} holds {} tokens, not bytes: held-out bytes to score on are prepared with `alpha data prepare --tokenizer bytes`",
                on.dir.display(),
                bytes.tokenizer().kind()
            );
        }
        let byte_eot = bytes.eot_id();
        let t = system.context();
        let windows = bytes.heldout_windows(on.window + 1, max_windows)?;
        let mut sequences = Vec::with_capacity(windows.len());
        for (i, w) in windows.iter().enumerate() {
            let predicted = &w[1..];
            let mut ids = vec![tokenizer.eot_id()];
            for (j, part) in predicted.split(|&b| b == byte_eot).enumerate() {
                if j > 0 {
                    ids.push(tokenizer.eot_id());
                }
                let part: Vec<u8> = part.iter().map(|&b| b as u8).collect();
                tokenizer.encode_bytes_into(&part, &mut ids);
            }
            if ids.len() - 1 > t {
                bail!(
                    "held-out window {i} of {} ({} bytes) is {} tokens in {}'s tokenizer, more than its context of {t}: score on shorter windows",
                    on.dir.display(),
                    on.window,
                    ids.len() - 1,
                    system.name()
                );
            }
            let window_bytes = bytes.decoded_bytes(predicted);
            ensure!(
                tokenizer.decoded_bytes(&ids[1..]) == window_bytes,
                "held-out window {i} of {}: its {window_bytes} bytes did not come back from {}'s tokens",
                on.dir.display(),
                system.name()
            );
            sequences.push(Sequence { ids, bytes: window_bytes });
        }
        Ok(Heldout { described: Some(on.describe(sequences.len())), sequences, pad: tokenizer.eot_id() })
    }

    /// What is scored when it is not the data's own held-out windows: "64 windows of 2,048
    /// bytes from DIR".
    pub fn described(&self) -> Option<&str> {
        self.described.as_deref()
    }

    /// Score an inference backend (batch `batch`, parameters already in it) on these sequences.
    pub fn score(&self, backend: &mut dyn Backend, system: &dyn System, batch: usize) -> Result<Score> {
        check_sizes(batch, self.sequences.len())?;
        score_sequences(backend, system, batch, &self.sequences, self.pad)
    }
}

/// Score an inference backend (batch `batch`, parameters already in it) on up to
/// `max_windows` held-out windows of `data`.
pub fn score(
    backend: &mut dyn Backend,
    system: &dyn System,
    batch: usize,
    data: &Path,
    max_windows: usize,
) -> Result<Score> {
    check_sizes(batch, max_windows)?;
    Heldout::own(system, data, max_windows)?.score(backend, system, batch)
}

fn check_sizes(batch: usize, max_windows: usize) -> Result<()> {
    if batch == 0 || max_windows == 0 {
        bail!("scoring needs a batch of at least 1 and at least one window (got batch {batch}, {max_windows} windows)");
    }
    Ok(())
}

/// Runs the sequences through the forward program `batch` at a time, each padded with `pad`
/// to the context (a causal model's losses before the padding do not see it), and sums each
/// one's losses over its predicted positions.
fn score_sequences(
    backend: &mut dyn Backend,
    system: &dyn System,
    batch: usize,
    sequences: &[Sequence],
    pad: u32,
) -> Result<Score> {
    let t = system.context();
    let mut nll = 0.0f64;
    let mut tokens = 0u64;
    let mut bytes = 0u64;
    let mut per_window = Vec::with_capacity(sequences.len());
    for chunk in sequences.chunks(batch) {
        let mut inputs = Vec::with_capacity(batch * t);
        let mut targets = Vec::with_capacity(batch * t);
        for i in 0..batch {
            // A short last batch repeats its first window; those rows are not counted.
            let w = &chunk[i.min(chunk.len() - 1)].ids;
            let n = w.len() - 1;
            inputs.extend_from_slice(&w[..n]);
            targets.extend_from_slice(&w[1..]);
            inputs.resize(inputs.len() + t - n, pad);
            targets.resize(targets.len() + t - n, pad);
        }
        check_ids(&inputs, system.vocab())?;
        check_ids(&targets, system.vocab())?;
        backend.write_ids("tokens", &inputs)?;
        backend.write_ids("targets", &targets)?;
        backend.run("forward")?;
        let losses = backend.output("losses")?;
        for (i, w) in chunk.iter().enumerate() {
            let n = w.ids.len() - 1;
            let w_nll = losses[i * t..i * t + n].iter().map(|&l| l as f64).sum::<f64>();
            nll += w_nll;
            tokens += n as u64;
            bytes += w.bytes;
            per_window.push((w_nll, w.bytes, n as u64));
        }
    }
    let (bpb_se, loss_se) = standard_errors(&per_window);
    Ok(Score {
        bpb_se,
        loss_se,
        loss: nll / tokens.max(1) as f64,
        bits_per_byte: nll / std::f64::consts::LN_2 / bytes.max(1) as f64,
        tokens,
        bytes,
        windows: sequences.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuBackend;

    #[test]
    fn the_standard_error_is_zero_for_equal_windows_and_shrinks_with_more() {
        let ln2 = std::f64::consts::LN_2;
        // Every window at 2 bits a byte: no spread.
        let same = vec![(2.0 * ln2 * 100.0, 100, 25); 8];
        assert_eq!(standard_errors(&same).0, Some(0.0));
        // Windows at 1 and 3 bits a byte, alternately: the mean's error is the spread's √n.
        let spread = |n: usize| -> f64 {
            let w: Vec<(f64, u64, u64)> =
                (0..n).map(|i| (if i % 2 == 0 { 1.0 } else { 3.0 } * ln2 * 100.0, 100, 25)).collect();
            standard_errors(&w).0.unwrap()
        };
        let (s8, s32) = (spread(8), spread(32));
        assert!((s8 - (8.0f64 / 7.0).sqrt() / 8f64.sqrt()).abs() < 1e-12, "{s8}");
        assert!(s32 < s8 / 1.9, "{s32} against {s8}");
        assert_eq!(standard_errors(&same[..1]), (None, None));
    }

    #[test]
    fn a_zero_batch_or_window_count_is_an_error_not_a_panic() {
        let bob = alpha_systems::find("bob").unwrap();
        let program = alpha_learn::inference_program(bob.model(1).unwrap()).unwrap();
        let mut backend = CpuBackend::compile(&program).unwrap();
        let data = std::path::Path::new("no-data-needed");
        for (batch, windows) in [(0, 4), (1, 0)] {
            let e = score(&mut backend, bob.as_ref(), batch, data, windows).unwrap_err();
            assert!(e.to_string().contains("at least"), "{e}");
        }
    }
}
