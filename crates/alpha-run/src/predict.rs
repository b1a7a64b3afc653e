//! Prediction: continue a prompt token by token, sampling at a temperature from a seeded
//! generator (0 = most likely). Two ways to get the next token's scores ([`Generation`]): a
//! system with a decode program ([`alpha_systems::decode`]) runs one position a token, its keys
//! and values (or its recurrent state) kept in the program's caches, so a chat's turns continue
//! one sequence without entering it again; any other runs its inference program over the last
//! `context` tokens for every token.

use alpha_systems::decode::{self, DecodeStep, Decoder};
use alpha_systems::System;
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
pub use rand_chacha::ChaCha8Rng;

use crate::backend::Backend;

pub struct Prediction {
    pub tokens: Vec<u32>,
    /// The most likely next tokens after the prompt, with probabilities.
    pub top_next: Vec<(u32, f64)>,
    /// Wall seconds the prompt took to enter (with the decode's one-time weight rounding), and
    /// the tokens after it to generate: a token's cost, apart from loading and compiling.
    pub prompt_seconds: f64,
    pub generate_seconds: f64,
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
    predict(&mut Generation::windowed(backend, system), prompt, n, temperature, seed, &mut |_| Ok(()))
}

/// Continues `prompt` on `g` (a fresh [`Generation`]): `n` tokens at `temperature` from `seed`,
/// each handed to `on_token` as it is chosen, and the most likely tokens after the prompt.
pub fn predict(
    g: &mut Generation,
    prompt: &[u32],
    n: usize,
    temperature: f64,
    seed: u64,
    on_token: &mut dyn FnMut(u32) -> Result<()>,
) -> Result<Prediction> {
    check_request(prompt, temperature)?;
    let start = std::time::Instant::now();
    g.extend(prompt)?;
    let top_next = most_likely(g.scores()?);
    let prompt_seconds = start.elapsed().as_secs_f64();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let start = std::time::Instant::now();
    let tokens = g.generate(n, temperature, &mut rng, on_token)?;
    Ok(Prediction { tokens, top_next, prompt_seconds, generate_seconds: start.elapsed().as_secs_f64() })
}

/// The seeded generator a prediction samples from.
pub fn sampler(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// One sequence being continued, and how its next token's scores are computed.
pub struct Generation<'a> {
    backend: &'a mut dyn Backend,
    vocab: usize,
    seq: Vec<u32>,
    /// The next token's scores once computed for the sequence as it is (empty: not yet).
    scores: Vec<f32>,
    how: How<'a>,
}

enum How<'a> {
    /// The inference program over the last `context` tokens, every time.
    Window { context: usize },
    /// The decode program: `held` tokens of the sequence from `start` are in its caches.
    Cached { decoder: &'a Decoder, start: usize, held: usize },
}

/// Makes `backend` (a prediction's program with its parameters written) ready to generate: a
/// decode program's weights rounded to bf16 once, into the state every run reads
/// ([`decode::ROUND_WEIGHTS`]); an inference program needs nothing. Run it after writing the
/// parameters, not per sequence: the rounded copies last as long as the parameters.
pub fn ready(backend: &mut dyn Backend, decoder: Option<&Decoder>) -> Result<()> {
    if decoder.is_some() {
        backend.run(decode::ROUND_WEIGHTS)?;
    }
    Ok(())
}

impl<'a> Generation<'a> {
    /// On an inference program of batch 1 (`backend`, parameters loaded).
    pub fn windowed(backend: &'a mut dyn Backend, system: &dyn System) -> Self {
        let how = How::Window { context: system.context() };
        Generation { backend, vocab: system.vocab(), seq: vec![], scores: vec![], how }
    }

    /// On a decode program (`backend` holds `decoder.program`, parameters loaded and [`ready`]).
    pub fn cached(backend: &'a mut dyn Backend, decoder: &'a Decoder, system: &dyn System) -> Self {
        let how = How::Cached { decoder, start: 0, held: 0 };
        Generation { backend, vocab: system.vocab(), seq: vec![], scores: vec![], how }
    }

    /// On `decoder`'s program where there is one ([`Generation::cached`]), else on the
    /// inference program ([`Generation::windowed`]).
    pub fn new(backend: &'a mut dyn Backend, decoder: Option<&'a Decoder>, system: &dyn System) -> Self {
        match decoder {
            Some(d) => Generation::cached(backend, d, system),
            None => Generation::windowed(backend, system),
        }
    }

