//! Executes a Plan on the CPU over one arena of `T`. Kernels run in plan order; each reads its
//! inputs' slots and writes its outputs' slots, which the planner keeps disjoint (AdamW, the
//! one in-place op, is handled on its own).

use std::collections::HashMap;

use alpha_ir::{Op, Value};
use alpha_plan::{plan, Plan, PlanError};

use crate::kernels::{
    adamw, attention, delta_rule, elementwise as ew, harmonic_scan, index, layout, loss, matmul, norms, recurrence,
    rotary,
};
use crate::real::Real;

pub struct Cpu<T: Real> {
    pub plan: Plan,
    arena: Vec<T>,
    names: HashMap<String, Value>,
}

impl<T: Real> Cpu<T> {
    /// Plan `program` with one slot an element and make an arena for it: parameters and state
    /// zero (the run policy initialises them), constants filled.
    pub fn compile(program: &alpha_ir::Program) -> Result<Self, PlanError> {
        Ok(Self::new(plan(program, alpha_plan::elements, 16)?))
    }

    pub fn new(plan: Plan) -> Self {
        let mut arena = vec![T::zero(); plan.arena];
        let mut names = HashMap::new();
        for (i, n) in plan.program.graph.nodes.iter().enumerate() {
            let v = Value { node: i as u32, index: 0 };
            match &n.op {
                Op::Param { name, .. } | Op::State { name, .. } | Op::Input { name } | Op::HostScalar { name } => {
                    names.insert(name.clone(), v);
                }
                Op::Constant { value } => {
                    let s = plan.slot(v);
                    arena[s.offset..s.offset + n.outputs[0].numel()].iter_mut().for_each(|x| *x = T::of(*value));
                }
                _ => {}
            }
        }
        Cpu { plan, arena, names }
    }

    /// The leaf (parameter, state, input or host scalar) called `name`.
    pub fn leaf(&self, name: &str) -> Option<Value> {
        self.names.get(name).copied()
    }

    pub fn read(&self, v: Value) -> &[T] {
        let s = self.plan.slot(v);
        &self.arena[s.offset..s.offset + self.plan.program.graph.ty(v).numel()]
    }

    pub fn write(&mut self, v: Value, data: &[T]) {
        let n = self.plan.program.graph.ty(v).numel();
        assert_eq!(data.len(), n, "writing {} elements into {} of {n}", data.len(), v);
        let s = self.plan.slot(v);
        self.arena[s.offset..s.offset + n].copy_from_slice(data);
    }

    /// Write a leaf by name from f64 values (host scalars, ids, initial weights).
    pub fn write_named(&mut self, name: &str, data: &[f64]) {
        let v = self.leaf(name).unwrap_or_else(|| panic!("no leaf named {name}"));
        let d: Vec<T> = data.iter().map(|&x| T::of(x)).collect();
        self.write(v, &d);
    }

    pub fn run_phase(&mut self, phase: usize) {
        let kernels: Vec<u32> = self.plan.phases[phase].kernels.iter().map(|k| k.node).collect();
        for node in kernels {
            self.run_kernel(node);
        }
        self.copies(phase);
    }

    /// Run a phase timing each kernel with the host clock: (node, µs).
    pub fn run_phase_timed(&mut self, phase: usize) -> Vec<(u32, f64)> {
        let kernels: Vec<u32> = self.plan.phases[phase].kernels.iter().map(|k| k.node).collect();
        let mut times = Vec::with_capacity(kernels.len());
        for node in kernels {
            let t0 = std::time::Instant::now();
            self.run_kernel(node);
            times.push((node, t0.elapsed().as_secs_f64() * 1e6));
        }
        self.copies(phase);
        times
    }

    /// The phase-end assignments: persistent tensor ← computed value.
    fn copies(&mut self, phase: usize) {
        for c in self.plan.phases[phase].copies.clone() {
            let (d, s) = (self.plan.slot(c.dst), self.plan.slot(c.src));
            if d.offset != s.offset {
                let n = self.plan.program.graph.ty(c.dst).numel();
                self.arena.copy_within(s.offset..s.offset + n, d.offset);
            }
        }
    }

