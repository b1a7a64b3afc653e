//! Multi-tensor kernels: the global sum of squares over every gradient, every AdamW of a phase,
//! a run of parameter casts to bf16, and a phase's copies into its state, each in one launch
//! however many tensors there are.
//!
//! Why: the learner's optimizer touches ~150 tensors (Coppelius) at arbitrary arena offsets.
//! One launch per tensor (and square → sum → add per gradient for the clip norm) cost ~590
//! launches a step, most of them tiny. Here a launch is driven by a device table of fixed-size
//! chunks, written once at load into the lowering's constant region: block `b` reads entry `b`
//! (arena byte offsets from the arena base, a length, per-tensor constants) and walks its chunk.
//! A chunk never spans two tensors, so a block's work is one contiguous run.
//!
//! Determinism: the sum of squares needs no float atomics. Chunks are fixed by the tensor
//! lengths alone ([`SUMSQ_CHUNK`]); each block sums its chunk in f64 (each thread a fixed
//! strided subset, then a fixed shared-memory tree) into one f64 partial per chunk, and a second
//! one-block launch sums the partials in a fixed order and rounds to f32 once. The CPU reference
//! (`alpha-cpu`'s `sum_squares`) also sums in f64, so the two differ only by f64 rounding of a
//! different association before the final f32 rounding.
//!
//! AdamW's arithmetic is the single-tensor kernel's ([`crate::kernels::adamw::step_kernel`]), operation for
//! operation in f32 with round-to-nearest and no contraction, so it stays bit-identical to the
//! CPU reference (`alpha-cpu/src/kernels/adamw.rs`); only the weight decay moves from an
//! immediate into the table (the same f32 value).

use anyhow::{bail, Result};

use crate::kernels::ScalarArg;
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

/// Threads per block of every kernel here.
pub const THREADS: u32 = 256;
/// Elements per block of the sum of squares.
pub const SUMSQ_CHUNK: usize = 16384;
/// Elements per block of AdamW.
pub const ADAMW_CHUNK: usize = 8192;
/// Bytes of one sum-of-squares table entry: (offset u64, len u32, pad u32).
pub const SUMSQ_ENTRY: usize = 16;
/// Bytes of one AdamW table entry: (p, g, m, v offsets u64; len u32; weight decay f32).
pub const ADAMW_ENTRY: usize = 40;
/// Elements per block of the multi-tensor cast.
pub const CAST_CHUNK: usize = 8192;
/// Bytes of one entry of a cast's or a copy's table (`pair_table`): (source, destination
/// offsets u64; len u32; pad u32).
pub const PAIR_ENTRY: usize = 24;

/// The cast chunk table for (f32 source offset, bf16 destination offset, length) in arena
/// bytes: bytes and entry count.
pub fn cast_table(tensors: &[(usize, usize, usize)]) -> Result<(Vec<u8>, usize)> {
    pair_table("cast", tensors, CAST_CHUNK, [(4, 16), (2, 8)])
}

/// A chunk table of (source offset, destination offset, length) entries for tensors at
/// (source, destination, length) in arena bytes, elements of `sizes` bytes each side, each side
/// aligned as `sizes`' second numbers ask (for vector access): bytes and entry count.
fn pair_table(
    what: &str,
    tensors: &[(usize, usize, usize)],
    chunk: usize,
    [(src_size, src_align), (dst_size, dst_align)]: [(usize, usize); 2],
) -> Result<(Vec<u8>, usize)> {
    if let Some(&(src, dst, _)) = tensors.iter().find(|&&(src, dst, _)| src % src_align != 0 || dst % dst_align != 0) {
        bail!("{what}: source at {src} or destination at {dst} is not aligned for vector access");
    }
    chunk_table(
        what,
        tensors,
        chunk,
        |x| x.2,
        |&(src, dst, _), at, l, t| {
            t.extend(((src + at * src_size) as u64).to_le_bytes());
            t.extend(((dst + at * dst_size) as u64).to_le_bytes());
            t.extend((l as u32).to_le_bytes());
            t.extend(0u32.to_le_bytes());
        },
    )
}

