//! Held-out scoring: mean loss and bits per byte over a split's fixed windows. Bits per byte
//! counts the exact UTF-8 bytes the predicted tokens decode to.
//!
//! Each figure comes with its standard error over windows, so two checkpoints (or two runs)
//! can be told apart from the noise of which text was held out. Bits per byte is a ratio of two
//! sums over windows (nats over bytes), so its error is the ratio's by the delta method:
//! √(Σ rᵢ² / (n(n−1))) / b̄ with rᵢ = nᵢ/ln 2 − bpb·bᵢ, which is 0 when every window has the same
//! bits per byte, and needs at least two windows.

use alpha_data::{Split, TokenStream};
use alpha_systems::System;
use anyhow::{bail, Result};

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

/// Score an inference backend (batch `batch`, parameters already in it) on up to
/// `max_windows` held-out windows of `data`.
pub fn score(
    backend: &mut dyn Backend,
    system: &dyn System,
    batch: usize,
    data: &std::path::Path,
    max_windows: usize,
) -> Result<Score> {
    if batch == 0 || max_windows == 0 {
        bail!("scoring needs a batch of at least 1 and at least one window (got batch {batch}, {max_windows} windows)");
    }
    let t = system.context();
    let mut stream = TokenStream::open(data, Split::Valid)?;
    stream.check_vocab(crate::data::token_vocab(system))?;
    let windows = stream.heldout_windows(t + 1, max_windows)?;
    let mut nll = 0.0f64;
    let mut tokens = 0u64;
    let mut bytes = 0u64;
    let mut per_window = Vec::with_capacity(windows.len());
    for chunk in windows.chunks(batch) {
        let mut inputs = Vec::with_capacity(batch * t);
        let mut targets = Vec::with_capacity(batch * t);
        for i in 0..batch {
            // A short last batch repeats its first window; those rows are not counted.
            let w = &chunk[i.min(chunk.len() - 1)];
            inputs.extend_from_slice(&w[..t]);
            targets.extend_from_slice(&w[1..]);
        }
        check_ids(&inputs, system.vocab())?;
        check_ids(&targets, system.vocab())?;
        backend.write_ids("tokens", &inputs)?;
        backend.write_ids("targets", &targets)?;
        backend.run("forward")?;
        let losses = backend.output("losses")?;
        for (i, w) in chunk.iter().enumerate() {
            let w_nll = losses[i * t..(i + 1) * t].iter().map(|&l| l as f64).sum::<f64>();
            let w_bytes = stream.decoded_bytes(&w[1..]);
            nll += w_nll;
            tokens += t as u64;
            bytes += w_bytes;
            per_window.push((w_nll, w_bytes, t as u64));
        }
    }
    let (bpb_se, loss_se) = standard_errors(&per_window);
    Ok(Score {
        bpb_se,
        loss_se,
        loss: nll / tokens as f64,
        bits_per_byte: nll / std::f64::consts::LN_2 / bytes.max(1) as f64,
        tokens,
        bytes,
        windows: windows.len(),
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
