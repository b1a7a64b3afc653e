//! The delta-rule memory, stepped one position at a time within each window:
//! M_t = M_{t−1} + β_t (v_t − M_{t−1} k_t) k_tᵀ from M_{−1} = m0, read o_t = M_t q_t.
//!
//! Windows (batch rows) run in parallel; within a window every sum runs in one fixed order, and
//! the batch's share of dm0 is added window by window in order, so results repeat bit for bit.
//!
//! The backward needs M_{t−1} and M_t at every t, in reverse. Storing every state costs
//! B·T·V·K numbers (KickDelta at 32 windows of 256: 31 M floats, 126 MB, more than the rest of
//! its step together); stepping the update backwards divides by (1 − β|k|²), unstable when that
//! is near 0. So the backward recomputes them from checkpoints ([`crate::kernels::replay`]):
//! about 2√T states a window (33 for T = 256).

use rayon::prelude::*;

use crate::kernels::replay::{sum_in_order, Replay};
use crate::real::Real;

/// Sizes: `b` windows of `t` positions, keys and queries of `k`, values of `v`.
pub struct Dims {
    pub b: usize,
    pub t: usize,
    pub k: usize,
    pub v: usize,
}

impl Dims {
    /// From q's shape `[B, T, K]` and v's `[B, T, V]`.
    pub fn of(q: &[usize], v: &[usize]) -> Self {
        Dims { b: q[0], t: q[1], k: q[2], v: v[2] }
    }
}

/// The backward's outputs: dq, dk `[B, T, K]`, dv `[B, T, V]`, dβ `[B, T]`, dm0 `[V, K]`.
pub struct Grads<'a, T> {
    pub dq: &'a mut [T],
    pub dk: &'a mut [T],
    pub dv: &'a mut [T],
    pub dbeta: &'a mut [T],
    pub dm0: &'a mut [T],
}

/// One update of the state `m` (`[V, K]`, row-major) with key `k`, value `v`, strength `beta`;
/// writes the error e = v − m·k into `e`.
fn step<T: Real>(m: &mut [T], k: &[T], v: &[T], beta: T, e: &mut [T]) {
    let kd = k.len();
    for (i, row) in m.chunks_exact_mut(kd).enumerate() {
        let mut u = T::zero();
        for j in 0..kd {
            u = u + row[j] * k[j];
        }
        e[i] = v[i] - u;
        let w = beta * e[i];
        for j in 0..kd {
            row[j] = row[j] + w * k[j];
        }
    }
}

/// o = m·q.
fn read<T: Real>(m: &[T], q: &[T], o: &mut [T]) {
    let kd = q.len();
    for (i, row) in m.chunks_exact(kd).enumerate() {
        let mut s = T::zero();
        for j in 0..kd {
            s = s + row[j] * q[j];
        }
        o[i] = s;
    }
}

/// q, k `[B, T, K]`, v `[B, T, V]`, β `[B, T]`, m0 `[V, K]` → o `[B, T, V]`.
pub fn forward<T: Real>(q: &[T], k: &[T], v: &[T], beta: &[T], m0: &[T], d: &Dims, o: &mut [T]) {
    let (t, kd, vd) = (d.t, d.k, d.v);
    o.par_chunks_mut(t * vd).enumerate().take(d.b).for_each(|(b, o)| {
        let mut m = m0.to_vec();
        let mut e = vec![T::zero(); vd];
        for s in 0..t {
            let (ks, vs) = ((b * t + s) * kd, (b * t + s) * vd);
            step(&mut m, &k[ks..ks + kd], &v[vs..vs + vd], beta[b * t + s], &mut e);
            read(&m, &q[ks..ks + kd], &mut o[s * vd..(s + 1) * vd]);
        }
    });
}

