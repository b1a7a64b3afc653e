//! RMSNorm over the last axis: forward, input gradient, and the gain's deterministic gradient.
//!
//! Why: Polf normalises its residual stream (rows of 512) and every q and k head (rows of 64)
//! with RMSNorms, 38 of them a step (SYSTEMS.md §4). An RMSNorm is a LayerNorm without the mean
//! and the bias, so this family is [`layernorm`]'s sibling and shares its machinery: the
//! columns a thread owns and loads once (`layernorm::owned_cols_by`), the band partials of
//! the gain's gradient (`layernorm::band_partials_kernel`) and their fold in order
//! (`layernorm::fold_bands`) — so the gain's gradient is the CPU reference's sum
//! (`alpha-cpu/src/kernels/norms.rs`), operation for operation: each band of
//! [`layernorm::BAND`] rows summed in order, then the bands in order from +0.
//!
//! How: a row is reduced by a group of threads in a fixed order — each thread's columns in
//! column order, then butterflies across the warp, then (for a block) the warps in order — so
//! the bits never depend on scheduling. Wide rows (Polf's 512) take a block a row, as
//! LayerNorm's do; short rows (Polf's heads of 64) take a warp a row, four rows a block
//! ([`Layout`]): a block of 128 threads over 64 columns would leave half its threads idle and
//! pay two barriers a row for 64 values, over 8,192 rows a norm at one context's q heads and
//! 524,288 at 64 contexts.
//! Everything is f32 with `.rn` arithmetic in the reference's order of operations:
//! `rstd = 1/√(Σx²/C + ε)` (IEEE square root and division), `y = x·rstd·g`, and the input
//! gradient `rstd·(dy·g − x·rstd·mean(dy·g·x·rstd))`. C and the row count are immediates.

use super::layernorm::{self, guarded, ld, ld_owned, owned_cols_by, st, store_y, Norm};
use crate::ptx::{addr, Kernel, ParamTy, Reg, RegKind};

/// Threads per block of every row kernel.
pub const THREADS: u32 = layernorm::THREADS;
/// Rows of up to this many columns take a warp a row (eight columns a lane at most); wider
/// rows a block a row.
pub const WARP_ROW_MAX_COLS: usize = 256;

/// How a row kernel's rows map onto its threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A block of [`THREADS`] a row.
    Block,
    /// A warp a row, `THREADS / 32` rows a block.
    Warp,
}

impl Layout {
    /// The layout of a norm of shape `n`: a warp a row up to [`WARP_ROW_MAX_COLS`] columns.
    pub fn of(n: Norm) -> Layout {
        if n.c <= WARP_ROW_MAX_COLS {
            Layout::Warp
        } else {
            Layout::Block
        }
    }

    /// Threads sharing a row.
    pub fn lanes(self) -> u32 {
        match self {
            Layout::Block => THREADS,
            Layout::Warp => 32,
        }
    }

    /// Rows a block.
    pub fn rows_per_block(self) -> u32 {
        THREADS / self.lanes()
    }

    fn suffix(self) -> &'static str {
        match self {
            Layout::Block => "",
            Layout::Warp => "_warp",
        }
    }
}

/// Grid and block of the row kernels ([`forward_kernel`], [`backward_dx_kernel`]).
pub fn row_launch(n: Norm) -> ((u32, u32, u32), (u32, u32, u32)) {
    let per = Layout::of(n).rows_per_block() as usize;
    (((n.rows.div_ceil(per)).max(1) as u32, 1, 1), (THREADS, 1, 1))
}

/// f32 scratch the gain's gradient needs: one partial a band and column.
pub fn scratch_floats(n: Norm) -> usize {
    n.bands() * n.c
}

/// One thread's place in a row kernel: its lane in the row's group, the row, the row's first
/// element, its columns, and what the group's reduction needs.
struct RowAt {
    layout: Layout,
    tid: Reg,
    lane: Reg,
    row: Reg,
    row0: Reg,
    owned: Vec<(Reg, Option<Reg>)>,
    /// Shared memory of a block's reduction (a block a row).
    red: Option<String>,
    /// The label past the row's work, where a warp whose row lies past the end goes at once.
    end: String,
}

