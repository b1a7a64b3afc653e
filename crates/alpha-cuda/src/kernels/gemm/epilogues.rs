//! The epilogues every engine shares: a tile's fragments stored (plain, with a residual, an
//! activation's second output, a gated product, a fused elementwise chain, split into attention
//! heads, optionally bf16 and turned by the rotary).

use super::*;

/// Parameters and per-block bases every GEMM engine starts from.
#[derive(Clone, Copy)]
pub(crate) struct Head {
    pub tid: Reg,
    /// First output row and column of this block's tile.
    pub m0: Reg,
    pub n0: Reg,
    pub m: Reg,
    pub n: Reg,
    pub kdim: Reg,
    pub lda: Reg,
    pub ldb: Reg,
    pub ldc: Reg,
    /// A, B, C, R (and U) advanced to this block's batch entry.
    pub a_base: Reg,
    pub b_base: Reg,
    pub c_base: Reg,
    pub r_base: Reg,
    pub u_base: Option<Reg>,
    /// R as passed (entry 0).
    pub r_param: Reg,
    /// A chain epilogue's pointers: its outputs, then its inputs beside the product.
    pub chain: [Option<Reg>; 2 * CHAIN_PTRS],
    /// A chain epilogue's column sums' partials ([`crate::kernels::gemm::ChainEpilogue::column_sum`]).
    pub chain_sums: Option<Reg>,
}

/// Declares the GEMM parameters (see [`launch`]) and computes the block's tile origin and
/// batch-offset bases.
pub(crate) fn head(k: &mut Kernel, spec: &GemmSpec) -> Head {
    let (bm, bn) = (spec.tile.rows(), spec.tile.cols());
    let pa = k.param_reg("a", ParamTy::U64);
    let pb = k.param_reg("b", ParamTy::U64);
    let pc = k.param_reg("c", ParamTy::U64);
    let pr = k.param_reg("r", ParamTy::U64);
    let m = k.param_reg("m", ParamTy::U32);
    let n = k.param_reg("n", ParamTy::U32);
    let kdim = k.param_reg("k", ParamTy::U32);
    let lda = k.param_reg("lda", ParamTy::U32);
    let ldb = k.param_reg("ldb", ParamTy::U32);
    let ldc = k.param_reg("ldc", ParamTy::U32);
    let sa = k.param_reg("stride_a", ParamTy::U64);
    let sb = k.param_reg("stride_b", ParamTy::U64);
    let sc = k.param_reg("stride_c", ParamTy::U64);
    let pu = spec.takes_u().then(|| k.param_reg("u", ParamTy::U64));
    let mut chain = [None; 2 * CHAIN_PTRS];
    if let Some(c) = spec.chain {
        let names = (0..c.outputs().len()).map(|j| format!("chain_out{j}"));
        let names = names.chain((0..c.others().len()).map(|j| format!("chain_in{j}")));
        for (slot, name) in chain.iter_mut().zip(names) {
            *slot = Some(k.param_reg(&name, ParamTy::U64));
        }
    }
    let chain_sums = spec.chain.and_then(|c| c.column_sum()).map(|_| k.param_reg("chain_sums", ParamTy::U64));

    let tid = k.sreg("%tid.x");
    let bx = k.sreg("%ctaid.x");
    let by = k.sreg("%ctaid.y");
    let bz = k.sreg("%ctaid.z");
    let n0 = k.bin("mul.lo.u32", RegKind::B32, bx, bn);
    let m0 = k.bin("mul.lo.u32", RegKind::B32, by, bm);

    // Batch offsets.
    let z64 = k.un("cvt.u64.u32", RegKind::B64, bz);
    let offset_by = |k: &mut Kernel, base: Reg, stride: Reg, bytes: u32| {
        let e = k.bin("mul.lo.u64", RegKind::B64, z64, stride);
        let b = k.bin("mul.lo.u64", RegKind::B64, e, bytes as i64);
        k.bin("add.s64", RegKind::B64, base, b)
    };
    let a_base = offset_by(k, pa, sa, spec.a_input.bytes());
    let b_base = offset_by(k, pb, sb, spec.b_input.bytes());
    let c_base = offset_by(k, pc, sc, 4);
    let r_base = offset_by(k, pr, sc, 4);
    let u_base = pu.map(|pu| offset_by(k, pu, sc, 4));
    Head {
        tid,
        m0,
        n0,
        m,
        n,
        kdim,
        lda,
        ldb,
        ldc,
        a_base,
        b_base,
        c_base,
        r_base,
        u_base,
        r_param: pr,
        chain,
        chain_sums,
    }
}

