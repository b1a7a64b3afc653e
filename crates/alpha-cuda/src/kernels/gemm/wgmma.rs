//! The Hopper GEMM engine: warpgroup `wgmma` reading both operands from swizzled shared memory,
//! fed by a ring of `cp.async` copies.
//!
//! Why: the `mma.sync` engine ([`crate::kernels::gemm`]) moves every operand through registers with
//! `ldmatrix` and issues one 16×8×16 product per instruction, so its warps spend more issue slots
//! feeding the tensor cores than the tensor cores spend multiplying; on the H200 it reached 70–180
//! TFLOP/s on Coppelius's products. `wgmma` multiplies a 64×N×16 block per instruction straight
//! out of shared memory, asynchronously, while the same threads go on issuing copies.
//!
//! How: each warpgroup (128 threads) owns 64 rows of the block's tile and all its columns (one
//! `wgmma.m64nNk16` per 16 of K, N = the tile's width), so a 128-row tile has two. K advances 64
//! a step. A K-step's operand tiles are stored in the 128-byte-swizzled layout `wgmma` reads:
//! 128-byte lines of 64 bf16 (a row's 64 K for a K-contiguous operand, or one K's 64 rows for the
//! other), the 16-byte chunk `c` of line `L` at chunk `c ^ (L mod 8)`, so each 16-byte copy is one
//! contiguous store and the tensor cores read without bank conflicts. The descriptors say
//! K-major (A row-major, B column-major) or MN-major (the transposes), so no layout needs a copy.
//!
//! bf16 operands are copied global → shared by `cp.async` (rows past the matrix edge are
//! zero-filled, reading nothing). fp32 operands (master weights read without a cast kernel) are
//! loaded into registers one step ahead, rounded to bf16 (round-to-nearest-even) and stored into
//! the ring by the threads — the same rounding as the `mma.sync` engine and the cast kernel.
//!
//! The ring: S stages (four; three for bf16 products over deep grids, [`stages_for`]), K-step
//! `t` in stage `t mod S`. Step `t` waits for its own copies, meets one barrier, issues its four
//! `wgmma` and commits them, then refills: fp32 registers loaded last step are stored for step
//! `t + S − 3`, and step `t + S − 2` is requested. It then waits until step `t − 1`'s products
//! are done, so the products of two steps may be in flight and the stage refilled (that of step
//! `t − 2`) is never one the tensor cores still read.
//!
//! Shape contract: as the `mma.sync` engine's, with K a multiple of 64.

use crate::kernels::gemm::{head, store_tile, walk, GemmSpec, Input, Layout, Walk};
use crate::ptx::{addr, Kernel, Opnd, Reg, RegKind};

/// K consumed per pipeline step.
pub const BK: u32 = 64;
/// Stages of the shared-memory ring by default.
pub const STAGES: u32 = 4;

/// Stages of `spec`'s ring: K-steps in flight are two fewer (the ring keeps two more: one whose
/// products may still run behind the current, one the fp32 registers are stored into).
pub fn stages(spec: &GemmSpec) -> u32 {
    if spec.stages != 0 {
        spec.stages
    } else {
        STAGES
    }
}

/// Waves of blocks from which a bf16 product takes the three-stage ring. Measured on the H200:
/// from 3 waves instead of 8 — sixteen contexts' 16384 × 512 products (512 blocks) too —
/// the step took 25.77 → 25.49 ms, one context's unchanged (3.758 → 3.762 ms).
pub const SHALLOW_RING_WAVES: u32 = 3;

/// Waves of blocks from which the lowering fuses work that reads or computes more into a
/// product's epilogue (a gated unit's multiply, [`crate::kernels::gemm::Epilogue::StoreMul`]; a chain,
/// [`crate::kernels::gemm::ChainEpilogue`]): over shallower grids the extra epilogue work stays exposed.
/// Measured at 8 waves, where each first paid.
pub const DEEP_EPILOGUE_WAVES: u32 = 8;

