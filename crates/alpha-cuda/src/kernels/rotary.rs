//! Rotary position embedding on `[B, H, T, D]`, half-split pairs, forward and inverse.
//!
//! Why: the angle of pair `i` at position `t` is `t·base^(−2i/D)`; the CPU reference computes
//! it, and its sine and cosine, in f64 and rounds them to f32. Sine and cosine on the GPU are
//! either approximate (`sin.approx`) or slow, and they depend only on the shape, so the backend
//! computes the same f64 table once on the host ([`table`]: `T × D/2` cosines, then as many
//! sines), keeps it in the arena, and the kernel only reads it. With `.rn` arithmetic in the
//! reference's order the device result is the reference's, bit for bit. The inverse (the
//! pullback) turns by −θ: the same table with the sine negated.
//!
//! How: one thread per (row, pair): `(x₁, x₂) → (x₁cos − x₂sin, x₁sin + x₂cos)` with
//! `x₁ = x[i]`, `x₂ = x[i + D/2]`.

use crate::kernels::pointwise::{grid_stride_begin, grid_stride_end};
use crate::ptx::{addr, Kernel, ParamTy, RegKind};

/// The angle table for `t` positions and head dimension `d`: cosines `[t][d/2]`, then sines.
pub fn table(t: usize, d: usize, base: f64) -> Vec<f32> {
    let half = d / 2;
    let mut cos = Vec::with_capacity(t * half);
    let mut sin = Vec::with_capacity(t * half);
    for pos in 0..t {
        for i in 0..half {
            let theta = pos as f64 * base.powf(-2.0 * i as f64 / d as f64);
            cos.push(theta.cos() as f32);
            sin.push(theta.sin() as f32);
        }
    }
    cos.extend(sin);
    cos
}

/// Params (out, x, table). `rows` = B·H·T rows of `d`; positions cycle with period `t`.
pub fn kernel(rows: usize, t: usize, d: usize, inverse: bool) -> Kernel {
    let half = (d / 2) as u32;
    let n = (rows * d / 2) as u32;
    let mut k = Kernel::new(if inverse { "rotary_inverse" } else { "rotary" }).with_block(256, 1, 1);
    let out = k.param_reg("out", ParamTy::U64);
    let x = k.param_reg("x", ParamTy::U64);
    let tab = k.param_reg("table", ParamTy::U64);
    let nr = k.imm_u32(n);
    let (idx, stride, top, end) = grid_stride_begin(&mut k, nr);
    let row = k.bin("div.u32", RegKind::B32, idx, half);
    let i = k.bin("rem.u32", RegKind::B32, idx, half);
    let pos = k.bin("rem.u32", RegKind::B32, row, t as u32);
    let ti = k.tri("mad.lo.u32", RegKind::B32, pos, half, i);
    let ca = k.addr_of(tab, ti, 4);
    let (c, s) = (k.reg(RegKind::F32), k.reg(RegKind::F32));
    k.op("ld.global.f32", [c.into(), addr(ca, 0)]);
    k.op("ld.global.f32", [s.into(), addr(ca, (t as u32 * half * 4) as i64)]);
    let s = if inverse { k.un("neg.f32", RegKind::F32, s) } else { s };
    let e = k.tri("mad.lo.u32", RegKind::B32, row, d as u32, i);
    let xa = k.addr_of(x, e, 4);
    let (x1, x2) = (k.reg(RegKind::F32), k.reg(RegKind::F32));
    k.op("ld.global.f32", [x1.into(), addr(xa, 0)]);
    k.op("ld.global.f32", [x2.into(), addr(xa, (half * 4) as i64)]);
    let a = k.bin("mul.rn.f32", RegKind::F32, x1, c);
    let b = k.bin("mul.rn.f32", RegKind::F32, x2, s);
    let o1 = k.bin("sub.rn.f32", RegKind::F32, a, b);
    let a = k.bin("mul.rn.f32", RegKind::F32, x1, s);
    let b = k.bin("mul.rn.f32", RegKind::F32, x2, c);
    let o2 = k.bin("add.rn.f32", RegKind::F32, a, b);
    let oa = k.addr_of(out, e, 4);
    k.op("st.global.f32", [addr(oa, 0), o1.into()]);
    k.op("st.global.f32", [addr(oa, (half * 4) as i64), o2.into()]);
    grid_stride_end(&mut k, idx, stride, nr, &top, &end);
    k
}

/// A rotary launch's arguments: out, x, the table ([`table`]).
pub fn arguments<T>([out, x, table]: [T; 3]) -> Vec<T> {
    vec![out, x, table]
}

#[cfg(test)]
mod tests {
    /// The builder fills the kernel's parameters (three pointers), forward and inverse.
    #[test]
    fn arguments_match_the_kernels_parameters() {
        for inverse in [false, true] {
            let k = kernel(64, 16, 64, inverse);
            assert!(k.params.iter().all(|p| p.ty == crate::ptx::ParamTy::U64));
            assert_eq!(k.params.len(), arguments([0u64; 3]).len());
        }
    }

    use super::*;

    #[test]
    fn table_holds_cosines_then_sines() {
        let t = table(3, 4, 10000.0);
        assert_eq!(t.len(), 2 * 3 * 2);
        assert_eq!(t[0], 1.0); // position 0: cos 0
        assert_eq!(t[6], 0.0); // position 0: sin 0
        assert_eq!(t[2], 1.0f64.cos() as f32); // position 1, pair 0: θ = 1
        assert_eq!(t[6 + 3], (0.01f64).sin() as f32); // position 1, pair 1: θ = 10000^(−1/2)
        kernel(24, 3, 4, true).check_budget().unwrap();
    }
}
