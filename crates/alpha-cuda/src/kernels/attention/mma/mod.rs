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
//!
//! Files: the tile primitives and operand movers the passes share (here), the forward
//! (`forward.rs`) and the backward passes (`backward.rs`).

use crate::kernels::attention::{
    dkv_params, dq_params, forward_params, kernel_name, kv_head, pointer_params, rotate_pairs, Dims,
};
use crate::ptx::{addr, Kernel, Opnd, Reg, RegKind};

mod backward;
mod forward;
#[cfg(test)]
mod tests;

pub use backward::*;
pub use forward::*;

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

/// How [`store_rows`] lays its rows out from the head's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rows {
    /// f32 rows of 64, one after another (a head of `[B, H, T, 64]`).
    F32Head,
    /// f32 rows this many bytes apart (a head within a permuted tensor).
    F32(u32),
    /// bf16 rows this many bytes apart, rounded to nearest.
    Bf16(u32),
    /// [`Rows::Bf16`], and each warp's sums of its 16 rows' f32 values down each column, stored
    /// at `sums` (the head's first column in its batch's first chunk) + `(chunk·row + col)`
    /// floats: the partials a row of `row` floats a chunk of sixteen rows.
    Bf16Summed { stride: u32, sums: Reg, row: u32 },
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
    rows: Rows,
) {
    // Each row's values and whether it lies below T, for the column sums after.
    let mut stored: Vec<(Vec<Reg>, Reg)> = vec![];
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
        if let Rows::F32(stride) = rows {
            // f32 rows `stride` bytes apart: this lane's pair of each column group.
            let rb = k.bin("mul.lo.u32", RegKind::B32, row, stride);
            let e = k.tri("mad.lo.u32", RegKind::B32, col, 4u32, rb);
            let p = k.addr_of(head, e, 1);
            for dn in 0..8usize {
                let pair = Opnd::V(vec![vals[2 * dn], vals[2 * dn + 1]]);
                k.op_if(ok, false, "st.global.v2.f32", [addr(p, dn as i64 * 32), pair]);
            }
            continue;
        }
        if let Rows::Bf16(stride) | Rows::Bf16Summed { stride, .. } = rows {
            // bf16 rows `stride` bytes apart: this lane's pair of each column group, rounded.
            let rb = k.bin("mul.lo.u32", RegKind::B32, row, stride);
            let e = k.tri("mad.lo.u32", RegKind::B32, col, 2u32, rb);
            let p = k.addr_of(head, e, 1);
            for dn in 0..8usize {
                let pair = pack(k, vals[2 * dn], vals[2 * dn + 1]);
                k.op_if(ok, false, "st.global.b32", [addr(p, dn as i64 * 16), pair.into()]);
            }
            stored.push((vals, ok));
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
    if let Rows::Bf16Summed { sums, row, .. } = rows {
        column_sums(k, ln, row0, t, &stored, (sums, row));
    }
}

/// The warp's sums down its 64 columns: each lane adds its rows g and g + 8 (those below T) in
/// its 16 columns, then three exchanges across the lanes of the same columns halve what each
/// lane holds (lanes whose bit of g is set keep the upper half and send the lower, the others
/// the reverse, each adding what it receives), so that lane g ends with the sums of the
/// warp's 16 rows in columns 8·g + 2·tq and the next: the warp's 64 sums, stored as 256
/// contiguous bytes at its chunk (`row0 + wrow` over 16) of the partials. One fixed order.
fn column_sums(k: &mut Kernel, ln: &Lanes, row0: Reg, t: u32, stored: &[(Vec<Reg>, Reg)], (sums, row): (Reg, u32)) {
    k.comment("the warp's column sums of its sixteen rows, reduced and scattered across its lanes");
    let mut held: Vec<Reg> = (0..stored[0].0.len())
        .map(|c| {
            let [a, b] = [0, 1].map(|r| {
                let (vals, ok) = &stored[r];
                k.tri("selp.f32", RegKind::F32, vals[c], 0.0f32, *ok)
            });
            k.bin("add.rn.f32", RegKind::F32, a, b)
        })
        .collect();
    for (mask, bit) in [(16u32, 4u32), (8, 2), (4, 1)] {
        let g_bit = k.bin("and.b32", RegKind::B32, ln.g, bit);
        let upper = k.setp("ne.u32", g_bit, 0u32);
        let half = held.len() / 2;
        held = (0..half)
            .map(|j| {
                let (lo, hi) = (held[j], held[j + half]);
                let keep = k.tri("selp.f32", RegKind::F32, hi, lo, upper);
                let send = k.tri("selp.f32", RegKind::F32, lo, hi, upper);
                let got = k.reg(RegKind::F32);
                k.op(
                    "shfl.sync.bfly.b32",
                    [got.into(), send.into(), mask.into(), 0x1fu32.into(), Opnd::S("-1".into())],
                );
                k.bin("add.rn.f32", RegKind::F32, keep, got)
            })
            .collect();
    }
    let first = k.bin("add.u32", RegKind::B32, row0, ln.wrow);
    let in_t = k.setp("lt.u32", first, t);
    // Columns 8·g + 2·tq and the next, in chunk first / 16.
    let chunk = k.bin("shr.u32", RegKind::B32, first, 4u32);
    let col = k.bin("shl.b32", RegKind::B32, ln.g, 3u32);
    let col = k.tri("mad.lo.u32", RegKind::B32, ln.tq, 2u32, col);
    let e = k.tri("mad.lo.u32", RegKind::B32, chunk, row, col);
    let p = k.addr_of(sums, e, 4);
    k.op_if(in_t, false, "st.global.v2.f32", [addr(p, 0), Opnd::V(held)]);
}

/// The block's query tile, longest causal rows first: ⌈T/64⌉ − 1 − ctaid.x.
pub(crate) fn reversed_tile(k: &mut Kernel, t: u32, cx: Reg) -> Reg {
    let last = k.imm_u32(t.div_ceil(ROWS) - 1);
    k.bin("sub.u32", RegKind::B32, last, cx)
}
