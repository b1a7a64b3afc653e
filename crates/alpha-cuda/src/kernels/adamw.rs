//! AdamW over the whole parameter arena in one launch, and the global gradient norm.
//!
//! Why: the optimizer touches every parameter once a step; one launch over flat, equal-length
//! regions (params, grads, m, v) moves the minimum bytes (28 per parameter) and keeps the
//! launch count at one however many tensors there are. Everything that changes from step to
//! step — learning rate, bias corrections, the clip scale — is read from small device buffers,
//! so a captured graph replays unchanged and the host only writes those scalars before each
//! replay. Which parameters are decayed is a short table of segments (start, decay flag) that
//! tiles the region: a block loads it into shared memory and each thread finds its element's
//! segment by binary search, re-searching only when its element leaves the cached segment.
//!
//! How: per element, with round-to-nearest arithmetic and no fused multiply-adds (so the CPU
//! reference [`reference`](fn@reference) reproduces it bit for bit):
//! `g ← grad·scale; m ← β₁m + (1−β₁)g; v ← β₂v + (1−β₂)g²; p ← p·(1 − lr·wd·decay);`
//! `p ← p − lr·(m·bc₁)/(√(v·bc₂) + ε)` with `bc = 1/(1 − βᵗ)` (PyTorch's AdamW order).
//!
//! The clip norm is a deterministic two-pass sum of squares: a fixed grid of
//! [`SUMSQ_BLOCKS`] blocks (independent of the GPU) each sums a fixed strided subset in f64 and
//! reduces in a fixed order; one block then sums the partials in order and writes
//! `[Σg², scale]` with `scale = min(1, max_norm/(‖g‖ + 1e-6))` (1 when `max_norm ≤ 0`), which
//! AdamW reads as its gradient scale — clipping without a host round trip.

use anyhow::{bail, Result};

use crate::kernels::pointwise::grid_stride_end;
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};
use crate::runtime::driver::{Arg, Function, Gpu, LaunchConfig};

/// Threads per block of the grid-stride kernels here.
pub const THREADS: u32 = 256;

/// Blocks for a grid-stride loop over `n` elements: enough to fill the GPU, no more.
fn grid_for(gpu: &Gpu, n: u32) -> LaunchConfig {
    let want = n.div_ceil(THREADS).max(1);
    let cap = gpu.info().multiprocessors.max(1) * 8;
    LaunchConfig::linear(want.min(cap), THREADS)
}

/// Opens a grid-stride loop over `n` for this family's fixed block of [`THREADS`].
fn grid_stride_begin(k: &mut Kernel, n: Reg) -> (Reg, Reg, String, String) {
    crate::kernels::pointwise::grid_stride_begin_with(k, n, Some(THREADS))
}

/// Most segments the table may hold (shared memory: 8 bytes each).
pub const MAX_SEGMENTS: usize = 1024;
/// Blocks of the first sum-of-squares pass (fixed, so results repeat on any GPU).
pub const SUMSQ_BLOCKS: u32 = 512;

/// One run of parameters with the same decay setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub offset: u32,
    pub len: u32,
    pub decay: bool,
}

/// The device table for `segments`, which must tile `[0, n)` in order: `(start, decay)` pairs.
pub fn segment_table(segments: &[Segment], n: u32) -> Result<Vec<u32>> {
    if segments.is_empty() || segments.len() > MAX_SEGMENTS {
        bail!("adamw: {} segments (1..={MAX_SEGMENTS} allowed)", segments.len());
    }
    let mut next = 0u32;
    let mut t = Vec::with_capacity(2 * segments.len());
    for s in segments {
        if s.offset != next || s.len == 0 {
            bail!("adamw: segments must tile the region in order; {s:?} after offset {next}");
        }
        t.push(s.offset);
        t.push(s.decay as u32);
        next = s.offset + s.len;
    }
    if next != n {
        bail!("adamw: segments cover {next} elements, the region has {n}");
    }
    Ok(t)
}

/// Hyperparameters for one step; [`AdamwScalars::device`] is what the kernel reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamwScalars {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// 1-based step number (for the bias corrections).
    pub step: u32,
}

impl AdamwScalars {
    /// `[lr, β₁, β₂, ε, wd, bc₁, bc₂, 0]`, bias corrections computed in f64.
    pub fn device(&self) -> [f32; 8] {
        let bc1 = 1.0 / (1.0 - (self.beta1 as f64).powi(self.step as i32));
        let bc2 = 1.0 / (1.0 - (self.beta2 as f64).powi(self.step as i32));
        [self.lr, self.beta1, self.beta2, self.eps, self.weight_decay, bc1 as f32, bc2 as f32, 0.0]
    }
}

