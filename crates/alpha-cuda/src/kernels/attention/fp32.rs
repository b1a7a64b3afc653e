//! The fp32 kernels: one thread per query row (forward, dQ) or key row (dK/dV) on the CUDA
//! cores, and the row and tile helpers the tensor-core families share.

use super::*;

pub(super) fn f(k: &mut Kernel) -> Reg {
    k.reg(RegKind::F32)
}

/// One thread's 16-byte move of a tile copy: element group `e = tid + first` of `total` (in the
/// tile: `in_tile`), at tile row `r`, group `c4` of `per_row`; global row `gr = row0 + r`, `ok`
/// when also `gr < t`.
pub(super) struct TileStep {
    in_tile: Reg,
    ok: Reg,
    r: Reg,
    c4: Reg,
    gr: Reg,
}

pub(super) fn tile_step(k: &mut Kernel, tid: Reg, first: u32, total: u32, per_row: u32, row0: Reg, t: u32) -> TileStep {
    let e = k.bin("add.u32", RegKind::B32, tid, first);
    let in_tile = k.setp("lt.u32", e, total);
    let r = k.bin("div.u32", RegKind::B32, e, per_row);
    let c4 = k.bin("rem.u32", RegKind::B32, e, per_row);
    let gr = k.bin("add.u32", RegKind::B32, row0, r);
    let below_t = k.setp("lt.u32", gr, t);
    let ok = k.reg(RegKind::Pred);
    k.op("and.pred", [ok.into(), below_t.into(), in_tile.into()]);
    TileStep { in_tile, ok, r, c4, gr }
}

/// Copies rows `row0 .. row0 + rows` of a `[t][d]` f32 matrix at `base` into shared `[rows][d]`
/// (zeros past `t`), with `threads` threads doing 16-byte moves.
#[allow(clippy::too_many_arguments)]
pub(super) fn load_tile(
    k: &mut Kernel,
    smem: Reg,
    base: Reg,
    row0: Reg,
    rows: u32,
    t: u32,
    d: u32,
    threads: u32,
    tid: Reg,
) {
    let total = rows * d / 4;
    let per_row = d / 4;
    for it in 0..total.div_ceil(threads) {
        let TileStep { in_tile, ok: ok2, r, c4, gr } = tile_step(k, tid, it * threads, total, per_row, row0, t);
        let v: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
        let ge = {
            let c = k.bin("shl.b32", RegKind::B32, c4, 2u32);
            k.tri("mad.lo.u32", RegKind::B32, gr, d, c)
        };
        let ga = k.addr_of(base, ge, 4);
        k.op_if(ok2, false, "ld.global.v4.f32", [Opnd::V(v.clone()), addr(ga, 0)]);
        let se = {
            let c = k.bin("shl.b32", RegKind::B32, c4, 2u32);
            k.tri("mad.lo.u32", RegKind::B32, r, d, c)
        };
        let sa = k.tri("mad.lo.u32", RegKind::B32, se, 4u32, smem);
        k.op_if(in_tile, false, "st.shared.v4.f32", [addr(sa, 0), Opnd::V(v)]);
    }
}

/// [`load_tile`] of a tensor before its rotary: each row is turned by the rotary at its position
/// (`row0 + r`, from the host-computed table `tab` of `t` positions) on its way to shared memory,
/// with the rotary kernel's arithmetic ([`rotate_pairs`]), so shared memory holds exactly what the
/// Rotary would have written. A thread moves 4 pairs: 16 bytes of each half. `d` a multiple of 8.
#[allow(clippy::too_many_arguments)]
pub(super) fn load_tile_rotated(
    k: &mut Kernel,
    smem: Reg,
    base: Reg,
    tab: Reg,
    row0: Reg,
    rows: u32,
    t: u32,
    d: u32,
    threads: u32,
    tid: Reg,
) {
    let half = d / 2;
    let per_row = half / 4;
    let total = rows * per_row;
    for it in 0..total.div_ceil(threads) {
        let TileStep { in_tile, ok: ok2, r, c4, gr } = tile_step(k, tid, it * threads, total, per_row, row0, t);
        let c = k.bin("shl.b32", RegKind::B32, c4, 2u32);
        let ge = k.tri("mad.lo.u32", RegKind::B32, gr, d, c);
        let ga = k.addr_of(base, ge, 4);
        let x1: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
        let x2: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
        k.op_if(ok2, false, "ld.global.v4.f32", [Opnd::V(x1.clone()), addr(ga, 0)]);
        k.op_if(ok2, false, "ld.global.v4.f32", [Opnd::V(x2.clone()), addr(ga, (half * 4) as i64)]);
        let te = k.tri("mad.lo.u32", RegKind::B32, gr, half, c);
        let ta = k.addr_of(tab, te, 4);
        let cs: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
        let sn: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
        k.op_if(ok2, false, "ld.global.v4.f32", [Opnd::V(cs.clone()), addr(ta, 0)]);
        k.op_if(ok2, false, "ld.global.v4.f32", [Opnd::V(sn.clone()), addr(ta, (t * half * 4) as i64)]);
        let (o1, o2) = rotate_pairs(k, &x1, &x2, &cs, &sn, false);
        let se = k.tri("mad.lo.u32", RegKind::B32, r, d, c);
        let sa = k.tri("mad.lo.u32", RegKind::B32, se, 4u32, smem);
        k.op_if(in_tile, false, "st.shared.v4.f32", [addr(sa, 0), Opnd::V(o1)]);
        k.op_if(in_tile, false, "st.shared.v4.f32", [addr(sa, (half * 4) as i64), Opnd::V(o2)]);
    }
}