/// The epilogue: writes the accumulators `acc[mi][ni]` (mma `m16n8` fragments, as `mma.sync`
/// and `wgmma` both lay them out) of the warp whose tile starts at (`wrow`, `wcol`) within the
/// block's tile, applying `spec`'s epilogue and activation, predicated on the matrix edges.
pub(crate) fn store_tile(
    k: &mut Kernel,
    spec: &GemmSpec,
    acc: &[Vec<Vec<Reg>>],
    lane: Reg,
    wrow: Reg,
    wcol: Reg,
    h: &Head,
) {
    store_tile_with(k, spec, acc, None, lane, wrow, wcol, h)
}

/// [`store_tile`] where a StoreMul's multiplier comes from registers (`r_acc`, fragments laid
/// out as `acc`'s, for the same elements) instead of R in memory ([`GemmSpec::gated`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_tile_with(
    k: &mut Kernel,
    spec: &GemmSpec,
    acc: &[Vec<Vec<Reg>>],
    r_acc: Option<&[Vec<Vec<Reg>>]>,
    lane: Reg,
    wrow: Reg,
    wcol: Reg,
    h: &Head,
) {
    k.comment(if spec.heads.is_some() { "epilogue: store split into heads" } else { "epilogue" });
    // This lane's first fragment element: row g and column 2·t of the warp's tile (lane = 4g + t).
    let g = k.bin("shr.u32", RegKind::B32, lane, 2u32);
    let tq = k.bin("and.b32", RegKind::B32, lane, 3u32);
    let r0a = k.bin("add.u32", RegKind::B32, wrow, g);
    let row0 = k.bin("add.u32", RegKind::B32, h.m0, r0a);
    let c0a = k.bin("add.u32", RegKind::B32, wcol, h.n0);
    let col0 = k.tri("mad.lo.u32", RegKind::B32, tq, 2u32, c0a);
    if let Some(heads) = spec.heads {
        store_heads(k, spec, heads, acc, row0, col0, h);
        return;
    }
    if let Some(chain) = spec.chain {
        store_chain(k, spec, chain, acc, row0, (c0a, tq), h);
        return;
    }
    let Head { m, n, ldc, c_base, r_base, u_base, .. } = *h;
    let ni_n = acc[0].len();
    // Each thread stores W consecutive values a unit: the fragment's own two (W = 2, a unit a
    // column group), or four after a quad exchange (W = 4, a unit two column groups; see
    // `quad_exchange`), so that a warp's store covers 64 bytes of each of its eight rows instead
    // of 32. Measured on the H200: sixteen contexts' step 24.69 / 24.73 → 24.01 / 24.05
    // ms, one context's 3.775 / 3.767 → 3.722 / 3.719 ms.
    let su = StoreUnits::of(ni_n, spec.tuning.wide_stores);
    let col0 = if su.wide() { k.tri("mad.lo.u32", RegKind::B32, tq, 4u32, c0a) } else { col0 };
    let (width, units, unit_cols) = (su.width, su.units, su.cols());
    let e0 = k.tri("mad.lo.u32", RegKind::B32, row0, ldc, col0);
    let cptr = k.addr_of(c_base, e0, 4);
    // R is read for a residual, or for a StoreMul's multiplier unless it is in registers.
    let rptr = match spec.epilogue {
        Epilogue::AddResidual => Some(k.addr_of(r_base, e0, 4)),
        Epilogue::StoreMul if r_acc.is_none() => Some(k.addr_of(r_base, e0, 4)),
        _ => None,
    };
    // U is bf16 (half the row step) under StoreMul, f32 under an activation.
    let mul = spec.epilogue == Epilogue::StoreMul;
    let uptr = u_base.map(|ub| k.addr_of(ub, e0, if mul { 2 } else { 4 }));
    let row_step = k.reg(RegKind::B64);
    k.op("mul.wide.u32", [row_step.into(), ldc.into(), 32u32.into()]); // 8 rows × 4 bytes
    let u_step = if mul {
        let st = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [st.into(), ldc.into(), 16u32.into()]); // 8 rows × 2 bytes
        st
    } else {
        row_step
    };
    let col_ok: Vec<Reg> = (0..units as u32)
        .map(|u| {
            let c = k.bin("add.u32", RegKind::B32, col0, u * unit_cols);
            k.setp("lt.u32", c, n)
        })
        .collect();
    let f32s = su.f32s();
    // Each row's residual (or old output) values are all loaded before any of its stores: a
    // load after a store to a possibly aliasing address cannot be moved ahead of it, so
    // interleaved load-add-store pairs would each wait out a full memory latency. One row (of
    // the fragment's two) at a time: both rows' values held with the accumulators took 141–144
    // registers, more than two blocks of the three-stage ring leave a thread.
    let src = match spec.epilogue {
        Epilogue::Store => None,
        Epilogue::StoreMul if r_acc.is_some() => None,
        Epilogue::AddResidual | Epilogue::Accumulate | Epilogue::StoreMul => Some(rptr.unwrap_or(cptr)),
    };
    let parity = su.wide().then(|| quad_parity(k, tq));
    for (mi, acc_m) in acc.iter().enumerate() {
        for h in 0..2usize {
            // Each unit's in-range predicate on row g (h = 0) or g + 8 of the group.
            let rr = k.bin("add.u32", RegKind::B32, row0, mi as u32 * 16 + h as u32 * 8);
            let row_ok = k.setp("lt.u32", rr, m);
            let oks: Vec<Reg> = col_ok.iter().map(|&c| k.bin("and.pred", RegKind::Pred, row_ok, c)).collect();
            // The values added to (or multiplied with) each unit's, loaded a chunk of units at a
            // time (the pointers have advanced to this row): the whole row, or 16 columns' worth
            // a thread where the multiplier's activation is computed here (its arithmetic beside
            // a whole row's values spilled registers).
            let chunk = if mul && spec.activation.is_some() { 16 / width } else { units };
            for first in (0..units).step_by(chunk) {
                let span = first..(first + chunk).min(units);
                let in_regs = r_acc.map(|r| span.clone().map(|u| su.values(k, &r[mi], u, h, parity)).collect());
                let olds: Option<Vec<Vec<Reg>>> = in_regs.or_else(|| {
                    src.map(|p| {
                        span.clone()
                            .map(|u| {
                                let at = addr(p, (u as u32 * unit_cols * 4) as i64);
                                k.load_f32s_if(oks[u], &format!("ld.global.{f32s}"), width, at)
                            })
                            .collect()
                    })
                });
                for u in span {
                    // This row's values of the unit: the fragment's pair, or four after the
                    // exchange (made here, unit by unit, to hold few registers).
                    let v = &su.values(k, acc_m, u, h, parity);
                    let ok = oks[u];
                    let old = olds.as_ref().map(|o| &o[u - first]);
                    let off = (u as u32 * unit_cols * 4) as i64;
                    let out: Vec<Reg> = match old {
                        None => v.clone(),
                        Some(_) if mul => v.clone(),
                        Some(old) => {
                            v.iter().zip(old).map(|(&x, &o)| k.bin("add.rn.f32", RegKind::F32, x, o)).collect()
                        }
                    };
                    if let (true, Some(old), Some(up)) = (mul, old, uptr) {
                        let r: Vec<Reg> = old
                            .iter()
                            .map(|&r| match spec.activation {
                                Some(f) => crate::kernels::pointwise::emit_unary(k, f, r),
                                None => r,
                            })
                            .collect();
                        let p: Vec<Reg> =
                            v.iter().zip(&r).map(|(&x, &y)| k.bin("mul.rn.f32", RegKind::F32, x, y)).collect();
                        su.store_bf16(k, ok, up, u, &p);
                    }
                    if let (Some(f), Some(up), false) = (spec.activation, uptr, mul) {
                        let act = out.iter().map(|&x| crate::kernels::pointwise::emit_unary(k, f, x)).collect();
                        k.op_if(ok, false, &format!("st.global.{f32s}"), [addr(up, off), Opnd::V(act)]);
                    }
                    k.op_if(ok, false, &format!("st.global.{f32s}"), [addr(cptr, off), Opnd::V(out)]);
                }
            }
            k.op("add.s64", [cptr.into(), cptr.into(), row_step.into()]);
            if let Some(up) = uptr {
                k.op("add.s64", [up.into(), up.into(), u_step.into()]);
            }
            if let Some(rp) = rptr {
                k.op("add.s64", [rp.into(), rp.into(), row_step.into()]);
            }
        }
    }
}