/// Params (p, g, m, v, n, segs, nseg, scalars, gscale).
pub fn adamw_kernel() -> Kernel {
    let mut k = Kernel::new("adamw").with_block(THREADS, 1, 1);
    let p = k.param_reg("p", ParamTy::U64);
    let g = k.param_reg("g", ParamTy::U64);
    let m = k.param_reg("m", ParamTy::U64);
    let v = k.param_reg("v", ParamTy::U64);
    let n = k.param_reg("n", ParamTy::U32);
    let segs = k.param_reg("segs", ParamTy::U64);
    let nseg = k.param_reg("nseg", ParamTy::U32);
    let scal = k.param_reg("scalars", ParamTy::U64);
    let gsp = k.param_reg("gscale", ParamTy::U64);
    let table = k.shared("segs", (MAX_SEGMENTS * 8) as u32, 16);
    let tbase = k.un("mov.u32", RegKind::B32, crate::ptx::Opnd::S(table));

    // Scalars.
    let lr = ld(&mut k, scal, 0);
    let b1 = ld(&mut k, scal, 4);
    let b2 = ld(&mut k, scal, 8);
    let eps = ld(&mut k, scal, 12);
    let wd = ld(&mut k, scal, 16);
    let bc1 = ld(&mut k, scal, 20);
    let bc2 = ld(&mut k, scal, 24);
    let gscale = ld(&mut k, gsp, 0);
    let omb1 = k.bin("sub.rn.f32", RegKind::F32, 1.0f32, b1);
    let omb2 = k.bin("sub.rn.f32", RegKind::F32, 1.0f32, b2);
    let lrwd = k.bin("mul.rn.f32", RegKind::F32, lr, wd);
    let keep_decay = k.bin("sub.rn.f32", RegKind::F32, 1.0f32, lrwd);

    // Segment table → shared.
    let tid = k.sreg("%tid.x");
    {
        let j = k.un("mov.u32", RegKind::B32, tid);
        let top = k.label("tab");
        let end = k.label("tab_end");
        k.place(&top);
        let two = k.bin("mul.lo.u32", RegKind::B32, nseg, 2u32);
        let done = k.setp("ge.u32", j, two);
        k.bra_if(done, false, &end);
        let a = k.addr_of(segs, j, 4);
        let x = k.reg(RegKind::B32);
        k.op("ld.global.u32", [x.into(), addr(a, 0)]);
        let s = k.tri("mad.lo.u32", RegKind::B32, j, 4u32, tbase);
        k.op("st.shared.u32", [addr(s, 0), x.into()]);
        k.op("add.u32", [j.into(), j.into(), THREADS.into()]);
        k.bra(&top);
        k.place(&end);
        k.barrier();
    }
    // Cached segment [seg_lo, seg_hi) and its decay factor.
    let seg_lo = k.imm_u32(1);
    let seg_hi = k.imm_u32(0);
    let factor = k.imm_f32(1.0);

    let (i, stride, top, end) = grid_stride_begin(&mut k, n);
    {
        let below = k.setp("lt.u32", i, seg_lo);
        let above = k.setp("ge.u32", i, seg_hi);
        let miss = k.bin("or.pred", RegKind::Pred, below, above);
        let hit = k.label("seg_hit");
        k.bra_if(miss, true, &hit);
        // Binary search: last s with start[s] <= i.
        let lo = k.imm_u32(0);
        let hi = k.un("mov.u32", RegKind::B32, nseg);
        let bs = k.label("bsearch");
        let bs_end = k.label("bsearch_end");
        k.place(&bs);
        let span = k.bin("sub.u32", RegKind::B32, hi, lo);
        let small = k.setp("le.u32", span, 1u32);
        k.bra_if(small, false, &bs_end);
        let sum = k.bin("add.u32", RegKind::B32, lo, hi);
        let mid = k.bin("shr.u32", RegKind::B32, sum, 1u32);
        let ma = k.tri("mad.lo.u32", RegKind::B32, mid, 8u32, tbase);
        let st = k.reg(RegKind::B32);
        k.op("ld.shared.u32", [st.into(), addr(ma, 0)]);
        let le = k.setp("le.u32", st, i);
        k.op("selp.b32", [lo.into(), mid.into(), lo.into(), le.into()]);
        k.op("selp.b32", [hi.into(), hi.into(), mid.into(), le.into()]);
        k.bra(&bs);
        k.place(&bs_end);
        let la = k.tri("mad.lo.u32", RegKind::B32, lo, 8u32, tbase);
        k.op("ld.shared.u32", [seg_lo.into(), addr(la, 0)]);
        let flag = k.reg(RegKind::B32);
        k.op("ld.shared.u32", [flag.into(), addr(la, 4)]);
        let nxt = k.bin("add.u32", RegKind::B32, lo, 1u32);
        let has_nxt = k.setp("lt.u32", nxt, nseg);
        k.op("mov.u32", [seg_hi.into(), n.into()]);
        k.op_if(has_nxt, false, "ld.shared.u32", [seg_hi.into(), addr(la, 8)]);
        let dec = k.setp("ne.u32", flag, 0u32);
        k.op("selp.f32", [factor.into(), keep_decay.into(), 1.0f32.into(), dec.into()]);
        k.place(&hit);
    }
    let pa = k.addr_of(p, i, 4);
    let ga = k.addr_of(g, i, 4);
    let ma = k.addr_of(m, i, 4);
    let va = k.addr_of(v, i, 4);
    let [pv, gv, mv, vv] = [0, 1, 2, 3].map(|_| k.reg(RegKind::F32));
    k.op("ld.global.f32", [pv.into(), addr(pa, 0)]);
    k.op("ld.global.f32", [gv.into(), addr(ga, 0)]);
    k.op("ld.global.f32", [mv.into(), addr(ma, 0)]);
    k.op("ld.global.f32", [vv.into(), addr(va, 0)]);
    let f = |k: &mut Kernel, op: &str, a, b| k.bin(op, RegKind::F32, a, b);
    let gs = f(&mut k, "mul.rn.f32", gv, gscale);
    let m1 = f(&mut k, "mul.rn.f32", b1, mv);
    let m2 = f(&mut k, "mul.rn.f32", omb1, gs);
    let mn = f(&mut k, "add.rn.f32", m1, m2);
    let v1 = f(&mut k, "mul.rn.f32", b2, vv);
    let gg = f(&mut k, "mul.rn.f32", gs, gs);
    let v2 = f(&mut k, "mul.rn.f32", omb2, gg);
    let vn = f(&mut k, "add.rn.f32", v1, v2);
    let mhat = f(&mut k, "mul.rn.f32", mn, bc1);
    let vhat = f(&mut k, "mul.rn.f32", vn, bc2);
    let sq = k.un("sqrt.rn.f32", RegKind::F32, vhat);
    let den = f(&mut k, "add.rn.f32", sq, eps);
    let upd = f(&mut k, "div.rn.f32", mhat, den);
    let pd = f(&mut k, "mul.rn.f32", pv, factor);
    let step = f(&mut k, "mul.rn.f32", lr, upd);
    let pn = f(&mut k, "sub.rn.f32", pd, step);
    k.op("st.global.f32", [addr(pa, 0), pn.into()]);
    k.op("st.global.f32", [addr(ma, 0), mn.into()]);
    k.op("st.global.f32", [addr(va, 0), vn.into()]);
    grid_stride_end(&mut k, i, stride, n, &top, &end);
    k
}

