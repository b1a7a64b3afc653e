//! Held-out scoring: mean loss and bits per byte over a split's fixed windows. Bits per byte
//! counts the exact UTF-8 bytes the predicted tokens decode to.

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
            nll += losses[i * t..(i + 1) * t].iter().map(|&l| l as f64).sum::<f64>();
            tokens += t as u64;
            bytes += stream.decoded_bytes(&w[1..]);
        }
    }
    Ok(Score {
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
