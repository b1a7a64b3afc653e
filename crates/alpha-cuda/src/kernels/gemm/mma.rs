//! The `mma.sync` engine ([`Engine::Mma`]): operand loaders into two shared-memory stages,
//! `ldmatrix` fragments and the main loop.

use super::*;

/// Shared-memory pitch (bytes) of an operand staged as stored, `[k][rows]`: the rows padded by
/// 16 bytes so the eight k-rows one `ldmatrix.trans` reads fall in eight different bank groups.
pub(super) fn trans_pitch(tile_rows: u32) -> u32 {
    2 * tile_rows + 16
}

/// Global→shared copy of one operand tile (`tile_rows` rows of the tile × 32 k), with two
/// register sets so the loads of the tile after next are in flight while this one is used.
pub(super) struct Loader {
    /// One global pointer per pass, advanced by `step` each K-tile.
    ptrs: Vec<Reg>,
    valid: Vec<Reg>,
    step: Opnd,
    /// Registers holding one pass's vector, per register set.
    data: [Vec<Vec<Reg>>; 2],
    /// Shared byte offset of pass 0 (relative to the tile), per-pass increment.
    smem_off: Reg,
    pass_stride: u32,
    input: Input,
}

/// How a block's threads walk one operand tile (`tile_rows` × `bk`) in 16-byte global vectors:
/// along lines of memory — a row's K (`k_contiguous`) or one K's `tile_rows` — `lpp` lines a
/// pass, `passes` passes; this thread starts at line `line0`, element `elem` of the line.
pub(crate) struct Walk {
    pub line0: Reg,
    pub elem: Reg,
    pub lpp: u32,
    pub passes: u32,
}

pub(crate) fn walk(
    k: &mut Kernel,
    tid: Reg,
    threads: u32,
    k_contiguous: bool,
    input: Input,
    tile_rows: u32,
    bk: u32,
) -> Walk {
    let vw = input.vec();
    let line_len = if k_contiguous { bk } else { tile_rows };
    let vpl = line_len / vw;
    let lpp = threads / vpl;
    let passes = if k_contiguous { tile_rows / lpp } else { bk / lpp };
    let line0 = k.bin("div.u32", RegKind::B32, tid, vpl);
    let v = k.bin("rem.u32", RegKind::B32, tid, vpl);
    let elem = k.bin("mul.lo.u32", RegKind::B32, v, vw);
    Walk { line0, elem, lpp, passes }
}

/// `k_contiguous`: the operand's K index is the contiguous one in memory. K-contiguous tiles are
/// staged `[row][k]` (pitch [`pitch_k`]); the others as stored, `[k][row]` ([`trans_pitch`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn loader(
    k: &mut Kernel,
    base: Reg,
    ld: Reg,
    row0: Reg,
    rows: Reg,
    tid: Reg,
    k_contiguous: bool,
    input: Input,
    tile_rows: u32,
    bk: u32,
) -> Loader {
    let esz = input.bytes();
    let Walk { line0, elem: pos, lpp, passes } = walk(k, tid, THREADS, k_contiguous, input, tile_rows, bk);
    let mut ptrs = Vec::new();
    let mut valid = Vec::new();
    let dkind = if input == Input::F32 { RegKind::F32 } else { RegKind::B32 };
    let data = [0, 1].map(|_| (0..passes).map(|_| k.regs(dkind, 4)).collect::<Vec<_>>());
    let pb = k.bin("mul.lo.u32", RegKind::B32, pos, 2u32);
    if k_contiguous {
        // pass j: tile row = line0 + j*lpp, k = pos.
        for j in 0..passes {
            let r = k.bin("add.u32", RegKind::B32, line0, j * lpp);
            let grow = k.bin("add.u32", RegKind::B32, row0, r);
            valid.push(k.setp("lt.u32", grow, rows));
            let e = k.tri("mad.lo.u32", RegKind::B32, grow, ld, pos);
            ptrs.push(k.addr_of(base, e, esz));
        }
        let smem_off = k.tri("mad.lo.u32", RegKind::B32, line0, pitch_k(bk), pb);
        Loader { ptrs, valid, step: Opnd::I((bk * esz) as i64), data, smem_off, pass_stride: lpp * pitch_k(bk), input }
    } else {
        // pass j: k = line0 + j*lpp, tile row = pos..pos+vw.
        let grow = k.bin("add.u32", RegKind::B32, row0, pos);
        let v = k.setp("lt.u32", grow, rows);
        for j in 0..passes {
            let kk = k.bin("add.u32", RegKind::B32, line0, j * lpp);
            let e = k.tri("mad.lo.u32", RegKind::B32, kk, ld, grow);
            ptrs.push(k.addr_of(base, e, esz));
            valid.push(v);
        }
        let step = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [step.into(), ld.into(), (bk * esz).into()]);
        let pitch = trans_pitch(tile_rows);
        let smem_off = k.tri("mad.lo.u32", RegKind::B32, line0, pitch, pb);
        Loader { ptrs, valid, step: step.into(), data, smem_off, pass_stride: lpp * pitch, input }
    }
}