/// A tile of `base` into shared memory, turned by the rotary when `tab` is given.
#[allow(clippy::too_many_arguments)]
pub(super) fn load_tile_maybe_rotated(
    k: &mut Kernel,
    smem: Reg,
    base: Reg,
    tab: Option<Reg>,
    row0: Reg,
    rows: u32,
    t: u32,
    d: u32,
    threads: u32,
    tid: Reg,
) {
    match tab {
        Some(tab) => load_tile_rotated(k, smem, base, tab, row0, rows, t, d, threads, tid),
        None => load_tile(k, smem, base, row0, rows, t, d, threads, tid),
    }
}

/// `Σ_c a[c]·b[c]` where `a` is in registers and `b` is a shared-memory row at `row` (u32
/// address), read as 16-byte broadcasts; four partial sums break the dependency chain.
pub(super) fn dot_regs_shared(k: &mut Kernel, a: &[Reg], row: Reg) -> Reg {
    let parts: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
    for c4 in 0..a.len() / 4 {
        let b: Vec<Reg> = (0..4).map(|_| f(k)).collect();
        k.op("ld.shared.v4.f32", [Opnd::V(b.clone()), addr(row, (c4 * 16) as i64)]);
        for (j, &bj) in b.iter().enumerate() {
            k.op("fma.rn.f32", [parts[j].into(), a[c4 * 4 + j].into(), bj.into(), parts[j].into()]);
        }
    }
    let s01 = k.bin("add.rn.f32", RegKind::F32, parts[0], parts[1]);
    let s23 = k.bin("add.rn.f32", RegKind::F32, parts[2], parts[3]);
    k.bin("add.rn.f32", RegKind::F32, s01, s23)
}

/// `Σ_c col[c]·b[c]` where `col` is a transposed shared array read at `colbase + c·stride` and
/// `b` a shared row read as broadcasts.
pub(super) fn dot_col_shared(k: &mut Kernel, colbase: Reg, stride: u32, row: Reg, d: usize) -> Reg {
    let parts: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
    for c4 in 0..d / 4 {
        let b: Vec<Reg> = (0..4).map(|_| f(k)).collect();
        k.op("ld.shared.v4.f32", [Opnd::V(b.clone()), addr(row, (c4 * 16) as i64)]);
        for (j, &bj) in b.iter().enumerate() {
            let a = f(k);
            k.op("ld.shared.f32", [a.into(), addr(colbase, ((c4 * 4 + j) as u32 * stride * 4) as i64)]);
            k.op("fma.rn.f32", [parts[j].into(), a.into(), bj.into(), parts[j].into()]);
        }
    }
    let s01 = k.bin("add.rn.f32", RegKind::F32, parts[0], parts[1]);
    let s23 = k.bin("add.rn.f32", RegKind::F32, parts[2], parts[3]);
    k.bin("add.rn.f32", RegKind::F32, s01, s23)
}

/// `acc[c] += w·row[c]` for a shared row read as broadcasts.
pub(super) fn axpy_shared(k: &mut Kernel, acc: &[Reg], w: Reg, row: Reg) {
    for c4 in 0..acc.len() / 4 {
        let b: Vec<Reg> = (0..4).map(|_| f(k)).collect();
        k.op("ld.shared.v4.f32", [Opnd::V(b.clone()), addr(row, (c4 * 16) as i64)]);
        for (j, &bj) in b.iter().enumerate() {
            let a = acc[c4 * 4 + j];
            k.op("fma.rn.f32", [a.into(), w.into(), bj.into(), a.into()]);
        }
    }
}