    /// The sequence so far.
    pub fn tokens(&self) -> &[u32] {
        &self.seq
    }

    /// Appends `tokens` to the sequence (a decode program runs each of them in).
    pub fn extend(&mut self, tokens: &[u32]) -> Result<()> {
        self.seq.extend_from_slice(tokens);
        self.scores.clear();
        if let How::Cached { decoder, start, held } = &mut self.how {
            // Full caches are filled again from the sequence's last half.
            if self.seq.len() - *start > decoder.positions {
                *start = self.seq.len().saturating_sub(decoder.positions / 2);
                *held = 0;
            }
            while *held < self.seq.len() - *start {
                feed(self.backend, &decoder.step(self.seq[*start + *held], *held), decoder.learned_positions)?;
                self.backend.run(decode::DECODE)?;
                *held += 1;
            }
            if !self.seq.is_empty() {
                self.scores = self.backend.output("logits")?;
            }
        }
        Ok(())
    }

    /// The next token's scores (the first `vocab` of a row that may be padded wider).
    pub fn scores(&mut self) -> Result<&[f32]> {
        if self.seq.is_empty() {
            bail!("nothing to continue: the sequence is empty");
        }
        if let (true, How::Window { context }) = (self.scores.is_empty(), &self.how) {
            let t = *context;
            let window = &self.seq[self.seq.len().saturating_sub(t)..];
            let mut ids = window.to_vec();
            ids.resize(t, 0);
            self.backend.write_ids("tokens", &ids)?;
            self.backend.write_ids("targets", &vec![0; t])?;
            self.backend.run("forward")?;
            let logits = self.backend.output("logits")?;
            // Rows may be wider than the vocabulary (an embedding padded for the GPU's tiles).
            let width = logits.len() / t;
            let at = (window.len() - 1) * width;
            self.scores = logits[at..at + width].to_vec();
        }
        Ok(&self.scores[..self.vocab])
    }

    /// Chooses and appends `n` tokens, handing each to `on_token` as it is chosen.
    pub fn generate(
        &mut self,
        n: usize,
        temperature: f64,
        rng: &mut ChaCha8Rng,
        on_token: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let next = choose(self.scores()?, temperature, rng);
            on_token(next)?;
            out.push(next);
            self.extend(&[next])?;
        }
        Ok(out)
    }
}

/// The five most likely tokens of a row of scores, with their probabilities.
fn most_likely(row: &[f32]) -> Vec<(u32, f64)> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let probs: Vec<f64> = row.iter().map(|&z| (z as f64 - max).exp()).collect();
    let z: f64 = probs.iter().sum();
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    idx.iter().take(5).map(|&j| (j as u32, probs[j] / z)).collect()
}

/// The next token from a row of scores: the most likely at temperature 0, else a draw from the
/// softmax of the scores over the temperature.
fn choose(row: &[f32], temperature: f64, rng: &mut ChaCha8Rng) -> u32 {
    let v = row.len();
    if temperature <= 0.0 {
        return (0..v).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a))).unwrap() as u32;
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let w: Vec<f64> = row.iter().map(|&zv| ((zv as f64 - max) / temperature).exp()).collect();
    let total: f64 = w.iter().sum();
    let mut r = rng.random::<f64>() * total;
    for (j, &wj) in w.iter().enumerate() {
        if r < wj {
            return j as u32;
        }
        r -= wj;
    }
    v as u32 - 1
}

/// Writes one decode run's inputs.
fn feed(backend: &mut dyn Backend, step: &DecodeStep, learned_positions: bool) -> Result<()> {
    backend.write_ids("token", &[step.token])?;
    if learned_positions {
        backend.write_ids("position", &[step.position])?;
    }
    backend.write("onehot", &step.onehot)?;
    backend.write("mask", &step.mask)?;
    if let Some((cos, sin)) = &step.rope {
        backend.write("rope_cos", cos)?;
        backend.write("rope_sin", sin)?;
    }
    Ok(())
}

/// A prompt to continue and a temperature to continue it at, or the error that names why not.
fn check_request(prompt: &[u32], temperature: f64) -> Result<()> {
    if prompt.is_empty() {
        bail!("the prompt is empty: give some text to continue");
    }
    // A NaN temperature would make every weight NaN and always pick the last token.
    if !temperature.is_finite() || temperature < 0.0 {
        bail!("the temperature must be a finite number, 0 or more (got {temperature})");
    }
    Ok(())
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
        let mut g = Generation::windowed(&mut backend, bob.as_ref());
        let p = predict(&mut g, &[65], 3, 0.0, 1, &mut |t| {
            seen.push(t);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, p.tokens, "each token is handed over as it is chosen");
        assert_eq!(p.tokens.len(), 3);
    }
}

