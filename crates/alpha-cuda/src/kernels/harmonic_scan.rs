//! The harmonic scan (`Op::HarmonicScan`) and its pullback: for each window, head h and
//! harmonic ℓ a state S ∈ R^D stepped S_t = γ_{h,ℓ}·S_{t−1} + w_{t,h,ℓ}·v_{t,h} from zero,
//! read y_{t,h} = Σ_ℓ r_{t,h,ℓ}·S_{t,h,ℓ}.
//!
//! Why: Diakosmos's temporal path is this op, stepped position by position (the true
//! recurrence, never the cumulative sum scaled by γ^{−t}, which overflows f32), its H·L·D state
//! never in memory; the GPU must step it as the CPU reference
//! (`alpha_cpu::kernels::harmonic_scan`) does. Each coordinate i of a head's states evolves on
//! its own, and y's coordinate i reads only coordinate i of the L states: so the forward runs
//! one thread a (window, head, coordinate), its L states in registers, stepping through T in
//! order, and no thread waits for another. In the backward, dr, dw and dγ sum over the D
//! coordinates at every position; those sums run in the CPU's order (see [`super::replay`]),
//! one block a (window, head).
//!
//! Every operation is the CPU's, in the CPU's order, each rounded (`mul.rn`, `add.rn`: no
//! fused multiply-adds, which the CPU's f32 code does not use), so the GPU's results equal the
//! CPU's bit for bit, forward and backward; dγ sums the windows' parts in window order as the
//! CPU does. Nothing is atomic: a run repeats bit for bit.
//!
//! How: r, w `[B, T, H, L]`, v and y `[B, T, H, D]`, γ `[H, L]`, all f32. Forward: B·H·D
//! threads, grid-stride, each issuing the loads of a few positions ([`FORWARD_AHEAD`]) before
//! stepping through them. Backward: B·H blocks of D row threads and 3L task threads; each row
//! records its checkpoints, then walks back chunk by chunk (replaying each), holding
//! G = ∂L/∂S for its coordinate's L states, writing per position its terms of dr, dw and dγ
//! (L each); the tasks add them in coordinate order, dγ's tasks also over positions, last
//! first. dv is a row's own. Each block writes its (window, head)'s part of dγ, which
//! [`super::replay::window_sum_kernel`] adds up over windows. Scratch:
//! [`Dims::scratch_floats`] (checkpoints, the replayed chunk, the parts).

use anyhow::{bail, Result};

use crate::kernels::replay::{self, load_one_if, load_vector, load_vector_if, Layout};
use crate::ptx::{addr, Kernel, ParamTy, Reg, RegKind};

/// The most harmonics a thread keeps in registers.
pub const MAX_HARMONICS: usize = 32;

/// Positions whose loads a thread issues together as it steps forward (see
/// [`replay::positions_ahead`]): 8 of Diakosmos's take 136 registers in the forward.
pub const AHEAD: usize = 8;

/// Positions whose loads the forward issues together when it is written to run
/// [`FORWARD_BLOCKS_PER_SM`] blocks an SM.
pub const FORWARD_AHEAD: usize = 3;

/// Blocks of 256 threads an SM the forward is written for. Why: at [`AHEAD`] positions ahead a
/// thread took 136 registers, so an SM held one block (8 warps) and Diakosmos's 333 blocks at
/// 64 windows ran in three rounds, each thread waiting on its loads with few warps to cover
/// them. Three blocks an SM (85 registers a thread, loads three positions ahead) hold all 333
/// at once, with three times the warps. The arithmetic is the same, so the same bits.
pub const FORWARD_BLOCKS_PER_SM: usize = 3;

/// Blocks an SM the backward is written for. Why: on the H200 Diakosmos's backward (ncu, 64
/// windows) ran one block of 7 warps an SM, held there by its 219 registers a thread and
/// 148 KB of terms, issuing an instruction a warp every 7.2 cycles with memory and arithmetic
/// each a quarter busy: latency with too few warps to hide it, and 448 blocks in four rounds
/// on 132 SMs. Two blocks an SM (a group of 3 positions, 111 KB; positions' loads 4 ahead in
/// the replay; ptxas held to 128 registers, 125 used, none spilled) hide twice the latency and
/// take two rounds. The results are the same bits: only when loads issue and how many
/// positions the rows run ahead of the sums change.
pub const BACKWARD_BLOCKS_PER_SM: usize = 2;

