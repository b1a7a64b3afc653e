//! Casts and fused elementwise chains.
//!
//! Why: between the matrix products a step is a long tail of cheap, memory-bound ops (the seed's
//! `cast-down`, `add`, `gated-gelu-*` families: 66 + 32 + 32 launches a step). Each costs one
//! pass over its tensors, so the win is fusing a chain into one pass rather than tuning any one
//! op. Rather than a hand-written kernel per chain, an [`Expr`] tree over the inputs is rendered
//! into one grid-stride kernel that loads each input once, evaluates every output expression in
//! registers and stores each output once; the same tree evaluated on the CPU is the reference.
//!
//! How: fp32 in, fp32 out; `add/sub/mul/div` use round-to-nearest (`.rn`, so the assembler does
//! not contract them into FMAs and the CPU reference sees the same roundings); `exp` goes
//! through `ex2.approx` (relative error about 2⁻²²), `tanh` through `1 − 2/(e^{2x}+1)`. The
//! fp32→bf16 [`cast_kernel`] rounds to nearest even (`cvt.rn.bf16.f32`), matching
//! `half::bf16::from_f32`, NaN staying NaN.

use anyhow::{bail, Result};

use crate::driver::{Arg, Function, Gpu, LaunchConfig};
use crate::ptx::{addr, Kernel, ParamTy, Reg, RegKind};

/// Threads per block of every kernel here.
pub const THREADS: u32 = 256;

/// A scalar expression over the inputs of one element.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    In(usize),
    Const(f32),
    Add(Box<Expr>, Box<Expr>),
    Sub(Box<Expr>, Box<Expr>),
    Mul(Box<Expr>, Box<Expr>),
    Div(Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Exp(Box<Expr>),
    Tanh(Box<Expr>),
}

/// Builders so chains read like formulas.
pub fn input(i: usize) -> Expr {
    Expr::In(i)
}
pub fn c(x: f32) -> Expr {
    Expr::Const(x)
}
impl std::ops::Add for Expr {
    type Output = Expr;
    fn add(self, o: Expr) -> Expr {
        Expr::Add(Box::new(self), Box::new(o))
    }
}
impl std::ops::Sub for Expr {
    type Output = Expr;
    fn sub(self, o: Expr) -> Expr {
        Expr::Sub(Box::new(self), Box::new(o))
    }
}
impl std::ops::Mul for Expr {
    type Output = Expr;
    fn mul(self, o: Expr) -> Expr {
        Expr::Mul(Box::new(self), Box::new(o))
    }
}
impl std::ops::Div for Expr {
    type Output = Expr;
    fn div(self, o: Expr) -> Expr {
        Expr::Div(Box::new(self), Box::new(o))
    }
}
impl std::ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::Neg(Box::new(self))
    }
}
impl Expr {
    pub fn exp(self) -> Expr {
        Expr::Exp(Box::new(self))
    }
    pub fn tanh(self) -> Expr {
        Expr::Tanh(Box::new(self))
    }

    /// Highest input index used, plus one.
    pub fn arity(&self) -> usize {
        match self {
            Expr::In(i) => i + 1,
            Expr::Const(_) => 0,
            Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) => a.arity().max(b.arity()),
            Expr::Neg(a) | Expr::Exp(a) | Expr::Tanh(a) => a.arity(),
        }
    }

    /// CPU evaluation (the reference): f32 arithmetic, exact `exp`/`tanh`.
    pub fn eval(&self, x: &[f32]) -> f32 {
        match self {
            Expr::In(i) => x[*i],
            Expr::Const(v) => *v,
            Expr::Add(a, b) => a.eval(x) + b.eval(x),
            Expr::Sub(a, b) => a.eval(x) - b.eval(x),
            Expr::Mul(a, b) => a.eval(x) * b.eval(x),
            Expr::Div(a, b) => a.eval(x) / b.eval(x),
            Expr::Neg(a) => -a.eval(x),
            Expr::Exp(a) => a.eval(x).exp(),
            Expr::Tanh(a) => a.eval(x).tanh(),
        }
    }

    fn emit(&self, k: &mut Kernel, ins: &[Reg]) -> Reg {
        match self {
            Expr::In(i) => ins[*i],
            Expr::Const(v) => k.imm_f32(*v),
            Expr::Add(a, b) => bin(k, "add.rn.f32", a, b, ins),
            Expr::Sub(a, b) => bin(k, "sub.rn.f32", a, b, ins),
            Expr::Mul(a, b) => bin(k, "mul.rn.f32", a, b, ins),
            Expr::Div(a, b) => bin(k, "div.rn.f32", a, b, ins),
            Expr::Neg(a) => {
                let x = a.emit(k, ins);
                k.un("neg.f32", RegKind::F32, x)
            }
            Expr::Exp(a) => {
                let x = a.emit(k, ins);
                emit_exp(k, x)
            }
            Expr::Tanh(a) => {
                let x = a.emit(k, ins);
                let two_x = k.bin("add.rn.f32", RegKind::F32, x, x);
                let e = emit_exp(k, two_x);
                let e1 = k.bin("add.rn.f32", RegKind::F32, e, 1.0f32);
                let q = k.bin("div.rn.f32", RegKind::F32, 2.0f32, e1);
                k.bin("sub.rn.f32", RegKind::F32, 1.0f32, q)
            }
        }
    }
}

