//! Embedding gather and its deterministic scatter-add gradient.
//!
//! Why: the forward is a row gather (`out[n] = table[idx[n]]`); the backward must add every
//! token's output gradient into its vocabulary row. The usual float `atomicAdd` makes the sum's
//! order — and so its last bits — depend on scheduling, and §9's gates ask runs to repeat bit
//! for bit. So the backward sums each element in one thread, in a fixed order:
//! `dtable[v] += Σ_{n: idx[n]=v, n ascending} dout[n]`, the running sum started at zero and
//! added to the row once, exactly as [`scatter_add_reference`] does, so the two agree bit for
//! bit. Indices outside `[0, V)` contribute nothing (and gather writes zeros for them); rows
//! that no token uses are not touched.
//!
//! How (backward): the tokens are first sorted by id, so that the adding reads only the rows it
//! adds, instead of every block reading all N indices (the cost that grew with V·N). Five
//! launches over a scratch region ([`ScatterAdd::scratch_bytes`]) build and walk one list: id
//! v's *segment* is the positions of its tokens in ascending order followed by one *marker*
//! item (v with the top bit set), and segments follow each other in id order.
//! 1. `embedding_scatter_clear` zeroes the V counts (and the ticket after them);
//! 2. `embedding_scatter_count` counts each id's tokens (integer atomics: a count does not
//!    depend on their order); the last block to finish, found by an integer ticket, scans the
//!    counts into each id's segment start, writes the markers, and for each chunk of
//!    [`SORT_CHUNK`] list items the start of the first segment that starts in it (so that every
//!    segment belongs to exactly one chunk);
//! 3. `embedding_scatter_place` gives each token a slot of its segment by an atomic decrement
//!    of its id's count: a segment then holds its positions in an order that depends on
//!    scheduling, which the next launch removes;
//! 4. `embedding_scatter_sort`, one warp per chunk, puts each segment that starts in its chunk
//!    in ascending order. Positions are distinct, so that order is unique however step 3 placed
//!    them. A segment that ends within a window of 32 items is ranked in registers (32
//!    shuffles); a longer one is rewritten by reading all N indices in order and writing the
//!    matching positions through ballots (linear in N, and it ignores what step 3 wrote). Where
//!    the table is to be zeroed first (the lowering's gradient), blocks past the sorting ones
//!    do it, their stores overlapping the sorting warps' latencies;
//! 5. `embedding_scatter_add` walks the list: one block per [`SUM_CHUNK`] items and 128
//!    columns, one column per thread, each warp taking the segments that start in its range.
//!    A warp loads the gradients of [`SUM_BATCH`] items (scalars: a column's thread keeps 128
//!    loads in flight, where 16-byte loads would keep 32 rows in the same registers) before
//!    adding any, in order: a position adds its row to the running sum; a marker's load is the
//!    row's old value, to which the sum is added and stored, and the sum restarts at zero.
//!
//! Cost: the adding reads each token's gradient row once and each used table row once; the
//! sorting reads the N indices once per segment of more than 31 tokens. One frequent id is one
//! chain of dependent adds per column, walked by one warp per 32 columns, so its time grows with
//! its count (a batch's loads wait out one latency per 128 of its tokens, not per token).
//! Launch grids depend only on V, D and N (the lowering puts them in a CUDA graph). Not yet
//! timed on a GPU; `kernel_check --only embedding` times it at Coppelius's and GPT-2's shapes.

use anyhow::{bail, Result};

use crate::kernels::ScalarArg;
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};
use crate::runtime::driver::{Arg, Function, Gpu, LaunchConfig};

/// Threads per block; each handles 4 consecutive columns, so 512 columns per pass.
pub const THREADS: u32 = 128;

/// Gather: params (out, table, idx, v, d).
pub fn gather_kernel() -> Kernel {
    let mut k = Kernel::new("embedding_gather").with_block(THREADS, 1, 1);
    let out = k.param_reg("out", ParamTy::U64);
    let table = k.param_reg("table", ParamTy::U64);
    let idx = k.param_reg("idx", ParamTy::U64);
    let vocab = k.param_reg("v", ParamTy::U32);
    let d = k.param_reg("d", ParamTy::U32);
    let tid = k.sreg("%tid.x");
    let row = k.sreg("%ctaid.x");
    let ia = k.addr_of(idx, row, 4);
    let t = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [t.into(), addr(ia, 0)]);
    // Unsigned compare: negative indices are huge, so out of range too.
    let ok = k.setp("lt.u32", t, vocab);
    let src_row = k.bin("mul.lo.u32", RegKind::B32, t, d);
    let dst_row = k.bin("mul.lo.u32", RegKind::B32, row, d);
    let col = k.bin("mul.lo.u32", RegKind::B32, tid, 4u32);
    let top = k.label("col");
    let end = k.label("end");
    k.place(&top);
    let more = k.setp("lt.u32", col, d);
    k.bra_if(more, true, &end);
    let v = k.regs(RegKind::F32, 4);
    for &r in &v {
        k.op("mov.f32", [r.into(), 0.0f32.into()]);
    }
    let se = k.bin("add.u32", RegKind::B32, src_row, col);
    let sa = k.addr_of(table, se, 4);
    k.op_if(ok, false, "ld.global.nc.v4.f32", [Opnd::V(v.clone()), addr(sa, 0)]);
    let de = k.bin("add.u32", RegKind::B32, dst_row, col);
    let da = k.addr_of(out, de, 4);
    k.op("st.global.v4.f32", [addr(da, 0), Opnd::V(v)]);
    k.op("add.u32", [col.into(), col.into(), (4 * THREADS).into()]);
    k.bra(&top);
    k.place(&end);
    k.ret();
    k
}

/// The top bit of a list item: set, the item is a segment's marker and holds its id; clear, it
/// is a token's position.
const MARK: u32 = 0x8000_0000;
/// List items whose segments one sorting warp puts in order (those that start among them).
pub const SORT_CHUNK: u32 = 32;
/// List items whose segments one summing block adds: four sorting chunks.
pub const SUM_CHUNK: u32 = 4 * SORT_CHUNK;
/// Items whose gradients a summing warp loads before it adds any: four a lane. A frequent id's
/// chain waits out one load latency per batch: 128 columns of one thread each keep as many rows
/// in flight as 512 columns of 16-byte loads.
pub const SUM_BATCH: u32 = 128;
/// Threads of a summing block, one column each.
const SUM_THREADS: u32 = 128;
/// Threads of a sorting block: a warp a chunk.
const SORT_THREADS: u32 = 128;
/// Threads of the clearing and placing launches (16 bytes or one token each).
const TOKEN_THREADS: u32 = 256;
/// Threads of a counting block (one token each), the last of which lays out the list.
const COUNT_THREADS: u32 = 1024;
/// Consecutive counts a layout thread takes at a time (four 16-byte loads).
const LAYOUT_COUNTS: u32 = 16;
/// Indices a lane has in flight while a long segment's warp reads all N of them.
const LONG_AHEAD: u32 = 64;
/// 16-byte words of the table a zeroing thread of the sorting launch clears: 64 KB a block, so
/// that the blocks, as few to an SM as the sorting warps' registers allow, keep its stores going.
const ZERO_QUADS: u32 = 32;

/// The scatter-add's kernels in launch order, as [`ScatterLaunch::kernel`] numbers them.
const CLEAR: usize = 0;
const COUNT: usize = 1;
const PLACE: usize = 2;
const SORT: usize = 3;
const SUM: usize = 4;

/// One launch of the scatter-add: its kernel's index in [`scatter_add_kernels`], its grid, its
/// block and its arguments.
pub struct ScatterLaunch<T> {
    pub kernel: usize,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub args: Vec<T>,
}

