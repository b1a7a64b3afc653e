//! The linear recurrence along time, s_t = γ·s_{t−1} + u_t, stepped one position at a time (the
//! true recurrence, not a cumulative-sum shortcut that overflows for long windows).

use rayon::prelude::*;

use crate::real::Real;

/// u, out: `[B, T, C]`; gamma: `[C]`.
pub fn recurrence<T: Real>(u: &[T], gamma: &[T], b: usize, t: usize, reverse: bool, out: &mut [T]) {
    let c = gamma.len();
    out.par_chunks_mut(t * c).zip(u.par_chunks(t * c)).take(b).for_each(|(s, u)| {
        let mut state = vec![T::zero(); c];
        for step in 0..t {
            let i = if reverse { t - 1 - step } else { step };
            for j in 0..c {
                state[j] = gamma[j] * state[j] + u[i * c + j];
                s[i * c + j] = state[j];
            }
        }
    });
}
