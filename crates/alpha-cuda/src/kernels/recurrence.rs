//! The linear recurrence along time, `s_t = γ·s_{t−1} + u_t`, and its reverse (the pullback).
//!
//! Why: Diakosmos's harmonic recurrence and KickDelta's memory step a state through time; the
//! IR keeps it whole (`Op::Recurrence`). The first GPU version is the plain one: one thread per
//! (batch, channel) stepping through T in order, exactly the CPU reference's arithmetic
//! (`γ·s` rounded, then `+ u`), so the two agree bit for bit. A parallel scan is the faster
//! form and changes rounding; it can come once a system needs the speed.
//!
//! How: u and out `[B, T, C]` (C the product of the trailing axes), γ `[C]`, all f32.

use crate::ptx::{addr, Kernel, ParamTy, RegKind};

/// Params (out, u, gamma). Grid-stride over B·C threads.
pub fn kernel(b: usize, t: usize, c: usize, reverse: bool) -> Kernel {
    let mut k = Kernel::new(if reverse { "recurrence_reverse" } else { "recurrence" }).with_block(256, 1, 1);
    let out = k.param_reg("out", ParamTy::U64);
    let u = k.param_reg("u", ParamTy::U64);
    let gamma = k.param_reg("gamma", ParamTy::U64);
    let n = k.imm_u32((b * c) as u32);
    let (idx, stride, top, end) = crate::kernels::pointwise::grid_stride_begin(&mut k, n);
    let bi = k.bin("div.u32", RegKind::B32, idx, c as u32);
    let ci = k.bin("rem.u32", RegKind::B32, idx, c as u32);
    let ga = k.addr_of(gamma, ci, 4);
    let g = k.reg(RegKind::F32);
    k.op("ld.global.f32", [g.into(), addr(ga, 0)]);
    // Element index of (bi, step, ci) = (bi·T + step)·C + ci; walk it by ±C.
    let first_step = if reverse { t as u32 - 1 } else { 0 };
    let row = k.tri("mad.lo.u32", RegKind::B32, bi, t as u32, first_step);
    let e = k.tri("mad.lo.u32", RegKind::B32, row, c as u32, ci);
    let s = k.imm_f32(0.0);
    let step = k.imm_u32(0);
    let ltop = k.label("t");
    let lend = k.label("t_end");
    k.place(&ltop);
    let done = k.setp("ge.u32", step, t as u32);
    k.bra_if(done, false, &lend);
    let ua = k.addr_of(u, e, 4);
    let uv = k.reg(RegKind::F32);
    k.op("ld.global.f32", [uv.into(), addr(ua, 0)]);
    let gs = k.bin("mul.rn.f32", RegKind::F32, g, s);
    k.op("add.rn.f32", [s.into(), gs.into(), uv.into()]);
    let oa = k.addr_of(out, e, 4);
    k.op("st.global.f32", [addr(oa, 0), s.into()]);
    if reverse {
        k.op("sub.u32", [e.into(), e.into(), (c as u32).into()]);
    } else {
        k.op("add.u32", [e.into(), e.into(), (c as u32).into()]);
    }
    k.op("add.u32", [step.into(), step.into(), 1u32.into()]);
    k.bra(&ltop);
    k.place(&lend);
    crate::kernels::pointwise::grid_stride_end(&mut k, idx, stride, n, &top, &end);
    k
}

/// A recurrence launch's arguments: out, x, a.
pub fn arguments<T>([out, x, a]: [T; 3]) -> Vec<T> {
    vec![out, x, a]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The builder fills the kernel's parameters (three pointers), both directions.
    #[test]
    fn arguments_match_the_kernels_parameters() {
        for reverse in [false, true] {
            let k = kernel(2, 16, 8, reverse);
            assert!(k.params.iter().all(|p| p.ty == ParamTy::U64));
            assert_eq!(k.params.len(), arguments([0u64; 3]).len());
        }
    }

    #[test]
    fn renders_both_directions() {
        for rev in [false, true] {
            let k = kernel(2, 5, 3, rev);
            k.check_budget().unwrap();
            assert!(k.render().contains(if rev { "sub.u32" } else { "add.rn.f32" }));
        }
    }
}