/// Enters a row kernel for shape `n`: the thread's row and columns. A warp whose row lies past
/// the last (a last, partial block) branches to `end` as a whole, so its lanes never reach the
/// reductions' shuffles; a block's row is always in range.
fn enter_row(k: &mut Kernel, n: Norm) -> RowAt {
    let layout = Layout::of(n);
    let c = n.c as u32;
    let red = (layout == Layout::Block).then(|| k.shared("red", 128, 16));
    let tid = k.sreg("%tid.x");
    let block = k.sreg("%ctaid.x");
    let end = k.label("end");
    let (lane, row) = match layout {
        Layout::Block => (tid, block),
        Layout::Warp => {
            let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
            let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
            let row = k.tri("mad.lo.u32", RegKind::B32, block, layout.rows_per_block(), warp);
            if !n.rows.is_multiple_of(layout.rows_per_block() as usize) {
                let past = k.setp("ge.u32", row, n.rows as u32);
                k.bra_if(past, false, &end);
            }
            (lane, row)
        }
    };
    let row0 = k.bin("mul.lo.u32", RegKind::B32, row, c);
    let owned = owned_cols_by(k, lane, c, layout.lanes());
    RowAt { layout, tid, lane, row, row0, owned, red, end }
}

impl RowAt {
    /// The row's sum of the group's per-thread sums `v`, in a fixed order; every thread of the
    /// row gets it.
    fn sum(&self, k: &mut Kernel, v: Reg) -> Reg {
        match (&self.red, self.layout) {
            (Some(red), Layout::Block) => k.block_reduce_f32(v, "add", red, self.tid, THREADS),
            _ => k.warp_reduce_f32(v, "add.f32"),
        }
    }

    /// This thread's sum, in column order, of `term` over its columns.
    fn partial(&self, k: &mut Kernel, mut term: impl FnMut(&mut Kernel, usize) -> Reg) -> Reg {
        let s = k.imm_f32(0.0);
        for (i, &(_, ok)) in self.owned.iter().enumerate() {
            let t = term(k, i);
            guarded(k, ok, "add.rn.f32", [s.into(), s.into(), t.into()]);
        }
        s
    }

    /// Stores `v` at `base[row]` from the row's first lane.
    fn store_per_row(&self, k: &mut Kernel, base: Reg, v: Reg) {
        let first = k.setp("eq.u32", self.lane, 0u32);
        let skip = k.label("skip");
        k.bra_if(first, true, &skip);
        st(k, base, self.row, v);
        k.place(&skip);
    }

    fn finish(&self, k: &mut Kernel) {
        k.place(&self.end);
        k.ret();
    }
}

/// Forward: params (y, rstd, x, gain); grid and block [`row_launch`].
pub fn forward_kernel(n: Norm, eps: f32) -> Kernel {
    forward_kernel_storing(n, eps, false)
}

/// [`forward_kernel`], with `bf16` storing y rounded to bf16 (round to nearest even): where a
/// cast to bf16 alone reads the norm's output (the products of Polf's residual stream), the
/// norm stores it and the f32 output is never written.
pub fn forward_kernel_storing(n: Norm, eps: f32, bf16: bool) -> Kernel {
    let c = n.c as u32;
    let layout = Layout::of(n);
    let name = format!("rmsnorm_fwd{}{}", layout.suffix(), if bf16 { "_bf16" } else { "" });
    let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
    let y = k.param_reg("y", ParamTy::U64);
    let rstd = k.param_reg("rstd", ParamTy::U64);
    let x = k.param_reg("x", ParamTy::U64);
    let gain = k.param_reg("gain", ParamTy::U64);
    let at = enter_row(&mut k, n);
    // The row's values, read once.
    let xs = ld_owned(&mut k, x, Some(at.row0), &at.owned, None);
    let sq = at.partial(&mut k, |k, i| k.bin("mul.rn.f32", RegKind::F32, xs[i], xs[i]));
    let total = at.sum(&mut k, sq);
    let ms = k.bin("div.rn.f32", RegKind::F32, total, c as f32);
    let ve = k.bin("add.rn.f32", RegKind::F32, ms, eps);
    let sd = k.un("sqrt.rn.f32", RegKind::F32, ve);
    let r = k.bin("div.rn.f32", RegKind::F32, 1.0f32, sd);
    let gs = ld_owned(&mut k, gain, None, &at.owned, None);
    for ((&v, &g), &(j, ok)) in xs.iter().zip(&gs).zip(&at.owned) {
        let i = k.bin("add.u32", RegKind::B32, at.row0, j);
        let xr = k.bin("mul.rn.f32", RegKind::F32, v, r);
        let o = k.bin("mul.rn.f32", RegKind::F32, xr, g);
        store_y(&mut k, y, i, o, ok, bf16);
    }
    at.store_per_row(&mut k, rstd, r);
    at.finish(&mut k);
    k
}

/// Input gradient: params (dx, x, gain, rstd, dy); grid and block [`row_launch`]. A row is read
/// whole before any of it is stored, so dx may take x's or dy's place.
pub fn backward_dx_kernel(n: Norm) -> Kernel {
    backward_dx_kernel_adding(n, false)
}