fn bin(k: &mut Kernel, op: &str, a: &Expr, b: &Expr, ins: &[Reg]) -> Reg {
    let x = a.emit(k, ins);
    let y = b.emit(k, ins);
    k.bin(op, RegKind::F32, x, y)
}

/// `e^x` as `2^(x·log2 e)`.
pub fn emit_exp(k: &mut Kernel, x: Reg) -> Reg {
    let t = k.bin("mul.rn.f32", RegKind::F32, x, std::f32::consts::LOG2_E);
    k.un("ex2.approx.ftz.f32", RegKind::F32, t)
}

/// A fused elementwise kernel: `outputs[j][i] = exprs[j](inputs[..][i])` for `i < n`.
#[derive(Clone, Debug)]
pub struct Elementwise {
    pub name: String,
    pub inputs: usize,
    pub outputs: Vec<Expr>,
}

impl Elementwise {
    pub fn new(name: &str, outputs: Vec<Expr>) -> Self {
        let inputs = outputs.iter().map(|e| e.arity()).max().unwrap_or(0);
        Elementwise { name: name.to_string(), inputs, outputs }
    }

    /// Parameters: the output pointers, the input pointers, then `n`.
    pub fn kernel(&self) -> Kernel {
        let mut k = Kernel::new(&self.name).with_block(THREADS, 1, 1);
        let outs: Vec<Reg> = (0..self.outputs.len()).map(|j| k.param_reg(&format!("out{j}"), ParamTy::U64)).collect();
        let ins: Vec<Reg> = (0..self.inputs).map(|j| k.param_reg(&format!("in{j}"), ParamTy::U64)).collect();
        let n = k.param_reg("n", ParamTy::U32);
        let (i, stride, top, end) = grid_stride_begin(&mut k, n);
        let vals: Vec<Reg> = ins
            .iter()
            .map(|&p| {
                let a = k.addr_of(p, i, 4);
                let v = k.reg(RegKind::F32);
                k.op("ld.global.nc.f32", [v.into(), addr(a, 0)]);
                v
            })
            .collect();
        for (j, e) in self.outputs.iter().enumerate() {
            let r = e.emit(&mut k, &vals);
            let a = k.addr_of(outs[j], i, 4);
            k.op("st.global.f32", [addr(a, 0), r.into()]);
        }
        grid_stride_end(&mut k, i, stride, n, &top, &end);
        k
    }

    /// CPU reference over whole slices.
    pub fn reference(&self, inputs: &[&[f32]], outputs: &mut [Vec<f32>]) {
        let n = outputs.first().map_or(0, |o| o.len());
        let mut x = vec![0.0f32; self.inputs];
        for i in 0..n {
            for (j, s) in inputs.iter().enumerate() {
                x[j] = s[i];
            }
            for (o, e) in outputs.iter_mut().zip(&self.outputs) {
                o[i] = e.eval(&x);
            }
        }
    }

    /// Launches over `n` elements: `outs` then `ins` device addresses.
    pub fn launch(&self, gpu: &Gpu, f: &Function, outs: &[u64], ins: &[u64], n: u32) -> Result<()> {
        if outs.len() != self.outputs.len() || ins.len() != self.inputs {
            bail!(
                "{}: wants {} outputs and {} inputs, got {} and {}",
                self.name,
                self.outputs.len(),
                self.inputs,
                outs.len(),
                ins.len()
            );
        }
        let mut args: Vec<Arg> = outs.iter().chain(ins).map(|&p| Arg::U64(p)).collect();
        args.push(Arg::U32(n));
        gpu.launch(f, grid_for(gpu, n), &args)
    }
}

/// Blocks for a grid-stride loop over `n` elements: enough to fill the GPU, no more.
pub fn grid_for(gpu: &Gpu, n: u32) -> LaunchConfig {
    let want = n.div_ceil(THREADS).max(1);
    let cap = gpu.info().multiprocessors.max(1) * 8;
    LaunchConfig::linear(want.min(cap), THREADS)
}

/// Opens a grid-stride loop over `n` for this family's fixed block of [`THREADS`].
pub fn grid_stride_begin(k: &mut Kernel, n: Reg) -> (Reg, Reg, String, String) {
    crate::pointwise::grid_stride_begin_with(k, n, Some(THREADS))
}

pub use crate::pointwise::grid_stride_end;

/// `out = a + b`.
pub fn add() -> Elementwise {
    Elementwise::new("ew_add", vec![input(0) + input(1)])
}

/// `out = α·a + β·b` with constants baked in.
pub fn axpby(alpha: f32, beta: f32) -> Elementwise {
    Elementwise::new("ew_axpby", vec![c(alpha) * input(0) + c(beta) * input(1)])
}

