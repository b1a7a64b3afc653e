//! The harmonic scan: for each window, head h and harmonic ℓ, a state S ∈ R^D stepped one
//! position at a time, S_t = γ_{h,ℓ}·S_{t−1} + w_{t,h,ℓ}·v_{t,h} from S_{−1} = 0, read as
//! y_{t,h} = Σ_ℓ r_{t,h,ℓ}·S_{t,h,ℓ}. This is the true recurrence: no cumulative sum scaled by
//! γ^{−t}, which overflows f32 once t·|ln γ| passes ~88 (a few hundred bytes at the decays
//! Diakosmos learns).
//!
//! Windows (batch rows) run in parallel; within a window every sum runs in one fixed order, and
//! the batch's share of dγ is added window by window in order, so results repeat bit for bit.
//!
//! The backward needs S_t and S_{t−1} at every t, in reverse. Stepping the recurrence backwards
//! divides by γ (unstable for short memories), and storing every state costs B·T·H·L·D numbers
//! (Diakosmos at one 2,048-byte window: 21.8 M floats a block). So it recomputes them from
//! checkpoints ([`crate::kernels::replay`]): about 2√T states a window.

use rayon::prelude::*;

use crate::kernels::replay::{sum_in_order, Replay};
use crate::real::Real;

/// Sizes: `b` windows of `t` positions, `h` heads of `l` harmonics, values of `d`.
pub struct Dims {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub l: usize,
    pub d: usize,
}

impl Dims {
    /// From r's shape `[B, T, H, L]` and v's `[B, T, H, D]`.
    pub fn of(r: &[usize], v: &[usize]) -> Self {
        Dims { b: r[0], t: r[1], h: r[2], l: r[3], d: v[3] }
    }
}

/// The backward's outputs: dr, dw `[B, T, H, L]`, dv `[B, T, H, D]`, dγ `[H, L]`.
pub struct Grads<'a, T> {
    pub dr: &'a mut [T],
    pub dw: &'a mut [T],
    pub dv: &'a mut [T],
    pub dgamma: &'a mut [T],
}

/// One position of every head and harmonic: `state` (`[H, L, D]`) ← γ·state + w·v, where `w`
/// is the position's `[H, L]` and `v` its `[H, D]`.
fn step<T: Real>(state: &mut [T], gamma: &[T], w: &[T], v: &[T], l: usize, d: usize) {
    for (hl, s) in state.chunks_exact_mut(d).enumerate() {
        let (g, a) = (gamma[hl], w[hl]);
        let vh = &v[(hl / l) * d..][..d];
        for (x, &vi) in s.iter_mut().zip(vh) {
            *x = g * *x + a * vi;
        }
    }
}

/// y (`[H, D]`) = Σ_ℓ r_ℓ·S_ℓ per head, ℓ in order.
fn read<T: Real>(state: &[T], r: &[T], l: usize, d: usize, y: &mut [T]) {
    for (head, yh) in y.chunks_exact_mut(d).enumerate() {
        yh.iter_mut().for_each(|x| *x = T::zero());
        for k in 0..l {
            let (rk, s) = (r[head * l + k], &state[(head * l + k) * d..][..d]);
            for (x, &si) in yh.iter_mut().zip(s) {
                *x = *x + rk * si;
            }
        }
    }
}

/// r, w `[B, T, H, L]`, v `[B, T, H, D]`, γ `[H, L]` → y `[B, T, H, D]`.
pub fn forward<T: Real>(r: &[T], w: &[T], v: &[T], gamma: &[T], dm: &Dims, y: &mut [T]) {
    let (t, hl, hd) = (dm.t, dm.h * dm.l, dm.h * dm.d);
    y.par_chunks_mut(t * hd).enumerate().take(dm.b).for_each(|(b, y)| {
        let mut state = vec![T::zero(); hl * dm.d];
        for s in 0..t {
            let (at_l, at_d) = ((b * t + s) * hl, (b * t + s) * hd);
            step(&mut state, gamma, &w[at_l..at_l + hl], &v[at_d..at_d + hd], dm.l, dm.d);
            read(&state, &r[at_l..at_l + hl], dm.l, dm.d, &mut y[s * hd..(s + 1) * hd]);
        }
    });
}

