//! The causal attention forward on Hopper's warpgroup `wgmma`, for bf16 q, k and v with heads
//! of 64: a drop-in for [`crate::kernels::attention::mma::forward_kernel_bf16`] (and its copying form).
//!
//! Why: the `mma.sync` forward spends its issue slots on `ldmatrix` and 16×8×16 products — 64
//! products and 32 `ldmatrix` a warp a key tile — beside the softmax's arithmetic on the same
//! warps. One `wgmma.m64n64k16` multiplies a warpgroup's 64 rows by 16 of K straight out of
//! shared memory, asynchronously: eight instructions a key tile (four for S = Q·Kᵀ, four for
//! O += P·V) instead of 256 products and 128 `ldmatrix` per warpgroup.
//!
//! How: a block is one warpgroup (128 threads) owning 64 query rows, the `mma.sync` kernel's
//! grid and block. Q, and two stages of K and V tiles, are copied by `cp.async` into the
//! 128-byte-swizzled layout `wgmma` reads ([`crate::kernels::gemm::wgmma`]'s: a 64-row tile is 64 lines
//! of 128 bytes, the 16-byte chunk c of line L at chunk c ^ (L mod 8)). S = Q·Kᵀ reads both
//! from shared memory K-major (a line is a row's 64 of D); O += P·V takes P from registers —
//! the S accumulators rounded to bf16 pairs are exactly the A fragments of the next product, as
//! with `mma.sync` — and V MN-major (a line is one key's 64 of D). The accumulators of
//! `m64n64` hold, per warp, the same rows and columns as the `mma.sync` kernel's eight n8 tiles,
//! so the softmax and the epilogue are that kernel's own (`attention_mma::online_softmax`,
//! `attention_mma::forward_epilogue`), and every sum runs in the same order.

use crate::kernels::attention::mma::{
    self as mma, a_frag, delta_to_shared, dkv_chunk, dq_chunk, dq_row_stats, forward_epilogue, forward_state,
    grad_base, head_base, lanes, mover_bf16_swizzled, next_stage_of, online_softmax, reversed_tile, rotary_suffix,
    stats_issue, stats_store, store_rows, zeros, Gradients, Lanes, Mover, BF16_ROW_BYTES, ROWS,
};
use crate::kernels::attention::{forward_params, kernel_name, kv_head, Dims};
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

/// Bytes of one swizzled 64-row tile: 64 lines of 128 bytes.
const TILE: u32 = ROWS * 128;

/// The family name (`attention_wgmma_fwd`, `…_o16` with the copy).
fn name(copy: bool) -> String {
    format!("attention_wgmma_fwd{}", if copy { "_o16" } else { "" })
}

/// Whether the `wgmma` forward can run `dims`: what the bf16 `mma.sync` forward runs, without
/// grouped queries (one K/V head a query head) or a soft-cap (not written here).
pub fn applies(dims: &Dims) -> bool {
    mma::applies(dims) && dims.g == dims.h && dims.softcap.is_none()
}

