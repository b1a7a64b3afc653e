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

use alpha_ir::{DType, Reduce};
use anyhow::{bail, Result};

use crate::kernels::pointwise::{contiguous_strides, element_offsets, load_f32, store_f32};
use crate::ptx::{addr, Kernel, Opnd, ParamTy, RegKind};

/// Threads per block.
pub const THREADS: u32 = 256;
/// Reduced elements per block.
pub const CHUNK: usize = 8192;

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
        Ok(Reduction { kind, kept: pick(true), reduced: pick(false), in_dtype, out_dtype })
    }

    pub fn outputs(&self) -> usize {
        self.kept.0.iter().product::<u64>() as usize
    }
    pub fn count(&self) -> usize {
        self.reduced.0.iter().product::<u64>() as usize
    }
    pub fn chunks(&self) -> usize {
        self.count().div_ceil(CHUNK).max(1)
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

    /// Pass 1: params (out, x, partials). Grid (outputs, chunks). With one chunk it writes the
    /// final values to `out`; otherwise chunk partials (f32) to `partials[o·chunks + c]`.
    pub fn kernel(&self) -> Kernel {
        let chunks = self.chunks() as u32;
        let mut k =
            Kernel::new(&format!("reduce_{}", format!("{:?}", self.kind).to_lowercase())).with_block(THREADS, 1, 1);
        let out = k.param_reg("out", ParamTy::U64);
        let x = k.param_reg("x", ParamTy::U64);
        let partials = k.param_reg("partials", ParamTy::U64);
        let red = k.shared("red", 128, 16);
        let tid = k.sreg("%tid.x");
        let o = k.sreg("%ctaid.x");
        let c = k.sreg("%ctaid.y");
        let base = element_offsets(&mut k, o, &self.kept.0, std::slice::from_ref(&self.kept.1))[0];
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
        let off = element_offsets(&mut k, j, &self.reduced.0, std::slice::from_ref(&self.reduced.1))[0];
        let idx = k.bin("add.u32", RegKind::B32, base, off);
        let v = load_f32(&mut k, self.in_dtype, x, idx);
        k.op(self.op(), [acc.into(), acc.into(), v.into()]);
        k.op("add.u32", [j.into(), j.into(), THREADS.into()]);
        k.bra(&top);
        k.place(&end);
        let op = if self.kind == Reduce::Max { "max" } else { "add" };
        let total = k.block_reduce_f32(acc, op, &red, tid, THREADS);
        let first = k.setp("eq.u32", tid, 0u32);
        let skip = k.label("skip");
        k.bra_if(first, true, &skip);
        if chunks == 1 {
            let r = self.finish(&mut k, total);
            store_f32(&mut k, self.out_dtype, out, o, r);
        } else {
            let slot = k.tri("mad.lo.u32", RegKind::B32, o, chunks, c);
            let a = k.addr_of(partials, slot, 4);
            k.op("st.global.f32", [addr(a, 0), total.into()]);
        }
        k.place(&skip);
        k.ret();
        k
    }

    /// Pass 2 (only when `chunks() > 1`): params (out, partials); grid (outputs).
    pub fn finish_kernel(&self) -> Kernel {
        let chunks = self.chunks() as u32;
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
}