/// Positions whose loads the backward's replay issues together at [`BACKWARD_BLOCKS_PER_SM`]
/// blocks an SM ([`AHEAD`] at one).
pub const BACKWARD_AHEAD: usize = 4;

/// Sizes: `b` windows of `t` positions, `h` heads of `l` harmonics, values of `d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    /// An error where the kernels do not take these sizes.
    pub fn check(&self) -> Result<()> {
        if self.l == 0 || self.l > MAX_HARMONICS {
            bail!("the harmonic scan's GPU kernels keep L ≤ {MAX_HARMONICS} states in registers, L is {}", self.l);
        }
        if self.b * self.t * self.h * self.l.max(self.d) >= 1 << 31 {
            bail!("the harmonic scan's tensors exceed 32-bit indexing");
        }
        self.layout().map(|_| ())
    }

    /// The backward's block: D rows of L state floats, 3L terms a position and 3L sums.
    pub fn layout(&self) -> Result<Layout> {
        Layout::new(self.b * self.h, self.t, self.d, self.l, 3 * self.l, 3 * self.l)
    }

    /// The backward's layout for `blocks` blocks an SM ([`BACKWARD_BLOCKS_PER_SM`] or 1): its
    /// group cut until their buffers fit together.
    pub fn backward_layout(&self, blocks: usize) -> Result<Layout> {
        Ok(self.layout()?.for_blocks_per_sm(blocks))
    }

    /// Scratch the backward needs: checkpoints, the replayed chunk, then the windows' parts of
    /// dγ; (offset of the chunk, offset of the parts, total), in floats.
    pub fn scratch_floats(&self) -> Result<(usize, usize, usize)> {
        Ok(self.layout()?.scratch_floats(self.b * self.h * self.l))
    }
}

/// Where a (window, head)'s inputs are at position s.
struct At {
    /// (b·T + s)·H + h: the row of r and w.
    bth: Reg,
    /// ((b·T + s)·H + h)·D + i: this coordinate's v and y.
    bthi: Reg,
}

fn at(k: &mut Kernel, d: &Dims, (b, h): (Reg, Reg), s: Reg, i: Reg) -> At {
    let bt = k.tri("mad.lo.u32", RegKind::B32, b, d.t as u32, s);
    let bth = k.tri("mad.lo.u32", RegKind::B32, bt, d.h as u32, h);
    let bthi = k.tri("mad.lo.u32", RegKind::B32, bth, d.d as u32, i);
    At { bth, bthi }
}

/// One position of a coordinate's states (the CPU's `step` for one i): S_ℓ ← γ_ℓ·S_ℓ + w_ℓ·v.
fn step_states(k: &mut Kernel, state: &[Reg], gamma: &[Reg], w: &[Reg], v: Reg) {
    for ((&x, &g), &a) in state.iter().zip(gamma).zip(w) {
        let decayed = k.bin("mul.rn.f32", RegKind::F32, g, x);
        let written = k.bin("mul.rn.f32", RegKind::F32, a, v);
        k.op("add.rn.f32", [x.into(), decayed.into(), written.into()]);
    }
}

