//! The forward kernels: online softmax over 64-key tiles, o and lse stored (and o's bf16
//! permuted copy where asked).

use super::*;

/// Forward: params (o, lse, q, k, v).
pub fn forward_kernel(dims: &Dims) -> Kernel {
    forward_kernel_rotating(dims, [false, false])
}

/// Forward with `load` = (q, k) read before their forward rotary and turned on load, as
/// [`crate::kernels::attention::forward_kernel_rotating`]: params (o, lse, q, k, v), then `q_tab` and
/// `k_tab` for those turned. Grid [`Dims::grid_q`], block [`block`].
pub fn forward_kernel_rotating(dims: &Dims, load: [bool; 2]) -> Kernel {
    forward_kernel_with(dims, load, false, false)
}

/// The forward reading q, k and v as bf16 (`[B·H, T, 64]` rows of 128 bytes, q and k already
/// turned by the rotary where it applies), copied straight into the shared tiles: params
/// (o, lse, q, k, v). The same products, in the same order, as [`forward_kernel_rotating`] on
/// the f32 tensors these round — so the same bits. Grid [`Dims::grid_q`], block [`block`].
pub fn forward_kernel_bf16(dims: &Dims) -> Kernel {
    forward_kernel_with(dims, [false, false], true, false)
}

/// [`forward_kernel_bf16`] that also stores o rounded to bf16 as `[B, T, H, 64]` (param `o16`,
/// last): the permuted cast the output projection reads, which a permute-and-cast launch made
/// from o before. The same bits.
pub fn forward_kernel_bf16_copying(dims: &Dims) -> Kernel {
    forward_kernel_with(dims, [false, false], true, true)
}

pub(super) fn forward_kernel_with(dims: &Dims, load: [bool; 2], bf16: bool, copy: bool) -> Kernel {
    use crate::ptx::ParamTy;
    debug_assert_eq!(dims.d, D);
    debug_assert!(!(bf16 && (load[0] || load[1])), "bf16 q and k come turned");
    let t = dims.t as u32;
    let family = if bf16 { BF16_FAMILY } else { "attention_mma" };
    let name = format!("{}{}", kernel_name(family, "fwd", load, false), if copy { "_o16" } else { "" });
    let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
    let ([o, lse, q, kk, v], [q_tab, k_tab]) = forward_params(&mut k, load);
    let o16 = copy.then(|| k.param_reg("o16", ParamTy::U64));
    let in_row = if bf16 { BF16_ROW_BYTES } else { ROW_BYTES };
    // Stages [K0][V0][K1][V1]; Q passes through K1 before the loop.
    let smem = k.shared("attn_smem", 4 * TILE, 16);
    let ln = lanes(&mut k);
    let cx = k.sreg("%ctaid.x");
    let tile = reversed_tile(&mut k, t, cx);
    let bh = k.sreg("%ctaid.y");
    let kvh = kv_head(&mut k, dims, bh);
    let qb = head_base(&mut k, q, bh, t, in_row);
    let kb = head_base(&mut k, kk, kvh, t, in_row);
    let vb = head_base(&mut k, v, kvh, t, in_row);
    let qrow0 = k.bin("mul.lo.u32", RegKind::B32, tile, ROWS);
    let sm = k.un("mov.u32", RegKind::B32, Opnd::S(smem));
    let mq = mover_of(&mut k, &ln, q_tab, t, bf16);
    let mk = mover_of(&mut k, &ln, k_tab, t, bf16);
    let mv = mover_of(&mut k, &ln, None, t, bf16);
    k.comment("prologue: Q through stage 1, the first K and V tiles into stage 0");
    {
        let s1 = k.bin("add.u32", RegKind::B32, sm, 2 * TILE);
        let f = mq.issue(&mut k, qb, qrow0, s1);
        let zero = k.imm_u32(0);
        let fk = mk.issue(&mut k, kb, zero, sm);
        let s0v = k.bin("add.u32", RegKind::B32, sm, TILE);
        let fv = mv.issue(&mut k, vb, zero, s0v);
        mq.store(&mut k, &f);
        mk.store(&mut k, &fk);
        mv.store(&mut k, &fv);
    }
    k.barrier();
    let qf = {
        let s1 = k.bin("add.u32", RegKind::B32, sm, 2 * TILE);
        a_frags(&mut k, &ln, s1)
    };
    k.barrier();
    let (acc, m, l) = forward_state(&mut k);
    let kt = k.imm_u32(0);
    let stage = k.imm_u32(0);
    let top = k.label("ktile");
    let skip_load = k.label("skip_load");
    let skip_mask = k.label("skip_mask");
    let skip_store = k.label("skip_store");
    k.place(&top);
    let has_next = k.setp("lt.u32", kt, tile);
    k.bra_if(has_next, true, &skip_load);
    let nrow0 = k.tri("mad.lo.u32", RegKind::B32, kt, ROWS, ROWS);
    let (first, second) = next_stage(&mut k, sm, stage);
    let fk = mk.issue(&mut k, kb, nrow0, first);
    let fv = mv.issue(&mut k, vb, nrow0, second);
    k.place(&skip_load);
    k.comment("S = Q K^T");
    let cur = k.bin("add.u32", RegKind::B32, sm, stage);
    let kb_b = k.bin("add.u32", RegKind::B32, cur, ln.b_off);
    let s: Vec<Vec<Reg>> = (0..8).map(|_| zeros(&mut k, 4)).collect();
    for np in 0..4usize {
        mma_abt(&mut k, &s[2 * np..2 * np + 2], &qf, kb_b, np as u32 * 16);
    }
    online_softmax(&mut k, dims, &ln, &s, &acc, (m, l), (kt, tile), &skip_mask);
    k.comment("O += P V");
    let vb_t = {
        let c = k.bin("add.u32", RegKind::B32, cur, TILE);
        k.bin("add.u32", RegKind::B32, c, ln.a_off)
    };
    for kc in 0..4usize {
        let a = a_frag(&mut k, &s[2 * kc], &s[2 * kc + 1]);
        mma_ab(&mut k, &acc, &a, vb_t, kc as u32 * 16);
    }
    store_next_stage(&mut k, has_next, &skip_store, [(&mk, &fk), (&mv, &fv)], |_| {});
    k.barrier();
    k.op("xor.b32", [stage.into(), stage.into(), (2 * TILE).into()]);
    k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
    k.bra_if(has_next, false, &top);

    forward_epilogue(&mut k, dims, &ln, [o, lse], o16, bh, qrow0, &acc, (m, l));
    k.ret();
    k
}

