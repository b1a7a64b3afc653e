//! One kernel for a run of same-shape elementwise ops.
//!
//! Why: a transformer's step is full of short chains of elementwise arithmetic over one
//! activation shape — the gated GELU's backward is `dh·up`, `dh·act`, `gelu'(gate)` and their
//! product, four launches that each read and write whole `[tokens, 1408]` tensors. Run as one
//! kernel, every element is read once, the intermediates that nothing else reads stay in
//! registers, and three launches go. With memory the limit for such ops, the traffic is the
//! time.
//!
//! How: a [`Chain`] lists its external inputs, its steps (a unary or binary function of earlier
//! steps or inputs) and which steps it stores. The kernel is a grid-stride loop over the
//! elements (all operands contiguous f32 of the same length): load every input, compute the
//! steps with the pointwise kernel's own instruction sequences ([`crate::kernels::pointwise::emit_unary`],
//! [`emit_binary`]), store the outputs. Each step is the same arithmetic as its separate launch,
//! so results are bit-identical; loads all precede stores, so an output may share its slot
//! with an input exactly.

use alpha_ir::{Binary, Unary};
use anyhow::{bail, Result};

use crate::kernels::pointwise::{
    emit_binary, emit_unary_sharing, grid_stride_begin_with, grid_stride_end, SharedTerms, THREADS,
};
use crate::kernels::reduce::Reduction;
use crate::ptx::{addr, Kernel, ParamTy, Reg, RegKind};

/// A step's operand: an external input or an earlier step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Src {
    Input(usize),
    Step(usize),
}

/// One elementwise function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Unary(Unary, Src),
    Binary(Binary, Src, Src),
}

/// A run of elementwise ops over `n` contiguous f32 elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    pub n: usize,
    pub inputs: usize,
    pub steps: Vec<Step>,
    /// Steps written out, in parameter order.
    pub outputs: Vec<usize>,
    /// Per output: stored rounded to bf16 (the cast that alone reads it, done here).
    pub bf16: Vec<bool>,
    /// Per input, how it is broadcast over the elements (missing entries: not at all).
    pub broadcast: Vec<Broadcast>,
}

/// How a chain input is read at element `i`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Broadcast {
    /// Its own element `i`.
    #[default]
    None,
    /// One f32 that every element reads (a learning rate, a momentum, a clip's scale), loaded
    /// once a thread. Why: an optimizer's per-matrix arithmetic is a chain with such scalars at
    /// every step (Muon's momentum and Nesterov direction: five ops), and without them each op
    /// was a launch.
    Scalar,
    /// A row of this many f32 repeated over the leading axes: element `i` reads `i mod n`. Why:
    /// a linear layer's bias added to its product is such a row, and with it the bias add joins
    /// the activation or the residual add after it in one launch.
    Row(u32),
    /// `count` f32 each held over `inner` consecutive elements, the whole repeated: element `i`
    /// reads `(i / inner) mod count`. Why: a per-row or per-group value over trailing axes
    /// (`[N, 7, 1]` or `[7, 1]` against `[N, 7, D]`: a unit vector's inverse norm, Diakosmos's
    /// per-group couplings and gates) joins the chain instead of a launch of its own.
    Group { inner: u32, count: u32 },
    /// A view of a larger tensor read in place (slices, and reshapes of them), at most three
    /// runs deep, the pointer at its first element: element `i` reads `(i / (inner · mid)) ·
    /// outer_step + ((i / inner) mod mid) · mid_step + i mod inner`. Why: a slice along an axis
    /// with others before it is a copy of its own (Diakosmos's spatial path slices whole
    /// activations into arithmetic), which the chain reading it in place skips.
    Strided { inner: u32, mid: u32, mid_step: u32, outer_step: u32 },
}

impl Chain {
    /// The gated GELU's backward over `n` elements, the case this module is for: inputs dh, up,
    /// act, gate; outputs d_up = dh·act and d_gate = (dh·up)·gelu'(gate), both f32.
    pub fn gated_gelu_backward(n: usize) -> Chain {
        Chain {
            n,
            inputs: 4,
            steps: vec![
                Step::Binary(Binary::Mul, Src::Input(0), Src::Input(1)),
                Step::Binary(Binary::Mul, Src::Input(0), Src::Input(2)),
                Step::Unary(Unary::GeluGrad, Src::Input(3)),
                Step::Binary(Binary::Mul, Src::Step(0), Src::Step(2)),
            ],
            outputs: vec![1, 3],
            bf16: vec![false, false],
            broadcast: vec![],
        }
    }