/// The scatter-add of `tokens` gradient rows of `d` floats into a table of `v` rows: its scratch
/// region and its launches, whose grids depend on these numbers alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScatterAdd {
    pub v: u32,
    pub d: u32,
    pub tokens: u32,
    /// The table is zeroed first (`dtable = Σ`, the lowering's gradient), by blocks of the
    /// sorting launch; else added to (`dtable += Σ`).
    pub zero_table: bool,
}

impl ScatterAdd {
    /// Checks the shape: rows of a positive multiple of 4 floats; ids and positions below 2^31
    /// (a list item's top bit is its marker flag).
    pub fn new(v: u32, d: u32, tokens: u32) -> Result<Self> {
        check_d(d)?;
        if v == 0 || v >= MARK || tokens >= MARK || d >= 1 << 28 || v as u64 * d as u64 / 4 > u32::MAX as u64 {
            bail!("embedding scatter-add: {v} rows of {d} floats and {tokens} tokens are out of range");
        }
        Ok(ScatterAdd { v, d, tokens, zero_table: false })
    }

    /// The same, zeroing the table first.
    pub fn zeroing_table(self) -> Self {
        ScatterAdd { zero_table: true, ..self }
    }

    /// Words of the counts and of the starts: V + 1 rounded up to the layout's 16 a thread.
    fn padded_v(&self) -> usize {
        (self.v as usize + 1).next_multiple_of(LAYOUT_COUNTS as usize)
    }

    /// Items the list holds at most: every token's position, and a marker per id in use.
    fn list_len(&self) -> usize {
        self.tokens as usize + self.v.min(self.tokens) as usize
    }

    /// Blocks of the sorting and of the summing launches (per 128 columns).
    fn sum_chunks(&self) -> u32 {
        (self.list_len().div_ceil(SUM_CHUNK as usize) as u32).max(1)
    }

    /// Sorting chunks; the chunk starts have one entry more, the list's end.
    fn sort_chunks(&self) -> u32 {
        self.sum_chunks() * (SUM_CHUNK / SORT_CHUNK)
    }

    /// Byte offsets in the scratch region of the counts, the segment starts, the chunk starts and
    /// the list, then the region's size.
    fn regions(&self) -> ([usize; 4], usize) {
        let words = |n: usize| (4 * n).next_multiple_of(16);
        let counts = 0;
        let starts = counts + words(self.padded_v());
        let chunk_starts = starts + words(self.padded_v());
        let list = chunk_starts + words(self.sort_chunks() as usize + 1);
        let end = list + words(self.list_len().max(1));
        ([counts, starts, chunk_starts, list], end)
    }

    /// Bytes of scratch memory the launches use (any contents on entry).
    pub fn scratch_bytes(&self) -> usize {
        self.regions().1
    }

    /// The five launches, in order: pointers to the table's gradient, dout and the ids, and
    /// `scratch(offset)` a pointer `offset` bytes into the scratch region.
    pub fn launches<T: ScalarArg>(
        &self,
        [dtable, dout, idx]: [T; 3],
        scratch: impl Fn(usize) -> T,
    ) -> Vec<ScatterLaunch<T>> {
        let [counts, starts, chunk_starts, list] = self.regions().0.map(scratch);
        let quads = self.padded_v() as u32 / 4;
        let table_quads = if self.zero_table { self.v * (self.d / 4) } else { 0 };
        let zero_blocks = table_quads.div_ceil(SORT_THREADS * ZERO_QUADS);
        let (n, v, d) = (T::u32(self.tokens), T::u32(self.v), T::u32(self.d));
        let launch = |kernel, grid, threads, args| ScatterLaunch { kernel, grid, block: (threads, 1, 1), args };
        vec![
            launch(CLEAR, (quads.div_ceil(TOKEN_THREADS), 1, 1), TOKEN_THREADS, vec![counts, T::u32(quads)]),
            launch(
                COUNT,
                (self.tokens.div_ceil(COUNT_THREADS).max(1), 1, 1),
                COUNT_THREADS,
                vec![counts, starts, chunk_starts, list, idx, n, v, T::u32(self.sort_chunks())],
            ),
            launch(
                PLACE,
                (self.tokens.div_ceil(TOKEN_THREADS).max(1), 1, 1),
                TOKEN_THREADS,
                vec![counts, starts, list, idx, n, v],
            ),
            launch(
                SORT,
                (self.sum_chunks() + zero_blocks, 1, 1),
                SORT_THREADS,
                vec![list, chunk_starts, starts, idx, n, dtable, T::u32(table_quads), T::u32(self.sum_chunks())],
            ),
            launch(
                SUM,
                (self.sum_chunks(), self.d.div_ceil(SUM_THREADS), 1),
                SUM_THREADS,
                vec![dtable, dout, list, chunk_starts, d],
            ),
        ]
    }
}

/// The warp's ballot of predicate `p`.
fn ballot(k: &mut Kernel, p: Reg) -> Reg {
    let b = k.reg(RegKind::B32);
    k.op("vote.sync.ballot.b32", [b.into(), p.into(), Opnd::S("-1".into())]);
    b
}

/// `v` as lane `src` of the warp holds it.
fn shfl_idx(k: &mut Kernel, v: Reg, src: impl Into<Opnd>) -> Reg {
    let d = k.reg(RegKind::B32);
    k.op("shfl.sync.idx.b32", [d.into(), v.into(), src.into(), 31u32.into(), Opnd::S("-1".into())]);
    d
}

/// The thread's index in a one-dimensional launch of `threads`-thread blocks.
fn thread_index(k: &mut Kernel, threads: u32) -> Reg {
    let tid = k.sreg("%tid.x");
    let block = k.sreg("%ctaid.x");
    k.tri("mad.lo.u32", RegKind::B32, block, threads, tid)
}

/// A token's id from `idx[n]` as u32 (a negative id is then past any table).
fn load_id(k: &mut Kernel, idx: Reg, n: Reg) -> Reg {
    let at = k.addr_of(idx, n, 4);
    let id = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [id.into(), addr(at, 0)]);
    id
}

/// Clear: params (counts, quads); zeroes `quads` 16-byte words of the counts.
pub fn clear_kernel() -> Kernel {
    let mut k = Kernel::new("embedding_scatter_clear").with_block(TOKEN_THREADS, 1, 1);
    let counts = k.param_reg("counts", ParamTy::U64);
    let quads = k.param_reg("quads", ParamTy::U32);
    let q = thread_index(&mut k, TOKEN_THREADS);
    let live = k.setp("lt.u32", q, quads);
    let at = k.addr_of(counts, q, 16);
    let zero = k.imm_u32(0);
    k.op_if(live, false, "st.global.v4.u32", [addr(at, 0), Opnd::V(vec![zero; 4])]);
    k.ret();
    k
}