/// The scaled (and soft-capped) logit from a raw dot product.
pub(super) fn logit(k: &mut Kernel, dot: Reg, dims: &Dims) -> Reg {
    let s = k.bin("mul.rn.f32", RegKind::F32, dot, dims.scale);
    match dims.softcap {
        Some(c) => {
            let r = k.bin("div.rn.f32", RegKind::F32, s, c);
            let t = tanh(k, r);
            k.bin("mul.rn.f32", RegKind::F32, t, c)
        }
        None => s,
    }
}

/// `e^x`.
pub(super) fn exp(k: &mut Kernel, x: Reg) -> Reg {
    crate::kernels::pointwise::exp(k, x)
}

/// Loads a `d`-float global row at element index `e` of `base` into fresh registers (zeros when
/// `ok` is false).
pub(super) fn load_row(k: &mut Kernel, base: Reg, e: Reg, d: usize, ok: Reg) -> Vec<Reg> {
    let a = k.addr_of(base, e, 4);
    let mut out = vec![];
    for c4 in 0..d / 4 {
        let v: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
        k.op_if(ok, false, "ld.global.v4.f32", [Opnd::V(v.clone()), addr(a, (c4 * 16) as i64)]);
        out.extend(v);
    }
    out
}

pub(super) fn store_row(k: &mut Kernel, base: Reg, e: Reg, vals: &[Reg], ok: Reg) {
    let a = k.addr_of(base, e, 4);
    for c4 in 0..vals.len() / 4 {
        k.op_if(ok, false, "st.global.v4.f32", [addr(a, (c4 * 16) as i64), Opnd::V(vals[c4 * 4..c4 * 4 + 4].to_vec())]);
    }
}

/// The cosines and sines of position `pos` (`d/2` each) from a rotary table of `t` positions;
/// zeros where `ok` is false.
pub(super) fn table_row(k: &mut Kernel, tab: Reg, pos: Reg, t: u32, d: usize, ok: Reg) -> (Vec<Reg>, Vec<Reg>) {
    let half = (d / 2) as u32;
    let e = k.bin("mul.lo.u32", RegKind::B32, pos, half);
    let a = k.addr_of(tab, e, 4);
    let (mut c, mut s) = (vec![], vec![]);
    for c4 in 0..half / 4 {
        let cv: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
        k.op_if(ok, false, "ld.global.v4.f32", [Opnd::V(cv.clone()), addr(a, (c4 * 16) as i64)]);
        let sv: Vec<Reg> = (0..4).map(|_| k.imm_f32(0.0)).collect();
        k.op_if(ok, false, "ld.global.v4.f32", [Opnd::V(sv.clone()), addr(a, (t * half * 4 + c4 * 16) as i64)]);
        c.extend(cv);
        s.extend(sv);
    }
    (c, s)
}

/// `(x₁, x₂) → (x₁cos − x₂sin, x₁sin + x₂cos)` for the pairs `(x1[i], x2[i])`, the sine negated
/// for the inverse: exactly [`crate::kernels::rotary::kernel`]'s arithmetic. Returns (o₁, o₂).
pub(crate) fn rotate_pairs(
    k: &mut Kernel,
    x1: &[Reg],
    x2: &[Reg],
    c: &[Reg],
    s: &[Reg],
    inverse: bool,
) -> (Vec<Reg>, Vec<Reg>) {
    let (mut o1, mut o2) = (vec![], vec![]);
    for i in 0..x1.len() {
        let si = if inverse { k.un("neg.f32", RegKind::F32, s[i]) } else { s[i] };
        let a = k.bin("mul.rn.f32", RegKind::F32, x1[i], c[i]);
        let b = k.bin("mul.rn.f32", RegKind::F32, x2[i], si);
        o1.push(k.bin("sub.rn.f32", RegKind::F32, a, b));
        let a = k.bin("mul.rn.f32", RegKind::F32, x1[i], si);
        let b = k.bin("mul.rn.f32", RegKind::F32, x2[i], c[i]);
        o2.push(k.bin("add.rn.f32", RegKind::F32, a, b));
    }
    (o1, o2)
}

