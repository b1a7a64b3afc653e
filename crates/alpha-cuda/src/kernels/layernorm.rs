//! LayerNorm over the last axis: forward, input gradient, and deterministic parameter gradients.
//!
//! Why: Coppelius runs 33 LayerNorms a step (SYSTEMS.md §2.2), each forward, backward and
//! "parameters" in the seed's profile. A row (C = 512) fits one block, so forward and the input
//! gradient are one block per row with fixed-order block reductions. The gain and bias
//! gradients sum over every row; doing that with atomics would make their bits depend on
//! scheduling. Instead they take two passes in the CPU reference's order
//! (`alpha-cpu/src/kernels/norms.rs`): pass 1 gives each band of [`BAND`] rows and each column
//! one thread, which sums its band's rows in order; pass 2 folds each column's bands in order,
//! one lane a column, from band partials staged through shared memory (`fold_bands`) — as a
//! launch of its own, or in blocks after the input gradient's rows where the bands are few
//! ([`backward_dx_kernel_folding`]). Where the bands are many, pass 1 runs inside the input
//! gradient's launch instead, a block a band ([`backward_dx_partials_kernel`]): x and dy are
//! then read once. Each column's sum is thus the CPU's sum, operation for operation. That launch
//! can also sum the columns of what it stores, band by band, for a bias gradient that sums them
//! ([`backward_dx_column_partials_kernel`]).
//!
//! How: x, gain, bias, dy and all outputs are f32; `mean` and `rstd` are saved per row by the
//! forward and read by the backward. `.rn` arithmetic in the reference's order of operations;
//! `rstd = 1/√(var + ε)` with an IEEE square root and division. C and the row count are
//! immediates. The row kernels read each input once into registers (a thread's columns
//! `tid, tid + 128, …`) and make every pass over those registers, in that order.

use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

/// Threads per block of the row kernels and of the column kernels.
pub const THREADS: u32 = 128;
/// Rows per band of the parameter-gradient pass: the CPU reference's band, so every column sum
/// is the reference's, operation for operation.
pub const BAND: usize = 16;

/// Shape of one LayerNorm: `rows` rows of `c` columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Norm {
    pub rows: usize,
    pub c: usize,
}

impl Norm {
    pub fn bands(&self) -> usize {
        self.rows.div_ceil(BAND).max(1)
    }
    /// f32 scratch the parameter-gradient pass needs (gain and bias partials).
    pub fn scratch_floats(&self) -> usize {
        2 * self.bands() * self.c
    }
}

/// This thread's columns of a row, `tid + i·THREADS` for i = 0, 1, …: each with its in-range
/// predicate where `c` is not a multiple of [`THREADS`]. The row kernels load their values
/// once into registers and make every pass over them in this order — the order of a strided
/// loop over the columns, so sums are the same operation for operation.
fn owned_cols(k: &mut Kernel, tid: Reg, c: u32) -> Vec<(Reg, Option<Reg>)> {
    owned_cols_by(k, tid, c, THREADS)
}

/// [`owned_cols`] for a row shared by `lanes` threads (a block's [`THREADS`], or a warp's 32
/// where a warp takes a row): lane `lane`'s columns `lane + i·lanes`.
pub(crate) fn owned_cols_by(k: &mut Kernel, lane: Reg, c: u32, lanes: u32) -> Vec<(Reg, Option<Reg>)> {
    (0..c.div_ceil(lanes))
        .map(|i| {
            let j = k.bin("add.u32", RegKind::B32, lane, i * lanes);
            let ok = ((i + 1) * lanes > c).then(|| k.setp("lt.u32", j, c));
            (j, ok)
        })
        .collect()
}

/// The conjunction of two optional guards (None: always).
fn both(k: &mut Kernel, a: Option<Reg>, b: Option<Reg>) -> Option<Reg> {
    match (a, b) {
        (Some(a), Some(b)) => Some(k.bin("and.pred", RegKind::Pred, a, b)),
        (a, b) => a.or(b),
    }
}

/// Loads `base[offset + j]` for each owned column `j`, guarded by its column's predicate and
/// `row_ok` (+0 where either fails).
pub(crate) fn ld_owned(
    k: &mut Kernel,
    base: Reg,
    offset: Option<Reg>,
    cols: &[(Reg, Option<Reg>)],
    row_ok: Option<Reg>,
) -> Vec<Reg> {
    cols.iter()
        .map(|&(j, col_ok)| {
            let guard = both(k, col_ok, row_ok);
            let i = match offset {
                Some(o) => k.bin("add.u32", RegKind::B32, o, j),
                None => j,
            };
            let a = k.addr_of(base, i, 4);
            let v = k.imm_f32(0.0);
            guarded(k, guard, "ld.global.f32", [v.into(), addr(a, 0)]);
            v
        })
        .collect()
}

/// `op` guarded by the column's in-range predicate, if it has one.
pub(crate) fn guarded<I: IntoIterator<Item = crate::ptx::Opnd>>(k: &mut Kernel, ok: Option<Reg>, op: &str, args: I) {
    match ok {
        Some(p) => k.op_if(p, false, op, args),
        None => k.op(op, args),
    }
}

pub(crate) fn ld(k: &mut Kernel, base: Reg, idx: Reg) -> Reg {
    let a = k.addr_of(base, idx, 4);
    let v = k.reg(RegKind::F32);
    k.op("ld.global.f32", [v.into(), addr(a, 0)]);
    v
}

pub(crate) fn st(k: &mut Kernel, base: Reg, idx: Reg, v: Reg) {
    let a = k.addr_of(base, idx, 4);
    k.op("st.global.f32", [addr(a, 0), v.into()]);
}

/// Stores a norm's output `o` at `y[i]` (guarded by `ok`): f32, or with `bf16` rounded to
/// bf16 (round to nearest even).
pub(crate) fn store_y(k: &mut Kernel, y: Reg, i: Reg, o: Reg, ok: Option<Reg>, bf16: bool) {
    if bf16 {
        let a = k.addr_of(y, i, 2);
        let h = k.un("cvt.rn.bf16.f32", RegKind::B16, o);
        guarded(k, ok, "st.global.b16", [addr(a, 0), h.into()]);
    } else {
        let a = k.addr_of(y, i, 4);
        guarded(k, ok, "st.global.f32", [addr(a, 0), o.into()]);
    }
}

