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

use alpha_ir::DType;

use crate::kernels::pointwise::load_f32;
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

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

/// Side of a block's output tile, and the K steps staged in shared memory at a time.
const TILE: u32 = 16;

/// A staged tile's row in floats: one past [`TILE`], so that the 16 elements of a column lie
/// in 16 distinct banks (the transposed layouts store columns).
const ROW: u32 = TILE + 1;

impl Product {
    /// Parts of K for this product: where it has fewer blocks than two an SM (most of the GPU
    /// idle, each thread a chain over all of K), as many parts as keep its blocks within one
    /// full wave (a second, partial wave would double the time), no part shorter than
    /// [`MIN_PART`], at most [`MAX_SPLITS`]; else 1. Diakosmos's weight gradient
    /// (M 8, N 190, K 131,072, batch 7: 84 blocks) gets ⌊1,056 / 84⌋ = 12 parts of 10,923.
    pub fn split_k(&self) -> u32 {
        let (x, y, z) = Product { splits: 1, ..*self }.grid();
        let blocks = x * y * z;
        if blocks == 0 || blocks >= 2 * SMS {
            return 1;
        }
        let fill = SMS * BLOCKS_PER_SM / blocks;
        let longest = self.k as u32 / MIN_PART;
        fill.min(longest).clamp(1, MAX_SPLITS)
    }

    /// Elements of K each part takes (the last may take fewer).
    pub fn part(&self) -> u32 {
        (self.k as u32).div_ceil(self.splits)
    }

    pub fn grid(&self) -> (u32, u32, u32) {
        ((self.n as u32).div_ceil(16), (self.m as u32).div_ceil(16), self.batch as u32 * self.splits)
    }

    /// Bytes of the partials a split product writes (none for one part).
    pub fn partial_bytes(&self) -> usize {
        match self.splits {
            1 => 0,
            s => s as usize * self.batch * self.m * self.n * 4,
        }
    }

    /// Params (c, a, b); c is the partials where K is split.
    pub fn kernel(&self) -> Kernel {
        let (m, n, kk) = (self.m as u32, self.n as u32, self.k as u32);
        let name = match self.splits {
            1 => "gemm_simple".to_string(),
            s => format!("gemm_simple_split{s}"),
        };
        let mut k = Kernel::new(&name).with_block(TILE, TILE, 1);
        let c = k.param_reg("c", ParamTy::U64);
        let a = k.param_reg("a", ParamTy::U64);
        let b = k.param_reg("b", ParamTy::U64);
        let tx = k.sreg("%tid.x");
        let ty = k.sreg("%tid.y");
        let bx = k.sreg("%ctaid.x");
        let by = k.sreg("%ctaid.y");
        let z = k.sreg("%ctaid.z");
        let j0 = k.bin("mul.lo.u32", RegKind::B32, bx, TILE);
        let i0 = k.bin("mul.lo.u32", RegKind::B32, by, TILE);
        // With K split: the batch `zb` of block z, and its part of K, `first..last`.
        let (zb, first, last): (Reg, Opnd, Opnd) = match self.splits {
            1 => (z, 0u32.into(), kk.into()),
            _ => {
                let zb = k.bin("rem.u32", RegKind::B32, z, self.batch as u32);
                let s = k.bin("div.u32", RegKind::B32, z, self.batch as u32);
                let first = k.bin("mul.lo.u32", RegKind::B32, s, self.part());
                let last = k.bin("add.u32", RegKind::B32, first, self.part());
                let last = k.bin("min.u32", RegKind::B32, last, kk);
                (zb, first.into(), last.into())
            }
        };
        let a_base = k.bin("mul.lo.u32", RegKind::B32, zb, m * kk);
        let b_base = if self.b_batched { k.bin("mul.lo.u32", RegKind::B32, zb, kk * n) } else { k.imm_u32(0) };
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
        let ci = k.bin("mul.lo.u32", RegKind::B32, z, m * n);
        let ci = k.tri("mad.lo.u32", RegKind::B32, i, n, ci);
        let ci = k.bin("add.u32", RegKind::B32, ci, j);
        let ca = k.addr_of(c, ci, 4);
        k.op("st.global.f32", [addr(ca, 0), acc.into()]);
        k.place(&end);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_layout() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let p = Product { batch: 2, m: 5, n: 7, k: 3, ta, tb, b_batched: false, dtype: DType::BF16, splits: 1 };
            let k = p.kernel();
            k.check_budget().unwrap();
            assert!(k.render().contains("fma.rn.f32"));
            assert_eq!(p.grid(), (1, 1, 2));
        }
    }

    /// Diakosmos's three f32 products at 64 windows.
    fn diakosmos(m: usize, n: usize, k: usize, ta: bool, tb: bool) -> Product {
        Product { batch: 7, m, n, k, ta, tb, b_batched: true, dtype: DType::F32, splits: 1 }
    }

    #[test]
    fn only_the_long_k_product_with_few_blocks_splits() {
        let cr = diakosmos(8, 190, 131_072, true, false);
        assert_eq!(cr.split_k(), 12);
        let cr = Product { splits: 12, ..cr };
        assert_eq!(cr.grid(), (12, 1, 84));
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
        let k = diakosmos(131_072, 8, 190, false, true).kernel();
        assert_eq!(k.static_shared_bytes(), 2 * TILE * ROW * 4);
        let text = k.render();
        assert_eq!(text.matches("bar.sync").count(), 2);
        assert_eq!(text.matches("fma.rn.f32").count(), TILE as usize);
        assert_eq!(text.matches("st.shared.f32").count(), 2);
    }

    #[test]
    fn a_split_kernel_takes_its_part_of_k_from_the_grids_z() {
        let p = Product { splits: 3, ..diakosmos(8, 190, 5000, true, false) };
        let k = p.kernel();
        k.check_budget().unwrap();
        let text = k.render();
        assert_eq!(k.name, "gemm_simple_split3");
        for op in ["rem.u32", "div.u32", "min.u32", "fma.rn.f32"] {
            assert!(text.contains(op), "{op}");
        }
        assert!(!Product { splits: 1, ..p }.kernel().render().contains("min.u32"));
    }
}