/// A chunk table: each tensor (of `len` elements) cut into chunks of at most `chunk`, and for
/// each chunk (at element `at`, `l` long) the entry `entry` appends. Returns the bytes and the
/// entry count (the grid), which must be 1 to `i32::MAX`.
fn chunk_table<T>(
    what: &str,
    tensors: &[T],
    chunk: usize,
    len: impl Fn(&T) -> usize,
    mut entry: impl FnMut(&T, usize, usize, &mut Vec<u8>),
) -> Result<(Vec<u8>, usize)> {
    let mut t = vec![];
    let mut n = 0;
    for x in tensors {
        let mut at = 0;
        while at < len(x) {
            let l = chunk.min(len(x) - at);
            entry(x, at, l, &mut t);
            at += l;
            n += 1;
        }
    }
    if n == 0 || n > i32::MAX as usize {
        bail!("{what}: {n} chunks");
    }
    Ok((t, n))
}

/// A block's chunk of a [`pair_table`]: the thread, the source and destination addresses and the
/// chunk's length.
#[derive(Clone, Copy)]
struct PairChunk {
    tid: Reg,
    x: Reg,
    y: Reg,
    len: Reg,
}

/// Declares params (base, table) of a kernel driven by a [`pair_table`] and reads block
/// `%ctaid.x`'s entry: its chunk.
fn pair_chunk(k: &mut Kernel) -> PairChunk {
    let base = k.param_reg("base", ParamTy::U64);
    let table = k.param_reg("table", ParamTy::U64);
    let tid = k.sreg("%tid.x");
    let b = k.sreg("%ctaid.x");
    let e = k.addr_of(table, b, PAIR_ENTRY as u32);
    let (src, dst) = (k.reg(RegKind::B64), k.reg(RegKind::B64));
    k.op("ld.global.nc.u64", [src.into(), addr(e, 0)]);
    k.op("ld.global.nc.u64", [dst.into(), addr(e, 8)]);
    let len = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [len.into(), addr(e, 16)]);
    let x = k.bin("add.s64", RegKind::B64, base, src);
    let y = k.bin("add.s64", RegKind::B64, base, dst);
    PairChunk { tid, x, y, len }
}

/// The chunk `c` four elements a thread a pass (`quad` on quad index q), then its last
/// `len mod 4` elements one a thread (`one` on element index j).
fn quads_then_tail(
    k: &mut Kernel,
    c: &PairChunk,
    quad: impl FnOnce(&mut Kernel, Reg),
    one: impl FnOnce(&mut Kernel, Reg),
) {
    let quads = k.bin("shr.u32", RegKind::B32, c.len, 2u32);
    k.strided_loop(c.tid, quads, THREADS, ("quads", "quads_end"), quad);
    let tail0 = k.bin("shl.b32", RegKind::B32, quads, 2u32);
    let start = k.bin("add.u32", RegKind::B32, tail0, c.tid);
    k.strided_loop(start, c.len, THREADS, ("tail", "tail_end"), one);
}

/// Rounds the four f32 `v` to bf16 and stores them at quad `q` of `y` (8 bytes).
fn store_bf16_quad(k: &mut Kernel, y: Reg, q: Reg, v: &[Reg]) {
    let (lo, hi) = (k.reg(RegKind::B32), k.reg(RegKind::B32));
    k.op("cvt.rn.bf16x2.f32", [lo.into(), v[1].into(), v[0].into()]);
    k.op("cvt.rn.bf16x2.f32", [hi.into(), v[3].into(), v[2].into()]);
    let o = k.addr_of(y, q, 8);
    k.op("st.global.v2.b32", [addr(o, 0), Opnd::V(vec![lo, hi])]);
}

