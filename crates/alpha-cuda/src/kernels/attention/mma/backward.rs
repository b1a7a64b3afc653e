//! The backward kernels: delta, dQ, dK/dV, and both passes in one launch.

use super::*;

/// delta of the query tile's 64 rows from `row0` of the head at `delta_head`, read from
/// global by the first 64 threads into shared `sdelta` (zeros past T).
pub(crate) fn delta_to_shared(k: &mut Kernel, ln: &Lanes, delta_head: Reg, row0: Reg, t: u32, sdelta: Reg) {
    let row = k.bin("add.u32", RegKind::B32, row0, ln.tid);
    let small = k.setp("lt.u32", ln.tid, ROWS);
    let inside = k.setp("lt.u32", row, t);
    let ok = k.bin("and.pred", RegKind::Pred, small, inside);
    let dv = k.imm_f32(0.0);
    let da = k.addr_of(delta_head, row, 4);
    k.op_if(ok, false, "ld.global.f32", [dv.into(), addr(da, 0)]);
    let sa = k.tri("mad.lo.u32", RegKind::B32, ln.tid, 4u32, sdelta);
    k.op_if(small, false, "st.shared.f32", [addr(sa, 0), dv.into()]);
}

/// The dQ pass's statistics of the accumulator rows g and g+8: delta (from shared `sdelta`)
/// and lse·log₂e (from the head at `lse_head`, zero past T).
pub(crate) fn dq_row_stats(
    k: &mut Kernel,
    ln: &Lanes,
    sdelta: Reg,
    lse_head: Reg,
    qrow0: Reg,
    t: u32,
) -> (Vec<Reg>, Vec<Reg>) {
    let mut dl = vec![];
    let mut lse2 = vec![];
    for r in 0..2u32 {
        let wr = k.bin("add.u32", RegKind::B32, ln.wrow, ln.g);
        let wr = k.bin("add.u32", RegKind::B32, wr, 8 * r);
        let sa = k.tri("mad.lo.u32", RegKind::B32, wr, 4u32, sdelta);
        let d_ = k.reg(RegKind::F32);
        k.op("ld.shared.f32", [d_.into(), addr(sa, 0)]);
        dl.push(d_);
        let row = k.bin("add.u32", RegKind::B32, qrow0, wr);
        let ok = k.setp("lt.u32", row, t);
        let lv = k.imm_f32(0.0);
        let la = k.addr_of(lse_head, row, 4);
        k.op_if(ok, false, "ld.global.f32", [lv.into(), addr(la, 0)]);
        lse2.push(k.bin("mul.rn.f32", RegKind::F32, lv, LOG2E));
    }
    (dl, lse2)
}

/// One 16-key chunk `kc` of the dQ pass: dS = P ⊙ (dP − delta) (⊙ the soft-cap factor) from
/// the scores `s` and `dp` (two n8 tiles each, query rows × key columns), with P from lse·log₂e
/// `lse2` and delta `dl` of the rows, keys past `lim` masked. Shared by the `mma.sync` and
/// `wgmma` kernels (the same accumulator layout).
pub(crate) fn dq_chunk(
    k: &mut Kernel,
    dims: &Dims,
    [s, dp]: [&[Vec<Reg>]; 2],
    [lse2, dl]: [&[Reg]; 2],
    lim: &[Reg],
    kc: u32,
) -> Vec<Vec<Reg>> {
    let mut ds: Vec<Vec<Reg>> = vec![];
    for j in 0..2usize {
        let mut c = vec![];
        for e in 0..4usize {
            let r = e >> 1;
            let (s2, f) = logit2(k, s[j][e], dims);
            let x = k.bin("sub.rn.f32", RegKind::F32, s2, lse2[r]);
            let p = ex2(k, x);
            let masked = k.setp("lt.s32", lim[r], kc * 16 + 8 * j as u32 + (e & 1) as u32);
            let p = k.tri("selp.f32", RegKind::F32, 0.0f32, p, masked);
            let dd = k.bin("sub.rn.f32", RegKind::F32, dp[j][e], dl[r]);
            let mut v_ = k.bin("mul.rn.f32", RegKind::F32, p, dd);
            if let Some(f) = f {
                v_ = k.bin("mul.rn.f32", RegKind::F32, v_, f);
            }
            c.push(v_);
        }
        ds.push(c);
    }
    ds
}

/// One 16-query chunk `kc` of the dK/dV pass: Pᵀ and dSᵀ from the scores `s` and `dp` (two n8
/// tiles each, key rows × query columns), with the chunk's lse·log₂e and delta read from the
/// statistics at `stl`, queries before `lim` masked. Shared by the `mma.sync` and `wgmma`
/// kernels.
pub(crate) fn dkv_chunk(
    k: &mut Kernel,
    dims: &Dims,
    [s, dp]: [&[Vec<Reg>]; 2],
    stl: Reg,
    lim: &[Reg],
    kc: u32,
) -> (Vec<Vec<Reg>>, Vec<Vec<Reg>>) {
    let mut pc: Vec<Vec<Reg>> = vec![];
    let mut dsc: Vec<Vec<Reg>> = vec![];
    for j in 0..2usize {
        let col = (kc * 16 + 8 * j as u32) * 4;
        let lv = k.regs(RegKind::F32, 2);
        k.op("ld.shared.v2.f32", [Opnd::V(lv.clone()), addr(stl, col as i64)]);
        let dl = k.regs(RegKind::F32, 2);
        k.op("ld.shared.v2.f32", [Opnd::V(dl.clone()), addr(stl, (col + ROWS * 4) as i64)]);
        let (mut pv, mut dsv) = (vec![], vec![]);
        for e in 0..4usize {
            let (r, e1) = (e >> 1, e & 1);
            let (s2, f) = logit2(k, s[j][e], dims);
            let x = k.bin("sub.rn.f32", RegKind::F32, s2, lv[e1]);
            let p = ex2(k, x);
            let masked = k.setp("gt.s32", lim[r], kc * 16 + 8 * j as u32 + e1 as u32);
            let p = k.tri("selp.f32", RegKind::F32, 0.0f32, p, masked);
            let dd = k.bin("sub.rn.f32", RegKind::F32, dp[j][e], dl[e1]);
            let mut d_ = k.bin("mul.rn.f32", RegKind::F32, p, dd);
            if let Some(f) = f {
                d_ = k.bin("mul.rn.f32", RegKind::F32, d_, f);
            }
            pv.push(p);
            dsv.push(d_);
        }
        pc.push(pv);
        dsc.push(dsv);
    }
    (pc, dsc)
}

