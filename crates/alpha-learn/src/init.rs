//! Parameter initialisation from the run's seed. Each tensor draws from its own ChaCha stream,
//! keyed by the seed and its name, so adding a tensor never shifts another's values.

use alpha_ir::{Graph, Init, Op};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

fn stream(seed: u64, name: &str) -> ChaCha8Rng {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(name.as_bytes());
    let digest: [u8; 32] = h.finalize().into();
    ChaCha8Rng::from_seed(digest)
}

/// Values for one tensor of `n` elements.
pub fn draw(init: &Init, n: usize, seed: u64, name: &str) -> Vec<f32> {
    let mut rng = stream(seed, name);
    match *init {
        Init::Values(ref values) => {
            assert_eq!(values.len(), n, "{name}: {} initial values for {n} elements", values.len());
            values.iter().map(|&x| x as f32).collect()
        }
        Init::Zeros => vec![0.0; n],
        Init::Ones => vec![1.0; n],
        Init::Constant(c) => vec![c as f32; n],
        Init::Linspace { start, step } => (0..n).map(|i| (start + step * i as f64) as f32).collect(),
        Init::Rows(ref rows) => {
            // `infer` checks that the rows divide the tensor.
            let per = n / rows.len().max(1);
            (0..n).map(|i| rows[i / per.max(1)] as f32).collect()
        }
        Init::Uniform { bound } => (0..n).map(|_| rng.random_range(-bound..bound) as f32).collect(),
        Init::Normal { std } => (0..n)
            .map(|_| {
                // Box–Muller on two uniforms in (0, 1].
                let u1: f64 = 1.0 - rng.random::<f64>();
                let u2: f64 = rng.random::<f64>();
                (std * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
            })
            .collect(),
    }
}

/// Initial values of every parameter and state tensor of a graph: (name, values).
pub fn initial_leaves(g: &Graph, seed: u64) -> Vec<(String, Vec<f32>)> {
    g.nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Param { name, init } | Op::State { name, init } => {
                Some((name.clone(), draw(init, n.outputs[0].numel(), seed, name)))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_draws_have_the_asked_spread_and_depend_on_name_and_seed() {
        let a = draw(&Init::Normal { std: 0.02 }, 100_000, 1, "w");
        let mean = a.iter().map(|&x| x as f64).sum::<f64>() / a.len() as f64;
        let var = a.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / a.len() as f64;
        assert!(mean.abs() < 3e-4, "mean {mean}");
        assert!((var.sqrt() - 0.02).abs() < 3e-4, "std {}", var.sqrt());
        assert_eq!(a, draw(&Init::Normal { std: 0.02 }, 100_000, 1, "w"));
        assert_ne!(a, draw(&Init::Normal { std: 0.02 }, 100_000, 2, "w"));
        assert_ne!(a, draw(&Init::Normal { std: 0.02 }, 100_000, 1, "v"));
    }
}