/// Every f32 → bf16 cast of a run of parameters: params (base, table); grid (chunks). Why: a
/// weight is read by its forward product and by its input-gradient product, and GEMMs read bf16
/// in half the bytes of f32; casting each block's weights once, together, costs one launch.
/// Rounding to nearest even with `cvt.rn.bf16.f32`, as the pointwise cast does.
pub fn cast_kernel() -> Kernel {
    let mut k = Kernel::new("cast_multi_f32_bf16").with_block(THREADS, 1, 1);
    let chunk = pair_chunk(&mut k);
    let PairChunk { tid, x, y, len } = chunk;
    // A whole chunk: each thread's eight quads loaded at once, then converted and stored (one
    // memory latency a thread instead of eight: a block's 3.2 M weights took 12.7 µs on the
    // H200 with the loop below).
    let per_thread = (CAST_CHUNK / 4) as u32 / THREADS;
    let partial = k.label("partial_chunk");
    let whole = k.setp("eq.u32", len, CAST_CHUNK as u32);
    k.bra_if(whole, true, &partial);
    let vals: Vec<(Vec<Reg>, Reg)> = (0..per_thread)
        .map(|i| {
            let q = k.bin("add.u32", RegKind::B32, tid, i * THREADS);
            let a = k.addr_of(x, q, 16);
            let v = k.regs(RegKind::F32, 4);
            k.op("ld.global.nc.v4.f32", [Opnd::V(v.clone()), addr(a, 0)]);
            (v, q)
        })
        .collect();
    for (v, q) in vals {
        store_bf16_quad(&mut k, y, q, &v);
    }
    k.ret();
    k.place(&partial);
    // Four elements a thread a pass (16-byte loads, 8-byte stores), then the chunk's tail.
    quads_then_tail(
        &mut k,
        &chunk,
        |k, q| {
            let a = k.addr_of(x, q, 16);
            let v = k.regs(RegKind::F32, 4);
            k.op("ld.global.nc.v4.f32", [Opnd::V(v.clone()), addr(a, 0)]);
            store_bf16_quad(k, y, q, &v);
        },
        |k, j| {
            let a = k.addr_of(x, j, 4);
            let v = k.reg(RegKind::F32);
            k.op("ld.global.nc.f32", [v.into(), addr(a, 0)]);
            let h = k.un("cvt.rn.bf16.f32", RegKind::B16, v);
            let o = k.addr_of(y, j, 2);
            k.op("st.global.b16", [addr(o, 0), h.into()]);
        },
    );
    k.ret();
    k
}

/// Elements per block of the multi-tensor copy.
pub const COPY_CHUNK: usize = 8192;

/// The copy chunk table for 4-byte elements at (source offset, destination offset, length) in
/// arena bytes: bytes and entry count.
pub fn copy_table(tensors: &[(usize, usize, usize)]) -> Result<(Vec<u8>, usize)> {
    pair_table("copy", tensors, COPY_CHUNK, [(4, 16), (4, 16)])
}

/// Every copy of 4-byte elements a phase ends with (its new state into the state's slots, where
/// the plan could not compute it in place): params (base, table); grid (chunks). Why: Muon's
/// batched update leaves each matrix and its momentum in a stack, and their copies home were
/// 108 launches of Polf's step, each a few microseconds of a megabyte. The bits are moved, not
/// converted.
pub fn copy_kernel() -> Kernel {
    let mut k = Kernel::new("copy_multi_b32").with_block(THREADS, 1, 1);
    let chunk = pair_chunk(&mut k);
    let (x, y) = (chunk.x, chunk.y);
    // Four elements a thread a pass (16-byte loads and stores), then the chunk's tail.
    quads_then_tail(
        &mut k,
        &chunk,
        |k, q| {
            let a = k.addr_of(x, q, 16);
            let v = k.regs(RegKind::B32, 4);
            k.op("ld.global.v4.b32", [Opnd::V(v.clone()), addr(a, 0)]);
            let o = k.addr_of(y, q, 16);
            k.op("st.global.v4.b32", [addr(o, 0), Opnd::V(v)]);
        },
        |k, j| {
            let a = k.addr_of(x, j, 4);
            let v = k.reg(RegKind::B32);
            k.op("ld.global.b32", [v.into(), addr(a, 0)]);
            let o = k.addr_of(y, j, 4);
            k.op("st.global.b32", [addr(o, 0), v.into()]);
        },
    );
    k.ret();
    k
}

/// One tensor of an AdamW group: arena byte offsets of p, g, m, v (f32), its length and decay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamwTensor {
    pub p: usize,
    pub g: usize,
    pub m: usize,
    pub v: usize,
    pub len: usize,
    pub weight_decay: f32,
}

/// The sum-of-squares chunk table for f32 tensors at (arena byte offset, length): bytes and
/// entry count. Empty tensors contribute nothing.
pub fn sumsq_table(tensors: &[(usize, usize)]) -> Result<(Vec<u8>, usize)> {
    chunk_table(
        "sum-squares",
        tensors,
        SUMSQ_CHUNK,
        |x| x.1,
        |&(off, _), at, l, t| {
            t.extend(((off + at * 4) as u64).to_le_bytes());
            t.extend((l as u32).to_le_bytes());
            t.extend(0u32.to_le_bytes());
        },
    )
}

