//! Elementwise kernels: unary functions, broadcasting binary arithmetic, casts.

use alpha_ir::{Binary, DType, Unary};
use rayon::prelude::*;

use crate::real::{round_bf16, Real};

/// Chunk size for parallel elementwise loops: big enough to amortise scheduling.
const CHUNK: usize = 1 << 14;

pub fn gelu<T: Real>(x: T) -> T {
    let k = T::of((2.0 / std::f64::consts::PI).sqrt());
    let c = T::of(0.044715);
    let half = T::of(0.5);
    half * x * (T::one() + (k * (x + c * x * x * x)).tanh())
}

pub fn gelu_grad<T: Real>(x: T) -> T {
    let k = T::of((2.0 / std::f64::consts::PI).sqrt());
    let c = T::of(0.044715);
    let half = T::of(0.5);
    let t = (k * (x + c * x * x * x)).tanh();
    half * (T::one() + t) + half * x * (T::one() - t * t) * k * (T::one() + T::of(3.0) * c * x * x)
}

pub fn apply_unary<T: Real>(u: Unary, x: T) -> T {
    match u {
        Unary::Neg => -x,
        Unary::Exp => x.exp(),
        Unary::Log => x.ln(),
        Unary::Tanh => x.tanh(),
        Unary::Sigmoid => T::one() / (T::one() + (-x).exp()),
        Unary::Gelu => gelu(x),
        Unary::GeluGrad => gelu_grad(x),
        Unary::Relu => x.max(T::zero()),
        Unary::Step => {
            if x > T::zero() {
                T::one()
            } else {
                T::zero()
            }
        }
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Rsqrt => T::one() / x.sqrt(),
        Unary::Sqrt => x.sqrt(),
        Unary::Square => x * x,
        Unary::Recip => T::one() / x,
        Unary::Abs => x.abs(),
        Unary::Sign => {
            if x > T::zero() {
                T::one()
            } else if x < T::zero() {
                -T::one()
            } else {
                T::zero()
            }
        }
    }
}

pub fn unary<T: Real>(u: Unary, x: &[T], out: &mut [T]) {
    out.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(o, i)| {
        for (o, &i) in o.iter_mut().zip(i) {
            *o = apply_unary(u, i);
        }
    });
}

pub fn apply_binary<T: Real>(b: Binary, x: T, y: T) -> T {
    match b {
        Binary::Add => x + y,
        Binary::Sub => x - y,
        Binary::Mul => x * y,
        Binary::Div => x / y,
        Binary::Max => x.max(y),
        Binary::Min => x.min(y),
        Binary::Ge => {
            if x >= y {
                T::one()
            } else {
                T::zero()
            }
        }
        Binary::Pow => x.powf(y),
    }
}

/// Strides of `shape` read as broadcast into `out` (0 along broadcast axes).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let lead = out.len() - shape.len();
    let mut strides = vec![0; out.len()];
    let mut s = 1;
    for i in (0..shape.len()).rev() {
        strides[lead + i] = if shape[i] == 1 && out[lead + i] != 1 { 0 } else { s };
        s *= shape[i];
    }
    strides
}

/// Offset of each row (all axes but the last) of `out` in an operand with `strides`.
fn row_offsets(out: &[usize], strides: &[usize]) -> Vec<usize> {
    let rank = out.len();
    let rows: usize = out[..rank.saturating_sub(1)].iter().product();
    let mut offs = Vec::with_capacity(rows);
    let mut idx = vec![0usize; rank.saturating_sub(1)];
    for _ in 0..rows {
        offs.push(idx.iter().zip(strides).map(|(i, s)| i * s).sum());
        for a in (0..idx.len()).rev() {
            idx[a] += 1;
            if idx[a] < out[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    offs
}

pub fn binary<T: Real>(b: Binary, x: &[T], xs: &[usize], y: &[T], ys: &[usize], out: &mut [T], os: &[usize]) {
    if xs == os && ys == os {
        out.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK))).for_each(|(o, (x, y))| {
            for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                *o = apply_binary(b, x, y);
            }
        });
        return;
    }
    if os.is_empty() {
        out[0] = apply_binary(b, x[0], y[0]);
        return;
    }
    let sx = broadcast_strides(xs, os);
    let sy = broadcast_strides(ys, os);
    let (rx, ry) = (row_offsets(os, &sx), row_offsets(os, &sy));
    let n = *os.last().unwrap();
    let (lx, ly) = (sx[os.len() - 1], sy[os.len() - 1]);
    out.par_chunks_mut(n.max(1)).enumerate().for_each(|(r, o)| {
        let (bx, by) = (rx[r], ry[r]);
        for (j, o) in o.iter_mut().enumerate() {
            *o = apply_binary(b, x[bx + j * lx], y[by + j * ly]);
        }
    });
}

pub fn broadcast<T: Real>(x: &[T], xs: &[usize], out: &mut [T], os: &[usize]) {
    if os.is_empty() {
        out[0] = x[0];
        return;
    }
    let sx = broadcast_strides(xs, os);
    let rx = row_offsets(os, &sx);
    let n = *os.last().unwrap();
    let lx = sx[os.len() - 1];
    out.par_chunks_mut(n.max(1)).enumerate().for_each(|(r, o)| {
        for (j, o) in o.iter_mut().enumerate() {
            *o = x[rx[r] + j * lx];
        }
    });
}

pub fn cast<T: Real>(x: &[T], to: DType, out: &mut [T]) {
    out.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(o, i)| {
        for (o, &v) in o.iter_mut().zip(i) {
            *o = match to {
                DType::BF16 => round_bf16(v),
                DType::F32 => T::of(v.f64() as f32 as f64),
                DType::F64 => v,
                DType::I32 | DType::U16 | DType::U8 => v.round(),
            };
        }
    });
}
