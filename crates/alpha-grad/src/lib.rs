//! Reverse-mode autodiff as a graph-to-graph transform: it appends to the same graph the
//! backward computation of a scalar loss with respect to chosen values, one pullback per op.
//! Composite ops get dedicated backward ops (LayerNormBackward, AttentionBackward, …) so a
//! backend can give the backward a kernel of its own.
//!
//! Adjoints of bf16 values are kept in f32: gradients are never rounded to bf16, only the
//! operands of the backward matrix products are (as on the device).

use std::collections::HashMap;

use alpha_ir::{Binary, DType, Graph, IrError, Op, Reduce, TensorType, Unary, Value};

/// The dtype an adjoint of a `dtype` value is kept in.
pub fn adjoint_dtype(dtype: DType) -> DType {
    if dtype == DType::BF16 {
        DType::F32
    } else {
        dtype
    }
}

fn error(g: &Graph, node: u32, message: String) -> IrError {
    let n = &g.nodes[node as usize];
    IrError {
        system: g.system.clone(),
        op: n.op.family().to_string(),
        node,
        scope: n.scope.clone(),
        inputs: n.inputs.iter().map(|&v| g.ty(v).to_string()).collect::<Vec<_>>().join(", "),
        message,
    }
}

/// Sum `dy` down to `shape`, undoing numpy broadcasting.
pub fn unbroadcast(g: &mut Graph, dy: Value, shape: &[usize]) -> Value {
    let dshape = g.shape(dy).to_vec();
    if dshape == shape {
        return dy;
    }
    let lead = dshape.len() - shape.len();
    let mut axes: Vec<usize> = (0..lead).collect();
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 && dshape[lead + i] != 1 {
            axes.push(lead + i);
        }
    }
    let summed = if axes.is_empty() { dy } else { g.sum(dy, &axes, false) };
    g.reshape(summed, shape)
}

/// Zeros shaped like `v`'s adjoint.
fn zeros_like(g: &mut Graph, shape: &[usize], dtype: DType) -> Value {
    g.constant(0.0, shape, adjoint_dtype(dtype))
}

/// Append d`loss`/d`wrt` for each of `wrt` to the graph. `loss` must be a scalar. A value of
/// `wrt` that the loss does not depend on gets a zero gradient.
pub fn backward(g: &mut Graph, loss: Value, wrt: &[Value]) -> Result<Vec<Value>, IrError> {
    if g.ty(loss).numel() != 1 {
        return Err(error(g, loss.node, format!("the loss must be a scalar, got {}", g.ty(loss))));
    }
    let end = loss.node as usize + 1;
    // Which nodes lie on a path from `wrt`: only those need adjoints.
    let mut needs = vec![false; end];
    for v in wrt {
        if (v.node as usize) < end {
            needs[v.node as usize] = true;
        }
    }
    for i in 0..end {
        if !needs[i] && g.nodes[i].inputs.iter().any(|v| needs[v.node as usize]) {
            needs[i] = true;
        }
    }

    let mut adj: HashMap<Value, Value> = HashMap::new();
    let mut pieces: HashMap<Value, Vec<SlicePiece>> = HashMap::new();
    let one = g.constant(1.0, g.shape(loss).to_vec().as_slice(), adjoint_dtype(g.dtype(loss)));
    adj.insert(loss, one);

    for i in (0..end).rev() {
        if !needs[i] {
            continue;
        }
        // Every reader of this node's outputs comes later, so their adjoints are complete.
        for k in 0..g.nodes[i].outputs.len() {
            settle_pieces(g, &mut adj, &mut pieces, Value { node: i as u32, index: k as u16 });
        }
        let node = g.nodes[i].clone();
        let douts: Vec<Option<Value>> =
            (0..node.outputs.len()).map(|k| adj.get(&Value { node: i as u32, index: k as u16 }).copied()).collect();
        if douts.iter().all(|d| d.is_none()) || node.op.is_leaf() {
            continue;
        }
        if let (Op::Slice { axis, start, end }, Some(d)) = (&node.op, douts[0]) {
            // Held back: the pieces of one value's slices may make one Concat (see SlicePiece).
            if needs[node.inputs[0].node as usize] {
                pieces.entry(node.inputs[0]).or_default().push(SlicePiece {
                    axis: *axis,
                    start: *start,
                    end: *end,
                    grad: d,
                });
            }
            continue;
        }
        let dins = pullback(g, i as u32, &node, &douts)?;
        for (input, d) in node.inputs.iter().zip(dins) {
            let Some(d) = d else { continue };
            if !needs[input.node as usize] {
                continue;
            }
            let acc = match adj.get(input) {
                Some(&prev) => g.add(prev, d),
                None => d,
            };
            adj.insert(*input, acc);
        }
    }
    for v in wrt {
        settle_pieces(g, &mut adj, &mut pieces, *v);
    }
    if let Some(e) = g.error() {
        return Err(e.clone());
    }
    Ok(wrt
        .iter()
        .map(|v| match adj.get(v) {
            Some(&d) => d,
            None => {
                let t = g.ty(*v).clone();
                zeros_like(g, &t.shape, t.dtype)
            }
        })
        .collect())
}