/// dQ and delta: params (dq, delta, q, k, v, o, lse, do), then `dq_tab` with `inverse_rotary`
/// (dq stored turned back by the rotary), as [`crate::kernels::attention::backward_dq_kernel`].
pub fn backward_dq_kernel(dims: &Dims, inverse_rotary: bool) -> Kernel {
    backward_dq_kernel_rotating(dims, inverse_rotary, [false, false])
}

/// [`backward_dq_kernel`] with q and k (as `load` says) read before their forward rotary and
/// turned on load; `q_tab`, `k_tab` follow the params. Grid [`Dims::grid_q`], block [`block`].
pub fn backward_dq_kernel_rotating(dims: &Dims, inverse_rotary: bool, load: [bool; 2]) -> Kernel {
    dq_kernel_with(dims, inverse_rotary, load, false)
}

/// [`backward_dq_kernel`] reading q, k and v as bf16 ([`forward_kernel_bf16`]'s inputs).
pub fn backward_dq_kernel_bf16(dims: &Dims, inverse_rotary: bool) -> Kernel {
    dq_kernel_with(dims, inverse_rotary, [false, false], true)
}

pub(super) fn dq_kernel_with(dims: &Dims, inverse_rotary: bool, load: [bool; 2], bf16: bool) -> Kernel {
    debug_assert_eq!(dims.d, D);
    let family = if bf16 { BF16_FAMILY } else { "attention_mma" };
    let mut k = Kernel::new(&kernel_name(family, "bwd_dq", load, inverse_rotary)).with_block(THREADS, 1, 1);
    let ([dq, delta, q, kk, v, o, lse, dout], dq_tab, [q_tab, k_tab]) = dq_params(&mut k, inverse_rotary, load);
    let cx = k.sreg("%ctaid.x");
    let regs = DqRegs {
        dq,
        delta,
        q,
        k: kk,
        v,
        o,
        lse,
        dout,
        dq_tab,
        q_tab,
        k_tab,
        bf16,
        do16: None,
        merged: Gradients::Apart,
    };
    dq_body(&mut k, dims, &regs, cx, true);
    k.ret();
    k
}

/// The dQ kernel's pointers.
#[derive(Clone, Copy)]
pub(super) struct DqRegs {
    dq: Reg,
    delta: Reg,
    q: Reg,
    k: Reg,
    v: Reg,
    o: Reg,
    lse: Reg,
    dout: Reg,
    dq_tab: Option<Reg>,
    q_tab: Option<Reg>,
    k_tab: Option<Reg>,
    /// q, k and v are bf16 (see [`forward_kernel_bf16`]).
    bf16: bool,
    /// dO as bf16 (written by [`backward_delta_kernel_bf16`]), with delta read from `delta`
    /// instead of recomputed from dO and O.
    do16: Option<Reg>,
    /// Where dq is stored ([`grad_base`]).
    merged: Gradients,
}