/// One AdamW step over `n` elements. `scalars` points at [`AdamwScalars::device`]'s 8 floats,
/// `gscale` at one f32 (e.g. [`sumsq_finish`]'s output + 4), `segs` at [`segment_table`].
#[allow(clippy::too_many_arguments)]
pub fn launch(
    gpu: &Gpu,
    f: &Function,
    p: u64,
    g: u64,
    m: u64,
    v: u64,
    n: u32,
    segs: u64,
    nseg: u32,
    scalars: u64,
    gscale: u64,
) -> Result<()> {
    if nseg == 0 || nseg as usize > MAX_SEGMENTS {
        bail!("adamw: {nseg} segments (1..={MAX_SEGMENTS} allowed)");
    }
    gpu.launch(
        f,
        grid_for(gpu, n),
        &[
            Arg::U64(p),
            Arg::U64(g),
            Arg::U64(m),
            Arg::U64(v),
            Arg::U32(n),
            Arg::U64(segs),
            Arg::U32(nseg),
            Arg::U64(scalars),
            Arg::U64(gscale),
        ],
    )
}

/// CPU reference, same operations in the same order as the kernel (bit-identical).
pub fn reference(
    p: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    segments: &[Segment],
    s: &[f32; 8],
    gscale: f32,
) {
    let [lr, b1, b2, eps, wd, bc1, bc2, _] = *s;
    let keep = 1.0 - lr * wd;
    for seg in segments {
        let factor = if seg.decay { keep } else { 1.0 };
        for i in seg.offset as usize..(seg.offset + seg.len) as usize {
            let gs = g[i] * gscale;
            m[i] = b1 * m[i] + (1.0 - b1) * gs;
            v[i] = b2 * v[i] + (1.0 - b2) * (gs * gs);
            let upd = (m[i] * bc1) / ((v[i] * bc2).sqrt() + eps);
            p[i] = p[i] * factor - lr * upd;
        }
    }
}