/// Forward: params (y, mean, rstd, x, gain, bias); grid (rows).
pub fn forward_kernel(n: Norm, eps: f32) -> Kernel {
    forward_kernel_storing(n, eps, false)
}

/// [`forward_kernel`], with `bf16` storing y rounded to bf16 (round to nearest even): the cast
/// that alone reads a LayerNorm's output, done by the LayerNorm (its f32 output is never
/// written), so the matrix products after it read half the bytes.
pub fn forward_kernel_storing(n: Norm, eps: f32, bf16: bool) -> Kernel {
    forward_kernel_with(n, eps, bf16, n.c as u32)
}

/// [`forward_kernel_storing`] with bf16 y, its rows `pitch` elements apart (at least the
/// width): a matrix product then reads them in place through a tensor map, whose rows must lie
/// 16 bytes apart (`crate::lower::padded`).
pub fn forward_kernel_pitched(n: Norm, eps: f32, pitch: usize) -> anyhow::Result<Kernel> {
    if pitch < n.c {
        anyhow::bail!("a LayerNorm's output pitch of {pitch} is narrower than its {} columns", n.c);
    }
    Ok(forward_kernel_with(n, eps, true, pitch as u32))
}

fn forward_kernel_with(n: Norm, eps: f32, bf16: bool, y_pitch: u32) -> Kernel {
    let c = n.c as u32;
    let name = match (bf16, y_pitch == c) {
        (false, _) => "layernorm_fwd".to_string(),
        (true, true) => "layernorm_fwd_bf16".to_string(),
        (true, false) => format!("layernorm_fwd_bf16_pitch{y_pitch}"),
    };
    let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
    let y = k.param_reg("y", ParamTy::U64);
    let mean = k.param_reg("mean", ParamTy::U64);
    let rstd = k.param_reg("rstd", ParamTy::U64);
    let x = k.param_reg("x", ParamTy::U64);
    let gain = k.param_reg("gain", ParamTy::U64);
    let bias = k.param_reg("bias", ParamTy::U64);
    let red = k.shared("red", 128, 16);
    let tid = k.sreg("%tid.x");
    let row = k.sreg("%ctaid.x");
    let row0 = k.bin("mul.lo.u32", RegKind::B32, row, c);
    // The row's values, read once.
    let owned = owned_cols(&mut k, tid, c);
    let xs = ld_owned(&mut k, x, Some(row0), &owned, None);
    let sum = k.imm_f32(0.0);
    for (&v, &(_, ok)) in xs.iter().zip(&owned) {
        guarded(&mut k, ok, "add.rn.f32", [sum.into(), sum.into(), v.into()]);
    }
    let total = k.block_reduce_f32(sum, "add", &red, tid, THREADS);
    let m = k.bin("div.rn.f32", RegKind::F32, total, c as f32);
    let sq = k.imm_f32(0.0);
    for (&v, &(_, ok)) in xs.iter().zip(&owned) {
        let d = k.bin("sub.rn.f32", RegKind::F32, v, m);
        let d2 = k.bin("mul.rn.f32", RegKind::F32, d, d);
        guarded(&mut k, ok, "add.rn.f32", [sq.into(), sq.into(), d2.into()]);
    }
    let sqt = k.block_reduce_f32(sq, "add", &red, tid, THREADS);
    let var = k.bin("div.rn.f32", RegKind::F32, sqt, c as f32);
    let ve = k.bin("add.rn.f32", RegKind::F32, var, eps);
    let sd = k.un("sqrt.rn.f32", RegKind::F32, ve);
    let r = k.bin("div.rn.f32", RegKind::F32, 1.0f32, sd);
    let gs = ld_owned(&mut k, gain, None, &owned, None);
    let bs = ld_owned(&mut k, bias, None, &owned, None);
    let y0 = if y_pitch == c { row0 } else { k.bin("mul.lo.u32", RegKind::B32, row, y_pitch) };
    for (((&v, &g), &b), &(j, ok)) in xs.iter().zip(&gs).zip(&bs).zip(&owned) {
        let i = k.bin("add.u32", RegKind::B32, y0, j);
        let d = k.bin("sub.rn.f32", RegKind::F32, v, m);
        let xr = k.bin("mul.rn.f32", RegKind::F32, d, r);
        let xg = k.bin("mul.rn.f32", RegKind::F32, xr, g);
        let o = k.bin("add.rn.f32", RegKind::F32, xg, b);
        store_y(&mut k, y, i, o, ok, bf16);
    }
    let first = k.setp("eq.u32", tid, 0u32);
    let skip = k.label("skip");
    k.bra_if(first, true, &skip);
    st(&mut k, mean, row, m);
    st(&mut k, rstd, row, r);
    k.place(&skip);
    k.ret();
    k
}

/// Input gradient: params (dx, x, gain, mean, rstd, dy); grid (rows).
pub fn backward_dx_kernel(n: Norm) -> Kernel {
    backward_dx_kernel_adding(n, false)
}

/// [`backward_dx_kernel`], with `residual` adding a tensor to the input gradient as it is
/// stored: param `r` after the others, `dx = (…) + r[i]` — the Add that follows a pre-norm
/// block's LayerNorm backward (the residual stream's gradient), in the same f32 addition.
pub fn backward_dx_kernel_adding(n: Norm, residual: bool) -> Kernel {
    backward_dx_kernel_with(n, residual, false, false)
}

/// [`backward_dx_kernel_adding`] (`fold`: [`backward_dx_kernel_folding`]) that also stores the
/// input gradient rounded to bf16 (param `dx16` after `r`): the cast the products after it
/// read, whose own launch read the f32 gradient back.
pub fn backward_dx_kernel_copying(n: Norm, residual: bool, fold: bool) -> Kernel {
    backward_dx_kernel_with(n, residual, fold, true)
}

