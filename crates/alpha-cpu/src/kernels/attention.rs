//! Causal softmax attention, the reference: exact row by row, never faster than it needs to be
//! understood. q [B, H, T, D]; k, v [B, G, T, D]; query head h reads key/value head h / (H/G).
//! With a soft-cap c the logits are c·tanh(s/c).
//!
//! With `bf16` the reference models tensor-core attention: q, k, v (and dO) are rounded to bf16,
//! and so are the probabilities entering P·V (taken against the running maximum of the
//! device's online softmax, `online_rounded`) and dV, and the score gradients entering dQ and
//! dK (before the scale, which the device applies once at the end); the softmax sums, lse and
//! delta stay unrounded, as on the device.

use rayon::prelude::*;

use crate::real::{round_bf16, Real};

/// The op's settings.
#[derive(Clone, Copy, Debug)]
pub struct How {
    pub scale: f64,
    pub softcap: Option<f64>,
    pub bf16: bool,
}

/// `x` as the products read it: rounded to bf16 when `bf16`.
fn operand<T: Real>(x: T, bf16: bool) -> T {
    if bf16 {
        round_bf16(x)
    } else {
        x
    }
}

/// A tensor as the products read it (a copy only when rounding).
fn operands<T: Real>(x: &[T], bf16: bool) -> std::borrow::Cow<'_, [T]> {
    if bf16 {
        std::borrow::Cow::Owned(x.par_iter().map(|&v| round_bf16(v)).collect())
    } else {
        std::borrow::Cow::Borrowed(x)
    }
}

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