/// How an epilogue stores a fragment row: W consecutive values a thread a unit — the
/// fragment's own two (a unit a column group), or four after [`quad_exchange`] (a unit two
/// column groups) where the wide stores are on and the groups pair up.
#[derive(Clone, Copy)]
pub(super) struct StoreUnits {
    width: usize,
    units: usize,
}

impl StoreUnits {
    /// For a warp fragment of `groups` column groups of 8.
    fn of(groups: usize, wide_stores: bool) -> StoreUnits {
        let width = if wide_stores && groups.is_multiple_of(2) { 4 } else { 2 };
        StoreUnits { width, units: groups * 2 / width }
    }

    fn wide(&self) -> bool {
        self.width == 4
    }

    /// Columns a unit spans.
    fn cols(&self) -> u32 {
        4 * self.width as u32
    }

    /// The f32 vector type of a unit's loads and stores.
    fn f32s(&self) -> &'static str {
        if self.wide() {
            "v4.f32"
        } else {
            "v2.f32"
        }
    }

    /// Row `h`'s values of unit `u` of the fragments `acc_m`: the fragment's pair, or four after
    /// the exchange (`parity`: [`quad_parity`], where wide).
    fn values(&self, k: &mut Kernel, acc_m: &[Vec<Reg>], u: usize, h: usize, parity: Option<(Reg, Reg)>) -> Vec<Reg> {
        match parity {
            None => vec![acc_m[u][2 * h], acc_m[u][2 * h + 1]],
            Some(p) => quad_exchange(k, &acc_m[2 * u], &acc_m[2 * u + 1], h, p),
        }
    }

    /// Stores `vals` (a unit's) rounded to bf16 at unit `u` of the row at `p`, guarded by `ok`:
    /// pairs by round-to-nearest-even, 4 or 8 bytes.
    fn store_bf16(&self, k: &mut Kernel, ok: Reg, p: Reg, u: usize, vals: &[Reg]) {
        let pairs = bf16_pairs(k, vals);
        let (op, val) =
            if self.wide() { ("st.global.v2.b32", Opnd::V(pairs)) } else { ("st.global.b32", pairs[0].into()) };
        k.op_if(ok, false, op, [addr(p, (u as u32 * self.cols() * 2) as i64), val]);
    }
}