/// The dQ pass of the block whose query tile is counted back from the last by `cx`: delta
/// computed from dO and O (stored to `delta` as well when `store_delta`), then dq.
pub(super) fn dq_body(k: &mut Kernel, dims: &Dims, r: &DqRegs, cx: Reg, store_delta: bool) {
    let t = dims.t as u32;
    let DqRegs { dq, delta, q, k: kk, v, o, lse, dout, dq_tab, q_tab, k_tab, bf16, do16, merged } = *r;
    let in_row = if bf16 { BF16_ROW_BYTES } else { ROW_BYTES };
    // Stages [K0][V0][K1][V1]; Q and dO pass through K1 and V1 before the loop.
    let smem = k.shared("attn_smem", 4 * TILE, 16);
    let dsm = k.shared("attn_delta", ROWS * 4, 16);
    let ln = lanes(k);
    let tile = reversed_tile(k, t, cx);
    let bh = k.sreg("%ctaid.y");
    let kvh = kv_head(k, dims, bh);
    let qb = head_base(k, q, bh, t, in_row);
    let ob = head_base(k, o, bh, t, ROW_BYTES);
    let dob = head_base(k, dout, bh, t, ROW_BYTES);
    let kb = head_base(k, kk, kvh, t, in_row);
    let vb = head_base(k, v, kvh, t, in_row);
    let qrow0 = k.bin("mul.lo.u32", RegKind::B32, tile, ROWS);
    let sm = k.un("mov.u32", RegKind::B32, Opnd::S(smem));
    let sdelta = k.un("mov.u32", RegKind::B32, Opnd::S(dsm));
    let mp = mover(k, &ln, None, t);
    let mq = mover_of(k, &ln, q_tab, t, bf16);
    let mk = mover_of(k, &ln, k_tab, t, bf16);
    let mv = mover_of(k, &ln, None, t, bf16);
    let s1v = k.bin("add.u32", RegKind::B32, sm, 3 * TILE);
    if let Some(do16) = do16 {
        k.comment("delta of the tile's rows from global; dO as bf16 through stage 1");
        let deltab = head_base(k, delta, bh, t, 4);
        delta_to_shared(k, &ln, deltab, qrow0, t, sdelta);
        let md = mover_bf16(k, &ln, t);
        let d16 = head_base(k, do16, bh, t, BF16_ROW_BYTES);
        let f = md.issue(k, d16, qrow0, s1v);
        md.store(k, &f);
    } else {
        let deltab = store_delta.then(|| head_base(k, delta, bh, t, 4));
        let fdo = delta_rows(k, &ln, &mp, [dob, ob], qrow0, t, deltab, Some(sdelta), s1v, None);
        mp.store(k, &fdo);
    }
    k.comment("prologue: Q through stage 1, the first K and V tiles into stage 0");
    {
        let s1 = k.bin("add.u32", RegKind::B32, sm, 2 * TILE);
        let f = mq.issue(k, qb, qrow0, s1);
        mq.store(k, &f);
        let zero = k.imm_u32(0);
        let fk = mk.issue(k, kb, zero, sm);
        let s0v = k.bin("add.u32", RegKind::B32, sm, TILE);
        let fv = mv.issue(k, vb, zero, s0v);
        mk.store(k, &fk);
        mv.store(k, &fv);
    }
    k.barrier();
    let s1 = k.bin("add.u32", RegKind::B32, sm, 2 * TILE);
    let qf = a_frags(k, &ln, s1);
    let dof = a_frags(k, &ln, s1v);
    let lb = head_base(k, lse, bh, t, 4);
    let (dl, lse2) = dq_row_stats(k, &ln, sdelta, lb, qrow0, t);
    k.barrier();
    let acc: Vec<Vec<Reg>> = (0..8).map(|_| zeros(k, 4)).collect();
    let kt = k.imm_u32(0);
    let stage = k.imm_u32(0);
    let top = k.label("ktile");
    let skip_load = k.label("skip_load");
    let skip_store = k.label("skip_store");
    k.place(&top);
    let has_next = k.setp("lt.u32", kt, tile);
    k.bra_if(has_next, true, &skip_load);
    let nrow0 = k.tri("mad.lo.u32", RegKind::B32, kt, ROWS, ROWS);
    let (first, second) = next_stage(k, sm, stage);
    let fk = mk.issue(k, kb, nrow0, first);
    let fv = mv.issue(k, vb, nrow0, second);
    k.place(&skip_load);
    let cur = k.bin("add.u32", RegKind::B32, sm, stage);
    let kb_b = k.bin("add.u32", RegKind::B32, cur, ln.b_off);
    let kb_t = k.bin("add.u32", RegKind::B32, cur, ln.a_off);
    let vb_b = {
        let c = k.bin("add.u32", RegKind::B32, cur, TILE);
        k.bin("add.u32", RegKind::B32, c, ln.b_off)
    };
    // Mask limits: on the diagonal tile, key > query where 16kk + 8j + e > lim; else none.
    let diag = k.setp("eq.u32", kt, tile);
    let lim: Vec<Reg> = ln.lim.iter().map(|&x| k.tri("selp.b32", RegKind::B32, x, 1000u32, diag)).collect();
    for kc in 0..4u32 {
        k.comment("16 keys: S = Q K^T, dP = dO V^T, dS, dQ += dS K");
        let s: Vec<Vec<Reg>> = (0..2).map(|_| zeros(k, 4)).collect();
        let dp: Vec<Vec<Reg>> = (0..2).map(|_| zeros(k, 4)).collect();
        mma_abt(k, &s, &qf, kb_b, kc * 16);
        mma_abt(k, &dp, &dof, vb_b, kc * 16);
        let ds = dq_chunk(k, dims, [&s, &dp], [&lse2, &dl], &lim, kc);
        let a = a_frag(k, &ds[0], &ds[1]);
        mma_ab(k, &acc, &a, kb_t, kc * 16);
    }
    store_next_stage(k, has_next, &skip_store, [(&mk, &fk), (&mv, &fv)], |_| {});
    k.barrier();
    k.op("xor.b32", [stage.into(), stage.into(), (2 * TILE).into()]);
    k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
    k.bra_if(has_next, false, &top);

    k.comment("epilogue: dq = scale dQ (turned back by the rotary when asked)");
    let sc = k.imm_f32(dims.scale);
    let (dqb, stride) = grad_base(k, dims, dq, bh, 0, merged);
    store_rows(k, &ln, dqb, qrow0, t, &acc, [Some(sc), Some(sc)], dq_tab, stride);
}

