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

use alpha_ir::DType;

use crate::kernels::pointwise::load_f32;
use crate::ptx::{addr, Kernel, ParamTy, RegKind};

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
}

impl Product {
    pub fn grid(&self) -> (u32, u32, u32) {
        ((self.n as u32).div_ceil(16), (self.m as u32).div_ceil(16), self.batch as u32)
    }

    /// Params (c, a, b).
    pub fn kernel(&self) -> Kernel {
        let (m, n, kk) = (self.m as u32, self.n as u32, self.k as u32);
        let mut k = Kernel::new("gemm_simple").with_block(16, 16, 1);
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
        // Starting indices and steps along K.
        let a_base = k.bin("mul.lo.u32", RegKind::B32, z, m * kk);
        let ai = if self.ta {
            k.bin("add.u32", RegKind::B32, a_base, i)
        } else {
            k.tri("mad.lo.u32", RegKind::B32, i, kk, a_base)
        };
        let a_step = if self.ta { m } else { 1 };
        let b_base = if self.b_batched { k.bin("mul.lo.u32", RegKind::B32, z, kk * n) } else { k.imm_u32(0) };
        let bi = if self.tb {
            k.tri("mad.lo.u32", RegKind::B32, j, kk, b_base)
        } else {
            k.bin("add.u32", RegKind::B32, b_base, j)
        };
        let b_step = if self.tb { 1 } else { n };
        let acc = k.imm_f32(0.0);
        let t = k.imm_u32(0);
        let top = k.label("k");
        let kend = k.label("k_end");
        k.place(&top);
        let done = k.setp("ge.u32", t, kk);
        k.bra_if(done, false, &kend);
        let av = load_f32(&mut k, self.dtype, a, ai);
        let bv = load_f32(&mut k, self.dtype, b, bi);
        k.op("fma.rn.f32", [acc.into(), av.into(), bv.into(), acc.into()]);
        k.op("add.u32", [ai.into(), ai.into(), a_step.into()]);
        k.op("add.u32", [bi.into(), bi.into(), b_step.into()]);
        k.op("add.u32", [t.into(), t.into(), 1u32.into()]);
        k.bra(&top);
        k.place(&kend);
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
            let p = Product { batch: 2, m: 5, n: 7, k: 3, ta, tb, b_batched: false, dtype: DType::BF16 };
            let k = p.kernel();
            k.check_budget().unwrap();
            assert!(k.render().contains("fma.rn.f32"));
            assert_eq!(p.grid(), (1, 1, 2));
        }
    }
}