/// [`backward_dx_kernel`], with `residual` adding a tensor to the input gradient as it is
/// stored: param `r` after the others, `dx = (…) + r[i]` — the Add that follows a pre-norm
/// block's RMSNorm backward (the residual stream's gradient), in the same f32 addition, so its
/// launch, reading both and writing the sum again, is not needed.
pub fn backward_dx_kernel_adding(n: Norm, residual: bool) -> Kernel {
    let c = n.c as u32;
    let layout = Layout::of(n);
    let name = format!("rmsnorm_bwd_dx{}{}", layout.suffix(), if residual { "_add" } else { "" });
    let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
    let [dx, x, gain, rstd, dy] = ["dx", "x", "gain", "rstd", "dy"].map(|p| k.param_reg(p, ParamTy::U64));
    let r = residual.then(|| k.param_reg("r", ParamTy::U64));
    let at = enter_row(&mut k, n);
    let rs = ld(&mut k, rstd, at.row);
    // The row's dy, gain and x, read once for both passes.
    let ds = ld_owned(&mut k, dy, Some(at.row0), &at.owned, None);
    let gs = ld_owned(&mut k, gain, None, &at.owned, None);
    let xs = ld_owned(&mut k, x, Some(at.row0), &at.owned, None);
    let gds: Vec<Reg> = ds.iter().zip(&gs).map(|(&d, &g)| k.bin("mul.rn.f32", RegKind::F32, d, g)).collect();
    let s = at.partial(&mut k, |k, i| {
        let t = k.bin("mul.rn.f32", RegKind::F32, gds[i], xs[i]);
        k.bin("mul.rn.f32", RegKind::F32, t, rs)
    });
    let total = at.sum(&mut k, s);
    let mean_gx = k.bin("div.rn.f32", RegKind::F32, total, c as f32);
    // The residual's row, read after the reduction (fewer registers held across it).
    let rv = r.map(|r| ld_owned(&mut k, r, Some(at.row0), &at.owned, None));
    for (col, ((&gd, &v), &(j, ok))) in gds.iter().zip(&xs).zip(&at.owned).enumerate() {
        let i = k.bin("add.u32", RegKind::B32, at.row0, j);
        let xr = k.bin("mul.rn.f32", RegKind::F32, v, rs);
        let t = k.bin("mul.rn.f32", RegKind::F32, xr, mean_gx);
        let t = k.bin("sub.rn.f32", RegKind::F32, gd, t);
        let o = k.bin("mul.rn.f32", RegKind::F32, rs, t);
        let o = match &rv {
            Some(rv) => k.bin("add.rn.f32", RegKind::F32, o, rv[col]),
            None => o,
        };
        let a = k.addr_of(dx, i, 4);
        guarded(&mut k, ok, "st.global.f32", [addr(a, 0), o.into()]);
    }
    at.finish(&mut k);
    k
}

/// The gain's gradient, pass 1: params (partials, x, rstd, dy); grid and block
/// [`partials_launch`]. Writes `partials[band·C + j]`, the band's rows' `dy·x·rstd` summed in
/// order.
pub fn backward_partials_kernel(n: Norm) -> Kernel {
    layernorm::band_partials_kernel("rmsnorm_bwd_params", n, false)
}

/// Grid and block of [`backward_partials_kernel`]: a thread a column, a block row a band.
pub fn partials_launch(n: Norm) -> ((u32, u32, u32), (u32, u32, u32)) {
    (((n.c as u32).div_ceil(layernorm::THREADS), n.bands() as u32, 1), (layernorm::THREADS, 1, 1))
}

/// The gain's gradient, pass 2: params (dgain, partials); grid and block [`finish_launch`].
/// Each column's bands are added in order from +0 by one lane (LayerNorm's fold, for one
/// column sum instead of two).
pub fn backward_finish_kernel(n: Norm) -> Kernel {
    let mut k = Kernel::new("rmsnorm_bwd_params_finish").with_block(layernorm::FINISH_THREADS, 1, 1);
    let dgain = k.param_reg("dgain", ParamTy::U64);
    let partials = k.param_reg("partials", ParamTy::U64);
    let tid = k.sreg("%tid.x");
    let f = k.sreg("%ctaid.x");
    layernorm::fold_bands(&mut k, n, &[dgain], partials, tid, f, layernorm::FINISH_THREADS);
    k.ret();
    k
}

/// Grid and block of [`backward_finish_kernel`]: a block a 32 columns.
pub fn finish_launch(n: Norm) -> ((u32, u32, u32), (u32, u32, u32)) {
    ((layernorm::fold_blocks_of(n, 1), 1, 1), (layernorm::FINISH_THREADS, 1, 1))
}

// ---- launch arguments, built once for the lowering and the lab's checks ----------------------