fn gelu_tanh(x: Expr) -> Expr {
    // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
    let inner = c(0.797_884_6) * (x.clone() + c(0.044715) * x.clone() * x.clone() * x.clone());
    c(0.5) * x * (c(1.0) + inner.tanh())
}

/// Gated GELU forward (tanh form): `out = gelu(g) · u`, inputs (g, u).
pub fn gated_gelu_forward() -> Elementwise {
    Elementwise::new("ew_gated_gelu_fwd", vec![gelu_tanh(input(0)) * input(1)])
}

/// Gated GELU backward: inputs (g, u, dout) → outputs (dg, du).
pub fn gated_gelu_backward() -> Elementwise {
    let x = input(0);
    let x2 = x.clone() * x.clone();
    let inner = c(0.797_884_6) * (x.clone() + c(0.044715) * x2.clone() * x.clone());
    let t = inner.tanh();
    // d/dx gelu = 0.5(1+t) + 0.5·x·(1−t²)·√(2/π)·(1 + 3·0.044715·x²)
    let dgelu = c(0.5) * (c(1.0) + t.clone())
        + c(0.5) * x.clone() * (c(1.0) - t.clone() * t) * c(0.797_884_6) * (c(1.0) + c(0.134145) * x2);
    let dg = dgelu * input(1) * input(2);
    let du = gelu_tanh(input(0)) * input(2);
    Elementwise::new("ew_gated_gelu_bwd", vec![dg, du])
}

/// fp32 → bf16 (round to nearest even): params (out u16*, in f32*, n).
pub fn cast_kernel() -> Kernel {
    let mut k = Kernel::new("cast_f32_bf16").with_block(THREADS, 1, 1);
    let out = k.param_reg("out", ParamTy::U64);
    let inp = k.param_reg("in", ParamTy::U64);
    let n = k.param_reg("n", ParamTy::U32);
    let (i, stride, top, end) = grid_stride_begin(&mut k, n);
    let a = k.addr_of(inp, i, 4);
    let v = k.reg(RegKind::F32);
    k.op("ld.global.nc.f32", [v.into(), addr(a, 0)]);
    let h = k.un("cvt.rn.bf16.f32", RegKind::B16, v);
    let o = k.addr_of(out, i, 2);
    k.op("st.global.b16", [addr(o, 0), h.into()]);
    grid_stride_end(&mut k, i, stride, n, &top, &end);
    k
}

/// Launches [`cast_kernel`] over `n` elements.
pub fn cast(gpu: &Gpu, f: &Function, out_bf16: u64, in_f32: u64, n: u32) -> Result<()> {
    gpu.launch(f, grid_for(gpu, n), &[Arg::U64(out_bf16), Arg::U64(in_f32), Arg::U32(n)])
}

/// CPU reference of the cast: bf16 bit patterns.
pub fn cast_reference(x: &[f32]) -> Vec<u16> {
    x.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect()
}

/// Every kernel of this module.
pub fn kernels() -> Vec<Kernel> {
    vec![
        cast_kernel(),
        add().kernel(),
        axpby(0.5, -2.0).kernel(),
        gated_gelu_forward().kernel(),
        gated_gelu_backward().kernel(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_render_with_their_params() {
        let t = gated_gelu_backward().kernel().render();
        assert!(t.contains(".entry ew_gated_gelu_bwd("));
        for p in ["out0", "out1", "in0", "in1", "in2", "n"] {
            assert!(t.contains(&format!("ew_gated_gelu_bwd_param_{p}")), "{p}");
        }
        assert!(t.contains("ex2.approx.ftz.f32"));
        let c = cast_kernel().render();
        assert!(c.contains("cvt.rn.bf16.f32") && c.contains("st.global.b16"));
        for k in kernels() {
            k.check_budget().unwrap();
        }
    }

    #[test]
    fn gelu_derivative_matches_finite_differences() {
        let fwd = gated_gelu_forward();
        let bwd = gated_gelu_backward();
        for &g in &[-3.0f32, -0.7, 0.0, 0.4, 2.5] {
            let u = 1.3f32;
            let h = 1e-3f32;
            let fd = (fwd.outputs[0].eval(&[g + h, u]) - fwd.outputs[0].eval(&[g - h, u])) / (2.0 * h);
            let dg = bwd.outputs[0].eval(&[g, u, 1.0]);
            assert!((fd - dg).abs() < 2e-3, "g={g}: fd {fd} vs {dg}");
            let du = bwd.outputs[1].eval(&[g, u, 1.0]);
            assert!((du - fwd.outputs[0].eval(&[g, 1.0])).abs() < 1e-6);
        }
    }

    #[test]
    fn cast_reference_rounds_to_nearest_even() {
        // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1.0).
        let x = [1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::NAN];
        let r = cast_reference(&x);
        assert_eq!(r[0], 0x3F80);
        assert_eq!(r[1], 0x3F82);
        assert!(half::bf16::from_bits(r[2]).is_nan());
    }
}