/// The predicates [`quad_exchange`] chooses by: lane t of its quad odd, and t ≥ 2.
pub(super) fn quad_parity(k: &mut Kernel, tq: Reg) -> (Reg, Reg) {
    let odd = k.bin("and.b32", RegKind::B32, tq, 1u32);
    let high = k.bin("and.b32", RegKind::B32, tq, 2u32);
    (k.setp("ne.u32", odd, 0u32), k.setp("ne.u32", high, 0u32))
}

/// Row `h`'s values of two adjacent column groups (`left`, `right`: this lane's fragments,
/// columns 2t, 2t + 1 and 8 + 2t, 8 + 2t + 1 of the sixteen), exchanged within the quad so that
/// lane t holds columns 4t … 4t + 3: two butterfly rounds, with `odd` (t odd) and `high`
/// (t ≥ 2) choosing what each lane sends and keeps. Lane t holds [a, b, c, d] (its pairs of
/// the two groups); after the round with lane t ^ 2, the low lanes hold their own and their
/// partner's left pairs and the high lanes both right pairs; after the round with lane t ^ 1,
/// each lane holds its four consecutive columns.
pub(super) fn quad_exchange(
    k: &mut Kernel,
    left: &[Reg],
    right: &[Reg],
    h: usize,
    (odd, high): (Reg, Reg),
) -> Vec<Reg> {
    let (a, b, c, d) = (left[2 * h], left[2 * h + 1], right[2 * h], right[2 * h + 1]);
    let swap = |k: &mut Kernel, x: Reg, mask: u32| {
        let r = k.reg(RegKind::F32);
        k.op("shfl.sync.bfly.b32", [r.into(), x.into(), mask.into(), 0x1fu32.into(), Opnd::S("-1".into())]);
        r
    };
    let sel = |k: &mut Kernel, p: Reg, yes: Reg, no: Reg| k.tri("selp.f32", RegKind::F32, yes, no, p);
    // Round 1 (t ^ 2): low lanes send their right pair, high lanes their left.
    let (sx, sy) = (sel(k, high, a, c), sel(k, high, b, d));
    let (rx, ry) = (swap(k, sx, 2), swap(k, sy, 2));
    let s = [sel(k, high, rx, a), sel(k, high, ry, b), sel(k, high, c, rx), sel(k, high, d, ry)];
    // Round 2 (t ^ 1): even lanes send their upper pair, odd lanes their lower.
    let (sx, sy) = (sel(k, odd, s[0], s[2]), sel(k, odd, s[1], s[3]));
    let (rx, ry) = (swap(k, sx, 1), swap(k, sy, 1));
    vec![sel(k, odd, rx, s[0]), sel(k, odd, ry, s[1]), sel(k, odd, s[2], rx), sel(k, odd, s[3], ry)]
}