impl Loader {
    /// Issues the global loads of the next tile into register set `set`; advances the pointers.
    fn load(&self, k: &mut Kernel, set: usize) {
        for (j, d) in self.data[set].iter().enumerate() {
            let ty = if self.input == Input::F32 { "f32" } else { "b32" };
            for &r in d {
                if self.input == Input::F32 {
                    k.op("mov.f32", [r.into(), 0.0f32.into()]);
                } else {
                    k.op("mov.b32", [r.into(), 0u32.into()]);
                }
            }
            k.op_if(
                self.valid[j],
                false,
                &format!("ld.global.nc.v4.{ty}"),
                [Opnd::V(d.clone()), addr(self.ptrs[j], 0)],
            );
            let p = self.ptrs[j];
            k.op("add.s64", [p.into(), p.into(), self.step.clone()]);
        }
    }

    /// Stores register set `set` (as bf16) at shared address `tile` (a u32 register). Either
    /// layout's 16-byte vector is contiguous in shared memory too: one store per vector.
    fn store(&self, k: &mut Kernel, tile: Reg, set: usize) {
        let base = k.bin("add.u32", RegKind::B32, tile, self.smem_off);
        for (j, d) in self.data[set].iter().enumerate() {
            let off = (j as u32 * self.pass_stride) as i64;
            match self.input {
                Input::F32 => {
                    let lo = k.reg(RegKind::B32);
                    let hi = k.reg(RegKind::B32);
                    k.op("cvt.rn.bf16x2.f32", [lo.into(), d[1].into(), d[0].into()]);
                    k.op("cvt.rn.bf16x2.f32", [hi.into(), d[3].into(), d[2].into()]);
                    k.op("st.shared.v2.b32", [addr(base, off), Opnd::V(vec![lo, hi])]);
                }
                Input::Bf16 => {
                    k.op("st.shared.v4.b32", [addr(base, off), Opnd::V(d.clone())]);
                }
            }
        }
    }
}

/// Per-lane `ldmatrix` address (relative to the operand's tile) and the byte steps between the
/// 16-row (A) or 16-column (B, two n8 tiles) fragment groups and between the two k16 halves.
pub(super) struct Fragments {
    lane: Reg,
    group_step: i64,
    k16_step: i64,
    trans: bool,
}

/// A's fragments: warp rows `warp_row0 ..`, staged `[m][k]` (`k_contiguous`) or `[k][m]`.
/// Matrices of one `ldmatrix.x4`: (m 0–7, k 0–7), (m 8–15, k 0–7), (m 0–7, k 8–15),
/// (m 8–15, k 8–15) — the order of the A fragment's four registers.
pub(super) fn a_fragments(
    k: &mut Kernel,
    lane: Reg,
    warp_row0: Reg,
    k_contiguous: bool,
    tile_rows: u32,
    bk: u32,
) -> Fragments {
    let l7 = k.bin("and.b32", RegKind::B32, lane, 7u32);
    let l8 = k.bin("and.b32", RegKind::B32, lane, 8u32);
    let l16 = k.bin("and.b32", RegKind::B32, lane, 16u32);
    if k_contiguous {
        let l15 = k.bin("or.b32", RegKind::B32, l7, l8);
        let row = k.bin("add.u32", RegKind::B32, warp_row0, l15);
        // k 8 → 16 bytes for lanes 16–31: lane & 16.
        let lane_addr = k.tri("mad.lo.u32", RegKind::B32, row, pitch_k(bk), l16);
        Fragments { lane: lane_addr, group_step: 16 * pitch_k(bk) as i64, k16_step: 32, trans: false }
    } else {
        let pitch = trans_pitch(tile_rows);
        let kh = k.bin("shr.u32", RegKind::B32, l16, 1u32); // 8 k-rows for lanes 16–31
        let krow = k.bin("add.u32", RegKind::B32, l7, kh);
        let row = k.bin("add.u32", RegKind::B32, warp_row0, l8);
        let rb = k.bin("mul.lo.u32", RegKind::B32, row, 2u32);
        let lane_addr = k.tri("mad.lo.u32", RegKind::B32, krow, pitch, rb);
        Fragments { lane: lane_addr, group_step: 32, k16_step: 16 * pitch as i64, trans: true }
    }
}