/// delta = dO·O of the 64 query rows from `row0` of one head (`heads` = its dO and O), in f32
/// from global: 16 lanes a row, four products then a fixed butterfly. Stored to `delta_head`
/// and (by row within the tile) to shared `sdelta` where given. Returns the dO tile's loads,
/// bound for `do_dest`.
#[allow(clippy::too_many_arguments)]
pub(super) fn delta_rows(
    k: &mut Kernel,
    ln: &Lanes,
    mp: &Mover,
    [dob, ob]: [Reg; 2],
    row0: Reg,
    t: u32,
    delta_head: Option<Reg>,
    sdelta: Option<Reg>,
    do_dest: Reg,
    do16_head: Option<Reg>,
) -> InFlight {
    k.comment("delta = dO O per row, in f32 from global: 16 lanes per row, a fixed butterfly");
    let fdo = mp.issue(k, dob, row0, do_dest);
    // O is only summed here, never stored (its destination is never written).
    let fo = mp.issue(k, ob, row0, do_dest);
    let c4 = k.bin("and.b32", RegKind::B32, ln.tid, 15u32);
    let writer = k.setp("eq.u32", c4, 0u32);
    for (it, (a, b)) in fdo.parts.iter().zip(&fo.parts).enumerate() {
        let (a, b) = (&a[0], &b[0]);
        let mut s = k.bin("mul.rn.f32", RegKind::F32, a[0], b[0]);
        for c in 1..4 {
            s = k.tri("fma.rn.f32", RegKind::F32, a[c], b[c], s);
        }
        for mask in [1u32, 2, 4, 8] {
            let o_ = shfl_xor(k, s, mask);
            s = k.bin("add.rn.f32", RegKind::F32, s, o_);
        }
        let row = k.bin("add.u32", RegKind::B32, mp.row_in, it as u32 * 8);
        if let Some(dh) = delta_head {
            let grow = k.bin("add.u32", RegKind::B32, row0, row);
            let inside = k.setp("lt.u32", grow, t);
            let ok = k.bin("and.pred", RegKind::Pred, inside, writer);
            let ga = k.addr_of(dh, grow, 4);
            k.op_if(ok, false, "st.global.f32", [addr(ga, 0), s.into()]);
        }
        if let Some(sd) = sdelta {
            let sa = k.tri("mad.lo.u32", RegKind::B32, row, 4u32, sd);
            k.op_if(writer, false, "st.shared.f32", [addr(sa, 0), s.into()]);
        }
        if let Some(h16) = do16_head {
            // This thread's four dO values of the row, rounded as the tile store rounds them.
            let grow = k.bin("add.u32", RegKind::B32, row0, row);
            let inside = k.setp("lt.u32", grow, t);
            let e = k.tri("mad.lo.u32", RegKind::B32, grow, BF16_ROW_BYTES / 8, c4);
            let ga = k.addr_of(h16, e, 8);
            let lo = pack(k, a[0], a[1]);
            let hi = pack(k, a[2], a[3]);
            k.op_if(inside, false, "st.global.v2.b32", [addr(ga, 0), Opnd::V(vec![lo, hi])]);
        }
    }
    fdo
}

/// delta alone, as the dQ kernel computes it: params (delta, o, do); grid [`Dims::grid_q`],
/// block [`block`]. Run before [`backward_kernel_rotating`], whose dK/dV blocks read it while
/// its dQ blocks run.
pub fn backward_delta_kernel(dims: &Dims) -> Kernel {
    delta_kernel(dims, false)
}

/// [`backward_delta_kernel`] that also writes dO rounded to bf16 to `do16` (`[B·H, T, 64]`, rows
/// of 128 bytes) for [`backward_kernel_bf16`]: params (delta, o, do, do16).
pub fn backward_delta_kernel_bf16(dims: &Dims) -> Kernel {
    delta_kernel(dims, true)
}

pub(super) fn delta_kernel(dims: &Dims, do16: bool) -> Kernel {
    use crate::ptx::ParamTy;
    let t = dims.t as u32;
    let name = if do16 { "attention_mma_bwd_delta_do16" } else { "attention_mma_bwd_delta" };
    let mut k = Kernel::new(name).with_block(THREADS, 1, 1);
    let ([delta, o, dout], _, _) = pointer_params(&mut k, ["delta", "o", "do"], None, [false, false]);
    let do16 = do16.then(|| k.param_reg("do16", ParamTy::U64));
    let ln = lanes(&mut k);
    let cx = k.sreg("%ctaid.x");
    let bh = k.sreg("%ctaid.y");
    let row0 = k.bin("mul.lo.u32", RegKind::B32, cx, ROWS);
    let mp = mover(&mut k, &ln, None, t);
    let dob = head_base(&mut k, dout, bh, t, ROW_BYTES);
    let ob = head_base(&mut k, o, bh, t, ROW_BYTES);
    let deltab = head_base(&mut k, delta, bh, t, 4);
    let h16 = do16.map(|d| head_base(&mut k, d, bh, t, BF16_ROW_BYTES));
    let nowhere = k.imm_u32(0);
    delta_rows(&mut k, &ln, &mp, [dob, ob], row0, t, Some(deltab), None, nowhere, h16);
    k.ret();
    k
}

/// dQ and dK/dV in one launch, each block doing both passes of one 64-row tile x: dK/dV of key
/// tile x (⌈T/64⌉ − x query tiles of causal work), then dQ of query tile x (x + 1 key tiles), so
/// every block has the same ⌈T/64⌉ + 1 tiles of work. Why: run as two launches, each pass's
/// longest block set the time, and one context's 128 blocks left the GPU idle between them
/// (measured on the H200 at B = 1: 53 µs as two launches, 46.6 µs as one launch of 256
/// blocks, one pass each). Grid [`Dims::grid_q`], block [`block`]; delta comes from
/// [`backward_delta_kernel`] (the dQ pass recomputes it, the same bits, for its own rows).
/// Params (dq, dk, dv, delta, q, k, v, o, lse, do), then `dq_tab` and `dk_tab` with the
/// inverse rotaries, then `q_tab` and `k_tab` for the q and k turned on load. No output may
/// overlap an input: a block's dQ pass reads what other blocks' dK/dV passes have written by
/// then.
pub fn backward_kernel_rotating(dims: &Dims, inverse_rotary: [bool; 2], load: [bool; 2]) -> Kernel {
    backward_kernel_with(dims, inverse_rotary, load, false, Gradients::Apart)
}

