//! A plain matrix product for what the tiled GEMM does not take.
//!
//! Why: the tensor-core GEMM ([`crate::kernels::gemm`]) rounds its operands to bf16 and asks for K a
//! multiple of 32 and M, N multiples of 8. A plan can hold products outside that contract — f32
//! operands (whose IR semantics is an f32 product, not a bf16 one), odd shapes from small
//! systems and tests — and they must still run, correctly, without a second GEMM to maintain.
//! One thread per output element, an fp32 fused multiply-add chain over K in order: slower
//! than tensor cores, exact in meaning for every shape, and deterministic.
//!
//! How: `C[z] = op(A[z])·op(B[z])` with `op` a transpose when `ta`/`tb`; a 2-D B is shared by
//! every batch. A and B are f32 or bf16 (widened exactly), C is f32. All sizes are immediates.
//! Grid (⌈N/16⌉, ⌈M/16⌉, batch), 16×16 threads, a 16×16 tile of C a block. The block stages
//! 16 K steps of A's rows and B's columns at a time in shared memory, each element loaded once
//! by one thread, consecutive threads on consecutive addresses in every layout; each thread
//! then continues its chain over those 16 steps from shared memory. Steps past K (or past its part) are staged as zeros, and
//! `fma(0, 0, acc) = acc` exactly (acc starts at +0 and so is never −0), so every element's
//! bits are those of the one chain over K in order.
//!
//! Split K ([`Product::split_k`]): a long-K product with too few outputs to fill the GPU (the
//! gradient of a weight summed over every position: K = 131,072 and 84 blocks on Diakosmos)
//! runs as S launches' worth of blocks in one grid, (⌈N/16⌉, ⌈M/16⌉, S·batch): block z takes
//! part `s = z / batch` of K for batch `z mod batch` and writes its chain's sum, in order over
//! its part, to `partials[z·M·N + i·N + j]` (= `partials[s·batch·M·N + …]`); the split-K sum
//! ([`crate::kernels::gemm::splitk_reduce_kernel`]) then adds the S partials in order of s.
//! Fixed parts and a fixed order: the same bits every run, though not the bits of one chain.
//!
//! Thin shapes ([`Product::tiling`]): the 16×16 tile is wasteful where K is short (its staging,
//! barriers and K padded to 16 outweigh K multiply-adds an element), where M or N is far below
//! 16 (idle threads), or where A's rows are long and N small (A read through 16-row tiles).
//! Three other coverings of C run the same chains: [`Tiling::Lanes`] (a warp's lanes on
//! consecutive columns, several chains a thread, operands straight from global memory),
//! [`Tiling::Rows`] (a thread on rows of C with all N columns, A staged in coalesced runs) and
//! [`Tiling::Deep`] (a few rows over a long K, the next 64 steps loading while the last run).
//! Each element is still one chain over its K (or its part) in order from +0; where a covering
//! pads K with zeros it pads as the tiles do, `fma(0, 0, acc)`.

use alpha_ir::DType;

use crate::kernels::pointwise::load_f32;
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

/// How a product's threads cover C ([`Product::tiling`]); every covering gives each element
/// the same chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiling {
    /// 16×16 threads a block, one element a thread, both operands' 16-step tiles staged in
    /// shared memory: any shape.
    Tiles,
    /// A warp's lanes on consecutive columns of C: a thread keeps the chains of `rows`
    /// consecutive rows × `cols` columns 32 apart and reads op(A)'s elements (one address for
    /// the whole warp) and op(B)'s (consecutive for a row-major B) straight from global memory,
    /// `steps` K steps of loads written before their multiply-adds; `warps` warps a block on the
    /// next rows. No shared memory, no barrier, no padding of K. Rows and columns past C's edge
    /// read the last one and are not stored.
    Lanes { rows: u32, cols: u32, warps: u32, steps: u32 },
    /// A thread keeps the chains of 4 rows of C, 128 apart (`ROWS_PER_THREAD`, `ROWS_THREADS`),
    /// over all N columns; the block stages 16 K steps of its 512 rows of op(A) in shared memory
    /// from coalesced loads, and op(B)'s steps beside them, read back by every thread at one
    /// address. Steps past K are staged as zeros, as in [`Tiling::Tiles`].
    Rows,
    /// A few rows of C over a long K with both operands K-major (`op(A) = Aᵀ`, B row-major: a
    /// weight's gradient `xᵀ·y`): a warp's lanes on consecutive columns, `warps` warps of 2
    /// rows each, one block for all of M. The block stages 64 K steps (`DEEP_STEPS`) of both
    /// operands at a time, and loads the next steps into registers before it runs the chains
    /// over the staged ones, so that each block keeps 10 KB of loads in flight. Steps past its
    /// part are staged as zeros, as in [`Tiling::Tiles`].
    Deep { warps: u32 },
}

/// One product's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ta: bool,
    pub tb: bool,
    pub b_batched: bool,
    pub dtype: DType,
    /// Parts of K, each a chain of its own into partials ([`Product::split_k`]); 1: one chain
    /// an element, straight into C.
    pub splits: u32,
    /// C as a view into a larger tensor, one part (`splits` 1): element (z, i, j) at
    /// `z·batch + i·row + j` from C's pointer, `(row, batch)` in elements; None: packed
    /// `[batch, M, N]`. Why: Diakosmos's per-head products (`[7, N, 190]`) are permuted and
    /// concatenated into `[N, 3,990]`; stored through the view, the Concat's copy of them (0.7 GB
    /// read and written each) does not run (`crate::fusion::products_into_concats`).
    pub c_view: Option<(u32, u32)>,
}

/// SMs of the H200 the split rule fills.
const SMS: u32 = 132;

/// Resident 16×16-thread blocks an SM holds (2,048 threads): the blocks of one full wave are
/// `SMS · BLOCKS_PER_SM`.
const BLOCKS_PER_SM: u32 = 8;

/// The shortest part of K worth a chain of its own: each part costs one partial stored and
/// read back per output element, against at least this many dependent multiply-adds.
const MIN_PART: u32 = 1024;