/// Params (y, r, w, v, gamma). Grid-stride over B·H·D threads, one a (window, head,
/// coordinate); written for [`FORWARD_BLOCKS_PER_SM`] blocks an SM where `blocks_per_sm` is
/// that, else for one ([`AHEAD`] positions ahead).
pub fn forward_kernel(d: &Dims, blocks_per_sm: usize) -> Kernel {
    let mut k = Kernel::new("harmonic_scan_fwd").with_block(256, 1, 1);
    let ahead = if blocks_per_sm > 1 {
        k.min_blocks_per_sm = Some(blocks_per_sm as u32);
        FORWARD_AHEAD
    } else {
        AHEAD
    };
    let y = k.param_reg("y", ParamTy::U64);
    let r = k.param_reg("r", ParamTy::U64);
    let w = k.param_reg("w", ParamTy::U64);
    let v = k.param_reg("v", ParamTy::U64);
    let gamma = k.param_reg("gamma", ParamTy::U64);
    let n = k.imm_u32((d.b * d.h * d.d) as u32);
    let (idx, stride, top, end) = crate::kernels::pointwise::grid_stride_begin_with(&mut k, n, Some(256));
    let bh = k.bin("div.u32", RegKind::B32, idx, d.d as u32);
    let i = k.bin("rem.u32", RegKind::B32, idx, d.d as u32);
    let b = k.bin("div.u32", RegKind::B32, bh, d.h as u32);
    let h = k.bin("rem.u32", RegKind::B32, bh, d.h as u32);
    let g = load_vector(&mut k, gamma, h, d.l);
    let state: Vec<Reg> = (0..d.l).map(|_| k.imm_f32(0.0)).collect();
    let load = |k: &mut Kernel, s: Reg, ok: Reg| {
        let p = at(k, d, (b, h), s, i);
        let ws = load_vector_if(k, ok, w, p.bth, d.l);
        let vs = load_one_if(k, ok, v, p.bthi);
        let rs = load_vector_if(k, ok, r, p.bth, d.l);
        (p.bthi, ws, vs, rs)
    };
    let step = |k: &mut Kernel, _: Reg, (bthi, ws, vs, rs): (Reg, Vec<Reg>, Reg, Vec<Reg>)| {
        step_states(k, &state, &g, &ws, vs);
        let out = k.imm_f32(0.0);
        for (&x, &a) in state.iter().zip(&rs) {
            let t = k.bin("mul.rn.f32", RegKind::F32, a, x);
            k.op("add.rn.f32", [out.into(), out.into(), t.into()]);
        }
        let ya = k.addr_of(y, bthi, 4);
        k.op("st.global.f32", [addr(ya, 0), out.into()]);
    };
    let zero = k.imm_u32(0);
    replay::positions_ahead(&mut k, (zero, (d.t as u32).into()), ahead, load, step);
    crate::kernels::pointwise::grid_stride_end(&mut k, idx, stride, n, &top, &end);
    k
}

/// A forward launch's arguments: y, r, w, v, γ.
pub fn forward_arguments<T>(tensors: [T; 5]) -> Vec<T> {
    Vec::from(tensors)
}

