//! Sum, mean and max over any set of axes, in a fixed order.
//!
//! Why: reductions carry a step's loss (the mean over positions), its gradient norm (a sum of
//! squares over every gradient, up to 6.3M elements for Coppelius's embedding) and the
//! pullbacks of broadcasts. Float atomics would make their last bits depend on scheduling, and
//! §9 asks runs to repeat bit for bit; one block per output would leave a 6.3M-element sum to a
//! single multiprocessor. So the reduced elements of each output are cut into fixed chunks of
//! [`CHUNK`]: one block per (output, chunk) sums its chunk (each thread a fixed strided subset,
//! then the block's fixed-order tree), and when there is more than one chunk a second kernel
//! sums the chunk partials of each output in chunk order. The result depends only on the
//! shapes, never on the GPU or the timing.
//!
//! How: the input's axes are split into kept axes (the output's, in order) and reduced axes,
//! each set collapsed where contiguous; shapes and strides are immediates. `Mean` divides the
//! final sum by the count (as the CPU reference does); `Max` starts from −∞.
//!
//! Short reductions (at most [`WARP_ROW_MAX`] elements an output, off the column path) take a
//! warp an output instead of a block, and keep the block's order and bits: each lane stands for
//! eight of the block's threads, adds their elements in order, and runs the block's eight warp
//! butterflies and its sum of their results itself. Why: a block of 256 threads an output left
//! most of them idle and paid a block-wide pass through shared memory for 190 elements
//! (Diakosmos's sums over each group's 190 phasors, 917,504 outputs at 64 windows, took 792 µs
//! for 697 MB); and a new order of these sums had moved Diakosmos's small gradients (a gate's
//! logits, summed over every position) past the gradient gate's bounds on the H200.
//!
//! Column sums (a bias's gradient: the rows of a [rows, width] f32 tensor summed into a
//! [width] vector) take their own first pass: with the reduced axis outer, one block per output
//! would have every thread's loads a row apart, uncoalesced. There a block covers a tile of
//! [`TILE_COLUMNS`] adjacent columns and a chunk of up to [`COLUMN_CHUNK_ROWS`] rows: a warp reads one row's 32
//! consecutive floats (128 bytes), its [`ROW_GROUPS`] warps take every eighth row, each thread
//! sums its rows in order, then the block adds the row groups' sums in a fixed tree. The chunk
//! partials are summed by the same finishing kernel, in chunk order.

use alpha_ir::{DType, Reduce};
use anyhow::{bail, Result};

use crate::kernels::pointwise::{contiguous_strides, element_offsets, load_f32, store_f32};
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

/// Threads per block.
pub const THREADS: u32 = 256;

/// A first pass's body over the values an element closure gives ([`Reduction::pass`]).
type Pass = fn(&Reduction, &mut Kernel, [Reg; 2], &mut dyn FnMut(&mut Kernel, Reg) -> Reg);
/// Elements an output of the warp path's reductions at most: 32 a lane.
pub const WARP_ROW_MAX: usize = 1024;
/// Outputs a block of the warp path: a warp each.
const WARP_ROWS: u32 = THREADS / 32;
/// Outputs from which short reductions take the warp path.
pub const WARP_PATH_OUTPUTS: usize = 64;
/// Reduced elements per block.
pub const CHUNK: usize = 8192;
/// Adjacent columns per block of the column path (one warp's coalesced 128-byte row segment).
pub const TILE_COLUMNS: u32 = 32;
/// Row groups (warps) per block of the column path.
pub const ROW_GROUPS: u32 = THREADS / TILE_COLUMNS;
/// Rows per block of the column path, at most: a thread then sums 64 rows.
pub const COLUMN_CHUNK_ROWS: usize = 512;
/// Rows per block of the column path, at least (a thread's 8 rows, two unrolled steps).
pub const MIN_COLUMN_CHUNK_ROWS: usize = 64;
/// Blocks the column path aims for when the rows are few (two per multiprocessor of an H200),
/// by shortening its chunks; a function of the shape alone, so results still repeat anywhere.
pub const COLUMN_BLOCKS: usize = 264;
/// Rows a thread of the column path loads before adding them (in row order, so the sum is
/// the same as one at a time): loads in flight to cover the memory's latency.
pub const COLUMN_UNROLL: u32 = 4;

