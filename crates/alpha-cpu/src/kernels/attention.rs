//! Causal softmax attention, the reference: exact row by row, never faster than it needs to be
//! understood. q [B, H, T, D]; k, v [B, G, T, D]; query head h reads key/value head h / (H/G).
//! With a soft-cap c the logits are c·tanh(s/c).

use rayon::prelude::*;

use crate::real::Real;

pub struct Dims {
    pub b: usize,
    pub h: usize,
    pub g: usize,
    pub t: usize,
    pub d: usize,
}

fn logits<T: Real>(q: &[T], k: &[T], t: usize, d: usize, scale: f64, softcap: Option<f64>, out: &mut [T]) {
    for (j, o) in out.iter_mut().enumerate().take(t + 1) {
        let s = q.iter().zip(&k[j * d..(j + 1) * d]).map(|(&a, &b)| a * b).sum::<T>() * T::of(scale);
        *o = match softcap {
            Some(c) => T::of(c) * (s / T::of(c)).tanh(),
            None => s,
        };
    }
}

#[allow(clippy::too_many_arguments)]
pub fn forward<T: Real>(
    q: &[T],
    k: &[T],
    v: &[T],
    dims: &Dims,
    scale: f64,
    softcap: Option<f64>,
    o: &mut [T],
    lse: &mut [T],
) {
    let Dims { h, g, t, d, .. } = *dims;
    let per = h / g;
    o.par_chunks_mut(t * d).zip(lse.par_chunks_mut(t)).enumerate().for_each(|(bh, (o, lse))| {
        let (b, hh) = (bh / h, bh % h);
        let kv = (b * g + hh / per) * t * d;
        let (k, v) = (&k[kv..kv + t * d], &v[kv..kv + t * d]);
        let q = &q[bh * t * d..(bh + 1) * t * d];
        let mut s = vec![T::zero(); t];
        for i in 0..t {
            logits(&q[i * d..(i + 1) * d], k, i, d, scale, softcap, &mut s);
            let m = s[..=i].iter().copied().fold(T::neg_infinity(), T::max);
            let z: T = s[..=i].iter().map(|&x| (x - m).exp()).sum();
            let row = &mut o[i * d..(i + 1) * d];
            row.iter_mut().for_each(|x| *x = T::zero());
            for j in 0..=i {
                let p = (s[j] - m).exp() / z;
                for c in 0..d {
                    row[c] = row[c] + p * v[j * d + c];
                }
            }
            lse[i] = m + z.ln();
        }
    });
}

/// dq, dk, dv. One task per key/value head owns its dk, dv and the dq rows of its query heads,
/// so every sum runs in a fixed order.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Real>(
    q: &[T],
    k: &[T],
    v: &[T],
    o: &[T],
    lse: &[T],
    dout: &[T],
    dims: &Dims,
    scale: f64,
    softcap: Option<f64>,
    dq: &mut [T],
    dk: &mut [T],
    dv: &mut [T],
) {
    let Dims { h, g, t, d, .. } = *dims;
    let per = h / g;
    let dq_ptr = dq.as_mut_ptr() as usize;
    dk.par_chunks_mut(t * d).zip(dv.par_chunks_mut(t * d)).enumerate().for_each(|(bg, (dk, dv))| {
        let (b, gg) = (bg / g, bg % g);
        dk.iter_mut().for_each(|x| *x = T::zero());
        dv.iter_mut().for_each(|x| *x = T::zero());
        let (k, v) = (&k[bg * t * d..(bg + 1) * t * d], &v[bg * t * d..(bg + 1) * t * d]);
        let mut s = vec![T::zero(); t];
        for hh in gg * per..(gg + 1) * per {
            let bh = b * h + hh;
            let base = bh * t * d;
            // SAFETY: query head bh belongs to exactly this task.
            let dq = unsafe { std::slice::from_raw_parts_mut((dq_ptr as *mut T).add(base), t * d) };
            dq.iter_mut().for_each(|x| *x = T::zero());
            for i in 0..t {
                let qi = &q[base + i * d..base + (i + 1) * d];
                let doi = &dout[base + i * d..base + (i + 1) * d];
                let oi = &o[base + i * d..base + (i + 1) * d];
                logits(qi, k, i, d, scale, softcap, &mut s);
                let l = lse[bh * t + i];
                let delta: T = doi.iter().zip(oi).map(|(&a, &b)| a * b).sum();
                for j in 0..=i {
                    let p = (s[j] - l).exp();
                    let dp: T = doi.iter().zip(&v[j * d..(j + 1) * d]).map(|(&a, &b)| a * b).sum();
                    let mut ds = p * (dp - delta);
                    if let Some(c) = softcap {
                        let r = s[j] / T::of(c);
                        ds = ds * (T::one() - r * r);
                    }
                    let ds = ds * T::of(scale);
                    for c in 0..d {
                        dq[i * d + c] = dq[i * d + c] + ds * k[j * d + c];
                        dk[j * d + c] = dk[j * d + c] + ds * qi[c];
                        dv[j * d + c] = dv[j * d + c] + p * doi[c];
                    }
                }
            }
        }
    });
}
