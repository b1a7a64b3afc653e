//! Data movement: reductions, permutes, slices, concatenation, plain copies.

use alpha_ir::Reduce;
use rayon::prelude::*;

use crate::real::Real;

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Reduce `x` over `axes` into `out` (laid out as the kept axes). Sums accumulate in f64, in
/// the input's index order: fixed, and accurate enough to judge a device by (an f32 running sum
/// over a 720,896-element gradient drifts by 1e-5 relative, more than a clip factor may).
pub fn reduce<T: Real>(kind: Reduce, x: &[T], shape: &[usize], axes: &[usize], out: &mut [T]) {
    let rank = shape.len();
    let count: usize = axes.iter().map(|&a| shape[a]).product::<usize>().max(1);
    // Fast path: reducing trailing axes only → contiguous rows.
    let trailing = axes.iter().all(|&a| a >= rank - axes.len());
    if trailing && !axes.is_empty() {
        out.par_iter_mut().zip(x.par_chunks(count)).for_each(|(o, row)| {
            let sum = || row.iter().map(|v| v.f64()).sum::<f64>();
            *o = match kind {
                Reduce::Sum => T::of(sum()),
                Reduce::Mean => T::of(sum() / count as f64),
                Reduce::Max => row.iter().copied().fold(T::neg_infinity(), T::max),
            };
        });
        return;
    }
    // General path: walk the input once, accumulate by output index.
    let kept: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&a| shape[a]).collect();
    let ks = strides(&kept_shape);
    let init = if kind == Reduce::Max { f64::NEG_INFINITY } else { 0.0 };
    let mut acc = vec![init; out.len()];
    let mut idx = vec![0usize; rank];
    for &v in x {
        let o: usize = kept.iter().zip(&ks).map(|(&a, s)| idx[a] * s).sum();
        acc[o] = if kind == Reduce::Max { acc[o].max(v.f64()) } else { acc[o] + v.f64() };
        for a in (0..rank).rev() {
            idx[a] += 1;
            if idx[a] < shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    let scale = if kind == Reduce::Mean { 1.0 / count as f64 } else { 1.0 };
    for (o, a) in out.iter_mut().zip(acc) {
        *o = T::of(a * scale);
    }
}

/// Σ x² over every element of every input, accumulated in f64 in input order, element order
/// within an input (the IR's `SumSquares`: the global gradient norm's square).
pub fn sum_squares<T: Real>(xs: &[&[T]]) -> f64 {
    let mut acc = 0.0f64;
    for x in xs {
        for &v in x.iter() {
            let d = v.f64();
            acc += d * d;
        }
    }
    acc
}

pub fn permute<T: Real>(x: &[T], shape: &[usize], perm: &[usize], out: &mut [T]) {
    let xs = strides(shape);
    let os: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let src_strides: Vec<usize> = perm.iter().map(|&p| xs[p]).collect();
    let rank = os.len();
    if rank == 0 {
        out[0] = x[0];
        return;
    }
    let n = os[rank - 1];
    let last = src_strides[rank - 1];
    out.par_chunks_mut(n.max(1)).enumerate().for_each(|(r, o)| {
        // Decode row index r into the leading output indices.
        let mut rem = r;
        let mut base = 0;
        for a in (0..rank - 1).rev() {
            base += (rem % os[a]) * src_strides[a];
            rem /= os[a];
        }
        for (j, o) in o.iter_mut().enumerate() {
            *o = x[base + j * last];
        }
    });
}

/// Read the block `start..start+len` along `axis` of `x` (shape `shape`) into `out`.
pub fn slice<T: Real>(x: &[T], shape: &[usize], axis: usize, start: usize, len: usize, out: &mut [T]) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    for o in 0..outer {
        let src = (o * shape[axis] + start) * inner;
        out[o * len * inner..(o + 1) * len * inner].copy_from_slice(&x[src..src + len * inner]);
    }
}

/// Write `part` (length `len` along `axis`) into `out` (shape `shape`) at `at` along `axis`.
pub fn place<T: Real>(part: &[T], shape: &[usize], axis: usize, at: usize, len: usize, out: &mut [T]) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    for o in 0..outer {
        let dst = (o * shape[axis] + at) * inner;
        out[dst..dst + len * inner].copy_from_slice(&part[o * len * inner..(o + 1) * len * inner]);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sum_squares_spans_every_input_in_f64() {
        let a = [1.0f32, 2.0];
        let b = [3.0f32];
        let big = [1e8f32, 1.0];
        assert_eq!(super::sum_squares::<f32>(&[&a, &b]), 14.0);
        // 1e16 + 1 is exact in f64, lost in an f32 running sum.
        assert_eq!(super::sum_squares::<f32>(&[&big]), 1e16 + 1.0);
    }
}