/// Count: params (counts, starts, chunk_starts, list, idx, n, v, chunks); blocks of 1024
/// threads, one token each. `counts[id] += 1` for each token with an id below v; then the last
/// block to finish (an integer ticket in `counts[v]`, which the layout ignores) lays out the list
/// ([`lay_out`]).
pub fn count_kernel() -> Kernel {
    let mut k = Kernel::new("embedding_scatter_count").with_block(COUNT_THREADS, 1, 1);
    let counts = k.param_reg("counts", ParamTy::U64);
    let starts = k.param_reg("starts", ParamTy::U64);
    let chunk_starts = k.param_reg("chunk_starts", ParamTy::U64);
    let list = k.param_reg("list", ParamTy::U64);
    let idx = k.param_reg("idx", ParamTy::U64);
    let tokens = k.param_reg("n", ParamTy::U32);
    let vocab = k.param_reg("v", ParamTy::U32);
    let chunks = k.param_reg("chunks", ParamTy::U32);
    let last_flag = k.shared("last_block", 16, 16);
    let tid = k.sreg("%tid.x");
    let n = thread_index(&mut k, COUNT_THREADS);
    let counted = k.label("counted");
    let past = k.setp("ge.u32", n, tokens);
    k.bra_if(past, false, &counted);
    let id = load_id(&mut k, idx, n);
    let real = k.setp("lt.u32", id, vocab);
    let at = k.addr_of(counts, id, 4);
    k.op_if(real, false, "red.global.add.u32", [addr(at, 0), 1u32.into()]);
    k.place(&counted);
    // Every count of this block is done (and visible) before its ticket is taken.
    k.op("fence.acq_rel.gpu", []);
    k.barrier();
    let flag = k.un("mov.u32", RegKind::B32, Opnd::S(last_flag));
    let first = k.setp("eq.u32", tid, 0u32);
    let ticketed = k.label("ticketed");
    k.bra_if(first, true, &ticketed);
    k.op("fence.acq_rel.gpu", []);
    let ta = k.addr_of(counts, vocab, 4);
    let ticket = k.reg(RegKind::B32);
    k.op("atom.global.add.u32", [ticket.into(), addr(ta, 0), 1u32.into()]);
    let blocks = k.sreg("%nctaid.x");
    let last = k.bin("sub.u32", RegKind::B32, blocks, 1u32);
    let is_last = k.setp("eq.u32", ticket, last);
    let word = k.tri("selp.b32", RegKind::B32, 1u32, 0u32, is_last);
    k.op("st.shared.u32", [addr(flag, 0), word.into()]);
    k.place(&ticketed);
    k.barrier();
    let word = k.reg(RegKind::B32);
    k.op("ld.shared.u32", [word.into(), addr(flag, 0)]);
    let done = k.label("done");
    let other = k.setp("eq.u32", word, 0u32);
    k.bra_if(other, false, &done);
    // The last block: every block's counts are in.
    k.op("fence.acq_rel.gpu", []);
    lay_out(&mut k, [counts, starts, chunk_starts, list], vocab, chunks, tid);
    k.place(&done);
    k.ret();
    k
}

/// Inclusive prefix sum of u32 `x` over the warp (five shuffles up).
fn warp_inclusive_scan(k: &mut Kernel, x: Reg, lane: Reg) -> Reg {
    let acc = k.un("mov.u32", RegKind::B32, x);
    for off in [1u32, 2, 4, 8, 16] {
        let y = k.reg(RegKind::B32);
        k.op("shfl.sync.up.b32", [y.into(), acc.into(), off.into(), 0u32.into(), Opnd::S("-1".into())]);
        let has = k.setp("ge.u32", lane, off);
        k.op_if(has, false, "add.u32", [acc.into(), acc.into(), y.into()]);
    }
    acc
}

/// Exclusive prefix sum of u32 `x` over the layout's block, and the block's total, through
/// `sums` (33 words of shared memory); three barriers, the last before `sums` may be reused.
fn block_exclusive_scan(k: &mut Kernel, x: Reg, lane: Reg, warp: Reg, sums: Reg) -> (Reg, Reg) {
    let inclusive = warp_inclusive_scan(k, x, lane);
    let last = k.setp("eq.u32", lane, 31u32);
    let slot = k.tri("mad.lo.u32", RegKind::B32, warp, 4u32, sums);
    k.op_if(last, false, "st.shared.u32", [addr(slot, 0), inclusive.into()]);
    k.barrier();
    // Warp 0 turns the warps' totals into their exclusive prefixes and the block's total.
    let lead = k.setp("eq.u32", warp, 0u32);
    let led = k.label("warp_sums_done");
    k.bra_if(lead, true, &led);
    let own = k.tri("mad.lo.u32", RegKind::B32, lane, 4u32, sums);
    let t = k.reg(RegKind::B32);
    k.op("ld.shared.u32", [t.into(), addr(own, 0)]);
    let upto = warp_inclusive_scan(k, t, lane);
    let before = k.bin("sub.u32", RegKind::B32, upto, t);
    k.op("st.shared.u32", [addr(own, 0), before.into()]);
    k.op_if(last, false, "st.shared.u32", [addr(sums, 4 * 32), upto.into()]);
    k.place(&led);
    k.barrier();
    let before = k.reg(RegKind::B32);
    k.op("ld.shared.u32", [before.into(), addr(slot, 0)]);
    let total = k.reg(RegKind::B32);
    k.op("ld.shared.u32", [total.into(), addr(sums, 4 * 32)]);
    k.barrier();
    let within = k.bin("sub.u32", RegKind::B32, inclusive, x);
    (k.bin("add.u32", RegKind::B32, before, within), total)
}

/// The list's layout, by one block of 1024 threads (the counting launch's last). Id v's segment
/// takes `w_v = c_v + (c_v > 0)` items (its positions, then its marker) from
/// `starts[v] = Σ_{u<v} w_u`; every `starts` word up to the padded V (so `starts[V]`, the list's
/// length, too) is written, the markers are written, and `chunk_starts[j]` is the first segment
/// start at or after item 32·j (the list's end past it), for `j ≤ chunks`. The counts are read
/// through L2 (`.cg`), where the other blocks' atomics left them.
fn lay_out(k: &mut Kernel, [counts, starts, chunk_starts, list]: [Reg; 4], vocab: Reg, chunks: Reg, tid: Reg) {
    let sums = k.shared("warp_sums", 4 * 33, 16);
    let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
    let sums = k.un("mov.u32", RegKind::B32, Opnd::S(sums));
    // V + 1 rounded up to 16: the words of counts and starts (the counts past V are ignored).
    let v16 = k.bin("add.u32", RegKind::B32, vocab, LAYOUT_COUNTS);
    let padded = k.bin("and.b32", RegKind::B32, v16, !(LAYOUT_COUNTS - 1));
    let carry = k.imm_u32(0);
    let tile = k.imm_u32(0);
    let top = k.label("tile");
    let tail = k.label("tail");
    k.place(&top);
    let done = k.setp("ge.u32", tile, padded);
    k.bra_if(done, false, &tail);
    let first = k.tri("mad.lo.u32", RegKind::B32, tid, LAYOUT_COUNTS, tile);
    let live = k.setp("lt.u32", first, padded);
    let ca = k.addr_of(counts, first, 4);
    let c = k.regs(RegKind::B32, LAYOUT_COUNTS as usize);
    for &r in &c {
        k.op("mov.u32", [r.into(), 0u32.into()]);
    }
    for (q, quad) in c.chunks(4).enumerate() {
        k.op_if(live, false, "ld.global.cg.v4.u32", [Opnd::V(quad.to_vec()), addr(ca, 16 * q as i64)]);
    }
    let mut widths = vec![];
    for (e, &ce) in c.iter().enumerate() {
        let at = k.bin("add.u32", RegKind::B32, first, e as u32);
        let real = k.setp("lt.u32", at, vocab);
        k.op("selp.b32", [ce.into(), ce.into(), 0u32.into(), real.into()]);
        let used = k.bin("min.u32", RegKind::B32, ce, 1u32);
        widths.push(k.bin("add.u32", RegKind::B32, ce, used));
    }
    let mut own = widths[0];
    for &w in &widths[1..] {
        own = k.bin("add.u32", RegKind::B32, own, w);
    }
    let (before, tile_total) = block_exclusive_scan(k, own, lane, warp, sums);
    let s = k.bin("add.u32", RegKind::B32, carry, before);
    let mut seg_starts = vec![];
    for (e, (&ce, &w)) in c.iter().zip(&widths).enumerate() {
        seg_starts.push(k.un("mov.u32", RegKind::B32, s));
        let next = k.label("next_id");
        let unused = k.setp("eq.u32", ce, 0u32);
        k.bra_if(unused, false, &next);
        // The marker after the id's positions.
        let marker_at = k.bin("add.u32", RegKind::B32, s, ce);
        let id = k.bin("add.u32", RegKind::B32, first, e as u32);
        let marker = k.bin("or.b32", RegKind::B32, id, MARK);
        let la = k.addr_of(list, marker_at, 4);
        k.op("st.global.u32", [addr(la, 0), marker.into()]);
        // Chunks whose first item lies in the segment: j from ceil(s / 32) while 32·j ≤ marker_at.
        let after = k.bin("add.u32", RegKind::B32, marker_at, 1u32);
        let up = k.bin("add.u32", RegKind::B32, s, SORT_CHUNK - 1);
        let j = k.bin("shr.u32", RegKind::B32, up, SORT_CHUNK.trailing_zeros());
        let chunk_top = k.label("chunk");
        k.place(&chunk_top);
        let item = k.bin("shl.b32", RegKind::B32, j, SORT_CHUNK.trailing_zeros());
        let beyond = k.setp("gt.u32", item, marker_at);
        k.bra_if(beyond, false, &next);
        let at_start = k.setp("eq.u32", item, s);
        let begins = k.tri("selp.b32", RegKind::B32, s, after, at_start);
        let ja = k.addr_of(chunk_starts, j, 4);
        k.op("st.global.u32", [addr(ja, 0), begins.into()]);
        k.op("add.u32", [j.into(), j.into(), 1u32.into()]);
        k.bra(&chunk_top);
        k.place(&next);
        k.op("add.u32", [s.into(), s.into(), w.into()]);
    }
    let sa = k.addr_of(starts, first, 4);
    for (q, quad) in seg_starts.chunks(4).enumerate() {
        k.op_if(live, false, "st.global.v4.u32", [addr(sa, 16 * q as i64), Opnd::V(quad.to_vec())]);
    }
    k.op("add.u32", [carry.into(), carry.into(), tile_total.into()]);
    k.op("add.u32", [tile.into(), tile.into(), (COUNT_THREADS * LAYOUT_COUNTS).into()]);
    k.bra(&top);
    k.place(&tail);
    // Chunks that start at or past the list's end (carry is now its length) begin there.
    let up = k.bin("add.u32", RegKind::B32, carry, SORT_CHUNK - 1);
    let past = k.bin("shr.u32", RegKind::B32, up, SORT_CHUNK.trailing_zeros());
    let j0 = k.bin("add.u32", RegKind::B32, past, tid);
    let bound = k.bin("add.u32", RegKind::B32, chunks, 1u32);
    k.strided_loop(j0, bound, COUNT_THREADS, ("end_chunks", "end_chunks_done"), |k, j| {
        let ja = k.addr_of(chunk_starts, j, 4);
        k.op("st.global.u32", [addr(ja, 0), carry.into()]);
    });
}