/// [`backward_kernel_rotating`] reading q, k and v as bf16 ([`forward_kernel_bf16`]'s inputs),
/// and dO as bf16 with delta, both written by [`backward_delta_kernel_bf16`] (o and do are not
/// read): params (dq, dk, dv, delta, q, k, v, o, lse, do, do16), then `dq_tab` and `dk_tab` with
/// the inverse rotaries. The same bits as the f32 kernel on the tensors these round.
pub fn backward_kernel_bf16(dims: &Dims, inverse_rotary: [bool; 2]) -> Kernel {
    backward_kernel_with(dims, inverse_rotary, [false, false], true, Gradients::Apart)
}

/// [`backward_kernel_bf16`] storing dq, dk and dv rounded to bf16 into one `[B, T, 3, H, 64]`
/// tensor (params `dq`, `dk` and `dv` all its address): the permuted, concatenated gradient
/// the q/k/v projection's backward products read, which a permute-and-cast launch made from the
/// three f32 gradients before. The same bits.
pub fn backward_kernel_bf16_merged(dims: &Dims, inverse_rotary: [bool; 2]) -> Kernel {
    backward_kernel_with(dims, inverse_rotary, [false, false], true, Gradients::MergedBf16)
}

/// [`backward_kernel_bf16`] storing dq, dk and dv as f32 into one `[B, T, 3, H, 64]` tensor
/// (params `dq`, `dk` and `dv` all its address): the permute after the backward, which copied
/// the three gradients there, does not run. Where the projection's bias gradient sums that
/// tensor too, its column sum stores the bf16 cast the products read. The same bits.
pub fn backward_kernel_bf16_merged_f32(dims: &Dims, inverse_rotary: [bool; 2]) -> Kernel {
    backward_kernel_with(dims, inverse_rotary, [false, false], true, Gradients::MergedF32)
}

/// [`backward_kernel_bf16_merged`] also writing each warp's column sums of the f32 gradients
/// it rounds ([`Gradients::MergedBf16Summed`]): param `sums` last.
pub fn backward_kernel_bf16_merged_summed(dims: &Dims, inverse_rotary: [bool; 2]) -> Kernel {
    backward_kernel_with(dims, inverse_rotary, [false, false], true, Gradients::MergedBf16Summed)
}

/// Where a one-launch backward stores dq, dk and dv.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gradients {
    /// Each an f32 `[B, H, T, 64]` at its own address.
    Apart,
    /// The three as one bf16 `[B, T, 3, H, 64]` ([`backward_kernel_bf16_merged`]).
    MergedBf16,
    /// The three as one f32 `[B, T, 3, H, 64]` ([`backward_kernel_bf16_merged_f32`]).
    MergedF32,
    /// The three as one bf16 `[B, T, 3, H, 64]`, and each warp's sums of its 16 rows' f32
    /// values down the `3·H·64` columns (param `sums`, last: `[B·T/16][3·H·64]`, a chunk's
    /// partials a row), whose column sum, in a fixed order, is a projection's bias gradient
    /// without its f32 input ever stored. T a multiple of 16.
    MergedBf16Summed,
}

impl Gradients {
    /// The kernel name's suffix.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Gradients::Apart => "",
            Gradients::MergedBf16 => "_merged",
            Gradients::MergedF32 => "_merged_f32",
            Gradients::MergedBf16Summed => "_merged_sums",
        }
    }

    /// Declares the `sums` parameter (last) where this store takes it.
    pub(crate) fn declare(self, k: &mut Kernel) {
        if self == Gradients::MergedBf16Summed {
            k.param("sums", crate::ptx::ParamTy::U64);
        }
    }
}

pub(super) fn backward_kernel_with(
    dims: &Dims,
    inverse_rotary: [bool; 2],
    load: [bool; 2],
    bf16: bool,
    merged: Gradients,
) -> Kernel {
    use crate::ptx::ParamTy;
    debug_assert_eq!(dims.d, D);
    debug_assert!(!(bf16 && (load[0] || load[1])), "bf16 q and k come turned");
    debug_assert_eq!(dims.g, dims.h, "one launch for both passes needs their grids equal");
    let rot = rotary_suffix(inverse_rotary);
    let family = if bf16 { BF16_FAMILY } else { "attention_mma" };
    let name = format!("{}{rot}{}", kernel_name(family, "bwd", load, false), merged.suffix());
    let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
    let [dq, dk, dv, delta, q, kk, v, o, lse, dout] =
        ["dq", "dk", "dv", "delta", "q", "k", "v", "o", "lse", "do"].map(|n| k.param_reg(n, ParamTy::U64));
    let do16 = bf16.then(|| k.param_reg("do16", ParamTy::U64));
    let dq_tab = inverse_rotary[0].then(|| k.param_reg("dq_tab", ParamTy::U64));
    let dk_tab = inverse_rotary[1].then(|| k.param_reg("dk_tab", ParamTy::U64));
    let q_tab = load[0].then(|| k.param_reg("q_tab", ParamTy::U64));
    let k_tab = load[1].then(|| k.param_reg("k_tab", ParamTy::U64));
    merged.declare(&mut k);
    let last = (dims.t as u32).div_ceil(ROWS) - 1;
    let cx = k.sreg("%ctaid.x");
    let dkv = DkvRegs { dk, dv, q, k: kk, v, lse, delta, dout, dk_tab, q_tab, k_tab, bf16, do16, merged };
    dkv_body(&mut k, dims, &dkv, cx);
    k.comment("the same tile's dQ pass (its shared memory reused)");
    k.barrier();
    let from_last = k.bin("sub.u32", RegKind::B32, last, cx);
    let dqr = DqRegs { dq, delta, q, k: kk, v, o, lse, dout, dq_tab, q_tab, k_tab, bf16, do16, merged };
    dq_body(&mut k, dims, &dqr, from_last, false);
    k.ret();
    k
}

