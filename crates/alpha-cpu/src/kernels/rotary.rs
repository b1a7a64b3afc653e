//! Rotary position embedding on [B, H, T, D], half-split pairs (i, i + D/2): at position t the
//! pair turns by t·base^(−2i/D), (x₁, x₂) → (x₁cos − x₂sin, x₁sin + x₂cos). Its pullback turns
//! back by the same angle.

use rayon::prelude::*;

use crate::real::Real;

pub fn rotary<T: Real>(x: &[T], shape: &[usize], base: f64, inverse: bool, out: &mut [T]) {
    let (t_len, d) = (shape[2], shape[3]);
    let half = d / 2;
    let sign = if inverse { -1.0 } else { 1.0 };
    out.par_chunks_mut(d).zip(x.par_chunks(d)).enumerate().for_each(|(row, (o, x))| {
        let t = (row % t_len) as f64;
        for i in 0..half {
            let theta = sign * t * base.powf(-2.0 * i as f64 / d as f64);
            let (s, c) = (T::of(theta.sin()), T::of(theta.cos()));
            let (x1, x2) = (x[i], x[i + half]);
            o[i] = x1 * c - x2 * s;
            o[i + half] = x1 * s + x2 * c;
        }
    });
}
