//! The delta-rule memory (`Op::DeltaRule`) and its pullback: M_t = M_{t−1} + β_t (v_t −
//! M_{t−1} k_t) k_tᵀ from M_{−1} = m0 in every window, read o_t = M_t q_t.
//!
//! Why: KickDelta's memory is the IR's one op so that its state (V×K a window) never goes to
//! memory; the GPU must step it as the CPU reference (`alpha_cpu::kernels::delta_rule`) does.
//! Every row of M evolves on its own: row i's update needs only its own error
//! e_i = v_i − M_i·k, and o_t's entry i only row i. So the forward runs one thread a (window,
//! row), the row's K numbers in registers, stepping through T in order, and no thread waits for
//! another. The backward's recurrence for G = ∂L/∂M is row by row too, but dq, dk and dβ sum
//! over the rows at every position; those sums run in the CPU's order (see
//! [`super::replay`]), one block a window.
//!
//! Every operation is the CPU's, in the CPU's order, each rounded (`mul.rn`, `add.rn`: no
//! fused multiply-adds, which the CPU's f32 code does not use), so the GPU's results equal the
//! CPU's bit for bit, forward and backward; `dm0` sums the windows' parts in window order as
//! the CPU does. Nothing is atomic: a run repeats bit for bit.
//!
//! How: q, k `[B, T, K]`, v and o `[B, T, V]`, β `[B, T]`, m0 `[V, K]`, all f32. Forward: B·V
//! threads, grid-stride, each issuing the loads of [`AHEAD`] positions before stepping through
//! them. Backward: B blocks of V row threads and 2K + 1 task threads; each row
//! records its checkpoints, then walks back chunk by chunk (replaying each), writing per
//! position its terms of dq (K), of dk (2K: the CPU adds β·G·e then subtracts M·de) and of dβ
//! (1); the tasks add them in row order. dv is a row's own. Each block writes its window's
//! ∂L/∂M_{−1} as its part of dm0, which [`super::replay::window_sum_kernel`] adds up.
//! Scratch: [`Dims::scratch_floats`] (checkpoints, the replayed chunk, the parts).

use anyhow::{bail, Result};

use crate::kernels::replay::{self, load_one_if, load_vector, load_vector_if, Layout};
use crate::ptx::{addr, Kernel, ParamTy, Reg, RegKind};

/// The most key width a row keeps in registers.
pub const MAX_KEY: usize = 32;

/// Positions whose loads a thread issues together as it steps forward (see
/// [`replay::positions_ahead`]): 4 of KickDelta's take 128 registers.
pub const AHEAD: usize = 4;

/// Positions the backward's record pass and replay load together: fewer than the forward's, as
/// the rows also hold a group's inputs, the row's gradient and the state before each position
/// (4 spill at KickDelta's widths).
const REPLAY_AHEAD: usize = 2;

/// Sizes: `b` windows of `t` positions, keys and queries of `k`, values of `v`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    /// An error where the kernels do not take these sizes.
    pub fn check(&self) -> Result<()> {
        if self.k == 0 || self.k > MAX_KEY {
            bail!("the delta rule's GPU kernels keep a memory row of K ≤ {MAX_KEY} in registers, K is {}", self.k);
        }
        if self.b * self.t * self.k.max(self.v) >= 1 << 31 || self.v * self.k >= 1 << 31 {
            bail!("the delta rule's tensors exceed 32-bit indexing");
        }
        self.layout().map(|_| ())
    }

    /// The backward's block: V rows of K state floats, 3K + 1 terms a position, 2K + 1 sums.
    pub fn layout(&self) -> Result<Layout> {
        Layout::new(self.b, self.t, self.v, self.k, 3 * self.k + 1, 2 * self.k + 1)
    }

    /// Scratch the backward needs: checkpoints, the replayed chunk, then the windows' parts of
    /// dm0; (offset of the chunk, offset of the parts, total), in floats.
    pub fn scratch_floats(&self) -> Result<(usize, usize, usize)> {
        Ok(self.layout()?.scratch_floats(self.b * self.v * self.k))
    }
}

