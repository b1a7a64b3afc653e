//! Causal grouped-query attention on the tensor cores: forward, dQ (with delta) and dK/dV, as
//! drop-in replacements for [`crate::kernels::attention`]'s kernels when the head dimension is 64.
//!
//! Why: the fp32 kernels of [`crate::kernels::attention`] give one thread a whole query (or key) row and
//! walk the keys one at a time on the CUDA cores; at Coppelius's shape (T = 1024, 8 heads of 64)
//! they take about half of a training step. The same arithmetic as 16×8×16 bf16 `mma.sync` tiles
//! with fp32 accumulation — FlashAttention-2's schedule, the precision PyTorch's bf16 flash
//! attention has — runs on the tensor cores, while softmax statistics, log-sum-exp, delta and
//! every accumulator stay fp32. Each output element is still summed by one thread in a fixed
//! order, with no atomics, so results repeat bit for bit. The kernels take exactly the
//! parameters of the fp32 ones (rotary-on-load and inverse-rotary-on-store options included) and
//! use the same grids, so the lowering switches by kernel builder and block size alone.
//!
//! How: a block is 4 warps (128 threads) and owns 64 rows; each warp owns 16 of them, whose mma
//! fragments stay in registers. Operand tiles of 64 rows × 64 are staged in shared memory as
//! bf16 (converted, and turned by the rotary when asked, on the way in; rows padded from 128 to
//! 144 bytes so the eight row addresses of each `ldmatrix` fall in eight different 16-byte bank
//! groups), read as A fragments or non-transposed B fragments with `ldmatrix`, or as transposed
//! B fragments with `ldmatrix.trans` — so no tile is ever stored twice. Two stages: the next
//! tile's global loads are issued into registers before the tensor-core work on the current one
//! and stored to the other stage after it, one barrier per tile. Fragment layouts (PTX ISA,
//! m16n8k16, lane = 4g + t): an accumulator holds rows g and g+8 at columns 2t, 2t+1 of each n8
//! tile, which is exactly the A-operand layout of a k16 step when two adjacent n8 tiles are packed
//! to bf16 pairs, so probabilities and score gradients feed the next product from registers.
//! - forward, grid (⌈T/64⌉, B·H): S = Q·Kᵀ per 64-key tile (K tile `[key][d]` is B `[n][k]`),
//!   online softmax in base 2 on the accumulators (row max and sum over the quad of lanes that
//!   share a row, with `shfl.bfly`), causal mask on the diagonal tile only, O += P·V (V tile
//!   `[key][d]` is B `[k][n]`: `ldmatrix.trans`). Writes o and lse = ln 2·(m + log₂ l).
//! - dQ, same grid: delta_i = dO_i·O_i in fp32 from global (written to the scratch row the dK/dV
//!   kernel reads), then per 16-key chunk of each key tile: S = Q·Kᵀ, dP = dO·Vᵀ,
//!   dS = P⊙(dP − delta)(⊙ soft-cap factor), dQ += dS·K; dq = scale·dQ (turned back by the rotary
//!   when asked).
//! - dK/dV, grid (⌈T/64⌉, B·G): per query head of the group and query tile from the diagonal on,
//!   per 16-query chunk: Sᵀ = K·Qᵀ, Pᵀ, dPᵀ = V·dOᵀ, dSᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q (lse and
//!   delta of the query tile staged in shared memory); dk = scale·dK.
//!
//! - both backward passes in one launch ([`backward_kernel_rotating`], the lowering's choice
//!   where the grids agree and no output lies on an input): delta first by
//!   [`backward_delta_kernel`], then each block runs the dK/dV pass of key tile x and the dQ pass
//!   of query tile x, so every block has ⌈T/64⌉ + 1 tiles of causal work.
//!
//! - bf16 inputs ([`forward_kernel_bf16`], [`backward_kernel_bf16`] and the separate passes):
//!   q, k and v arrive as bf16, q and k already turned by the rotary (the q/k/v projection's
//!   epilogue does it with this module's arithmetic), and are copied by `cp.async` straight into
//!   the staged tiles — no registers in flight, nothing converted (forward 126 registers against
//!   250). [`backward_delta_kernel_bf16`] also writes dO as bf16 for the one-launch backward to
//!   copy the same way, with delta read instead of recomputed — or, where the product computing
//!   dO runs in 128 × 128 tiles, that product's epilogue writes both, the same bits
//!   ([`crate::kernels::gemm::Heads::delta`]), and this launch does not run. The forward can store its output's
//!   permuted bf16 copy too, and the backward the permuted bf16 gradient `[B, T, 3, H, 64]`, the
//!   tensors the projections around attention read. Every variant gives the same bits as the
//!   f32 kernels turning on load (alpha-cuda-lab's `check::attention_bf16_checks`).
//!
//! Forward and dQ blocks take their query tiles in reverse order (the longest causal rows start
//! first); the dK/dV blocks' natural order already starts with the longest. Rows past T are read
//! as zeros and never stored; a masked or absent score gets probability exactly 0. The overlaps
//! the plan allows the fp32 kernels hold here too (dq exactly over o, dk exactly over the
//! pre-rotary k): a block reads the rows it will write (q, o, dO in dQ; k, v in dK/dV) only in
//! its prologue, and no other block reads them.
//!
//! On an H200 (alpha-cuda-lab's `check::attention_checks` with bench), B = 1, H = 8,
//! T = 1024: forward 21 µs against the fp32 kernel's 224, backward (dQ + dK/dV) 48 µs against
//! 825 (54 with Coppelius's rotary options); B = 16: 125 µs and 329 µs, about 130 TFLOP/s of causal work. Issuing the
//! next tile's loads in two halves (fewer registers in flight) measured up to 13% slower, so
//! each tile's loads are issued at once; ptxas then uses up to 255 registers, without spilling.