/// The forward: params (o, lse, q, k, v) as [`crate::kernels::attention::mma::forward_kernel_bf16`], then
/// `o16` with `copy` (o rounded to bf16 as `[B, T, H, 64]`, as
/// [`crate::kernels::attention::mma::forward_kernel_bf16_copying`]). Grid [`Dims::grid_q`], block
/// [`crate::kernels::attention::mma::block`].
pub fn forward_kernel(dims: &Dims, copy: bool) -> Kernel {
    debug_assert!(applies(dims));
    let t = dims.t as u32;
    let mut k = Kernel::new(&name(copy)).with_block(mma::THREADS, 1, 1);
    let ([o, lse, q, kk, v], _) = forward_params(&mut k, [false, false]);
    let o16 = copy.then(|| k.param_reg("o16", ParamTy::U64));
    // [Q][K0][V0][K1][V1], each tile on a 1,024-byte swizzle atom.
    let smem = k.shared("attn_smem", 5 * TILE, 1024);
    let ln = lanes(&mut k);
    let cx = k.sreg("%ctaid.x");
    let tile = reversed_tile(&mut k, t, cx);
    let bh = k.sreg("%ctaid.y");
    let kvh = kv_head(&mut k, dims, bh);
    let qb = head_base(&mut k, q, bh, t, BF16_ROW_BYTES);
    let kb = head_base(&mut k, kk, kvh, t, BF16_ROW_BYTES);
    let vb = head_base(&mut k, v, kvh, t, BF16_ROW_BYTES);
    let qrow0 = k.bin("mul.lo.u32", RegKind::B32, tile, ROWS);
    let sm = k.un("mov.u32", RegKind::B32, Opnd::S(smem));
    let mover = mover_bf16_swizzled(&mut k, &ln, t);
    k.comment("prologue: Q and the first K and V tiles");
    mover.copy(&mut k, qb, qrow0, sm);
    let zero = k.imm_u32(0);
    let k0 = k.bin("add.u32", RegKind::B32, sm, TILE);
    mover.copy(&mut k, kb, zero, k0);
    let v0 = k.bin("add.u32", RegKind::B32, k0, TILE);
    mover.copy(&mut k, vb, zero, v0);
    tiles_ready(&mut k);
    let [q_desc, v_desc] = [true, false].map(|k_major| Desc::new(&mut k, k_major));
    let q_lo = q_desc.lo(&mut k, sm);
    let (acc, m, l) = forward_state(&mut k);
    let acc_flat: Vec<Reg> = acc.iter().flatten().copied().collect();
    let kt = k.imm_u32(0);
    // Byte offset of the current stage's K tile from the first's: 0 or 2·TILE.
    let stage = k.imm_u32(0);
    let top = k.label("ktile");
    let skip_load = k.label("skip_load");
    let skip_mask = k.label("skip_mask");
    k.place(&top);
    let has_next = k.setp("lt.u32", kt, tile);
    k.bra_if(has_next, true, &skip_load);
    {
        let nrow0 = k.tri("mad.lo.u32", RegKind::B32, kt, ROWS, ROWS);
        copy_next_stage(&mut k, &mover, [kb, vb], nrow0, k0, stage);
    }
    k.place(&skip_load);
    k.comment("S = Q K^T");
    let k_cur = k.bin("add.u32", RegKind::B32, k0, stage);
    let k_lo = q_desc.lo(&mut k, k_cur);
    let s: Vec<Vec<Reg>> = (0..8).map(|_| zeros(&mut k, 4)).collect();
    let s_flat: Vec<Reg> = s.iter().flatten().copied().collect();
    k.op("wgmma.fence.sync.aligned", []);
    for kc in 0..4u32 {
        let a = q_desc.at(&mut k, q_lo, kc);
        let b = q_desc.at(&mut k, k_lo, kc);
        k.op(
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
            [
                Opnd::V(s_flat.clone()),
                a.into(),
                b.into(),
                q_desc.accumulate.into(),
                1u32.into(),
                1u32.into(),
                0u32.into(),
                0u32.into(),
            ],
        );
    }
    k.op("wgmma.commit_group.sync.aligned", []);
    k.op("wgmma.wait_group.sync.aligned", [0u32.into()]);
    online_softmax(&mut k, dims, &ln, &s, &acc, (m, l), (kt, tile), &skip_mask);
    k.comment("O += P V (P from registers)");
    let v_cur = k.bin("add.u32", RegKind::B32, k_cur, TILE);
    let v_lo = v_desc.lo(&mut k, v_cur);
    let frags: Vec<Vec<Reg>> = (0..4).map(|kc| a_frag(&mut k, &s[2 * kc], &s[2 * kc + 1])).collect();
    k.op("wgmma.fence.sync.aligned", []);
    for (kc, a) in frags.iter().enumerate() {
        let b = v_desc.at(&mut k, v_lo, kc as u32);
        product_rs(&mut k, 64, &acc_flat, a, b, &v_desc);
    }
    k.op("wgmma.commit_group.sync.aligned", []);
    k.op("wgmma.wait_group.sync.aligned", [0u32.into()]);
    // The next stage's copies land; the barrier also ends every read of this stage.
    tiles_ready(&mut k);
    k.op("xor.b32", [stage.into(), stage.into(), (2 * TILE).into()]);
    k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
    k.bra_if(has_next, false, &top);
    forward_epilogue(&mut k, dims, &ln, [o, lse], o16, bh, qrow0, &acc, (m, l));
    k.ret();
    k
}