/// Params (dr, dw, dv, parts, checkpoints, chunk, r, w, v, gamma, dy): one block a (window,
/// head) ([`Dims::backward_layout`]'s threads and dynamic shared memory), written to run
/// `blocks_per_sm` blocks an SM ([`BACKWARD_BLOCKS_PER_SM`], or 1), then
/// [`super::replay::window_sum_kernel`] over `parts` for dγ.
pub fn backward_kernel(d: &Dims, blocks_per_sm: usize) -> Result<Kernel> {
    d.check()?;
    let lay = d.backward_layout(blocks_per_sm)?;
    let ahead = if blocks_per_sm > 1 { BACKWARD_AHEAD } else { AHEAD };
    let l = d.l;
    let name = if blocks_per_sm > 1 { "harmonic_scan_bwd" } else { "harmonic_scan_bwd_one_block" };
    let mut k = Kernel::new(name).with_block(lay.threads() as u32, 1, 1);
    if blocks_per_sm > 1 {
        k.min_blocks_per_sm = Some(blocks_per_sm as u32);
    }
    let buf = k.dynamic_shared_array("harmonic_scan_terms", lay.shared_bytes() as u32, 16);
    let dr = k.param_reg("dr", ParamTy::U64);
    let dw = k.param_reg("dw", ParamTy::U64);
    let dv = k.param_reg("dv", ParamTy::U64);
    let parts = k.param_reg("parts", ParamTy::U64);
    let checkpoints = k.param_reg("checkpoints", ParamTy::U64);
    let chunk = k.param_reg("chunk", ParamTy::U64);
    let r_in = k.param_reg("r", ParamTy::U64);
    let w = k.param_reg("w", ParamTy::U64);
    let v = k.param_reg("v", ParamTy::U64);
    let gamma = k.param_reg("gamma", ParamTy::U64);
    let dy = k.param_reg("dy", ParamTy::U64);
    let r = replay::roles(&mut k, &lay);
    let i = r.row;
    let b = k.bin("div.u32", RegKind::B32, r.window, d.h as u32);
    let h = k.bin("rem.u32", RegKind::B32, r.window, d.h as u32);
    let ck = replay::thread_base(&mut k, checkpoints, &r, replay::chunk_count(d.t) * l * d.d);
    let st = replay::thread_base(&mut k, chunk, &r, replay::chunk_len(d.t) * l * d.d);
    let g = load_vector(&mut k, gamma, h, l);
    // The coordinate's states (S_t of the position being walked) and their gradient G.
    let state: Vec<Reg> = (0..l).map(|_| k.imm_f32(0.0)).collect();
    let grad: Vec<Reg> = (0..l).map(|_| k.imm_f32(0.0)).collect();
    // The replayed state before the next position walked, read while this one's step runs.
    let next_prev: Vec<Reg> = (0..l).map(|_| k.imm_f32(0.0)).collect();
    let mut load = |k: &mut Kernel, s: Reg, ok: Reg| {
        let p = at(k, d, (b, h), s, i);
        (load_vector_if(k, ok, w, p.bth, l), load_one_if(k, ok, v, p.bthi))
    };
    let mut step = |k: &mut Kernel, (ws, vs): (Vec<Reg>, Reg)| step_states(k, &state, &g, &ws, vs);
    let recorded = k.label("recorded");
    k.bra_if(r.is_row, true, &recorded);
    replay::record(&mut k, &lay, ck, &state, ahead, &mut load, &mut step);
    k.place(&recorded);
    let stride = (lay.stride() * 4) as i64;
    let slot = |n: usize| n as i64 * stride;
    // A position's inputs, loaded a group at a time: r, w, v_i, dy_i and where dv_i goes.
    let inputs = |k: &mut Kernel, s: Reg, ok: Reg| {
        let p = at(k, d, (b, h), s, i);
        let rs = load_vector_if(k, ok, r_in, p.bth, l);
        let ws = load_vector_if(k, ok, w, p.bth, l);
        let vs = load_one_if(k, ok, v, p.bthi);
        let dys = load_one_if(k, ok, dy, p.bthi);
        (rs, ws, vs, dys, p.bthi)
    };
    type Inputs = (Vec<Reg>, Vec<Reg>, Reg, Reg, Reg);
    let rows = |k: &mut Kernel, s: Reg, terms: Reg, (rs, ws, vs, dys, bthi): Inputs| {
        let at = replay::replay_at_chunk_end(k, &lay, s, (ck, st), &state, ahead, &mut load, &mut step);
        let prev = replay::load_replayed_ahead(k, &lay, st, at, &next_prev);
        let dvs = k.imm_f32(0.0);
        for c in 0..l {
            // dr's term S_t·dy; G += r·dy; dw's term G·v; dγ's term G·S_{t−1}.
            let x = k.bin("mul.rn.f32", RegKind::F32, state[c], dys);
            k.op("st.shared.f32", [addr(terms, slot(c)), x.into()]);
            let x = k.bin("mul.rn.f32", RegKind::F32, rs[c], dys);
            k.op("add.rn.f32", [grad[c].into(), grad[c].into(), x.into()]);
            let x = k.bin("mul.rn.f32", RegKind::F32, grad[c], vs);
            k.op("st.shared.f32", [addr(terms, slot(l + c)), x.into()]);
            let x = k.bin("mul.rn.f32", RegKind::F32, grad[c], prev[c]);
            k.op("st.shared.f32", [addr(terms, slot(2 * l + c)), x.into()]);
            // dv += w·G; then G ← γ·G (= ∂L/∂S_{t−1} from later positions).
            let x = k.bin("mul.rn.f32", RegKind::F32, ws[c], grad[c]);
            k.op("add.rn.f32", [dvs.into(), dvs.into(), x.into()]);
            k.op("mul.rn.f32", [grad[c].into(), g[c].into(), grad[c].into()]);
        }
        let dva = k.addr_of(dv, bthi, 4);
        k.op("st.global.f32", [addr(dva, 0), dvs.into()]);
        for (&x, &y) in state.iter().zip(&prev) {
            k.op("mov.f32", [x.into(), y.into()]);
        }
    };
    // dγ's task keeps its sum over the positions walked so far.
    let dgamma = k.imm_f32(0.0);
    let tasks = |k: &mut Kernel, half: Reg, gi: Reg| {
        // Tasks 0..L: dr[ℓ]; L..2L: dw[ℓ]; 2L..3L: dγ[ℓ].
        let at_slot = k.tri("mad.lo.u32", RegKind::B32, r.task, stride as u32, half);
        let sums = replay::ordered_sums(k, &lay, at_slot, None);
        let kind = k.bin("div.u32", RegKind::B32, r.task, l as u32);
        let c = k.bin("rem.u32", RegKind::B32, r.task, l as u32);
        let is_dr = k.setp("eq.u32", kind, 0u32);
        let is_dw = k.setp("eq.u32", kind, 1u32);
        let is_dg = k.setp("eq.u32", kind, 2u32);
        let out = k.reg(RegKind::B64);
        k.op("selp.b64", [out.into(), dr.into(), dw.into(), is_dr.into()]);
        for (p, &x) in sums.iter().enumerate() {
            let (valid, s) = replay::group_position(k, &lay, gi, p);
            let bt = k.tri("mad.lo.u32", RegKind::B32, b, d.t as u32, s);
            let bth = k.tri("mad.lo.u32", RegKind::B32, bt, d.h as u32, h);
            let e = k.tri("mad.lo.u32", RegKind::B32, bth, l as u32, c);
            let a = k.addr_of(out, e, 4);
            let store = k.reg(RegKind::Pred);
            k.op("and.pred", [store.into(), valid.into(), is_dg.into()]);
            let plain = k.reg(RegKind::Pred);
            k.op("or.pred", [plain.into(), is_dr.into(), is_dw.into()]);
            k.op("and.pred", [plain.into(), plain.into(), valid.into()]);
            k.op_if(plain, false, "st.global.f32", [addr(a, 0), x.into()]);
            k.op_if(store, false, "add.rn.f32", [dgamma.into(), dgamma.into(), x.into()]);
        }
    };
    replay::walk(&mut k, &lay, &r, &buf, (inputs, rows), tasks);
    // dγ's tasks write this (window, head)'s part at [b][h·L + ℓ].
    let end = k.label("end");
    let kind = k.bin("div.u32", RegKind::B32, r.task, l as u32);
    let is_dg = k.setp("eq.u32", kind, 2u32);
    let write = k.bin("and.pred", RegKind::Pred, is_dg, r.is_task);
    k.bra_if(write, true, &end);
    let c = k.bin("rem.u32", RegKind::B32, r.task, l as u32);
    let e = k.tri("mad.lo.u32", RegKind::B32, r.window, l as u32, c);
    let pa = k.addr_of(parts, e, 4);
    k.op("st.global.f32", [addr(pa, 0), dgamma.into()]);
    k.place(&end);
    k.ret();
    Ok(k)
}