/// Pass 1: params (partials, x, n). Grid: [`SUMSQ_BLOCKS`] blocks.
pub fn sumsq_partial_kernel() -> Kernel {
    let mut k = Kernel::new("sumsq_partial").with_block(THREADS, 1, 1);
    let parts = k.param_reg("partials", ParamTy::U64);
    let x = k.param_reg("x", ParamTy::U64);
    let n = k.param_reg("n", ParamTy::U32);
    let scratch = k.shared("red", 128, 16);
    let tid = k.sreg("%tid.x");
    let bid = k.sreg("%ctaid.x");
    let acc = k.reg(RegKind::F64);
    k.op("mov.f64", [acc.into(), crate::ptx::Opnd::S("0d0000000000000000".into())]);
    let i = k.tri("mad.lo.u32", RegKind::B32, bid, THREADS, tid);
    let top = k.label("loop");
    let end = k.label("end");
    k.place(&top);
    let done = k.setp("ge.u32", i, n);
    k.bra_if(done, false, &end);
    let a = k.addr_of(x, i, 4);
    let v = k.reg(RegKind::F32);
    k.op("ld.global.nc.f32", [v.into(), addr(a, 0)]);
    let d = k.un("cvt.f64.f32", RegKind::F64, v);
    k.op("fma.rn.f64", [acc.into(), d.into(), d.into(), acc.into()]);
    k.op("add.u32", [i.into(), i.into(), (SUMSQ_BLOCKS * THREADS).into()]);
    k.bra(&top);
    k.place(&end);
    let f = k.un("cvt.rn.f32.f64", RegKind::F32, acc);
    let s = k.block_reduce_f32(f, "add", &scratch, tid, THREADS);
    let first = k.setp("eq.u32", tid, 0u32);
    let pa = k.addr_of(parts, bid, 4);
    k.op_if(first, false, "st.global.f32", [addr(pa, 0), s.into()]);
    k.ret();
    k
}

/// Pass 2: params (out, partials, nparts, max_norm). One block; writes `[Σ, scale]`.
pub fn sumsq_finish_kernel() -> Kernel {
    let mut k = Kernel::new("sumsq_finish").with_block(THREADS, 1, 1);
    let out = k.param_reg("out", ParamTy::U64);
    let parts = k.param_reg("partials", ParamTy::U64);
    let np = k.param_reg("nparts", ParamTy::U32);
    let max_norm = k.param_reg("max_norm", ParamTy::F32);
    let scratch = k.shared("red", 128, 16);
    let tid = k.sreg("%tid.x");
    let acc = k.imm_f32(0.0);
    let j = k.un("mov.u32", RegKind::B32, tid);
    let top = k.label("loop");
    let end = k.label("end");
    k.place(&top);
    let done = k.setp("ge.u32", j, np);
    k.bra_if(done, false, &end);
    let a = k.addr_of(parts, j, 4);
    let v = k.reg(RegKind::F32);
    k.op("ld.global.f32", [v.into(), addr(a, 0)]);
    k.op("add.rn.f32", [acc.into(), acc.into(), v.into()]);
    k.op("add.u32", [j.into(), j.into(), THREADS.into()]);
    k.bra(&top);
    k.place(&end);
    let s = k.block_reduce_f32(acc, "add", &scratch, tid, THREADS);
    let norm = k.un("sqrt.rn.f32", RegKind::F32, s);
    let den = k.bin("add.rn.f32", RegKind::F32, norm, 1e-6f32);
    let q = k.bin("div.rn.f32", RegKind::F32, max_norm, den);
    let q = k.bin("min.f32", RegKind::F32, q, 1.0f32);
    let on = k.setp("gt.f32", max_norm, 0.0f32);
    let one = k.imm_f32(1.0);
    let scale = k.tri("selp.f32", RegKind::F32, q, one, on);
    let first = k.setp("eq.u32", tid, 0u32);
    k.op_if(first, false, "st.global.f32", [addr(out, 0), s.into()]);
    k.op_if(first, false, "st.global.f32", [addr(out, 4), scale.into()]);
    k.ret();
    k
}