/// A whole row (`d` registers) rotated at position `pos`.
pub(super) fn rotate_row(k: &mut Kernel, row: &[Reg], tab: Reg, pos: Reg, t: u32, ok: Reg, inverse: bool) -> Vec<Reg> {
    let d = row.len();
    let (c, s) = table_row(k, tab, pos, t, d, ok);
    let (o1, o2) = rotate_pairs(k, &row[..d / 2], &row[d / 2..], &c, &s, inverse);
    o1.into_iter().chain(o2).collect()
}

/// What [`walk_keys`] needs: the shared K and V tiles, K and V of the key/value head (`k_tab`
/// when K is turned on load), the block's query tile and the thread's query row `i`.
pub(super) struct KeyTiles {
    ks_base: Reg,
    vs_base: Reg,
    kbase: Reg,
    vbase: Reg,
    k_tab: Option<Reg>,
    tile: Reg,
    i: Reg,
    tid: Reg,
    t: u32,
    d: u32,
}

/// The forward's and dQ's walk over the keys j ≤ i: for each 64-key tile up to the block's
/// diagonal (ROWS == KTILE), K (turned on load when asked) and V staged in shared memory
/// between two barriers, then `body(k, off)` for each key, `off` the key's byte offset within
/// the tiles.
pub(super) fn walk_keys(k: &mut Kernel, w: &KeyTiles, mut body: impl FnMut(&mut Kernel, Reg)) {
    let kt = k.imm_u32(0);
    let ttop = k.label("tile");
    let tend = k.label("tile_end");
    k.place(&ttop);
    let tdone = k.setp("gt.u32", kt, w.tile);
    k.bra_if(tdone, false, &tend);
    let row0 = k.bin("mul.lo.u32", RegKind::B32, kt, KTILE);
    k.barrier();
    load_tile_maybe_rotated(k, w.ks_base, w.kbase, w.k_tab, row0, KTILE, w.t, w.d, ROWS, w.tid);
    load_tile(k, w.vs_base, w.vbase, row0, KTILE, w.t, w.d, ROWS, w.tid);
    k.barrier();
    // Keys j = row0 + jj for jj < KTILE, j ≤ i.
    let jj = k.imm_u32(0);
    let ktop = k.label("key");
    let kend = k.label("key_end");
    k.place(&ktop);
    let jdone = k.setp("ge.u32", jj, KTILE);
    k.bra_if(jdone, false, &kend);
    let j = k.bin("add.u32", RegKind::B32, row0, jj);
    let past = k.setp("gt.u32", j, w.i);
    k.bra_if(past, false, &kend);
    let off = k.bin("mul.lo.u32", RegKind::B32, jj, w.d * 4);
    body(k, off);
    k.op("add.u32", [jj.into(), jj.into(), 1u32.into()]);
    k.bra(&ktop);
    k.place(&kend);
    k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
    k.bra(&ttop);
    k.place(&tend);
}

pub(super) fn rows_prologue(k: &mut Kernel, t: u32) -> (Reg, Reg, Reg, Reg, Reg) {
    let tid = k.sreg("%tid.x");
    let tile = k.sreg("%ctaid.x");
    let head = k.sreg("%ctaid.y");
    let i = k.tri("mad.lo.u32", RegKind::B32, tile, ROWS, tid);
    let ok = k.setp("lt.u32", i, t);
    (tid, tile, head, i, ok)
}

/// Forward: params (o, lse, q, k, v).
pub fn forward_kernel(dims: &Dims) -> Kernel {
    forward_kernel_rotating(dims, [false, false])
}

/// The names' infix for q and k turned by the rotary on load.
pub(super) fn rotload(load: [bool; 2]) -> &'static str {
    if load[0] || load[1] {
        "_rotload"
    } else {
        ""
    }
}