/// [`store_tile`] for a chain epilogue ([`ChainEpilogue`]), from the lane's first fragment row
/// `row0` and the warp tile's first column `c0a`: per fragment row, in units of W values a
/// thread as `store_tile`'s (four after a quad exchange), eight values a thread of each other
/// input are loaded at a time (more held too many beside the accumulators for two blocks'
/// registers), the steps run on each element, and the outputs stored (f32 as 8 or 16 bytes,
/// bf16 as 4 or 8). An output may share its slot exactly with an input, as in the chain's
/// kernel: each element is loaded before it is stored, by one thread.
pub(super) fn store_chain(
    k: &mut Kernel,
    spec: &GemmSpec,
    chain: ChainEpilogue,
    acc: &[Vec<Vec<Reg>>],
    row0: Reg,
    (c0a, tq): (Reg, Reg),
    h: &Head,
) {
    assert!(
        spec.epilogue == Epilogue::Store && spec.activation.is_none() && spec.heads.is_none(),
        "{}: a chain epilogue replaces a plain store",
        spec.name()
    );
    let Head { m, n, ldc, .. } = *h;
    let steps = chain.steps();
    let outputs = chain.outputs();
    let others = chain.others();
    let ptr = |j: usize| h.chain[j].expect("a chain pointer per output and input");
    // Units of W consecutive values a thread, as in `store_tile`.
    let su = StoreUnits::of(acc[0].len(), spec.tuning.wide_stores);
    let (width, units, unit_cols) = (su.width, su.units, su.cols());
    let col0 = k.tri("mad.lo.u32", RegKind::B32, tq, width as u32, c0a);
    let parity = su.wide().then(|| quad_parity(k, tq));
    let f32s = su.f32s();
    let e0 = k.tri("mad.lo.u32", RegKind::B32, row0, ldc, col0);
    // Current row's pointers: outputs (2 or 4 bytes an element), then the other inputs.
    let out_ptrs: Vec<(Reg, bool)> = outputs
        .iter()
        .enumerate()
        .map(|(j, &(_, bf16))| (k.addr_of(ptr(j), e0, if bf16 { 2 } else { 4 }), bf16))
        .collect();
    // A row input is read at the column alone: its pointer stays put from row to row.
    let in_ptrs: Vec<(Reg, bool)> = others
        .iter()
        .enumerate()
        .map(|(j, &input)| {
            let row = chain.is_row(input);
            (k.addr_of(ptr(outputs.len() + j), if row { col0 } else { e0 }, 4), row)
        })
        .collect();
    let step_of = |k: &mut Kernel, bytes: u32| {
        let st = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [st.into(), ldc.into(), (8 * bytes).into()]); // 8 rows
        st
    };
    let step4 = step_of(k, 4);
    let step2 = step_of(k, 2);
    let col_ok: Vec<Reg> = (0..units as u32)
        .map(|u| {
            let c = k.bin("add.u32", RegKind::B32, col0, u * unit_cols);
            k.setp("lt.u32", c, n)
        })
        .collect();
    // Eight values a thread of each other input at a time.
    let chunk = 8 / width;
    for (mi, acc_m) in acc.iter().enumerate() {
        for half in 0..2usize {
            let rr = k.bin("add.u32", RegKind::B32, row0, mi as u32 * 16 + half as u32 * 8);
            let row_ok = k.setp("lt.u32", rr, m);
            let oks: Vec<Reg> = col_ok.iter().map(|&c| k.bin("and.pred", RegKind::Pred, row_ok, c)).collect();
            for first in (0..units).step_by(chunk) {
                let span = first..(first + chunk).min(units);
                // The other inputs' values at each unit, all loaded first.
                let loaded: Vec<Vec<Vec<Reg>>> = span
                    .clone()
                    .map(|u| {
                        in_ptrs
                            .iter()
                            .map(|&(p, _)| {
                                let at = addr(p, (u as u32 * unit_cols * 4) as i64);
                                k.load_f32s_if(oks[u], &format!("ld.global.{f32s}"), width, at)
                            })
                            .collect()
                    })
                    .collect();
                for (u, vals_in) in span.zip(&loaded) {
                    let product = su.values(k, acc_m, u, half, parity);
                    let results = chain_results(k, &chain, &steps, &product, vals_in);
                    for (&(step, _), &(p, bf16)) in outputs.iter().zip(&out_ptrs) {
                        let vs: Vec<Reg> = results.iter().map(|r| r[step]).collect();
                        if bf16 {
                            su.store_bf16(k, oks[u], p, u, &vs);
                        } else {
                            let at = addr(p, (u as u32 * unit_cols * 4) as i64);
                            k.op_if(oks[u], false, &format!("st.global.{f32s}"), [at, Opnd::V(vs)]);
                        }
                    }
                }
            }
            for &(p, bf16) in &out_ptrs {
                let st = if bf16 { step2 } else { step4 };
                k.op("add.s64", [p.into(), p.into(), st.into()]);
            }
            for &(p, row) in &in_ptrs {
                if !row {
                    k.op("add.s64", [p.into(), p.into(), step4.into()]);
                }
            }
        }
    }
}

