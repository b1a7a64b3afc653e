//! Prediction: continue a prompt token by token, each from a full forward pass over the last
//! `context` tokens, sampling at a temperature from a seeded generator (0 = most likely).

use alpha_systems::System;
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::backend::Backend;

pub struct Prediction {
    pub tokens: Vec<u32>,
    /// The most likely next tokens after the prompt, with probabilities.
    pub top_next: Vec<(u32, f64)>,
}

/// `backend` is an inference program of batch 1 with the parameters loaded.
pub fn continue_prompt(
    backend: &mut dyn Backend,
    system: &dyn System,
    prompt: &[u32],
    n: usize,
    temperature: f64,
    seed: u64,
) -> Result<Prediction> {
    continue_prompt_streaming(backend, system, prompt, n, temperature, seed, &mut |_| Ok(()))
}

/// [`continue_prompt`], handing each token to `on_token` as soon as it is chosen (a long
/// prediction can show its text as it goes); an error from `on_token` ends the prediction.
pub fn continue_prompt_streaming(
    backend: &mut dyn Backend,
    system: &dyn System,
    prompt: &[u32],
    n: usize,
    temperature: f64,
    seed: u64,
    on_token: &mut dyn FnMut(u32) -> Result<()>,
) -> Result<Prediction> {
    if prompt.is_empty() {
        bail!("the prompt is empty: give some text to continue");
    }
    // A NaN temperature would make every weight NaN and always pick the last token.
    if !temperature.is_finite() || temperature < 0.0 {
        bail!("the temperature must be a finite number, 0 or more (got {temperature})");
    }
    let (t, v) = (system.context(), system.vocab());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut seq = prompt.to_vec();
    let mut out = vec![];
    let mut top_next = vec![];
    for i in 0..n.max(1) {
        let start = seq.len().saturating_sub(t);
        let window = &seq[start..];
        let mut ids = window.to_vec();
        ids.resize(t, 0);
        backend.write_ids("tokens", &ids)?;
        backend.write_ids("targets", &vec![0; t])?;
        backend.run("forward")?;
        let logits = backend.output("logits")?;
        // Rows may be wider than the vocabulary (an embedding padded for the GPU's tiles): the
        // first `v` of each are the tokens' scores.
        let width = logits.len() / t;
        let at = (window.len() - 1) * width;
        let row = &logits[at..at + v];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let probs: Vec<f64> = row.iter().map(|&z| (z as f64 - max).exp()).collect();
        let z: f64 = probs.iter().sum();
        if i == 0 {
            let mut idx: Vec<usize> = (0..v).collect();
            idx.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
            top_next = idx.iter().take(5).map(|&j| (j as u32, probs[j] / z)).collect();
        }
        if n == 0 {
            break;
        }
        let next = if temperature <= 0.0 {
            (0..v).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a))).unwrap() as u32
        } else {
            let w: Vec<f64> = row.iter().map(|&zv| ((zv as f64 - max) / temperature).exp()).collect();
            let total: f64 = w.iter().sum();
            let mut r = rng.random::<f64>() * total;
            let mut pick = v - 1;
            for (j, &wj) in w.iter().enumerate() {
                if r < wj {
                    pick = j;
                    break;
                }
                r -= wj;
            }
            pick as u32
        };
        on_token(next)?;
        out.push(next);
        seq.push(next);
    }
    Ok(Prediction { tokens: out, top_next })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuBackend;

    #[test]
    fn a_temperature_that_is_not_a_finite_non_negative_number_is_refused() {
        let bob = alpha_systems::find("bob").unwrap();
        let program = alpha_learn::inference_program(bob.model(1).unwrap()).unwrap();
        let mut backend = CpuBackend::compile(&program).unwrap();
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let e = continue_prompt(&mut backend, bob.as_ref(), &[65], 3, bad, 1).err().expect("refused");
            assert!(e.to_string().contains("temperature"), "{e}");
        }
        let mut seen = vec![];
        let p = continue_prompt_streaming(&mut backend, bob.as_ref(), &[65], 3, 0.0, 1, &mut |t| {
            seen.push(t);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, p.tokens, "each token is handed over as it is chosen");
        assert_eq!(p.tokens.len(), 3);
    }
}
