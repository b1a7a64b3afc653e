//! The CPU reference the kernels are checked against: the same bf16 roundings and, for split K,
//! the same order of the parts' sum.

use super::*;

/// The split-K sum of each element: `parts` in order from the first, one f32 add at a time,
/// then `old` (the residual or the output accumulated into) where given. Every way of summing
/// the parts emits this, so they agree bit for bit.
pub(super) fn sum_parts(k: &mut Kernel, parts: &[Vec<Reg>], old: Option<&[Reg]>) -> Vec<Reg> {
    (0..parts[0].len())
        .map(|e| {
            let acc = k.un("mov.f32", RegKind::F32, parts[0][e]);
            for p in &parts[1..] {
                k.op("add.rn.f32", [acc.into(), acc.into(), p[e].into()]);
            }
            match old {
                Some(o) => k.bin("add.rn.f32", RegKind::F32, acc, o[e]),
                None => acc,
            }
        })
        .collect()
}

/// Rounds to bf16 (round-to-nearest-even) and back: what the kernel multiplies.
pub fn bf16_round(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// CPU reference for one output element (batch `z`, row `i`, column `j`): operands rounded to
/// bf16, products summed in f64. Returns the accumulator and `Σ|a·b|` (for error bounds).
pub fn reference_at(
    spec: &GemmSpec,
    shape: &GemmShape,
    a: &[f32],
    b: &[f32],
    z: usize,
    i: usize,
    j: usize,
) -> (f64, f64) {
    let (mut acc, mut mag) = (0.0f64, 0.0f64);
    let a0 = z * shape.stride_a as usize;
    let b0 = z * shape.stride_b as usize;
    for kk in 0..shape.k as usize {
        let av = match spec.a {
            Layout::RowMajor => a[a0 + i * shape.lda as usize + kk],
            Layout::ColMajor => a[a0 + kk * shape.lda as usize + i],
        };
        let bv = match spec.b {
            Layout::RowMajor => b[b0 + kk * shape.ldb as usize + j],
            Layout::ColMajor => b[b0 + j * shape.ldb as usize + kk],
        };
        let p = bf16_round(av) as f64 * bf16_round(bv) as f64;
        acc += p;
        mag += p.abs();
    }
    (acc, mag)
}

/// Full CPU reference: `c` holds the output before the call (read by `Accumulate`), `r` the
/// residual. Writes every output element.
pub fn reference(spec: &GemmSpec, shape: &GemmShape, a: &[f32], b: &[f32], r: &[f32], c: &mut [f32]) {
    for z in 0..shape.batch as usize {
        for i in 0..shape.m as usize {
            for j in 0..shape.n as usize {
                let idx = z * shape.stride_c as usize + i * shape.ldc as usize + j;
                let (acc, _) = reference_at(spec, shape, a, b, z, i, j);
                c[idx] = match spec.epilogue {
                    Epilogue::Store => acc as f32,
                    Epilogue::AddResidual => (acc + r[idx] as f64) as f32,
                    Epilogue::Accumulate => (acc + c[idx] as f64) as f32,
                    Epilogue::StoreMul => acc as f32,
                };
            }
        }
    }
}