/// One reduction, as lowered.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduction {
    pub kind: Reduce,
    /// Kept axes: sizes and input strides (elements), outer to inner.
    pub kept: (Vec<u64>, Vec<u64>),
    /// Reduced axes: sizes and input strides.
    pub reduced: (Vec<u64>, Vec<u64>),
    pub in_dtype: DType,
    pub out_dtype: DType,
    /// Whether the column path runs (see the module's doc): Sum or Mean of an f32 tensor whose
    /// kept axes collapse to one contiguous inner axis and reduced axes to one outer axis.
    pub columns: bool,
}

fn collapse(shape: &[u64], strides: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let (mut s, mut st): (Vec<u64>, Vec<u64>) = (vec![], vec![]);
    for (&n, &t) in shape.iter().zip(strides) {
        if n == 1 {
            continue;
        }
        if let (Some(ls), Some(lt)) = (s.last_mut(), st.last_mut()) {
            if *lt == t * n {
                *ls *= n;
                *lt = t;
                continue;
            }
        }
        s.push(n);
        st.push(t);
    }
    (s, st)
}

impl Reduction {
    pub fn new(kind: Reduce, shape: &[usize], axes: &[usize], in_dtype: DType, out_dtype: DType) -> Result<Self> {
        if let Some(a) = axes.iter().find(|&&a| a >= shape.len()) {
            bail!("reduce: axis {a} outside a rank-{} tensor", shape.len());
        }
        let st = contiguous_strides(shape);
        let pick = |keep: bool| {
            let (s, t): (Vec<u64>, Vec<u64>) =
                (0..shape.len()).filter(|a| axes.contains(a) != keep).map(|a| (shape[a] as u64, st[a])).unzip();
            collapse(&s, &t)
        };
        let (kept, reduced) = (pick(true), pick(false));
        let columns = matches!(kind, Reduce::Sum | Reduce::Mean)
            && in_dtype == DType::F32
            && kept.1 == [1]
            && reduced.1 == kept.0;
        Ok(Reduction { kind, kept, reduced, in_dtype, out_dtype, columns })
    }

    /// The first pass's grid: (outputs, chunks), (column tiles, row chunks) on the column path,
    /// or a block each [`WARP_ROWS`] outputs on the warp path.
    pub fn grid(&self) -> (u32, u32, u32) {
        if self.warp_rows() {
            return (self.outputs().div_ceil(WARP_ROWS as usize) as u32, 1, 1);
        }
        let tiles = if self.columns { self.outputs().div_ceil(TILE_COLUMNS as usize) } else { self.outputs() };
        (tiles as u32, self.chunks() as u32, 1)
    }

    /// Whether the warp path runs: off the column path, at most [`WARP_ROW_MAX`] elements an
    /// output (one chunk), and at least [`WARP_PATH_OUTPUTS`] outputs (fewer keep a block each,
    /// for the threads; the bits are the same either way).
    pub fn warp_rows(&self) -> bool {
        !self.columns && self.count() <= WARP_ROW_MAX && self.outputs() >= WARP_PATH_OUTPUTS
    }

    pub fn outputs(&self) -> usize {
        self.kept.0.iter().product::<u64>() as usize
    }
    pub fn count(&self) -> usize {
        self.reduced.0.iter().product::<u64>() as usize
    }
    pub fn chunks(&self) -> usize {
        let per_block = if self.columns { self.column_chunk_rows() } else { CHUNK };
        self.count().div_ceil(per_block).max(1)
    }
    /// Rows per block on the column path: enough blocks for [`COLUMN_BLOCKS`] when the tensor
    /// allows, a power of two within [`MIN_COLUMN_CHUNK_ROWS`, `COLUMN_CHUNK_ROWS`].
    pub fn column_chunk_rows(&self) -> usize {
        let tiles = self.outputs().div_ceil(TILE_COLUMNS as usize);
        (self.count() * tiles)
            .div_ceil(COLUMN_BLOCKS)
            .next_power_of_two()
            .clamp(MIN_COLUMN_CHUNK_ROWS, COLUMN_CHUNK_ROWS)
    }