/// Σ_j a_j·b_j from +0 in order, each product rounded, then each sum (the CPU's dot).
fn dot(k: &mut Kernel, a: &[Reg], b: &[Reg]) -> Reg {
    let acc = k.imm_f32(0.0);
    for (&x, &y) in a.iter().zip(b) {
        let p = k.bin("mul.rn.f32", RegKind::F32, x, y);
        k.op("add.rn.f32", [acc.into(), acc.into(), p.into()]);
    }
    acc
}

/// One update of a memory row (the CPU's `step` for one i): e = v − row·k, then
/// row_j ← row_j + (β·e)·k_j.
fn step_row(k: &mut Kernel, row: &[Reg], key: &[Reg], beta: Reg, v: Reg) {
    let u = dot(k, row, key);
    let e = k.bin("sub.rn.f32", RegKind::F32, v, u);
    let w = k.bin("mul.rn.f32", RegKind::F32, beta, e);
    for (&m, &kj) in row.iter().zip(key) {
        let p = k.bin("mul.rn.f32", RegKind::F32, w, kj);
        k.op("add.rn.f32", [m.into(), m.into(), p.into()]);
    }
}

/// The position's row of keys, β and this row's value: (k, β, v) at window `b`, position `s`.
struct At {
    /// b·T + s.
    bt: Reg,
    /// (b·T + s)·V + i.
    bti: Reg,
}

fn at(k: &mut Kernel, d: &Dims, b: Reg, s: Reg, i: Reg) -> At {
    let bt = k.tri("mad.lo.u32", RegKind::B32, b, d.t as u32, s);
    let bti = k.tri("mad.lo.u32", RegKind::B32, bt, d.v as u32, i);
    At { bt, bti }
}

/// Params (o, q, k, v, beta, m0). Grid-stride over B·V threads, one a (window, row).
pub fn forward_kernel(d: &Dims) -> Kernel {
    let mut k = Kernel::new("delta_rule_fwd").with_block(256, 1, 1);
    let o = k.param_reg("o", ParamTy::U64);
    let q = k.param_reg("q", ParamTy::U64);
    let kk = k.param_reg("k", ParamTy::U64);
    let v = k.param_reg("v", ParamTy::U64);
    let beta = k.param_reg("beta", ParamTy::U64);
    let m0 = k.param_reg("m0", ParamTy::U64);
    let n = k.imm_u32((d.b * d.v) as u32);
    let (idx, stride, top, end) = crate::kernels::pointwise::grid_stride_begin_with(&mut k, n, Some(256));
    let b = k.bin("div.u32", RegKind::B32, idx, d.v as u32);
    let i = k.bin("rem.u32", RegKind::B32, idx, d.v as u32);
    let start = load_vector(&mut k, m0, i, d.k);
    let row: Vec<Reg> = start.iter().map(|&x| k.un("mov.f32", RegKind::F32, x)).collect();
    let load = |k: &mut Kernel, s: Reg, ok: Reg| {
        let p = at(k, d, b, s, i);
        let key = load_vector_if(k, ok, kk, p.bt, d.k);
        let bv = load_one_if(k, ok, beta, p.bt);
        let vv = load_one_if(k, ok, v, p.bti);
        let query = load_vector_if(k, ok, q, p.bt, d.k);
        (p.bti, key, bv, vv, query)
    };
    let step = |k: &mut Kernel, _: Reg, (bti, key, bv, vv, query): (Reg, Vec<Reg>, Reg, Reg, Vec<Reg>)| {
        step_row(k, &row, &key, bv, vv);
        let out = dot(k, &row, &query);
        let oa = k.addr_of(o, bti, 4);
        k.op("st.global.f32", [addr(oa, 0), out.into()]);
    };
    let zero = k.imm_u32(0);
    replay::positions_ahead(&mut k, (zero, (d.t as u32).into()), AHEAD, load, step);
    crate::kernels::pointwise::grid_stride_end(&mut k, idx, stride, n, &top, &end);
    k
}

/// A forward launch's arguments: o, q, k, v, β, m0.
pub fn forward_arguments<T>(tensors: [T; 6]) -> Vec<T> {
    Vec::from(tensors)
}