/// Place: params (counts, starts, list, idx, n, v); each token with an id below v takes slot
/// `starts[id] + counts[id] - 1` of its segment, decrementing the count atomically (so the
/// counts end at zero, and a segment's positions in any order).
pub fn place_kernel() -> Kernel {
    let mut k = Kernel::new("embedding_scatter_place").with_block(TOKEN_THREADS, 1, 1);
    let counts = k.param_reg("counts", ParamTy::U64);
    let starts = k.param_reg("starts", ParamTy::U64);
    let list = k.param_reg("list", ParamTy::U64);
    let idx = k.param_reg("idx", ParamTy::U64);
    let tokens = k.param_reg("n", ParamTy::U32);
    let vocab = k.param_reg("v", ParamTy::U32);
    let n = thread_index(&mut k, TOKEN_THREADS);
    let end = k.label("end");
    let past = k.setp("ge.u32", n, tokens);
    k.bra_if(past, false, &end);
    let id = load_id(&mut k, idx, n);
    let outside = k.setp("ge.u32", id, vocab);
    k.bra_if(outside, false, &end);
    let ca = k.addr_of(counts, id, 4);
    let left = k.reg(RegKind::B32);
    k.op("atom.global.add.u32", [left.into(), addr(ca, 0), u32::MAX.into()]);
    let sa = k.addr_of(starts, id, 4);
    let s = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [s.into(), addr(sa, 0)]);
    let after = k.bin("add.u32", RegKind::B32, s, left);
    let slot = k.bin("sub.u32", RegKind::B32, after, 1u32);
    let la = k.addr_of(list, slot, 4);
    k.op("st.global.u32", [addr(la, 0), n.into()]);
    k.place(&end);
    k.ret();
    k
}