    /// [`Chain::gated_gelu_backward`] as the lowering fuses it: `gelu(gate)` recomputed from
    /// gate instead of read (inputs dh, up, gate), and both gradients stored as bf16 (the casts
    /// that alone read them).
    pub fn gated_gelu_backward_recomputing(n: usize) -> Chain {
        Chain {
            n,
            inputs: 3,
            steps: vec![
                Step::Unary(Unary::Gelu, Src::Input(2)),
                Step::Binary(Binary::Mul, Src::Input(0), Src::Input(1)),
                Step::Binary(Binary::Mul, Src::Input(0), Src::Step(0)),
                Step::Unary(Unary::GeluGrad, Src::Input(2)),
                Step::Binary(Binary::Mul, Src::Step(1), Src::Step(3)),
            ],
            outputs: vec![2, 4],
            bf16: vec![true, true],
            broadcast: vec![],
        }
    }

    /// Entry name: the steps' functions in order, e.g. `ew_mul_mul_gelugrad_mul` (`ewh_…` when
    /// an output is stored as bf16), then `_s` and the scalar inputs' numbers if any, and `_r`,
    /// each row input's number and `x` its length.
    pub fn name(&self) -> String {
        let mut s = String::from(if self.bf16.contains(&true) { "ewh" } else { "ew" });
        for st in &self.steps {
            let f = match st {
                Step::Unary(u, _) => format!("{u:?}"),
                Step::Binary(b, _, _) => format!("{b:?}"),
            };
            s.push('_');
            s.push_str(&f.to_lowercase());
        }
        if (0..self.inputs).any(|j| self.is_scalar(j)) {
            s.push_str("_s");
            for j in (0..self.inputs).filter(|&j| self.is_scalar(j)) {
                s.push_str(&j.to_string());
            }
        }
        for j in 0..self.inputs {
            match self.broadcast_of(j) {
                Broadcast::Row(n) => s.push_str(&format!("_r{j}x{n}")),
                Broadcast::Group { inner, count } => s.push_str(&format!("_g{j}x{count}b{inner}")),
                Broadcast::Strided { inner, mid, mid_step, outer_step } => {
                    s.push_str(&format!("_v{j}x{inner}o{outer_step}"));
                    if mid > 1 {
                        s.push_str(&format!("m{mid}s{mid_step}"));
                    }
                }
                Broadcast::None | Broadcast::Scalar => {}
            }
        }
        s
    }

    /// How input `j` is read.
    pub fn broadcast_of(&self, j: usize) -> Broadcast {
        self.broadcast.get(j).copied().unwrap_or_default()
    }

    /// Whether input `j` is one value every element reads.
    pub fn is_scalar(&self, j: usize) -> bool {
        self.broadcast_of(j) == Broadcast::Scalar
    }

    /// Whether every input is read at its own element (what a GEMM's epilogue can run).
    pub fn elementwise(&self) -> bool {
        (0..self.inputs).all(|j| self.broadcast_of(j) == Broadcast::None)
    }

    /// Checks that every step reads inputs or earlier steps and every output names a step.
    pub fn validate(&self) -> Result<()> {
        if self.n > u32::MAX as usize {
            bail!("{}: {} elements exceed 32-bit indexing", self.name(), self.n);
        }
        for (i, st) in self.steps.iter().enumerate() {
            let srcs = match *st {
                Step::Unary(_, a) => vec![a],
                Step::Binary(_, a, b) => vec![a, b],
            };
            for s in srcs {
                let ok = match s {
                    Src::Input(j) => j < self.inputs,
                    Src::Step(j) => j < i,
                };
                if !ok {
                    bail!("{}: step {i} reads {s:?}, which does not come before it", self.name());
                }
            }
        }
        if self.outputs.iter().any(|&o| o >= self.steps.len()) {
            bail!("{}: an output names no step", self.name());
        }
        Ok(())
    }