/// The name suffix of a one-launch backward turning dq and dk back by the rotary as asked.
pub(crate) fn rotary_suffix(inverse_rotary: [bool; 2]) -> &'static str {
    match inverse_rotary {
        [false, false] => "",
        [true, true] => "_rotary",
        [true, false] => "_rotary_dq",
        [false, true] => "_rotary_dk",
    }
}

/// lse·log2 e (+∞ past T, so those queries get probability 0) and delta (0 past T) of one query
/// tile: threads 0..64, one row each. Returns (lse, delta, in range); [`stats_store`] stores them.
pub(crate) struct Stats {
    lse: Reg,
    delta: Reg,
    ok: Reg,
}

pub(crate) fn stats_issue(
    k: &mut Kernel,
    lse_head: Reg,
    delta_head: Reg,
    row0: Reg,
    tid: Reg,
    small: Reg,
    t: u32,
) -> Stats {
    let row = k.bin("add.u32", RegKind::B32, row0, tid);
    let inside = k.setp("lt.u32", row, t);
    let ok = k.bin("and.pred", RegKind::Pred, inside, small);
    let lv = k.imm_f32(0.0);
    let dv = k.imm_f32(0.0);
    let la = k.addr_of(lse_head, row, 4);
    k.op_if(ok, false, "ld.global.f32", [lv.into(), addr(la, 0)]);
    let da = k.addr_of(delta_head, row, 4);
    k.op_if(ok, false, "ld.global.f32", [dv.into(), addr(da, 0)]);
    Stats { lse: lv, delta: dv, ok }
}

pub(crate) fn stats_store(k: &mut Kernel, st: &Stats, tid: Reg, small: Reg, buf: Reg) {
    let l2 = k.bin("mul.rn.f32", RegKind::F32, st.lse, LOG2E);
    let l2 = k.tri("selp.f32", RegKind::F32, l2, f32::INFINITY, st.ok);
    let a = k.tri("mad.lo.u32", RegKind::B32, tid, 4u32, buf);
    k.op_if(small, false, "st.shared.f32", [addr(a, 0), l2.into()]);
    k.op_if(small, false, "st.shared.f32", [addr(a, (ROWS * 4) as i64), st.delta.into()]);
}

/// dK and dV: params (dk, dv, q, k, v, lse, delta, do), then `dk_tab` with `inverse_rotary`
/// (dk stored turned back by the rotary), as [`crate::kernels::attention::backward_dkv_kernel`].
pub fn backward_dkv_kernel(dims: &Dims, inverse_rotary: bool) -> Kernel {
    backward_dkv_kernel_rotating(dims, inverse_rotary, [false, false])
}

/// [`backward_dkv_kernel`] with q and k (as `load` says) read before their forward rotary and
/// turned on load; `q_tab`, `k_tab` follow the params. Grid [`Dims::grid_kv`], block [`block`].
pub fn backward_dkv_kernel_rotating(dims: &Dims, inverse_rotary: bool, load: [bool; 2]) -> Kernel {
    dkv_kernel_with(dims, inverse_rotary, load, false)
}

/// [`backward_dkv_kernel`] reading q, k and v as bf16 ([`forward_kernel_bf16`]'s inputs).
pub fn backward_dkv_kernel_bf16(dims: &Dims, inverse_rotary: bool) -> Kernel {
    dkv_kernel_with(dims, inverse_rotary, [false, false], true)
}

pub(super) fn dkv_kernel_with(dims: &Dims, inverse_rotary: bool, load: [bool; 2], bf16: bool) -> Kernel {
    debug_assert_eq!(dims.d, D);
    let family = if bf16 { BF16_FAMILY } else { "attention_mma" };
    let mut k = Kernel::new(&kernel_name(family, "bwd_dkv", load, inverse_rotary)).with_block(THREADS, 1, 1);
    let ([dk, dv, q, kk, v, lse, delta, dout], dk_tab, [q_tab, k_tab]) = dkv_params(&mut k, inverse_rotary, load);
    let cx = k.sreg("%ctaid.x");
    let regs = DkvRegs {
        dk,
        dv,
        q,
        k: kk,
        v,
        lse,
        delta,
        dout,
        dk_tab,
        q_tab,
        k_tab,
        bf16,
        do16: None,
        merged: Gradients::Apart,
    };
    dkv_body(&mut k, dims, &regs, cx);
    k.ret();
    k
}

/// The dK/dV kernel's pointers.
#[derive(Clone, Copy)]
pub(super) struct DkvRegs {
    dk: Reg,
    dv: Reg,
    q: Reg,
    k: Reg,
    v: Reg,
    lse: Reg,
    delta: Reg,
    dout: Reg,
    dk_tab: Option<Reg>,
    q_tab: Option<Reg>,
    k_tab: Option<Reg>,
    /// q, k and v are bf16 (see [`forward_kernel_bf16`]).
    bf16: bool,
    /// dO as bf16 (written by [`backward_delta_kernel_bf16`]).
    do16: Option<Reg>,
    /// Where dk and dv are stored ([`grad_base`]).
    merged: Gradients,
}

