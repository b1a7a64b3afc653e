//! Batched matrix products through `matrixmultiply` (its threading splits output blocks, never
//! the inner dimension, so results do not depend on the thread count). bf16 operands arrive
//! already rounded by a cast; accumulation is in the arena's float type.

use crate::real::Real;

/// `out[b] = op(a[b])·op(b[b])`; a 2-D `b` (`b_batched == false`) is shared by every batch.
#[allow(clippy::too_many_arguments)]
pub fn matmul<T: Real>(
    a: &[T],
    b: &[T],
    out: &mut [T],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
    b_batched: bool,
) {
    // Row/column strides of op(A) [m×k] and op(B) [k×n] in row-major storage.
    let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
    let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
    for i in 0..batch {
        let ao = &a[i * m * k..(i + 1) * m * k];
        let bo = if b_batched { &b[i * k * n..(i + 1) * k * n] } else { &b[..k * n] };
        let co = &mut out[i * m * n..(i + 1) * m * n];
        if k == 0 {
            co.iter_mut().for_each(|c| *c = T::zero());
            continue;
        }
        // SAFETY: the slices hold exactly m·k, k·n and m·n elements laid out by these strides.
        unsafe { T::gemm(m, k, n, ao.as_ptr(), rsa, csa, bo.as_ptr(), rsb, csb, co.as_mut_ptr(), n as isize, 1) };
    }
}