    /// The kernel: params `out0…`, then `in0…` (device addresses).
    pub fn kernel(&self) -> Result<Kernel> {
        self.validate()?;
        let mut k = Kernel::new(&self.name()).with_block(THREADS, 1, 1);
        let (outs, ins) = self.pointer_params(&mut k);
        let n = k.imm_u32(self.n as u32);
        let scalars = self.load_scalars(&mut k, &ins);
        let (i, stride, top, end) = grid_stride_begin_with(&mut k, n, Some(THREADS));
        let steps = self.element(&mut k, i, &ins, &scalars);
        self.store_outputs(&mut k, i, &outs, &steps);
        grid_stride_end(&mut k, i, stride, n, &top, &end);
        Ok(k)
    }

    /// The chain run in the first pass of reduction `r` over one of its steps: each element's
    /// steps computed where the reduction reads it (every element once), the outputs stored,
    /// and step `summed` added into its output's sum; params `out` and `partials` (the
    /// reduction's), then `out0…` and `in0…` as [`Chain::kernel`]'s. Why: a per-channel
    /// scale's gradient is the column sum of `dy · x`, which the chain computing the scale's
    /// other gradient (`dy · s`) makes beside it; a gate's or a norm's gradient sums a product
    /// over each group or over everything (Diakosmos's `[N, 7, 190]` products summed to `[N,
    /// 7]` or `[7]`). Summed there, the step is never stored, nor read back by a launch of its
    /// own. The sums are the reduction's path's, in its order, so the same bits as the chain's
    /// launch and the reduction's.
    pub fn reduction_kernel(&self, summed: usize, r: &Reduction) -> Result<Kernel> {
        self.validate()?;
        if r.outputs() * r.count() != self.n || summed >= self.steps.len() {
            bail!("{}: no reduction of step {summed} over its {} elements ({r:?})", self.name(), self.n);
        }
        let path = if r.columns {
            "cols"
        } else if r.warp_rows() {
            "warps"
        } else {
            "red"
        };
        let name = format!("{}_{path}{summed}", self.name());
        let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
        let out = k.param_reg("out", ParamTy::U64);
        let partials = k.param_reg("partials", ParamTy::U64);
        let (outs, ins) = self.pointer_params(&mut k);
        let scalars = self.load_scalars(&mut k, &ins);
        r.pass(&mut k, [out, partials], &mut |k, i| {
            let steps = self.element(k, i, &ins, &scalars);
            self.store_outputs(k, i, &outs, &steps);
            steps[summed]
        });
        k.ret();
        Ok(k)
    }

    /// Params `out0…` then `in0…`, the outputs' and inputs' device addresses.
    fn pointer_params(&self, k: &mut Kernel) -> (Vec<Reg>, Vec<Reg>) {
        let outs = (0..self.outputs.len()).map(|j| k.param_reg(&format!("out{j}"), ParamTy::U64)).collect();
        let ins = (0..self.inputs).map(|j| k.param_reg(&format!("in{j}"), ParamTy::U64)).collect();
        (outs, ins)
    }

    /// The scalar inputs, loaded once a thread before any element.
    fn load_scalars(&self, k: &mut Kernel, ins: &[Reg]) -> Vec<Option<Reg>> {
        (0..self.inputs)
            .map(|j| {
                self.is_scalar(j).then(|| {
                    let f = k.reg(RegKind::F32);
                    k.op("ld.global.f32", [f.into(), addr(ins[j], 0)]);
                    f
                })
            })
            .collect()
    }