/// The forward's running state, zeroed: the output accumulators (8 n8 tiles of the warp's 16
/// rows), and each accumulator row's maximum (−∞) and sum of exponentials — what
/// [`online_softmax`] updates tile by tile and [`forward_epilogue`] finishes.
pub(crate) fn forward_state(k: &mut Kernel) -> (Vec<Vec<Reg>>, [Reg; 2], [Reg; 2]) {
    let acc: Vec<Vec<Reg>> = (0..8).map(|_| zeros(k, 4)).collect();
    let m = [k.imm_f32(f32::NEG_INFINITY), k.imm_f32(f32::NEG_INFINITY)];
    let l = [k.imm_f32(0.0), k.imm_f32(0.0)];
    (acc, m, l)
}

/// One key tile's scores `s` (8 n8 accumulators of the warp's 16 rows, in place) turned into
/// probabilities: logits in base-2 units, the causal mask on the diagonal tile (`kt == tile`),
/// and the online softmax against the running row max `m` and sum `l`, with the output
/// accumulators `acc` rescaled. Shared by the `mma.sync` and `wgmma` forwards (the same
/// accumulator layout), so both compute the same bits.
#[allow(clippy::too_many_arguments)]
pub(crate) fn online_softmax(
    k: &mut Kernel,
    dims: &Dims,
    ln: &Lanes,
    s: &[Vec<Reg>],
    acc: &[Vec<Reg>],
    (m, l): ([Reg; 2], [Reg; 2]),
    (kt, tile): (Reg, Reg),
    skip_mask: &str,
) {
    // Logits in base-2 units, in place.
    for x in s.iter().flatten() {
        let (s2, _) = logit2(k, *x, dims);
        k.op("mov.f32", [(*x).into(), s2.into()]);
    }
    k.comment("causal mask, diagonal tile only: key 8j + 2t + e > query wrow + g + 8r");
    let diag = k.setp("eq.u32", kt, tile);
    k.bra_if(diag, true, skip_mask);
    for (j, c) in s.iter().enumerate() {
        for (e, &x) in c.iter().enumerate() {
            let masked = k.setp("lt.s32", ln.lim[e >> 1], (8 * j + (e & 1)) as u32);
            k.op("selp.f32", [x.into(), f32::NEG_INFINITY.into(), x.into(), masked.into()]);
        }
    }
    k.place(skip_mask);
    k.comment("online softmax (base 2)");
    for r in 0..2usize {
        let mut mx = s[0][2 * r];
        for (j, c) in s.iter().enumerate() {
            for e in 0..2 {
                if j == 0 && e == 0 {
                    continue;
                }
                mx = k.bin("max.f32", RegKind::F32, mx, c[2 * r + e]);
            }
        }
        for mask in [1u32, 2] {
            let o_ = shfl_xor(k, mx, mask);
            mx = k.bin("max.f32", RegKind::F32, mx, o_);
        }
        let m_new = k.bin("max.f32", RegKind::F32, m[r], mx);
        let dm = k.bin("sub.rn.f32", RegKind::F32, m[r], m_new);
        let alpha = ex2(k, dm);
        k.op("mov.f32", [m[r].into(), m_new.into()]);
        k.op("mul.rn.f32", [l[r].into(), l[r].into(), alpha.into()]);
        for a in acc {
            for e in 0..2 {
                k.op("mul.rn.f32", [a[2 * r + e].into(), a[2 * r + e].into(), alpha.into()]);
            }
        }
        for c in s {
            for e in 0..2 {
                let x = c[2 * r + e];
                let d = k.bin("sub.rn.f32", RegKind::F32, x, m_new);
                let p = ex2(k, d);
                k.op("mov.f32", [x.into(), p.into()]);
                k.op("add.rn.f32", [l[r].into(), l[r].into(), p.into()]);
            }
        }
    }
}