/// The most parts: the sum holds every part's value of an element (four a thread) in registers.
const MAX_SPLITS: u32 = 16;

/// Threads of a [`Tiling::Rows`] block.
const ROWS_THREADS: u32 = 128;

/// Rows of C a [`Tiling::Rows`] thread keeps, [`ROWS_THREADS`] apart: each staged value of B
/// read back feeds this many chains.
const ROWS_PER_THREAD: u32 = 4;

/// Rows of C (and of op(A)) a [`Tiling::Rows`] block covers.
const ROWS_BLOCK: u32 = ROWS_THREADS * ROWS_PER_THREAD;

/// K steps a [`Tiling::Rows`] block stages at a time: 64 contiguous bytes of each of A's rows
/// (two 32-byte sectors) where A is row-major.
const ROWS_STEPS: u32 = 16;

/// The most columns [`Tiling::Rows`] takes: a thread holds `ROWS_PER_THREAD · N` chains.
const ROWS_MAX_N: usize = 16;

/// Rows of C a [`Tiling::Deep`] thread keeps.
const DEEP_ROWS: u32 = 2;

/// K steps a [`Tiling::Deep`] block stages at a time: 8 KB of B's rows for 32 columns.
const DEEP_STEPS: u32 = 64;

/// The longest K [`Tiling::Lanes`] takes as short: all of it loaded in at most 8 steps at once.
const LANES_SHORT_K: usize = 32;

/// Side of a block's output tile, and the K steps staged in shared memory at a time.
const TILE: u32 = 16;

/// A staged tile's row in floats: one past [`TILE`], so that the 16 elements of a column lie
/// in 16 distinct banks (the transposed layouts store columns).
const ROW: u32 = TILE + 1;

impl Product {
    /// The covering of C for this shape (f32 operands; bf16 keeps the tiles):
    /// - short K (≤ 32) and N ≥ 32, one part: [`Tiling::Lanes`], 4 rows × ⌈N/32⌉ (≤ 8) columns
    ///   a thread. K multiply-adds an element are too few to pay for the tile's staging and
    ///   barriers (and K = 8 padded to 16); here an element costs about K multiply-adds, a
    ///   fraction of a load and one store, C (the traffic) is written by coalesced 128-byte warp
    ///   stores and B (K × N) stays in L1. Diakosmos's `rr-m131072-n190-k8`: 4 × 6 chains a thread.
    /// - M ≤ 16, N ≥ 32, K > 32, `op(A) = Aᵀ` and B row-major (a weight gradient, split or
    ///   not): [`Tiling::Deep`], a warp for every 2 rows. The tile leaves M = 8 half its threads
    ///   idle and has 16 steps (1 KB of B) in flight a block between barriers; the fixed parts
    ///   leave few blocks (`cr-m8-n190-k131072`: 6 × 1 × 84), so each must keep many loads in
    ///   flight to reach the memory's speed: 64 steps, loaded while the last 64 run.
    /// - N ≤ 16, K ≥ 32, M ≥ 128, one part: [`Tiling::Rows`]. A (M × K, the traffic) is read
    ///   once in coalesced runs and each of its values feeds N chains, where the tile stages it
    ///   per 16 columns of which only N are real. Diakosmos's `rc-m131072-n8-k190`.
    /// - else [`Tiling::Tiles`].
    pub fn tiling(&self) -> Tiling {
        let (m, n, k) = (self.m, self.n, self.k);
        if self.dtype != DType::F32 || m == 0 || n == 0 || k == 0 {
            return Tiling::Tiles;
        }
        if n >= 32 && k <= LANES_SHORT_K && self.splits == 1 {
            let cols = n.div_ceil(32).min(8) as u32;
            return Tiling::Lanes { rows: 4, cols, warps: 4, steps: k.min(8) as u32 };
        }
        if m <= 16 && n >= 32 && k > LANES_SHORT_K && self.ta && !self.tb {
            return Tiling::Deep { warps: (m as u32).div_ceil(DEEP_ROWS).next_power_of_two() };
        }
        if n <= ROWS_MAX_N && k >= 32 && m >= 128 && self.splits == 1 {
            return Tiling::Rows;
        }
        Tiling::Tiles
    }

    /// Parts of K for this product: where it has fewer blocks than two an SM (most of the GPU
    /// idle, each thread a chain over all of K), as many parts as keep its blocks within one
    /// full wave (a second, partial wave would double the time), no part shorter than
    /// [`MIN_PART`], at most [`MAX_SPLITS`]; else 1. Diakosmos's weight gradient
    /// (M 8, N 190, K 131,072, batch 7: 84 blocks) gets ⌊1,056 / 84⌋ = 12 parts of 10,923.
    pub fn split_k(&self) -> u32 {
        let (x, y, z) = Product { splits: 1, ..*self }.tile_grid();
        let blocks = x * y * z;
        if blocks == 0 || blocks >= 2 * SMS {
            return 1;
        }
        let fill = SMS * BLOCKS_PER_SM / blocks;
        let longest = self.k as u32 / MIN_PART;
        fill.min(longest).clamp(1, MAX_SPLITS)
    }

    /// C's (row, batch) steps in elements: its view's ([`Product::c_view`]), or packed
    /// `[batch, M, N]` (partials too).
    pub fn c_steps(&self) -> (u32, u32) {
        match (self.c_view, self.splits) {
            (Some(view), 1) => view,
            _ => (self.n as u32, (self.m * self.n) as u32),
        }
    }

    /// Elements of K each part takes (the last may take fewer).
    pub fn part(&self) -> u32 {
        (self.k as u32).div_ceil(self.splits)
    }

    /// The launch's grid for [`Product::tiling`]; z = part · batch + batch index.
    pub fn grid(&self) -> (u32, u32, u32) {
        self.grid_for(self.tiling())
    }

    /// The launch's block for [`Product::tiling`].
    pub fn block(&self) -> (u32, u32, u32) {
        self.block_for(self.tiling())
    }

    /// Params (c, a, b); c is the partials where K is split.
    pub fn kernel(&self) -> Kernel {
        self.kernel_for(self.tiling())
    }