/// Sort: params (list, chunk_starts, starts, idx, n, table, quads, sorting); warp w of block
/// b < sorting puts the segments that start in chunk 4·b + w in ascending order, in place; the
/// blocks past them zero the first `quads` 16-byte words of the table (the lowering's gradient
/// before its sums are added: their stores overlap the sorting warps' latencies).
///
/// A window is the 32 items from a segment start, one a lane. Where it holds a marker, every
/// segment that ends in it is ranked in registers: lane l's segment spans the lanes after the
/// last marker below l up to the first marker at or above l, and its slot is that span's first
/// lane plus the number of the span's positions smaller than its own. The next window starts
/// after the last marker. Where it holds none, the segment has 32 positions or more: the warp
/// reads idx[0..N) in order and writes each position whose id matches at the next slot.
pub fn sort_kernel() -> Kernel {
    let mut k = Kernel::new("embedding_scatter_sort").with_block(SORT_THREADS, 1, 1);
    let list = k.param_reg("list", ParamTy::U64);
    let chunk_starts = k.param_reg("chunk_starts", ParamTy::U64);
    let starts = k.param_reg("starts", ParamTy::U64);
    let idx = k.param_reg("idx", ParamTy::U64);
    let tokens = k.param_reg("n", ParamTy::U32);
    let table = k.param_reg("table", ParamTy::U64);
    let quads = k.param_reg("quads", ParamTy::U32);
    let sorting = k.param_reg("sorting", ParamTy::U32);
    let tid = k.sreg("%tid.x");
    let block = k.sreg("%ctaid.x");
    let zeroing = k.label("zeroing");
    let sorts = k.setp("lt.u32", block, sorting);
    k.bra_if(sorts, true, &zeroing);
    let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
    let below_lanes = k.sreg("%lanemask_lt");
    let one = k.imm_u32(1);
    let chunk = k.tri("mad.lo.u32", RegKind::B32, block, SORT_THREADS / 32, warp);
    let ca = k.addr_of(chunk_starts, chunk, 4);
    let s = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [s.into(), addr(ca, 0)]);
    let end = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [end.into(), addr(ca, 4)]);
    let window = k.label("window");
    let long = k.label("long");
    let done = k.label("done");
    k.place(&window);
    let finished = k.setp("ge.u32", s, end);
    k.bra_if(finished, false, &done);
    let at = k.bin("add.u32", RegKind::B32, s, lane);
    let live = k.setp("lt.u32", at, end);
    let p = k.imm_u32(0);
    let la = k.addr_of(list, at, 4);
    // .cg: this launch rewrites the list (each item only by the warp that reads it).
    k.op_if(live, false, "ld.global.cg.u32", [p.into(), addr(la, 0)]);
    let marker = k.setp("ge.u32", p, MARK);
    let marks = ballot(&mut k, marker);
    let none = k.setp("eq.u32", marks, 0u32);
    k.bra_if(none, false, &long);
    // The lanes of this lane's segment: [first, end_lane), its marker at end_lane (bfind of
    // nothing is all ones: first is then 0; a lane with no marker above it is not written).
    let before = k.bin("and.b32", RegKind::B32, marks, below_lanes);
    let last_before = k.un("bfind.u32", RegKind::B32, before);
    let first = k.bin("add.u32", RegKind::B32, last_before, 1u32);
    let not_below = k.un("not.b32", RegKind::B32, below_lanes);
    let from_here = k.bin("and.b32", RegKind::B32, marks, not_below);
    let neg = k.un("neg.s32", RegKind::B32, from_here);
    let lowest = k.bin("and.b32", RegKind::B32, from_here, neg);
    let end_lane = k.un("bfind.u32", RegKind::B32, lowest);
    let upto = k.bin("shl.b32", RegKind::B32, one, end_lane);
    let below_end = k.bin("sub.u32", RegKind::B32, upto, 1u32);
    let from = k.bin("shl.b32", RegKind::B32, one, first);
    let below_first = k.bin("sub.u32", RegKind::B32, from, 1u32);
    let not_before = k.un("not.b32", RegKind::B32, below_first);
    let span = k.bin("and.b32", RegKind::B32, below_end, not_before);
    let smaller = k.imm_u32(0);
    for j in 0..32u32 {
        let q = shfl_idx(&mut k, p, j);
        let less = k.setp("lt.u32", q, p);
        k.op_if(less, false, "or.b32", [smaller.into(), smaller.into(), (1u32 << j).into()]);
    }
    let ranked = k.bin("and.b32", RegKind::B32, smaller, span);
    let rank = k.un("popc.b32", RegKind::B32, ranked);
    let closed = k.setp("ne.u32", from_here, 0u32);
    let position = k.un("not.pred", RegKind::Pred, marker);
    let write = k.bin("and.pred", RegKind::Pred, closed, position);
    let write = k.bin("and.pred", RegKind::Pred, write, live);
    let slot = k.bin("add.u32", RegKind::B32, s, first);
    let slot = k.bin("add.u32", RegKind::B32, slot, rank);
    let sa = k.addr_of(list, slot, 4);
    k.op_if(write, false, "st.global.u32", [addr(sa, 0), p.into()]);
    let last = k.un("bfind.u32", RegKind::B32, marks);
    k.op("add.u32", [s.into(), s.into(), last.into()]);
    k.op("add.u32", [s.into(), s.into(), 1u32.into()]);
    k.bra(&window);

    k.place(&long);
    // A segment of 32 positions or more: its id from its first position, its end from the next
    // id's start.
    let p0 = shfl_idx(&mut k, p, 0u32);
    let id = load_id(&mut k, idx, p0);
    let id1 = k.bin("add.u32", RegKind::B32, id, 1u32);
    let na = k.addr_of(starts, id1, 4);
    let next = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [next.into(), addr(na, 0)]);
    let slot = k.un("mov.u32", RegKind::B32, s);
    let base = k.imm_u32(0);
    let scan = k.label("scan");
    let scanned = k.label("scanned");
    k.place(&scan);
    let over = k.setp("ge.u32", base, tokens);
    k.bra_if(over, false, &scanned);
    let pos = k.bin("add.u32", RegKind::B32, base, lane);
    let ia = k.addr_of(idx, pos, 4);
    let ids: Vec<Reg> = (0..LONG_AHEAD)
        .map(|u| {
            let t = k.bin("add.u32", RegKind::B32, pos, 32 * u);
            let inside = k.setp("lt.u32", t, tokens);
            let x = k.imm_u32(u32::MAX);
            k.op_if(inside, false, "ld.global.nc.u32", [x.into(), addr(ia, 128 * u as i64)]);
            x
        })
        .collect();
    // Every ballot before any store, and a round without a match skips its stores: the branch
    // waits for all the round's loads, so ptxas issues them all first.
    let hits: Vec<Reg> = ids
        .iter()
        .map(|&x| {
            let hit = k.setp("eq.u32", x, id);
            ballot(&mut k, hit)
        })
        .collect();
    let any = k.imm_u32(0);
    for &h in &hits {
        k.op("or.b32", [any.into(), any.into(), h.into()]);
    }
    let next_round = k.label("next_round");
    let no_match = k.setp("eq.u32", any, 0u32);
    k.bra_if(no_match, false, &next_round);
    for (u, (&x, &h)) in ids.iter().zip(&hits).enumerate() {
        let hit = k.setp("eq.u32", x, id);
        let earlier = k.bin("and.b32", RegKind::B32, h, below_lanes);
        let rank = k.un("popc.b32", RegKind::B32, earlier);
        let at = k.bin("add.u32", RegKind::B32, slot, rank);
        let wa = k.addr_of(list, at, 4);
        let t = k.bin("add.u32", RegKind::B32, pos, 32 * u as u32);
        k.op_if(hit, false, "st.global.u32", [addr(wa, 0), t.into()]);
        let found = k.un("popc.b32", RegKind::B32, h);
        k.op("add.u32", [slot.into(), slot.into(), found.into()]);
    }
    k.place(&next_round);
    k.op("add.u32", [base.into(), base.into(), (32 * LONG_AHEAD).into()]);
    k.bra(&scan);
    k.place(&scanned);
    k.op("mov.u32", [s.into(), next.into()]);
    k.bra(&window);
    k.place(&done);
    k.ret();

    k.place(&zeroing);
    let z = k.bin("sub.u32", RegKind::B32, block, sorting);
    let q0 = k.tri("mad.lo.u32", RegKind::B32, z, SORT_THREADS * ZERO_QUADS, tid);
    let at = k.addr_of(table, q0, 16);
    let zero = k.imm_u32(0);
    for u in 0..ZERO_QUADS {
        let q = k.bin("add.u32", RegKind::B32, q0, SORT_THREADS * u);
        let inside = k.setp("lt.u32", q, quads);
        let row = addr(at, (16 * SORT_THREADS * u) as i64);
        k.op_if(inside, false, "st.global.v4.u32", [row, Opnd::V(vec![zero; 4])]);
    }
    k.ret();
    k
}

/// Lane l's items of a summing batch from item `k`: `k + l + 32·j` for j < 4 where below `end`,
/// else 0 (position 0: a valid row, added after the range's last marker, so never stored).
fn load_batch_items(k: &mut Kernel, items: &[Reg], list: Reg, from: Reg, lane: Reg, end: Reg) {
    let first = k.bin("add.u32", RegKind::B32, from, lane);
    let la = k.addr_of(list, first, 4);
    for (j, &item) in items.iter().enumerate() {
        let at = k.bin("add.u32", RegKind::B32, first, 32 * j as u32);
        let inside = k.setp("lt.u32", at, end);
        k.op("mov.u32", [item.into(), 0u32.into()]);
        k.op_if(inside, false, "ld.global.nc.u32", [item.into(), addr(la, 128 * j as i64)]);
    }
}