    fn op(&self) -> &'static str {
        match self.kind {
            Reduce::Max => "max.f32",
            _ => "add.rn.f32",
        }
    }
    fn init(&self) -> f32 {
        match self.kind {
            Reduce::Max => f32::NEG_INFINITY,
            _ => 0.0,
        }
    }
    fn finish(&self, k: &mut Kernel, v: crate::ptx::Reg) -> crate::ptx::Reg {
        if self.kind == Reduce::Mean {
            k.bin("div.rn.f32", RegKind::F32, v, self.count() as f32)
        } else {
            v
        }
    }

    /// Pass 1's result for output `o` from chunk `c` of `chunks`: the final value (finished,
    /// in the output's dtype) when there is one chunk, else the f32 partial at
    /// `partials[o·chunks + c]`. Shared by the strided and the column kernels.
    fn store_total(
        &self,
        k: &mut Kernel,
        total: crate::ptx::Reg,
        [out, partials]: [crate::ptx::Reg; 2],
        o: crate::ptx::Reg,
        (c, chunks): (crate::ptx::Reg, u32),
    ) {
        if chunks == 1 {
            let v = self.finish(k, total);
            store_f32(k, self.out_dtype, out, o, v);
        } else {
            let at = k.tri("mad.lo.u32", RegKind::B32, o, chunks, c);
            let a = k.addr_of(partials, at, 4);
            k.op("st.global.f32", [addr(a, 0), total.into()]);
        }
    }

    /// Pass 1: params (out, x, partials). Grid (outputs, chunks). With one chunk it writes the
    /// final values to `out`; otherwise chunk partials (f32) to `partials[o·chunks + c]`.
    pub fn kernel(&self) -> Kernel {
        if self.columns {
            return self.column_kernel();
        }
        if self.warp_rows() {
            return self.warp_kernel();
        }
        self.block_kernel()
    }

    /// Pass 1 off the column path, a block an (output, chunk): what [`Reduction::kernel`] gives
    /// where the warp path does not run, and the order the warp path keeps.
    pub fn block_kernel(&self) -> Kernel {
        self.loading_kernel("", Self::block_pass)
    }

    /// The first pass `reduce_{kind}{suffix}` of params (out, x, partials): `pass` over the
    /// elements it loads from x.
    fn loading_kernel(&self, suffix: &str, pass: Pass) -> Kernel {
        let name = format!("reduce_{}{suffix}", format!("{:?}", self.kind).to_lowercase());
        let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
        let out = k.param_reg("out", ParamTy::U64);
        let x = k.param_reg("x", ParamTy::U64);
        let partials = k.param_reg("partials", ParamTy::U64);
        let dtype = self.in_dtype;
        pass(self, &mut k, [out, partials], &mut |k, idx| load_f32(k, dtype, x, idx));
        k.ret();
        k
    }

    /// The block path's body in kernel `k` (block and params declared): each thread adds its
    /// elements of its block's chunk in order, the value of element `idx` (of the reduction's
    /// input, packed) from `element`; the block's fixed tree; the total or the chunk's partial
    /// stored.
    fn block_pass(&self, k: &mut Kernel, [out, partials]: [Reg; 2], element: &mut dyn FnMut(&mut Kernel, Reg) -> Reg) {
        let chunks = self.chunks() as u32;
        let red = k.shared("red", 128, 16);
        let tid = k.sreg("%tid.x");
        let o = k.sreg("%ctaid.x");
        let c = k.sreg("%ctaid.y");
        let base = element_offsets(k, o, &self.kept.0, std::slice::from_ref(&self.kept.1))[0];
        let count = self.count() as u32;
        // This block's range of reduced indices: [c·CHUNK, min((c+1)·CHUNK, count)).
        let start = k.bin("mul.lo.u32", RegKind::B32, c, CHUNK as u32);
        let stop0 = k.bin("add.u32", RegKind::B32, start, CHUNK as u32);
        let stop = k.bin("min.u32", RegKind::B32, stop0, count);
        let acc = k.imm_f32(self.init());
        let j = k.bin("add.u32", RegKind::B32, start, tid);
        let top = k.label("red");
        let end = k.label("red_end");
        k.place(&top);
        let done = k.setp("ge.u32", j, stop);
        k.bra_if(done, false, &end);
        self.add_element(k, acc, base, j, element);
        k.op("add.u32", [j.into(), j.into(), THREADS.into()]);
        k.bra(&top);
        k.place(&end);
        let op = if self.kind == Reduce::Max { "max" } else { "add" };
        let total = k.block_reduce_f32(acc, op, &red, tid, THREADS);
        let first = k.setp("eq.u32", tid, 0u32);
        let skip = k.label("skip");
        k.bra_if(first, true, &skip);
        self.store_total(k, total, [out, partials], o, (c, chunks));
        k.place(&skip);
    }

    /// Adds the output's reduced element `j` (of the output at `base`) into `acc`: the value
    /// `element` gives for its index.
    fn add_element(
        &self,
        k: &mut Kernel,
        acc: Reg,
        base: Reg,
        j: Reg,
        element: &mut dyn FnMut(&mut Kernel, Reg) -> Reg,
    ) {
        let off = element_offsets(k, j, &self.reduced.0, std::slice::from_ref(&self.reduced.1))[0];
        let idx = k.bin("add.u32", RegKind::B32, base, off);
        let v = element(k, idx);
        k.op(self.op(), [acc.into(), acc.into(), v.into()]);
    }

    /// The first pass's body in kernel `k` (a block of [`THREADS`], `out` and `partials`
    /// declared) on the path this reduction takes, the value of element `idx` (of its input,
    /// packed) from `element`: what [`Reduction::kernel`] runs with a load, and a fused chain
    /// with its own values (`crate::kernels::fused::Chain::reduction_kernel`). The same order,
    /// so the same bits over the same values.
    pub(crate) fn pass(&self, k: &mut Kernel, out: [Reg; 2], element: &mut dyn FnMut(&mut Kernel, Reg) -> Reg) {
        if self.columns {
            self.column_pass(k, out, element, &mut |_, _, _, _| {});
        } else if self.warp_rows() {
            self.warp_pass(k, out, element);
        } else {
            self.block_pass(k, out, element);
        }
    }

    /// The warp path's one pass (see the module's doc): params (out, x, partials) as
    /// [`Reduction::kernel`]'s, the partials unused; grid [`Reduction::grid`]. Warp w of block b
    /// takes output `b·8 + w` and walks the block path's order for it: lane l stands for that
    /// path's threads l, l + 32, …, l + 224, adding each one's elements (t, t + 256, …) in order;
    /// each such set of 32 is added by the butterfly a warp of the block path runs, and the eight
    /// sums in warp order, as the block path's shared-memory pass adds them; lane 0 stores.
    fn warp_kernel(&self) -> Kernel {
        self.loading_kernel("_warps", Self::warp_pass)
    }

    /// The warp path's body in kernel `k` (block and params declared), the value of element
    /// `idx` from `element` (see [`Reduction::warp_kernel`]).
    fn warp_pass(&self, k: &mut Kernel, [out, partials]: [Reg; 2], element: &mut dyn FnMut(&mut Kernel, Reg) -> Reg) {
        let tid = k.sreg("%tid.x");
        let b = k.sreg("%ctaid.x");
        let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
        let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
        let o = k.tri("mad.lo.u32", RegKind::B32, b, WARP_ROWS, warp);
        let done = k.label("warp_done");
        let outside = k.setp("ge.u32", o, self.outputs() as u32);
        k.bra_if(outside, false, &done);
        let base = element_offsets(k, o, &self.kept.0, std::slice::from_ref(&self.kept.1))[0];
        let count = self.count() as u32;
        let tree = if self.kind == Reduce::Max { "max.f32" } else { "add.f32" };
        let mut total: Option<Reg> = None;
        for group in 0..WARP_ROWS {
            let sum = if 32 * group < count {
                let acc = k.imm_f32(self.init());
                for first in (32 * group..count).step_by(THREADS as usize) {
                    let j = k.bin("add.u32", RegKind::B32, lane, first);
                    let skip = k.label(&format!("warp_skip{first}"));
                    if first + 32 > count {
                        let live = k.setp("lt.u32", j, count);
                        k.bra_if(live, true, &skip);
                    }
                    self.add_element(k, acc, base, j, element);
                    k.place(&skip);
                }
                k.warp_reduce_f32(acc, tree)
            } else {
                // A warp of the block path with no element: its sum is the start value.
                k.imm_f32(self.init())
            };
            total = Some(match total {
                None => sum,
                Some(t) => k.bin(tree, RegKind::F32, t, sum),
            });
        }
        let total = total.expect("a block holds at least one warp");
        let first = k.setp("eq.u32", lane, 0u32);
        k.bra_if(first, true, &done);
        let zero = k.imm_u32(0);
        self.store_total(k, total, [out, partials], o, (zero, 1));
        k.place(&done);
    }

    /// Pass 1 of the column path: params (out, x, partials); grid [`Reduction::grid`]. Thread
    /// `t` of block (tile, c) sums column `tile·32 + t mod 32` over rows `c·chunk_rows + t/32 +
    /// 8i` in order (loading [`COLUMN_UNROLL`] rows ahead); the eight row groups' sums are then added as a fixed tree. With one
    /// chunk it writes the final values to `out`; otherwise partials to `partials[col·chunks + c]`.
    fn column_kernel(&self) -> Kernel {
        self.column_kernel_storing(None)
    }

    /// Pass 1 of the column path that also stores its input's bf16 cast: params (out, x,
    /// partials, cast), grid [`Reduction::grid`]; every element is read once, by the thread
    /// that sums it, which stores it rounded (`cvt.rn`, as the cast kernel does) at the same
    /// index of `cast`. The sums are those of [`Reduction::kernel`], bit for bit.
    /// Why: a bias gradient's tensor is often also cast for the products after it; one read of
    /// it then serves both, and the cast costs no launch.
    pub fn column_cast_kernel(&self) -> Result<Kernel> {
        self.column_cast_kernel_pitched(self.outputs())
    }

    /// [`Reduction::column_cast_kernel`] storing the cast's rows `pitch` elements apart (at
    /// least the width): a matrix product then reads it in place through a tensor map, whose
    /// rows must lie 16 bytes apart (`crate::lower::padded`). The sums are the same bits.
    pub fn column_cast_kernel_pitched(&self, pitch: usize) -> Result<Kernel> {
        if !self.columns {
            bail!("a reduction off the column path does not store a cast: {self:?}");
        }
        if pitch < self.outputs() {
            bail!("a cast's pitch of {pitch} is narrower than its {} columns", self.outputs());
        }
        Ok(self.column_kernel_storing(Some(pitch)))
    }

    /// The column path's first pass, storing the bf16 cast of its input with rows `cast`
    /// elements apart where given.
    fn column_kernel_storing(&self, cast: Option<usize>) -> Kernel {
        let width = self.outputs();
        let suffix = match cast {
            None => String::new(),
            Some(p) if p == width => "_cast".into(),
            Some(p) => format!("_cast_pitch{p}"),
        };
        let name = format!("reduce_{}_columns{suffix}", format!("{:?}", self.kind).to_lowercase());
        let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
        let out = k.param_reg("out", ParamTy::U64);
        let x = k.param_reg("x", ParamTy::U64);
        let partials = k.param_reg("partials", ParamTy::U64);
        let copy = cast.map(|pitch| (k.param_reg("cast", ParamTy::U64), (pitch - width) as u32));
        let dtype = self.in_dtype;
        let mut store_cast = |k: &mut Kernel, idx: Reg, (row, later): (Reg, u32), v: Reg| {
            let Some((c, extra)) = copy else { return };
            // Element (row, column) of the cast lies at row·pitch + column: idx plus the rows'
            // extra elements.
            let at = match extra {
                0 => idx,
                _ => {
                    let shifted = k.tri("mad.lo.u32", RegKind::B32, row, extra, idx);
                    match later * extra {
                        0 => shifted,
                        more => k.bin("add.u32", RegKind::B32, shifted, more),
                    }
                }
            };
            store_f32(k, DType::BF16, c, at, v);
        };
        self.column_pass(&mut k, [out, partials], &mut |k, idx| load_f32(k, dtype, x, idx), &mut store_cast);
        k.ret();
        k
    }

    /// The column path's body in kernel `k` (block and params declared, `out` and `partials`
    /// among them; grid [`Reduction::grid`]): each thread sums its column's rows in order, the
    /// value of element `idx` (row · width + column) from `element`, which `after` then sees
    /// once it is added (a cast stored, …) with its row as (a register, a constant to add); the
    /// row groups' sums as a fixed tree; the totals or
    /// the chunk partials stored. Every kernel built on it sums in the same order, so they
    /// give the same bits as [`Reduction::kernel`] over the same values.
    #[allow(clippy::type_complexity)]
    pub(crate) fn column_pass(
        &self,
        k: &mut Kernel,
        [out, partials]: [Reg; 2],
        element: &mut dyn FnMut(&mut Kernel, Reg) -> Reg,
        after: &mut dyn FnMut(&mut Kernel, Reg, (Reg, u32), Reg),
    ) {
        let chunks = self.chunks() as u32;
        let width = self.outputs() as u32;
        let rows = self.count() as u32;
        let tile = k.shared("tile", THREADS * 4, 16);
        let tid = k.sreg("%tid.x");
        let t = k.sreg("%ctaid.x");
        let c = k.sreg("%ctaid.y");
        let lane = k.bin("and.b32", RegKind::B32, tid, TILE_COLUMNS - 1);
        let group = k.bin("shr.u32", RegKind::B32, tid, TILE_COLUMNS.trailing_zeros());
        let col = k.tri("mad.lo.u32", RegKind::B32, t, TILE_COLUMNS, lane);
        let inside = k.setp("lt.u32", col, width);
        let chunk_rows = self.column_chunk_rows() as u32;
        let start = k.bin("mul.lo.u32", RegKind::B32, c, chunk_rows);
        let stop0 = k.bin("add.u32", RegKind::B32, start, chunk_rows);
        let stop = k.bin("min.u32", RegKind::B32, stop0, rows);
        let acc = k.imm_f32(0.0);
        let r = k.bin("add.u32", RegKind::B32, start, group);
        let wide = k.label("col_wide");
        let top = k.label("col");
        let end = k.label("col_end");
        k.bra_if(inside, true, &end);
        // While COLUMN_UNROLL rows remain: load them all, then add them in row order.
        k.place(&wide);
        let last = k.bin("add.u32", RegKind::B32, r, (COLUMN_UNROLL - 1) * ROW_GROUPS);
        let short = k.setp("ge.u32", last, stop);
        k.bra_if(short, false, &top);
        let first_idx = k.tri("mad.lo.u32", RegKind::B32, r, width, col);
        let vals: Vec<_> = (0..COLUMN_UNROLL)
            .map(|i| {
                let idx = k.bin("add.u32", RegKind::B32, first_idx, i * ROW_GROUPS * width);
                (idx, element(k, idx))
            })
            .collect();
        for (i, &(idx, v)) in (0u32..).zip(&vals) {
            k.op("add.rn.f32", [acc.into(), acc.into(), v.into()]);
            after(k, idx, (r, i * ROW_GROUPS), v);
        }
        k.op("add.u32", [r.into(), r.into(), (COLUMN_UNROLL * ROW_GROUPS).into()]);
        k.bra(&wide);
        // The remaining rows, one at a time.
        k.place(&top);
        let done = k.setp("ge.u32", r, stop);
        k.bra_if(done, false, &end);
        let idx = k.tri("mad.lo.u32", RegKind::B32, r, width, col);
        let v = element(k, idx);
        k.op("add.rn.f32", [acc.into(), acc.into(), v.into()]);
        after(k, idx, (r, 0), v);
        k.op("add.u32", [r.into(), r.into(), ROW_GROUPS.into()]);
        k.bra(&top);
        k.place(&end);
        // Every thread (those past the last column with +0) leaves its sum at tile[tid].
        let base = k.un("mov.u32", RegKind::B32, Opnd::S(tile.clone()));
        let slot = k.tri("mad.lo.u32", RegKind::B32, tid, 4u32, base);
        k.op("st.shared.f32", [addr(slot, 0), acc.into()]);
        k.barrier();
        let skip = k.label("skip");
        let later = k.setp("ne.u32", group, 0u32);
        k.bra_if(later, false, &skip);
        k.bra_if(inside, true, &skip);
        // Row group 0 adds the groups' sums for its column: pairs, then pairs of pairs.
        let own = k.tri("mad.lo.u32", RegKind::B32, lane, 4u32, base);
        let mut level: Vec<_> = (0..ROW_GROUPS)
            .map(|g| {
                let s = k.reg(RegKind::F32);
                k.op("ld.shared.f32", [s.into(), addr(own, (g * TILE_COLUMNS * 4) as i64)]);
                s
            })
            .collect();
        while level.len() > 1 {
            level = level
                .chunks(2)
                .map(|p| if p.len() == 2 { k.bin("add.rn.f32", RegKind::F32, p[0], p[1]) } else { p[0] })
                .collect();
        }
        let total = level[0];
        self.store_total(k, total, [out, partials], col, (c, chunks));
        k.place(&skip);
    }

    /// Pass 2 (only when `chunks() > 1`): params (out, partials); grid (outputs).
    pub fn finish_kernel(&self) -> Kernel {
        self.finish_kernel_over(self.chunks() as u32)
    }

    /// Pass 2 over `chunks` partials an output at `partials[o·chunks + c]`, however another
    /// kernel cut the reduced elements (a LayerNorm backward's bands of rows): params and grid
    /// as [`Reduction::finish_kernel`]'s.
    pub fn finish_kernel_over(&self, chunks: u32) -> Kernel {
        let mut k = Kernel::new(&format!("reduce_{}_finish", format!("{:?}", self.kind).to_lowercase()))
            .with_block(THREADS, 1, 1);
        let out = k.param_reg("out", ParamTy::U64);
        let partials = k.param_reg("partials", ParamTy::U64);
        let red = k.shared("red", 128, 16);
        let tid = k.sreg("%tid.x");
        let o = k.sreg("%ctaid.x");
        let acc = k.imm_f32(self.init());
        let row = k.bin("mul.lo.u32", RegKind::B32, o, chunks);
        let j = k.un("mov.u32", RegKind::B32, Opnd::R(tid));
        let top = k.label("fin");
        let end = k.label("fin_end");
        k.place(&top);
        let done = k.setp("ge.u32", j, chunks);
        k.bra_if(done, false, &end);
        let idx = k.bin("add.u32", RegKind::B32, row, j);
        let a = k.addr_of(partials, idx, 4);
        let v = k.reg(RegKind::F32);
        k.op("ld.global.f32", [v.into(), addr(a, 0)]);
        k.op(self.op(), [acc.into(), acc.into(), v.into()]);
        k.op("add.u32", [j.into(), j.into(), THREADS.into()]);
        k.bra(&top);
        k.place(&end);
        let op = if self.kind == Reduce::Max { "max" } else { "add" };
        let total = k.block_reduce_f32(acc, op, &red, tid, THREADS);
        let first = k.setp("eq.u32", tid, 0u32);
        let skip = k.label("skip");
        k.bra_if(first, true, &skip);
        let r = self.finish(&mut k, total);
        store_f32(&mut k, self.out_dtype, out, o, r);
        k.place(&skip);
        k.ret();
        k
    }
}