    /// The grid of `tiling`: [`Tiling::Tiles`] for any shape, another only for a shape
    /// [`Product::tiling`] gives it (the tiles stay runnable to check and time against).
    pub fn grid_for(&self, tiling: Tiling) -> (u32, u32, u32) {
        let (m, n, z) = (self.m as u32, self.n as u32, self.batch as u32 * self.splits);
        match tiling {
            Tiling::Tiles => self.tile_grid(),
            Tiling::Lanes { rows, cols, warps, .. } => (n.div_ceil(32 * cols), m.div_ceil(rows * warps), z),
            Tiling::Rows => (1, m.div_ceil(ROWS_BLOCK), z),
            Tiling::Deep { warps } => (n.div_ceil(32), m.div_ceil(DEEP_ROWS * warps), z),
        }
    }

    /// The block of `tiling` (as [`Product::grid_for`]).
    pub fn block_for(&self, tiling: Tiling) -> (u32, u32, u32) {
        match tiling {
            Tiling::Tiles => (TILE, TILE, 1),
            Tiling::Lanes { warps, .. } => (32, warps, 1),
            Tiling::Rows => (ROWS_THREADS, 1, 1),
            Tiling::Deep { warps } => (32, warps, 1),
        }
    }

    /// The grid of 16×16 tiles: the split rule counts these blocks whatever the tiling, so that
    /// a shape's parts, and so its bits, do not depend on the covering.
    fn tile_grid(&self) -> (u32, u32, u32) {
        ((self.n as u32).div_ceil(TILE), (self.m as u32).div_ceil(TILE), self.batch as u32 * self.splits)
    }

    /// Bytes of the partials a split product writes (none for one part).
    pub fn partial_bytes(&self) -> usize {
        match self.splits {
            1 => 0,
            s => s as usize * self.batch * self.m * self.n * 4,
        }
    }

    /// The kernel of `tiling` (as [`Product::grid_for`]).
    pub fn kernel_for(&self, tiling: Tiling) -> Kernel {
        match tiling {
            Tiling::Tiles => self.tiles_kernel(),
            Tiling::Lanes { rows, cols, warps, steps } => self.lanes_kernel(rows, cols, warps, steps),
            Tiling::Rows => self.rows_kernel(),
            Tiling::Deep { warps } => self.deep_kernel(warps),
        }
    }

    /// Kernel `base` (with the number of parts where K is split) for the block of `tiling`, its
    /// params (c, a, b) loaded.
    fn begin(&self, base: &str, tiling: Tiling) -> (Kernel, [Reg; 3]) {
        let name = match (self.splits, self.c_steps()) {
            (1, (row, batch)) if self.c_view.is_some() => format!("{base}_c{row}x{batch}"),
            (1, _) => base.to_string(),
            (s, _) => format!("{base}_split{s}"),
        };
        let (x, y, z) = self.block_for(tiling);
        let mut k = Kernel::new(&name).with_block(x, y, z);
        let c = k.param_reg("c", ParamTy::U64);
        let a = k.param_reg("a", ParamTy::U64);
        let b = k.param_reg("b", ParamTy::U64);
        (k, [c, a, b])
    }

    /// The batch of block `z` and its part of K, `first..last`: with K split, block z takes
    /// part z / batch of batch z mod batch.
    fn part_of(&self, k: &mut Kernel, z: Reg) -> (Reg, Opnd, Opnd) {
        let kk = self.k as u32;
        match self.splits {
            1 => (z, 0u32.into(), kk.into()),
            _ => {
                let zb = k.bin("rem.u32", RegKind::B32, z, self.batch as u32);
                let s = k.bin("div.u32", RegKind::B32, z, self.batch as u32);
                let first = k.bin("mul.lo.u32", RegKind::B32, s, self.part());
                let last = k.bin("add.u32", RegKind::B32, first, self.part());
                let last = k.bin("min.u32", RegKind::B32, last, kk);
                (zb, first.into(), last.into())
            }
        }
    }

    /// Batch `zb`'s first element of A and of B (0 for a B every batch shares).
    fn batch_bases(&self, k: &mut Kernel, zb: Reg) -> (Reg, Reg) {
        let (m, n, kk) = (self.m as u32, self.n as u32, self.k as u32);
        let a_base = k.bin("mul.lo.u32", RegKind::B32, zb, m * kk);
        let b_base = if self.b_batched { k.bin("mul.lo.u32", RegKind::B32, zb, kk * n) } else { k.imm_u32(0) };
        (a_base, b_base)
    }