/// Pass 1 over `n` elements of `x` into `partials` ([`SUMSQ_BLOCKS`] floats).
pub fn sumsq_partial(gpu: &Gpu, f: &Function, partials: u64, x: u64, n: u32) -> Result<()> {
    gpu.launch(f, LaunchConfig::linear(SUMSQ_BLOCKS, THREADS), &[Arg::U64(partials), Arg::U64(x), Arg::U32(n)])
}

/// Pass 2: `out[0] = Σ partials`, `out[1] = clip scale` for `max_norm`.
pub fn sumsq_finish(gpu: &Gpu, f: &Function, out: u64, partials: u64, max_norm: f32) -> Result<()> {
    gpu.launch(
        f,
        LaunchConfig::linear(1, THREADS),
        &[Arg::U64(out), Arg::U64(partials), Arg::U32(SUMSQ_BLOCKS), Arg::F32(max_norm)],
    )
}

/// A step's scalars as an update kernel holds them: registers loaded from the arena, and the
/// optimizer's constants.
pub(crate) struct StepScalars {
    pub lr: Reg,
    pub bc1: Reg,
    pub bc2: Reg,
    pub gs: Reg,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
}

/// An f32 load from `base + off` bytes.
pub(crate) fn ld(k: &mut Kernel, base: Reg, off: i64) -> Reg {
    let r = k.reg(RegKind::F32);
    k.op("ld.global.f32", [r.into(), addr(base, off)]);
    r
}

/// Declare the step's scalar params (lr, bc1, bc2, gscale: arena addresses written before each
/// replay) and load them once.
pub(crate) fn step_scalars(k: &mut Kernel, beta1: f64, beta2: f64, eps: f64) -> StepScalars {
    let params = ["lr", "bc1", "bc2", "gscale"].map(|n| k.param_reg(n, ParamTy::U64));
    let [lr, bc1, bc2, gs] = params.map(|p| ld(k, p, 0));
    StepScalars { lr, bc1, bc2, gs, beta1, beta2, eps }
}

/// One element's AdamW update from loaded p, g, m, v; returns (p', m', v'). The instruction
/// sequence is the CPU reference's order, and both the per-tensor and the multi-tensor kernels
/// emit it here, so they agree with the reference and each other bit for bit.
pub(crate) fn emit_update(
    k: &mut Kernel,
    [pv, gv, mv, vv]: [Reg; 4],
    s: &StepScalars,
    wd: impl Into<Opnd>,
) -> (Reg, Reg, Reg) {
    let (b1, b2) = (s.beta1 as f32, s.beta2 as f32);
    let (omb1, omb2) = (1.0f32 - b1, 1.0f32 - b2);
    let f = RegKind::F32;
    let gi = k.bin("mul.rn.f32", f, gv, s.gs);
    let t1 = k.bin("mul.rn.f32", f, b1, mv);
    let t2 = k.bin("mul.rn.f32", f, omb1, gi);
    let m2 = k.bin("add.rn.f32", f, t1, t2);
    let t3 = k.bin("mul.rn.f32", f, b2, vv);
    let t4 = k.bin("mul.rn.f32", f, omb2, gi);
    let t5 = k.bin("mul.rn.f32", f, t4, gi);
    let v2 = k.bin("add.rn.f32", f, t3, t5);
    let mh = k.bin("div.rn.f32", f, m2, s.bc1);
    let vh = k.bin("div.rn.f32", f, v2, s.bc2);
    let sq = k.un("sqrt.rn.f32", f, vh);
    let den = k.bin("add.rn.f32", f, sq, s.eps as f32);
    let q = k.bin("div.rn.f32", f, mh, den);
    let dec = k.bin("mul.rn.f32", f, wd, pv);
    let upd = k.bin("add.rn.f32", f, q, dec);
    let step = k.bin("mul.rn.f32", f, s.lr, upd);
    let p2 = k.bin("sub.rn.f32", f, pv, step);
    (p2, m2, v2)
}