/// The dK/dV pass of the block whose key tile is `tile` (delta read from `delta`).
pub(super) fn dkv_body(k: &mut Kernel, dims: &Dims, r: &DkvRegs, tile: Reg) {
    let t = dims.t as u32;
    let per = (dims.h / dims.g) as u32;
    let ntiles = t.div_ceil(ROWS);
    let DkvRegs { dk, dv, q, k: kk, v, lse, delta, dout, dk_tab, q_tab, k_tab, bf16, do16, merged } = *r;
    // dO: bf16 copies from `do16`, or f32 converted on the way.
    let (dout, do_row) = match do16 {
        Some(d16) => (d16, BF16_ROW_BYTES),
        None => (dout, ROW_BYTES),
    };
    let in_row = if bf16 { BF16_ROW_BYTES } else { ROW_BYTES };
    // Stages [Q0][dO0][Q1][dO1]; K and V pass through Q1 and dO1 before the loop. Statistics:
    // [lse0][delta0][lse1][delta1], 64 f32 each.
    let smem = k.shared("attn_smem", 4 * TILE, 16);
    let stsm = k.shared("attn_stats", 4 * ROWS * 4, 16);
    let ln = lanes(k);
    let bg = k.sreg("%ctaid.y");
    let b = k.bin("div.u32", RegKind::B32, bg, dims.g as u32);
    let gg = k.bin("rem.u32", RegKind::B32, bg, dims.g as u32);
    // Query head of the group's first: b·H + gg·per.
    let gh = k.bin("mul.lo.u32", RegKind::B32, gg, per);
    let h0 = k.tri("mad.lo.u32", RegKind::B32, b, dims.h as u32, gh);
    let krow0 = k.bin("mul.lo.u32", RegKind::B32, tile, ROWS);
    let kb = head_base(k, kk, bg, t, in_row);
    let vb = head_base(k, v, bg, t, in_row);
    let sm = k.un("mov.u32", RegKind::B32, Opnd::S(smem));
    let st = k.un("mov.u32", RegKind::B32, Opnd::S(stsm));
    let small = k.setp("lt.u32", ln.tid, ROWS);
    // Where K is staged: stage 1 (then reused by the loop).
    let k_tile = |k: &mut Kernel| k.bin("add.u32", RegKind::B32, sm, 2 * TILE);
    let mk = mover_of(k, &ln, k_tab, t, bf16);
    let mv = mover_of(k, &ln, None, t, bf16);
    let mp = mover_of(k, &ln, None, t, do16.is_some());
    let mq = mover_of(k, &ln, q_tab, t, bf16);
    k.comment("prologue: K and V through stage 1, the diagonal Q and dO tiles of the first head into stage 0");
    {
        let s1 = k_tile(k);
        let s1v = k.bin("add.u32", RegKind::B32, sm, 3 * TILE);
        let s0d = k.bin("add.u32", RegKind::B32, sm, TILE);
        let fk = mk.issue(k, kb, krow0, s1);
        let fv = mv.issue(k, vb, krow0, s1v);
        let qb = head_base(k, q, h0, t, in_row);
        let dob = head_base(k, dout, h0, t, do_row);
        let lb = head_base(k, lse, h0, t, 4);
        let db = head_base(k, delta, h0, t, 4);
        let fq = mq.issue(k, qb, krow0, sm);
        let fdo = mp.issue(k, dob, krow0, s0d);
        let sts = stats_issue(k, lb, db, krow0, ln.tid, small, t);
        mk.store(k, &fk);
        mv.store(k, &fv);
        mq.store(k, &fq);
        mp.store(k, &fdo);
        stats_store(k, &sts, ln.tid, small, st);
    }
    k.barrier();
    let kdest = k_tile(k);
    let kf = a_frags(k, &ln, kdest);
    let s1v = k.bin("add.u32", RegKind::B32, sm, 3 * TILE);
    let vf = a_frags(k, &ln, s1v);
    k.barrier();
    let dka: Vec<Vec<Reg>> = (0..8).map(|_| zeros(k, 4)).collect();
    let dva: Vec<Vec<Reg>> = (0..8).map(|_| zeros(k, 4)).collect();
    let hh = k.imm_u32(0);
    let qt = k.un("mov.u32", RegKind::B32, tile);
    let stage = k.imm_u32(0);
    let sstage = k.imm_u32(0);
    let stat_lane = k.tri("mad.lo.u32", RegKind::B32, ln.tq, 8u32, st);
    let top = k.label("qtile");
    let skip_load = k.label("skip_load");
    let skip_store = k.label("skip_store");
    k.place(&top);
    // The next (head, query tile): tiles from the diagonal to the end, then the next head.
    let nq = k.bin("add.u32", RegKind::B32, qt, 1u32);
    let wrap = k.setp("ge.u32", nq, ntiles);
    let nq = k.tri("selp.b32", RegKind::B32, tile, nq, wrap);
    let inc = k.tri("selp.b32", RegKind::B32, 1u32, 0u32, wrap);
    let nh = k.bin("add.u32", RegKind::B32, hh, inc);
    let has_next = k.setp("lt.u32", nh, per);
    k.bra_if(has_next, true, &skip_load);
    let (fq, fdo, sts) = {
        let h = k.bin("add.u32", RegKind::B32, h0, nh);
        let qb = head_base(k, q, h, t, in_row);
        let dob = head_base(k, dout, h, t, do_row);
        let lb = head_base(k, lse, h, t, 4);
        let db = head_base(k, delta, h, t, 4);
        let row0 = k.bin("mul.lo.u32", RegKind::B32, nq, ROWS);
        let (first, second) = next_stage(k, sm, stage);
        let fq = mq.issue(k, qb, row0, first);
        let fdo = mp.issue(k, dob, row0, second);
        let sts = stats_issue(k, lb, db, row0, ln.tid, small, t);
        (fq, fdo, sts)
    };
    k.place(&skip_load);
    let cur = k.bin("add.u32", RegKind::B32, sm, stage);
    let qb_b = k.bin("add.u32", RegKind::B32, cur, ln.b_off);
    let qb_t = k.bin("add.u32", RegKind::B32, cur, ln.a_off);
    let dcur = k.bin("add.u32", RegKind::B32, cur, TILE);
    let db_b = k.bin("add.u32", RegKind::B32, dcur, ln.b_off);
    let db_t = k.bin("add.u32", RegKind::B32, dcur, ln.a_off);
    let stl = k.bin("add.u32", RegKind::B32, stat_lane, sstage);
    // Mask limits: on the diagonal tile, query < key where 16kk + 8j + e < lim; else none.
    let diag = k.setp("eq.u32", qt, tile);
    let lim: Vec<Reg> = ln.lim.iter().map(|&x| k.tri("selp.b32", RegKind::B32, x, -1000i32, diag)).collect();
    for kc in 0..4u32 {
        k.comment("16 queries: S^T = K Q^T, dP^T = V dO^T, P^T, dS^T, dV += P^T dO, dK += dS^T Q");
        let s: Vec<Vec<Reg>> = (0..2).map(|_| zeros(k, 4)).collect();
        let dp: Vec<Vec<Reg>> = (0..2).map(|_| zeros(k, 4)).collect();
        mma_abt(k, &s, &kf, qb_b, kc * 16);
        mma_abt(k, &dp, &vf, db_b, kc * 16);
        let (pc, dsc) = dkv_chunk(k, dims, [&s, &dp], stl, &lim, kc);
        let pa = a_frag(k, &pc[0], &pc[1]);
        mma_ab(k, &dva, &pa, db_t, kc * 16);
        let da = a_frag(k, &dsc[0], &dsc[1]);
        mma_ab(k, &dka, &da, qb_t, kc * 16);
    }
    store_next_stage(k, has_next, &skip_store, [(&mq, &fq), (&mp, &fdo)], |k| {
        let so = k.bin("xor.b32", RegKind::B32, sstage, 2 * ROWS * 4);
        let sb = k.bin("add.u32", RegKind::B32, st, so);
        stats_store(k, &sts, ln.tid, small, sb);
    });
    k.barrier();
    k.op("xor.b32", [stage.into(), stage.into(), (2 * TILE).into()]);
    k.op("xor.b32", [sstage.into(), sstage.into(), (2 * ROWS * 4).into()]);
    k.op("mov.u32", [hh.into(), nh.into()]);
    k.op("mov.u32", [qt.into(), nq.into()]);
    k.bra_if(has_next, false, &top);

    k.comment("epilogue: dk = scale dK (turned back by the rotary when asked), dv");
    let sc = k.imm_f32(dims.scale);
    let (dkb, stride) = grad_base(k, dims, dk, bg, 1, merged);
    store_rows(k, &ln, dkb, krow0, t, &dka, [Some(sc), Some(sc)], dk_tab, stride);
    let (dvb, stride) = grad_base(k, dims, dv, bg, 2, merged);
    store_rows(k, &ln, dvb, krow0, t, &dva, [None, None], None, stride);
}