    /// The [`Tiling::Tiles`] kernel.
    fn tiles_kernel(&self) -> Kernel {
        let (m, n, kk) = (self.m as u32, self.n as u32, self.k as u32);
        let (mut k, [c, a, b]) = self.begin("gemm_simple", Tiling::Tiles);
        let [tx, ty, bx, by, z] = ["%tid.x", "%tid.y", "%ctaid.x", "%ctaid.y", "%ctaid.z"].map(|r| k.sreg(r));
        let j0 = k.bin("mul.lo.u32", RegKind::B32, bx, TILE);
        let i0 = k.bin("mul.lo.u32", RegKind::B32, by, TILE);
        let (zb, first, last) = self.part_of(&mut k, z);
        let (a_base, b_base) = self.batch_bases(&mut k, zb);
        let sa = k.shared("a_tile", TILE * ROW * 4, 4);
        let sb = k.shared("b_tile", TILE * ROW * 4, 4);
        let sa = k.un("mov.u32", RegKind::B32, Opnd::S(sa));
        let sb = k.un("mov.u32", RegKind::B32, Opnd::S(sb));
        // The element of each tile this thread stages, with consecutive threads (x) on
        // consecutive addresses: A's (row `ar`, K step `ac`), B's (K step `bc`, column `bj`),
        // each tile stored [row or K step][ROW].
        let (ar, ac) = if self.ta { (tx, ty) } else { (ty, tx) };
        let (bc, bj) = if self.tb { (tx, ty) } else { (ty, tx) };
        let a_row = k.bin("add.u32", RegKind::B32, i0, ar);
        let b_col = k.bin("add.u32", RegKind::B32, j0, bj);
        let a_at = k.tri("mad.lo.u32", RegKind::B32, ar, ROW, ac);
        let a_at = k.tri("mad.lo.u32", RegKind::B32, a_at, 4u32, sa);
        let b_at = k.tri("mad.lo.u32", RegKind::B32, bc, ROW, bj);
        let b_at = k.tri("mad.lo.u32", RegKind::B32, b_at, 4u32, sb);
        let row_in = k.setp("lt.u32", a_row, m);
        let col_in = k.setp("lt.u32", b_col, n);
        // What this thread reads back: its row of A's tile, its column of B's.
        let a_rd = k.tri("mad.lo.u32", RegKind::B32, ty, ROW * 4, sa);
        let b_rd = k.tri("mad.lo.u32", RegKind::B32, tx, 4u32, sb);
        let acc = k.imm_f32(0.0);
        let k0 = k.un("mov.u32", RegKind::B32, first);
        let top = k.label("k");
        let kend = k.label("k_end");
        k.place(&top);
        let done = k.setp("ge.u32", k0, last.clone());
        k.bra_if(done, false, &kend);
        let ak = k.bin("add.u32", RegKind::B32, k0, ac);
        let ai = if self.ta {
            let x = k.tri("mad.lo.u32", RegKind::B32, ak, m, a_base);
            k.bin("add.u32", RegKind::B32, x, a_row)
        } else {
            let x = k.tri("mad.lo.u32", RegKind::B32, a_row, kk, a_base);
            k.bin("add.u32", RegKind::B32, x, ak)
        };
        let av = self.staged(&mut k, a, ai, ak, last.clone(), row_in);
        k.op("st.shared.f32", [addr(a_at, 0), av.into()]);
        let bk = k.bin("add.u32", RegKind::B32, k0, bc);
        let bi = if self.tb {
            let x = k.tri("mad.lo.u32", RegKind::B32, b_col, kk, b_base);
            k.bin("add.u32", RegKind::B32, x, bk)
        } else {
            let x = k.tri("mad.lo.u32", RegKind::B32, bk, n, b_base);
            k.bin("add.u32", RegKind::B32, x, b_col)
        };
        let bv = self.staged(&mut k, b, bi, bk, last, col_in);
        k.op("st.shared.f32", [addr(b_at, 0), bv.into()]);
        k.barrier();
        for t in 0..TILE as i64 {
            let x = k.reg(RegKind::F32);
            k.op("ld.shared.f32", [x.into(), addr(a_rd, 4 * t)]);
            let y = k.reg(RegKind::F32);
            k.op("ld.shared.f32", [y.into(), addr(b_rd, 4 * ROW as i64 * t)]);
            k.op("fma.rn.f32", [acc.into(), x.into(), y.into(), acc.into()]);
        }
        k.barrier();
        k.op("add.u32", [k0.into(), k0.into(), TILE.into()]);
        k.bra(&top);
        k.place(&kend);
        let end = k.label("end");
        let j = k.bin("add.u32", RegKind::B32, j0, tx);
        let i = k.bin("add.u32", RegKind::B32, i0, ty);
        let pj = k.setp("ge.u32", j, n);
        k.bra_if(pj, false, &end);
        let pi = k.setp("ge.u32", i, m);
        k.bra_if(pi, false, &end);
        // Block z's partials follow batch z's product in C's layout: z = s·batch + zb.
        let (c_row, c_batch) = self.c_steps();
        let ci = k.bin("mul.lo.u32", RegKind::B32, z, c_batch);
        let ci = k.tri("mad.lo.u32", RegKind::B32, i, c_row, ci);
        let ci = k.bin("add.u32", RegKind::B32, ci, j);
        let ca = k.addr_of(c, ci, 4);
        k.op("st.global.f32", [addr(ca, 0), acc.into()]);
        k.place(&end);
        k.ret();
        k
    }

    /// The [`Tiling::Lanes`] kernel: K in runs of `steps` (each run's loads, then its
    /// multiply-adds, element by element in K's order), then the last steps one at a time.
    fn lanes_kernel(&self, rows: u32, cols: u32, warps: u32, steps: u32) -> Kernel {
        let (m, n) = (self.m as u32, self.n as u32);
        let (mut k, [c, a, b]) =
            self.begin(&format!("gemm_simple_lanes{rows}x{cols}"), Tiling::Lanes { rows, cols, warps, steps });
        let [tx, ty, bx, by, z] = ["%tid.x", "%tid.y", "%ctaid.x", "%ctaid.y", "%ctaid.z"].map(|r| k.sreg(r));
        let (zb, first, last) = self.part_of(&mut k, z);
        let (a_base, b_base) = self.batch_bases(&mut k, zb);
        // The part's steps `t..last` (a part past K is empty).
        let last = k.un("mov.u32", RegKind::B32, last);
        let t = k.bin("min.u32", RegKind::B32, first, last);
        // This thread's rows i0 + r and columns j0 + 32·c of C.
        let j0 = k.tri("mad.lo.u32", RegKind::B32, bx, 32 * cols, tx);
        let i0 = k.bin("mul.lo.u32", RegKind::B32, by, rows * warps);
        let i0 = k.tri("mad.lo.u32", RegKind::B32, ty, rows, i0);
        let is: Vec<Reg> = (0..rows).map(|r| k.bin("add.u32", RegKind::B32, i0, r)).collect();
        let js: Vec<Reg> = (0..cols).map(|c| k.bin("add.u32", RegKind::B32, j0, 32 * c)).collect();
        // Where each row of op(A) and column of op(B) starts its part of K, and how far a step
        // moves it (bytes).
        let a_at: Vec<Reg> = is.iter().map(|&i| self.a_start(&mut k, a, a_base, i, t)).collect();
        let b_at: Vec<Reg> = js.iter().map(|&j| self.b_start(&mut k, b, b_base, j, t)).collect();
        let a_step = if self.ta { 4 * m as i64 } else { 4 };
        let b_step = if self.tb { 4 } else { 4 * n as i64 };
        let acc: Vec<Reg> = (0..rows * cols).map(|_| k.imm_f32(0.0)).collect();
        let runs = k.label("runs");
        let singles = k.label("singles");
        let done = k.label("done");
        k.place(&runs);
        let left = k.bin("sub.u32", RegKind::B32, last, t);
        let short = k.setp("lt.u32", left, steps);
        k.bra_if(short, false, &singles);
        lanes_steps(&mut k, steps, (&a_at, a_step), (&b_at, b_step), &acc);
        k.op("add.u32", [t.into(), t.into(), steps.into()]);
        k.bra(&runs);
        k.place(&singles);
        let end = k.setp("ge.u32", t, last);
        k.bra_if(end, false, &done);
        lanes_steps(&mut k, 1, (&a_at, a_step), (&b_at, b_step), &acc);
        k.op("add.u32", [t.into(), t.into(), 1u32.into()]);
        k.bra(&singles);
        k.place(&done);
        // Block z's elements (its part's partials) follow batch z's product in C's layout.
        let (c_row, c_batch) = self.c_steps();
        let zmn = k.bin("mul.lo.u32", RegKind::B32, z, c_batch);
        for (r, &i) in is.iter().enumerate() {
            let i_in = k.setp("lt.u32", i, m);
            let row = k.tri("mad.lo.u32", RegKind::B32, i, c_row, zmn);
            for (col, &j) in js.iter().enumerate() {
                let j_in = k.setp("lt.u32", j, n);
                let inside = k.bin("and.pred", RegKind::Pred, i_in, j_in);
                let ci = k.bin("add.u32", RegKind::B32, row, j);
                let ca = k.addr_of(c, ci, 4);
                k.op_if(inside, false, "st.global.f32", [addr(ca, 0), acc[r * cols as usize + col].into()]);
            }
        }
        k.ret();
        k
    }