/// The adjoint of one Slice of a value, not yet added to the value's adjoint.
///
/// Why: a slice's pullback pads its adjoint with zeros to the whole value. When a value is cut
/// into slices along one axis that cover it exactly (attention's q, k and v out of one fused
/// projection), the padded adjoints summed are just the pieces side by side: one Concat instead
/// of three zero-padded Concats and two full-size Adds — the same numbers (adding zeros is
/// exact), a third of the memory traffic.
struct SlicePiece {
    axis: usize,
    start: usize,
    end: usize,
    grad: Value,
}

/// Adds the held-back slice adjoints of `v` to its adjoint: one Concat when they tile `v` along
/// one axis and nothing else contributes; otherwise each padded with zeros, as the Slice
/// pullback does, and summed.
fn settle_pieces(
    g: &mut Graph,
    adj: &mut HashMap<Value, Value>,
    pieces: &mut HashMap<Value, Vec<SlicePiece>>,
    v: Value,
) {
    let Some(mut ps) = pieces.remove(&v) else { return };
    ps.sort_by_key(|p| (p.axis, p.start));
    let len = |axis: usize| g.shape(v)[axis];
    let tiles = !adj.contains_key(&v)
        && ps.iter().all(|p| p.axis == ps[0].axis)
        && ps[0].start == 0
        && ps.windows(2).all(|w| w[0].end == w[1].start)
        && ps.last().is_some_and(|p| p.end == len(p.axis));
    if tiles {
        let grads: Vec<Value> = ps.iter().map(|p| p.grad).collect();
        let whole = if grads.len() == 1 { grads[0] } else { g.concat(&grads, ps[0].axis) };
        adj.insert(v, whole);
        return;
    }
    let t = g.ty(v).clone();
    let dt = adjoint_dtype(t.dtype);
    for p in ps {
        let mut parts = vec![];
        if p.start > 0 {
            let mut s = t.shape.clone();
            s[p.axis] = p.start;
            parts.push(g.constant(0.0, &s, dt));
        }
        parts.push(p.grad);
        if p.end < t.shape[p.axis] {
            let mut s = t.shape.clone();
            s[p.axis] = t.shape[p.axis] - p.end;
            parts.push(g.constant(0.0, &s, dt));
        }
        let d = if parts.len() == 1 { p.grad } else { g.concat(&parts, p.axis) };
        let acc = match adj.get(&v) {
            Some(&prev) => g.add(prev, d),
            None => d,
        };
        adj.insert(v, acc);
    }
}