use crate::kernels::attention::{
    dkv_params, dq_params, forward_params, kernel_name, kv_head, pointer_params, rotate_pairs, Dims,
};
use crate::ptx::{addr, Kernel, Opnd, Reg, RegKind};

/// The head dimension these kernels are written for.
pub const D: usize = 64;
/// Rows per block and per tile (queries in forward and dQ, keys in dK/dV; and the tiles they
/// walk). Equal to [`crate::kernels::attention::ROWS`], so [`Dims::grid_q`] and [`Dims::grid_kv`] apply.
pub const ROWS: u32 = 64;
/// The family name of the kernels taking q, k and v as bf16.
const BF16_FAMILY: &str = "attention_mma_bf16";
/// Threads per block: 4 warps of 16 rows each.
pub const THREADS: u32 = 128;
/// Shared-memory row pitch in bytes (64 bf16 = 128 bytes, padded to 144).
const PITCH: u32 = 144;
/// One staged 64-row bf16 tile.
const TILE: u32 = ROWS * PITCH;
/// Bytes of one f32 row of the head dimension in global memory.
const ROW_BYTES: u32 = (D * 4) as u32;
/// Bytes of one row of the rotary table's cosines (or sines): D/2 f32.
const TAB_ROW: u32 = (D * 2) as u32;
const MMA: &str = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
const LOG2E: f32 = std::f32::consts::LOG2_E;

/// Whether these kernels can replace [`crate::kernels::attention`]'s for `dims`: head dimension 64 (any
/// T ≥ 1, GQA, soft-cap and rotary options all supported).
pub fn applies(dims: &Dims) -> bool {
    dims.d == D && dims.check().is_ok()
}

/// The block every kernel of this module is written for.
pub fn block() -> (u32, u32, u32) {
    (THREADS, 1, 1)
}

// ---- small emitters ---------------------------------------------------------------------------

fn mma(k: &mut Kernel, c: &[Reg], a: &[Reg], b: &[Reg]) {
    k.op(MMA, [Opnd::V(c.to_vec()), Opnd::V(a.to_vec()), Opnd::V(b.to_vec()), Opnd::V(c.to_vec())]);
}

/// Four 8×8 bf16 matrices from shared memory (`base + off`, each lane's own row address).
fn ldsm(k: &mut Kernel, base: Reg, off: u32, trans: bool) -> Vec<Reg> {
    let r = k.regs(RegKind::B32, 4);
    let op = if trans {
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
    } else {
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
    };
    k.op(op, [Opnd::V(r.clone()), addr(base, off as i64)]);
    r
}

pub(crate) fn zeros(k: &mut Kernel, n: usize) -> Vec<Reg> {
    (0..n).map(|_| k.imm_f32(0.0)).collect()
}

/// Two f32 as a bf16 pair (`lo` in the low half), rounded to nearest even.
fn pack(k: &mut Kernel, lo: Reg, hi: Reg) -> Reg {
    let d = k.reg(RegKind::B32);
    k.op("cvt.rn.bf16x2.f32", [d.into(), hi.into(), lo.into()]);
    d
}

/// The A fragment of one k16 step from the accumulators of two adjacent n8 tiles.
pub(crate) fn a_frag(k: &mut Kernel, c0: &[Reg], c1: &[Reg]) -> Vec<Reg> {
    vec![pack(k, c0[0], c0[1]), pack(k, c0[2], c0[3]), pack(k, c1[0], c1[1]), pack(k, c1[2], c1[3])]
}

fn shfl_xor(k: &mut Kernel, v: Reg, mask: u32) -> Reg {
    let t = k.reg(RegKind::F32);
    k.op("shfl.sync.bfly.b32", [t.into(), v.into(), mask.into(), 0x1fu32.into(), Opnd::S("-1".into())]);
    t
}

fn ex2(k: &mut Kernel, x: Reg) -> Reg {
    k.un("ex2.approx.ftz.f32", RegKind::F32, x)
}

/// The start of head `head` (a row block of `t` rows of D f32) of the tensor at `base`.
pub(crate) fn head_base(k: &mut Kernel, base: Reg, head: Reg, t: u32, row_bytes: u32) -> Reg {
    let rows = k.bin("mul.lo.u32", RegKind::B32, head, t);
    let off = k.reg(RegKind::B64);
    k.op("mul.wide.u32", [off.into(), rows.into(), row_bytes.into()]);
    k.bin("add.s64", RegKind::B64, base, off)
}

/// A raw dot product as the logit in base-2 units, and with a soft-cap c its gradient factor
/// `1 − (s/c)²`: s = scale·dot, or c·tanh(scale·dot/c) with tanh as `1 − 2/(e^{2x} + 1)` (exact
/// saturation, and no cancellation near 0 beyond ex2's own error).
fn logit2(k: &mut Kernel, dot: Reg, dims: &Dims) -> (Reg, Option<Reg>) {
    match dims.softcap {
        None => (k.bin("mul.rn.f32", RegKind::F32, dot, dims.scale * LOG2E), None),
        Some(c) => {
            let y = k.bin("mul.rn.f32", RegKind::F32, dot, dims.scale / c * 2.0 * LOG2E);
            let e = ex2(k, y);
            let e1 = k.bin("add.rn.f32", RegKind::F32, e, 1.0f32);
            let r = k.un("rcp.approx.ftz.f32", RegKind::F32, e1);
            let th = k.tri("fma.rn.f32", RegKind::F32, r, -2.0f32, 1.0f32);
            let s2 = k.bin("mul.rn.f32", RegKind::F32, th, c * LOG2E);
            let nth = k.un("neg.f32", RegKind::F32, th);
            let f = k.tri("fma.rn.f32", RegKind::F32, nth, th, 1.0f32);
            (s2, Some(f))
        }
    }
}