/// Forward, with `load` = (q, k) read before their (forward) rotary and turned on load (the
/// Rotary fused into the loads, see `load_tile_rotated`): params (o, lse, q, k, v), then
/// `q_tab` and `k_tab` for those turned.
pub fn forward_kernel_rotating(dims: &Dims, load: [bool; 2]) -> Kernel {
    let (t, d) = (dims.t as u32, dims.d);
    let mut k = Kernel::new(&kernel_name("attention", "fwd", load, false)).with_block(ROWS, 1, 1);
    let ([o, lse, q, kk, v], [q_tab, k_tab]) = forward_params(&mut k, load);
    let ks = k.shared("ks", KTILE * d as u32 * 4, 16);
    let vs = k.shared("vs", KTILE * d as u32 * 4, 16);
    let (tid, tile, bh, i, ok) = rows_prologue(&mut k, t);
    let kvh = kv_head(&mut k, dims, bh);
    let kv_row0 = k.bin("mul.lo.u32", RegKind::B32, kvh, t);
    let kbase = {
        let e = k.bin("mul.lo.u32", RegKind::B32, kv_row0, d as u32);
        k.addr_of(kk, e, 4)
    };
    let vbase = {
        let e = k.bin("mul.lo.u32", RegKind::B32, kv_row0, d as u32);
        k.addr_of(v, e, 4)
    };
    let qrow = k.tri("mad.lo.u32", RegKind::B32, bh, t, i);
    let qe = k.bin("mul.lo.u32", RegKind::B32, qrow, d as u32);
    let qv = load_row(&mut k, q, qe, d, ok);
    let qv = match q_tab {
        Some(tab) => rotate_row(&mut k, &qv, tab, i, t, ok, false),
        None => qv,
    };
    let acc: Vec<Reg> = (0..d).map(|_| k.imm_f32(0.0)).collect();
    let m = k.imm_f32(f32::NEG_INFINITY);
    let l = k.imm_f32(0.0);
    let ks_base = k.un("mov.u32", RegKind::B32, Opnd::S(ks));
    let vs_base = k.un("mov.u32", RegKind::B32, Opnd::S(vs));
    let tiles = KeyTiles { ks_base, vs_base, kbase, vbase, k_tab, tile, i, tid, t, d: d as u32 };
    walk_keys(&mut k, &tiles, |k, off| {
        let krow = k.bin("add.u32", RegKind::B32, ks_base, off);
        let dot = dot_regs_shared(k, &qv, krow);
        let s = logit(k, dot, dims);
        // Rescale when the running maximum grows.
        let grow = k.setp("gt.f32", s, m);
        let same = k.label("same_max");
        k.bra_if(grow, true, &same);
        let dm = k.bin("sub.rn.f32", RegKind::F32, m, s);
        let alpha = exp(k, dm);
        k.op("mul.rn.f32", [l.into(), l.into(), alpha.into()]);
        for &a in &acc {
            k.op("mul.rn.f32", [a.into(), a.into(), alpha.into()]);
        }
        k.op("mov.f32", [m.into(), s.into()]);
        k.place(&same);
        let sm = k.bin("sub.rn.f32", RegKind::F32, s, m);
        let p = exp(k, sm);
        k.op("add.rn.f32", [l.into(), l.into(), p.into()]);
        let vrow = k.bin("add.u32", RegKind::B32, vs_base, off);
        axpy_shared(k, &acc, p, vrow);
    });
    let inv = k.bin("div.rn.f32", RegKind::F32, 1.0f32, l);
    let out: Vec<Reg> = acc.iter().map(|&a| k.bin("mul.rn.f32", RegKind::F32, a, inv)).collect();
    store_row(&mut k, o, qe, &out, ok);
    let lnl = crate::kernels::pointwise::ln(&mut k, l);
    let lv = k.bin("add.rn.f32", RegKind::F32, m, lnl);
    let la = k.addr_of(lse, qrow, 4);
    k.op_if(ok, false, "st.global.f32", [addr(la, 0), lv.into()]);
    k.ret();
    k
}

/// dQ and delta: params (dq, delta, q, k, v, o, lse, do), then `dq_tab` with `inverse_rotary`:
/// dq is stored turned back by the rotary (its pullback), as the inverse Rotary would write it.
pub fn backward_dq_kernel(dims: &Dims, inverse_rotary: bool) -> Kernel {
    backward_dq_kernel_rotating(dims, inverse_rotary, [false, false])
}