    /// Element `i`'s inputs loaded (each as its broadcast reads it) and every step computed:
    /// the steps' registers.
    fn element(&self, k: &mut Kernel, i: Reg, ins: &[Reg], scalars: &[Option<Reg>]) -> Vec<Reg> {
        let vals: Vec<Reg> = ins
            .iter()
            .zip(scalars)
            .enumerate()
            .map(|(j, (&base, scalar))| match scalar {
                Some(f) => *f,
                None => {
                    let at = match self.broadcast_of(j) {
                        Broadcast::Row(n) => k.bin("rem.u32", RegKind::B32, i, n),
                        Broadcast::Group { inner, count } => {
                            let held = k.bin("div.u32", RegKind::B32, i, inner);
                            k.bin("rem.u32", RegKind::B32, held, count)
                        }
                        Broadcast::Strided { inner, mid, mid_step, outer_step } => {
                            let run = k.bin("div.u32", RegKind::B32, i, inner);
                            let c = k.bin("rem.u32", RegKind::B32, i, inner);
                            if mid > 1 {
                                let outer = k.bin("div.u32", RegKind::B32, run, mid);
                                let m = k.bin("rem.u32", RegKind::B32, run, mid);
                                let at = k.tri("mad.lo.u32", RegKind::B32, m, mid_step, c);
                                k.tri("mad.lo.u32", RegKind::B32, outer, outer_step, at)
                            } else {
                                k.tri("mad.lo.u32", RegKind::B32, run, outer_step, c)
                            }
                        }
                        _ => i,
                    };
                    let a = k.addr_of(base, at, 4);
                    let f = k.reg(RegKind::F32);
                    k.op("ld.global.f32", [f.into(), addr(a, 0)]);
                    f
                }
            })
            .collect();
        emit_steps(k, &self.steps, &vals)
    }

    /// Element `i` of every output stored (rounded to bf16 where the output is a cast's).
    fn store_outputs(&self, k: &mut Kernel, i: Reg, outs: &[Reg], steps: &[Reg]) {
        for (j, &o) in self.outputs.iter().enumerate() {
            if self.bf16.get(j).copied().unwrap_or(false) {
                let a = k.addr_of(outs[j], i, 2);
                let h = k.un("cvt.rn.bf16.f32", RegKind::B16, steps[o]);
                k.op("st.global.b16", [addr(a, 0), h.into()]);
            } else {
                let a = k.addr_of(outs[j], i, 4);
                k.op("st.global.f32", [addr(a, 0), steps[o].into()]);
            }
        }
    }
}

/// Emits `steps` over `vals` (one register a chain input) and returns each step's register:
/// the pointwise kernels' own instruction sequences ([`crate::kernels::pointwise::emit_unary`], [`emit_binary`]), so a
/// chain computes the same bits wherever it runs (its own kernel, or a GEMM's epilogue).
pub fn emit_steps(k: &mut Kernel, steps: &[Step], vals: &[Reg]) -> Vec<Reg> {
    let mut out: Vec<Reg> = vec![];
    // Steps of one input share their common terms (a gated GELU's backward computes
    // `tanh` once for `gelu` and `gelu'`; the same bits).
    let mut shared = SharedTerms::default();
    for st in steps {
        let get = |s: Src| match s {
            Src::Input(j) => vals[j],
            Src::Step(j) => out[j],
        };
        let r = match *st {
            Step::Unary(u, a) => {
                let x = get(a);
                emit_unary_sharing(k, u, x, &mut shared)
            }
            Step::Binary(b, x, y) => {
                let (x, y) = (get(x), get(y));
                emit_binary(k, b, x, y)
            }
        };
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::pointwise::emit_unary;

    /// The gated GELU's backward as one chain: one load per input, one store per output, and
    /// each step's instructions exactly those of its own pointwise kernel.
    #[test]
    fn gated_gelu_backward_is_one_kernel_with_the_pointwise_arithmetic() {
        let chain = Chain::gated_gelu_backward(1024 * 1408);
        assert_eq!(chain.name(), "ew_mul_mul_gelugrad_mul");
        let k = chain.kernel().unwrap();
        k.check_budget().unwrap();
        let text = k.render();
        assert_eq!(text.matches("ld.global.f32").count(), 4);
        assert_eq!(text.matches("st.global.f32").count(), 2);
        let mut probe = Kernel::new("probe");
        let x = probe.reg(RegKind::F32);
        emit_unary(&mut probe, Unary::GeluGrad, x);
        let tanh_ops = probe.render().matches("ex2.approx.f32").count();
        assert_eq!(text.matches("ex2.approx.f32").count(), tanh_ops);
        let bad = Chain { steps: vec![Step::Unary(Unary::Exp, Src::Step(0))], outputs: vec![0], ..chain };
        assert!(bad.kernel().is_err());
    }
}