/// Per-thread geometry shared by every kernel here.
pub(crate) struct Lanes {
    pub(crate) tid: Reg,
    /// Row group g = lane / 4 and column pair t = lane % 4 of the mma fragments.
    pub(crate) g: Reg,
    pub(crate) tq: Reg,
    /// The warp's first row within the block's 64: 16·warp.
    pub(crate) wrow: Reg,
    /// `ldmatrix` lane offset for A fragments and transposed B fragments (a 16×16 block of a
    /// tile, rows = M or K): lane l addresses row l % 16, column half l / 16.
    pub(crate) a_off: Reg,
    /// `ldmatrix` lane offset for non-transposed B fragments (tile rows = N, columns = K; two
    /// n8 tiles × k16): lane l addresses row 8·(l / 16) + l % 8, column half (l / 8) % 2.
    pub(crate) b_off: Reg,
    /// Causal-mask limits of the accumulator rows g and g+8: wrow + g + 8r − 2t.
    pub(crate) lim: [Reg; 2],
}

pub(crate) fn lanes(k: &mut Kernel) -> Lanes {
    let tid = k.sreg("%tid.x");
    let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
    let g = k.bin("shr.u32", RegKind::B32, lane, 2u32);
    let tq = k.bin("and.b32", RegKind::B32, lane, 3u32);
    let wrow = k.bin("shl.b32", RegKind::B32, warp, 4u32);
    let l15 = k.bin("and.b32", RegKind::B32, lane, 15u32);
    let l4 = k.bin("shr.u32", RegKind::B32, lane, 4u32);
    let acol = k.bin("shl.b32", RegKind::B32, l4, 4u32);
    let a_off = k.tri("mad.lo.u32", RegKind::B32, l15, PITCH, acol);
    let l7 = k.bin("and.b32", RegKind::B32, lane, 7u32);
    let brow = k.tri("mad.lo.u32", RegKind::B32, l4, 8u32, l7);
    let l3 = k.bin("shr.u32", RegKind::B32, lane, 3u32);
    let l3b = k.bin("and.b32", RegKind::B32, l3, 1u32);
    let bcol = k.bin("shl.b32", RegKind::B32, l3b, 4u32);
    let b_off = k.tri("mad.lo.u32", RegKind::B32, brow, PITCH, bcol);
    let rg = k.bin("add.u32", RegKind::B32, wrow, g);
    let t2 = k.bin("shl.b32", RegKind::B32, tq, 1u32);
    let lim0 = k.bin("sub.s32", RegKind::B32, rg, t2);
    let lim1 = k.bin("add.s32", RegKind::B32, lim0, 8u32);
    Lanes { tid, g, tq, wrow, a_off, b_off, lim: [lim0, lim1] }
}

// ---- global → shared tiles ----------------------------------------------------------------------

/// This thread's share of moving a 64-row f32 tile (rows of D) into a bf16 shared tile,
/// optionally turned by the rotary at each row's position on the way.
///
/// Plain: 8 passes of 8 rows, 16 threads per row, one 16-byte load each (coalesced), stored as
/// 8 bytes of bf16. Rotary: 4 passes of 16 rows, 8 threads per row, each turning 4 pairs
/// `(x[c..c+4], x[c+32..c+36])` with the table's cosines and sines at the row's position — the
/// rotary kernel's arithmetic ([`rotate_pairs`]) — before rounding to bf16.
pub(crate) struct Mover {
    tab: Option<Reg>,
    t: u32,
    row_in: Reg,
    goff: Reg,
    soff: Reg,
    toff: Option<Reg>,
    /// bf16 rows (already turned where the rotary applies) copied global → shared by
    /// `cp.async`: no registers in flight, nothing converted.
    bf16: bool,
    /// Shared bytes from one row of the tile to the next: [`PITCH`], or 128 in the swizzled
    /// layout `wgmma` reads ([`mover_bf16_swizzled`]).
    pitch: u32,
}

/// One tile's move in flight: its shared destination and, for f32, per pass its
/// predicate-guarded vectors (bf16 tiles are in flight in the copy engine).
pub(crate) struct InFlight {
    dest: Reg,
    parts: Vec<Vec<Vec<Reg>>>,
}

/// Bytes of one bf16 row of the head dimension in global memory.
pub(crate) const BF16_ROW_BYTES: u32 = (D * 2) as u32;

/// The mover of a bf16 tile: 4 passes of 16 rows, 8 threads per row, one 16-byte copy each.
fn mover_bf16(k: &mut Kernel, ln: &Lanes, t: u32) -> Mover {
    let row_in = k.bin("shr.u32", RegKind::B32, ln.tid, 3u32);
    let c8 = k.bin("and.b32", RegKind::B32, ln.tid, 7u32);
    let cb = k.bin("shl.b32", RegKind::B32, c8, 4u32);
    let goff = k.tri("mad.lo.u32", RegKind::B32, row_in, BF16_ROW_BYTES, cb);
    let soff = k.tri("mad.lo.u32", RegKind::B32, row_in, PITCH, cb);
    Mover { tab: None, t, row_in, goff, soff, toff: None, bf16: true, pitch: PITCH }
}