/// The adjoints of a node's inputs given its outputs' adjoints (None where zero).
fn pullback(
    g: &mut Graph,
    id: u32,
    node: &alpha_ir::Node,
    douts: &[Option<Value>],
) -> Result<Vec<Option<Value>>, IrError> {
    let x = |k: usize| node.inputs[k];
    let y = Value { node: id, index: 0 };
    let out = |k: u16| Value { node: id, index: k };
    let in_ty = |g: &Graph, k: usize| -> TensorType { g.ty(node.inputs[k]).clone() };
    let dy_or_zero = |g: &mut Graph, k: usize| -> Value {
        match douts[k] {
            Some(d) => d,
            None => {
                let t = node.outputs[k].clone();
                zeros_like(g, &t.shape, t.dtype)
            }
        }
    };
    let dy = dy_or_zero(g, 0);
    let r = match &node.op {
        Op::Constant { .. } => vec![],
        Op::Unary(u) => {
            let xv = x(0);
            let d = match u {
                Unary::Neg => Some(g.neg(dy)),
                Unary::Exp => Some(g.mul(dy, y)),
                Unary::Log => Some(g.div(dy, xv)),
                Unary::Tanh => {
                    let y2 = g.square(y);
                    let one = g.scalar_like(1.0, y);
                    let d = g.sub(one, y2);
                    Some(g.mul(dy, d))
                }
                Unary::Sigmoid => {
                    let one = g.scalar_like(1.0, y);
                    let om = g.sub(one, y);
                    let d = g.mul(y, om);
                    Some(g.mul(dy, d))
                }
                Unary::Gelu => {
                    let d = g.unary(Unary::GeluGrad, xv);
                    Some(g.mul(dy, d))
                }
                Unary::Relu => {
                    let d = g.unary(Unary::Step, xv);
                    Some(g.mul(dy, d))
                }
                Unary::Sin => {
                    let c = g.unary(Unary::Cos, xv);
                    Some(g.mul(dy, c))
                }
                Unary::Cos => {
                    let s = g.unary(Unary::Sin, xv);
                    let ns = g.neg(s);
                    Some(g.mul(dy, ns))
                }
                Unary::Rsqrt => {
                    let y2 = g.square(y);
                    let y3 = g.mul(y2, y);
                    let d = g.scale(y3, -0.5);
                    Some(g.mul(dy, d))
                }
                Unary::Sqrt => {
                    let h = g.scale(dy, 0.5);
                    Some(g.div(h, y))
                }
                Unary::Square => {
                    let two = g.scale(xv, 2.0);
                    Some(g.mul(dy, two))
                }
                Unary::Recip => {
                    let y2 = g.square(y);
                    let d = g.mul(dy, y2);
                    Some(g.neg(d))
                }
                Unary::Abs => {
                    let s = g.unary(Unary::Sign, xv);
                    Some(g.mul(dy, s))
                }
                Unary::GeluGrad | Unary::Step | Unary::Sign => None,
            };
            vec![d]
        }
        Op::Binary(b) => {
            let (a, bv) = (x(0), x(1));
            let (sa, sb) = (in_ty(g, 0).shape, in_ty(g, 1).shape);
            let (da, db) = match b {
                Binary::Add => (Some(dy), Some(dy)),
                Binary::Sub => (Some(dy), Some(g.neg(dy))),
                Binary::Mul => (Some(g.mul(dy, bv)), Some(g.mul(dy, a))),
                Binary::Div => {
                    let da = g.div(dy, bv);
                    let q = g.div(y, bv);
                    let nq = g.neg(q);
                    (Some(da), Some(g.mul(dy, nq)))
                }
                Binary::Max | Binary::Min => {
                    let mask =
                        if *b == Binary::Max { g.binary(Binary::Ge, a, bv) } else { g.binary(Binary::Ge, bv, a) };
                    let one = g.scalar_like(1.0, mask);
                    let inv = g.sub(one, mask);
                    (Some(g.mul(dy, mask)), Some(g.mul(dy, inv)))
                }
                Binary::Pow => {
                    // d/da aᵇ = b·aᵇ/a; d/db aᵇ = aᵇ·ln a.
                    let ya = g.div(y, a);
                    let t = g.mul(ya, bv);
                    let la = g.log(a);
                    let u = g.mul(y, la);
                    (Some(g.mul(dy, t)), Some(g.mul(dy, u)))
                }
                Binary::Ge => (None, None),
            };
            vec![da.map(|d| unbroadcast(g, d, &sa)), db.map(|d| unbroadcast(g, d, &sb))]
        }
        Op::Cast { .. } => {
            let want = adjoint_dtype(in_ty(g, 0).dtype);
            let d = if g.dtype(dy) == want { dy } else { g.cast(dy, want) };
            vec![Some(d)]
        }
        Op::Reduce { kind, axes, keep_dims: _ } => {
            let xt = in_ty(g, 0);
            let kept: Vec<usize> =
                (0..xt.shape.len()).map(|i| if axes.contains(&i) { 1 } else { xt.shape[i] }).collect();
            let dk = g.reshape(dy, &kept);
            let d = match kind {
                Reduce::Sum => g.broadcast(dk, &xt.shape),
                Reduce::Mean => {
                    let count: usize = axes.iter().map(|&a| xt.shape[a]).product();
                    let b = g.broadcast(dk, &xt.shape);
                    g.scale(b, 1.0 / count as f64)
                }
                Reduce::Max => {
                    let yk = g.reshape(y, &kept);
                    let yb = g.broadcast(yk, &xt.shape);
                    let mask = g.binary(Binary::Ge, x(0), yb);
                    let b = g.broadcast(dk, &xt.shape);
                    g.mul(b, mask)
                }
            };
            vec![Some(d)]
        }
        Op::Reshape { .. } => {
            let s = in_ty(g, 0).shape;
            vec![Some(g.reshape(dy, &s))]
        }
        Op::Broadcast { .. } => {
            let s = in_ty(g, 0).shape;
            vec![Some(unbroadcast(g, dy, &s))]
        }
        Op::Permute { perm } => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            vec![Some(g.permute(dy, &inv))]
        }
        Op::Slice { .. } => unreachable!("backward holds slice adjoints back for settle_pieces"),
        Op::Concat { axis } => {
            let mut at = 0;
            let mut r = vec![];
            for k in 0..node.inputs.len() {
                let len = in_ty(g, k).shape[*axis];
                r.push(Some(g.slice(dy, *axis, at, at + len)));
                at += len;
            }
            r
        }
        Op::MatMul { ta, tb } => matmul_pullback(g, x(0), x(1), dy, *ta, *tb),
        Op::Gather => {
            let rows = in_ty(g, 0).shape[0];
            vec![Some(g.scatter_add(dy, x(1), rows)), None]
        }
        Op::ScatterAdd { .. } => vec![Some(g.gather(dy, x(1))), None],
        Op::LayerNorm { .. } => {
            let outs = g.push(Op::LayerNormBackward, &[x(0), x(1), out(1), out(2), dy]);
            vec![Some(outs[0]), Some(outs[1]), Some(outs[2])]
        }
        Op::RmsNorm { .. } => {
            let outs = g.push(Op::RmsNormBackward, &[x(0), x(1), out(1), dy]);
            vec![Some(outs[0]), Some(outs[1])]
        }
        Op::Rotary { base, inverse } => {
            vec![Some(g.push(Op::Rotary { base: *base, inverse: !inverse }, &[dy])[0])]
        }
        Op::Attention { scale, softcap, bf16 } => {
            let outs = g.push(
                Op::AttentionBackward { scale: *scale, softcap: *softcap, bf16: *bf16 },
                &[x(0), x(1), x(2), out(0), out(1), dy],
            );
            vec![Some(outs[0]), Some(outs[1]), Some(outs[2])]
        }
        Op::CrossEntropy { classes } => {
            let d = g.push(Op::CrossEntropyBackward { classes: *classes }, &[x(0), out(1), x(1), dy])[0];
            vec![Some(d), None]
        }
        Op::Recurrence { reverse } => {
            let gamma = x(1);
            let du = g.push(Op::Recurrence { reverse: !reverse }, &[dy, gamma])[0];
            // dγ = Σ du_t · s_{t∓1}: the state the step read.
            let ut = in_ty(g, 0);
            let t = ut.shape[1];
            let mut zshape = ut.shape.clone();
            zshape[1] = 1;
            let zero = g.constant(0.0, &zshape, ut.dtype);
            let prev = if t == 1 {
                zero
            } else if !reverse {
                let s = g.slice(y, 1, 0, t - 1);
                g.concat(&[zero, s], 1)
            } else {
                let s = g.slice(y, 1, 1, t);
                g.concat(&[s, zero], 1)
            };
            let prod = g.mul(du, prev);
            let dgamma = g.sum(prod, &[0, 1], false);
            vec![Some(du), Some(dgamma)]
        }
        Op::DeltaRule => {
            let outs = g.push(Op::DeltaRuleBackward, &[x(0), x(1), x(2), x(3), x(4), dy]);
            outs.into_iter().map(Some).collect()
        }
        Op::HarmonicScan => {
            let outs = g.push(Op::HarmonicScanBackward, &[x(0), x(1), x(2), x(3), dy]);
            outs.into_iter().map(Some).collect()
        }
        Op::LayerNormBackward
        | Op::DeltaRuleBackward
        | Op::HarmonicScanBackward
        | Op::RmsNormBackward
        | Op::AttentionBackward { .. }
        | Op::CrossEntropyBackward { .. }
        | Op::AdamW { .. }
        | Op::SumSquares
        | Op::Param { .. }
        | Op::State { .. }
        | Op::Input { .. }
        | Op::HostScalar { .. } => {
            return Err(error(g, id, "this op has no pullback (second derivatives are not supported)".into()));
        }
    };
    Ok(r)
}