/// Grid and block of [`backward_dx_kernel_folding`]: a block a row, then the fold's blocks.
pub fn dx_fold_launch(n: Norm) -> ((u32, u32, u32), (u32, u32, u32)) {
    ((n.rows as u32 + fold_blocks(n), 1, 1), (THREADS, 1, 1))
}

/// [`backward_dx_kernel_adding`] whose grid ([`dx_fold_launch`]) also runs parameter-gradient
/// pass 2 ([`backward_finish_kernel`]'s fold, the same bits) in blocks after the rows: params
/// as it, then (dgain, dbias, partials). Why: the fold needs only pass 1, so it runs beside the
/// rows instead of as a launch of its own between them (one context's 33 LayerNorm backwards
/// each paid a launch for 32 small blocks).
pub fn backward_dx_kernel_folding(n: Norm, residual: bool) -> Kernel {
    backward_dx_kernel_with(n, residual, true, false)
}

fn backward_dx_kernel_with(n: Norm, residual: bool, fold: bool, copy16: bool) -> Kernel {
    let c = n.c as u32;
    let name = match (residual, fold) {
        (false, false) => "layernorm_bwd_dx",
        (true, false) => "layernorm_bwd_dx_add",
        (false, true) => "layernorm_bwd_dx_fold",
        (true, true) => "layernorm_bwd_dx_add_fold",
    };
    let name = if copy16 { format!("{name}_bf16") } else { name.to_string() };
    let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
    let DxParams { dx, x, gain, mean, rstd, dy, r, dx16 } = dx_params(&mut k, residual, copy16);
    let red = k.shared("red", 128, 16);
    let tid = k.sreg("%tid.x");
    let row = k.sreg("%ctaid.x");
    if fold {
        let params = ["dgain", "dbias", "partials"].map(|p| k.param_reg(p, ParamTy::U64));
        let dx_row = k.label("dx_row");
        let is_fold = k.setp("ge.u32", row, n.rows as u32);
        k.bra_if(is_fold, true, &dx_row);
        let f = k.bin("sub.u32", RegKind::B32, row, n.rows as u32);
        let [dgain, dbias, partials] = params;
        fold_bands(&mut k, n, &[dgain, dbias], partials, tid, f, THREADS);
        k.ret();
        k.place(&dx_row);
    }
    let row0 = k.bin("mul.lo.u32", RegKind::B32, row, c);
    let m = ld(&mut k, mean, row);
    let rs = ld(&mut k, rstd, row);
    // The row's dy, gain and x, read once for both passes.
    let owned = owned_cols(&mut k, tid, c);
    let ds = ld_owned(&mut k, dy, Some(row0), &owned, None);
    let gs = ld_owned(&mut k, gain, None, &owned, None);
    let xs = ld_owned(&mut k, x, Some(row0), &owned, None);
    let row = RowIn { ds: &ds, gs: &gs, xs: &xs, m, rs };
    let means = row_means(&mut k, row, &owned, &red, tid, c);
    let rv = r.map(|r| ld_owned(&mut k, r, Some(row0), &owned, None));
    store_row_dx(&mut k, row, means, rv.as_deref(), &owned, (dx, dx16), row0, None);
    k.ret();
    k
}

/// The input-gradient kernels' parameters, in order: dx, x, gain, mean, rstd, dy, then the
/// residual `r` and the bf16 copy `dx16` where taken.
struct DxParams {
    dx: Reg,
    x: Reg,
    gain: Reg,
    mean: Reg,
    rstd: Reg,
    dy: Reg,
    r: Option<Reg>,
    dx16: Option<Reg>,
}

fn dx_params(k: &mut Kernel, residual: bool, copy16: bool) -> DxParams {
    let [dx, x, gain, mean, rstd, dy] = ["dx", "x", "gain", "mean", "rstd", "dy"].map(|p| k.param_reg(p, ParamTy::U64));
    let r = residual.then(|| k.param_reg("r", ParamTy::U64));
    let dx16 = copy16.then(|| k.param_reg("dx16", ParamTy::U64));
    DxParams { dx, x, gain, mean, rstd, dy, r, dx16 }
}

/// One row's values as a thread of a row kernel holds them: its columns of dy, the gain and x,
/// and the row's mean and rstd.
#[derive(Clone, Copy)]
struct RowIn<'a> {
    ds: &'a [Reg],
    gs: &'a [Reg],
    xs: &'a [Reg],
    m: Reg,
    rs: Reg,
}

/// The input gradient's two row means, `mean(dy·g)` and `mean(dy·g·x̂)`: this thread's sums in
/// column order, then the block's fixed-order reduction.
fn row_means(k: &mut Kernel, row: RowIn, owned: &[(Reg, Option<Reg>)], red: &str, tid: Reg, c: u32) -> (Reg, Reg) {
    let RowIn { ds, gs, xs, m, rs } = row;
    let sg = k.imm_f32(0.0);
    let sgx = k.imm_f32(0.0);
    for (((&d, &g), &v), &(_, ok)) in ds.iter().zip(gs).zip(xs).zip(owned) {
        let gd = k.bin("mul.rn.f32", RegKind::F32, d, g);
        guarded(k, ok, "add.rn.f32", [sg.into(), sg.into(), gd.into()]);
        let xm = k.bin("sub.rn.f32", RegKind::F32, v, m);
        let t = k.bin("mul.rn.f32", RegKind::F32, gd, xm);
        let t = k.bin("mul.rn.f32", RegKind::F32, t, rs);
        guarded(k, ok, "add.rn.f32", [sgx.into(), sgx.into(), t.into()]);
    }
    let a = k.block_reduce_f32(sg, "add", red, tid, THREADS);
    let b = k.block_reduce_f32(sgx, "add", red, tid, THREADS);
    let mean_g = k.bin("div.rn.f32", RegKind::F32, a, c as f32);
    let mean_gx = k.bin("div.rn.f32", RegKind::F32, b, c as f32);
    (mean_g, mean_gx)
}