/// The ring depth the lowering gives a product of `blocks` blocks: three stages for bf16
/// operands in 128 × 128 tiles over a deep grid (at least `waves` waves of blocks,
/// [`SHALLOW_RING_WAVES`] by default) — two blocks then fit an SM and each hides the
/// other's epilogue (measured on the H200: 16 contexts' step 39.75 → 39.05 ms with every bf16
/// product at three stages, one context's 5.20 → 5.72 ms, whose grids are shallow) — else the
/// default (0). The TMA engine holds such kernels to two blocks' registers (`.minnctapersm 2`).
pub fn stages_for(spec: &GemmSpec, blocks: u32, waves: u32) -> u32 {
    let bf16 = spec.a_input == Input::Bf16 && spec.b_input == Input::Bf16;
    let deep = blocks >= waves * crate::kernels::gemm::SMS;
    if bf16 && deep && spec.tile == crate::kernels::gemm::Tile::T128x128 {
        3
    } else {
        0
    }
}

/// Bytes of one swizzled line: 64 bf16.
const LINE: u32 = 128;
/// Lines of one swizzle atom (the XOR pattern repeats every 8 lines, 1,024 bytes).
const ATOM_LINES: u32 = 8;

/// Threads per block: one warpgroup per 64 rows of the tile.
pub fn threads(spec: &GemmSpec) -> u32 {
    128 * spec.tile.rows() / 64
}

/// Bytes of one ring stage: A's tile then B's, each `rows × 64` bf16.
fn stage_bytes(spec: &GemmSpec) -> u32 {
    (spec.tile.rows() + spec.tile.cols()) * LINE
}

/// Dynamic shared memory the kernel asks for: the ring plus slack to align it to 1,024 bytes
/// (the swizzle pattern is a function of the address bits, so each stage must start on an atom).
pub fn shared_bytes(spec: &GemmSpec) -> u32 {
    stages(spec) * stage_bytes(spec) + 1024
}

/// The shared address of the ring in the dynamic array `smem`, rounded up to 1,024 bytes (the
/// swizzle pattern is a function of the address bits; [`shared_bytes`] leaves the slack).
pub(crate) fn ring_base(k: &mut Kernel, smem: String) -> Reg {
    let raw = k.un("mov.u32", RegKind::B32, Opnd::S(smem));
    let up = k.bin("add.u32", RegKind::B32, raw, 1023u32);
    k.bin("and.b32", RegKind::B32, up, !1023u32)
}

/// One operand's copy into the ring: where each of this thread's 16-byte global vectors comes
/// from and goes to.
struct Feed {
    input: Input,
    /// Global address of pass 0 of the next K-step to request.
    ptr: Reg,
    /// Global bytes between passes, and between K-steps.
    pass_step: Opnd,
    kstep: Opnd,
    passes: u32,
    /// Shared byte offsets (within the operand's tile) of passes `0 .. period`; pass `j` is at
    /// `offsets[j % period] + (j / period) * period_bytes`.
    offsets: Vec<Reg>,
    period_bytes: u32,
    /// Per-pass copy size for `cp.async` (16 or 0 past the edge) or load predicate (fp32).
    src_size: Vec<Reg>,
    valid: Vec<Reg>,
    /// fp32 only: the registers holding one K-step, four floats a pass.
    data: Vec<Vec<Reg>>,
}