/// The forward's arguments: y, rstd, x, gain.
pub fn forward_arguments<T>(tensors: [T; 4]) -> Vec<T> {
    Vec::from(tensors)
}

/// The input gradient's arguments: dx (or the residual's sum), x, gain, rstd, dy, then the
/// residual where the kernel adds it.
pub fn dx_arguments<T>(tensors: [T; 5], residual: Option<T>) -> Vec<T> {
    let mut args = Vec::from(tensors);
    args.extend(residual);
    args
}

/// Pass 1's arguments: the partials, x, rstd, dy.
pub fn partials_arguments<T>(tensors: [T; 4]) -> Vec<T> {
    Vec::from(tensors)
}

/// Pass 2's arguments: the gain's gradient, the partials.
pub fn finish_arguments<T>(tensors: [T; 2]) -> Vec<T> {
    Vec::from(tensors)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polf's shapes (the stream's rows of 512 at one context, the q heads' rows of 64) and a
    /// ragged one of each layout (a last, partial block of warps; columns past a lane's last).
    const SHAPES: [Norm; 4] = [
        Norm { rows: 1024, c: 512 },
        Norm { rows: 8192, c: 64 },
        Norm { rows: 1001, c: 100 },
        Norm { rows: 37, c: 600 },
    ];

    #[test]
    fn each_builder_fills_its_kernels_parameters() {
        let count = |k: Kernel| {
            assert!(k.params.iter().all(|p| p.ty == ParamTy::U64), "{}", k.name);
            k.params.len()
        };
        for n in SHAPES {
            assert_eq!(count(forward_kernel_storing(n, 1e-5, true)), forward_arguments([0u64; 4]).len());
            assert_eq!(count(backward_dx_kernel(n)), dx_arguments([0u64; 5], None).len());
            assert_eq!(count(backward_dx_kernel_adding(n, true)), dx_arguments([0u64; 5], Some(1)).len());
            assert_eq!(count(backward_partials_kernel(n)), partials_arguments([0u64; 4]).len());
            assert_eq!(count(backward_finish_kernel(n)), finish_arguments([0u64; 2]).len());
        }
    }

    #[test]
    fn kernels_render_within_budget() {
        for n in SHAPES {
            for k in [
                forward_kernel(n, f32::EPSILON),
                forward_kernel_storing(n, f32::EPSILON, true),
                backward_dx_kernel(n),
                backward_dx_kernel_adding(n, true),
                backward_partials_kernel(n),
                backward_finish_kernel(n),
            ] {
                k.check_budget().unwrap();
                let text = k.render();
                assert!(text.contains(&format!(".entry {}", k.name)), "{}", k.name);
                // Deterministic: no atomics, the reductions in a fixed order.
                assert!(!text.contains("atom.") && !text.contains("red.global"), "{}", k.name);
            }
        }
    }

    /// Short rows take a warp a row (four a block, no shared memory or barrier), wide rows a
    /// block a row; the grids cover every row once, a ragged last block included.
    #[test]
    fn short_rows_take_a_warp_a_row() {
        let head = Norm { rows: 8192, c: 64 };
        assert_eq!(Layout::of(head), Layout::Warp);
        assert_eq!(row_launch(head), ((2048, 1, 1), (128, 1, 1)));
        let k = backward_dx_kernel(head);
        assert_eq!(k.name, "rmsnorm_bwd_dx_warp");
        let text = k.render();
        assert!(text.contains("shfl.sync.bfly") && !text.contains("bar.sync") && !text.contains(".shared"));
        let stream = Norm { rows: 1024, c: 512 };
        assert_eq!(Layout::of(stream), Layout::Block);
        assert_eq!(row_launch(stream), ((1024, 1, 1), (128, 1, 1)));
        assert_eq!(forward_kernel(stream, 1e-5).name, "rmsnorm_fwd");
        assert_eq!(row_launch(Norm { rows: 1001, c: 100 }).0 .0, 251);
        // A ragged last block: its warps past the end leave before the shuffles.
        assert!(forward_kernel(Norm { rows: 1001, c: 100 }, 1e-5).render().contains("setp.ge.u32"));
        assert!(!forward_kernel(head, 1e-5).render().contains("setp.ge.u32"));
    }

    /// The gain's fold writes one column sum: a block per 32 columns, and the partials it reads
    /// are one a band and column.
    #[test]
    fn the_gains_fold_covers_its_columns_once() {
        let n = Norm { rows: 8192, c: 64 };
        assert_eq!(finish_launch(n).0, (2, 1, 1));
        assert_eq!(partials_launch(n).0, (1, 512, 1));
        assert_eq!(scratch_floats(n), 512 * 64);
        let text = backward_finish_kernel(n).render();
        assert_eq!(text.matches("st.global.f32").count(), 1, "one output, stored once");
    }
}
