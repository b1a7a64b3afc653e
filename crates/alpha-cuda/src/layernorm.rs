//! LayerNorm over the last axis: forward, input gradient, and deterministic parameter gradients.
//!
//! Why: Coppelius runs 33 LayerNorms a step (SYSTEMS.md §2.2), each forward, backward and
//! "parameters" in the seed's profile. A row (C = 512) fits one block, so forward and the input
//! gradient are one block per row with fixed-order block reductions. The gain and bias
//! gradients sum over every row; doing that with atomics would make their bits depend on
//! scheduling. Instead they take two passes in the CPU reference's order
//! (`alpha-cpu/src/kernels/norms.rs`): pass 1 gives each band of [`BAND`] rows and each column
//! one thread, which sums its band's rows in order; pass 2 gives each column one thread, which
//! adds the bands in order. Each column's sum is thus the CPU's sum, operation for operation.
//!
//! How: x, gain, bias, dy and all outputs are f32; `mean` and `rstd` are saved per row by the
//! forward and read by the backward. `.rn` arithmetic in the reference's order of operations;
//! `rstd = 1/√(var + ε)` with an IEEE square root and division. C and the row count are
//! immediates. The row kernels read each input once into registers (a thread's columns
//! `tid, tid + 128, …`) and make every pass over those registers, in that order.

use crate::ptx::{addr, Kernel, ParamTy, Reg, RegKind};

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
    (0..c.div_ceil(THREADS))
        .map(|i| {
            let j = k.bin("add.u32", RegKind::B32, tid, i * THREADS);
            let ok = ((i + 1) * THREADS > c).then(|| k.setp("lt.u32", j, c));
            (j, ok)
        })
        .collect()
}

/// Loads `base[offset + j]` for each owned column `j` (0 where out of range).
fn ld_owned(k: &mut Kernel, base: Reg, offset: Option<Reg>, cols: &[(Reg, Option<Reg>)]) -> Vec<Reg> {
    cols.iter()
        .map(|&(j, ok)| {
            let i = match offset {
                Some(o) => k.bin("add.u32", RegKind::B32, o, j),
                None => j,
            };
            let a = k.addr_of(base, i, 4);
            let v = k.imm_f32(0.0);
            guarded(k, ok, "ld.global.f32", [v.into(), addr(a, 0)]);
            v
        })
        .collect()
}

/// `op` guarded by the column's in-range predicate, if it has one.
fn guarded<I: IntoIterator<Item = crate::ptx::Opnd>>(k: &mut Kernel, ok: Option<Reg>, op: &str, args: I) {
    match ok {
        Some(p) => k.op_if(p, false, op, args),
        None => k.op(op, args),
    }
}

fn ld(k: &mut Kernel, base: Reg, idx: Reg) -> Reg {
    let a = k.addr_of(base, idx, 4);
    let v = k.reg(RegKind::F32);
    k.op("ld.global.f32", [v.into(), addr(a, 0)]);
    v
}

fn st(k: &mut Kernel, base: Reg, idx: Reg, v: Reg) {
    let a = k.addr_of(base, idx, 4);
    k.op("st.global.f32", [addr(a, 0), v.into()]);
}

/// Forward: params (y, mean, rstd, x, gain, bias); grid (rows).
pub fn forward_kernel(n: Norm, eps: f32) -> Kernel {
    forward_kernel_storing(n, eps, false)
}