/// Gradients of C = op(A)·op(B). Backward products take the operands' dtype (bf16 on the
/// device path); a 2-D B shared across a batch gets its gradient summed over the batch.
fn matmul_pullback(g: &mut Graph, a: Value, b: Value, dc: Value, ta: bool, tb: bool) -> Vec<Option<Value>> {
    let op_dtype = g.dtype(a);
    let dco = if g.dtype(dc) != op_dtype { g.cast(dc, op_dtype) } else { dc };
    let (ra, rb) = (g.shape(a).len(), g.shape(b).len());
    let shared_b = rb == 2 && ra > 2;
    // A transposed batched A needs B batched too, as the first operand of its product.
    let bb = if shared_b && ta {
        let mut s = g.shape(a)[..ra - 2].to_vec();
        s.extend(g.shape(b).to_vec());
        g.broadcast(b, &s)
    } else {
        b
    };
    let da = match (ta, tb) {
        (false, false) => g.matmul_t(dco, b, false, true),
        (false, true) => g.matmul_t(dco, b, false, false),
        (true, false) => g.matmul_t(bb, dco, false, true),
        (true, true) => g.matmul_t(bb, dco, true, true),
    };
    let db = if shared_b && !ta {
        // Fold the batch into rows: one product sums over it.
        let k = g.shape(a)[ra - 1];
        let n = g.shape(dco)[ra - 1];
        let rows = g.ty(a).numel() / k;
        let a2 = g.reshape(a, &[rows, k]);
        let dc2 = g.reshape(dco, &[rows, n]);
        if tb {
            g.matmul_t(dc2, a2, true, false)
        } else {
            g.matmul_t(a2, dc2, true, false)
        }
    } else {
        let full = match (ta, tb) {
            (false, false) => g.matmul_t(a, dco, true, false),
            (false, true) => g.matmul_t(dco, a, true, false),
            (true, false) => g.matmul(a, dco),
            (true, true) => g.matmul_t(dco, a, true, true),
        };
        if shared_b {
            let lead: Vec<usize> = (0..ra - 2).collect();
            g.sum(full, &lead, false)
        } else {
            full
        }
    };
    vec![Some(da), Some(db)]
}