    /// The address of op(A)'s element (row `i`, K step `t`) of batch `a_base`, the row clamped
    /// to A's last (a row past C's edge computes a chain it does not store).
    fn a_start(&self, k: &mut Kernel, a: Reg, a_base: Reg, i: Reg, t: Reg) -> Reg {
        self.element_at(k, (a, a_base), (i, self.m as u32), t, self.ta)
    }

    /// The address of op(B)'s element (K step `t`, column `j`) of batch `b_base`, the column
    /// clamped to B's last.
    fn b_start(&self, k: &mut Kernel, b: Reg, b_base: Reg, j: Reg, t: Reg) -> Reg {
        self.element_at(k, (b, b_base), (j, self.n as u32), t, !self.tb)
    }

    /// The address of an operand's element (`x` of `len`, clamped below `len`; K step `t`)
    /// from its pointer and batch offset: at `t·len + x` stored K-major, at `x·K + t` else.
    fn element_at(&self, k: &mut Kernel, (ptr, base): (Reg, Reg), (x, len): (Reg, u32), t: Reg, k_major: bool) -> Reg {
        let x = k.bin("min.u32", RegKind::B32, x, len - 1);
        let (outer, stride, inner) = if k_major { (t, len, x) } else { (x, self.k as u32, t) };
        let at = k.tri("mad.lo.u32", RegKind::B32, outer, stride, base);
        let at = k.bin("add.u32", RegKind::B32, at, inner);
        k.addr_of(ptr, at, 4)
    }