/// Stores one row's input gradient `rstd·(dy·g − mean_g − x̂·mean_gx)` (plus the residual's
/// `rv` where given) at `dx[row0 + j]`, and its bf16 rounding at `dx16` where given; `row_ok`
/// guards the stores of a row that may lie past the end. Returns the values stored, a column
/// of this thread's each.
#[allow(clippy::too_many_arguments)]
fn store_row_dx(
    k: &mut Kernel,
    row: RowIn,
    (mean_g, mean_gx): (Reg, Reg),
    rv: Option<&[Reg]>,
    owned: &[(Reg, Option<Reg>)],
    (dx, dx16): (Reg, Option<Reg>),
    row0: Reg,
    row_ok: Option<Reg>,
) -> Vec<Reg> {
    let RowIn { ds, gs, xs, m, rs } = row;
    let mut stored = Vec::with_capacity(owned.len());
    for (n_col, (((&d, &g), &v), &(j, ok))) in ds.iter().zip(gs).zip(xs).zip(owned).enumerate() {
        let ok = both(k, ok, row_ok);
        let i = k.bin("add.u32", RegKind::B32, row0, j);
        let xm = k.bin("sub.rn.f32", RegKind::F32, v, m);
        let xhat = k.bin("mul.rn.f32", RegKind::F32, xm, rs);
        let gd = k.bin("mul.rn.f32", RegKind::F32, d, g);
        let t1 = k.bin("sub.rn.f32", RegKind::F32, gd, mean_g);
        let t2 = k.bin("mul.rn.f32", RegKind::F32, xhat, mean_gx);
        let t3 = k.bin("sub.rn.f32", RegKind::F32, t1, t2);
        let o = k.bin("mul.rn.f32", RegKind::F32, rs, t3);
        let o = match rv {
            Some(rv) => k.bin("add.rn.f32", RegKind::F32, o, rv[n_col]),
            None => o,
        };
        let a = k.addr_of(dx, i, 4);
        guarded(k, ok, "st.global.f32", [addr(a, 0), o.into()]);
        if let Some(d16) = dx16 {
            let h = k.reg(RegKind::B16);
            k.op("cvt.rn.bf16.f32", [h.into(), o.into()]);
            let a = k.addr_of(d16, i, 2);
            guarded(k, ok, "st.global.b16", [addr(a, 0), h.into()]);
        }
        stored.push(o);
    }
    stored
}

/// Grid and block of [`backward_dx_partials_kernel`]: a block a band.
pub fn dx_partials_launch(n: Norm) -> ((u32, u32, u32), (u32, u32, u32)) {
    ((n.bands() as u32, 1, 1), (THREADS, 1, 1))
}

/// The input gradient ([`backward_dx_kernel_adding`], with `copy16` also its bf16 rounding) and
/// parameter-gradient pass 1 ([`backward_partials_kernel`]) in one launch: params as the input
/// gradient's kernel (dx, x, gain, mean, rstd, dy, then r and dx16 where taken), then
/// `partials`; grid [`dx_partials_launch`]. Pass 2 follows as its own launch.
///
/// Why: the two read the same x and dy (67 MB a LayerNorm at sixteen contexts); here each is
/// read once. How: a block takes a band of [`BAND`] rows in order, row by row as the row
/// kernel does (the next row's loads issued before this row's reductions), and each thread adds
/// its columns' terms of the band's rows into its gain and bias partials in row order — the
/// pass-1 kernel's sums, operation for operation, so the bits are the same.
pub fn backward_dx_partials_kernel(n: Norm, residual: bool, copy16: bool) -> Kernel {
    dx_partials_kernel_with(n, residual, copy16, false)
}

/// [`backward_dx_partials_kernel`] that also sums the columns of what it stores (dx, or the
/// residual's sum `dx + r`) over each band's rows, in row order from +0: params as that kernel's,
/// then `columns`, where band `b`'s sum of column `j` lands at `columns[j·bands + b]` — the
/// chunk partials of a column sum over the rows ([`crate::kernels::reduce::Reduction`]'s
/// layout, a band a chunk), which its finishing pass then sums
/// ([`crate::kernels::reduce::Reduction::finish_kernel_over`]).
/// Why: a linear layer's bias gradient before the norm sums the tensor this launch writes;
/// its first pass then need not read the tensor back (50 MB at GPT-2's sixteen contexts).
pub fn backward_dx_column_partials_kernel(n: Norm, residual: bool, copy16: bool) -> Kernel {
    dx_partials_kernel_with(n, residual, copy16, true)
}