/// Waits for this thread's copies, makes them visible to the tensor cores' async proxy, and
/// meets the block's barrier: after it, every tile copied so far is readable by `wgmma`.
fn tiles_ready(k: &mut Kernel) {
    k.op("cp.async.wait_all", []);
    k.op("fence.proxy.async.shared::cta", []);
    k.barrier();
}

/// Requests rows `row0 .. row0 + 64` of the heads `heads` into the two tiles of the stage other
/// than `stage` (a byte offset: 0 or 2·TILE) of the ring at `ring`.
fn copy_next_stage(k: &mut Kernel, mover: &Mover, heads: [Reg; 2], row0: Reg, ring: Reg, stage: Reg) {
    let (first, second) = next_stage_of(k, ring, stage, TILE);
    mover.copy(k, heads[0], row0, first);
    mover.copy(k, heads[1], row0, second);
}

/// A `wgmma` shared-memory descriptor's fixed parts for a swizzled 64-line tile, K-major or
/// MN-major: [`crate::kernels::gemm::wgmma`]'s, whose 64-wide K-steps are these tiles.
struct Desc {
    /// Leading byte offset, encoded and placed at bits 16–29 of the low word.
    lbo: u32,
    /// Bytes from one 16 of K to the next.
    k16: u32,
    hi: Reg,
    /// Always true: products add to their accumulators (zeroed by the caller).
    accumulate: Reg,
    /// The operand is MN-major (a B operand then read transposed).
    mn_major: bool,
}

impl Desc {
    fn new(k: &mut Kernel, k_major: bool) -> Desc {
        let (lbo, hi, k16) = crate::kernels::gemm::wgmma::descriptor_parts(k_major);
        let hi = k.imm_u32(hi);
        let zero = k.imm_u32(0);
        let accumulate = k.setp("eq.u32", zero, 0u32);
        Desc { lbo: lbo << 16, k16, hi, accumulate, mn_major: !k_major }
    }

    /// The low word of the descriptor of the tile at shared `tile`.
    fn lo(&self, k: &mut Kernel, tile: Reg) -> Reg {
        let a = k.bin("shr.u32", RegKind::B32, tile, 4u32);
        k.bin("add.u32", RegKind::B32, a, self.lbo)
    }

    /// The descriptor of the `kc`-th 16 of K from the tile whose low word is `lo`.
    fn at(&self, k: &mut Kernel, lo: Reg, kc: u32) -> Reg {
        let l = k.bin("add.u32", RegKind::B32, lo, (kc * self.k16) >> 4);
        let d = k.reg(RegKind::B64);
        k.op("mov.b64", [d.into(), Opnd::V(vec![l, self.hi])]);
        d
    }
}

/// `wgmma.m64n{n}k16` with A from registers (`a`, one k16 fragment) and B from the shared
/// descriptor `b` (MN-major where `desc` is), accumulating into `acc`.
fn product_rs(k: &mut Kernel, n: u32, acc: &[Reg], a: &[Reg], b: Reg, desc: &Desc) {
    k.op(
        &format!("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16"),
        [
            Opnd::V(acc.to_vec()),
            Opnd::V(a.to_vec()),
            b.into(),
            desc.accumulate.into(),
            1u32.into(),
            1u32.into(),
            u32::from(desc.mn_major).into(),
        ],
    );
}

// ---- backward --------------------------------------------------------------------------------