    /// The [`Tiling::Rows`] kernel (one part of K).
    fn rows_kernel(&self) -> Kernel {
        assert_eq!(self.splits, 1, "the rows kernel takes K whole");
        let (m, n, kk) = (self.m as u32, self.n as u32, self.k as u32);
        let (mut k, [c, a, b]) = self.begin("gemm_simple_rows", Tiling::Rows);
        let x = k.sreg("%tid.x");
        let by = k.sreg("%ctaid.y");
        let z = k.sreg("%ctaid.z");
        let (a_base, b_base) = self.batch_bases(&mut k, z);
        let i0 = k.bin("mul.lo.u32", RegKind::B32, by, ROWS_BLOCK);
        // op(A)'s tile [row][step], a row one float longer than its steps so that a warp's 32
        // rows at one step lie in 32 banks; op(B)'s [step][column].
        let row_len = ROWS_STEPS + 1;
        let sa = k.shared("rows_a", ROWS_BLOCK * row_len * 4, 4);
        let sb = k.shared("rows_b", ROWS_STEPS * n * 4, 4);
        let sa = k.un("mov.u32", RegKind::B32, Opnd::S(sa));
        let sb = k.un("mov.u32", RegKind::B32, Opnd::S(sb));
        // The elements of A's tile this thread stages: (row_t + dr, step_t + ds) for each
        // (dr, ds) of `staged`, consecutive threads on consecutive addresses: along a row's
        // steps for a row-major A, along the rows of a step for a transposed one.
        let (row_t, step_t) = match self.ta {
            true => (x, k.imm_u32(0)),
            false => (k.bin("div.u32", RegKind::B32, x, ROWS_STEPS), k.bin("rem.u32", RegKind::B32, x, ROWS_STEPS)),
        };
        let staged: Vec<(u32, u32)> = (0..ROWS_PER_THREAD * ROWS_STEPS)
            .map(|p| match self.ta {
                true => (ROWS_THREADS * (p % ROWS_PER_THREAD), p / ROWS_PER_THREAD),
                false => (ROWS_THREADS / ROWS_STEPS * p, 0),
            })
            .collect();
        let a_row = k.bin("add.u32", RegKind::B32, i0, row_t);
        let sa_put = k.tri("mad.lo.u32", RegKind::B32, row_t, row_len, step_t);
        let sa_put = k.tri("mad.lo.u32", RegKind::B32, sa_put, 4u32, sa);
        // The elements of B's steps this thread stages: e = x + 128·q, (step, column) = (e / N,
        // e mod N), where e < steps · N.
        let b_staged: Vec<(Reg, Reg, Reg)> = (0..(ROWS_STEPS * n).div_ceil(ROWS_THREADS))
            .map(|q| {
                let e = k.bin("add.u32", RegKind::B32, x, ROWS_THREADS * q);
                let used = k.setp("lt.u32", e, ROWS_STEPS * n);
                let step = k.bin("div.u32", RegKind::B32, e, n);
                let col = k.bin("rem.u32", RegKind::B32, e, n);
                (used, step, col)
            })
            .collect();
        // What this thread reads back: its rows of A's tile.
        let sa_get = k.tri("mad.lo.u32", RegKind::B32, x, row_len * 4, sa);
        let acc: Vec<Reg> = (0..ROWS_PER_THREAD * n).map(|_| k.imm_f32(0.0)).collect();
        let k0 = k.imm_u32(0);
        k.strided_loop(k0, kk, ROWS_STEPS, ("steps", "steps_end"), |k, k0| {
            let kt = k.bin("add.u32", RegKind::B32, k0, step_t);
            let a_at = self.a_start(k, a, a_base, a_row, kt);
            for &(dr, ds) in &staged {
                let v = k.imm_f32(0.0);
                if dr < m && ds < kk {
                    let row_in = k.setp("lt.u32", a_row, m - dr);
                    let step_in = k.setp("lt.u32", kt, kk - ds);
                    let ok = k.bin("and.pred", RegKind::Pred, row_in, step_in);
                    let off = if self.ta { ds * m + dr } else { dr * kk + ds };
                    k.op_if(ok, false, "ld.global.f32", [v.into(), addr(a_at, 4 * off as i64)]);
                }
                k.op("st.shared.f32", [addr(sa_put, 4 * (dr * row_len + ds) as i64), v.into()]);
            }
            for (q, &(used, step, col)) in b_staged.iter().enumerate() {
                let bk = k.bin("add.u32", RegKind::B32, k0, step);
                let in_k = k.setp("lt.u32", bk, kk);
                let ok = k.bin("and.pred", RegKind::Pred, used, in_k);
                let v = k.imm_f32(0.0);
                let b_at = self.b_start(k, b, b_base, col, bk);
                k.op_if(ok, false, "ld.global.f32", [v.into(), addr(b_at, 0)]);
                let e = 4 * (ROWS_THREADS * q as u32) as i64;
                let put = k.tri("mad.lo.u32", RegKind::B32, x, 4u32, sb);
                k.op_if(used, false, "st.shared.f32", [addr(put, e), v.into()]);
            }
            k.barrier();
            for s in 0..ROWS_STEPS {
                let xs: Vec<Reg> = (0..ROWS_PER_THREAD)
                    .map(|r| {
                        let v = k.reg(RegKind::F32);
                        let at = 4 * (r * ROWS_THREADS * row_len + s) as i64;
                        k.op("ld.shared.f32", [v.into(), addr(sa_get, at)]);
                        v
                    })
                    .collect();
                for j in 0..n {
                    let y = k.reg(RegKind::F32);
                    k.op("ld.shared.f32", [y.into(), addr(sb, 4 * (s * n + j) as i64)]);
                    for (r, &v) in xs.iter().enumerate() {
                        let acc = acc[(r as u32 * n + j) as usize];
                        k.op("fma.rn.f32", [acc.into(), v.into(), y.into(), acc.into()]);
                    }
                }
            }
            k.barrier();
        });
        let (c_row, c_batch) = self.c_steps();
        let zmn = k.bin("mul.lo.u32", RegKind::B32, z, c_batch);
        for r in 0..ROWS_PER_THREAD {
            let i = k.bin("add.u32", RegKind::B32, i0, x);
            let i = k.bin("add.u32", RegKind::B32, i, r * ROWS_THREADS);
            let inside = k.setp("lt.u32", i, m);
            let ci = k.tri("mad.lo.u32", RegKind::B32, i, c_row, zmn);
            let ca = k.addr_of(c, ci, 4);
            for j in 0..n {
                let v = acc[(r * n + j) as usize];
                k.op_if(inside, false, "st.global.f32", [addr(ca, 4 * j as i64), v.into()]);
            }
        }
        k.ret();
        k
    }