/// The forward's end: o = O / l (and its permuted bf16 copy at `o16`), lse = ln 2·(m + log₂ l),
/// for the block's query tile at `qrow0` of head `bh`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_epilogue(
    k: &mut Kernel,
    dims: &Dims,
    ln: &Lanes,
    [o, lse]: [Reg; 2],
    o16: Option<Reg>,
    bh: Reg,
    qrow0: Reg,
    acc: &[Vec<Reg>],
    (m, l): ([Reg; 2], [Reg; 2]),
) {
    let t = dims.t as u32;
    k.comment("epilogue: o = O / l, lse = ln 2  (m + log2 l)");
    let mut inv = [None, None];
    let mut lsum = vec![];
    for r in 0..2usize {
        let mut x = l[r];
        for mask in [1u32, 2] {
            let o_ = shfl_xor(k, x, mask);
            x = k.bin("add.rn.f32", RegKind::F32, x, o_);
        }
        inv[r] = Some(k.un("rcp.rn.f32", RegKind::F32, x));
        lsum.push(x);
    }
    let ob = head_base(k, o, bh, t, ROW_BYTES);
    store_rows(k, ln, ob, qrow0, t, acc, inv, None, Rows::F32Head);
    if let Some(o16) = o16 {
        // Element ((b·T + t)·H + hh)·64 + d: at t = 0, (b·T·H + hh)·64; rows H·64 apart.
        let h = dims.h as u32;
        let b = k.bin("div.u32", RegKind::B32, bh, h);
        let hh = k.bin("rem.u32", RegKind::B32, bh, h);
        let row = k.tri("mad.lo.u32", RegKind::B32, b, t * h, hh);
        let off = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [off.into(), row.into(), BF16_ROW_BYTES.into()]);
        let base = k.bin("add.s64", RegKind::B64, o16, off);
        store_rows(k, ln, base, qrow0, t, acc, inv, None, Rows::Bf16(h * BF16_ROW_BYTES));
    }
    let lb = head_base(k, lse, bh, t, 4);
    let first = k.setp("eq.u32", ln.tq, 0u32);
    for r in 0..2usize {
        let a = k.bin("add.u32", RegKind::B32, qrow0, ln.wrow);
        let b = k.bin("add.u32", RegKind::B32, ln.g, (8 * r) as u32);
        let row = k.bin("add.u32", RegKind::B32, a, b);
        let inside = k.setp("lt.u32", row, t);
        let ok = k.bin("and.pred", RegKind::Pred, inside, first);
        let lg = k.un("lg2.approx.f32", RegKind::F32, lsum[r]);
        let s2 = k.bin("add.rn.f32", RegKind::F32, m[r], lg);
        let val = k.bin("mul.rn.f32", RegKind::F32, s2, std::f32::consts::LN_2);
        let pa = k.addr_of(lb, row, 4);
        k.op_if(ok, false, "st.global.f32", [addr(pa, 0), val.into()]);
    }
}