/// The IR's AdamW (`alpha_ir::Op::AdamW`), one tensor per launch, in place, in the CPU
/// reference's formula and order (`alpha-cpu/src/kernels/adamw.rs`): `g ← g·gscale;`
/// `m ← β₁m + (1−β₁)g; v ← β₂v + (1−β₂)g·g; p ← p − lr·((m/bc₁)/(√(v/bc₂) + ε) + λp)` with
/// `bc = 1 − βᵗ`. The step's scalars (lr, bc₁, bc₂ written by the host; gscale computed by the
/// step's clip) are read from their arena slots, so the captured graph replays unchanged.
/// Params (p, g, m, v, lr, bc1, bc2, gscale); β, ε, λ and n are immediates.
pub fn step_kernel(beta1: f64, beta2: f64, eps: f64, weight_decay: f64, n: usize) -> Kernel {
    let mut k = Kernel::new("adamw_step").with_block(THREADS, 1, 1);
    let p = k.param_reg("p", ParamTy::U64);
    let g = k.param_reg("g", ParamTy::U64);
    let m = k.param_reg("m", ParamTy::U64);
    let v = k.param_reg("v", ParamTy::U64);
    let scalars = step_scalars(&mut k, beta1, beta2, eps);
    let nr = k.imm_u32(n as u32);
    let (i, stride, top, end) = crate::kernels::pointwise::grid_stride_begin(&mut k, nr);
    let pa = k.addr_of(p, i, 4);
    let ga = k.addr_of(g, i, 4);
    let ma = k.addr_of(m, i, 4);
    let va = k.addr_of(v, i, 4);
    let (pv, gv, mv, vv) = (ld(&mut k, pa, 0), ld(&mut k, ga, 0), ld(&mut k, ma, 0), ld(&mut k, va, 0));
    let (p2, m2, v2) = emit_update(&mut k, [pv, gv, mv, vv], &scalars, weight_decay as f32);
    k.op("st.global.f32", [addr(pa, 0), p2.into()]);
    k.op("st.global.f32", [addr(ma, 0), m2.into()]);
    k.op("st.global.f32", [addr(va, 0), v2.into()]);
    crate::kernels::pointwise::grid_stride_end(&mut k, i, stride, nr, &top, &end);
    k
}

/// CPU reference: (Σx² in f64, clip scale).
pub fn sumsq_reference(x: &[f32], max_norm: f32) -> (f64, f32) {
    let s: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
    let norm = s.sqrt() as f32;
    let scale = if max_norm > 0.0 { (max_norm / (norm + 1e-6)).min(1.0) } else { 1.0 };
    (s, scale)
}

pub fn kernels() -> Vec<Kernel> {
    vec![adamw_kernel(), sumsq_partial_kernel(), sumsq_finish_kernel(), step_kernel(0.9, 0.95, 1e-8, 0.1, 1000)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_render_within_budget() {
        for k in kernels() {
            k.check_budget().unwrap();
        }
        let t = adamw_kernel().render();
        assert!(t.contains(".shared .align 16 .b8 segs[8192];"));
        assert!(t.contains("sqrt.rn.f32") && !t.contains("fma.rn.f32"));
    }

    #[test]
    fn segment_table_must_tile_the_region() {
        let s = [Segment { offset: 0, len: 10, decay: true }, Segment { offset: 10, len: 5, decay: false }];
        assert_eq!(segment_table(&s, 15).unwrap(), vec![0, 1, 10, 0]);
        assert!(segment_table(&s, 16).is_err());
        let gap = [Segment { offset: 1, len: 10, decay: true }];
        assert!(segment_table(&gap, 11).is_err());
    }

    #[test]
    fn reference_first_step_moves_by_lr() {
        // Step 1 with bias correction: update = g/(|g| + eps) ≈ ±1, so p moves by ≈ lr.
        let s = AdamwScalars { lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, step: 1 }.device();
        let mut p = vec![1.0f32, 1.0];
        let mut m = vec![0.0; 2];
        let mut v = vec![0.0; 2];
        let segs = [Segment { offset: 0, len: 2, decay: true }];
        reference(&mut p, &[0.5, -2.0], &mut m, &mut v, &segs, &s, 1.0);
        assert!((p[0] - 0.99).abs() < 1e-6 && (p[1] - 1.01).abs() < 1e-6, "{p:?}");
    }
}