/// The joint backward on `wgmma`: a drop-in for [`crate::kernels::attention::mma::backward_kernel_bf16`] (and,
/// merged, [`crate::kernels::attention::mma::backward_kernel_bf16_merged`] and
/// [`crate::kernels::attention::mma::backward_kernel_bf16_merged_f32`]) — the same params (dq, dk,
/// dv, delta, q, k, v, o, lse, do, do16, then `dq_tab` and `dk_tab` with the inverse rotaries),
/// grid and block. Block x runs the dK/dV pass of key tile x, then the dQ pass of query tile x
/// counted from the last, as the `mma.sync` kernel does, with every product in the same order:
/// the operand a block keeps for its whole pass (K and V in dK/dV, Q and dO in dQ) as A
/// fragments in registers, as there, and the tiles it walks as B from swizzled shared memory.
/// S and dP come 16 columns at a time (`m64n16`), so their probabilities and score gradients
/// feed dV, dK or dQ (`m64n64`, A from registers) 16 of K at a time, as the `mma.sync` chunks.
pub fn backward_kernel(dims: &Dims, inverse_rotary: [bool; 2], merged: Gradients) -> Kernel {
    debug_assert!(applies(dims));
    let rot = rotary_suffix(inverse_rotary);
    let name = format!("{}{rot}{}", kernel_name("attention_wgmma", "bwd", [false, false], false), merged.suffix());
    let mut k = Kernel::new(&name).with_block(mma::THREADS, 1, 1);
    let [dq, dk, dv, delta, q, kk, v, _o, lse, _do, do16] =
        ["dq", "dk", "dv", "delta", "q", "k", "v", "o", "lse", "do", "do16"].map(|n| k.param_reg(n, ParamTy::U64));
    let dq_tab = inverse_rotary[0].then(|| k.param_reg("dq_tab", ParamTy::U64));
    let dk_tab = inverse_rotary[1].then(|| k.param_reg("dk_tab", ParamTy::U64));
    merged.declare(&mut k);
    let t = dims.t as u32;
    let smem = k.shared("attn_smem", 4 * TILE, 1024);
    let sm = k.un("mov.u32", RegKind::B32, Opnd::S(smem));
    let ln = lanes(&mut k);
    let mover = mover_bf16_swizzled(&mut k, &ln, t);
    let descs = [true, false].map(|k_major| Desc::new(&mut k, k_major));
    let cx = k.sreg("%ctaid.x");
    let bh = k.sreg("%ctaid.y");
    let ins = Inputs { q, k: kk, v, do16, lse, delta };
    dkv_pass(&mut k, dims, &ln, &mover, &descs, sm, ins, cx, [dk, dv], dk_tab, merged);
    k.comment("the same tile's dQ pass (its shared memory reused)");
    k.barrier();
    let last = t.div_ceil(ROWS) - 1;
    let from_last = k.bin("sub.u32", RegKind::B32, last, cx);
    dq_pass(&mut k, dims, &ln, &mover, &descs, sm, ins, (bh, from_last), dq, dq_tab, merged);
    k.ret();
    k
}

/// The backward's bf16 inputs and statistics (`do16` is dO as bf16).
#[derive(Clone, Copy)]
struct Inputs {
    q: Reg,
    k: Reg,
    v: Reg,
    do16: Reg,
    lse: Reg,
    delta: Reg,
}

/// The A fragments (4 k16 steps over D) of the warp's 16 rows of the swizzled tile at `tile`,
/// by `ldmatrix`: lane l addresses row l % 16 and 16-byte chunk 2·kc + l / 16, found at chunk
/// `(2·kc + l / 16) ^ (row mod 8)`.
fn a_frags_swizzled(k: &mut Kernel, ln: &Lanes, tile: Reg) -> Vec<Vec<Reg>> {
    let lane = k.bin("and.b32", RegKind::B32, ln.tid, 31u32);
    let l15 = k.bin("and.b32", RegKind::B32, lane, 15u32);
    let half = k.bin("shr.u32", RegKind::B32, lane, 4u32);
    let row = k.bin("add.u32", RegKind::B32, ln.wrow, l15);
    let base = k.tri("mad.lo.u32", RegKind::B32, row, 128u32, tile);
    let r7 = k.bin("and.b32", RegKind::B32, l15, 7u32);
    (0..4u32)
        .map(|kc| {
            let c = k.bin("add.u32", RegKind::B32, half, 2 * kc);
            let sw = k.bin("xor.b32", RegKind::B32, c, r7);
            let a = k.tri("mad.lo.u32", RegKind::B32, sw, 16u32, base);
            let r = k.regs(RegKind::B32, 4);
            k.op("ldmatrix.sync.aligned.m8n8.x4.shared.b16", [Opnd::V(r.clone()), addr(a, 0)]);
            r
        })
        .collect()
}