/// Params (dq, dk, dv, dbeta, parts, checkpoints, chunk, q, k, v, beta, m0, dout): one block a
/// window ([`Dims::layout`]'s threads and dynamic shared memory), then
/// [`super::replay::window_sum_kernel`] over `parts` for dm0.
pub fn backward_kernel(d: &Dims) -> Result<Kernel> {
    d.check()?;
    let lay = d.layout()?;
    let kd = d.k;
    let mut k = Kernel::new("delta_rule_bwd").with_block(lay.threads() as u32, 1, 1);
    let buf = k.dynamic_shared_array("delta_rule_terms", lay.shared_bytes() as u32, 16);
    let dq = k.param_reg("dq", ParamTy::U64);
    let dk = k.param_reg("dk", ParamTy::U64);
    let dv = k.param_reg("dv", ParamTy::U64);
    let dbeta = k.param_reg("dbeta", ParamTy::U64);
    let parts = k.param_reg("parts", ParamTy::U64);
    let checkpoints = k.param_reg("checkpoints", ParamTy::U64);
    let chunk = k.param_reg("chunk", ParamTy::U64);
    let q = k.param_reg("q", ParamTy::U64);
    let kk = k.param_reg("k", ParamTy::U64);
    let v = k.param_reg("v", ParamTy::U64);
    let beta = k.param_reg("beta", ParamTy::U64);
    let m0 = k.param_reg("m0", ParamTy::U64);
    let dout = k.param_reg("dout", ParamTy::U64);
    let r = replay::roles(&mut k, &lay);
    let (b, i) = (r.window, r.row);
    let ck = replay::thread_base(&mut k, checkpoints, &r, replay::chunk_count(d.t) * kd * d.v);
    let st = replay::thread_base(&mut k, chunk, &r, replay::chunk_len(d.t) * kd * d.v);
    // The row's state (M_t of the position being walked) and its gradient G.
    let row = k.regs(RegKind::F32, kd);
    let grad: Vec<Reg> = (0..kd).map(|_| k.imm_f32(0.0)).collect();
    let mut load = |k: &mut Kernel, s: Reg, ok: Reg| {
        let p = at(k, d, b, s, i);
        let key = load_vector_if(k, ok, kk, p.bt, kd);
        let bv = load_one_if(k, ok, beta, p.bt);
        let vv = load_one_if(k, ok, v, p.bti);
        (key, bv, vv)
    };
    let mut step = |k: &mut Kernel, (key, bv, vv): (Vec<Reg>, Reg, Reg)| step_row(k, &row, &key, bv, vv);
    let recorded = k.label("recorded");
    k.bra_if(r.is_row, true, &recorded);
    let start = load_vector(&mut k, m0, i, kd);
    for (&m, &x) in row.iter().zip(&start) {
        k.op("mov.f32", [m.into(), x.into()]);
    }
    replay::record(&mut k, &lay, ck, &row, REPLAY_AHEAD, &mut load, &mut step);
    k.place(&recorded);
    let stride = (lay.stride() * 4) as i64;
    let slot = |n: usize| n as i64 * stride;
    // A position's inputs, loaded a group at a time: k, q, β, v_i, do_i and where dv_i goes.
    let inputs = |k: &mut Kernel, s: Reg, ok: Reg| {
        let p = at(k, d, b, s, i);
        let key = load_vector_if(k, ok, kk, p.bt, kd);
        let query = load_vector_if(k, ok, q, p.bt, kd);
        let (bv, vv, dov) =
            (load_one_if(k, ok, beta, p.bt), load_one_if(k, ok, v, p.bti), load_one_if(k, ok, dout, p.bti));
        (key, query, bv, vv, dov, p.bti)
    };
    type Inputs = (Vec<Reg>, Vec<Reg>, Reg, Reg, Reg, Reg);
    let rows = |k: &mut Kernel, s: Reg, terms: Reg, (key, query, bv, vv, dov, bti): Inputs| {
        let (j, _) = replay::replay_at_chunk_end(k, &lay, s, (ck, st), &row, REPLAY_AHEAD, &mut load, &mut step);
        let prev = k.regs(RegKind::F32, kd);
        replay::load_replayed(k, &lay, st, j, &prev);
        // dq's terms: M_t[i, c]·do_i.
        for (c, &m) in row.iter().enumerate() {
            let x = k.bin("mul.rn.f32", RegKind::F32, m, dov);
            k.op("st.shared.f32", [addr(terms, slot(c)), x.into()]);
        }
        // G_i += do_i q; gk = G_i·k.
        let gk = k.imm_f32(0.0);
        for c in 0..kd {
            let x = k.bin("mul.rn.f32", RegKind::F32, dov, query[c]);
            k.op("add.rn.f32", [grad[c].into(), grad[c].into(), x.into()]);
            let y = k.bin("mul.rn.f32", RegKind::F32, grad[c], key[c]);
            k.op("add.rn.f32", [gk.into(), gk.into(), y.into()]);
        }
        // The forward's error at this position, from M_{t−1}.
        let u = dot(k, &prev, &key);
        let e = k.bin("sub.rn.f32", RegKind::F32, vv, u);
        let db = k.bin("mul.rn.f32", RegKind::F32, e, gk);
        k.op("st.shared.f32", [addr(terms, slot(3 * kd)), db.into()]);
        let de = k.bin("mul.rn.f32", RegKind::F32, bv, gk);
        let dva = k.addr_of(dv, bti, 4);
        k.op("st.global.f32", [addr(dva, 0), de.into()]);
        // dk's terms: (β·G_i[c])·e and M_{t−1}[i, c]·de; then G_i −= de·k (= ∂L/∂M_{t−1}).
        for c in 0..kd {
            let a = k.bin("mul.rn.f32", RegKind::F32, bv, grad[c]);
            let a = k.bin("mul.rn.f32", RegKind::F32, a, e);
            k.op("st.shared.f32", [addr(terms, slot(kd + c)), a.into()]);
            let m = k.bin("mul.rn.f32", RegKind::F32, prev[c], de);
            k.op("st.shared.f32", [addr(terms, slot(2 * kd + c)), m.into()]);
            let x = k.bin("mul.rn.f32", RegKind::F32, de, key[c]);
            k.op("sub.rn.f32", [grad[c].into(), grad[c].into(), x.into()]);
        }
        for (&m, &x) in row.iter().zip(&prev) {
            k.op("mov.f32", [m.into(), x.into()]);
        }
    };
    let tasks = |k: &mut Kernel, half: Reg, g: Reg| {
        // Tasks 0..K: dq[c]; K..2K: dk[c]; 2K: dβ.
        let done = k.label("task_done");
        let not_dq = k.label("not_dq");
        let not_dk = k.label("not_dk");
        let is_dq = k.setp("lt.u32", r.task, kd as u32);
        k.bra_if(is_dq, true, &not_dq);
        let at_slot = k.tri("mad.lo.u32", RegKind::B32, r.task, stride as u32, half);
        let sums = replay::ordered_sums(k, &lay, at_slot, None);
        for (p, &x) in sums.iter().enumerate() {
            let (valid, s) = replay::group_position(k, &lay, g, p);
            let bt = k.tri("mad.lo.u32", RegKind::B32, b, d.t as u32, s);
            let e = k.tri("mad.lo.u32", RegKind::B32, bt, kd as u32, r.task);
            let a = k.addr_of(dq, e, 4);
            k.op_if(valid, false, "st.global.f32", [addr(a, 0), x.into()]);
        }
        k.bra(&done);
        k.place(&not_dq);
        let is_dk = k.setp("lt.u32", r.task, 2 * kd as u32);
        k.bra_if(is_dk, true, &not_dk);
        let c = k.bin("sub.u32", RegKind::B32, r.task, kd as u32);
        // Task K + c sums slot K + c less slot 2K + c.
        let at_slot = k.tri("mad.lo.u32", RegKind::B32, r.task, stride as u32, half);
        let sums = replay::ordered_sums(k, &lay, at_slot, Some((kd as i64 * stride) as u32));
        for (p, &x) in sums.iter().enumerate() {
            let (valid, s) = replay::group_position(k, &lay, g, p);
            let bt = k.tri("mad.lo.u32", RegKind::B32, b, d.t as u32, s);
            let e = k.tri("mad.lo.u32", RegKind::B32, bt, kd as u32, c);
            let a = k.addr_of(dk, e, 4);
            k.op_if(valid, false, "st.global.f32", [addr(a, 0), x.into()]);
        }
        k.bra(&done);
        k.place(&not_dk);
        let at_slot = k.bin("add.u32", RegKind::B32, half, (3 * kd as i64 * stride) as u32);
        let sums = replay::ordered_sums(k, &lay, at_slot, None);
        for (p, &x) in sums.iter().enumerate() {
            let (valid, s) = replay::group_position(k, &lay, g, p);
            let bt = k.tri("mad.lo.u32", RegKind::B32, b, d.t as u32, s);
            let a = k.addr_of(dbeta, bt, 4);
            k.op_if(valid, false, "st.global.f32", [addr(a, 0), x.into()]);
        }
        k.place(&done);
    };
    replay::walk(&mut k, &lay, &r, &buf, (inputs, rows), tasks);
    // G is now ∂L/∂M_{−1}: this window's part of dm0, at [b][i·K + c].
    let end = k.label("end");
    k.bra_if(r.is_row, true, &end);
    let bi = k.tri("mad.lo.u32", RegKind::B32, b, d.v as u32, i);
    let pa = k.addr_of(parts, bi, (kd * 4) as u32);
    for (c, &x) in grad.iter().enumerate() {
        k.op("st.global.f32", [addr(pa, (c * 4) as i64), x.into()]);
    }
    k.place(&end);
    k.ret();
    Ok(k)
}