/// The first launch's arguments: out, x, the partials (any pointer with one chunk).
pub fn arguments<T>([out, x, partials]: [T; 3]) -> Vec<T> {
    vec![out, x, partials]
}

/// The column path's first launch storing the cast ([`Reduction::column_cast_kernel`]): out,
/// x, the partials (any pointer with one chunk), the bf16 cast.
pub fn cast_arguments<T>([out, x, partials, cast]: [T; 4]) -> Vec<T> {
    vec![out, x, partials, cast]
}

/// The finishing launch's arguments (with more than one chunk): out, the partials.
pub fn finish_arguments<T>([out, partials]: [T; 2]) -> Vec<T> {
    vec![out, partials]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The builders fill both kernels' parameters (all pointers).
    #[test]
    fn arguments_match_the_kernels_parameters() {
        let r = Reduction::new(Reduce::Sum, &[64, 32], &[0], DType::F32, DType::F32).expect("a valid reduction");
        for (k, n) in [(r.kernel(), arguments([0u64; 3]).len()), (r.finish_kernel(), finish_arguments([0u64; 2]).len())]
        {
            assert!(k.params.iter().all(|p| p.ty == ParamTy::U64), "{}", k.name);
            assert_eq!(k.params.len(), n, "{}", k.name);
        }
        let k = r.column_cast_kernel().expect("a column sum");
        assert_eq!((k.name.as_str(), k.params.len()), ("reduce_sum_columns_cast", cast_arguments([0u64; 4]).len()));
        assert!(k.render().contains("st.global.b16"));
        let rows = Reduction::new(Reduce::Sum, &[64, 32], &[1], DType::F32, DType::F32).unwrap();
        assert!(rows.column_cast_kernel().is_err(), "a row sum reads its elements across threads' strides");
    }

    #[test]
    fn axes_split_into_kept_and_reduced_and_collapse() {
        let r = Reduction::new(Reduce::Sum, &[4, 5, 6], &[1, 2], DType::F32, DType::F32).unwrap();
        assert_eq!(r.kept, (vec![4], vec![30]));
        assert_eq!(r.reduced, (vec![30], vec![1]));
        let r = Reduction::new(Reduce::Sum, &[4, 5, 6], &[0], DType::F32, DType::F32).unwrap();
        assert_eq!(r.kept, (vec![30], vec![1]));
        assert_eq!(r.reduced, (vec![4], vec![30]));
        let all = Reduction::new(Reduce::Mean, &[1024, 12288], &[0, 1], DType::F32, DType::F32).unwrap();
        assert_eq!(all.outputs(), 1);
        assert_eq!(all.chunks(), 1024 * 12288 / CHUNK);
        assert!(all.kernel().render().contains("st.global.f32"));
        assert!(all.finish_kernel().render().contains("div.rn.f32"));
        assert!(Reduction::new(Reduce::Max, &[3], &[1], DType::F32, DType::F32).is_err());
    }

    /// Only Sum/Mean of f32 with a contiguous kept axis inside one reduced outer axis take the
    /// column path; its grid covers the columns by tiles and the rows by chunks.
    #[test]
    fn column_path_is_chosen_only_for_column_sums() {
        let bias = Reduction::new(Reduce::Sum, &[16, 1024, 768], &[0, 1], DType::F32, DType::F32).unwrap();
        assert!(bias.columns);
        assert_eq!(bias.grid(), (24, (16 * 1024 / COLUMN_CHUNK_ROWS) as u32, 1));
        let k = bias.kernel();
        assert_eq!(k.name, "reduce_sum_columns");
        assert!(k.render().contains("st.global.f32"));
        let ragged = Reduction::new(Reduce::Mean, &[1000, 300], &[0], DType::F32, DType::F32).unwrap();
        assert!(ragged.columns);
        assert_eq!(ragged.column_chunk_rows(), MIN_COLUMN_CHUNK_ROWS);
        assert_eq!(ragged.grid(), (10, 1000u32.div_ceil(64), 1));
        let few_rows = Reduction::new(Reduce::Sum, &[1024, 768], &[0], DType::F32, DType::F32).unwrap();
        assert_eq!(few_rows.column_chunk_rows(), 128);
        assert_eq!(few_rows.grid(), (24, 8, 1));
        assert!(ragged.finish_kernel().render().contains("div.rn.f32"));
        let small = Reduction::new(Reduce::Mean, &[5, 40], &[0], DType::F32, DType::F32).unwrap();
        assert_eq!((small.chunks(), small.grid()), (1, (2, 1, 1)));
        assert!(small.kernel().render().contains("div.rn.f32"));
        for (kind, shape, axes, dtype) in [
            (Reduce::Max, &[64usize, 64][..], &[0usize][..], DType::F32),
            (Reduce::Sum, &[64, 32], &[1], DType::F32),
            (Reduce::Sum, &[64, 64], &[0], DType::BF16),
            (Reduce::Sum, &[4, 5, 60], &[1], DType::F32),
            (Reduce::Sum, &[4, 64, 6], &[0, 2], DType::F32),
        ] {
            let r = Reduction::new(kind, shape, axes, dtype, DType::F32).unwrap();
            assert!(!r.columns, "{kind:?} {shape:?} {axes:?} {dtype:?}");
            // Short ones a warp an output, eight a block.
            assert!(r.warp_rows(), "{kind:?} {shape:?} {axes:?}");
            assert_eq!(r.grid(), (r.outputs().div_ceil(8) as u32, 1, 1));
            assert_ne!(r.kernel().name, "reduce_sum_columns");
        }
        // A long one, or few outputs (a loss's mean), keeps a block an output and chunk.
        for (shape, outputs) in [([3usize, 5000usize], 3u32), ([1, 1024], 1)] {
            let r = Reduction::new(Reduce::Sum, &shape, &[1], DType::F32, DType::F32).unwrap();
            assert!(!r.warp_rows() && !r.columns);
            assert_eq!(r.grid(), (outputs, 1, 1));
        }
    }
}