/// Issues a chunk's two score products as one group (not waited for): for each `(a, lo)`, 16
/// columns (two n8 tiles) of A·Bᵀ over D — A the warp's fragments `a` (4 k16 steps), B the 16
/// rows from `chunk · 16` of the K-major swizzled tile whose descriptor's low word is `lo` (S
/// and dP of a dQ chunk, Sᵀ and dPᵀ of a dK/dV chunk).
fn scores16(k: &mut Kernel, products: [(&[Vec<Reg>], Reg); 2], chunk: u32, desc: &Desc) -> [Vec<Vec<Reg>>; 2] {
    let out = [0, 1].map(|_| (0..2).map(|_| zeros(k, 4)).collect::<Vec<_>>());
    k.op("wgmma.fence.sync.aligned", []);
    for ((a, lo), acc) in products.iter().zip(&out) {
        let flat: Vec<Reg> = acc.iter().flatten().copied().collect();
        let lo = k.bin("add.u32", RegKind::B32, *lo, (chunk * 16 * 128) >> 4);
        for (kc, af) in a.iter().enumerate() {
            let b = desc.at(k, lo, kc as u32);
            product_rs(k, 16, &flat, af, b, desc);
        }
    }
    k.op("wgmma.commit_group.sync.aligned", []);
    out
}

/// The four 16-column chunks of a tile's score products, software-pipelined: chunk `kc + 1`'s
/// products are issued before chunk `kc`'s arithmetic, so the tensor cores compute them while
/// the warps work; `chunk` gets each chunk's scores once they are done (every group before the
/// newest waited for, the previous chunk's own products included) and issues its products.
fn pipelined_chunks(
    k: &mut Kernel,
    products: [(&[Vec<Reg>], Reg); 2],
    desc: &Desc,
    mut chunk: impl FnMut(&mut Kernel, u32, [Vec<Vec<Reg>>; 2]),
) {
    let mut next = Some(scores16(k, products, 0, desc));
    for kc in 0..4u32 {
        let cur = next.take().expect("issued one chunk ahead");
        if kc < 3 {
            next = Some(scores16(k, products, kc + 1, desc));
        }
        k.op("wgmma.wait_group.sync.aligned", [u32::from(kc < 3).into()]);
        chunk(k, kc, cur);
    }
}