/// [`backward_dq_kernel`] with q and k (as `load` says) read before their forward rotary and
/// turned on load, as in [`forward_kernel_rotating`]; `q_tab`, `k_tab` follow the params.
pub fn backward_dq_kernel_rotating(dims: &Dims, inverse_rotary: bool, load: [bool; 2]) -> Kernel {
    let (t, d) = (dims.t as u32, dims.d);
    let mut k = Kernel::new(&kernel_name("attention", "bwd_dq", load, inverse_rotary)).with_block(ROWS, 1, 1);
    let ([dq, delta, q, kk, v, o, lse, dout], dq_tab, [q_tab, k_tab]) = dq_params(&mut k, inverse_rotary, load);
    let qt = k.shared("qt", ROWS * d as u32 * 4, 16);
    let ks = k.shared("ks", KTILE * d as u32 * 4, 16);
    let vs = k.shared("vs", KTILE * d as u32 * 4, 16);
    let (tid, tile, bh, i, ok) = rows_prologue(&mut k, t);
    let kvh = kv_head(&mut k, dims, bh);
    let kv_row0 = k.bin("mul.lo.u32", RegKind::B32, kvh, t);
    let kve = k.bin("mul.lo.u32", RegKind::B32, kv_row0, d as u32);
    let kbase = k.addr_of(kk, kve, 4);
    let vbase = k.addr_of(v, kve, 4);
    let qrow = k.tri("mad.lo.u32", RegKind::B32, bh, t, i);
    let qe = k.bin("mul.lo.u32", RegKind::B32, qrow, d as u32);
    // q row, transposed into shared memory: qt[c][tid].
    let qt_base = k.un("mov.u32", RegKind::B32, Opnd::S(qt));
    let my_col = k.tri("mad.lo.u32", RegKind::B32, tid, 4u32, qt_base);
    {
        let qv = load_row(&mut k, q, qe, d, ok);
        let qv = match q_tab {
            Some(tab) => rotate_row(&mut k, &qv, tab, i, t, ok, false),
            None => qv,
        };
        for (c, &x) in qv.iter().enumerate() {
            k.op("st.shared.f32", [addr(my_col, (c as u32 * ROWS * 4) as i64), x.into()]);
        }
    }
    let dov = load_row(&mut k, dout, qe, d, ok);
    let dl = {
        let ov = load_row(&mut k, o, qe, d, ok);
        let s = k.imm_f32(0.0);
        for (a, b) in dov.iter().zip(&ov) {
            k.op("fma.rn.f32", [s.into(), (*a).into(), (*b).into(), s.into()]);
        }
        s
    };
    let da = k.addr_of(delta, qrow, 4);
    k.op_if(ok, false, "st.global.f32", [addr(da, 0), dl.into()]);
    let li = k.imm_f32(0.0);
    let la = k.addr_of(lse, qrow, 4);
    k.op_if(ok, false, "ld.global.f32", [li.into(), addr(la, 0)]);
    let acc: Vec<Reg> = (0..d).map(|_| k.imm_f32(0.0)).collect();
    let ks_base = k.un("mov.u32", RegKind::B32, Opnd::S(ks));
    let vs_base = k.un("mov.u32", RegKind::B32, Opnd::S(vs));
    let tiles = KeyTiles { ks_base, vs_base, kbase, vbase, k_tab, tile, i, tid, t, d: d as u32 };
    walk_keys(&mut k, &tiles, |k, off| {
        let krow = k.bin("add.u32", RegKind::B32, ks_base, off);
        let vrow = k.bin("add.u32", RegKind::B32, vs_base, off);
        let dot = dot_col_shared(k, my_col, ROWS, krow, d);
        let s = logit(k, dot, dims);
        let sl = k.bin("sub.rn.f32", RegKind::F32, s, li);
        let p = exp(k, sl);
        let dp = dot_regs_shared(k, &dov, vrow);
        let ds = ds_of(k, p, dp, dl, s, dims);
        axpy_shared(k, &acc, ds, krow);
    });
    let acc = match dq_tab {
        Some(tab) => rotate_row(&mut k, &acc, tab, i, t, ok, true),
        None => acc,
    };
    store_row(&mut k, dq, qe, &acc, ok);
    k.ret();
    k
}

/// `ds = p·(dp − delta)·(1 − (s/c)²)·scale`.
pub(super) fn ds_of(k: &mut Kernel, p: Reg, dp: Reg, delta: Reg, s: Reg, dims: &Dims) -> Reg {
    let x = k.bin("sub.rn.f32", RegKind::F32, dp, delta);
    let mut ds = k.bin("mul.rn.f32", RegKind::F32, p, x);
    if let Some(c) = dims.softcap {
        let r = k.bin("div.rn.f32", RegKind::F32, s, c);
        let r2 = k.bin("mul.rn.f32", RegKind::F32, r, r);
        let f = k.bin("sub.rn.f32", RegKind::F32, 1.0f32, r2);
        ds = k.bin("mul.rn.f32", RegKind::F32, ds, f);
    }
    k.bin("mul.rn.f32", RegKind::F32, ds, dims.scale)
}

/// dK and dV: params (dk, dv, q, k, v, lse, delta, do), then `dk_tab` with `inverse_rotary`
/// (dk stored turned back by the rotary, as for dq).
pub fn backward_dkv_kernel(dims: &Dims, inverse_rotary: bool) -> Kernel {
    backward_dkv_kernel_rotating(dims, inverse_rotary, [false, false])
}