/// The reverse-time recurrence. With G = ∂L/∂M_t gathered from later positions and from o_t:
/// dq_t = M_tᵀ do_t; G += do_t q_tᵀ; with e = v_t − M_{t−1} k_t and de = β_t G k_t:
/// dβ_t = eᵀ G k_t, dv_t = de, dk_t = β_t Gᵀ e − M_{t−1}ᵀ de, then G ← G − de k_tᵀ
/// (= ∂L/∂M_{t−1}). dm0 is G after the first position, summed over windows.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Real>(q: &[T], k: &[T], v: &[T], beta: &[T], m0: &[T], dout: &[T], d: &Dims, grads: Grads<'_, T>) {
    let (t, kd, vd) = (d.t, d.k, d.v);
    let mk = vd * kd;
    let Grads { dq, dk, dv, dbeta, dm0 } = grads;
    let per_window: Vec<Vec<T>> = dq
        .par_chunks_mut(t * kd)
        .zip(dk.par_chunks_mut(t * kd))
        .zip(dv.par_chunks_mut(t * vd))
        .zip(dbeta.par_chunks_mut(t))
        .enumerate()
        .take(d.b)
        .map(|(b, (((dq, dk), dv), dbeta))| {
            let at_k = |s: usize| (b * t + s) * kd;
            let at_v = |s: usize| (b * t + s) * vd;
            let mut e = vec![T::zero(); vd];
            let mut replay = Replay::record(t, m0, |s, m| {
                step(m, &k[at_k(s)..at_k(s) + kd], &v[at_v(s)..at_v(s) + vd], beta[b * t + s], &mut e)
            });
            // The errors e = v − M_{t−1}k of the replayed chunk's positions.
            let mut errs = vec![T::zero(); replay.chunk_len() * vd];
            let mut grad = vec![T::zero(); mk];
            let mut gk = vec![T::zero(); vd];
            for positions in replay.chunks_last_first().collect::<Vec<_>>() {
                replay.replay(positions.clone(), |s, j, m| {
                    let err = &mut errs[j * vd..(j + 1) * vd];
                    step(m, &k[at_k(s)..at_k(s) + kd], &v[at_v(s)..at_v(s) + vd], beta[b * t + s], err)
                });
                for s in positions.clone().rev() {
                    let j = s - positions.start;
                    let (mprev, mnow) = replay.around(j);
                    let (ks, vs) = (at_k(s), at_v(s));
                    let (qs, kv, dos) = (&q[ks..ks + kd], &k[ks..ks + kd], &dout[vs..vs + vd]);
                    let bt = beta[b * t + s];
                    let err = &errs[j * vd..(j + 1) * vd];
                    let dqs = &mut dq[s * kd..(s + 1) * kd];
                    dqs.iter_mut().for_each(|x| *x = T::zero());
                    for i in 0..vd {
                        for c2 in 0..kd {
                            dqs[c2] = dqs[c2] + mnow[i * kd + c2] * dos[i];
                        }
                    }
                    let mut db = T::zero();
                    for i in 0..vd {
                        let row = &mut grad[i * kd..(i + 1) * kd];
                        let mut acc = T::zero();
                        for c2 in 0..kd {
                            row[c2] = row[c2] + dos[i] * qs[c2];
                            acc = acc + row[c2] * kv[c2];
                        }
                        gk[i] = acc;
                        db = db + err[i] * acc;
                    }
                    dbeta[s] = db;
                    let dks = &mut dk[s * kd..(s + 1) * kd];
                    dks.iter_mut().for_each(|x| *x = T::zero());
                    let dvs = &mut dv[s * vd..(s + 1) * vd];
                    for i in 0..vd {
                        let de = bt * gk[i];
                        dvs[i] = de;
                        let (grow, mrow) = (&mut grad[i * kd..(i + 1) * kd], &mprev[i * kd..(i + 1) * kd]);
                        for c2 in 0..kd {
                            dks[c2] = dks[c2] + bt * grow[c2] * err[i] - mrow[c2] * de;
                            grow[c2] = grow[c2] - de * kv[c2];
                        }
                    }
                }
            }
            grad
        })
        .collect();
    sum_in_order(dm0, &per_window);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state read back at a key just written with β = 1 and |k| = 1 is the value written:
    /// the delta rule replaces what the memory held for that key.
    #[test]
    fn a_full_strength_write_replaces_the_value_at_its_key() {
        let d = Dims { b: 1, t: 2, k: 2, v: 3 };
        let m0 = [0.5f64, -1.0, 2.0, 0.25, 1.5, 3.0];
        // Position 0 writes v0 at key e0; position 1 writes v1 at key e1 with β = 1 and queries e0.
        let k = [1.0, 0.0, 0.0, 1.0];
        let q = [0.0, 1.0, 1.0, 0.0];
        let v = [7.0, 8.0, 9.0, -1.0, -2.0, -3.0];
        let beta = [1.0, 1.0];
        let mut o = [0.0; 6];
        forward(&q, &k, &v, &beta, &m0, &d, &mut o);
        // o_0 = M_0 e1: column 1 of m0 (untouched by a write at e0).
        assert_eq!(&o[..3], &[-1.0, 0.25, 3.0]);
        // o_1 = M_1 e0: the value written at e0 at position 0.
        assert_eq!(&o[3..], &[7.0, 8.0, 9.0]);
    }

    /// dm0 is summed over windows, so two equal windows give twice one window's dm0, and the
    /// per-window gradients equal the single window's.
    #[test]
    fn windows_are_independent_and_dm0_sums_over_them() {
        let one = Dims { b: 1, t: 5, k: 3, v: 4 };
        let two = Dims { b: 2, ..one };
        let gen = |n: usize, s: f64| (0..n).map(|i| (i as f64 * 0.37 + s).sin()).collect::<Vec<f64>>();
        let (q, k, v) = (gen(15, 0.1), gen(15, 0.7), gen(20, 1.3));
        let beta: Vec<f64> = (0..5).map(|i| 0.2 + 0.1 * i as f64).collect();
        let (m0, dout) = (gen(12, 2.1), gen(20, 0.4));
        let run = |d: &Dims, reps: usize| {
            let rep = |x: &[f64]| x.repeat(reps);
            let (mut dq, mut dk, mut dv, mut db, mut dm0) =
                (vec![0.0; 15 * reps], vec![0.0; 15 * reps], vec![0.0; 20 * reps], vec![0.0; 5 * reps], vec![0.0; 12]);
            let grads = Grads { dq: &mut dq, dk: &mut dk, dv: &mut dv, dbeta: &mut db, dm0: &mut dm0 };
            backward(&rep(&q), &rep(&k), &rep(&v), &rep(&beta), &m0, &rep(&dout), d, grads);
            (dq, dk, dv, db, dm0)
        };
        let a = run(&one, 1);
        let b = run(&two, 2);
        assert_eq!(b.0, a.0.repeat(2));
        assert_eq!(b.1, a.1.repeat(2));
        assert_eq!(b.2, a.2.repeat(2));
        assert_eq!(b.3, a.3.repeat(2));
        for (x, y) in b.4.iter().zip(&a.4) {
            assert_eq!(*x, 2.0 * y);
        }
        assert!(a.4.iter().any(|&x| x != 0.0));
    }
}