/// The reverse-time recurrence. With G_t = ∂L/∂S_t, gathered from the read at t and from the
/// state at t + 1 (G_t = r_t·dy_t + γ·G_{t+1}): dr_t = ⟨S_t, dy_t⟩, dw_t = ⟨G_t, v_t⟩,
/// dv_t = Σ_ℓ w_{t,ℓ}·G_{t,ℓ}, dγ = Σ_t ⟨G_t, S_{t−1}⟩, summed over windows.
pub fn backward<T: Real>(r: &[T], w: &[T], v: &[T], gamma: &[T], dy: &[T], dm: &Dims, grads: Grads<'_, T>) {
    let (t, l, d) = (dm.t, dm.l, dm.d);
    let (hl, hd) = (dm.h * l, dm.h * d);
    let Grads { dr, dw, dv, dgamma } = grads;
    let per_window: Vec<Vec<T>> = dr
        .par_chunks_mut(t * hl)
        .zip(dw.par_chunks_mut(t * hl))
        .zip(dv.par_chunks_mut(t * hd))
        .enumerate()
        .take(dm.b)
        .map(|(b, ((dr, dw), dv))| {
            let at_l = |s: usize| (b * t + s) * hl;
            let at_d = |s: usize| (b * t + s) * hd;
            let mut replay = Replay::record(t, &vec![T::zero(); hl * d], |s, state| {
                step(state, gamma, &w[at_l(s)..at_l(s) + hl], &v[at_d(s)..at_d(s) + hd], l, d)
            });
            // ∂L/∂S_t from positions after t (γ·G_{t+1}), then G_t once the read at t is added.
            let mut grad = vec![T::zero(); hl * d];
            let mut dg = vec![T::zero(); hl];
            for positions in replay.chunks_last_first().collect::<Vec<_>>() {
                replay.replay(positions.clone(), |s, _, state| {
                    step(state, gamma, &w[at_l(s)..at_l(s) + hl], &v[at_d(s)..at_d(s) + hd], l, d)
                });
                for s in positions.clone().rev() {
                    let (prev, now) = replay.around(s - positions.start);
                    let (rs, ws) = (&r[at_l(s)..at_l(s) + hl], &w[at_l(s)..at_l(s) + hl]);
                    let (vs, dys) = (&v[at_d(s)..at_d(s) + hd], &dy[at_d(s)..at_d(s) + hd]);
                    let (drs, dws) = (&mut dr[s * hl..(s + 1) * hl], &mut dw[s * hl..(s + 1) * hl]);
                    let dvs = &mut dv[s * hd..(s + 1) * hd];
                    dvs.iter_mut().for_each(|x| *x = T::zero());
                    for k in 0..hl {
                        let head = k / l;
                        let (vh, dyh) = (&vs[head * d..][..d], &dys[head * d..][..d]);
                        let (sp, sn) = (&prev[k * d..][..d], &now[k * d..][..d]);
                        let gk = &mut grad[k * d..][..d];
                        let (mut rdot, mut wdot, mut gdot) = (T::zero(), T::zero(), T::zero());
                        for i in 0..d {
                            rdot = rdot + sn[i] * dyh[i];
                            gk[i] = gk[i] + rs[k] * dyh[i];
                            wdot = wdot + gk[i] * vh[i];
                            gdot = gdot + gk[i] * sp[i];
                        }
                        drs[k] = rdot;
                        dws[k] = wdot;
                        dg[k] = dg[k] + gdot;
                        let dvh = &mut dvs[head * d..][..d];
                        for i in 0..d {
                            dvh[i] = dvh[i] + ws[k] * gk[i];
                            gk[i] = gamma[k] * gk[i];
                        }
                    }
                }
            }
            dg
        })
        .collect();
    sum_in_order(dgamma, &per_window);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recurrence written out as its definition, every state kept, in f64.
    fn direct(r: &[f64], w: &[f64], v: &[f64], gamma: &[f64], dm: &Dims) -> Vec<f64> {
        let (t, h, l, d) = (dm.t, dm.h, dm.l, dm.d);
        let mut y = vec![0.0; dm.b * t * h * d];
        for b in 0..dm.b {
            // s[k][i] for k = head·L + ℓ.
            let mut s = vec![vec![0.0; d]; h * l];
            for p in 0..t {
                for head in 0..h {
                    for k in 0..l {
                        let hk = head * l + k;
                        for i in 0..d {
                            s[hk][i] = gamma[hk] * s[hk][i]
                                + w[(b * t + p) * h * l + hk] * v[((b * t + p) * h + head) * d + i];
                        }
                    }
                    for i in 0..d {
                        y[((b * t + p) * h + head) * d + i] =
                            (0..l).map(|k| r[(b * t + p) * h * l + head * l + k] * s[head * l + k][i]).sum::<f64>();
                    }
                }
            }
        }
        y
    }

    fn values(n: usize, phase: f64) -> Vec<f64> {
        (0..n).map(|i| (i as f64 * 0.61 + phase).sin()).collect()
    }

    #[test]
    fn the_kernel_is_the_recurrence_as_defined() {
        let dm = Dims { b: 2, t: 9, h: 3, l: 2, d: 4 };
        let (r, w, v) = (values(2 * 9 * 6, 0.3), values(2 * 9 * 6, 1.1), values(2 * 9 * 12, 2.0));
        let gamma: Vec<f64> = (0..6).map(|i| 0.3 + 0.1 * i as f64).collect();
        let mut y = vec![0.0; 2 * 9 * 12];
        forward(&r, &w, &v, &gamma, &dm, &mut y);
        let want = direct(&r, &w, &v, &gamma, &dm);
        for (i, (a, b)) in y.iter().zip(&want).enumerate() {
            assert!((a - b).abs() < 1e-12, "y[{i}]: kernel {a} vs definition {b}");
        }
        // Position 0 of each window sees only itself: the state starts from zero in every
        // window, so the second window's first output ignores everything in the first.
        let at = 9 * 12;
        for head in 0..3 {
            for i in 0..4 {
                let only: f64 = (0..2).map(|k| r[9 * 6 + head * 2 + k] * w[9 * 6 + head * 2 + k]).sum::<f64>()
                    * v[at + head * 4 + i];
                assert!((y[at + head * 4 + i] - only).abs() < 1e-12);
            }
        }
    }

    /// Over a long window with short memories, the cumulative-sum form overflows f32
    /// (γ^{−t} = 2^{600} here) while the true scan stays at the definition's values.
    #[test]
    fn long_windows_with_short_memories_stay_finite_and_exact() {
        let dm = Dims { b: 1, t: 600, h: 1, l: 2, d: 3 };
        let (r, w, v) = (values(1200, 0.2), values(1200, 0.9), values(1800, 1.7));
        let gamma = [0.5, 0.25];
        assert!((0.5f32).powi(-600).is_infinite(), "the shortcut's scale would overflow");
        let to32 = |x: &[f64]| x.iter().map(|&a| a as f32).collect::<Vec<f32>>();
        let mut y = vec![0.0f32; 1800];
        forward(&to32(&r), &to32(&w), &to32(&v), &to32(&gamma), &dm, &mut y);
        let want = direct(&r, &w, &v, &gamma, &dm);
        for (i, (a, b)) in y.iter().zip(&want).enumerate() {
            assert!(a.is_finite() && (f64::from(*a) - b).abs() < 1e-5, "y[{i}]: {a} vs {b}");
        }
    }

    /// dγ sums over windows, so two equal windows give twice one window's, and every other
    /// gradient is the single window's, repeated.
    #[test]
    fn windows_are_independent_and_dgamma_sums_over_them() {
        let one = Dims { b: 1, t: 7, h: 2, l: 3, d: 2 };
        let two = Dims { b: 2, ..one };
        let (r, w, v, dy) = (values(42, 0.1), values(42, 0.7), values(28, 1.3), values(28, 2.4));
        let gamma = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4];
        let run = |dm: &Dims, reps: usize| {
            let rep = |x: &[f64]| x.repeat(reps);
            let (mut dr, mut dw, mut dv, mut dg) =
                (vec![0.0; 42 * reps], vec![0.0; 42 * reps], vec![0.0; 28 * reps], vec![0.0; 6]);
            let grads = Grads { dr: &mut dr, dw: &mut dw, dv: &mut dv, dgamma: &mut dg };
            backward(&rep(&r), &rep(&w), &rep(&v), &gamma, &rep(&dy), dm, grads);
            (dr, dw, dv, dg)
        };
        let a = run(&one, 1);
        let b = run(&two, 2);
        assert_eq!(b.0, a.0.repeat(2));
        assert_eq!(b.1, a.1.repeat(2));
        assert_eq!(b.2, a.2.repeat(2));
        for (x, y) in b.3.iter().zip(&a.3) {
            assert_eq!(*x, 2.0 * y);
        }
        assert!(a.3.iter().all(|&x| x != 0.0));
    }
}