fn dx_partials_kernel_with(n: Norm, residual: bool, copy16: bool, columns: bool) -> Kernel {
    let c = n.c as u32;
    let bands = n.bands() as u32;
    let name = format!(
        "layernorm_bwd_dx{}_partials{}{}",
        if residual { "_add" } else { "" },
        if copy16 { "_bf16" } else { "" },
        if columns { "_cols" } else { "" }
    );
    let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
    let DxParams { dx, x, gain, mean, rstd, dy, r, dx16 } = dx_params(&mut k, residual, copy16);
    let partials = k.param_reg("partials", ParamTy::U64);
    let column_sums = columns.then(|| k.param_reg("columns", ParamTy::U64));
    let red = k.shared("red", 128, 16);
    let tid = k.sreg("%tid.x");
    let band = k.sreg("%ctaid.x");
    let owned = owned_cols(&mut k, tid, c);
    let gs = ld_owned(&mut k, gain, None, &owned, None);
    let ags: Vec<Reg> = owned.iter().map(|_| k.imm_f32(0.0)).collect();
    let abs: Vec<Reg> = owned.iter().map(|_| k.imm_f32(0.0)).collect();
    // The column sums, a thread's own slots of shared memory (`[column of its][tid]`) rather
    // than registers: six more live across the rows spilled at GPT-2's width.
    let acs = columns.then(|| {
        let at = k.shared("colsum", THREADS * 4 * owned.len() as u32, 16);
        let base = k.un("mov.u32", RegKind::B32, Opnd::S(at));
        let own = k.tri("mad.lo.u32", RegKind::B32, tid, 4u32, base);
        let zero = k.imm_f32(0.0);
        for i in 0..owned.len() {
            k.op("st.shared.f32", [addr(own, (i as u32 * THREADS * 4) as i64), zero.into()]);
        }
        own
    });
    let r0 = k.bin("mul.lo.u32", RegKind::B32, band, BAND as u32);
    let ragged = !n.rows.is_multiple_of(BAND);
    struct Loaded {
        row0: Reg,
        ok: Option<Reg>,
        m: Reg,
        rs: Reg,
        ds: Vec<Reg>,
        xs: Vec<Reg>,
    }
    // Row i of the band: every load issued, each guarded where the row or column may be past
    // the end (+0 there).
    let load = |k: &mut Kernel, i: u32| {
        let row = k.bin("add.u32", RegKind::B32, r0, i);
        let ok = ragged.then(|| k.setp("lt.u32", row, n.rows as u32));
        let row0 = k.bin("mul.lo.u32", RegKind::B32, row, c);
        let one = |k: &mut Kernel, base: Reg| {
            let a = k.addr_of(base, row, 4);
            let v = k.imm_f32(0.0);
            guarded(k, ok, "ld.global.f32", [v.into(), addr(a, 0)]);
            v
        };
        let (m, rs) = (one(k, mean), one(k, rstd));
        let ds = ld_owned(k, dy, Some(row0), &owned, ok);
        let xs = ld_owned(k, x, Some(row0), &owned, ok);
        Loaded { row0, ok, m, rs, ds, xs }
    };
    let mut next = Some(load(&mut k, 0));
    for i in 0..BAND as u32 {
        let cur = next.take().expect("each row loaded before its turn");
        if i + 1 < BAND as u32 {
            next = Some(load(&mut k, i + 1));
        }
        let row = RowIn { ds: &cur.ds, gs: &gs, xs: &cur.xs, m: cur.m, rs: cur.rs };
        let means = row_means(&mut k, row, &owned, &red, tid, c);
        // The residual's row as the row kernel reads it, after the reductions (fewer registers
        // held across them: seven blocks an SM would leave 1,024 bands a second wave).
        let rv = r.map(|r| ld_owned(&mut k, r, Some(cur.row0), &owned, cur.ok));
        let stored = store_row_dx(&mut k, row, means, rv.as_deref(), &owned, (dx, dx16), cur.row0, cur.ok);
        if let Some(own) = acs {
            for (i, &o) in stored.iter().enumerate() {
                let slot = addr(own, (i as u32 * THREADS * 4) as i64);
                let ac = k.reg(RegKind::F32);
                k.op("ld.shared.f32", [ac.into(), slot.clone()]);
                guarded(&mut k, cur.ok, "add.rn.f32", [ac.into(), ac.into(), o.into()]);
                k.op("st.shared.f32", [slot, ac.into()]);
            }
        }
        // Pass 1's terms of this row, in its order of operations.
        for (((&d, &v), &ag), &ab) in cur.ds.iter().zip(&cur.xs).zip(&ags).zip(&abs) {
            let xm = k.bin("sub.rn.f32", RegKind::F32, v, cur.m);
            let t = k.bin("mul.rn.f32", RegKind::F32, d, xm);
            let t = k.bin("mul.rn.f32", RegKind::F32, t, cur.rs);
            guarded(&mut k, cur.ok, "add.rn.f32", [ag.into(), ag.into(), t.into()]);
            guarded(&mut k, cur.ok, "add.rn.f32", [ab.into(), ab.into(), d.into()]);
        }
    }
    let bb = k.bin("add.u32", RegKind::B32, band, bands);
    for ((&(j, ok), &ag), &ab) in owned.iter().zip(&ags).zip(&abs) {
        let ig = k.tri("mad.lo.u32", RegKind::B32, band, c, j);
        let a = k.addr_of(partials, ig, 4);
        guarded(&mut k, ok, "st.global.f32", [addr(a, 0), ag.into()]);
        let ib = k.tri("mad.lo.u32", RegKind::B32, bb, c, j);
        let a = k.addr_of(partials, ib, 4);
        guarded(&mut k, ok, "st.global.f32", [addr(a, 0), ab.into()]);
    }
    if let (Some(cols), Some(own)) = (column_sums, acs) {
        for (i, &(j, ok)) in owned.iter().enumerate() {
            let ac = k.reg(RegKind::F32);
            k.op("ld.shared.f32", [ac.into(), addr(own, (i as u32 * THREADS * 4) as i64)]);
            let at = k.tri("mad.lo.u32", RegKind::B32, j, bands, band);
            let a = k.addr_of(cols, at, 4);
            guarded(&mut k, ok, "st.global.f32", [addr(a, 0), ac.into()]);
        }
    }
    k.ret();
    k
}

/// Parameter-gradient pass 1: params (partials, x, mean, rstd, dy); grid (⌈C/THREADS⌉, bands).
/// Writes `partials[band·C + j]` (gain) and `partials[(bands + band)·C + j]` (bias).
pub fn backward_partials_kernel(n: Norm) -> Kernel {
    band_partials_kernel("layernorm_bwd_params", n, true)
}

