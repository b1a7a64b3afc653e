//! Decoupled AdamW, in place: g ← g·gscale (the clip factor); m ← β1·m + (1−β1)·g;
//! v ← β2·v + (1−β2)·g²; p ← p − lr·(m/bc1 / (√(v/bc2) + ε) + λ·p).

use rayon::prelude::*;

use crate::real::Real;

pub struct Hyper {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub lr: f64,
    pub bc1: f64,
    pub bc2: f64,
    pub gscale: f64,
}

pub fn adamw<T: Real>(p: &mut [T], g: &[T], m: &mut [T], v: &mut [T], h: &Hyper) {
    let (b1, b2) = (T::of(h.beta1), T::of(h.beta2));
    let (eps, wd, lr) = (T::of(h.eps), T::of(h.weight_decay), T::of(h.lr));
    let (bc1, bc2, gs) = (T::of(h.bc1), T::of(h.bc2), T::of(h.gscale));
    const CHUNK: usize = 1 << 14;
    p.par_chunks_mut(CHUNK)
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .zip(g.par_chunks(CHUNK))
        .for_each(|(((p, m), v), g)| {
            for i in 0..p.len() {
                let gi = g[i] * gs;
                m[i] = b1 * m[i] + (T::one() - b1) * gi;
                v[i] = b2 * v[i] + (T::one() - b2) * gi * gi;
                let update = (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps) + wd * p[i];
                p[i] = p[i] - lr * update;
            }
        });
}