/// Builds the feed of an operand whose tile is `tile_rows` (M or N) × 64 (K).
#[allow(clippy::too_many_arguments)]
fn feed(
    k: &mut Kernel,
    base: Reg,
    ld: Reg,
    row0: Reg,
    rows: Reg,
    tid: Reg,
    k_major: bool,
    input: Input,
    tile_rows: u32,
    threads: u32,
) -> Feed {
    let esz = input.bytes();
    let Walk { line0, elem, lpp, passes } = walk(k, tid, threads, k_major, input, tile_rows, BK);
    // Position within the swizzled line: 16-byte chunk and (fp32) which half of it.
    let within = k.bin("and.b32", RegKind::B32, elem, 63u32);
    let chunk = k.bin("shr.u32", RegKind::B32, within, 3u32);
    let half = k.bin("and.b32", RegKind::B32, within, 4u32); // 4 elements → 8 bytes
    let half_bytes = k.bin("shl.b32", RegKind::B32, half, 1u32);
    // The swizzled line index of pass 0, and the global pointer and validity of each pass.
    let (line_of_pass0, ptr, pass_step, kstep, valid) = if k_major {
        // Line = tile row = line0 + j·lpp; the global row row0 + line.
        let grow = k.bin("add.u32", RegKind::B32, row0, line0);
        let e = k.tri("mad.lo.u32", RegKind::B32, grow, ld, elem);
        let ptr = k.addr_of(base, e, esz);
        let ps = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [ps.into(), ld.into(), (lpp * esz).into()]);
        let valid = (0..passes)
            .map(|j| {
                let r = k.bin("add.u32", RegKind::B32, grow, j * lpp);
                k.setp("lt.u32", r, rows)
            })
            .collect::<Vec<_>>();
        (line0, ptr, Opnd::R(ps), Opnd::I((BK * esz) as i64), valid)
    } else {
        // Line = 64-row block · 64 + K index; the global column row0 + elem.
        let block = k.bin("shr.u32", RegKind::B32, elem, 6u32);
        let line = k.tri("mad.lo.u32", RegKind::B32, block, BK, line0);
        let gcol = k.bin("add.u32", RegKind::B32, row0, elem);
        let e = k.tri("mad.lo.u32", RegKind::B32, line0, ld, gcol);
        let ptr = k.addr_of(base, e, esz);
        let ps = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [ps.into(), ld.into(), (lpp * esz).into()]);
        let ks = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [ks.into(), ld.into(), (BK * esz).into()]);
        let ok = k.setp("lt.u32", gcol, rows);
        (line, ptr, Opnd::R(ps), Opnd::R(ks), vec![ok; passes as usize])
    };
    // Pass j's line is line_of_pass0 + j·lpp, so its swizzle (line mod 8) repeats with period
    // 8 / gcd(lpp, 8) passes.
    let period = ATOM_LINES / gcd(lpp, ATOM_LINES);
    let offsets = (0..period.min(passes))
        .map(|j| {
            let line = k.bin("add.u32", RegKind::B32, line_of_pass0, j * lpp);
            let l7 = k.bin("and.b32", RegKind::B32, line, ATOM_LINES - 1);
            let sw = k.bin("xor.b32", RegKind::B32, chunk, l7);
            let cb = k.bin("shl.b32", RegKind::B32, sw, 4u32);
            let lb = k.tri("mad.lo.u32", RegKind::B32, line, LINE, cb);
            k.bin("add.u32", RegKind::B32, lb, half_bytes)
        })
        .collect();
    let src_size = match input {
        Input::Bf16 => valid.iter().map(|&p| k.tri("selp.u32", RegKind::B32, 16u32, 0u32, p)).collect(),
        Input::F32 => Vec::new(),
    };
    let data = match input {
        Input::F32 => (0..passes).map(|_| k.regs(RegKind::F32, 4)).collect(),
        Input::Bf16 => Vec::new(),
    };
    Feed { input, ptr, pass_step, kstep, passes, offsets, period_bytes: period * lpp * LINE, src_size, valid, data }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Feed {
    /// Shared address of pass `j` as (register, immediate) for a tile at shared `tile`.
    fn dst(&self, k: &mut Kernel, tile: Reg, j: u32) -> (Reg, i64) {
        let period = self.offsets.len() as u32;
        let a = k.bin("add.u32", RegKind::B32, tile, self.offsets[(j % period) as usize]);
        (a, ((j / period) * self.period_bytes) as i64)
    }

    /// bf16: requests the next K-step into the tile at shared `tile` (zero-filling past the
    /// edge). fp32: loads it into the registers. Advances to the following K-step.
    fn request(&self, k: &mut Kernel, tile: Reg) {
        let p = k.un("mov.b64", RegKind::B64, self.ptr);
        for j in 0..self.passes {
            match self.input {
                Input::Bf16 => {
                    let (a, off) = self.dst(k, tile, j);
                    k.op(
                        "cp.async.cg.shared.global",
                        [addr(a, off), addr(p, 0), 16u32.into(), self.src_size[j as usize].into()],
                    );
                }
                Input::F32 => {
                    k.op_if(
                        self.valid[j as usize],
                        false,
                        "ld.global.nc.v4.f32",
                        [Opnd::V(self.data[j as usize].clone()), addr(p, 0)],
                    );
                }
            }
            if j + 1 < self.passes {
                k.op("add.s64", [p.into(), p.into(), self.pass_step.clone()]);
            }
        }
        k.op("add.s64", [self.ptr.into(), self.ptr.into(), self.kstep.clone()]);
    }

    /// fp32: stores the registers, rounded to bf16, into the tile at shared `tile`.
    fn store(&self, k: &mut Kernel, tile: Reg) {
        if self.input != Input::F32 {
            return;
        }
        for (j, d) in self.data.iter().enumerate() {
            let lo = k.reg(RegKind::B32);
            let hi = k.reg(RegKind::B32);
            k.op("cvt.rn.bf16x2.f32", [lo.into(), d[1].into(), d[0].into()]);
            k.op("cvt.rn.bf16x2.f32", [hi.into(), d[3].into(), d[2].into()]);
            let (a, off) = self.dst(k, tile, j as u32);
            k.op("st.shared.v2.b32", [addr(a, off), Opnd::V(vec![lo, hi])]);
        }
    }
}