    /// The [`Tiling::Deep`] kernel (K-major A and B).
    fn deep_kernel(&self, warps: u32) -> Kernel {
        let (m, n) = (self.m as u32, self.n as u32);
        let (mut k, [c, a, b]) = self.begin("gemm_simple_deep", Tiling::Deep { warps });
        let [tx, ty, bx, by, z] = ["%tid.x", "%tid.y", "%ctaid.x", "%ctaid.y", "%ctaid.z"].map(|r| k.sreg(r));
        let (zb, first, last) = self.part_of(&mut k, z);
        let (a_base, b_base) = self.batch_bases(&mut k, zb);
        // Steps of the part not yet staged (a part past K is empty).
        let last = k.un("mov.u32", RegKind::B32, last);
        let first = k.bin("min.u32", RegKind::B32, first, last);
        let left = k.bin("sub.u32", RegKind::B32, last, first);
        let (threads, rows) = (32 * warps, DEEP_ROWS * warps);
        let j = k.tri("mad.lo.u32", RegKind::B32, bx, 32u32, tx);
        let i0 = k.bin("mul.lo.u32", RegKind::B32, by, rows);
        // The tiles [step][row] and [step][column], rows one float longer than a warp's reach.
        let (a_len, b_len) = (rows + 1, 33);
        let sa = k.shared("deep_a", DEEP_STEPS * a_len * 4, 4);
        let sb = k.shared("deep_b", DEEP_STEPS * b_len * 4, 4);
        let sa = k.un("mov.u32", RegKind::B32, Opnd::S(sa));
        let sb = k.un("mov.u32", RegKind::B32, Opnd::S(sb));
        // What this thread stages, consecutive threads on consecutive addresses: A's row
        // `tid mod rows` at steps `tid / rows + 16·q`, B's column j at steps `ty + warps·q`.
        // Rows and columns past C's edge read the last one (their chains are not stored).
        let tid = k.tri("mad.lo.u32", RegKind::B32, ty, 32u32, tx);
        let a_step = k.bin("div.u32", RegKind::B32, tid, rows);
        let a_row = k.bin("rem.u32", RegKind::B32, tid, rows);
        let a_put = k.tri("mad.lo.u32", RegKind::B32, a_step, a_len, a_row);
        let a_put = k.tri("mad.lo.u32", RegKind::B32, a_put, 4u32, sa);
        let row = k.bin("add.u32", RegKind::B32, i0, a_row);
        let t = k.bin("add.u32", RegKind::B32, first, a_step);
        let a_at = self.a_start(&mut k, a, a_base, row, t);
        let b_put = k.tri("mad.lo.u32", RegKind::B32, ty, b_len, tx);
        let b_put = k.tri("mad.lo.u32", RegKind::B32, b_put, 4u32, sb);
        let t = k.bin("add.u32", RegKind::B32, first, ty);
        let b_at = self.b_start(&mut k, b, b_base, j, t);
        let a_each = threads / rows;
        let staged: Vec<Staged> = (0..DEEP_STEPS / a_each)
            .map(|q| Staged {
                step: (a_step, a_each * q),
                from: (a_at, a_each * q * m),
                to: (a_put, a_each * q * a_len),
            })
            .chain((0..DEEP_STEPS / warps).map(|q| Staged {
                step: (ty, warps * q),
                from: (b_at, warps * q * n),
                to: (b_put, warps * q * b_len),
            }))
            .collect();
        let values = k.regs(RegKind::F32, staged.len());
        load_staged(&mut k, &staged, &values, left);
        let acc: Vec<Reg> = (0..DEEP_ROWS).map(|_| k.imm_f32(0.0)).collect();
        // What this thread reads back: its rows of A's steps (one address for the warp), its
        // column of B's.
        let a_get = k.tri("mad.lo.u32", RegKind::B32, ty, DEEP_ROWS * 4, sa);
        let b_get = k.tri("mad.lo.u32", RegKind::B32, tx, 4u32, sb);
        let top = k.label("steps");
        let end = k.label("steps_end");
        k.place(&top);
        let done = k.setp("eq.u32", left, 0u32);
        k.bra_if(done, false, &end);
        for (s, &v) in staged.iter().zip(&values) {
            k.op("st.shared.f32", [addr(s.to.0, 4 * s.to.1 as i64), v.into()]);
        }
        k.barrier();
        let taken = k.bin("min.u32", RegKind::B32, left, DEEP_STEPS);
        k.op("sub.u32", [left.into(), left.into(), taken.into()]);
        for (at, stride) in [(a_at, m), (b_at, n)] {
            k.op("add.s64", [at.into(), at.into(), (4 * (DEEP_STEPS * stride) as i64).into()]);
        }
        load_staged(&mut k, &staged, &values, left);
        // Holds the loads above the chains: ptxas would otherwise sink them to their stores
        // at the loop's top, past the chains they are meant to overlap.
        k.barrier();
        for s in 0..DEEP_STEPS {
            let y = k.reg(RegKind::F32);
            k.op("ld.shared.f32", [y.into(), addr(b_get, 4 * (s * b_len) as i64)]);
            for (r, &acc) in acc.iter().enumerate() {
                let x = k.reg(RegKind::F32);
                k.op("ld.shared.f32", [x.into(), addr(a_get, 4 * (s * a_len + r as u32) as i64)]);
                k.op("fma.rn.f32", [acc.into(), x.into(), y.into(), acc.into()]);
            }
        }
        k.barrier();
        k.bra(&top);
        k.place(&end);
        // Block z's elements (its part's partials) follow batch z's product in C's layout.
        let (c_row, c_batch) = self.c_steps();
        let zmn = k.bin("mul.lo.u32", RegKind::B32, z, c_batch);
        let j_in = k.setp("lt.u32", j, n);
        let i = k.tri("mad.lo.u32", RegKind::B32, ty, DEEP_ROWS, i0);
        for (r, &acc) in acc.iter().enumerate() {
            let i = k.bin("add.u32", RegKind::B32, i, r as u32);
            let i_in = k.setp("lt.u32", i, m);
            let inside = k.bin("and.pred", RegKind::Pred, i_in, j_in);
            let ci = k.tri("mad.lo.u32", RegKind::B32, i, c_row, zmn);
            let ci = k.bin("add.u32", RegKind::B32, ci, j);
            let ca = k.addr_of(c, ci, 4);
            k.op_if(inside, false, "st.global.f32", [addr(ca, 0), acc.into()]);
        }
        k.ret();
        k
    }

    /// Element `idx` of operand `base` widened to f32 where its K step `kx` is before `last`
    /// and its row or column is `inside`; else zero.
    fn staged(&self, k: &mut Kernel, base: Reg, idx: Reg, kx: Reg, last: Opnd, inside: Reg) -> Reg {
        let v = k.imm_f32(0.0);
        let in_k = k.setp("lt.u32", kx, last);
        let ok = k.bin("and.pred", RegKind::Pred, in_k, inside);
        let skip = k.label("zero");
        k.bra_if(ok, true, &skip);
        let x = load_f32(k, self.dtype, base, idx);
        k.op("mov.f32", [v.into(), x.into()]);
        k.place(&skip);
        v
    }
}

/// `steps` K steps of a [`Tiling::Lanes`] thread's chains: every step's loads of op(A)'s rows
/// (`a`: addresses, bytes a step) and op(B)'s columns (`b`) first, then the multiply-adds step
/// by step; the addresses move on by the steps taken. `acc` is [row][column].
fn lanes_steps(k: &mut Kernel, steps: u32, a: (&[Reg], i64), b: (&[Reg], i64), acc: &[Reg]) {
    let load = |k: &mut Kernel, (at, step): (&[Reg], i64), s: u32| -> Vec<Reg> {
        at.iter()
            .map(|&p| {
                let v = k.reg(RegKind::F32);
                k.op("ld.global.f32", [v.into(), addr(p, step * s as i64)]);
                v
            })
            .collect()
    };
    let loaded: Vec<(Vec<Reg>, Vec<Reg>)> = (0..steps).map(|s| (load(k, a, s), load(k, b, s))).collect();
    for (xs, ys) in &loaded {
        for (r, &x) in xs.iter().enumerate() {
            for (col, &y) in ys.iter().enumerate() {
                let acc = acc[r * ys.len() + col];
                k.op("fma.rn.f32", [acc.into(), x.into(), y.into(), acc.into()]);
            }
        }
    }
    for (at, step) in [a, b] {
        for &p in at {
            k.op("add.s64", [p.into(), p.into(), (step * steps as i64).into()]);
        }
    }
}