/// The dK/dV pass of key tile `tile` ([`crate::kernels::attention::mma`]'s, one query head a key head): K and V
/// kept as A fragments, each query tile from the diagonal on (Q and dO, two stages, with lse
/// and delta) walked 16 queries at a time.
#[allow(clippy::too_many_arguments)]
fn dkv_pass(
    k: &mut Kernel,
    dims: &Dims,
    ln: &Lanes,
    mover: &Mover,
    [km, mn]: &[Desc; 2],
    sm: Reg,
    ins: Inputs,
    tile: Reg,
    [dk, dv]: [Reg; 2],
    dk_tab: Option<Reg>,
    merged: Gradients,
) {
    let t = dims.t as u32;
    let ntiles = t.div_ceil(ROWS);
    // Stages [Q0][dO0][Q1][dO1]; K and V pass through Q1 and dO1 before the loop. Statistics:
    // [lse0][delta0][lse1][delta1], 64 f32 each.
    let stsm = k.shared("attn_stats", 4 * ROWS * 4, 16);
    let bg = k.sreg("%ctaid.y");
    let krow0 = k.bin("mul.lo.u32", RegKind::B32, tile, ROWS);
    let kb = head_base(k, ins.k, bg, t, BF16_ROW_BYTES);
    let vb = head_base(k, ins.v, bg, t, BF16_ROW_BYTES);
    let qb = head_base(k, ins.q, bg, t, BF16_ROW_BYTES);
    let dob = head_base(k, ins.do16, bg, t, BF16_ROW_BYTES);
    let lb = head_base(k, ins.lse, bg, t, 4);
    let db = head_base(k, ins.delta, bg, t, 4);
    let st = k.un("mov.u32", RegKind::B32, Opnd::S(stsm));
    let small = k.setp("lt.u32", ln.tid, ROWS);
    k.comment("prologue: K and V through stage 1, the diagonal Q and dO tiles into stage 0");
    let s1 = k.bin("add.u32", RegKind::B32, sm, 2 * TILE);
    let s1v = k.bin("add.u32", RegKind::B32, sm, 3 * TILE);
    let s0d = k.bin("add.u32", RegKind::B32, sm, TILE);
    mover.copy(k, kb, krow0, s1);
    mover.copy(k, vb, krow0, s1v);
    mover.copy(k, qb, krow0, sm);
    mover.copy(k, dob, krow0, s0d);
    let sts = stats_issue(k, lb, db, krow0, ln.tid, small, t);
    stats_store(k, &sts, ln.tid, small, st);
    tiles_ready(k);
    let kf = a_frags_swizzled(k, ln, s1);
    let vf = a_frags_swizzled(k, ln, s1v);
    k.barrier();
    let dka: Vec<Vec<Reg>> = (0..8).map(|_| zeros(k, 4)).collect();
    let dva: Vec<Vec<Reg>> = (0..8).map(|_| zeros(k, 4)).collect();
    let (dka_flat, dva_flat): (Vec<Reg>, Vec<Reg>) =
        (dka.iter().flatten().copied().collect(), dva.iter().flatten().copied().collect());
    let qt = k.un("mov.u32", RegKind::B32, tile);
    let stage = k.imm_u32(0);
    let sstage = k.imm_u32(0);
    let stat_lane = k.tri("mad.lo.u32", RegKind::B32, ln.tq, 8u32, st);
    let top = k.label("qtile");
    let skip_load = k.label("skip_load");
    k.place(&top);
    let nq = k.bin("add.u32", RegKind::B32, qt, 1u32);
    let has_next = k.setp("lt.u32", nq, ntiles);
    k.bra_if(has_next, true, &skip_load);
    // The next tile's statistics are loaded here and stored after this tile's products.
    let sts = {
        let row0 = k.bin("mul.lo.u32", RegKind::B32, nq, ROWS);
        copy_next_stage(k, mover, [qb, dob], row0, sm, stage);
        stats_issue(k, lb, db, row0, ln.tid, small, t)
    };
    k.place(&skip_load);
    let cur = k.bin("add.u32", RegKind::B32, sm, stage);
    let dcur = k.bin("add.u32", RegKind::B32, cur, TILE);
    let (q_km, q_mn) = (km.lo(k, cur), mn.lo(k, cur));
    let (do_km, do_mn) = (km.lo(k, dcur), mn.lo(k, dcur));
    let stl = k.bin("add.u32", RegKind::B32, stat_lane, sstage);
    // Mask limits: on the diagonal tile, query < key where 16kk + 8j + e < lim; else none.
    let diag = k.setp("eq.u32", qt, tile);
    let lim: Vec<Reg> = ln.lim.iter().map(|&x| k.tri("selp.b32", RegKind::B32, x, -1000i32, diag)).collect();
    k.comment("16 queries a chunk: S^T = K Q^T, dP^T = V dO^T, P^T, dS^T, dV += P^T dO, dK += dS^T Q");
    pipelined_chunks(k, [(&kf, q_km), (&vf, do_km)], km, |k, kc, [s, dp]| {
        let (pc, dsc) = dkv_chunk(k, dims, [&s, &dp], stl, &lim, kc);
        let pa = a_frag(k, &pc[0], &pc[1]);
        let da = a_frag(k, &dsc[0], &dsc[1]);
        k.op("wgmma.fence.sync.aligned", []);
        let b = mn.at(k, do_mn, kc);
        product_rs(k, 64, &dva_flat, &pa, b, mn);
        let b = mn.at(k, q_mn, kc);
        product_rs(k, 64, &dka_flat, &da, b, mn);
        k.op("wgmma.commit_group.sync.aligned", []);
    });
    k.op("wgmma.wait_group.sync.aligned", [0u32.into()]);
    let skip_stats = k.label("skip_stats");
    k.bra_if(has_next, true, &skip_stats);
    {
        let so = k.bin("xor.b32", RegKind::B32, sstage, 2 * ROWS * 4);
        let sb = k.bin("add.u32", RegKind::B32, st, so);
        stats_store(k, &sts, ln.tid, small, sb);
    }
    k.place(&skip_stats);
    tiles_ready(k);
    k.op("xor.b32", [stage.into(), stage.into(), (2 * TILE).into()]);
    k.op("xor.b32", [sstage.into(), sstage.into(), (2 * ROWS * 4).into()]);
    k.op("mov.u32", [qt.into(), nq.into()]);
    k.bra_if(has_next, false, &top);

    k.comment("epilogue: dk = scale dK (turned back by the rotary when asked), dv");
    let sc = k.imm_f32(dims.scale);
    let (dkb, stride) = grad_base(k, dims, dk, bg, 1, merged);
    store_rows(k, ln, dkb, krow0, t, &dka, [Some(sc), Some(sc)], dk_tab, stride);
    let (dvb, stride) = grad_base(k, dims, dv, bg, 2, merged);
    store_rows(k, ln, dvb, krow0, t, &dva, [None, None], None, stride);
}