/// The `wgmma` descriptor's fixed upper word and its per-K16 address step for an operand.
/// K-major: 16 K are 32 bytes along the line; MN-major: 16 lines. Both: 8-line groups 1,024
/// bytes apart (SBO); MN-major's 64-row blocks `64 · 128` bytes apart (LBO); 128-byte swizzle.
pub(crate) fn descriptor_parts(k_major: bool) -> (u32, u32, u32) {
    let sbo = ATOM_LINES * LINE;
    let lbo = if k_major { 16 } else { BK * LINE };
    let k16_step = if k_major { 32 } else { 16 * LINE };
    let hi = (sbo >> 4) | (1 << 30); // bits 32–45: SBO; bits 62–63: 1 = 128-byte swizzle
    (lbo >> 4, hi, k16_step)
}

/// The `wgmma` products of one ring stage, shared by this engine and the TMA-fed one
/// ([`crate::kernels::gemm::tma`]): the descriptors' fixed parts, made once before the K loop.
pub(crate) struct Products {
    a_lbo: u32,
    b_lbo: u32,
    a_k16: u32,
    b_k16: u32,
    a_hi: Reg,
    b_hi: Reg,
    scale_d: Reg,
    /// Byte offset of B's tile within a stage.
    b_off: u32,
    shape: String,
    trans: (u32, u32),
}

impl Products {
    /// Declares the accumulators (zeroed: one f32 per two columns of the warpgroup's 64 rows)
    /// and the descriptors' fixed parts.
    pub(crate) fn new(k: &mut Kernel, spec: &GemmSpec) -> (Vec<Reg>, Products) {
        let (a_km, b_km) = (spec.a == Layout::RowMajor, spec.b == Layout::ColMajor);
        let bn = spec.tile.cols();
        let (a_lbo, a_hi, a_k16) = descriptor_parts(a_km);
        let (b_lbo, b_hi, b_k16) = descriptor_parts(b_km);
        let acc = k.regs(RegKind::F32, (bn / 2) as usize);
        for &r in &acc {
            k.op("mov.f32", [r.into(), 0.0f32.into()]);
        }
        let a_hi = k.imm_u32(a_hi);
        let b_hi = k.imm_u32(b_hi);
        let zero = k.imm_u32(0);
        let scale_d = k.setp("eq.u32", zero, 0u32);
        let products = Products {
            a_lbo,
            b_lbo,
            a_k16,
            b_k16,
            a_hi,
            b_hi,
            scale_d,
            b_off: spec.tile.rows() * LINE,
            shape: format!("wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.bf16.bf16"),
            trans: (u32::from(!a_km), u32::from(!b_km)),
        };
        (acc, products)
    }

    /// Issues the four products of the stage at byte offset `stage` of the ring at `ring`
    /// (this warpgroup's A rows at `a_wg`, the ring plus its 64-row offset) into `acc`.
    pub(crate) fn issue(&self, k: &mut Kernel, acc: &[Reg], a_wg: Reg, ring: Reg, stage: Reg) {
        let a_st = k.bin("add.u32", RegKind::B32, a_wg, stage);
        let b_st0 = k.bin("add.u32", RegKind::B32, ring, stage);
        let b_st = k.bin("add.u32", RegKind::B32, b_st0, self.b_off);
        let a_lo0 = k.bin("shr.u32", RegKind::B32, a_st, 4u32);
        let b_lo0 = k.bin("shr.u32", RegKind::B32, b_st, 4u32);
        let a_lo = k.bin("add.u32", RegKind::B32, a_lo0, self.a_lbo << 16);
        let b_lo = k.bin("add.u32", RegKind::B32, b_lo0, self.b_lbo << 16);
        for ks in 0..BK / 16 {
            let al = k.bin("add.u32", RegKind::B32, a_lo, (ks * self.a_k16) >> 4);
            let bl = k.bin("add.u32", RegKind::B32, b_lo, (ks * self.b_k16) >> 4);
            let ad = k.reg(RegKind::B64);
            let bd = k.reg(RegKind::B64);
            k.op("mov.b64", [ad.into(), Opnd::V(vec![al, self.a_hi])]);
            k.op("mov.b64", [bd.into(), Opnd::V(vec![bl, self.b_hi])]);
            k.op(
                &self.shape,
                [
                    Opnd::V(acc.to_vec()),
                    ad.into(),
                    bd.into(),
                    self.scale_d.into(),
                    1u32.into(),
                    1u32.into(),
                    self.trans.0.into(),
                    self.trans.1.into(),
                ],
            );
        }
    }
}