/// A chain epilogue's steps on each of a unit's elements: the product's value from `product`,
/// the other inputs' from `others` (one vector an input, an element each), in the chain's input
/// order. Per element, every step's register.
pub(crate) fn chain_results(
    k: &mut Kernel,
    chain: &ChainEpilogue,
    steps: &[Step],
    product: &[Reg],
    others: &[Vec<Reg>],
) -> Vec<Vec<Reg>> {
    (0..product.len())
        .map(|e| {
            let mut others_e = others.iter().map(|v| v[e]);
            let vals: Vec<Reg> = (0..chain.inputs())
                .map(|j| {
                    if j == chain.product() {
                        product[e]
                    } else {
                        others_e.next().expect("one value per other input")
                    }
                })
                .collect();
            crate::kernels::fused::emit_steps(k, steps, &vals)
        })
        .collect()
}

/// f32 values as bf16 pairs (round-to-nearest-even), the first of each pair in the low half.
pub(crate) fn bf16_pairs(k: &mut Kernel, vals: &[Reg]) -> Vec<Reg> {
    vals.chunks(2)
        .map(|q| {
            let pair = k.reg(RegKind::B32);
            k.op("cvt.rn.bf16x2.f32", [pair.into(), q[1].into(), q[0].into()]);
            pair
        })
        .collect()
}