    /// Run every phase once, in order.
    pub fn run_all(&mut self) {
        for p in 0..self.plan.phases.len() {
            self.run_phase(p);
        }
    }

    fn slice(&self, v: Value) -> &[T] {
        self.read(v)
    }

    /// SAFETY: the caller must not hold another view overlapping `v`'s slot.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice_mut(&self, v: Value) -> &mut [T] {
        let s = self.plan.slot(v);
        let n = self.plan.program.graph.ty(v).numel();
        std::slice::from_raw_parts_mut((self.arena.as_ptr() as *mut T).add(s.offset), n)
    }

    fn scalar(&self, v: Value) -> f64 {
        self.read(v)[0].f64()
    }

    fn run_kernel(&mut self, id: u32) {
        let g = &self.plan.program.graph;
        let node = &g.nodes[id as usize];
        let ins: Vec<&[T]> = node.inputs.iter().map(|&v| self.slice(v)).collect();
        let shape = |k: usize| g.shape(node.inputs[k]);
        let out = |k: u16| Value { node: id, index: k };
        let oshape = &node.outputs[0].shape;
        if let Op::AdamW { beta1, beta2, eps, weight_decay } = node.op {
            let h = adamw::Hyper {
                beta1,
                beta2,
                eps,
                weight_decay,
                lr: self.scalar(node.inputs[4]),
                bc1: self.scalar(node.inputs[5]),
                bc2: self.scalar(node.inputs[6]),
                gscale: self.scalar(node.inputs[7]),
            };
            // SAFETY: p, m, v are three distinct persistent slots; g is a fourth.
            unsafe {
                let p = self.slice_mut(node.inputs[0]);
                let m = self.slice_mut(node.inputs[2]);
                let v = self.slice_mut(node.inputs[3]);
                adamw::adamw(p, ins[1], m, v, &h);
            }
            return;
        }
        // SAFETY: the planner gives every output of a live kernel a slot disjoint from its
        // inputs and from each other.
        let o0 = unsafe { self.slice_mut(out(0)) };
        match &node.op {
            Op::Unary(u) => ew::unary(*u, ins[0], o0),
            Op::Binary(b) => ew::binary(*b, ins[0], shape(0), ins[1], shape(1), o0, oshape),
            Op::Cast { to } => ew::cast(ins[0], *to, o0),
            Op::Reduce { kind, axes, .. } => layout::reduce(*kind, ins[0], shape(0), axes, o0),
            Op::Broadcast { .. } => ew::broadcast(ins[0], shape(0), o0, oshape),
            Op::Permute { perm } => layout::permute(ins[0], shape(0), perm, o0),
            Op::Slice { axis, start, end } => layout::slice(ins[0], shape(0), *axis, *start, end - start, o0),
            Op::Concat { axis } => {
                let mut at = 0;
                for (k, part) in ins.iter().enumerate() {
                    let len = shape(k)[*axis];
                    layout::place(part, oshape, *axis, at, len, o0);
                    at += len;
                }
            }
            Op::MatMul { ta, tb } => {
                let (sa, sb) = (shape(0), shape(1));
                let ra = sa.len();
                let (m, k) = if *ta { (sa[ra - 1], sa[ra - 2]) } else { (sa[ra - 2], sa[ra - 1]) };
                let n = oshape[oshape.len() - 1];
                let batch: usize = sa[..ra - 2].iter().product();
                matmul::matmul(ins[0], ins[1], o0, batch, m, k, n, *ta, *tb, sb.len() > 2);
            }
            Op::Gather => index::gather(ins[0], shape(0)[0], ins[1], o0),
            Op::ScatterAdd { rows } => index::scatter_add(ins[0], ins[1], *rows, o0),
            Op::LayerNorm { eps } => {
                let (o1, o2) = unsafe { (self.slice_mut(out(1)), self.slice_mut(out(2))) };
                norms::layer_norm(ins[0], ins[1], ins[2], *eps, o0, o1, o2);
            }
            Op::LayerNormBackward => {
                let (o1, o2) = unsafe { (self.slice_mut(out(1)), self.slice_mut(out(2))) };
                norms::layer_norm_backward(ins[0], ins[1], ins[2], ins[3], ins[4], o0, o1, o2);
            }
            Op::RmsNorm { eps } => {
                let o1 = unsafe { self.slice_mut(out(1)) };
                norms::rms_norm(ins[0], ins[1], *eps, o0, o1);
            }
            Op::RmsNormBackward => {
                let o1 = unsafe { self.slice_mut(out(1)) };
                norms::rms_norm_backward(ins[0], ins[1], ins[2], ins[3], o0, o1);
            }
            Op::Rotary { base, inverse } => rotary::rotary(ins[0], shape(0), *base, *inverse, o0),
            Op::Attention { scale, softcap, bf16 } => {
                let o1 = unsafe { self.slice_mut(out(1)) };
                let (q, k) = (shape(0), shape(1));
                let dims = attention::Dims { b: q[0], h: q[1], g: k[1], t: q[2], d: q[3] };
                let how = attention::How { scale: *scale, softcap: *softcap, bf16: *bf16 };
                attention::forward(ins[0], ins[1], ins[2], &dims, how, o0, o1);
            }
            Op::AttentionBackward { scale, softcap, bf16 } => {
                let (o1, o2) = unsafe { (self.slice_mut(out(1)), self.slice_mut(out(2))) };
                let (q, k) = (shape(0), shape(1));
                let dims = attention::Dims { b: q[0], h: q[1], g: k[1], t: q[2], d: q[3] };
                let how = attention::How { scale: *scale, softcap: *softcap, bf16: *bf16 };
                attention::backward(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5], &dims, how, o0, o1, o2);
            }
            Op::CrossEntropy { classes } => {
                let o1 = unsafe { self.slice_mut(out(1)) };
                let w = shape(0)[1];
                loss::forward(ins[0], ins[1], (w, classes.unwrap_or(w)), o0, o1);
            }
            Op::CrossEntropyBackward { classes } => {
                let w = shape(0)[1];
                loss::backward(ins[0], ins[1], ins[2], ins[3], (w, classes.unwrap_or(w)), o0)
            }
            Op::Recurrence { reverse } => {
                let s = shape(0);
                recurrence::recurrence(ins[0], ins[1], s[0], s[1], *reverse, o0);
            }
            Op::DeltaRule => {
                let dims = delta_rule::Dims::of(shape(0), shape(2));
                delta_rule::forward(ins[0], ins[1], ins[2], ins[3], ins[4], &dims, o0);
            }
            Op::DeltaRuleBackward => {
                // SAFETY: five distinct outputs of this kernel (see above).
                let (o1, o2, o3, o4) = unsafe {
                    (self.slice_mut(out(1)), self.slice_mut(out(2)), self.slice_mut(out(3)), self.slice_mut(out(4)))
                };
                let dims = delta_rule::Dims::of(shape(0), shape(2));
                let grads = delta_rule::Grads { dq: o0, dk: o1, dv: o2, dbeta: o3, dm0: o4 };
                delta_rule::backward(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5], &dims, grads);
            }
            Op::HarmonicScan => {
                let dims = harmonic_scan::Dims::of(shape(0), shape(2));
                harmonic_scan::forward(ins[0], ins[1], ins[2], ins[3], &dims, o0);
            }
            Op::HarmonicScanBackward => {
                // SAFETY: four distinct outputs of this kernel (see above).
                let (o1, o2, o3) = unsafe { (self.slice_mut(out(1)), self.slice_mut(out(2)), self.slice_mut(out(3))) };
                let dims = harmonic_scan::Dims::of(shape(0), shape(2));
                let grads = harmonic_scan::Grads { dr: o0, dw: o1, dv: o2, dgamma: o3 };
                harmonic_scan::backward(ins[0], ins[1], ins[2], ins[3], ins[4], &dims, grads);
            }
            Op::SumSquares => o0[0] = T::of(layout::sum_squares(&ins)),
            Op::AdamW { .. }
            | Op::Reshape { .. }
            | Op::Param { .. }
            | Op::State { .. }
            | Op::Input { .. }
            | Op::HostScalar { .. }
            | Op::Constant { .. } => {
                unreachable!("not a kernel: {}", node.op.family())
            }
        }
    }
}