/// [`mover_bf16`] into the 128-byte-swizzled tile `wgmma` reads (64 lines of 128 bytes, the
/// 16-byte chunk c of line L at chunk c ^ (L mod 8); passes are 16 lines apart, so each keeps
/// its first line's swizzle): [`crate::kernels::attention::wgmma`]'s copies.
pub(crate) fn mover_bf16_swizzled(k: &mut Kernel, ln: &Lanes, t: u32) -> Mover {
    let row_in = k.bin("shr.u32", RegKind::B32, ln.tid, 3u32);
    let c8 = k.bin("and.b32", RegKind::B32, ln.tid, 7u32);
    let cb = k.bin("shl.b32", RegKind::B32, c8, 4u32);
    let goff = k.tri("mad.lo.u32", RegKind::B32, row_in, BF16_ROW_BYTES, cb);
    let r7 = k.bin("and.b32", RegKind::B32, row_in, 7u32);
    let sw = k.bin("xor.b32", RegKind::B32, c8, r7);
    let sb = k.bin("shl.b32", RegKind::B32, sw, 4u32);
    let soff = k.tri("mad.lo.u32", RegKind::B32, row_in, 128u32, sb);
    Mover { tab: None, t, row_in, goff, soff, toff: None, bf16: true, pitch: 128 }
}

/// The mover of the tensor `q`, `k` or `v` of a kernel: bf16 copies when the kernel takes its
/// q, k and v as bf16, else f32 turned by the rotary at `tab` when given.
fn mover_of(k: &mut Kernel, ln: &Lanes, tab: Option<Reg>, t: u32, bf16: bool) -> Mover {
    if bf16 {
        mover_bf16(k, ln, t)
    } else {
        mover(k, ln, tab, t)
    }
}

fn mover(k: &mut Kernel, ln: &Lanes, tab: Option<Reg>, t: u32) -> Mover {
    match tab {
        None => {
            let row_in = k.bin("shr.u32", RegKind::B32, ln.tid, 4u32);
            let c4 = k.bin("and.b32", RegKind::B32, ln.tid, 15u32);
            let gc = k.bin("shl.b32", RegKind::B32, c4, 4u32);
            let goff = k.tri("mad.lo.u32", RegKind::B32, row_in, ROW_BYTES, gc);
            let sc = k.bin("shl.b32", RegKind::B32, c4, 3u32);
            let soff = k.tri("mad.lo.u32", RegKind::B32, row_in, PITCH, sc);
            Mover { tab, t, row_in, goff, soff, toff: None, bf16: false, pitch: PITCH }
        }
        Some(_) => {
            let row_in = k.bin("shr.u32", RegKind::B32, ln.tid, 3u32);
            let c8 = k.bin("and.b32", RegKind::B32, ln.tid, 7u32);
            // Pair index c = 4·c8: 16 bytes of f32 in global memory and the table, 8 of bf16.
            let gc = k.bin("shl.b32", RegKind::B32, c8, 4u32);
            let goff = k.tri("mad.lo.u32", RegKind::B32, row_in, ROW_BYTES, gc);
            let toff = k.tri("mad.lo.u32", RegKind::B32, row_in, TAB_ROW, gc);
            let sc = k.bin("shl.b32", RegKind::B32, c8, 3u32);
            let soff = k.tri("mad.lo.u32", RegKind::B32, row_in, PITCH, sc);
            Mover { tab, t, row_in, goff, soff, toff: Some(toff), bf16: false, pitch: PITCH }
        }
    }
}

impl Mover {
    fn passes(&self) -> (u32, u32) {
        if self.tab.is_some() || self.bf16 {
            (4, 16)
        } else {
            (8, 8)
        }
    }