/// B's fragments for two n8 tiles per `ldmatrix.x4`: warp columns `warp_col0 ..`, staged
/// `[n][k]` (`k_contiguous`) or `[k][n]`. Matrices: (n 0–7, k 0–7), (n 0–7, k 8–15),
/// (n 8–15, k 0–7), (n 8–15, k 8–15) — two B fragments of two registers each.
pub(super) fn b_fragments(
    k: &mut Kernel,
    lane: Reg,
    warp_col0: Reg,
    k_contiguous: bool,
    tile_rows: u32,
    bk: u32,
) -> Fragments {
    let l7 = k.bin("and.b32", RegKind::B32, lane, 7u32);
    let l8 = k.bin("and.b32", RegKind::B32, lane, 8u32);
    let l16 = k.bin("and.b32", RegKind::B32, lane, 16u32);
    let nh = k.bin("shr.u32", RegKind::B32, l16, 1u32); // 8 columns for lanes 16–31
    if k_contiguous {
        let c = k.bin("add.u32", RegKind::B32, l7, nh);
        let col = k.bin("add.u32", RegKind::B32, warp_col0, c);
        let kb = k.bin("shl.b32", RegKind::B32, l8, 1u32); // k 8 → 16 bytes
        let lane_addr = k.tri("mad.lo.u32", RegKind::B32, col, pitch_k(bk), kb);
        Fragments { lane: lane_addr, group_step: 16 * pitch_k(bk) as i64, k16_step: 32, trans: false }
    } else {
        let pitch = trans_pitch(tile_rows);
        let krow = k.bin("add.u32", RegKind::B32, l7, l8);
        let col = k.bin("add.u32", RegKind::B32, warp_col0, nh);
        let cb = k.bin("mul.lo.u32", RegKind::B32, col, 2u32);
        let lane_addr = k.tri("mad.lo.u32", RegKind::B32, krow, pitch, cb);
        Fragments { lane: lane_addr, group_step: 32, k16_step: 16 * pitch as i64, trans: true }
    }
}

impl Fragments {
    /// `ldmatrix.x4` of group `gi`, k16 half `ks`, from the operand tile at shared `tile_addr`
    /// (the tile base plus this lane's address).
    fn load(&self, k: &mut Kernel, tile_addr: Reg, gi: usize, ks: usize) -> Vec<Reg> {
        let r = k.regs(RegKind::B32, 4);
        let op = if self.trans {
            "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
        } else {
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
        };
        k.op(op, [Opnd::V(r.clone()), addr(tile_addr, gi as i64 * self.group_step + ks as i64 * self.k16_step)]);
        r
    }
}