/// [`forward_kernel`], with `bf16` storing y rounded to bf16 (round to nearest even): the cast
/// that alone reads a LayerNorm's output, done by the LayerNorm (its f32 output is never
/// written), so the matrix products after it read half the bytes.
pub fn forward_kernel_storing(n: Norm, eps: f32, bf16: bool) -> Kernel {
    let c = n.c as u32;
    let name = if bf16 { "layernorm_fwd_bf16" } else { "layernorm_fwd" };
    let mut k = Kernel::new(name).with_block(THREADS, 1, 1);
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
    let xs = ld_owned(&mut k, x, Some(row0), &owned);
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
    let gs = ld_owned(&mut k, gain, None, &owned);
    let bs = ld_owned(&mut k, bias, None, &owned);
    for (((&v, &g), &b), &(j, ok)) in xs.iter().zip(&gs).zip(&bs).zip(&owned) {
        let i = k.bin("add.u32", RegKind::B32, row0, j);
        let d = k.bin("sub.rn.f32", RegKind::F32, v, m);
        let xr = k.bin("mul.rn.f32", RegKind::F32, d, r);
        let xg = k.bin("mul.rn.f32", RegKind::F32, xr, g);
        let o = k.bin("add.rn.f32", RegKind::F32, xg, b);
        if bf16 {
            let a = k.addr_of(y, i, 2);
            let h = k.un("cvt.rn.bf16.f32", RegKind::B16, o);
            guarded(&mut k, ok, "st.global.b16", [addr(a, 0), h.into()]);
        } else {
            let a = k.addr_of(y, i, 4);
            guarded(&mut k, ok, "st.global.f32", [addr(a, 0), o.into()]);
        }
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
    let c = n.c as u32;
    let name = if residual { "layernorm_bwd_dx_add" } else { "layernorm_bwd_dx" };
    let mut k = Kernel::new(name).with_block(THREADS, 1, 1);
    let dx = k.param_reg("dx", ParamTy::U64);
    let x = k.param_reg("x", ParamTy::U64);
    let gain = k.param_reg("gain", ParamTy::U64);
    let mean = k.param_reg("mean", ParamTy::U64);
    let rstd = k.param_reg("rstd", ParamTy::U64);
    let dy = k.param_reg("dy", ParamTy::U64);
    let r = residual.then(|| k.param_reg("r", ParamTy::U64));
    let red = k.shared("red", 128, 16);
    let tid = k.sreg("%tid.x");
    let row = k.sreg("%ctaid.x");
    let row0 = k.bin("mul.lo.u32", RegKind::B32, row, c);
    let m = ld(&mut k, mean, row);
    let rs = ld(&mut k, rstd, row);
    // The row's dy, gain and x, read once for both passes.
    let owned = owned_cols(&mut k, tid, c);
    let ds = ld_owned(&mut k, dy, Some(row0), &owned);
    let gs = ld_owned(&mut k, gain, None, &owned);
    let xs = ld_owned(&mut k, x, Some(row0), &owned);
    let sg = k.imm_f32(0.0);
    let sgx = k.imm_f32(0.0);
    for (((&d, &g), &v), &(_, ok)) in ds.iter().zip(&gs).zip(&xs).zip(&owned) {
        let gd = k.bin("mul.rn.f32", RegKind::F32, d, g);
        guarded(&mut k, ok, "add.rn.f32", [sg.into(), sg.into(), gd.into()]);
        let xm = k.bin("sub.rn.f32", RegKind::F32, v, m);
        let t = k.bin("mul.rn.f32", RegKind::F32, gd, xm);
        let t = k.bin("mul.rn.f32", RegKind::F32, t, rs);
        guarded(&mut k, ok, "add.rn.f32", [sgx.into(), sgx.into(), t.into()]);
    }
    let a = k.block_reduce_f32(sg, "add", &red, tid, THREADS);
    let b = k.block_reduce_f32(sgx, "add", &red, tid, THREADS);
    let mean_g = k.bin("div.rn.f32", RegKind::F32, a, c as f32);
    let mean_gx = k.bin("div.rn.f32", RegKind::F32, b, c as f32);
    let rv = r.map(|r| ld_owned(&mut k, r, Some(row0), &owned));
    for (n_col, (((&d, &g), &v), &(j, ok))) in ds.iter().zip(&gs).zip(&xs).zip(&owned).enumerate() {
        let i = k.bin("add.u32", RegKind::B32, row0, j);
        let xm = k.bin("sub.rn.f32", RegKind::F32, v, m);
        let xhat = k.bin("mul.rn.f32", RegKind::F32, xm, rs);
        let gd = k.bin("mul.rn.f32", RegKind::F32, d, g);
        let t1 = k.bin("sub.rn.f32", RegKind::F32, gd, mean_g);
        let t2 = k.bin("mul.rn.f32", RegKind::F32, xhat, mean_gx);
        let t3 = k.bin("sub.rn.f32", RegKind::F32, t1, t2);
        let o = k.bin("mul.rn.f32", RegKind::F32, rs, t3);
        let o = match &rv {
            Some(rv) => k.bin("add.rn.f32", RegKind::F32, o, rv[n_col]),
            None => o,
        };
        let a = k.addr_of(dx, i, 4);
        guarded(&mut k, ok, "st.global.f32", [addr(a, 0), o.into()]);
    }
    k.ret();
    k
}

/// Parameter-gradient pass 1: params (partials, x, mean, rstd, dy); grid (⌈C/THREADS⌉, bands).
/// Writes `partials[band·C + j]` (gain) and `partials[(bands + band)·C + j]` (bias).
pub fn backward_partials_kernel(n: Norm) -> Kernel {
    let c = n.c as u32;
    let bands = n.bands() as u32;
    let mut k = Kernel::new("layernorm_bwd_params").with_block(THREADS, 1, 1);
    let partials = k.param_reg("partials", ParamTy::U64);
    let x = k.param_reg("x", ParamTy::U64);
    let mean = k.param_reg("mean", ParamTy::U64);
    let rstd = k.param_reg("rstd", ParamTy::U64);
    let dy = k.param_reg("dy", ParamTy::U64);
    let tid = k.sreg("%tid.x");
    let bx = k.sreg("%ctaid.x");
    let band = k.sreg("%ctaid.y");
    let j = k.tri("mad.lo.u32", RegKind::B32, bx, THREADS, tid);
    let out = k.setp("ge.u32", j, c);
    let end = k.label("end");
    k.bra_if(out, false, &end);
    let r = k.bin("mul.lo.u32", RegKind::B32, band, BAND as u32);
    let r_end0 = k.bin("add.u32", RegKind::B32, r, BAND as u32);
    let r_end = k.bin("min.u32", RegKind::B32, r_end0, n.rows as u32);
    let ag = k.imm_f32(0.0);
    let ab = k.imm_f32(0.0);
    let top = k.label("row");
    let rend = k.label("row_end");
    k.place(&top);
    let done = k.setp("ge.u32", r, r_end);
    k.bra_if(done, false, &rend);
    let i = k.tri("mad.lo.u32", RegKind::B32, r, c, j);
    let d = ld(&mut k, dy, i);
    let v = ld(&mut k, x, i);
    let m = ld(&mut k, mean, r);
    let rs = ld(&mut k, rstd, r);
    let xm = k.bin("sub.rn.f32", RegKind::F32, v, m);
    let t = k.bin("mul.rn.f32", RegKind::F32, d, xm);
    let t = k.bin("mul.rn.f32", RegKind::F32, t, rs);
    k.op("add.rn.f32", [ag.into(), ag.into(), t.into()]);
    k.op("add.rn.f32", [ab.into(), ab.into(), d.into()]);
    k.op("add.u32", [r.into(), r.into(), 1u32.into()]);
    k.bra(&top);
    k.place(&rend);
    let ig = k.tri("mad.lo.u32", RegKind::B32, band, c, j);
    st(&mut k, partials, ig, ag);
    let bb = k.bin("add.u32", RegKind::B32, band, bands);
    let ib = k.tri("mad.lo.u32", RegKind::B32, bb, c, j);
    st(&mut k, partials, ib, ab);
    k.place(&end);
    k.ret();
    k
}

/// Parameter-gradient pass 2: params (dgain, dbias, partials); grid (⌈C/THREADS⌉).
pub fn backward_finish_kernel(n: Norm) -> Kernel {
    let c = n.c as u32;
    let bands = n.bands() as u32;
    let mut k = Kernel::new("layernorm_bwd_params_finish").with_block(THREADS, 1, 1);
    let dgain = k.param_reg("dgain", ParamTy::U64);
    let dbias = k.param_reg("dbias", ParamTy::U64);
    let partials = k.param_reg("partials", ParamTy::U64);
    let tid = k.sreg("%tid.x");
    let bx = k.sreg("%ctaid.x");
    let j = k.tri("mad.lo.u32", RegKind::B32, bx, THREADS, tid);
    let out = k.setp("ge.u32", j, c);
    let end = k.label("end");
    k.bra_if(out, false, &end);
    let ag = k.imm_f32(0.0);
    let ab = k.imm_f32(0.0);
    for b in 0..bands {
        let ig = k.bin("add.u32", RegKind::B32, j, b * c);
        let g = ld(&mut k, partials, ig);
        k.op("add.rn.f32", [ag.into(), ag.into(), g.into()]);
        let ib = k.bin("add.u32", RegKind::B32, j, (bands + b) * c);
        let v = ld(&mut k, partials, ib);
        k.op("add.rn.f32", [ab.into(), ab.into(), v.into()]);
    }
    st(&mut k, dgain, j, ag);
    st(&mut k, dbias, j, ab);
    k.place(&end);
    k.ret();
    k
}

#[cfg(test)]
mod tests {
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