/// [`backward_dkv_kernel`] with q and k (as `load` says) read before their forward rotary and
/// turned on load, as in [`forward_kernel_rotating`]; `q_tab`, `k_tab` follow the params.
pub fn backward_dkv_kernel_rotating(dims: &Dims, inverse_rotary: bool, load: [bool; 2]) -> Kernel {
    let (t, d) = (dims.t as u32, dims.d);
    let per = (dims.h / dims.g) as u32;
    let mut k = Kernel::new(&kernel_name("attention", "bwd_dkv", load, inverse_rotary)).with_block(ROWS, 1, 1);
    let ([dk, dv, q, kk, v, lse, delta, dout], dk_tab, [q_tab, k_tab]) = dkv_params(&mut k, inverse_rotary, load);
    let kt_s = k.shared("kt", ROWS * d as u32 * 4, 16);
    let vt_s = k.shared("vt", ROWS * d as u32 * 4, 16);
    let qs = k.shared("qs", QTILE * d as u32 * 4, 16);
    let dos = k.shared("dos", QTILE * d as u32 * 4, 16);
    let ls = k.shared("ls", QTILE * 4, 16);
    let dls = k.shared("dls", QTILE * 4, 16);
    let (tid, tile, bg, j, ok) = rows_prologue(&mut k, t);
    let b = k.bin("div.u32", RegKind::B32, bg, dims.g as u32);
    let gg = k.bin("rem.u32", RegKind::B32, bg, dims.g as u32);
    let krow = k.bin("mul.lo.u32", RegKind::B32, bg, t);
    let krow = k.bin("add.u32", RegKind::B32, krow, j);
    let ke = k.bin("mul.lo.u32", RegKind::B32, krow, d as u32);
    let kt_base = k.un("mov.u32", RegKind::B32, Opnd::S(kt_s));
    let vt_base = k.un("mov.u32", RegKind::B32, Opnd::S(vt_s));
    let my_k = k.tri("mad.lo.u32", RegKind::B32, tid, 4u32, kt_base);
    let my_v = k.tri("mad.lo.u32", RegKind::B32, tid, 4u32, vt_base);
    {
        let kv = load_row(&mut k, kk, ke, d, ok);
        let kv = match k_tab {
            Some(tab) => rotate_row(&mut k, &kv, tab, j, t, ok, false),
            None => kv,
        };
        for (c, &x) in kv.iter().enumerate() {
            k.op("st.shared.f32", [addr(my_k, (c as u32 * ROWS * 4) as i64), x.into()]);
        }
        let vv = load_row(&mut k, v, ke, d, ok);
        for (c, &x) in vv.iter().enumerate() {
            k.op("st.shared.f32", [addr(my_v, (c as u32 * ROWS * 4) as i64), x.into()]);
        }
    }
    let dka: Vec<Reg> = (0..d).map(|_| k.imm_f32(0.0)).collect();
    let dva: Vec<Reg> = (0..d).map(|_| k.imm_f32(0.0)).collect();
    let qs_base = k.un("mov.u32", RegKind::B32, Opnd::S(qs));
    let dos_base = k.un("mov.u32", RegKind::B32, Opnd::S(dos));
    let ls_base = k.un("mov.u32", RegKind::B32, Opnd::S(ls));
    let dls_base = k.un("mov.u32", RegKind::B32, Opnd::S(dls));
    // First query tile touching this key block: rows from tile·ROWS.
    let first_qt = k.bin("mul.lo.u32", RegKind::B32, tile, ROWS / QTILE);
    let n_qt = t.div_ceil(QTILE);
    let hh = k.imm_u32(0);
    let htop = k.label("head");
    let hend = k.label("head_end");
    k.place(&htop);
    let hdone = k.setp("ge.u32", hh, per);
    k.bra_if(hdone, false, &hend);
    let h = k.tri("mad.lo.u32", RegKind::B32, gg, per, hh);
    let bh = k.tri("mad.lo.u32", RegKind::B32, b, dims.h as u32, h);
    let qrow0 = k.bin("mul.lo.u32", RegKind::B32, bh, t);
    let qbase = {
        let e = k.bin("mul.lo.u32", RegKind::B32, qrow0, d as u32);
        k.addr_of(q, e, 4)
    };
    let dobase = {
        let e = k.bin("mul.lo.u32", RegKind::B32, qrow0, d as u32);
        k.addr_of(dout, e, 4)
    };
    let qtile = k.un("mov.u32", RegKind::B32, first_qt);
    let qtop = k.label("qtile");
    let qend = k.label("qtile_end");
    k.place(&qtop);
    let qdone = k.setp("ge.u32", qtile, n_qt);
    k.bra_if(qdone, false, &qend);
    let i0 = k.bin("mul.lo.u32", RegKind::B32, qtile, QTILE);
    k.barrier();
    load_tile_maybe_rotated(&mut k, qs_base, qbase, q_tab, i0, QTILE, t, d as u32, ROWS, tid);
    load_tile(&mut k, dos_base, dobase, i0, QTILE, t, d as u32, ROWS, tid);
    {
        // lse and delta of the tile's rows: threads 0..QTILE.
        let small = k.setp("lt.u32", tid, QTILE);
        let gi = k.bin("add.u32", RegKind::B32, i0, tid);
        let inrange = k.setp("lt.u32", gi, t);
        let both = k.reg(RegKind::Pred);
        k.op("and.pred", [both.into(), small.into(), inrange.into()]);
        let gr = k.bin("add.u32", RegKind::B32, qrow0, gi);
        let (lv, dv_) = (k.imm_f32(0.0), k.imm_f32(0.0));
        let la = k.addr_of(lse, gr, 4);
        k.op_if(both, false, "ld.global.f32", [lv.into(), addr(la, 0)]);
        let da = k.addr_of(delta, gr, 4);
        k.op_if(both, false, "ld.global.f32", [dv_.into(), addr(da, 0)]);
        let o1 = k.tri("mad.lo.u32", RegKind::B32, tid, 4u32, ls_base);
        k.op_if(small, false, "st.shared.f32", [addr(o1, 0), lv.into()]);
        let o2 = k.tri("mad.lo.u32", RegKind::B32, tid, 4u32, dls_base);
        k.op_if(small, false, "st.shared.f32", [addr(o2, 0), dv_.into()]);
    }
    k.barrier();
    let r = k.imm_u32(0);
    let rtop = k.label("row");
    let rnext = k.label("row_next");
    let rend = k.label("row_end");
    k.place(&rtop);
    let rdone = k.setp("ge.u32", r, QTILE);
    k.bra_if(rdone, false, &rend);
    let i = k.bin("add.u32", RegKind::B32, i0, r);
    let before = k.setp("lt.u32", i, j);
    k.bra_if(before, false, &rnext);
    let beyond = k.setp("ge.u32", i, t);
    k.bra_if(beyond, false, &rnext);
    let off = k.bin("mul.lo.u32", RegKind::B32, r, d as u32 * 4);
    let qrow = k.bin("add.u32", RegKind::B32, qs_base, off);
    let dorow = k.bin("add.u32", RegKind::B32, dos_base, off);
    let dot = dot_col_shared(&mut k, my_k, ROWS, qrow, d);
    let s = logit(&mut k, dot, dims);
    let r4 = k.bin("shl.b32", RegKind::B32, r, 2u32);
    let la = k.bin("add.u32", RegKind::B32, ls_base, r4);
    let li = f(&mut k);
    k.op("ld.shared.f32", [li.into(), addr(la, 0)]);
    let dla = k.bin("add.u32", RegKind::B32, dls_base, r4);
    let di = f(&mut k);
    k.op("ld.shared.f32", [di.into(), addr(dla, 0)]);
    let sl = k.bin("sub.rn.f32", RegKind::F32, s, li);
    let p = exp(&mut k, sl);
    axpy_shared(&mut k, &dva, p, dorow);
    let dp = dot_col_shared(&mut k, my_v, ROWS, dorow, d);
    let ds = ds_of(&mut k, p, dp, di, s, dims);
    axpy_shared(&mut k, &dka, ds, qrow);
    k.place(&rnext);
    k.op("add.u32", [r.into(), r.into(), 1u32.into()]);
    k.bra(&rtop);
    k.place(&rend);
    k.op("add.u32", [qtile.into(), qtile.into(), 1u32.into()]);
    k.bra(&qtop);
    k.place(&qend);
    k.op("add.u32", [hh.into(), hh.into(), 1u32.into()]);
    k.bra(&htop);
    k.place(&hend);
    let dka = match dk_tab {
        Some(tab) => rotate_row(&mut k, &dka, tab, j, t, ok, true),
        None => dka,
    };
    store_row(&mut k, dk, ke, &dka, ok);
    store_row(&mut k, dv, ke, &dva, ok);
    k.ret();
    k
}