#[cfg(test)]
mod decoding_tests {
    use super::*;
    use crate::CpuBackend;
    use alpha_systems::coppelius::Coppelius;
    use alpha_systems::diakosmos::Diakosmos;
    use alpha_systems::gpt2::Gpt2;
    use alpha_systems::kickdelta::KickDelta;
    use alpha_systems::polf::Polf;

    /// The systems with a decode program, small (two or three blocks of 64 or 32, windows of
    /// 24; KickDelta has one size, a window of 512; Diakosmos two blocks of 42, a window of 24),
    /// each with the largest difference allowed between the decode's and the window's scores,
    /// as a share of the row's largest score (0: equal bits). The transformers' window rounds
    /// its attention probabilities to bf16 tile by tile and the decode's softmax over the cache
    /// does not; KickDelta runs in f32 throughout, so only the order of its sums differs.
    /// Diakosmos's decode does the window's arithmetic in the window's order on the CPU: its
    /// scan step is the kernel's γ·S + w·v and ℓ-ordered read, its running mean the same sum
    /// and division, and each product's row is summed alike whatever the rows around it, so
    /// every bf16 rounding (of the three large products' operands, a row at a time in both)
    /// meets the same f32 value and the scores agree to the bit.
    fn small() -> Vec<(Box<dyn System>, f32)> {
        vec![
            (Box::new(Coppelius { blocks: 2, width: 64, heads: 2, ffn: 96, vocab: 97, context: 24 }), 2e-2),
            (Box::new(Gpt2 { layers: 2, width: 64, heads: 2, vocab: 97, context: 24 }), 2e-2),
            (
                Box::new(Polf {
                    blocks: 3,
                    width: 32,
                    heads: 4,
                    kv_heads: 2,
                    mlp: 64,
                    vocab: 97,
                    context: 24,
                    bf16: true,
                }),
                2e-2,
            ),
            (Box::new(KickDelta), 1e-4),
            (Box::new(Diakosmos { blocks: 2, phasors: 3, harmonics: 4, context: 24, bf16: true }), 0.0),
        ]
    }

    /// Both programs loaded with the same random weights.
    fn loaded(system: &dyn System) -> (CpuBackend, CpuBackend, Decoder) {
        let window = alpha_learn::inference_program(system.model(1).unwrap()).unwrap();
        let decoder = system.decoder().expect("the system decodes").unwrap();
        let mut full = CpuBackend::compile(&window).unwrap();
        let mut step = CpuBackend::compile(&decoder.program).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for (name, shape, is_param) in crate::session::persistent(&window) {
            if is_param {
                let n: usize = shape.iter().product();
                let scale = if name.contains("weight") && shape.len() == 2 { 0.3 } else { 0.1 };
                let v: Vec<f32> =
                    (0..n).map(|_| if name.contains("ln") { 1.0 } else { rng.random_range(-scale..scale) }).collect();
                full.write(&name, &v).unwrap();
                step.write(&name, &v).unwrap();
            }
        }
        ready(&mut step, Some(&decoder)).unwrap();
        (full, step, decoder)
    }

    #[test]
    fn one_position_at_a_time_gives_the_windows_scores() {
        for (system, bound) in small() {
            let (mut full, mut step, decoder) = loaded(system.as_ref());
            let (t, v) = (system.context(), system.vocab());
            let tokens: Vec<u32> = (0..t as u32).map(|i| (i * 37 + 5) % v as u32).collect();
            full.write_ids("tokens", &tokens).unwrap();
            full.write_ids("targets", &vec![0; t]).unwrap();
            full.run("forward").unwrap();
            let window = full.output("logits").unwrap();
            let width = window.len() / t;
            let mut worst: f32 = 0.0;
            let mut last: Vec<f32> = vec![];
            for (p, &tok) in tokens.iter().enumerate() {
                feed(&mut step, &decoder.step(tok, p), decoder.learned_positions).unwrap();
                step.run(decode::DECODE).unwrap();
                let one = step.output("logits").unwrap();
                let row = &window[p * width..p * width + v];
                let spread = row.iter().fold(0f32, |m, x| m.max(x.abs()));
                let diff = one[..v].iter().zip(row).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                worst = worst.max(diff / spread);
                let top = |r: &[f32]| (0..v).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap();
                assert_eq!(top(&one), top(row), "{} position {p}: the most likely token differs", system.name());
                assert_ne!(one, last, "{} position {p}: the decode's scores did not change", system.name());
                last = one;
            }
            eprintln!("{}: largest difference {worst:.2e} of a row's largest score", system.name());
            if bound == 0.0 {
                assert_eq!(worst, 0.0, "{}: the scores differ from the window's", system.name());
            } else {
                assert!(worst < bound, "{}: largest difference {worst} of a row's largest score", system.name());
                assert!(worst > 0.0, "{}: equal bits would mean one program was not run", system.name());
            }
        }
    }