    /// Issues the global loads of rows `row0 .. row0 + 64` of the head at `head` (zeros past T)
    /// bound for the shared tile at `dest` ([`Mover::store`] completes the move).
    fn issue(&self, k: &mut Kernel, head: Reg, row0: Reg, dest: Reg) -> InFlight {
        if self.bf16 {
            return self.copy(k, head, row0, dest);
        }
        let tile_off = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [tile_off.into(), row0.into(), ROW_BYTES.into()]);
        let tile_ptr = k.bin("add.s64", RegKind::B64, head, tile_off);
        let ptr = k.addr_of(tile_ptr, self.goff, 1);
        let rem = k.bin("sub.u32", RegKind::B32, self.t, row0);
        let tptr = match (self.tab, self.toff) {
            (Some(tab), Some(toff)) => {
                let o = k.reg(RegKind::B64);
                k.op("mul.wide.u32", [o.into(), row0.into(), TAB_ROW.into()]);
                let p = k.bin("add.s64", RegKind::B64, tab, o);
                Some(k.addr_of(p, toff, 1))
            }
            _ => None,
        };
        let (passes, rows) = self.passes();
        let mut parts = vec![];
        for it in 0..passes {
            let r = k.bin("add.u32", RegKind::B32, self.row_in, it * rows);
            let ok = k.setp("lt.u32", r, rem);
            let mut srcs = vec![(ptr, (it * rows * ROW_BYTES) as i64)];
            if let Some(tp) = tptr {
                srcs.push((ptr, (it * rows * ROW_BYTES + ROW_BYTES / 2) as i64));
                srcs.push((tp, (it * rows * TAB_ROW) as i64));
                srcs.push((tp, (it * rows * TAB_ROW + self.t * TAB_ROW) as i64));
            }
            let mut vecs = vec![];
            for (p, off) in srcs {
                let v = zeros(k, 4);
                k.op_if(ok, false, "ld.global.v4.f32", [Opnd::V(v.clone()), addr(p, off)]);
                vecs.push(v);
            }
            parts.push(vecs);
        }
        InFlight { dest, parts }
    }

    /// bf16: the tile's 16-byte copies (zero-filled past T), committed as one group.
    pub(crate) fn copy(&self, k: &mut Kernel, head: Reg, row0: Reg, dest: Reg) -> InFlight {
        let tile_off = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [tile_off.into(), row0.into(), BF16_ROW_BYTES.into()]);
        let tile_ptr = k.bin("add.s64", RegKind::B64, head, tile_off);
        let ptr = k.addr_of(tile_ptr, self.goff, 1);
        let rem = k.bin("sub.u32", RegKind::B32, self.t, row0);
        let sa = k.bin("add.u32", RegKind::B32, dest, self.soff);
        let (passes, rows) = self.passes();
        for it in 0..passes {
            let r = k.bin("add.u32", RegKind::B32, self.row_in, it * rows);
            let ok = k.setp("lt.u32", r, rem);
            let size = k.tri("selp.u32", RegKind::B32, 16u32, 0u32, ok);
            k.op(
                "cp.async.cg.shared.global",
                [
                    addr(sa, (it * rows * self.pitch) as i64),
                    addr(ptr, (it * rows * BF16_ROW_BYTES) as i64),
                    16u32.into(),
                    size.into(),
                ],
            );
        }
        k.op("cp.async.commit_group", []);
        InFlight { dest, parts: vec![] }
    }

    /// Completes the move [`Mover::issue`] began: f32 tiles are converted (and turned) and
    /// stored; bf16 copies are waited for (visible to the block after its next barrier).
    fn store(&self, k: &mut Kernel, f: &InFlight) {
        if self.bf16 {
            k.op("cp.async.wait_all", []);
            return;
        }
        let sa = k.bin("add.u32", RegKind::B32, f.dest, self.soff);
        let (_, rows) = self.passes();
        for (it, vecs) in f.parts.iter().enumerate() {
            let off = (it as u32 * rows * PITCH) as i64;
            if self.tab.is_some() {
                let (o1, o2) = rotate_pairs(k, &vecs[0], &vecs[1], &vecs[2], &vecs[3], false);
                for (x, half_off) in [(o1, 0i64), (o2, (D as i64 / 2) * 2)] {
                    let lo = pack(k, x[0], x[1]);
                    let hi = pack(k, x[2], x[3]);
                    k.op("st.shared.v2.b32", [addr(sa, off + half_off), Opnd::V(vec![lo, hi])]);
                }
            } else {
                let x = &vecs[0];
                let lo = pack(k, x[0], x[1]);
                let hi = pack(k, x[2], x[3]);
                k.op("st.shared.v2.b32", [addr(sa, off), Opnd::V(vec![lo, hi])]);
            }
        }
    }
}

/// The loop's tail for the next tile, when `has_next`: the two tiles whose moves are in flight
/// (bound for the stage other than the current, see [`next_stage`]) are completed, and `more`
/// stores what else the kernel stages with them; `skip` (created by the caller) ends the block.
fn store_next_stage(
    k: &mut Kernel,
    has_next: Reg,
    skip: &str,
    tiles: [(&Mover, &InFlight); 2],
    more: impl FnOnce(&mut Kernel),
) {
    k.bra_if(has_next, true, skip);
    tiles[0].0.store(k, tiles[0].1);
    tiles[1].0.store(k, tiles[1].1);
    more(k);
    k.place(skip);
}

/// The shared tiles `[first][second]` of the stage other than `stage` (from `sm`), where the
/// next tiles go while the current stage is read.
fn next_stage(k: &mut Kernel, sm: Reg, stage: Reg) -> (Reg, Reg) {
    next_stage_of(k, sm, stage, TILE)
}

/// [`next_stage`] of a ring of `tile`-byte tiles (`stage` a byte offset: 0 or 2·`tile`).
pub(crate) fn next_stage_of(k: &mut Kernel, sm: Reg, stage: Reg, tile: u32) -> (Reg, Reg) {
    let other = k.bin("xor.b32", RegKind::B32, stage, 2 * tile);
    let first = k.bin("add.u32", RegKind::B32, sm, other);
    let second = k.bin("add.u32", RegKind::B32, first, tile);
    (first, second)
}

/// The A fragments (4 k16 steps over D) of the warp's 16 rows of the shared tile at `tile`.
fn a_frags(k: &mut Kernel, ln: &Lanes, tile: Reg) -> Vec<Vec<Reg>> {
    let row = k.tri("mad.lo.u32", RegKind::B32, ln.wrow, PITCH, ln.a_off);
    let base = k.bin("add.u32", RegKind::B32, tile, row);
    (0..4).map(|kc| ldsm(k, base, kc * 32, false)).collect()
}

/// `acc += A·Bᵀ` over D for 16 rows × 16 columns: `a` the warp's A fragments, B the 16 rows
/// `n0 .. n0 + 16` of a `[n][d]` shared tile (`b_base` = tile + lane offset). `acc` = two n8 tiles.
fn mma_abt(k: &mut Kernel, acc: &[Vec<Reg>], a: &[Vec<Reg>], b_base: Reg, n0: u32) {
    for (kc, af) in a.iter().enumerate() {
        let b = ldsm(k, b_base, n0 * PITCH + kc as u32 * 32, false);
        mma(k, &acc[0], af, &b[0..2]);
        mma(k, &acc[1], af, &b[2..4]);
    }
}