pub(super) fn build(spec: &GemmSpec) -> Kernel {
    let (bm, bn) = (spec.tile.rows(), spec.tile.cols());
    // 8 warps as 2 (M) × 4 (N); each warp owns a (bm/2) × (bn/4) block of mi × ni mma tiles.
    let (wm_rows, wn_cols) = (bm / 2, bn / 4);
    let (mi_n, ni_n) = ((wm_rows / 16) as usize, (wn_cols / 8) as usize);
    let bk = spec.bk;
    let a_tile = bm * pitch_k(bk);
    let stage_bytes = (bm + bn) * pitch_k(bk);
    let mut k = Kernel::new(&spec.name()).with_block(THREADS, 1, 1);
    let h = head(&mut k, spec);
    let smem = k.shared("gemm_smem", 2 * stage_bytes, 16);
    let Head { tid, m0, n0, m, n, kdim, lda, ldb, .. } = h;
    let (a_base, b_base) = (h.a_base, h.b_base);

    k.comment("operand loaders");
    let a_kc = spec.a == Layout::RowMajor;
    let b_kc = spec.b == Layout::ColMajor;
    let la = loader(&mut k, a_base, lda, m0, m, tid, a_kc, spec.a_input, bm, bk);
    let lb = loader(&mut k, b_base, ldb, n0, n, tid, b_kc, spec.b_input, bn, bk);

    // Warp geometry and ldmatrix lane addresses (relative to each operand's tile).
    let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
    let wm = k.bin("shr.u32", RegKind::B32, warp, 2u32);
    let wn = k.bin("and.b32", RegKind::B32, warp, 3u32);
    let wrow = k.bin("mul.lo.u32", RegKind::B32, wm, wm_rows);
    let wcol = k.bin("mul.lo.u32", RegKind::B32, wn, wn_cols);
    let fa = a_fragments(&mut k, lane, wrow, a_kc, bm, bk);
    let fb = b_fragments(&mut k, lane, wcol, b_kc, bn, bk);

    let sbase = k.un("mov.u32", RegKind::B32, Opnd::S(smem));
    let stage_addr = |k: &mut Kernel, s: u32| k.bin("add.u32", RegKind::B32, sbase, s * stage_bytes);
    let stage = [stage_addr(&mut k, 0), stage_addr(&mut k, 1)];
    let stage_b = [0, 1].map(|s| k.bin("add.u32", RegKind::B32, stage[s], a_tile));
    let a_lane = [0, 1].map(|s| k.bin("add.u32", RegKind::B32, stage[s], fa.lane));
    let b_lane = [0, 1].map(|s| k.bin("add.u32", RegKind::B32, stage_b[s], fb.lane));

    // Accumulators acc[mi][ni][0..4].
    let acc: Vec<Vec<Vec<Reg>>> = (0..mi_n).map(|_| (0..ni_n).map(|_| k.regs(RegKind::F32, 4)).collect()).collect();
    for r in acc.iter().flatten().flatten() {
        k.op("mov.f32", [(*r).into(), 0.0f32.into()]);
    }

    // Pipeline: stage s holds tile kt (s = kt mod 2), register set s' = 1 − s holds tile kt + 1
    // (loaded one iteration ago); iteration kt issues the loads of tile kt + 2 into set s,
    // multiplies stage s, stores set s' into stage s', and meets one barrier. The loop is
    // unrolled by two so the register sets and stages are fixed in each half.
    let ktiles = k.bin("shr.u32", RegKind::B32, kdim, bk.trailing_zeros());
    k.comment("prologue: tile 0 to stage 0, tile 1 in flight");
    la.load(&mut k, 0);
    lb.load(&mut k, 0);
    la.store(&mut k, stage[0], 0);
    lb.store(&mut k, stage_b[0], 0);
    let one_more = k.setp("gt.u32", ktiles, 1u32);
    let no_second = k.label("no_second");
    k.bra_if(one_more, true, &no_second);
    la.load(&mut k, 1);
    lb.load(&mut k, 1);
    k.place(&no_second);
    k.barrier();
    let kt = k.imm_u32(0);
    let top = k.label("ktile");
    let done = k.label("kdone");
    k.place(&top);
    for s in 0..2usize {
        let o = 1 - s;
        let k2 = k.bin("add.u32", RegKind::B32, kt, 2u32);
        let far = k.setp("lt.u32", k2, ktiles);
        let skip_load = k.label("skip_load");
        k.bra_if(far, true, &skip_load);
        la.load(&mut k, s);
        lb.load(&mut k, s);
        k.place(&skip_load);

        k.comment("tensor cores on the current stage");
        for ks in 0..(bk / 16) as usize {
            let mut bfrag: Vec<[Reg; 2]> = Vec::new();
            for nj in 0..ni_n / 2 {
                let r = fb.load(&mut k, b_lane[s], nj, ks);
                bfrag.push([r[0], r[1]]);
                bfrag.push([r[2], r[3]]);
            }
            for (mi, acc_m) in acc.iter().enumerate() {
                let af = fa.load(&mut k, a_lane[s], mi, ks);
                for (ni, c) in acc_m.iter().enumerate() {
                    k.op(
                        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                        [Opnd::V(c.clone()), Opnd::V(af.clone()), Opnd::V(bfrag[ni].to_vec()), Opnd::V(c.clone())],
                    );
                }
            }
        }
        let k1 = k.bin("add.u32", RegKind::B32, kt, 1u32);
        let next = k.setp("lt.u32", k1, ktiles);
        let skip_store = k.label("skip_store");
        k.bra_if(next, true, &skip_store);
        la.store(&mut k, stage[o], o);
        lb.store(&mut k, stage_b[o], o);
        k.place(&skip_store);
        k.barrier();
        k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
        if s == 0 {
            k.bra_if(next, true, &done);
        } else {
            k.bra_if(next, false, &top);
        }
    }
    k.place(&done);

    store_tile(&mut k, spec, &acc, lane, wrow, wcol, &h);
    k.ret();
    k
}