    #[test]
    fn a_decoded_continuation_is_the_windows_continuation() {
        for (system, _) in small() {
            let (mut full, mut step, decoder) = loaded(system.as_ref());
            let prompt = [3u32, 14, 15, 92, 65];
            // Past the window so that the caches refill once.
            let n = system.context() + 6;
            let by_window = continue_prompt(&mut full, system.as_ref(), &prompt, n, 0.0, 1).unwrap();
            let mut seen = vec![];
            let mut g = Generation::cached(&mut step, &decoder, system.as_ref());
            let by_step = predict(&mut g, &prompt, n, 0.0, 1, &mut |t| {
                seen.push(t);
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, by_step.tokens);
            // Within the window the greedy tokens agree; after the refill the decode sees a
            // shorter context than the window's sliding one, so only the first stretch must match.
            let inside = system.context() - prompt.len();
            assert_eq!(by_step.tokens[..inside], by_window.tokens[..inside], "{}", system.name());
            assert_eq!(by_step.top_next[0].0, by_window.top_next[0].0);
        }
    }

    /// A checkpoint of the system restores into its decode program: the same parameters, names
    /// and shapes in the same order (the configuration hash reads them in order).
    #[test]
    fn the_decode_program_holds_the_models_parameters() {
        for (system, _) in small() {
            let window = alpha_learn::inference_program(system.model(1).unwrap()).unwrap();
            let decoder = system.decoder().expect("the system decodes").unwrap();
            let params =
                |p: &alpha_ir::Program| crate::session::persistent(p).into_iter().filter(|x| x.2).collect::<Vec<_>>();
            assert_eq!(params(&decoder.program), params(&window), "{}", system.name());
            let hash = |p: &alpha_ir::Program| crate::session::config_hash(system.as_ref(), p);
            assert_eq!(hash(&decoder.program), hash(&window), "{}", system.name());
        }
    }

    /// A token's run reads each weight's bf16 copy, made once by the one-time phase: no cast of
    /// a parameter is left in the decode phase, and every parameter a product reads in bf16 has
    /// its copy assigned there.
    #[test]
    fn the_weights_are_rounded_once_not_every_token() {
        for (system, _) in small() {
            let p = system.decoder().expect("the system decodes").unwrap().program;
            let is_param = |v: alpha_ir::Value| matches!(p.graph.node(v).op, alpha_ir::Op::Param { .. });
            let decode = &p.phases[p.phase(decode::DECODE).unwrap()];
            let cast_params = decode.nodes.clone().filter(|&i| {
                let n = &p.graph.nodes[i];
                matches!(n.op, alpha_ir::Op::Cast { .. }) && is_param(n.inputs[0])
            });
            assert_eq!(cast_params.count(), 0, "{}", system.name());
            let round = &p.phases[p.phase(decode::ROUND_WEIGHTS).unwrap()];
            for &(dst, src) in &round.assign {
                let alpha_ir::Op::State { name, .. } = &p.graph.node(dst).op else { panic!("a state") };
                let param = p.graph.node(src).inputs[0];
                let alpha_ir::Op::Param { name: weight, .. } = &p.graph.node(param).op else { panic!("a parameter") };
                assert_eq!(*name, format!("{weight}.bf16"));
            }
            let rounded = round.assign.len();
            let params = p.graph.params().len();
            eprintln!("{}: {rounded} of {params} parameters read in bf16", system.name());
            // KickDelta runs in f32; the others read their large matrices (and embeddings) in bf16.
            assert_eq!(rounded == 0, system.name() == "kickdelta", "{}", system.name());
        }
    }
}