/// Builds the kernel for `spec` (its `bk` must be [`BK`]).
pub fn build(spec: &GemmSpec) -> Kernel {
    let (bm, bn) = (spec.tile.rows(), spec.tile.cols());
    let threads = threads(spec);
    let mut k = Kernel::new(&spec.name()).with_block(threads, 1, 1);
    let h = head(&mut k, spec);
    let smem = k.dynamic_shared_array("gemm_ring", shared_bytes(spec), 1024);
    let stage = stage_bytes(spec);
    let b_off = bm * LINE;
    let ring_stages = stages(spec);
    // fp32 operands are stored for step t + ahead − 1 from registers, so they need ahead ≥ 2.
    let min_stages = if spec.a_input == Input::F32 || spec.b_input == Input::F32 { 4 } else { 3 };
    assert!(ring_stages >= min_stages, "{}: the ring needs {min_stages} stages or more", spec.name());
    let ahead = ring_stages - 2;

    k.comment("operand feeds");
    let a_km = spec.a == Layout::RowMajor;
    let b_km = spec.b == Layout::ColMajor;
    let fa = feed(&mut k, h.a_base, h.lda, h.m0, h.m, h.tid, a_km, spec.a_input, bm, threads);
    let fb = feed(&mut k, h.b_base, h.ldb, h.n0, h.n, h.tid, b_km, spec.b_input, bn, threads);
    let any_async = spec.a_input == Input::Bf16 || spec.b_input == Input::Bf16;

    let ring = ring_base(&mut k, smem);

    // This warpgroup's 64 rows of A: 64 lines (K-major) or one 64-row block of 64 lines.
    let wg = k.bin("shr.u32", RegKind::B32, h.tid, 7u32);
    let a_wg = k.tri("mad.lo.u32", RegKind::B32, wg, 64 * LINE, ring);
    let (acc, products) = Products::new(&mut k, spec);
    let ktiles = k.bin("shr.u32", RegKind::B32, h.kdim, BK.trailing_zeros());

    // Fills the stage at byte offset `st` with step `t` (a register) when t < ktiles: requests
    // it (copies, or fp32 loads into registers), or stores the fp32 registers loaded for it.
    let fill = |k: &mut Kernel, t: Reg, st: Reg, from_registers: bool| {
        let skip = k.label("skip_fill");
        let beyond = k.setp("ge.u32", t, ktiles);
        k.bra_if(beyond, false, &skip);
        let ta = k.bin("add.u32", RegKind::B32, ring, st);
        let tb = k.bin("add.u32", RegKind::B32, ta, b_off);
        for (f, tile) in [(&fa, ta), (&fb, tb)] {
            if from_registers {
                f.store(k, tile);
            } else {
                f.request(k, tile);
            }
        }
        k.place(&skip);
    };
    let request = |k: &mut Kernel, t: Reg, st: Reg| fill(k, t, st, false);
    let store = |k: &mut Kernel, t: Reg, st: Reg| fill(k, t, st, true);
    // Next stage offset: (st + 1 stage) mod the ring.
    let advance = |k: &mut Kernel, st: Reg| {
        k.op("add.u32", [st.into(), st.into(), stage.into()]);
        let wrap = k.setp("ge.u32", st, ring_stages * stage);
        k.op_if(wrap, false, "sub.u32", [st.into(), st.into(), (ring_stages * stage).into()]);
    };

    k.comment("prologue: steps 0 .. ahead requested; fp32 step ahead - 1 left in registers");
    let t = k.imm_u32(0);
    let st = k.imm_u32(0);
    for i in 0..ahead {
        request(&mut k, t, st);
        if i + 1 < ahead {
            store(&mut k, t, st);
        }
        if any_async {
            k.op("cp.async.commit_group", []);
        }
        if i + 1 < ahead {
            k.op("add.u32", [t.into(), t.into(), 1u32.into()]);
            advance(&mut k, st);
        }
    }
    // Stages: `rd` multiplied this step; `wr_regs` receives the fp32 registers (step kt + ahead
    // − 1); `wr_req` is requested (step kt + ahead).
    let rd = k.imm_u32(0);
    let wr_regs = k.un("mov.u32", RegKind::B32, st);
    let wr_req = k.un("mov.u32", RegKind::B32, st);
    advance(&mut k, wr_req);
    let kt = k.imm_u32(0);
    let top = k.label("kstep");
    k.place(&top);
    if any_async {
        k.op("cp.async.wait_group", [(ahead - 1).into()]);
    }
    k.op("fence.proxy.async.shared::cta", []);
    k.barrier();
    k.comment("tensor cores on stage rd");
    k.op("wgmma.fence.sync.aligned", []);
    products.issue(&mut k, &acc, a_wg, ring, rd);
    k.op("wgmma.commit_group.sync.aligned", []);
    k.comment("refill: fp32 registers for step kt + ahead - 1, request step kt + ahead");
    let t_regs = k.bin("add.u32", RegKind::B32, kt, ahead - 1);
    store(&mut k, t_regs, wr_regs);
    let t_req = k.bin("add.u32", RegKind::B32, kt, ahead);
    request(&mut k, t_req, wr_req);
    if any_async {
        k.op("cp.async.commit_group", []);
    }
    k.op("wgmma.wait_group.sync.aligned", [1u32.into()]);
    for s in [rd, wr_regs, wr_req] {
        advance(&mut k, s);
    }
    k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
    let more = k.setp("lt.u32", kt, ktiles);
    k.bra_if(more, false, &top);
    k.op("wgmma.wait_group.sync.aligned", [0u32.into()]);

    // Warp w of warpgroup wg holds rows wg·64 + 16·w of the tile, every column: the m16n8
    // fragments of the epilogue, one row group, bn/8 column groups.
    let lane = k.bin("and.b32", RegKind::B32, h.tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, h.tid, 5u32);
    let wrow = k.bin("mul.lo.u32", RegKind::B32, warp, 16u32);
    let wcol = k.imm_u32(0);
    let frags = vec![acc.chunks(4).map(|c| c.to_vec()).collect::<Vec<_>>()];
    store_tile(&mut k, spec, &frags, lane, wrow, wcol, &h);
    k.ret();
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::{GemmShape, Layout, Tile};

    #[test]
    fn the_shallow_ring_is_for_deep_bf16_grids() {
        let spec = GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::Bf16).wgmma();
        let blocks = |m, n| {
            let (x, y, z) = spec.grid(&GemmShape::packed(&spec, m, n, 512));
            x * y * z
        };
        // 16 contexts' FFN product: 128 × 11 blocks, over 10 waves; their 512-wide products,
        // 128 × 4 blocks; one context's logits, 8 × 96 blocks, under 6 waves.
        assert_eq!(stages_for(&spec, blocks(16384, 1408), SHALLOW_RING_WAVES), 3);
        assert_eq!(stages_for(&spec, blocks(16384, 512), SHALLOW_RING_WAVES), 3);
        assert_eq!(stages_for(&spec, blocks(1024, 12288), SHALLOW_RING_WAVES), 3);
        // One context's FFN product: 8 × 11 blocks, under one wave.
        assert_eq!(stages_for(&spec, blocks(1024, 1408), SHALLOW_RING_WAVES), 0);
        // fp32 operands and smaller tiles keep the default ring.
        let f32_b = GemmSpec { b_input: Input::F32, ..spec };
        assert_eq!(stages_for(&f32_b, blocks(16384, 1408), SHALLOW_RING_WAVES), 0);
        let narrow = GemmSpec { tile: Tile::T128x64, ..spec };
        assert_eq!(stages_for(&narrow, 10_000, SHALLOW_RING_WAVES), 0);
        // Two three-stage blocks fit an SM's 227 KB; a four-stage one alone.
        let s3 = GemmSpec { stages: 3, ..spec };
        assert!(2 * shared_bytes(&s3) <= crate::ptx::MAX_SHARED_PER_BLOCK);
        assert!(2 * shared_bytes(&spec) > crate::ptx::MAX_SHARED_PER_BLOCK);
    }
}
