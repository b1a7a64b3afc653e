//! LayerNorm and RMSNorm over the last axis, forward and backward. Parameter gradients sum rows
//! in fixed bands, then the bands in order, so they do not depend on thread timing.

use rayon::prelude::*;

use crate::real::Real;

/// Rows per band. 16, so that one context's 1,024 rows make 64 bands: the device gives each
/// band and column a thread, and more bands is more of the GPU at work.
pub const BAND: usize = 16;

pub fn layer_norm<T: Real>(x: &[T], gain: &[T], bias: &[T], eps: f64, y: &mut [T], mean: &mut [T], rstd: &mut [T]) {
    let c = gain.len();
    y.par_chunks_mut(c).zip(x.par_chunks(c)).zip(mean.par_iter_mut().zip(rstd.par_iter_mut())).for_each(
        |((y, x), (mu, rs))| {
            let n = T::of(c as f64);
            let m = x.iter().copied().sum::<T>() / n;
            let var = x.iter().map(|&v| (v - m) * (v - m)).sum::<T>() / n;
            let r = T::one() / (var + T::of(eps)).sqrt();
            for j in 0..c {
                y[j] = (x[j] - m) * r * gain[j] + bias[j];
            }
            *mu = m;
            *rs = r;
        },
    );
}

/// Sum per-row contributions `f(row) -> [c]` over rows in fixed bands.
fn band_sum<T: Real>(rows: usize, c: usize, f: impl Fn(usize, &mut [T]) + Sync) -> Vec<T> {
    let bands: Vec<Vec<T>> = (0..rows.div_ceil(BAND))
        .into_par_iter()
        .map(|b| {
            let mut acc = vec![T::zero(); c];
            for r in b * BAND..((b + 1) * BAND).min(rows) {
                f(r, &mut acc);
            }
            acc
        })
        .collect();
    let mut total = vec![T::zero(); c];
    for b in bands {
        for (t, v) in total.iter_mut().zip(b) {
            *t = *t + v;
        }
    }
    total
}

#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward<T: Real>(
    x: &[T],
    gain: &[T],
    mean: &[T],
    rstd: &[T],
    dy: &[T],
    dx: &mut [T],
    dgain: &mut [T],
    dbias: &mut [T],
) {
    let c = gain.len();
    let rows = mean.len();
    dx.par_chunks_mut(c).enumerate().for_each(|(r, dx)| {
        let (x, dy) = (&x[r * c..(r + 1) * c], &dy[r * c..(r + 1) * c]);
        let n = T::of(c as f64);
        let (m, rs) = (mean[r], rstd[r]);
        let mut mean_g = T::zero();
        let mut mean_gx = T::zero();
        for j in 0..c {
            let g = dy[j] * gain[j];
            mean_g = mean_g + g;
            mean_gx = mean_gx + g * (x[j] - m) * rs;
        }
        mean_g = mean_g / n;
        mean_gx = mean_gx / n;
        for j in 0..c {
            let xhat = (x[j] - m) * rs;
            dx[j] = rs * (dy[j] * gain[j] - mean_g - xhat * mean_gx);
        }
    });
    let dg = band_sum(rows, c, |r, acc: &mut [T]| {
        for j in 0..c {
            acc[j] = acc[j] + dy[r * c + j] * (x[r * c + j] - mean[r]) * rstd[r];
        }
    });
    let db = band_sum(rows, c, |r, acc: &mut [T]| {
        for j in 0..c {
            acc[j] = acc[j] + dy[r * c + j];
        }
    });
    dgain.copy_from_slice(&dg);
    dbias.copy_from_slice(&db);
}

pub fn rms_norm<T: Real>(x: &[T], gain: &[T], eps: f64, y: &mut [T], rstd: &mut [T]) {
    let c = gain.len();
    y.par_chunks_mut(c).zip(x.par_chunks(c)).zip(rstd.par_iter_mut()).for_each(|((y, x), rs)| {
        let ms = x.iter().map(|&v| v * v).sum::<T>() / T::of(c as f64);
        let r = T::one() / (ms + T::of(eps)).sqrt();
        for j in 0..c {
            y[j] = x[j] * r * gain[j];
        }
        *rs = r;
    });
}

pub fn rms_norm_backward<T: Real>(x: &[T], gain: &[T], rstd: &[T], dy: &[T], dx: &mut [T], dgain: &mut [T]) {
    let c = gain.len();
    let rows = rstd.len();
    dx.par_chunks_mut(c).enumerate().for_each(|(r, dx)| {
        let (x, dy) = (&x[r * c..(r + 1) * c], &dy[r * c..(r + 1) * c]);
        let rs = rstd[r];
        let mut mean_gx = T::zero();
        for j in 0..c {
            mean_gx = mean_gx + dy[j] * gain[j] * x[j] * rs;
        }
        mean_gx = mean_gx / T::of(c as f64);
        for j in 0..c {
            dx[j] = rs * (dy[j] * gain[j] - x[j] * rs * mean_gx);
        }
    });
    let dg = band_sum(rows, c, |r, acc: &mut [T]| {
        for j in 0..c {
            acc[j] = acc[j] + dy[r * c + j] * x[r * c + j] * rstd[r];
        }
    });
    dgain.copy_from_slice(&dg);
}