pub fn forward<T: Real>(q: &[T], k: &[T], v: &[T], dims: &Dims, how: How, o: &mut [T], lse: &mut [T]) {
    let Dims { h, g, t, d, .. } = *dims;
    let How { scale, softcap, bf16 } = how;
    let (q, k, v) = (operands(q, bf16), operands(k, bf16), operands(v, bf16));
    let per = h / g;
    o.par_chunks_mut(t * d).zip(lse.par_chunks_mut(t)).enumerate().for_each(|(bh, (o, lse))| {
        let (b, hh) = (bh / h, bh % h);
        let kv = (b * g + hh / per) * t * d;
        let (k, v) = (&k[kv..kv + t * d], &v[kv..kv + t * d]);
        let q = &q[bh * t * d..(bh + 1) * t * d];
        let mut s = vec![T::zero(); t];
        for i in 0..t {
            logits(&q[i * d..(i + 1) * d], k, i, d, scale, softcap, &mut s);
            let row = &mut o[i * d..(i + 1) * d];
            row.iter_mut().for_each(|x| *x = T::zero());
            if bf16 {
                lse[i] = online_rounded(&s[..=i], v, d, row);
                continue;
            }
            let m = s[..=i].iter().copied().fold(T::neg_infinity(), T::max);
            let z: T = s[..=i].iter().map(|&x| (x - m).exp()).sum();
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

/// Keys per tile of the device's online softmax (`alpha_cuda::attention_mma::ROWS`).
pub const KEY_TILE: usize = 64;

/// One query row of bf16 attention the way the tensor cores compute it: key tiles of
/// [`KEY_TILE`] in order, a running maximum updated per tile, each probability relative to the
/// maximum so far rounded to bf16 as it enters P·V, the row and the sum rescaled as the maximum
/// grows, the row divided by the sum at the end. Rounding against the running maximum, not the
/// final one, is what makes the reference's bf16 probabilities the device's. Returns the lse.
fn online_rounded<T: Real>(s: &[T], v: &[T], d: usize, row: &mut [T]) -> T {
    let (mut m, mut l) = (T::neg_infinity(), T::zero());
    for (tile, st) in s.chunks(KEY_TILE).enumerate() {
        let m_new = st.iter().copied().fold(m, T::max);
        let alpha = if m == T::neg_infinity() { T::zero() } else { (m - m_new).exp() };
        l = l * alpha;
        row.iter_mut().for_each(|x| *x = *x * alpha);
        for (jj, &sj) in st.iter().enumerate() {
            let p = (sj - m_new).exp();
            l = l + p;
            let p = round_bf16(p);
            let j = tile * KEY_TILE + jj;
            for c in 0..d {
                row[c] = row[c] + p * v[j * d + c];
            }
        }
        m = m_new;
    }
    row.iter_mut().for_each(|x| *x = *x / l);
    m + l.ln()
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
    how: How,
    dq: &mut [T],
    dk: &mut [T],
    dv: &mut [T],
) {
    let Dims { h, g, t, d, .. } = *dims;
    let How { scale, softcap, bf16 } = how;
    let (q, k, v, dor) = (operands(q, bf16), operands(k, bf16), operands(v, bf16), operands(dout, bf16));
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
                let doi = &dor[base + i * d..base + (i + 1) * d];
                let oi = &o[base + i * d..base + (i + 1) * d];
                logits(qi, k, i, d, scale, softcap, &mut s);
                let l = lse[bh * t + i];
                // delta from dO as given (the device reads it in f32 too).
                let delta: T = dout[base + i * d..base + (i + 1) * d].iter().zip(oi).map(|(&a, &b)| a * b).sum();
                for j in 0..=i {
                    let p = (s[j] - l).exp();
                    let dp: T = doi.iter().zip(&v[j * d..(j + 1) * d]).map(|(&a, &b)| a * b).sum();
                    let mut ds = p * (dp - delta);
                    if let Some(c) = softcap {
                        let r = s[j] / T::of(c);
                        ds = ds * (T::one() - r * r);
                    }
                    // bf16: the score gradient enters the products rounded, the scale after.
                    let ds = if bf16 { round_bf16(ds) } else { ds * T::of(scale) };
                    let pv = operand(p, bf16);
                    for c in 0..d {
                        dq[i * d + c] = dq[i * d + c] + ds * k[j * d + c];
                        dk[j * d + c] = dk[j * d + c] + ds * qi[c];
                        dv[j * d + c] = dv[j * d + c] + pv * doi[c];
                    }
                }
            }
            if bf16 {
                dq.iter_mut().for_each(|x| *x = *x * T::of(scale));
            }
        }
        if bf16 {
            dk.iter_mut().for_each(|x| *x = *x * T::of(scale));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In bf16 mode inputs that round to the same bf16 give bit-identical outputs (the operands
    /// are rounded), and the result stays within bf16 error of the f32 attention; in f32 mode
    /// the same nudge changes the output.
    #[test]
    fn bf16_mode_rounds_the_operands() {
        let dims = Dims { b: 1, h: 2, g: 1, t: 9, d: 8 };
        let n = 2 * 9 * 8;
        let draw = |seed: u32, n: usize| -> Vec<f32> {
            (0..n)
                .map(|i| {
                    (((i as u32).wrapping_mul(2654435761) ^ seed).wrapping_mul(40503) % 2001) as f32 / 1000.0 - 1.0
                })
                .collect()
        };
        // Values exact in bf16, then nudged by much less than half an ulp: equal once rounded.
        let exact_bf16 = |x: Vec<f32>| x.into_iter().map(round_bf16).collect::<Vec<f32>>();
        let (q, k, v) = (exact_bf16(draw(1, n)), exact_bf16(draw(2, n / 2)), draw(3, n / 2));
        let nudge = |x: &[f32]| x.iter().map(|&a| a + a.abs() * 2f32.powi(-12)).collect::<Vec<_>>();
        let run = |q: &[f32], k: &[f32], bf16: bool| {
            let (mut o, mut lse) = (vec![0.0f32; n], vec![0.0f32; 18]);
            forward(q, k, &v, &dims, How { scale: 0.35, softcap: None, bf16 }, &mut o, &mut lse);
            o
        };
        let exact = run(&q, &k, false);
        let rounded = run(&q, &k, true);
        assert_eq!(rounded, run(&nudge(&q), &nudge(&k), true));
        assert_ne!(exact, run(&nudge(&q), &nudge(&k), false));
        let worst = exact.iter().zip(&rounded).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst > 0.0 && worst < 2e-2, "bf16 against f32 attention: {worst}");
    }
}
