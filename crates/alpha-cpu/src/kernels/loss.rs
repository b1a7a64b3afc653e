//! Exact full-vocabulary cross-entropy, one row per position: `loss = logsumexp(z) − z[target]`,
//! over the first `c` of each row's `w` logits (a padded vocabulary's real entries; `c = w`
//! otherwise); the backward's columns from `c` on are zero.

use rayon::prelude::*;

use crate::real::Real;

fn target<T: Real>(t: T, v: usize) -> usize {
    let r = t.f64();
    assert!(r >= 0.0 && (r as usize) < v, "target {r} is outside a vocabulary of {v}");
    r as usize
}

/// Per-row loss and log-sum-exp of rows of `w` logits, over their first `v`.
pub fn forward<T: Real>(logits: &[T], targets: &[T], (w, v): (usize, usize), loss: &mut [T], lse: &mut [T]) {
    loss.par_iter_mut().zip(lse.par_iter_mut()).enumerate().for_each(|(r, (l, s))| {
        let z = &logits[r * w..r * w + v];
        let m = z.iter().copied().fold(T::neg_infinity(), T::max);
        let sum: T = z.iter().map(|&x| (x - m).exp()).sum();
        let lse = m + sum.ln();
        *s = lse;
        *l = lse - z[target(targets[r], v)];
    });
}

/// dlogits of rows of `w` logits whose first `v` entered the loss; the rest are zero.
pub fn backward<T: Real>(
    logits: &[T],
    lse: &[T],
    targets: &[T],
    dloss: &[T],
    (w, v): (usize, usize),
    dlogits: &mut [T],
) {
    dlogits.par_chunks_mut(w).enumerate().for_each(|(r, d)| {
        let z = &logits[r * w..r * w + v];
        let t = target(targets[r], v);
        for j in 0..v {
            let p = (z[j] - lse[r]).exp();
            d[j] = (p - if j == t { T::one() } else { T::zero() }) * dloss[r];
        }
        for x in &mut d[v..] {
            *x = T::zero();
        }
    });
}