/// One element a [`Tiling::Deep`] thread stages each time: its K step within the staged ones
/// (a register plus a constant), its address (a pointer plus a constant, in elements) and its
/// place in shared memory (likewise).
struct Staged {
    step: (Reg, u32),
    from: (Reg, u32),
    to: (Reg, u32),
}

/// Loads each staged element into its register where its step is before `left`, else +0.
fn load_staged(k: &mut Kernel, staged: &[Staged], values: &[Reg], left: Reg) {
    for (s, &v) in staged.iter().zip(values) {
        let step = k.bin("add.u32", RegKind::B32, s.step.0, s.step.1);
        let inside = k.setp("lt.u32", step, left);
        k.op("mov.f32", [v.into(), 0.0f32.into()]);
        k.op_if(inside, false, "ld.global.f32", [v.into(), addr(s.from.0, 4 * s.from.1 as i64)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_layout() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let p = Product {
                batch: 2,
                m: 5,
                n: 7,
                k: 3,
                ta,
                tb,
                b_batched: false,
                dtype: DType::BF16,
                splits: 1,
                c_view: None,
            };
            let k = p.kernel();
            k.check_budget().unwrap();
            assert!(k.render().contains("fma.rn.f32"));
            assert_eq!(p.grid(), (1, 1, 2));
        }
    }

    /// Diakosmos's three f32 products at 64 windows.
    fn diakosmos(m: usize, n: usize, k: usize, ta: bool, tb: bool) -> Product {
        Product { batch: 7, m, n, k, ta, tb, b_batched: true, dtype: DType::F32, splits: 1, c_view: None }
    }

    #[test]
    fn only_the_long_k_product_with_few_blocks_splits() {
        let cr = diakosmos(8, 190, 131_072, true, false);
        assert_eq!(cr.split_k(), 12);
        let cr = Product { splits: 12, ..cr };
        assert_eq!(cr.tile_grid(), (12, 1, 84));
        assert_eq!(cr.part(), 10_923);
        assert_eq!(cr.partial_bytes(), 12 * 7 * 8 * 190 * 4);
        assert_eq!(diakosmos(131_072, 8, 190, false, true).split_k(), 1);
        assert_eq!(diakosmos(131_072, 190, 8, false, false).split_k(), 1);
        // One block: as many parts as K gives, at most 16.
        let one = Product { batch: 1, m: 3, n: 5, ..diakosmos(0, 0, 5000, false, false) };
        assert_eq!(one.split_k(), 4);
        assert_eq!(Product { k: 1 << 20, ..one }.split_k(), 16);
    }

    #[test]
    fn the_kernel_stages_both_tiles_between_barriers() {
        let k = diakosmos(4096, 20, 190, false, true).kernel();
        assert_eq!(k.static_shared_bytes(), 2 * TILE * ROW * 4);
        let text = k.render();
        assert_eq!(text.matches("bar.sync").count(), 2);
        assert_eq!(text.matches("fma.rn.f32").count(), TILE as usize);
        assert_eq!(text.matches("st.shared.f32").count(), 2);
    }

    #[test]
    fn a_split_kernel_takes_its_part_of_k_from_the_grids_z() {
        let p = Product { splits: 3, ..diakosmos(8, 19, 5000, true, false) };
        let k = p.kernel();
        k.check_budget().unwrap();
        let text = k.render();
        assert_eq!(k.name, "gemm_simple_split3");
        for op in ["rem.u32", "div.u32", "min.u32", "fma.rn.f32"] {
            assert!(text.contains(op), "{op}");
        }
        assert!(!Product { splits: 1, ..p }.kernel().render().contains("min.u32"));
    }

    /// Diakosmos's three products take the thin coverings, with the grids and blocks their
    /// rules give; bf16 operands and other shapes keep the tiles.
    #[test]
    fn thin_shapes_take_the_lanes_or_the_rows() {
        let rr = diakosmos(131_072, 190, 8, false, false);
        assert_eq!(rr.tiling(), Tiling::Lanes { rows: 4, cols: 6, warps: 4, steps: 8 });
        assert_eq!((rr.grid(), rr.block()), ((1, 8192, 7), (32, 4, 1)));
        let rc = diakosmos(131_072, 8, 190, false, true);
        assert_eq!(rc.tiling(), Tiling::Rows);
        assert_eq!((rc.grid(), rc.block()), ((1, 256, 7), (ROWS_THREADS, 1, 1)));
        let cr = Product { splits: 12, ..diakosmos(8, 190, 131_072, true, false) };
        assert_eq!(cr.tiling(), Tiling::Deep { warps: 4 });
        assert_eq!((cr.grid(), cr.block()), ((6, 1, 84), (32, 4, 1)));
        for p in [rr, rc, cr] {
            let k = p.kernel();
            k.check_budget().unwrap();
            assert_eq!(k.block, Some(p.block()));
        }
        assert_eq!(cr.kernel().name, "gemm_simple_deep_split12");
        assert_eq!(Product { dtype: DType::BF16, ..rr }.tiling(), Tiling::Tiles);
        assert_eq!(diakosmos(4096, 20, 190, false, true).tiling(), Tiling::Tiles);
        assert_eq!(diakosmos(100, 8, 190, false, true).tiling(), Tiling::Tiles);
    }

    /// The lanes kernel has no shared memory and no barrier; the rows kernel stages between
    /// two barriers.
    #[test]
    fn the_thin_kernels_stage_only_where_they_say() {
        let lanes = diakosmos(131_072, 190, 8, false, false).kernel().render();
        assert!(!lanes.contains("bar.sync") && !lanes.contains(".shared"));
        let rows = diakosmos(131_072, 8, 190, false, true).kernel();
        assert_eq!(rows.static_shared_bytes(), ROWS_BLOCK * (ROWS_STEPS + 1) * 4 + ROWS_STEPS * 8 * 4);
        assert_eq!(rows.render().matches("bar.sync").count(), 2);
    }
}