/// Where head `bh` of gradient `section` (0 dq, 1 dk, 2 dv) of the tensor at `base` starts, and
/// how its rows lie: merged, the three gradients as one `[B, T, 3, H, 64]` (the projection's
/// input gradient as its backward reads it, so no permute runs), bf16 or f32; else the f32 head
/// `[T, 64]`.
pub(crate) fn grad_base(
    k: &mut Kernel,
    dims: &Dims,
    base: Reg,
    bh: Reg,
    section: u32,
    merged: Gradients,
) -> (Reg, Rows) {
    let t = dims.t as u32;
    let row_bytes = match merged {
        Gradients::Apart => return (head_base(k, base, bh, t, ROW_BYTES), Rows::F32Head),
        Gradients::MergedBf16 | Gradients::MergedBf16Summed => BF16_ROW_BYTES,
        Gradients::MergedF32 => ROW_BYTES,
    };
    let h = dims.h as u32;
    // Element ((b·T + t)·3 + s)·H·64 + hh·64 + d: at t = 0, ((3·b·T + s)·H + hh)·64.
    let b = k.bin("div.u32", RegKind::B32, bh, h);
    let hh = k.bin("rem.u32", RegKind::B32, bh, h);
    let bt = k.bin("mul.lo.u32", RegKind::B32, b, 3 * t);
    let plane = k.bin("add.u32", RegKind::B32, bt, section);
    let row = k.tri("mad.lo.u32", RegKind::B32, plane, h, hh);
    let off = k.reg(RegKind::B64);
    k.op("mul.wide.u32", [off.into(), row.into(), row_bytes.into()]);
    let stride = 3 * h * row_bytes;
    let rows = match merged {
        Gradients::MergedBf16 => Rows::Bf16(stride),
        Gradients::MergedBf16Summed => {
            // This head's first column (s·H + hh)·64, in its batch's first chunk b·T/16, of
            // partials rows of 3·H·64.
            assert!(t.is_multiple_of(16), "column sums of rows in sixteens: T = {t}");
            let row = 3 * h * 64;
            let sums = k.param_load("sums", crate::ptx::ParamTy::U64);
            let col0 = k.tri("mad.lo.u32", RegKind::B32, hh, 64u32, section * h * 64);
            let first = k.bin("mul.lo.u32", RegKind::B32, b, t / 16);
            let e = k.tri("mad.lo.u32", RegKind::B32, first, row, col0);
            Rows::Bf16Summed { stride, sums: k.addr_of(sums, e, 4), row }
        }
        _ => Rows::F32(stride),
    };
    (k.bin("add.s64", RegKind::B64, base, off), rows)
}