/// Pass 1 of a norm's parameter gradients, a thread a column and a block row a band, summing
/// the band's rows in order. `centred` (a LayerNorm): params (partials, x, mean, rstd, dy), the
/// gain's terms `dy·(x − mean)·rstd` and the bias's `dy`, the bias's partials after the gain's;
/// otherwise (an RMSNorm): params (partials, x, rstd, dy) and the gain's terms `dy·x·rstd`
/// alone. Grid (⌈C/THREADS⌉, bands).
pub(crate) fn band_partials_kernel(name: &str, n: Norm, centred: bool) -> Kernel {
    let c = n.c as u32;
    let bands = n.bands() as u32;
    let mut k = Kernel::new(name).with_block(THREADS, 1, 1);
    let partials = k.param_reg("partials", ParamTy::U64);
    let x = k.param_reg("x", ParamTy::U64);
    let mean = centred.then(|| k.param_reg("mean", ParamTy::U64));
    let rstd = k.param_reg("rstd", ParamTy::U64);
    let dy = k.param_reg("dy", ParamTy::U64);
    let tid = k.sreg("%tid.x");
    let bx = k.sreg("%ctaid.x");
    let band = k.sreg("%ctaid.y");
    let j = k.tri("mad.lo.u32", RegKind::B32, bx, THREADS, tid);
    let out = k.setp("ge.u32", j, c);
    let end = k.label("end");
    k.bra_if(out, false, &end);
    // The band's rows unrolled, every load issued before the first sum (one memory latency a
    // band instead of one a row); rows past the end (a last, partial band) add nothing.
    let r0 = k.bin("mul.lo.u32", RegKind::B32, band, BAND as u32);
    let ragged = !n.rows.is_multiple_of(BAND);
    // Each row's (guard, dy, x, mean where centred, rstd).
    let rows: Vec<(Option<Reg>, Vec<Reg>)> = (0..BAND as u32)
        .map(|i| {
            let r = k.bin("add.u32", RegKind::B32, r0, i);
            let ok = ragged.then(|| k.setp("lt.u32", r, n.rows as u32));
            let e = k.tri("mad.lo.u32", RegKind::B32, r, c, j);
            let sources = [Some((dy, e)), Some((x, e)), mean.map(|m| (m, r)), Some((rstd, r))];
            let vals = sources
                .into_iter()
                .flatten()
                .map(|(base, idx)| {
                    let a = k.addr_of(base, idx, 4);
                    let v = k.imm_f32(0.0);
                    guarded(&mut k, ok, "ld.global.f32", [v.into(), addr(a, 0)]);
                    v
                })
                .collect();
            (ok, vals)
        })
        .collect();
    let ag = k.imm_f32(0.0);
    let ab = centred.then(|| k.imm_f32(0.0));
    for (ok, vals) in rows {
        let (d, v, rs) = (vals[0], vals[1], vals[vals.len() - 1]);
        let centred_x = match mean {
            Some(_) => k.bin("sub.rn.f32", RegKind::F32, v, vals[2]),
            None => v,
        };
        let t = k.bin("mul.rn.f32", RegKind::F32, d, centred_x);
        let t = k.bin("mul.rn.f32", RegKind::F32, t, rs);
        guarded(&mut k, ok, "add.rn.f32", [ag.into(), ag.into(), t.into()]);
        if let Some(ab) = ab {
            guarded(&mut k, ok, "add.rn.f32", [ab.into(), ab.into(), d.into()]);
        }
    }
    let ig = k.tri("mad.lo.u32", RegKind::B32, band, c, j);
    st(&mut k, partials, ig, ag);
    if let Some(ab) = ab {
        let bb = k.bin("add.u32", RegKind::B32, band, bands);
        let ib = k.tri("mad.lo.u32", RegKind::B32, bb, c, j);
        st(&mut k, partials, ib, ab);
    }
    k.place(&end);
    k.ret();
    k
}

/// Threads of a pass-2 block: eight warps load, one folds.
pub const FINISH_THREADS: u32 = 256;
/// Columns of one pass-2 block: one per lane of the folding warp.
const FINISH_COLS: u32 = 32;

/// Blocks of pass 2: one per 32 columns of the gain, and of the bias.
fn fold_blocks(n: Norm) -> u32 {
    fold_blocks_of(n, 2)
}

/// Blocks of pass 2 over `outputs` column sums of shape `n` (the gain and bias here, the gain
/// alone for an RMSNorm): one per 32 columns of each.
pub(crate) fn fold_blocks_of(n: Norm, outputs: u32) -> u32 {
    outputs * (n.c as u32).div_ceil(FINISH_COLS)
}

/// Grid and block of pass 2 as its own launch ([`backward_finish_kernel`]).
pub fn finish_launch(n: Norm) -> ((u32, u32, u32), (u32, u32, u32)) {
    ((fold_blocks(n), 1, 1), (FINISH_THREADS, 1, 1))
}

/// Parameter-gradient pass 2: params (dgain, dbias, partials); grid and block [`finish_launch`].
///
/// Each column's bands are added in order, from band 0, as the CPU reference does: that fold is
/// sequential, so the parallelism is across columns, and the loads are taken off its path (see
/// `fold_bands`). Why: with one thread per column and the loads in the fold, 16 contexts'
/// 1,024 bands took 53 µs a LayerNorm on four SMs, 1.7 ms a step.
pub fn backward_finish_kernel(n: Norm) -> Kernel {
    let mut k = Kernel::new("layernorm_bwd_params_finish").with_block(FINISH_THREADS, 1, 1);
    let dgain = k.param_reg("dgain", ParamTy::U64);
    let dbias = k.param_reg("dbias", ParamTy::U64);
    let partials = k.param_reg("partials", ParamTy::U64);
    let tid = k.sreg("%tid.x");
    let f = k.sreg("%ctaid.x");
    fold_bands(&mut k, n, &[dgain, dbias], partials, tid, f, FINISH_THREADS);
    k.ret();
    k
}

/// Grid and block of [`backward_finish_multi_kernel`] over `count` LayerNorms of shape `n`.
pub fn finish_multi_launch(n: Norm, count: usize) -> ((u32, u32, u32), (u32, u32, u32)) {
    ((fold_blocks(n) * count as u32, 1, 1), (FINISH_THREADS, 1, 1))
}

/// Pass 2 of many LayerNorms of shape `n` in one launch: params (base, table), the table a
/// (dgain, dbias, partials) triple of u64 byte offsets from `base` a LayerNorm; grid and block
/// [`finish_multi_launch`]. Each LayerNorm's blocks run [`backward_finish_kernel`]'s fold, the
/// same bits. Why: at sixteen contexts each LayerNorm's fold was a launch of 8 µs on a few
/// dozen blocks, 33 a step; their gradients are read only by the optimizer, so the folds can
/// wait for the last of them and run together.
pub fn backward_finish_multi_kernel(n: Norm) -> Kernel {
    let mut k = Kernel::new("layernorm_bwd_params_finish_multi").with_block(FINISH_THREADS, 1, 1);
    let base = k.param_reg("base", ParamTy::U64);
    let table = k.param_reg("table", ParamTy::U64);
    let tid = k.sreg("%tid.x");
    let block = k.sreg("%ctaid.x");
    let per = fold_blocks(n);
    let which = k.bin("div.u32", RegKind::B32, block, per);
    let f = k.bin("rem.u32", RegKind::B32, block, per);
    let entry = k.addr_of(table, which, 24);
    let [dgain, dbias, partials] = [0i64, 8, 16].map(|at| {
        let off = k.reg(RegKind::B64);
        k.op("ld.global.nc.u64", [off.into(), addr(entry, at)]);
        k.bin("add.s64", RegKind::B64, base, off)
    });
    fold_bands(&mut k, n, &[dgain, dbias], partials, tid, f, FINISH_THREADS);
    k.ret();
    k
}

