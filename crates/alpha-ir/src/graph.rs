//! The graph: an append-only list of nodes in topological order, each producing one or more
//! typed tensors. System code builds it through the methods here; a shape error is recorded
//! (the first one wins) and reported by [`Graph::finish`], so model code reads like math
//! instead of a chain of `?`.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::infer::infer;
use crate::op::{Binary, Init, Op, Reduce, Unary};

/// The type of one tensor: static shape and element type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    pub shape: Vec<usize>,
    pub dtype: DType,
}

impl TensorType {
    pub fn new(shape: impl Into<Vec<usize>>, dtype: DType) -> Self {
        TensorType { shape: shape.into(), dtype }
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }
}

impl std::fmt::Display for TensorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        write!(f, "{}[{}]", self.dtype, dims.join("×"))
    }
}

/// One output of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Value {
    pub node: u32,
    pub index: u16,
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.index == 0 {
            write!(f, "%{}", self.node)
        } else {
            write!(f, "%{}.{}", self.node, self.index)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<Value>,
    pub outputs: Vec<TensorType>,
    /// Where in the system this came from (`blocks.3.attn`), for errors and profiles.
    pub scope: String,
}

/// A shape or type error, naming the system, the op, where it was built and the types involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{system}: {op} at node %{node} ({scope}) with inputs [{inputs}]: {message}")]
pub struct IrError {
    pub system: String,
    pub op: String,
    pub node: u32,
    pub scope: String,
    pub inputs: String,
    pub message: String,
}

/// A computation under construction or finished.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Graph {
    pub system: String,
    pub nodes: Vec<Node>,
    #[serde(skip)]
    scope: Vec<String>,
    #[serde(skip)]
    error: Option<IrError>,
}

impl Graph {
    pub fn new(system: impl Into<String>) -> Self {
        Graph { system: system.into(), ..Default::default() }
    }