/// A backward launch's arguments: dq, dk, dv, dβ; the parts of dm0, the checkpoints, the
/// replayed chunk (three scratch regions); q, k, v, β, m0, do.
pub fn backward_arguments<T>(grads: [T; 4], scratch: [T; 3], inputs: [T; 6]) -> Vec<T> {
    grads.into_iter().chain(scratch).chain(inputs).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KICKDELTA: Dims = Dims { b: 32, t: 512, k: 15, v: 256 };

    #[test]
    fn arguments_match_the_kernels_parameters() {
        let f = forward_kernel(&KICKDELTA);
        assert_eq!(f.params.len(), forward_arguments([0u64; 6]).len());
        let b = backward_kernel(&KICKDELTA).unwrap();
        assert_eq!(b.params.len(), backward_arguments([0u64; 4], [0; 3], [0; 6]).len());
        assert!(f.params.iter().chain(&b.params).all(|p| p.ty == ParamTy::U64));
    }

    /// Every float operation is rounded on its own, as the CPU's: no fused multiply-add and no
    /// atomic, so the results are the CPU's bits and repeat.
    #[test]
    fn the_arithmetic_is_the_cpus_unfused_and_without_atomics() {
        for text in [forward_kernel(&KICKDELTA).render(), backward_kernel(&KICKDELTA).unwrap().render()] {
            assert!(!text.contains("fma") && !text.contains("mad.rn") && !text.contains("atom"), "{text}");
            assert!(text.contains("mul.rn.f32") && text.contains("add.rn.f32"));
        }
        // The forward's step: K products of the error's dot, K of the update, K of the read, and
        // β·e; one error. The steps of AHEAD positions are written out.
        let f = forward_kernel(&KICKDELTA).render();
        assert_eq!(f.matches("mul.rn.f32").count(), AHEAD * (3 * 15 + 1));
        assert_eq!(f.matches("sub.rn.f32").count(), AHEAD);
        // Every position's loads come before the first step's arithmetic.
        let first_step = f.find("mul.rn.f32").unwrap();
        assert_eq!(f[first_step..].matches("ld.global.f32").count(), 0);
    }

    /// The backward takes KickDelta's window in one block of 256 rows and 31 sums, within the
    /// launch budget, two positions a group; a key too wide for registers is refused.
    #[test]
    fn the_backward_block_fits_kickdeltas_shapes() {
        let k = backward_kernel(&KICKDELTA).unwrap();
        k.check_budget().unwrap();
        assert_eq!(k.block_threads(), Some(256 + 32));
        let lay = KICKDELTA.layout().unwrap();
        assert_eq!((lay.group, lay.slots, lay.tasks), (2, 46, 31));
        assert_eq!(k.dynamic_shared as usize, lay.shared_bytes());
        let (chunk_at, parts_at, total) = KICKDELTA.scratch_floats().unwrap();
        assert!(chunk_at >= lay.checkpoint_floats() && parts_at >= chunk_at + lay.chunk_floats());
        assert_eq!(total - parts_at, 32 * 256 * 15);
        assert!(backward_kernel(&Dims { k: 33, ..KICKDELTA }).is_err());
        // The gate's batch and a single position lay out too.
        for d in [Dims { b: 2, ..KICKDELTA }, Dims { b: 1, t: 1, k: 1, v: 1 }] {
            backward_kernel(&d).unwrap().check_budget().unwrap();
        }
    }
}