/// [`store_tile`] for a product split into heads ([`Heads`]), from the lane's first fragment
/// element (`row0`, `col0`): each accumulator pair (two adjacent columns, inside one head as D
/// is a multiple of 8) goes to its place in `[S, B, H, T, D]`.
pub(super) fn store_heads(
    k: &mut Kernel,
    spec: &GemmSpec,
    hs: Heads,
    acc: &[Vec<Vec<Reg>>],
    row0: Reg,
    col0: Reg,
    h: &Head,
) {
    assert!(
        spec.epilogue == Epilogue::Store && spec.activation.is_none() && hs.d.is_multiple_of(8),
        "{}: a head-split store is a plain store of heads of a multiple of 8",
        spec.name()
    );
    let Head { m, n, c_base, .. } = *h;
    let head_elems = hs.t * hs.d;
    // Column group ni: (s·B·H + h)·T·D + d for column col0 + 8·ni = (s·H + h)·D + d.
    let col_part: Vec<(Reg, Reg)> = (0..acc[0].len() as u32)
        .map(|ni| {
            let c = k.bin("add.u32", RegKind::B32, col0, ni * 8);
            let ok = k.setp("lt.u32", c, n);
            let sh = k.bin("div.u32", RegKind::B32, c, hs.d);
            let d = k.bin("rem.u32", RegKind::B32, c, hs.d);
            let s = k.bin("div.u32", RegKind::B32, sh, hs.heads);
            let hh = k.bin("rem.u32", RegKind::B32, sh, hs.heads);
            let plane = k.tri("mad.lo.u32", RegKind::B32, s, hs.batch * hs.heads, hh);
            (k.tri("mad.lo.u32", RegKind::B32, plane, head_elems, d), ok)
        })
        .collect();
    let turned = hs.bf16_turned.then(|| {
        // A thread holds every column of its rows only on the wgmma engines.
        assert!(
            hs.d == 64 && spec.tile.cols().is_multiple_of(64) && spec.engine != Engine::Mma,
            "{}: turned heads are 64 wide, on a wgmma engine",
            spec.name()
        );
        // q and k (sections 0 and 1) are turned; v is not. A tile lies within one section.
        let tab = k.param_reg("rot_tab", ParamTy::U64);
        let s = k.bin("div.u32", RegKind::B32, col0, hs.heads * hs.d);
        (tab, k.setp("lt.u32", s, 2u32))
    });
    if hs.bf16 {
        assert!(
            !hs.bf16_turned && hs.d == 64 && spec.tile.cols().is_multiple_of(64) && spec.engine != Engine::Mma,
            "{}: bf16 heads are 64 wide, on a wgmma engine",
            spec.name()
        );
    }
    // The bias at the lane's first column (param `bias`, after the rotary table); each row's
    // column groups read theirs from it (cached loads: held for the whole tile, the values
    // spilled).
    let bias = hs.bias.then(|| {
        let pb = k.param_reg("bias", ParamTy::U64);
        k.addr_of(pb, col0, 4)
    });
    // bf16 stores in whole 32-byte sectors: each quad of lanes holds a row's 16 columns of two
    // column groups as four bf16 pairs a lane; after four shuffles, lane t stores columns
    // 4·(t mod 2) .. +4 of the group 2j + t / 2 (8 bytes).
    let quad = (hs.bf16_turned || hs.bf16).then(|| {
        let lane = k.bin("and.b32", RegKind::B32, h.tid, 31u32);
        let tq = k.bin("and.b32", RegKind::B32, lane, 3u32);
        let base = k.bin("and.b32", RegKind::B32, lane, !3u32);
        let odd = k.bin("and.b32", RegKind::B32, tq, 1u32);
        let src0 = k.tri("mad.lo.u32", RegKind::B32, odd, 2u32, base);
        let src1 = k.bin("add.u32", RegKind::B32, src0, 1u32);
        let upper = k.setp("ge.u32", tq, 2u32);
        // Element offset from the column group's own column (col0 + 8g = 8g + 2t) to this
        // lane's: 4·(t mod 2) − 2t.
        let a = k.bin("shl.b32", RegKind::B32, odd, 2u32);
        let b = k.bin("shl.b32", RegKind::B32, tq, 1u32);
        let shift = k.bin("sub.s32", RegKind::B32, a, b);
        (src0, src1, upper, shift)
    });
    for (mi, acc_m) in acc.iter().enumerate() {
        for half in 0..2usize {
            // Row b·T + t: b·H·T·D + t·D.
            let r = k.bin("add.u32", RegKind::B32, row0, (mi * 16 + half * 8) as u32);
            let row_ok = k.setp("lt.u32", r, m);
            let b = k.bin("div.u32", RegKind::B32, r, hs.t);
            let t = k.bin("rem.u32", RegKind::B32, r, hs.t);
            let td = k.bin("mul.lo.u32", RegKind::B32, t, hs.d);
            let row_part = k.tri("mad.lo.u32", RegKind::B32, b, hs.heads * head_elems, td);
            let mut vals: Vec<[Reg; 2]> = acc_m.iter().map(|c| [c[2 * half], c[2 * half + 1]]).collect();
            if let Some(pb) = bias {
                vals = vals
                    .iter()
                    .zip(&col_part)
                    .enumerate()
                    .map(|(ni, (v, &(_, ok)))| {
                        let b = k.load_f32s_if(ok, "ld.global.v2.f32", 2, addr(pb, ni as i64 * 32));
                        [0, 1].map(|e| k.bin("add.rn.f32", RegKind::F32, v[e], b[e]))
                    })
                    .collect();
            }
            if let Some((tab, rotate)) = turned {
                vals = turn_pairs(k, &vals, tab, t, hs.t, col0, rotate);
            }
            if let Some((src0, src1, upper, shift)) = quad {
                let packed: Vec<Reg> = vals
                    .iter()
                    .map(|v| {
                        let pair = k.reg(RegKind::B32);
                        k.op("cvt.rn.bf16x2.f32", [pair.into(), v[1].into(), v[0].into()]);
                        pair
                    })
                    .collect();
                for j in 0..packed.len() / 2 {
                    let (x, y) = (packed[2 * j], packed[2 * j + 1]);
                    let get = |k: &mut Kernel, v: Reg, src: Reg| {
                        let d = k.reg(RegKind::B32);
                        k.op(
                            "shfl.sync.idx.b32",
                            [d.into(), v.into(), src.into(), 31u32.into(), 0xffff_ffffu32.into()],
                        );
                        d
                    };
                    let (x0, x1, y0, y1) = (get(k, x, src0), get(k, x, src1), get(k, y, src0), get(k, y, src1));
                    let p0 = k.tri("selp.b32", RegKind::B32, y0, x0, upper);
                    let p1 = k.tri("selp.b32", RegKind::B32, y1, x1, upper);
                    let (c_lo, ok_lo) = col_part[2 * j];
                    let (c_hi, ok_hi) = col_part[2 * j + 1];
                    let col = k.tri("selp.b32", RegKind::B32, c_hi, c_lo, upper);
                    let hi_ok = k.bin("and.pred", RegKind::Pred, upper, ok_hi);
                    let lower = k.un("not.pred", RegKind::Pred, upper);
                    let lo_ok = k.bin("and.pred", RegKind::Pred, lower, ok_lo);
                    let col_ok = k.bin("or.pred", RegKind::Pred, hi_ok, lo_ok);
                    let ok = k.bin("and.pred", RegKind::Pred, row_ok, col_ok);
                    let e0 = k.bin("add.u32", RegKind::B32, row_part, col);
                    let e = k.bin("add.s32", RegKind::B32, e0, shift);
                    let a = k.addr_of(c_base, e, 2);
                    k.op_if(ok, false, "st.global.v2.b32", [addr(a, 0), Opnd::V(vec![p0, p1])]);
                }
                continue;
            }
            for (v, &(col, col_ok)) in vals.iter().zip(&col_part) {
                let ok = k.bin("and.pred", RegKind::Pred, row_ok, col_ok);
                let e = k.bin("add.u32", RegKind::B32, row_part, col);
                let a = k.addr_of(c_base, e, 4);
                k.op_if(ok, false, "st.global.v2.f32", [addr(a, 0), Opnd::V(v.to_vec())]);
            }
        }
    }
}