/// Sum: params (dtable, dout, list, chunk_starts, d); grid ([`SUM_CHUNK`]-item ranges of the
/// list, ⌈d/128⌉). Thread t of block (b, y) walks, for column `128·y + t`, the segments that
/// start in items [128·b, 128·b + 128) (the last may run on past them): per batch of
/// [`SUM_BATCH`] items, the warp's lanes turn their four items each into row addresses (a
/// position's row of dout, a marker's row of dtable) in shared memory and ballot the markers;
/// every thread loads its column of all 128 rows, then adds them in order: `acc = acc + x`, and
/// at a marker `acc + old` is stored and acc restarts at zero. A group of 32 items without a
/// marker is 32 plain adds.
pub fn sum_kernel() -> Kernel {
    let mut k = Kernel::new("embedding_scatter_add").with_block(SUM_THREADS, 1, 1);
    let dtable = k.param_reg("dtable", ParamTy::U64);
    let dout = k.param_reg("dout", ParamTy::U64);
    let list = k.param_reg("list", ParamTy::U64);
    let chunk_starts = k.param_reg("chunk_starts", ParamTy::U64);
    let d = k.param_reg("d", ParamTy::U32);
    let per_lane = (SUM_BATCH / 32) as usize;
    let table = k.shared("row_addresses", 8 * SUM_BATCH * (SUM_THREADS / 32), 16);
    let tid = k.sreg("%tid.x");
    let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
    let bx = k.sreg("%ctaid.x");
    let by = k.sreg("%ctaid.y");
    let quit = k.label("quit");
    let block_col = k.bin("mul.lo.u32", RegKind::B32, by, SUM_THREADS);
    let warp_col = k.tri("mad.lo.u32", RegKind::B32, warp, 32u32, block_col);
    let idle = k.setp("ge.u32", warp_col, d);
    k.bra_if(idle, false, &quit);
    let col = k.bin("add.u32", RegKind::B32, block_col, tid);
    let col_ok = k.setp("lt.u32", col, d);
    // Lanes past the row load its last column (in bounds) and store nothing.
    let last_col = k.bin("sub.u32", RegKind::B32, d, 1u32);
    let load_col = k.bin("min.u32", RegKind::B32, col, last_col);
    let col_bytes = k.reg(RegKind::B64);
    k.op("mul.wide.u32", [col_bytes.into(), load_col.into(), 4u32.into()]);
    let row_bytes = k.bin("shl.b32", RegKind::B32, d, 2u32);
    let first_chunk = k.bin("mul.lo.u32", RegKind::B32, bx, SUM_CHUNK / SORT_CHUNK);
    let ca = k.addr_of(chunk_starts, first_chunk, 4);
    let at = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [at.into(), addr(ca, 0)]);
    let end = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [end.into(), addr(ca, 4 * (SUM_CHUNK / SORT_CHUNK) as i64)]);
    let empty = k.setp("ge.u32", at, end);
    k.bra_if(empty, false, &quit);
    let tbase = k.un("mov.u32", RegKind::B32, Opnd::S(table));
    let wtable = k.tri("mad.lo.u32", RegKind::B32, warp, 8 * SUM_BATCH, tbase);
    let lane_slot = k.tri("mad.lo.u32", RegKind::B32, lane, 8u32, wtable);
    let acc = k.imm_f32(0.0);
    let items = k.regs(RegKind::B32, per_lane);
    load_batch_items(&mut k, &items, list, at, lane, end);
    let batch = k.label("batch");
    k.place(&batch);
    // The previous batch's stores have read the table.
    k.op("bar.warp.sync", [Opnd::S("-1".into())]);
    let mut marks = vec![];
    for (j, &item) in items.iter().enumerate() {
        let marker = k.setp("ge.u32", item, MARK);
        marks.push(ballot(&mut k, marker));
        let row = k.bin("and.b32", RegKind::B32, item, !MARK);
        let offset = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [offset.into(), row.into(), row_bytes.into()]);
        let base = k.tri("selp.b64", RegKind::B64, dtable, dout, marker);
        let row_at = k.bin("add.s64", RegKind::B64, base, offset);
        k.op("st.shared.u64", [addr(lane_slot, 256 * j as i64), row_at.into()]);
    }
    k.op("bar.warp.sync", [Opnd::S("-1".into())]);
    // Item i's row at this thread's column. A marker's store reads the table again, `volatile`
    // so that ptxas does not keep all 128 addresses of the loads alive until then (it spilled).
    let row_address = |k: &mut Kernel, i: u32, load: &str| {
        let row_at = k.reg(RegKind::B64);
        k.op(load, [row_at.into(), addr(wtable, 8 * i as i64)]);
        k.bin("add.s64", RegKind::B64, row_at, col_bytes)
    };
    let xs: Vec<Reg> = (0..SUM_BATCH)
        .map(|i| {
            let ga = row_address(&mut k, i, "ld.shared.u64");
            let x = k.reg(RegKind::F32);
            k.op("ld.global.f32", [x.into(), addr(ga, 0)]);
            x
        })
        .collect();
    k.op("add.u32", [at.into(), at.into(), SUM_BATCH.into()]);
    load_batch_items(&mut k, &items, list, at, lane, end);
    for (j, &mark) in marks.iter().enumerate() {
        let mixed = k.label("mixed");
        let group_done = k.label("group_done");
        let group = &xs[32 * j..32 * j + 32];
        let any = k.setp("ne.u32", mark, 0u32);
        k.bra_if(any, false, &mixed);
        for &x in group {
            k.op("add.rn.f32", [acc.into(), acc.into(), x.into()]);
        }
        k.bra(&group_done);
        k.place(&mixed);
        for (b, &x) in group.iter().enumerate() {
            // For a marker x is the row's old value: acc + old is the reference's old += acc.
            let t = k.bin("add.rn.f32", RegKind::F32, acc, x);
            let bit = k.bin("and.b32", RegKind::B32, mark, 1u32 << b);
            let ends = k.setp("ne.u32", bit, 0u32);
            k.op("selp.f32", [acc.into(), 0.0f32.into(), t.into(), ends.into()]);
            let kept = k.label("kept");
            k.bra_if(ends, true, &kept);
            let ga = row_address(&mut k, 32 * j as u32 + b as u32, "ld.volatile.shared.u64");
            k.op_if(col_ok, false, "st.global.f32", [addr(ga, 0), t.into()]);
            k.place(&kept);
        }
        k.place(&group_done);
    }
    let more = k.setp("lt.u32", at, end);
    k.bra_if(more, false, &batch);
    k.place(&quit);
    k.ret();
    k
}

/// The scatter-add's kernels, in the order [`ScatterAdd::launches`] numbers them.
pub fn scatter_add_kernels() -> Vec<Kernel> {
    vec![clear_kernel(), count_kernel(), place_kernel(), sort_kernel(), sum_kernel()]
}

fn check_d(d: u32) -> Result<()> {
    if d == 0 || !d.is_multiple_of(4) {
        bail!("embedding: row width {d} must be a positive multiple of 4");
    }
    Ok(())
}

/// The gather's arguments: out, the table `[v, d]`, the ids, then v and d.
pub fn gather_arguments<T: ScalarArg>([out, table, idx]: [T; 3], v: u32, d: u32) -> Vec<T> {
    vec![out, table, idx, T::u32(v), T::u32(d)]
}

/// `out[n] = table[idx[n]]` for `n < tokens`; table `[v, d]` f32, idx i32.
#[allow(clippy::too_many_arguments)]
pub fn gather(gpu: &Gpu, f: &Function, out: u64, table: u64, idx: u64, tokens: u32, v: u32, d: u32) -> Result<()> {
    check_d(d)?;
    gpu.launch(f, LaunchConfig::linear(tokens, THREADS), &gather_arguments([out, table, idx].map(Arg::U64), v, d))
}

/// [`scatter_add_kernels`], loaded.
pub fn load_scatter_add(gpu: &Gpu) -> Result<Vec<Function>> {
    scatter_add_kernels().iter().map(|k| gpu.load(k)).collect()
}

/// `dtable[v] += Σ dout[n]` over tokens with `idx[n] = v` (the table zeroed first where
/// `plan.zero_table`), deterministically: `plan`'s launches, with `fs` from [`load_scatter_add`]
/// and `scratch` pointing at [`ScatterAdd::scratch_bytes`] of device memory (any contents).
pub fn scatter_add(gpu: &Gpu, fs: &[Function], plan: &ScatterAdd, pointers: [u64; 3], scratch: u64) -> Result<()> {
    if fs.len() != SUM + 1 {
        bail!("embedding scatter-add: {} kernels given, it launches {}", fs.len(), SUM + 1);
    }
    for l in plan.launches(pointers.map(Arg::U64), |o| Arg::U64(scratch + o as u64)) {
        gpu.launch(&fs[l.kernel], LaunchConfig { grid: l.grid, block: l.block, shared_bytes: 0 }, &l.args)?;
    }
    Ok(())
}