/// Pass 2 for fold block `f` of [`fold_blocks_of`] with `threads` threads: 32 columns of one
/// of `outs`, the column sums whose band partials lie one after another in `partials` (the
/// gain's then the bias's for a LayerNorm; an RMSNorm's gain alone). The block's warps load eight bands each of its columns at a time into
/// shared memory (each warp one coalesced 128-byte row a band) while warp 0 folds the previous
/// round's (lane = column) out of the other buffer. Bands past the end load as +0, which leaves a sum that
/// started at +0 unchanged, bit for bit.
pub(crate) fn fold_bands(k: &mut Kernel, n: Norm, outs: &[Reg], partials: Reg, tid: Reg, f: Reg, threads: u32) {
    let c = n.c as u32;
    let bands = n.bands() as u32;
    let warps = threads / 32;
    // Bands a round: eight a thread.
    let chunk = 8 * warps;
    let chunks = bands.div_ceil(chunk);
    let per_thread = chunk / warps;
    let groups = c.div_ceil(FINISH_COLS);
    let stage = k.shared("finish_stage", 2 * chunk * FINISH_COLS * 4, 16);
    let which = k.bin("div.u32", RegKind::B32, f, groups);
    let bx = k.bin("rem.u32", RegKind::B32, f, groups);
    let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
    let j = k.tri("mad.lo.u32", RegKind::B32, bx, FINISH_COLS, lane);
    let col_ok = k.setp("lt.u32", j, c);
    // This thread's first band of a round (warp w loads bands w, w + warps, …) and the band
    // offset of its output's partials (the bias's follow the gain's).
    let first = k.bin("mul.lo.u32", RegKind::B32, which, bands);
    let band0 = k.bin("add.u32", RegKind::B32, first, warp);
    // Shared: [buffer][band][column]; this thread stores at (warp, lane), folds at (·, lane).
    let base = k.un("mov.u32", RegKind::B32, Opnd::S(stage));
    let my_row = k.tri("mad.lo.u32", RegKind::B32, warp, FINISH_COLS, lane);
    let my_st = k.tri("mad.lo.u32", RegKind::B32, my_row, 4u32, base);
    let lane_b = k.bin("shl.b32", RegKind::B32, lane, 2u32);
    let my_fold = k.bin("add.u32", RegKind::B32, base, lane_b);
    let buf_bytes = chunk * FINISH_COLS * 4;
    let row_bytes = warps * FINISH_COLS * 4;
    let vals = k.regs(RegKind::F32, per_thread as usize);
    // Loads round `r`'s bands into the registers (+0 past the end or the last column).
    let load = |k: &mut Kernel, r: Reg| {
        let b_first = k.tri("mad.lo.u32", RegKind::B32, r, chunk, warp);
        for (i, &v) in vals.iter().enumerate() {
            let b = k.bin("add.u32", RegKind::B32, b_first, i as u32 * warps);
            let in_range = k.setp("lt.u32", b, bands);
            let ok = k.bin("and.pred", RegKind::Pred, in_range, col_ok);
            let gb = k.bin("add.u32", RegKind::B32, band0, i as u32 * warps);
            let gb = k.tri("mad.lo.u32", RegKind::B32, r, chunk, gb);
            let e = k.tri("mad.lo.u32", RegKind::B32, gb, c, j);
            let a = k.addr_of(partials, e, 4);
            k.op("mov.f32", [v.into(), 0.0f32.into()]);
            k.op_if(ok, false, "ld.global.f32", [v.into(), addr(a, 0)]);
        }
    };
    // Stores the registers into buffer `buf` (0 or 1).
    let store = |k: &mut Kernel, buf: Reg| {
        let at = k.tri("mad.lo.u32", RegKind::B32, buf, buf_bytes, my_st);
        for (i, &v) in vals.iter().enumerate() {
            k.op("st.shared.f32", [addr(at, (i as u32 * row_bytes) as i64), v.into()]);
        }
    };
    k.comment("round 0 staged");
    let round = k.imm_u32(0);
    load(k, round);
    store(k, round);
    k.barrier();
    let acc = k.imm_f32(0.0);
    let folder = k.setp("eq.u32", warp, 0u32);
    let top = k.label("round");
    k.place(&top);
    let next = k.bin("add.u32", RegKind::B32, round, 1u32);
    let more = k.setp("lt.u32", next, chunks);
    let no_load = k.label("no_load");
    k.bra_if(more, true, &no_load);
    load(k, next);
    k.place(&no_load);
    k.comment("warp 0 folds this round's bands in order");
    let no_fold = k.label("no_fold");
    k.bra_if(folder, true, &no_fold);
    let buf = k.bin("and.b32", RegKind::B32, round, 1u32);
    let at = k.tri("mad.lo.u32", RegKind::B32, buf, buf_bytes, my_fold);
    for b in 0..chunk {
        let v = k.reg(RegKind::F32);
        k.op("ld.shared.f32", [v.into(), addr(at, (b * FINISH_COLS * 4) as i64)]);
        k.op("add.rn.f32", [acc.into(), acc.into(), v.into()]);
    }
    k.place(&no_fold);
    let no_store = k.label("no_store");
    k.bra_if(more, true, &no_store);
    let nbuf = k.bin("and.b32", RegKind::B32, next, 1u32);
    store(k, nbuf);
    k.place(&no_store);
    k.barrier();
    k.op("mov.u32", [round.into(), next.into()]);
    k.bra_if(more, false, &top);
    k.comment("warp 0 writes its 32 columns");
    let done = k.label("done");
    k.bra_if(folder, true, &done);
    k.bra_if(col_ok, true, &done);
    match *outs {
        [one] => {
            let a = k.addr_of(one, j, 4);
            k.op("st.global.f32", [addr(a, 0), acc.into()]);
        }
        [dgain, dbias] => {
            let is_gain = k.setp("eq.u32", which, 0u32);
            let ag = k.addr_of(dgain, j, 4);
            let ab = k.addr_of(dbias, j, 4);
            k.op_if(is_gain, false, "st.global.f32", [addr(ag, 0), acc.into()]);
            k.op_if(is_gain, true, "st.global.f32", [addr(ab, 0), acc.into()]);
        }
        _ => unreachable!("a fold writes one column sum or two"),
    }
    k.place(&done);
}