/// The dQ pass of query tile `tile` of head `bh` ([`crate::kernels::attention::mma`]'s, delta and dO as bf16
/// read from global): Q and dO kept as A fragments, each key tile up to the diagonal (K and V,
/// two stages) walked 16 keys at a time.
#[allow(clippy::too_many_arguments)]
fn dq_pass(
    k: &mut Kernel,
    dims: &Dims,
    ln: &Lanes,
    mover: &Mover,
    [km, mn]: &[Desc; 2],
    sm: Reg,
    ins: Inputs,
    (bh, cx): (Reg, Reg),
    dq: Reg,
    dq_tab: Option<Reg>,
    merged: Gradients,
) {
    let t = dims.t as u32;
    // Stages [K0][V0][K1][V1]; Q and dO pass through K1 and V1 before the loop.
    let dsm = k.shared("attn_delta", ROWS * 4, 16);
    let tile = reversed_tile(k, t, cx);
    let qb = head_base(k, ins.q, bh, t, BF16_ROW_BYTES);
    let kb = head_base(k, ins.k, bh, t, BF16_ROW_BYTES);
    let vb = head_base(k, ins.v, bh, t, BF16_ROW_BYTES);
    let dob = head_base(k, ins.do16, bh, t, BF16_ROW_BYTES);
    let qrow0 = k.bin("mul.lo.u32", RegKind::B32, tile, ROWS);
    let sdelta = k.un("mov.u32", RegKind::B32, Opnd::S(dsm));
    k.comment("delta of the tile's rows from global; Q and dO through stage 1, K and V into stage 0");
    let deltab = head_base(k, ins.delta, bh, t, 4);
    delta_to_shared(k, ln, deltab, qrow0, t, sdelta);
    let s1 = k.bin("add.u32", RegKind::B32, sm, 2 * TILE);
    let s1v = k.bin("add.u32", RegKind::B32, sm, 3 * TILE);
    mover.copy(k, qb, qrow0, s1);
    mover.copy(k, dob, qrow0, s1v);
    let zero = k.imm_u32(0);
    mover.copy(k, kb, zero, sm);
    let s0v = k.bin("add.u32", RegKind::B32, sm, TILE);
    mover.copy(k, vb, zero, s0v);
    tiles_ready(k);
    let qf = a_frags_swizzled(k, ln, s1);
    let dof = a_frags_swizzled(k, ln, s1v);
    let lb = head_base(k, ins.lse, bh, t, 4);
    let (dl, lse2) = dq_row_stats(k, ln, sdelta, lb, qrow0, t);
    k.barrier();
    let acc: Vec<Vec<Reg>> = (0..8).map(|_| zeros(k, 4)).collect();
    let acc_flat: Vec<Reg> = acc.iter().flatten().copied().collect();
    let kt = k.imm_u32(0);
    let stage = k.imm_u32(0);
    let top = k.label("ktile");
    let skip_load = k.label("skip_load");
    k.place(&top);
    let has_next = k.setp("lt.u32", kt, tile);
    k.bra_if(has_next, true, &skip_load);
    {
        let nrow0 = k.tri("mad.lo.u32", RegKind::B32, kt, ROWS, ROWS);
        copy_next_stage(k, mover, [kb, vb], nrow0, sm, stage);
    }
    k.place(&skip_load);
    let cur = k.bin("add.u32", RegKind::B32, sm, stage);
    let vcur = k.bin("add.u32", RegKind::B32, cur, TILE);
    let (k_km, k_mn, v_km) = (km.lo(k, cur), mn.lo(k, cur), km.lo(k, vcur));
    // Mask limits: on the diagonal tile, key > query where 16kk + 8j + e > lim; else none.
    let diag = k.setp("eq.u32", kt, tile);
    let lim: Vec<Reg> = ln.lim.iter().map(|&x| k.tri("selp.b32", RegKind::B32, x, 1000u32, diag)).collect();
    k.comment("16 keys a chunk: S = Q K^T, dP = dO V^T, dS, dQ += dS K");
    pipelined_chunks(k, [(&qf, k_km), (&dof, v_km)], km, |k, kc, [s, dp]| {
        let ds = dq_chunk(k, dims, [&s, &dp], [&lse2, &dl], &lim, kc);
        let a = a_frag(k, &ds[0], &ds[1]);
        k.op("wgmma.fence.sync.aligned", []);
        let b = mn.at(k, k_mn, kc);
        product_rs(k, 64, &acc_flat, &a, b, mn);
        k.op("wgmma.commit_group.sync.aligned", []);
    });
    k.op("wgmma.wait_group.sync.aligned", [0u32.into()]);
    tiles_ready(k);
    k.op("xor.b32", [stage.into(), stage.into(), (2 * TILE).into()]);
    k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
    k.bra_if(has_next, false, &top);

    k.comment("epilogue: dq = scale dQ (turned back by the rotary when asked)");
    let sc = k.imm_f32(dims.scale);
    let (dqb, stride) = grad_base(k, dims, dq, bh, 0, merged);
    store_rows(k, ln, dqb, qrow0, t, &acc, [Some(sc), Some(sc)], dq_tab, stride);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coppelius() -> Dims {
        Dims { b: 16, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None }
    }

    #[test]
    fn the_kernels_take_the_mma_kernels_parameters() {
        let dims = coppelius();
        assert!(applies(&dims));
        let plain = forward_kernel(&dims, false);
        assert_eq!(plain.name, "attention_wgmma_fwd");
        assert_eq!(plain.params, mma::forward_kernel_bf16(&dims).params);
        let copying = forward_kernel(&dims, true);
        assert_eq!(copying.params, mma::forward_kernel_bf16_copying(&dims).params);
        use mma::Gradients::{Apart, MergedBf16, MergedBf16Summed, MergedF32};
        for (inverse, merged) in [
            ([true, true], Apart),
            ([true, true], MergedBf16),
            ([false, false], MergedBf16),
            ([true, true], MergedF32),
            ([false, false], MergedBf16Summed),
        ] {
            let theirs = match merged {
                Apart => mma::backward_kernel_bf16(&dims, inverse),
                MergedBf16 => mma::backward_kernel_bf16_merged(&dims, inverse),
                MergedF32 => mma::backward_kernel_bf16_merged_f32(&dims, inverse),
                MergedBf16Summed => mma::backward_kernel_bf16_merged_summed(&dims, inverse),
            };
            assert_eq!(backward_kernel(&dims, inverse, merged).params, theirs.params);
            assert!(backward_kernel(&dims, inverse, merged).name.ends_with(merged.suffix()));
        }
        assert!(!applies(&Dims { g: 2, ..dims }));
        assert!(!applies(&Dims { softcap: Some(30.0), ..dims }));
    }
}