/// The AdamW chunk table: bytes and entry count.
pub fn adamw_table(tensors: &[AdamwTensor]) -> Result<(Vec<u8>, usize)> {
    chunk_table(
        "adamw",
        tensors,
        ADAMW_CHUNK,
        |x| x.len,
        |x, at, l, t| {
            for o in [x.p, x.g, x.m, x.v] {
                t.extend(((o + at * 4) as u64).to_le_bytes());
            }
            t.extend((l as u32).to_le_bytes());
            t.extend(x.weight_decay.to_bits().to_le_bytes());
        },
    )
}

/// Sums `v` (f64) over the block in a fixed tree through `sh` (THREADS·8 bytes); returns the
/// total in thread 0 (other threads' value is unspecified).
fn block_sum_f64(k: &mut Kernel, v: Reg, sh: &str, tid: Reg) -> Reg {
    let base = k.un("mov.u32", RegKind::B32, Opnd::S(sh.to_string()));
    let mine = k.tri("mad.lo.u32", RegKind::B32, tid, 8u32, base);
    k.op("st.shared.f64", [addr(mine, 0), v.into()]);
    k.barrier();
    let mut s = THREADS / 2;
    while s >= 1 {
        let skip = k.label("tree");
        let active = k.setp("lt.u32", tid, s);
        k.bra_if(active, true, &skip);
        let a = k.reg(RegKind::F64);
        let b = k.reg(RegKind::F64);
        k.op("ld.shared.f64", [a.into(), addr(mine, 0)]);
        k.op("ld.shared.f64", [b.into(), addr(mine, (8 * s) as i64)]);
        let c = k.bin("add.rn.f64", RegKind::F64, a, b);
        k.op("st.shared.f64", [addr(mine, 0), c.into()]);
        k.place(&skip);
        k.barrier();
        s /= 2;
    }
    let r = k.reg(RegKind::F64);
    k.op("ld.shared.f64", [r.into(), addr(base, 0)]);
    r
}

fn zero_f64(k: &mut Kernel) -> Reg {
    let r = k.reg(RegKind::F64);
    k.op("mov.f64", [r.into(), Opnd::S("0d0000000000000000".into())]);
    r
}

/// Pass 1: params (partials, base, table); grid (chunks). Block `b` writes the f64 sum of
/// squares of chunk `b` to `partials[b]`.
pub fn sumsq_chunks_kernel() -> Kernel {
    let mut k = Kernel::new("sumsq_multi").with_block(THREADS, 1, 1);
    let parts = k.param_reg("partials", ParamTy::U64);
    let base = k.param_reg("base", ParamTy::U64);
    let table = k.param_reg("table", ParamTy::U64);
    let sh = k.shared("red", THREADS * 8, 16);
    let tid = k.sreg("%tid.x");
    let b = k.sreg("%ctaid.x");
    let e = k.addr_of(table, b, SUMSQ_ENTRY as u32);
    let off = k.reg(RegKind::B64);
    k.op("ld.global.nc.u64", [off.into(), addr(e, 0)]);
    let len = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [len.into(), addr(e, 8)]);
    let x = k.bin("add.s64", RegKind::B64, base, off);
    let acc = zero_f64(&mut k);
    k.strided_loop(tid, len, THREADS, ("loop", "end"), |k, j| {
        let a = k.addr_of(x, j, 4);
        let v = k.reg(RegKind::F32);
        k.op("ld.global.nc.f32", [v.into(), addr(a, 0)]);
        let d = k.un("cvt.f64.f32", RegKind::F64, v);
        let sq = k.bin("mul.rn.f64", RegKind::F64, d, d);
        k.op("add.rn.f64", [acc.into(), acc.into(), sq.into()]);
    });
    let total = block_sum_f64(&mut k, acc, &sh, tid);
    let first = k.setp("eq.u32", tid, 0u32);
    let pa = k.addr_of(parts, b, 8);
    k.op_if(first, false, "st.global.f64", [addr(pa, 0), total.into()]);
    k.ret();
    k
}