/// CPU reference of the gather.
pub fn gather_reference(table: &[f32], idx: &[i32], v: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0.0; idx.len() * d];
    for (n, &t) in idx.iter().enumerate() {
        if t >= 0 && (t as usize) < v {
            out[n * d..(n + 1) * d].copy_from_slice(&table[t as usize * d..(t as usize + 1) * d]);
        }
    }
    out
}

/// CPU reference of the scatter-add: same order of additions as the kernel.
/// Each row's sum is formed over its tokens in order, then added to the row once.
pub fn scatter_add_reference(dtable: &mut [f32], dout: &[f32], idx: &[i32], v: usize, d: usize) {
    let mut acc = vec![0.0f32; v * d];
    let mut used = vec![false; v];
    for (n, &t) in idx.iter().enumerate() {
        if t >= 0 && (t as usize) < v {
            let t = t as usize;
            used[t] = true;
            for j in 0..d {
                acc[t * d + j] += dout[n * d + j];
            }
        }
    }
    for r in 0..v {
        if used[r] {
            for j in 0..d {
                dtable[r * d + j] += acc[r * d + j];
            }
        }
    }
}

/// Every kernel of the family: the gather, then [`scatter_add_kernels`].
pub fn kernels() -> Vec<Kernel> {
    let mut v = vec![gather_kernel()];
    v.extend(scatter_add_kernels());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each launch's arguments fill exactly its kernel's parameters, in order and of their types.
    #[test]
    fn arguments_match_the_kernels_parameters() {
        use crate::kernels::arg_types;
        let types = |k: &Kernel| k.params.iter().map(|p| p.ty).collect::<Vec<_>>();
        assert_eq!(arg_types(&gather_arguments([Arg::U64(0); 3], 8, 4)), types(&gather_kernel()));
        let kernels = scatter_add_kernels();
        let plan = ScatterAdd::new(8, 4, 2).unwrap();
        let launches = plan.launches([Arg::U64(0); 3], |o| Arg::U64(o as u64));
        assert_eq!(launches.iter().map(|l| l.kernel).collect::<Vec<_>>(), (0..kernels.len()).collect::<Vec<_>>());
        for l in &launches {
            assert_eq!(arg_types(&l.args), types(&kernels[l.kernel]), "{}", kernels[l.kernel].name);
            assert_eq!(Some(l.block.0), kernels[l.kernel].block_threads(), "{}", kernels[l.kernel].name);
        }
    }

    /// GPT-2's shape: five launches, a list of N + min(V, N) items, half a megabyte of scratch;
    /// zeroing the table adds 2,358 blocks to the sorting launch.
    #[test]
    fn gpt2s_launches_and_scratch() {
        let plan = ScatterAdd::new(50_304, 768, 16_384).unwrap();
        let grids = |plan: ScatterAdd| {
            plan.launches([0u64; 3].map(Arg::U64), |o| Arg::U64(o as u64)).iter().map(|l| l.grid).collect::<Vec<_>>()
        };
        assert_eq!(grids(plan), [(50, 1, 1), (16, 1, 1), (64, 1, 1), (256, 1, 1), (256, 6, 1)]);
        assert_eq!(grids(plan.zeroing_table())[3], (256 + 2_358, 1, 1));
        assert_eq!(plan.scratch_bytes(), 2 * 4 * 50_320 + 4 * 1028 + 4 * 32_768);
    }

    #[test]
    fn kernels_render() {
        for k in kernels() {
            k.check_budget().unwrap();
            let t = k.render();
            assert!(!t.contains(".f32 [") || !t.contains("atom."), "{}: no float atomics", k.name);
            assert!(!t.contains("atom.global.add.f32") && !t.contains("red.global.add.f32"), "{}", k.name);
        }
        let sum = sum_kernel().render();
        assert!(sum.contains(".entry embedding_scatter_add("));
        assert!(sum.contains("add.rn.f32") && !sum.contains("fma") && !sum.contains("atom."));
        assert_eq!(sum.matches("ld.global.f32").count(), SUM_BATCH as usize);
        assert!(sum.contains(".shared .align 16 .b8 row_addresses[4096];"));
        assert!(count_kernel().render().contains("red.global.add.u32"));
        assert!(place_kernel().render().contains("atom.global.add.u32"));
        let sort = sort_kernel().render();
        assert!(sort.contains("vote.sync.ballot.b32") && sort.contains("shfl.sync.idx.b32"));
    }

    #[test]
    fn scatter_reference_sums_repeated_rows() {
        let mut dt = vec![1.0f32; 3 * 4];
        let dout: Vec<f32> = (0..16).map(|i| i as f32).collect();
        scatter_add_reference(&mut dt, &dout, &[2, 0, 2, 7], 3, 4);
        assert_eq!(&dt[0..4], &[5.0, 6.0, 7.0, 8.0]);
        assert_eq!(&dt[4..8], &[1.0; 4]);
        assert_eq!(&dt[8..12], &[1.0 + 0.0 + 8.0, 1.0 + 1.0 + 9.0, 1.0 + 2.0 + 10.0, 1.0 + 3.0 + 11.0]);
    }

    /// PTX's `bfind.u32`: the highest set bit's index, all ones for zero.
    fn bfind(x: u32) -> u32 {
        if x == 0 {
            u32::MAX
        } else {
            31 - x.leading_zeros()
        }
    }

    /// PTX's `shl.b32`: shifts of 32 or more give zero.
    fn shl(x: u32, by: u32) -> u32 {
        if by >= 32 {
            0
        } else {
            x << by
        }
    }

    /// The sorting warp of `chunk`, as [`sort_kernel`] computes it lane by lane.
    fn sort_warp(list: &mut [u32], chunk_starts: &[u32], starts: &[u32], idx: &[i32], chunk: usize) {
        let (mut s, end) = (chunk_starts[chunk], chunk_starts[chunk + 1]);
        while s < end {
            let p: Vec<u32> = (0..32).map(|l| if s + l < end { list[(s + l) as usize] } else { 0 }).collect();
            let marks = (0..32).filter(|&l| p[l] >= MARK).fold(0u32, |m, l| m | 1 << l);
            if marks == 0 {
                let id = idx[p[0] as usize] as u32;
                let next = starts[id as usize + 1];
                let mut slot = s;
                for base in (0..idx.len()).step_by(32 * LONG_AHEAD as usize) {
                    for u in 0..LONG_AHEAD as usize {
                        let at = |l: usize| base + 32 * u + l;
                        let x: Vec<u32> =
                            (0..32).map(|l| if at(l) < idx.len() { idx[at(l)] as u32 } else { u32::MAX }).collect();
                        let hits = (0..32).filter(|&l| x[l] == id).fold(0u32, |m, l| m | 1 << l);
                        for l in (0..32).filter(|&l| hits >> l & 1 == 1) {
                            list[(slot + (hits & ((1u32 << l) - 1)).count_ones()) as usize] = at(l) as u32;
                        }
                        slot += hits.count_ones();
                    }
                }
                assert_eq!(slot + 1, next, "a long segment's positions then its marker");
                s = next;
                continue;
            }
            let mut writes = vec![];
            for l in 0..32u32 {
                let below_lanes = (1u32 << l) - 1;
                let first = bfind(marks & below_lanes).wrapping_add(1);
                let from_here = marks & !below_lanes;
                let end_lane = bfind(from_here & from_here.wrapping_neg());
                let span = shl(1, end_lane).wrapping_sub(1) & !shl(1, first).wrapping_sub(1);
                let me = p[l as usize];
                let smaller = (0..32).filter(|&j| p[j] < me).fold(0u32, |m, j| m | 1 << j);
                let rank = (smaller & span).count_ones();
                if from_here != 0 && me < MARK && s + l < end {
                    writes.push((s + first + rank, me));
                }
            }
            // The lanes' loads all precede their stores.
            for (at, x) in writes {
                list[at as usize] = x;
            }
            s += bfind(marks) + 1;
        }
    }

    /// The launches of `plan` on the CPU, in their data layout, with the tokens placed in the
    /// order `placing` (a permutation of the positions: the GPU's atomics give any), and the
    /// scratch region full of garbage beforehand.
    fn model(plan: ScatterAdd, dtable: &mut [f32], dout: &[f32], idx: &[i32], placing: &[usize]) {
        let (v, d) = (plan.v as usize, plan.d as usize);
        let id = |n: usize| idx[n] as u32;
        let padded = plan.padded_v();
        let garbage = 0x5A5A_5A5Au32;
        // Clear, count, and each counting block's ticket in counts[v].
        let mut counts = vec![0u32; padded];
        for n in 0..idx.len() {
            if id(n) < v as u32 {
                counts[id(n) as usize] += 1;
            }
        }
        counts[v] = idx.len().div_ceil(COUNT_THREADS as usize).max(1) as u32;
        // Layout, by the last counting block.
        let chunks = plan.sort_chunks() as usize;
        let mut starts = vec![garbage; padded];
        let mut chunk_starts = vec![garbage; chunks + 1];
        let mut list = vec![garbage; plan.list_len().max(1)];
        let mut s = 0u32;
        for (u, &c) in counts.iter().enumerate() {
            let c = if u < v { c } else { 0 };
            starts[u] = s;
            if c > 0 {
                let marker_at = s + c;
                list[marker_at as usize] = u as u32 | MARK;
                let mut j = s.div_ceil(SORT_CHUNK);
                while j * SORT_CHUNK <= marker_at {
                    chunk_starts[j as usize] = if j * SORT_CHUNK == s { s } else { marker_at + 1 };
                    j += 1;
                }
            }
            s += c + c.min(1);
        }
        for start in &mut chunk_starts[s.div_ceil(SORT_CHUNK) as usize..] {
            *start = s;
        }
        assert!(chunk_starts.iter().all(|&c| c != garbage) && starts[v] == s);
        assert!(chunk_starts.windows(2).all(|w| w[0] <= w[1]));
        // Place, in the given order.
        for &n in placing {
            if id(n) < v as u32 {
                let u = id(n) as usize;
                let left = counts[u];
                counts[u] -= 1;
                list[(starts[u] + left - 1) as usize] = n as u32;
            }
        }
        assert!(counts.iter().take(v).all(|&c| c == 0));
        // Sort, warp by warp (each writes only its own segments), and zero the table.
        for chunk in 0..chunks {
            sort_warp(&mut list, &chunk_starts, &starts, idx, chunk);
        }
        if plan.zero_table {
            dtable.fill(0.0);
        }
        for u in 0..v {
            let (a, b) = (starts[u] as usize, starts[u + 1] as usize);
            if b > a {
                let seg = &list[a..b - 1];
                assert!(seg.windows(2).all(|w| w[0] < w[1]) && seg.iter().all(|&n| id(n as usize) == u as u32));
                assert_eq!(list[b - 1], u as u32 | MARK);
            }
        }
        // Sum: per block and column, the batches' loads first, then their adds in order.
        let load = |dtable: &[f32], item: u32, col: usize| {
            if item >= MARK {
                dtable[(item & !MARK) as usize * d + col]
            } else {
                dout[item as usize * d + col]
            }
        };
        for b in 0..plan.sum_chunks() as usize {
            let per = (SUM_CHUNK / SORT_CHUNK) as usize;
            let (begin, end) = (chunk_starts[per * b], chunk_starts[per * b + per]);
            for col in 0..d.next_multiple_of(32) {
                let load_col = col.min(d - 1);
                let mut acc = 0.0f32;
                let mut at = begin;
                while at < end {
                    let items: Vec<u32> =
                        (0..SUM_BATCH).map(|i| if at + i < end { list[(at + i) as usize] } else { 0 }).collect();
                    let xs: Vec<f32> = items.iter().map(|&item| load(dtable, item, load_col)).collect();
                    for (&item, &x) in items.iter().zip(&xs) {
                        let t = acc + x;
                        if item >= MARK {
                            if col < d {
                                dtable[(item & !MARK) as usize * d + col] = t;
                            }
                            acc = 0.0;
                        } else {
                            acc = t;
                        }
                    }
                    at += SUM_BATCH;
                }
            }
        }
    }

    /// A small generator of test data (splitmix64).
    struct Mix(u64);

    impl Mix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        /// Values over twelve binades, so that another order of addition gives other bits.
        fn value(&mut self) -> f32 {
            let m = (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            m * (2.0f32).powi(self.below(12) as i32 - 6)
        }

        fn shuffled(&mut self, n: usize) -> Vec<usize> {
            let mut p: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                p.swap(i, self.below(i + 1));
            }
            p
        }
    }

    /// The model against the reference, bit for bit, with the tokens placed forwards, backwards
    /// and shuffled; added to a table, and into a zeroed one.
    fn check(idx: &[i32], v: usize, d: usize, mix: &mut Mix) {
        let n = idx.len();
        let dout: Vec<f32> = (0..n * d).map(|_| mix.value()).collect();
        let table: Vec<f32> = (0..v * d).map(|_| mix.value()).collect();
        let plan = ScatterAdd::new(v as u32, d as u32, n as u32).unwrap();
        for plan in [plan, plan.zeroing_table()] {
            let start = if plan.zero_table { vec![0.0; v * d] } else { table.clone() };
            let mut want = start;
            scatter_add_reference(&mut want, &dout, idx, v, d);
            for placing in [(0..n).collect(), (0..n).rev().collect(), mix.shuffled(n)] {
                let mut got = table.clone();
                model(plan, &mut got, &dout, idx, &placing);
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "v {v} d {d} n {n} zeroing {}", plan.zero_table);
            }
        }
    }

    #[test]
    fn the_launches_model_sums_as_the_reference() {
        let mut mix = Mix(7);
        for (v, d, n) in [(65, 8, 29), (300, 68, 700), (1, 4, 50), (7, 12, 1), (1000, 260, 333), (50, 4, 5000)] {
            let mut idx: Vec<i32> = (0..n).map(|_| mix.below(v) as i32).collect();
            // A frequent id, an id past the table and a negative one.
            for i in (0..n).step_by(7) {
                idx[i] = 3.min(v as i32 - 1);
            }
            idx[n / 2] = -1;
            idx[n / 3] = v as i32;
            check(&idx, v, d, &mut mix);
        }
        // Every token one id; no token in the table.
        check(&vec![4; 3000], 10, 4, &mut mix);
        check(&[-1, 5, 9], 5, 8, &mut mix);
    }

    /// Segments of 30 to 65 positions, and 200, from every offset within a window: the ranking,
    /// the windows' ends and the switch to reading all indices at 32.
    #[test]
    fn the_launches_model_sorts_segments_at_every_boundary() {
        let mut mix = Mix(11);
        for c in [30, 31, 32, 33, 63, 64, 65, 200] {
            for shift in 0..34 {
                let mut idx: Vec<i32> = (0..shift).map(|i| 100 + i).collect();
                let mut run = vec![];
                for i in 0..c {
                    run.push(5);
                    if i % 3 == 0 {
                        run.push(200 + i);
                    }
                }
                idx.extend(run);
                idx.extend((0..40).map(|_| mix.below(400) as i32));
                check(&idx, 400, 4, &mut mix);
            }
        }
    }
}