/// One row's column-group pairs (`vals[ni]` at head element d = (col0 + 8·ni) mod 64 and the
/// next) turned by the rotary at position `pos` where `rotate` holds: each d < 32 with its partner
/// d + 32, four column groups on, in the same thread. The cosines and sines of the row's
/// position come from `tab` (`t` positions, cosines then sines, 32 a position); the arithmetic
/// is [`crate::kernels::attention::rotate_pairs`]'s, the attention kernels' own.
pub(super) fn turn_pairs(
    k: &mut Kernel,
    vals: &[[Reg; 2]],
    tab: Reg,
    pos: Reg,
    t: u32,
    col0: Reg,
    rotate: Reg,
) -> Vec<[Reg; 2]> {
    let d0 = k.bin("and.b32", RegKind::B32, col0, 63u32);
    let row = k.tri("mad.lo.u32", RegKind::B32, pos, 32u32, d0);
    let ca = k.addr_of(tab, row, 4);
    let mut out = vals.to_vec();
    // Column group ni holds d0 + 8·(ni mod 8) of head ni / 8 of the tile; d0 < 8.
    let lows: Vec<usize> = (0..vals.len()).filter(|ni| ni % 8 < 4).collect();
    let mut table: Vec<Option<(Vec<Reg>, Vec<Reg>)>> = vec![None; 4];
    for ni in lows {
        let j = ni % 8;
        if table[j].is_none() {
            let c = k.regs(RegKind::F32, 2);
            let s = k.regs(RegKind::F32, 2);
            k.op("ld.global.nc.v2.f32", [Opnd::V(c.clone()), addr(ca, (8 * j * 4) as i64)]);
            k.op("ld.global.nc.v2.f32", [Opnd::V(s.clone()), addr(ca, (t * 32 * 4 + 8 * j as u32 * 4) as i64)]);
            table[j] = Some((c, s));
        }
        let (c, s) = table[j].clone().expect("loaded above");
        let (o1, o2) = crate::kernels::attention::rotate_pairs(k, &vals[ni], &vals[ni + 4], &c, &s, false);
        for e in 0..2 {
            out[ni][e] = k.tri("selp.f32", RegKind::F32, o1[e], vals[ni][e], rotate);
            out[ni + 4][e] = k.tri("selp.f32", RegKind::F32, o2[e], vals[ni + 4][e], rotate);
        }
    }
    out
}