/// Pass 2: params (out, partials, nparts); one block. `out` (f32) = Σ partials, in a fixed
/// order, rounded once.
pub fn sumsq_finish_kernel() -> Kernel {
    let mut k = Kernel::new("sumsq_multi_finish").with_block(THREADS, 1, 1);
    let out = k.param_reg("out", ParamTy::U64);
    let parts = k.param_reg("partials", ParamTy::U64);
    let np = k.param_reg("nparts", ParamTy::U32);
    let sh = k.shared("red", THREADS * 8, 16);
    let tid = k.sreg("%tid.x");
    let acc = zero_f64(&mut k);
    k.strided_loop(tid, np, THREADS, ("loop", "end"), |k, j| {
        let a = k.addr_of(parts, j, 8);
        let v = k.reg(RegKind::F64);
        k.op("ld.global.f64", [v.into(), addr(a, 0)]);
        k.op("add.rn.f64", [acc.into(), acc.into(), v.into()]);
    });
    let total = block_sum_f64(&mut k, acc, &sh, tid);
    let f = k.un("cvt.rn.f32.f64", RegKind::F32, total);
    let first = k.setp("eq.u32", tid, 0u32);
    k.op_if(first, false, "st.global.f32", [addr(out, 0), f.into()]);
    k.ret();
    k
}

/// Every AdamW of a group: params (base, table, lr, bc1, bc2, gscale); grid (chunks). β₁, β₂, ε
/// are immediates (a group shares them); the weight decay is the table's.
pub fn adamw_kernel(beta1: f64, beta2: f64, eps: f64) -> Kernel {
    let mut k = Kernel::new("adamw_multi").with_block(THREADS, 1, 1);
    let base = k.param_reg("base", ParamTy::U64);
    let table = k.param_reg("table", ParamTy::U64);
    let scalars = crate::kernels::adamw::step_scalars(&mut k, beta1, beta2, eps);
    let ld = crate::kernels::adamw::ld;
    let tid = k.sreg("%tid.x");
    let b = k.sreg("%ctaid.x");
    let e = k.addr_of(table, b, ADAMW_ENTRY as u32);
    let ptrs: Vec<Reg> = (0..4)
        .map(|i| {
            let off = k.reg(RegKind::B64);
            k.op("ld.global.nc.u64", [off.into(), addr(e, 8 * i)]);
            k.bin("add.s64", RegKind::B64, base, off)
        })
        .collect();
    let len = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [len.into(), addr(e, 32)]);
    let wd = k.reg(RegKind::F32);
    k.op("ld.global.nc.f32", [wd.into(), addr(e, 36)]);
    k.strided_loop(tid, len, THREADS, ("loop", "end"), |k, j| {
        let pa = k.addr_of(ptrs[0], j, 4);
        let ga = k.addr_of(ptrs[1], j, 4);
        let ma = k.addr_of(ptrs[2], j, 4);
        let va = k.addr_of(ptrs[3], j, 4);
        let (pv, gv, mv, vv) = (ld(k, pa, 0), ld(k, ga, 0), ld(k, ma, 0), ld(k, va, 0));
        // Exactly `adamw::step_kernel`'s sequence (the CPU reference's order).
        let (p2, m2, v2) = crate::kernels::adamw::emit_update(k, [pv, gv, mv, vv], &scalars, wd);
        k.op("st.global.f32", [addr(pa, 0), p2.into()]);
        k.op("st.global.f32", [addr(ma, 0), m2.into()]);
        k.op("st.global.f32", [addr(va, 0), v2.into()]);
    });
    k.ret();
    k
}

pub fn kernels() -> Vec<Kernel> {
    vec![sumsq_chunks_kernel(), sumsq_finish_kernel(), adamw_kernel(0.9, 0.95, 1e-8)]
}

/// The multi-tensor cast's arguments: the base its table's offsets count from, the table.
pub fn cast_arguments<T>([base, table]: [T; 2]) -> Vec<T> {
    vec![base, table]
}

/// The multi-tensor copy's arguments: the arena base, the table.
pub fn copy_arguments<T>([base, table]: [T; 2]) -> Vec<T> {
    vec![base, table]
}

