//! A plain matrix product for what the tiled GEMM does not take.
//!
//! Why: the tensor-core GEMM ([`crate::kernels::gemm`]) rounds its operands to bf16 and asks for K a
//! multiple of 32 and M, N multiples of 8. A plan can hold products outside that contract — f32
//! operands (whose IR semantics is an f32 product, not a bf16 one), odd shapes from small
//! systems and tests — and they must still run, correctly, without a second GEMM to maintain.
//! One thread per output element, an fp32 fused multiply-add chain over K in order: slow for
//! big shapes, exact in meaning for every shape, and deterministic.
//!
//! How: `C[z] = op(A[z])·op(B[z])` with `op` a transpose when `ta`/`tb`; a 2-D B is shared by
//! every batch. A and B are f32 or bf16 (widened exactly), C is f32. All sizes are immediates.
//! Grid (⌈N/16⌉, ⌈M/16⌉, batch), 16×16 threads.
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
        let mut k = Kernel::new(&name).with_block(16, 16, 1);
        let c = k.param_reg("c", ParamTy::U64);
        let a = k.param_reg("a", ParamTy::U64);
        let b = k.param_reg("b", ParamTy::U64);
        let tx = k.sreg("%tid.x");
        let ty = k.sreg("%tid.y");
        let bx = k.sreg("%ctaid.x");
        let by = k.sreg("%ctaid.y");
        let z = k.sreg("%ctaid.z");
        let j = k.tri("mad.lo.u32", RegKind::B32, bx, 16u32, tx);
        let i = k.tri("mad.lo.u32", RegKind::B32, by, 16u32, ty);
        let end = k.label("end");
        let pj = k.setp("ge.u32", j, n);
        k.bra_if(pj, false, &end);
        let pi = k.setp("ge.u32", i, m);
        k.bra_if(pi, false, &end);
        // With K split: the batch `zb` of block z, and its part of K, `first..last`.
        let (zb, part) = match self.splits {
            1 => (z, None),
            _ => {
                let zb = k.bin("rem.u32", RegKind::B32, z, self.batch as u32);
                let s = k.bin("div.u32", RegKind::B32, z, self.batch as u32);
                let first = k.bin("mul.lo.u32", RegKind::B32, s, self.part());
                let last = k.bin("add.u32", RegKind::B32, first, self.part());
                let last = k.bin("min.u32", RegKind::B32, last, kk);
                (zb, Some((first, last)))
            }
        };
        // Starting indices and steps along K.
        let a_base = k.bin("mul.lo.u32", RegKind::B32, zb, m * kk);
        let ai = if self.ta {
            k.bin("add.u32", RegKind::B32, a_base, i)
        } else {
            k.tri("mad.lo.u32", RegKind::B32, i, kk, a_base)
        };
        let a_step = if self.ta { m } else { 1 };
        let b_base = if self.b_batched { k.bin("mul.lo.u32", RegKind::B32, zb, kk * n) } else { k.imm_u32(0) };
        let bi = if self.tb {
            k.tri("mad.lo.u32", RegKind::B32, j, kk, b_base)
        } else {
            k.bin("add.u32", RegKind::B32, b_base, j)
        };
        let b_step = if self.tb { 1 } else { n };
        if let Some((first, _)) = part {
            k.op("mad.lo.u32", [ai.into(), first.into(), a_step.into(), ai.into()]);
            k.op("mad.lo.u32", [bi.into(), first.into(), b_step.into(), bi.into()]);
        }
        let acc = k.imm_f32(0.0);
        let (t, last): (Reg, Opnd) = match part {
            None => (k.imm_u32(0), kk.into()),
            Some((first, last)) => (k.un("mov.u32", RegKind::B32, first), last.into()),
        };
        let top = k.label("k");
        let kend = k.label("k_end");
        k.place(&top);
        let done = k.setp("ge.u32", t, last);
        k.bra_if(done, false, &kend);
        let av = load_f32(&mut k, self.dtype, a, ai);
        let bv = load_f32(&mut k, self.dtype, b, bi);
        k.op("fma.rn.f32", [acc.into(), av.into(), bv.into(), acc.into()]);
        k.op("add.u32", [ai.into(), ai.into(), a_step.into()]);
        k.op("add.u32", [bi.into(), bi.into(), b_step.into()]);
        k.op("add.u32", [t.into(), t.into(), 1u32.into()]);
        k.bra(&top);
        k.place(&kend);
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