// ---- launch arguments, built once for the lowering and the lab's checks ----------------------

/// The forward's arguments: y, mean, rstd, x, gain, bias.
pub fn forward_arguments<T>(tensors: [T; 6]) -> Vec<T> {
    Vec::from(tensors)
}

/// Pass 1's arguments (the band partials of the gain and bias gradients): the partials, x, mean,
/// rstd, dy.
pub fn partials_arguments<T>(tensors: [T; 5]) -> Vec<T> {
    Vec::from(tensors)
}

/// Pass 2's arguments (the fold of the partials): the gain gradient, the bias gradient, the
/// partials.
pub fn finish_arguments<T>(tensors: [T; 3]) -> Vec<T> {
    Vec::from(tensors)
}

/// What an input-gradient launch does beside dx.
#[derive(Clone, Copy, Debug)]
pub enum DxPasses<T> {
    /// Nothing: passes 1 and 2 are launched apart.
    Apart,
    /// Pass 2 in blocks after the rows': the gain and bias gradients and pass 1's partials.
    Fold { dgain: T, dbias: T, partials: T },
    /// Pass 1 in its rows: the partials it writes.
    Partials(T),
    /// Pass 1 in its rows, and the column sums of what it stores
    /// ([`backward_dx_column_partials_kernel`]).
    PartialsAndColumns { partials: T, columns: T },
}

impl<T> DxPasses<T> {
    /// The same passes over other pointers (device addresses for offsets, say).
    pub fn map<U>(self, f: impl Fn(T) -> U) -> DxPasses<U> {
        match self {
            DxPasses::Apart => DxPasses::Apart,
            DxPasses::Fold { dgain, dbias, partials } => {
                DxPasses::Fold { dgain: f(dgain), dbias: f(dbias), partials: f(partials) }
            }
            DxPasses::Partials(p) => DxPasses::Partials(f(p)),
            DxPasses::PartialsAndColumns { partials, columns } => {
                DxPasses::PartialsAndColumns { partials: f(partials), columns: f(columns) }
            }
        }
    }
}

/// The input gradient's arguments: dx (or the residual's sum), x, gain, mean, rstd, dy, then
/// the residual and the sum's bf16 copy where the kernel adds and copies, then its passes'.
pub fn dx_arguments<T>(tensors: [T; 6], residual: Option<T>, copy: Option<T>, passes: DxPasses<T>) -> Vec<T> {
    let mut args = Vec::from(tensors);
    args.extend(residual);
    args.extend(copy);
    match passes {
        DxPasses::Apart => {}
        DxPasses::Fold { dgain, dbias, partials } => args.extend([dgain, dbias, partials]),
        DxPasses::Partials(p) => args.push(p),
        DxPasses::PartialsAndColumns { partials, columns } => args.extend([partials, columns]),
    }
    args
}

#[cfg(test)]
mod tests {
    /// Each builder fills exactly its kernels' parameters (every variant: adding, copying,
    /// folding, pass 1 in the rows): an argument too many or missing would not match.
    #[test]
    fn arguments_match_the_kernels_parameters() {
        let n = Norm { rows: 256, c: 128 };
        let count = |k: Kernel| {
            assert!(k.params.iter().all(|p| p.ty == ParamTy::U64), "{}", k.name);
            k.params.len()
        };
        let t6 = [0u64; 6];
        let fold = DxPasses::Fold { dgain: 1, dbias: 2, partials: 3 };
        assert_eq!(count(forward_kernel_storing(n, 1e-5, true)), forward_arguments(t6).len());
        assert_eq!(count(backward_partials_kernel(n)), partials_arguments([0; 5]).len());
        assert_eq!(count(backward_finish_kernel(n)), finish_arguments([0; 3]).len());
        assert_eq!(count(backward_dx_kernel(n)), dx_arguments(t6, None, None, DxPasses::Apart).len());
        assert_eq!(count(backward_dx_kernel_adding(n, true)), dx_arguments(t6, Some(1), None, DxPasses::Apart).len());
        assert_eq!(count(backward_dx_kernel_folding(n, true)), dx_arguments(t6, Some(1), None, fold).len());
        let copying = |fold_too: bool, passes| {
            (count(backward_dx_kernel_copying(n, true, fold_too)), dx_arguments(t6, Some(1), Some(2), passes).len())
        };
        let (k, a) = copying(false, DxPasses::Apart);
        assert_eq!(k, a);
        let (k, a) = copying(true, fold);
        assert_eq!(k, a);
        for (residual, copy) in [(false, false), (true, false), (false, true), (true, true)] {
            let args = dx_arguments(t6, residual.then_some(1), copy.then_some(2), DxPasses::Partials(3));
            assert_eq!(count(backward_dx_partials_kernel(n, residual, copy)), args.len());
            let both = DxPasses::PartialsAndColumns { partials: 3, columns: 4 };
            let args = dx_arguments(t6, residual.then_some(1), copy.then_some(2), both);
            assert_eq!(count(backward_dx_column_partials_kernel(n, residual, copy)), args.len());
        }
    }

    use super::*;

    #[test]
    fn kernels_render_within_budget() {
        let n = Norm { rows: 1024, c: 512 };
        assert_eq!(n.bands(), 64);
        for k in
            [forward_kernel(n, 1e-5), backward_dx_kernel(n), backward_partials_kernel(n), backward_finish_kernel(n)]
        {
            k.check_budget().unwrap();
            assert!(k.render().contains(".entry layernorm_"));
        }
    }
}