    /// The type of a value.
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.nodes[v.node as usize].outputs[v.index as usize]
    }
    pub fn shape(&self, v: Value) -> &[usize] {
        &self.ty(v).shape
    }
    pub fn dtype(&self, v: Value) -> DType {
        self.ty(v).dtype
    }
    pub fn node(&self, v: Value) -> &Node {
        &self.nodes[v.node as usize]
    }

    /// Run `f` with `name` appended to the scope path (`blocks.3` then `attn`).
    pub fn scoped<R>(&mut self, name: impl Into<String>, f: impl FnOnce(&mut Self) -> R) -> R {
        self.scope.push(name.into());
        let r = f(self);
        self.scope.pop();
        r
    }

    fn scope_path(&self) -> String {
        self.scope.join(".")
    }

    /// The dotted path for a parameter named `leaf` in the current scope.
    pub fn path(&self, leaf: &str) -> String {
        if self.scope.is_empty() {
            leaf.to_string()
        } else {
            format!("{}.{leaf}", self.scope_path())
        }
    }

    /// The first error recorded while building, if any.
    pub fn error(&self) -> Option<&IrError> {
        self.error.as_ref()
    }

    /// Finish building: the first recorded error, or the graph verified.
    pub fn finish(self) -> Result<Graph, IrError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        crate::verify::verify(&self)?;
        Ok(self)
    }

    fn push_raw(&mut self, op: Op, inputs: Vec<Value>, outputs: Vec<TensorType>) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(Node { op, inputs, outputs, scope: self.scope_path() });
        id
    }

    /// Append an op, inferring its outputs. On a type error the error is recorded and a
    /// placeholder of the first input's type is returned so building can go on.
    pub fn push(&mut self, op: Op, inputs: &[Value]) -> Vec<Value> {
        let types: Vec<TensorType> = inputs.iter().map(|&v| self.ty(v).clone()).collect();
        match infer(&op, &types) {
            Ok(outs) => {
                let n = outs.len();
                let id = self.push_raw(op, inputs.to_vec(), outs);
                (0..n).map(|i| Value { node: id, index: i as u16 }).collect()
            }
            Err(message) => {
                if self.error.is_none() {
                    self.error = Some(IrError {
                        system: self.system.clone(),
                        op: op.family().to_string(),
                        node: self.nodes.len() as u32,
                        scope: self.scope_path(),
                        inputs: types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
                        message,
                    });
                }
                let placeholder = types.first().cloned().unwrap_or_else(|| TensorType::new(vec![], DType::F32));
                let id = self.push_raw(Op::Constant { value: 0.0 }, vec![], vec![placeholder]);
                vec![Value { node: id, index: 0 }; 8]
            }
        }
    }

    /// Append node `i` again, reading `inputs` in place of its own, with its scope: how a
    /// phase is built a second time over the same leaves (a training step's health variant).
    /// Returns the copy's outputs.
    pub fn copy_node(&mut self, i: usize, inputs: &[Value]) -> Vec<Value> {
        let node = self.nodes[i].clone();
        let saved = std::mem::replace(&mut self.scope, vec![node.scope.clone()]);
        let out = self.push(node.op, inputs);
        self.scope = saved;
        out[..node.outputs.len()].to_vec()
    }

    fn push1(&mut self, op: Op, inputs: &[Value]) -> Value {
        self.push(op, inputs)[0]
    }

    // ---- leaves -------------------------------------------------------------------------

    /// A learned tensor named `leaf` under the current scope.
    pub fn param(&mut self, leaf: &str, shape: &[usize], init: Init) -> Value {
        let name = self.path(leaf);
        if let Init::Rows(rows) = &init {
            if shape.first() != Some(&rows.len()) && self.error.is_none() {
                self.error = Some(IrError {
                    system: self.system.clone(),
                    op: "param".into(),
                    node: self.nodes.len() as u32,
                    scope: self.scope_path(),
                    inputs: String::new(),
                    message: format!("{name}: {} row values for a tensor of shape {shape:?}", rows.len()),
                });
            }
        }
        let id = self.push_raw(Op::Param { name, init }, vec![], vec![TensorType::new(shape, DType::F32)]);
        Value { node: id, index: 0 }
    }
    /// Persistent state (optimizer moments) with a full name.
    pub fn state(&mut self, name: &str, ty: TensorType, init: Init) -> Value {
        let id = self.push_raw(Op::State { name: name.into(), init }, vec![], vec![ty]);
        Value { node: id, index: 0 }
    }
    /// Data fed each step.
    pub fn input(&mut self, name: &str, shape: &[usize], dtype: DType) -> Value {
        let id = self.push_raw(Op::Input { name: name.into() }, vec![], vec![TensorType::new(shape, dtype)]);
        Value { node: id, index: 0 }
    }
    /// A scalar the host sets before each step.
    pub fn host_scalar(&mut self, name: &str, dtype: DType) -> Value {
        let id = self.push_raw(Op::HostScalar { name: name.into() }, vec![], vec![TensorType::new(vec![], dtype)]);
        Value { node: id, index: 0 }
    }
    pub fn constant(&mut self, value: f64, shape: &[usize], dtype: DType) -> Value {
        let id = self.push_raw(Op::Constant { value }, vec![], vec![TensorType::new(shape, dtype)]);
        Value { node: id, index: 0 }
    }
    /// A scalar constant of `like`'s dtype.
    pub fn scalar_like(&mut self, value: f64, like: Value) -> Value {
        let dt = self.dtype(like);
        self.constant(value, &[], dt)
    }

    // ---- elementwise --------------------------------------------------------------------

    pub fn unary(&mut self, u: Unary, x: Value) -> Value {
        self.push1(Op::Unary(u), &[x])
    }
    pub fn binary(&mut self, b: Binary, x: Value, y: Value) -> Value {
        self.push1(Op::Binary(b), &[x, y])
    }
    pub fn add(&mut self, x: Value, y: Value) -> Value {
        self.binary(Binary::Add, x, y)
    }
    pub fn sub(&mut self, x: Value, y: Value) -> Value {
        self.binary(Binary::Sub, x, y)
    }
    pub fn mul(&mut self, x: Value, y: Value) -> Value {
        self.binary(Binary::Mul, x, y)
    }
    pub fn div(&mut self, x: Value, y: Value) -> Value {
        self.binary(Binary::Div, x, y)
    }
    /// x·s for a constant s.
    pub fn scale(&mut self, x: Value, s: f64) -> Value {
        let c = self.scalar_like(s, x);
        self.mul(x, c)
    }
    pub fn neg(&mut self, x: Value) -> Value {
        self.unary(Unary::Neg, x)
    }
    pub fn exp(&mut self, x: Value) -> Value {
        self.unary(Unary::Exp, x)
    }
    pub fn log(&mut self, x: Value) -> Value {
        self.unary(Unary::Log, x)
    }
    pub fn tanh(&mut self, x: Value) -> Value {
        self.unary(Unary::Tanh, x)
    }
    pub fn sigmoid(&mut self, x: Value) -> Value {
        self.unary(Unary::Sigmoid, x)
    }
    pub fn gelu(&mut self, x: Value) -> Value {
        self.unary(Unary::Gelu, x)
    }
    pub fn relu(&mut self, x: Value) -> Value {
        self.unary(Unary::Relu, x)
    }
    pub fn square(&mut self, x: Value) -> Value {
        self.unary(Unary::Square, x)
    }
    pub fn sqrt(&mut self, x: Value) -> Value {
        self.unary(Unary::Sqrt, x)
    }
    pub fn rsqrt(&mut self, x: Value) -> Value {
        self.unary(Unary::Rsqrt, x)
    }
    pub fn cast(&mut self, x: Value, to: DType) -> Value {
        self.push1(Op::Cast { to }, &[x])
    }

    // ---- reductions and layout -----------------------------------------------------------

    pub fn reduce(&mut self, kind: Reduce, x: Value, axes: &[usize], keep_dims: bool) -> Value {
        self.push1(Op::Reduce { kind, axes: axes.to_vec(), keep_dims }, &[x])
    }
    pub fn sum(&mut self, x: Value, axes: &[usize], keep_dims: bool) -> Value {
        self.reduce(Reduce::Sum, x, axes, keep_dims)
    }
    /// Sum over every axis to a scalar.
    pub fn sum_all(&mut self, x: Value) -> Value {
        let axes: Vec<usize> = (0..self.shape(x).len()).collect();
        self.sum(x, &axes, false)
    }
    pub fn mean_all(&mut self, x: Value) -> Value {
        let axes: Vec<usize> = (0..self.shape(x).len()).collect();
        self.reduce(Reduce::Mean, x, &axes, false)
    }
    pub fn reshape(&mut self, x: Value, shape: &[usize]) -> Value {
        self.push1(Op::Reshape { shape: shape.to_vec() }, &[x])
    }
    pub fn broadcast(&mut self, x: Value, shape: &[usize]) -> Value {
        self.push1(Op::Broadcast { shape: shape.to_vec() }, &[x])
    }
    pub fn permute(&mut self, x: Value, perm: &[usize]) -> Value {
        self.push1(Op::Permute { perm: perm.to_vec() }, &[x])
    }
    pub fn slice(&mut self, x: Value, axis: usize, start: usize, end: usize) -> Value {
        self.push1(Op::Slice { axis, start, end }, &[x])
    }
    pub fn concat(&mut self, xs: &[Value], axis: usize) -> Value {
        self.push1(Op::Concat { axis }, xs)
    }
    pub fn matmul(&mut self, a: Value, b: Value) -> Value {
        self.matmul_t(a, b, false, false)
    }
    pub fn matmul_t(&mut self, a: Value, b: Value, ta: bool, tb: bool) -> Value {
        self.push1(Op::MatMul { ta, tb }, &[a, b])
    }
    pub fn gather(&mut self, table: Value, ids: Value) -> Value {
        self.push1(Op::Gather, &[table, ids])
    }
    pub fn scatter_add(&mut self, src: Value, ids: Value, rows: usize) -> Value {
        self.push1(Op::ScatterAdd { rows }, &[src, ids])
    }

    // ---- composites ------------------------------------------------------------------------

    /// LayerNorm over the last axis; returns y.
    pub fn layer_norm(&mut self, x: Value, gain: Value, bias: Value, eps: f64) -> Value {
        self.push(Op::LayerNorm { eps }, &[x, gain, bias])[0]
    }
    /// RMSNorm over the last axis with a gain; returns y.
    pub fn rms_norm(&mut self, x: Value, gain: Value, eps: f64) -> Value {
        self.push(Op::RmsNorm { eps }, &[x, gain])[0]
    }
    pub fn rotary(&mut self, x: Value, base: f64) -> Value {
        self.push1(Op::Rotary { base, inverse: false }, &[x])
    }
    /// Causal attention in f32; returns o.
    pub fn attention(&mut self, q: Value, k: Value, v: Value, scale: f64, softcap: Option<f64>) -> Value {
        self.push(Op::Attention { scale, softcap, bf16: false }, &[q, k, v])[0]
    }
    /// Causal attention with bf16 product operands and f32 sums (see [`Op::Attention`]).
    pub fn attention_bf16(&mut self, q: Value, k: Value, v: Value, scale: f64, softcap: Option<f64>) -> Value {
        self.push(Op::Attention { scale, softcap, bf16: true }, &[q, k, v])[0]
    }
    /// Per-position cross-entropy `[N]`.
    pub fn cross_entropy(&mut self, logits: Value, targets: Value) -> Value {
        self.push(Op::CrossEntropy { classes: None }, &[logits, targets])[0]
    }
    /// Per-position cross-entropy `[N]` over the first `classes` columns of the logits' rows
    /// (a padded vocabulary's real entries).
    pub fn cross_entropy_over(&mut self, logits: Value, targets: Value, classes: usize) -> Value {
        self.push(Op::CrossEntropy { classes: Some(classes) }, &[logits, targets])[0]
    }
    pub fn recurrence(&mut self, u: Value, gamma: Value) -> Value {
        self.push1(Op::Recurrence { reverse: false }, &[u, gamma])
    }

    /// The delta-rule memory: q, k `[B, T, K]`, v `[B, T, V]`, β `[B, T]`, m0 `[V, K]` →
    /// o `[B, T, V]` (see [`Op::DeltaRule`]).
    pub fn delta_rule(&mut self, q: Value, k: Value, v: Value, beta: Value, m0: Value) -> Value {
        self.push1(Op::DeltaRule, &[q, k, v, beta, m0])
    }

    /// The harmonic scan: r, w `[B, T, H, L]`, v `[B, T, H, D]`, γ `[H, L]` → y `[B, T, H, D]`
    /// (see [`Op::HarmonicScan`]).
    pub fn harmonic_scan(&mut self, r: Value, w: Value, v: Value, gamma: Value) -> Value {
        self.push1(Op::HarmonicScan, &[r, w, v, gamma])
    }

    /// Every parameter: (value, name), in build order.
    pub fn params(&self) -> Vec<(Value, String)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.op {
                Op::Param { name, .. } => Some((Value { node: i as u32, index: 0 }, name.clone())),
                _ => None,
            })
            .collect()
    }

    /// Number of learned scalars.
    pub fn parameter_count(&self) -> usize {
        self.params().iter().map(|(v, _)| self.ty(*v).numel()).sum()
    }
}