/// `acc += A·B` over the 16 rows `k0 .. k0 + 16` of a `[k][d]` shared tile (`t_base` = tile +
/// transposing lane offset): `a` one A fragment (16 rows × those 16 k), `acc` 8 n8 tiles over D.
fn mma_ab(k: &mut Kernel, acc: &[Vec<Reg>], a: &[Reg], t_base: Reg, k0: u32) {
    for dp in 0..4u32 {
        let b = ldsm(k, t_base, k0 * PITCH + dp * 32, true);
        mma(k, &acc[2 * dp as usize], a, &b[0..2]);
        mma(k, &acc[2 * dp as usize + 1], a, &b[2..4]);
    }
}

/// Stores the accumulator rows of the warp (rows `row0 + wrow + g + 8r` of the head at `head`,
/// those below T), times `mul`, turned back by the rotary at each row's position when `tab`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_rows(
    k: &mut Kernel,
    ln: &Lanes,
    head: Reg,
    row0: Reg,
    t: u32,
    acc: &[Vec<Reg>],
    mul: [Option<Reg>; 2],
    tab: Option<Reg>,
    bf16_row_bytes: Option<u32>,
) {
    for r in 0..2usize {
        let base_row = k.bin("add.u32", RegKind::B32, row0, ln.wrow);
        let g8 = k.bin("add.u32", RegKind::B32, ln.g, (8 * r) as u32);
        let row = k.bin("add.u32", RegKind::B32, base_row, g8);
        let ok = k.setp("lt.u32", row, t);
        let mut vals: Vec<Reg> = Vec::with_capacity(16);
        for a in acc {
            for e in 0..2 {
                let x = a[2 * r + e];
                vals.push(match mul[r] {
                    Some(m) => k.bin("mul.rn.f32", RegKind::F32, x, m),
                    None => x,
                });
            }
        }
        let col = k.bin("shl.b32", RegKind::B32, ln.tq, 1u32);
        if let Some(tab) = tab {
            // Columns dn·8 + 2t + e of the first half pair with dn·8 + 2t + e + 32, in this thread.
            let te = k.tri("mad.lo.u32", RegKind::B32, row, (D / 2) as u32, col);
            let ta = k.addr_of(tab, te, 4);
            let (mut c, mut s) = (vec![], vec![]);
            for dn in 0..4i64 {
                let cv = zeros(k, 2);
                k.op_if(ok, false, "ld.global.v2.f32", [Opnd::V(cv.clone()), addr(ta, dn * 32)]);
                let sv = zeros(k, 2);
                k.op_if(ok, false, "ld.global.v2.f32", [Opnd::V(sv.clone()), addr(ta, (t * TAB_ROW) as i64 + dn * 32)]);
                c.extend(cv);
                s.extend(sv);
            }
            let (o1, o2) = rotate_pairs(k, &vals[..8], &vals[8..], &c, &s, true);
            vals = o1.into_iter().chain(o2).collect();
        }
        if let Some(stride) = bf16_row_bytes {
            // bf16 rows `stride` bytes apart: this lane's pair of each column group, rounded.
            let rb = k.bin("mul.lo.u32", RegKind::B32, row, stride);
            let e = k.tri("mad.lo.u32", RegKind::B32, col, 2u32, rb);
            let p = k.addr_of(head, e, 1);
            for dn in 0..8usize {
                let pair = pack(k, vals[2 * dn], vals[2 * dn + 1]);
                k.op_if(ok, false, "st.global.b32", [addr(p, dn as i64 * 16), pair.into()]);
            }
            continue;
        }
        let e = k.tri("mad.lo.u32", RegKind::B32, row, D as u32, col);
        let p = k.addr_of(head, e, 4);
        for dn in 0..8usize {
            k.op_if(
                ok,
                false,
                "st.global.v2.f32",
                [addr(p, dn as i64 * 32), Opnd::V(vec![vals[2 * dn], vals[2 * dn + 1]])],
            );
        }
    }
}

/// The block's query tile, longest causal rows first: ⌈T/64⌉ − 1 − ctaid.x.
pub(crate) fn reversed_tile(k: &mut Kernel, t: u32, cx: Reg) -> Reg {
    let last = k.imm_u32(t.div_ceil(ROWS) - 1);
    k.bin("sub.u32", RegKind::B32, last, cx)
}

// ---- forward -------------------------------------------------------------------------------------

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

