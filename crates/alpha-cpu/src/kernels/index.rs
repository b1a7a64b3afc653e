//! Embedding gather and its deterministic pullback, the scatter-add.

use rayon::prelude::*;

use crate::real::Real;

fn row<T: Real>(id: T, rows: usize) -> usize {
    let r = id.f64();
    assert!(r >= 0.0 && (r as usize) < rows, "id {r} is outside a table of {rows} rows");
    r as usize
}

/// `out[i, :] = table[ids[i], :]`.
pub fn gather<T: Real>(table: &[T], rows: usize, ids: &[T], out: &mut [T]) {
    let d = table.len() / rows.max(1);
    out.par_chunks_mut(d.max(1)).zip(ids.par_iter()).for_each(|(o, &id)| {
        let r = row(id, rows);
        o.copy_from_slice(&table[r * d..(r + 1) * d]);
    });
}

/// `out[r, :] = Σ_{i : ids[i] = r} src[i, :]`, summed in increasing i for every r. Columns are
/// split across threads, rows never, so the order of additions is fixed.
pub fn scatter_add<T: Real>(src: &[T], ids: &[T], rows: usize, out: &mut [T]) {
    let d = out.len() / rows.max(1);
    out.iter_mut().for_each(|o| *o = T::zero());
    let ids: Vec<usize> = ids.iter().map(|&id| row(id, rows)).collect();
    const COLS: usize = 64;
    let blocks = d.div_ceil(COLS);
    // Each task owns a band of columns of every output row.
    let out_ptr = out.as_mut_ptr() as usize;
    (0..blocks).into_par_iter().for_each(|blk| {
        let c0 = blk * COLS;
        let c1 = (c0 + COLS).min(d);
        let out = out_ptr as *mut T;
        for (i, &r) in ids.iter().enumerate() {
            for c in c0..c1 {
                // SAFETY: tasks write disjoint column bands of `out`.
                unsafe { *out.add(r * d + c) = *out.add(r * d + c) + src[i * d + c] };
            }
        }
    });
}