/// The sum of squares' first launch: the f64 partials, the base, the table.
pub fn sumsq_chunks_arguments<T>([partials, base, table]: [T; 3]) -> Vec<T> {
    vec![partials, base, table]
}

/// The sum of squares' finish: out, the partials, then how many chunks there are.
pub fn sumsq_finish_arguments<T: ScalarArg>([out, partials]: [T; 2], chunks: u32) -> Vec<T> {
    vec![out, partials, T::u32(chunks)]
}

/// The multi-tensor AdamW's arguments: the base, the table, then the scalars every tensor of
/// the launch shares (lr, bias corrections, gradient scale).
pub fn adamw_arguments<T>([base, table]: [T; 2], scalars: [T; 4]) -> Vec<T> {
    let mut args = vec![base, table];
    args.extend(scalars);
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each builder fills its kernel's parameters, in order and of their types.
    #[test]
    fn arguments_match_the_kernels_parameters() {
        use crate::kernels::arg_types;
        use crate::runtime::driver::Arg;
        let types = |k: Kernel| k.params.iter().map(|p| p.ty).collect::<Vec<_>>();
        let p = [Arg::U64(0); 4];
        assert_eq!(arg_types(&cast_arguments([p[0]; 2])), types(cast_kernel()));
        assert_eq!(arg_types(&sumsq_chunks_arguments([p[0]; 3])), types(sumsq_chunks_kernel()));
        assert_eq!(arg_types(&sumsq_finish_arguments([p[0]; 2], 3)), types(sumsq_finish_kernel()));
        assert_eq!(arg_types(&adamw_arguments([p[0]; 2], p)), types(adamw_kernel(0.9, 0.95, 1e-8)));
    }

    #[test]
    fn tables_cut_tensors_into_chunks_that_never_span_two() {
        let (t, n) = sumsq_table(&[(256, SUMSQ_CHUNK + 3), (1024, 0), (4096, 5)]).unwrap();
        assert_eq!(n, 3);
        assert_eq!(t.len(), 3 * SUMSQ_ENTRY);
        let u64_at = |t: &[u8], o: usize| u64::from_le_bytes(t[o..o + 8].try_into().unwrap());
        let u32_at = |t: &[u8], o: usize| u32::from_le_bytes(t[o..o + 4].try_into().unwrap());
        assert_eq!((u64_at(&t, 0), u32_at(&t, 8)), (256, SUMSQ_CHUNK as u32));
        assert_eq!((u64_at(&t, 16), u32_at(&t, 24)), (256 + 4 * SUMSQ_CHUNK as u64, 3));
        assert_eq!((u64_at(&t, 32), u32_at(&t, 40)), (4096, 5));
        assert!(sumsq_table(&[(0, 0)]).is_err());

        let x = AdamwTensor { p: 0, g: 100_000, m: 200_000, v: 300_000, len: ADAMW_CHUNK + 1, weight_decay: 0.1 };
        let (t, n) = adamw_table(&[x]).unwrap();
        assert_eq!((n, t.len()), (2, 2 * ADAMW_ENTRY));
        let e = ADAMW_ENTRY;
        let step = 4 * ADAMW_CHUNK as u64;
        assert_eq!([0, 8, 16, 24].map(|o| u64_at(&t, e + o)), [step, 100_000 + step, 200_000 + step, 300_000 + step]);
        assert_eq!(u32_at(&t, e + 32), 1);
        assert_eq!(f32::from_bits(u32_at(&t, e + 36)), 0.1f32);
    }

    #[test]
    fn kernels_render_within_budget_without_contraction() {
        for k in kernels() {
            k.check_budget().unwrap();
        }
        let t = adamw_kernel(0.9, 0.95, 1e-8).render();
        assert!(!t.contains("fma") && t.contains("sqrt.rn.f32"));
        // The arithmetic is the single-tensor kernel's, line for line, with λ from the table.
        let ops = |s: &str| -> Vec<String> {
            s.lines()
                .map(str::trim)
                .filter(|l| l.contains(".rn.f32"))
                .map(|l| l.split_whitespace().next().unwrap().to_string())
                .collect()
        };
        assert_eq!(ops(&t), ops(&crate::kernels::adamw::step_kernel(0.9, 0.95, 1e-8, 0.1, 1000).render()));
        assert!(!sumsq_chunks_kernel().render().contains("atom"));
    }
}