fn forward_kernel_with(dims: &Dims, load: [bool; 2], bf16: bool, copy: bool) -> Kernel {
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
    store_rows(k, ln, ob, qrow0, t, acc, inv, None, None);
    if let Some(o16) = o16 {
        // Element ((b·T + t)·H + hh)·64 + d: at t = 0, (b·T·H + hh)·64; rows H·64 apart.
        let h = dims.h as u32;
        let b = k.bin("div.u32", RegKind::B32, bh, h);
        let hh = k.bin("rem.u32", RegKind::B32, bh, h);
        let row = k.tri("mad.lo.u32", RegKind::B32, b, t * h, hh);
        let off = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [off.into(), row.into(), BF16_ROW_BYTES.into()]);
        let base = k.bin("add.s64", RegKind::B64, o16, off);
        store_rows(k, ln, base, qrow0, t, acc, inv, None, Some(h * BF16_ROW_BYTES));
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

// ---- backward: dQ --------------------------------------------------------------------------------

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

fn dq_kernel_with(dims: &Dims, inverse_rotary: bool, load: [bool; 2], bf16: bool) -> Kernel {
    debug_assert_eq!(dims.d, D);
    let family = if bf16 { BF16_FAMILY } else { "attention_mma" };
    let mut k = Kernel::new(&kernel_name(family, "bwd_dq", load, inverse_rotary)).with_block(THREADS, 1, 1);
    let ([dq, delta, q, kk, v, o, lse, dout], dq_tab, [q_tab, k_tab]) = dq_params(&mut k, inverse_rotary, load);
    let cx = k.sreg("%ctaid.x");
    let regs = DqRegs { dq, delta, q, k: kk, v, o, lse, dout, dq_tab, q_tab, k_tab, bf16, do16: None, merged: false };
    dq_body(&mut k, dims, &regs, cx, true);
    k.ret();
    k
}

/// The dQ kernel's pointers.
#[derive(Clone, Copy)]
struct DqRegs {
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
    /// dq stored into the merged bf16 gradient ([`grad_base`]).
    merged: bool,
}

/// The dQ pass of the block whose query tile is counted back from the last by `cx`: delta
/// computed from dO and O (stored to `delta` as well when `store_delta`), then dq.
fn dq_body(k: &mut Kernel, dims: &Dims, r: &DqRegs, cx: Reg, store_delta: bool) {
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
fn delta_rows(
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

fn delta_kernel(dims: &Dims, do16: bool) -> Kernel {
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
    backward_kernel_with(dims, inverse_rotary, load, false, false)
}

/// [`backward_kernel_rotating`] reading q, k and v as bf16 ([`forward_kernel_bf16`]'s inputs),
/// and dO as bf16 with delta, both written by [`backward_delta_kernel_bf16`] (o and do are not
/// read): params (dq, dk, dv, delta, q, k, v, o, lse, do, do16), then `dq_tab` and `dk_tab` with
/// the inverse rotaries. The same bits as the f32 kernel on the tensors these round.
pub fn backward_kernel_bf16(dims: &Dims, inverse_rotary: [bool; 2]) -> Kernel {
    backward_kernel_with(dims, inverse_rotary, [false, false], true, false)
}

/// [`backward_kernel_bf16`] storing dq, dk and dv rounded to bf16 into one `[B, T, 3, H, 64]`
/// tensor (params `dq`, `dk` and `dv` all its address): the permuted, concatenated gradient
/// the q/k/v projection's backward products read, which a permute-and-cast launch made from the
/// three f32 gradients before. The same bits.
pub fn backward_kernel_bf16_merged(dims: &Dims, inverse_rotary: [bool; 2]) -> Kernel {
    backward_kernel_with(dims, inverse_rotary, [false, false], true, true)
}

fn backward_kernel_with(dims: &Dims, inverse_rotary: [bool; 2], load: [bool; 2], bf16: bool, merged: bool) -> Kernel {
    use crate::ptx::ParamTy;
    debug_assert_eq!(dims.d, D);
    debug_assert!(!(bf16 && (load[0] || load[1])), "bf16 q and k come turned");
    debug_assert_eq!(dims.g, dims.h, "one launch for both passes needs their grids equal");
    let rot = rotary_suffix(inverse_rotary);
    let family = if bf16 { BF16_FAMILY } else { "attention_mma" };
    let merge = if merged { "_merged" } else { "" };
    let name = format!("{}{rot}{merge}", kernel_name(family, "bwd", load, false));
    let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
    let [dq, dk, dv, delta, q, kk, v, o, lse, dout] =
        ["dq", "dk", "dv", "delta", "q", "k", "v", "o", "lse", "do"].map(|n| k.param_reg(n, ParamTy::U64));
    let do16 = bf16.then(|| k.param_reg("do16", ParamTy::U64));
    let dq_tab = inverse_rotary[0].then(|| k.param_reg("dq_tab", ParamTy::U64));
    let dk_tab = inverse_rotary[1].then(|| k.param_reg("dk_tab", ParamTy::U64));
    let q_tab = load[0].then(|| k.param_reg("q_tab", ParamTy::U64));
    let k_tab = load[1].then(|| k.param_reg("k_tab", ParamTy::U64));
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

// ---- backward: dK, dV ----------------------------------------------------------------------------

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

fn dkv_kernel_with(dims: &Dims, inverse_rotary: bool, load: [bool; 2], bf16: bool) -> Kernel {
    debug_assert_eq!(dims.d, D);
    let family = if bf16 { BF16_FAMILY } else { "attention_mma" };
    let mut k = Kernel::new(&kernel_name(family, "bwd_dkv", load, inverse_rotary)).with_block(THREADS, 1, 1);
    let ([dk, dv, q, kk, v, lse, delta, dout], dk_tab, [q_tab, k_tab]) = dkv_params(&mut k, inverse_rotary, load);
    let cx = k.sreg("%ctaid.x");
    let regs = DkvRegs { dk, dv, q, k: kk, v, lse, delta, dout, dk_tab, q_tab, k_tab, bf16, do16: None, merged: false };
    dkv_body(&mut k, dims, &regs, cx);
    k.ret();
    k
}

/// The dK/dV kernel's pointers.
#[derive(Clone, Copy)]
struct DkvRegs {
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
    /// dk and dv stored into the merged bf16 gradient ([`grad_base`]).
    merged: bool,
}

/// The dK/dV pass of the block whose key tile is `tile` (delta read from `delta`).
fn dkv_body(k: &mut Kernel, dims: &Dims, r: &DkvRegs, tile: Reg) {
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
/// its bf16 row stride when `merged`: the three gradients as one bf16 `[B, T, 3, H, 64]` (the
/// projection's input gradient as its backward products read it, so no permute and cast run);
/// else the f32 head `[T, 64]`.
pub(crate) fn grad_base(
    k: &mut Kernel,
    dims: &Dims,
    base: Reg,
    bh: Reg,
    section: u32,
    merged: bool,
) -> (Reg, Option<u32>) {
    let t = dims.t as u32;
    if !merged {
        return (head_base(k, base, bh, t, ROW_BYTES), None);
    }
    let h = dims.h as u32;
    // Element ((b·T + t)·3 + s)·H·64 + hh·64 + d: at t = 0, ((3·b·T + s)·H + hh)·64.
    let b = k.bin("div.u32", RegKind::B32, bh, h);
    let hh = k.bin("rem.u32", RegKind::B32, bh, h);
    let bt = k.bin("mul.lo.u32", RegKind::B32, b, 3 * t);
    let plane = k.bin("add.u32", RegKind::B32, bt, section);
    let row = k.tri("mad.lo.u32", RegKind::B32, plane, h, hh);
    let off = k.reg(RegKind::B64);
    k.op("mul.wide.u32", [off.into(), row.into(), BF16_ROW_BYTES.into()]);
    (k.bin("add.s64", RegKind::B64, base, off), Some(3 * h * BF16_ROW_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(dims: &Dims) -> Vec<Kernel> {
        let mut v = vec![];
        for load in [[false, false], [true, false], [false, true], [true, true]] {
            v.push(forward_kernel_rotating(dims, load));
            for r in [false, true] {
                v.push(backward_dq_kernel_rotating(dims, r, load));
                v.push(backward_dkv_kernel_rotating(dims, r, load));
            }
            if dims.g == dims.h {
                for r in [[false, false], [true, true], [true, false], [false, true]] {
                    v.push(backward_kernel_rotating(dims, r, load));
                }
            }
        }
        v.push(backward_delta_kernel(dims));
        v.push(backward_delta_kernel_bf16(dims));
        for r in [false, true] {
            v.push(backward_dq_kernel_bf16(dims, r));
            v.push(backward_dkv_kernel_bf16(dims, r));
        }
        if dims.g == dims.h {
            v.push(forward_kernel_bf16(dims));
            v.push(forward_kernel_bf16_copying(dims));
            for r in [[false, false], [true, true], [true, false], [false, true]] {
                v.push(backward_kernel_bf16(dims, r));
            }
            v.push(backward_kernel_bf16_merged(dims, [true, true]));
        }
        v
    }

    #[test]
    fn kernels_fit_the_budget_and_use_the_tensor_cores() {
        let dims = Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
        assert!(applies(&dims));
        assert!(!applies(&Dims { d: 32, ..dims }));
        assert!(!applies(&Dims { g: 3, ..dims }));
        for d in [dims, Dims { h: 4, g: 2, t: 200, softcap: Some(30.0), ..dims }] {
            for k in all(&d) {
                k.check_budget().unwrap();
                assert!(k.static_shared_bytes() <= 4 * TILE + 5 * ROWS * 4, "{}", k.name);
                assert_eq!(k.dynamic_shared, 0, "{}", k.name);
                let text = k.render();
                assert!(text.contains(".reqntid 128, 1, 1"));
                let mmas = text.matches(MMA).count();
                // fwd: 32 (S) + 32 (PV); dq: 4 chunks × (8 + 8 + 8); dkv: 4 × (8 + 8 + 8 + 8).
                let name = k.name.replace("attention_mma_bf16", "attention_mma");
                let pass = |p: &str| name.starts_with(&format!("attention_mma_{p}"));
                // bf16 inputs are copied, never converted; f32 ones never copied.
                let bf16 = k.name.starts_with(BF16_FAMILY);
                assert_eq!(text.contains("cp.async.cg.shared.global"), bf16, "{}", k.name);
                let want = if pass("fwd") {
                    64
                } else if pass("bwd_dq") {
                    96
                } else if pass("bwd_dkv") {
                    128
                } else if pass("bwd_delta") {
                    0
                } else {
                    96 + 128
                };
                assert_eq!(mmas, want, "{}", k.name);
            }
        }
    }

    #[test]
    fn names_follow_the_fp32_kernels() {
        let dims = Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
        assert_eq!(forward_kernel(&dims).name, "attention_mma_fwd");
        assert_eq!(forward_kernel_rotating(&dims, [true, true]).name, "attention_mma_fwd_rotload");
        assert_eq!(backward_dq_kernel_rotating(&dims, true, [true, true]).name, "attention_mma_bwd_dq_rotload_rotary");
        assert_eq!(backward_dkv_kernel(&dims, false).name, "attention_mma_bwd_dkv");
        assert_eq!(forward_kernel_bf16(&dims).name, "attention_mma_bf16_fwd");
        assert_eq!(backward_kernel_bf16(&dims, [true, true]).name, "attention_mma_bf16_bwd_rotary");
        // The bf16 kernels take the plain kernels' parameters (no load tables), the one-launch
        // backward dO's bf16 copy too.
        assert_eq!(forward_kernel_bf16(&dims).params, forward_kernel(&dims).params);
        let mut want = backward_kernel_rotating(&dims, [true, false], [false, false]).params;
        want.insert(10, crate::ptx::Param { name: "do16".into(), ty: crate::ptx::ParamTy::U64 });
        assert_eq!(backward_kernel_bf16(&dims, [true, false]).params, want);
        // Same parameter lists as the fp32 kernels.
        for (a, b) in [
            (
                forward_kernel_rotating(&dims, [true, false]),
                crate::kernels::attention::forward_kernel_rotating(&dims, [true, false]),
            ),
            (
                backward_dq_kernel_rotating(&dims, true, [false, true]),
                crate::kernels::attention::backward_dq_kernel_rotating(&dims, true, [false, true]),
            ),
            (
                backward_dkv_kernel_rotating(&dims, true, [true, true]),
                crate::kernels::attention::backward_dkv_kernel_rotating(&dims, true, [true, true]),
            ),
        ] {
            assert_eq!(a.params, b.params);
        }
    }
}