/// A backward launch's arguments: dr, dw, dv; the parts of dγ, the checkpoints, the replayed
/// chunk (three scratch regions); r, w, v, γ, dy.
pub fn backward_arguments<T>(grads: [T; 3], scratch: [T; 3], inputs: [T; 5]) -> Vec<T> {
    grads.into_iter().chain(scratch).chain(inputs).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Diakosmos at its gate's batch: one 2,048-byte window, 7 heads of 8 harmonics of 190.
    const DIAKOSMOS: Dims = Dims { b: 1, t: 2048, h: 7, l: 8, d: 190 };

    #[test]
    fn arguments_match_the_kernels_parameters() {
        let f = forward_kernel(&DIAKOSMOS, FORWARD_BLOCKS_PER_SM);
        assert_eq!(f.params.len(), forward_arguments([0u64; 5]).len());
        let b = backward_kernel(&DIAKOSMOS, BACKWARD_BLOCKS_PER_SM).unwrap();
        assert_eq!(b.params.len(), backward_arguments([0u64; 3], [0; 3], [0; 5]).len());
        assert!(f.params.iter().chain(&b.params).all(|p| p.ty == ParamTy::U64));
    }

    /// Every float operation is rounded on its own, as the CPU's: no fused multiply-add and no
    /// atomic, so the results are the CPU's bits and repeat.
    #[test]
    fn the_arithmetic_is_the_cpus_unfused_and_without_atomics() {
        for text in [
            forward_kernel(&DIAKOSMOS, 1).render(),
            forward_kernel(&DIAKOSMOS, FORWARD_BLOCKS_PER_SM).render(),
            backward_kernel(&DIAKOSMOS, 1).unwrap().render(),
            backward_kernel(&DIAKOSMOS, BACKWARD_BLOCKS_PER_SM).unwrap().render(),
        ] {
            assert!(!text.contains("fma") && !text.contains("mad.rn") && !text.contains("atom"), "{text}");
        }
        // The forward's position: two products and a sum a harmonic to step, one product and
        // one sum a harmonic to read. The steps of the positions loaded together are written out.
        for (per_sm, ahead) in [(1, AHEAD), (FORWARD_BLOCKS_PER_SM, FORWARD_AHEAD)] {
            let f = forward_kernel(&DIAKOSMOS, per_sm).render();
            assert_eq!(f.matches("mul.rn.f32").count(), ahead * 3 * 8);
            assert_eq!(f.matches("add.rn.f32").count(), ahead * 2 * 8);
            // Every position's loads come before the first step's arithmetic.
            let first_step = f.find("mul.rn.f32").unwrap();
            assert_eq!(f[first_step..].matches("ld.global.f32").count(), 0);
        }
    }

    /// The backward takes a head in one block of 190 coordinates (192 threads) and 24 sums,
    /// four positions a group at one block an SM, three at two (two buffers in one SM's
    /// shared memory), within the launch budget.
    #[test]
    fn the_backward_block_fits_diakosmos_shapes() {
        let one = backward_kernel(&DIAKOSMOS, 1).unwrap();
        one.check_budget().unwrap();
        assert_eq!(
            (one.min_blocks_per_sm, one.dynamic_shared as usize),
            (None, DIAKOSMOS.layout().unwrap().shared_bytes())
        );
        let k = backward_kernel(&DIAKOSMOS, BACKWARD_BLOCKS_PER_SM).unwrap();
        k.check_budget().unwrap();
        assert_eq!(k.block_threads(), Some(192 + 32));
        assert_eq!(DIAKOSMOS.layout().unwrap().group, 4);
        let lay = DIAKOSMOS.backward_layout(BACKWARD_BLOCKS_PER_SM).unwrap();
        assert_eq!((lay.windows, lay.group, lay.slots, lay.tasks), (7, 3, 24, 24));
        assert_eq!(k.dynamic_shared as usize, lay.shared_bytes());
        assert!(2 * (lay.shared_bytes() + 1024) <= crate::ptx::SHARED_PER_SM as usize);
        assert_eq!(k.min_blocks_per_sm, Some(2));
        let (chunk_at, parts_at, total) = DIAKOSMOS.scratch_floats().unwrap();
        assert!(chunk_at >= lay.checkpoint_floats() && parts_at >= chunk_at + lay.chunk_floats());
        assert_eq!(total - parts_at, 7 * 8);
        assert!(backward_kernel(&Dims { l: 33, ..DIAKOSMOS }, BACKWARD_BLOCKS_PER_SM).is_err());
        for d in [Dims { b: 2, ..DIAKOSMOS }, Dims { b: 1, t: 1, h: 1, l: 1, d: 1 }] {
            backward_kernel(&d, BACKWARD_BLOCKS_PER_SM).unwrap().check_budget().unwrap();
        }
    }
}
