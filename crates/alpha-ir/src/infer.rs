//! Shape and dtype rules: one function that, given an op and its input types, says what it
//! produces or why it cannot. The builder and the verifier both call it, so the rules live once.

use crate::dtype::DType;
use crate::graph::TensorType;
use crate::op::{Op, Reduce};

fn tt(shape: Vec<usize>, dtype: DType) -> TensorType {
    TensorType { shape, dtype }
}

/// A cross-entropy's class bound: at least one class, and no more than a row holds.
fn want_classes(classes: Option<usize>, logits: &TensorType) -> Result<(), String> {
    match classes {
        Some(c) if c == 0 || c > logits.shape[1] => {
            Err(format!("cross-entropy over {c} classes of logits {logits}: needs 1 to {}", logits.shape[1]))
        }
        _ => Ok(()),
    }
}

fn want_arity(op: &Op, inputs: &[TensorType], n: usize) -> Result<(), String> {
    if inputs.len() != n {
        return Err(format!("{} takes {n} inputs, got {}", op.family(), inputs.len()));
    }
    Ok(())
}

fn want_float(t: &TensorType, what: &str) -> Result<(), String> {
    if !t.dtype.is_float() {
        return Err(format!("{what} must be a float tensor, got {}", t));
    }
    Ok(())
}

/// f32 for bf16, any other dtype itself: where a loss's sums and a bf16 value's gradient live.
fn wide_float(dtype: DType) -> DType {
    if dtype == DType::BF16 {
        DType::F32
    } else {
        dtype
    }
}

fn want_int(t: &TensorType, what: &str) -> Result<(), String> {
    if !t.dtype.is_int() {
        return Err(format!("{what} must be an integer tensor, got {}", t));
    }
    Ok(())
}

fn want_same_dtype(a: &TensorType, b: &TensorType) -> Result<(), String> {
    if a.dtype != b.dtype {
        return Err(format!("dtypes differ: {a} and {b}"));
    }
    Ok(())
}

fn want_shape(t: &TensorType, shape: &[usize], what: &str) -> Result<(), String> {
    if t.shape != shape {
        return Err(format!("{what} must have shape {shape:?}, got {t}"));
    }
    Ok(())
}

/// Numpy broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// (B, T, K, V) of the delta rule's q `[B, T, K]`, k `[B, T, K]`, v `[B, T, V]`, β `[B, T]`,
/// m0 `[V, K]`, all of one float dtype.
fn delta_rule_dims(inputs: &[TensorType]) -> Result<(usize, usize, usize, usize), String> {
    let (q, k, v, beta, m0) = (&inputs[0], &inputs[1], &inputs[2], &inputs[3], &inputs[4]);
    want_float(q, "q")?;
    for x in [k, v, beta, m0] {
        want_same_dtype(q, x)?;
    }
    if q.shape.len() != 3 || v.shape.len() != 3 {
        return Err(format!("the delta rule needs q as [B, T, K] and v as [B, T, V], got {q} and {v}"));
    }
    let (b, t, kd) = (q.shape[0], q.shape[1], q.shape[2]);
    want_shape(k, &[b, t, kd], "k")?;
    let vd = v.shape[2];
    want_shape(v, &[b, t, vd], "v")?;
    want_shape(beta, &[b, t], "β")?;
    want_shape(m0, &[vd, kd], "m0")?;
    Ok((b, t, kd, vd))
}

/// (B, T, H, L, D) of the harmonic scan's r, w `[B, T, H, L]`, v `[B, T, H, D]`, γ `[H, L]`,
/// all of one float dtype.
fn harmonic_scan_dims(inputs: &[TensorType]) -> Result<(usize, usize, usize, usize, usize), String> {
    let (r, w, v, gamma) = (&inputs[0], &inputs[1], &inputs[2], &inputs[3]);
    want_float(r, "r")?;
    for x in [w, v, gamma] {
        want_same_dtype(r, x)?;
    }
    if r.shape.len() != 4 || v.shape.len() != 4 {
        return Err(format!("the harmonic scan needs r as [B, T, H, L] and v as [B, T, H, D], got {r} and {v}"));
    }
    let (b, t, h, l) = (r.shape[0], r.shape[1], r.shape[2], r.shape[3]);
    want_shape(w, &r.shape, "w")?;
    let d = v.shape[3];
    want_shape(v, &[b, t, h, d], "v")?;
    want_shape(gamma, &[h, l], "γ")?;
    Ok((b, t, h, l, d))
}

/// The output types of `op` applied to `inputs`, or a message saying what is wrong.
pub fn infer(op: &Op, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
    match op {
        Op::Param { .. } | Op::State { .. } | Op::Input { .. } | Op::HostScalar { .. } => {
            Err("leaf ops carry their own type".into())
        }
        Op::Constant { .. } => Err("constants carry their own type".into()),
        Op::Unary(_) => {
            want_arity(op, inputs, 1)?;
            want_float(&inputs[0], "operand")?;
            Ok(vec![inputs[0].clone()])
        }
        Op::Binary(_) => {
            want_arity(op, inputs, 2)?;
            want_float(&inputs[0], "left operand")?;
            want_same_dtype(&inputs[0], &inputs[1])?;
            let shape = broadcast_shapes(&inputs[0].shape, &inputs[1].shape)
                .ok_or_else(|| format!("shapes {:?} and {:?} do not broadcast", inputs[0].shape, inputs[1].shape))?;
            Ok(vec![tt(shape, inputs[0].dtype)])
        }
        Op::Cast { to } => {
            want_arity(op, inputs, 1)?;
            Ok(vec![tt(inputs[0].shape.clone(), *to)])
        }
        Op::Reduce { kind, axes, keep_dims } => {
            want_arity(op, inputs, 1)?;
            want_float(&inputs[0], "operand")?;
            let rank = inputs[0].shape.len();
            let mut seen = vec![false; rank];
            for &a in axes {
                if a >= rank || seen[a] {
                    return Err(format!("bad reduction axes {axes:?} for {}", inputs[0]));
                }
                seen[a] = true;
            }
            if *kind == Reduce::Max && axes.is_empty() {
                return Err("max over no axes".into());
            }
            let shape = (0..rank)
                .filter_map(|i| if seen[i] { keep_dims.then_some(1) } else { Some(inputs[0].shape[i]) })
                .collect();
            Ok(vec![tt(shape, inputs[0].dtype)])
        }
        Op::Reshape { shape } => {
            want_arity(op, inputs, 1)?;
            if shape.iter().product::<usize>() != inputs[0].numel() {
                return Err(format!("cannot reshape {} to {shape:?}", inputs[0]));
            }
            Ok(vec![tt(shape.clone(), inputs[0].dtype)])
        }
        Op::Broadcast { shape } => {
            want_arity(op, inputs, 1)?;
            match broadcast_shapes(&inputs[0].shape, shape) {
                Some(s) if &s == shape => Ok(vec![tt(shape.clone(), inputs[0].dtype)]),
                _ => Err(format!("cannot broadcast {} to {shape:?}", inputs[0])),
            }
        }
        Op::Permute { perm } => {
            want_arity(op, inputs, 1)?;
            let rank = inputs[0].shape.len();
            let mut sorted = perm.clone();
            sorted.sort_unstable();
            if sorted != (0..rank).collect::<Vec<_>>() {
                return Err(format!("{perm:?} is not a permutation of the axes of {}", inputs[0]));
            }
            Ok(vec![tt(perm.iter().map(|&p| inputs[0].shape[p]).collect(), inputs[0].dtype)])
        }
        Op::Slice { axis, start, end } => {
            want_arity(op, inputs, 1)?;
            let s = &inputs[0].shape;
            if *axis >= s.len() || start >= end || *end > s[*axis] {
                return Err(format!("slice {start}..{end} of axis {axis} is outside {}", inputs[0]));
            }
            let mut shape = s.clone();
            shape[*axis] = end - start;
            Ok(vec![tt(shape, inputs[0].dtype)])
        }
        Op::Concat { axis } => {
            if inputs.is_empty() {
                return Err("concat of nothing".into());
            }
            let first = &inputs[0];
            if *axis >= first.shape.len() {
                return Err(format!("concat axis {axis} is outside {first}"));
            }
            let mut shape = first.shape.clone();
            shape[*axis] = 0;
            for t in inputs {
                want_same_dtype(first, t)?;
                if t.shape.len() != first.shape.len()
                    || (0..shape.len()).any(|i| i != *axis && t.shape[i] != first.shape[i])
                {
                    return Err(format!("cannot concatenate {first} and {t} on axis {axis}"));
                }
                shape[*axis] += t.shape[*axis];
            }
            Ok(vec![tt(shape, first.dtype)])
        }
        Op::MatMul { ta, tb } => {
            want_arity(op, inputs, 2)?;
            let (a, b) = (&inputs[0], &inputs[1]);
            want_float(a, "left operand")?;
            want_same_dtype(a, b)?;
            if a.shape.len() < 2 || b.shape.len() < 2 {
                return Err(format!("matmul needs matrices, got {a} and {b}"));
            }
            let (ra, rb) = (a.shape.len(), b.shape.len());
            let (m, ka) = if *ta { (a.shape[ra - 1], a.shape[ra - 2]) } else { (a.shape[ra - 2], a.shape[ra - 1]) };
            let (kb, n) = if *tb { (b.shape[rb - 1], b.shape[rb - 2]) } else { (b.shape[rb - 2], b.shape[rb - 1]) };
            if ka != kb {
                return Err(format!(
                    "inner dimensions differ: {a}{} · {b}{}",
                    if *ta { "ᵀ" } else { "" },
                    if *tb { "ᵀ" } else { "" }
                ));
            }
            if rb > 2 && a.shape[..ra - 2] != b.shape[..rb - 2] {
                return Err(format!("batch dimensions differ: {a} and {b}"));
            }
            let mut shape = a.shape[..ra - 2].to_vec();
            shape.extend([m, n]);
            let dtype = if a.dtype == DType::BF16 { DType::F32 } else { a.dtype };
            Ok(vec![tt(shape, dtype)])
        }
        Op::Gather => {
            want_arity(op, inputs, 2)?;
            let (table, ids) = (&inputs[0], &inputs[1]);
            want_float(table, "table")?;
            want_int(ids, "ids")?;
            if table.shape.is_empty() {
                return Err(format!("gather needs a table with rows, got {table}"));
            }
            let mut shape = ids.shape.clone();
            shape.extend(&table.shape[1..]);
            Ok(vec![tt(shape, table.dtype)])
        }
        Op::ScatterAdd { rows } => {
            want_arity(op, inputs, 2)?;
            let (src, ids) = (&inputs[0], &inputs[1]);
            want_float(src, "source")?;
            want_int(ids, "ids")?;
            if src.shape.len() < ids.shape.len() || src.shape[..ids.shape.len()] != ids.shape[..] {
                return Err(format!("source {src} does not start with the ids' shape {ids}"));
            }
            let mut shape = vec![*rows];
            shape.extend(&src.shape[ids.shape.len()..]);
            Ok(vec![tt(shape, src.dtype)])
        }
        Op::LayerNorm { .. } => {
            want_arity(op, inputs, 3)?;
            let x = &inputs[0];
            want_float(x, "input")?;
            let c = *x.shape.last().ok_or("layernorm of a scalar")?;
            want_shape(&inputs[1], &[c], "gain")?;
            want_shape(&inputs[2], &[c], "bias")?;
            let rows = x.shape[..x.shape.len() - 1].to_vec();
            Ok(vec![x.clone(), tt(rows.clone(), x.dtype), tt(rows, x.dtype)])
        }
        Op::LayerNormBackward => {
            want_arity(op, inputs, 5)?;
            let x = &inputs[0];
            let c = *x.shape.last().ok_or("layernorm of a scalar")?;
            let rows = &x.shape[..x.shape.len() - 1];
            want_shape(&inputs[1], &[c], "gain")?;
            want_shape(&inputs[2], rows, "mean")?;
            want_shape(&inputs[3], rows, "rstd")?;
            want_shape(&inputs[4], &x.shape, "dy")?;
            Ok(vec![x.clone(), inputs[1].clone(), inputs[1].clone()])
        }
        Op::RmsNorm { .. } => {
            want_arity(op, inputs, 2)?;
            let x = &inputs[0];
            want_float(x, "input")?;
            let c = *x.shape.last().ok_or("rmsnorm of a scalar")?;
            want_shape(&inputs[1], &[c], "gain")?;
            Ok(vec![x.clone(), tt(x.shape[..x.shape.len() - 1].to_vec(), x.dtype)])
        }
        Op::RmsNormBackward => {
            want_arity(op, inputs, 4)?;
            let x = &inputs[0];
            let c = *x.shape.last().ok_or("rmsnorm of a scalar")?;
            want_shape(&inputs[1], &[c], "gain")?;
            want_shape(&inputs[2], &x.shape[..x.shape.len() - 1], "rstd")?;
            want_shape(&inputs[3], &x.shape, "dy")?;
            Ok(vec![x.clone(), inputs[1].clone()])
        }
        Op::Rotary { .. } => {
            want_arity(op, inputs, 1)?;
            let x = &inputs[0];
            want_float(x, "input")?;
            if x.shape.len() != 4 || !x.shape[3].is_multiple_of(2) {
                return Err(format!("rotary needs [B, H, T, D] with D even, got {x}"));
            }
            Ok(vec![x.clone()])
        }
        Op::Attention { .. } => {
            want_arity(op, inputs, 3)?;
            let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
            want_float(q, "q")?;
            want_same_dtype(q, k)?;
            want_same_dtype(q, v)?;
            if q.shape.len() != 4 {
                return Err(format!("attention needs q as [B, H, T, D], got {q}"));
            }
            let (b, h, t, d) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
            if k.shape.len() != 4 || k.shape[0] != b || k.shape[2] != t || k.shape[3] != d {
                return Err(format!("k {k} does not match q {q}"));
            }
            let g = k.shape[1];
            if g == 0 || h % g != 0 {
                return Err(format!("{h} query heads are not a multiple of {g} key/value heads"));
            }
            want_shape(v, &k.shape, "v")?;
            Ok(vec![q.clone(), tt(vec![b, h, t], q.dtype)])
        }
        Op::AttentionBackward { .. } => {
            want_arity(op, inputs, 6)?;
            let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
            want_shape(&inputs[3], &q.shape, "o")?;
            want_shape(&inputs[4], &q.shape[..3], "lse")?;
            want_shape(&inputs[5], &q.shape, "do")?;
            Ok(vec![q.clone(), k.clone(), v.clone()])
        }
        Op::CrossEntropy { classes } => {
            want_arity(op, inputs, 2)?;
            let (logits, targets) = (&inputs[0], &inputs[1]);
            want_float(logits, "logits")?;
            want_int(targets, "targets")?;
            if logits.shape.len() != 2 {
                return Err(format!("cross-entropy needs logits as [N, V], got {logits}"));
            }
            want_classes(*classes, logits)?;
            want_shape(targets, &logits.shape[..1], "targets")?;
            let n = vec![logits.shape[0]];
            // bf16 logits (a model that rounds them, as mixed-precision training does) give
            // f32 losses and log-sum-exps: the sums run in f32 either way.
            let dtype = wide_float(logits.dtype);
            Ok(vec![tt(n.clone(), dtype), tt(n, dtype)])
        }
        Op::CrossEntropyBackward { classes } => {
            want_arity(op, inputs, 4)?;
            let logits = &inputs[0];
            if logits.shape.len() != 2 {
                return Err(format!("cross-entropy needs logits as [N, V], got {logits}"));
            }
            want_classes(*classes, logits)?;
            want_shape(&inputs[1], &logits.shape[..1], "lse")?;
            want_shape(&inputs[2], &logits.shape[..1], "targets")?;
            want_shape(&inputs[3], &logits.shape[..1], "dloss")?;
            // The gradient of bf16 logits is f32, as every bf16 value's adjoint is.
            Ok(vec![tt(logits.shape.clone(), wide_float(logits.dtype))])
        }
        Op::Recurrence { .. } => {
            want_arity(op, inputs, 2)?;
            let (u, gamma) = (&inputs[0], &inputs[1]);
            want_float(u, "input")?;
            want_same_dtype(u, gamma)?;
            if u.shape.len() < 2 || u.shape[2..] != gamma.shape[..] {
                return Err(format!("recurrence needs u as [B, T, C…] and γ as [C…], got {u} and {gamma}"));
            }
            Ok(vec![u.clone()])
        }
        Op::DeltaRule => {
            want_arity(op, inputs, 5)?;
            let (b, t, _, v) = delta_rule_dims(inputs)?;
            Ok(vec![tt(vec![b, t, v], inputs[0].dtype)])
        }
        Op::DeltaRuleBackward => {
            want_arity(op, inputs, 6)?;
            let (b, t, _, v) = delta_rule_dims(&inputs[..5])?;
            want_shape(&inputs[5], &[b, t, v], "do")?;
            want_same_dtype(&inputs[0], &inputs[5])?;
            Ok(inputs[..5].to_vec())
        }
        Op::HarmonicScan => {
            want_arity(op, inputs, 4)?;
            harmonic_scan_dims(inputs)?;
            Ok(vec![inputs[2].clone()])
        }
        Op::HarmonicScanBackward => {
            want_arity(op, inputs, 5)?;
            harmonic_scan_dims(&inputs[..4])?;
            want_shape(&inputs[4], &inputs[2].shape, "dy")?;
            want_same_dtype(&inputs[0], &inputs[4])?;
            Ok(inputs[..4].to_vec())
        }
        Op::AdamW { .. } => {
            want_arity(op, inputs, 8)?;
            let p = &inputs[0];
            want_float(p, "parameter")?;
            for (i, what) in [(1, "gradient"), (2, "first moment"), (3, "second moment")] {
                want_shape(&inputs[i], &p.shape, what)?;
                want_same_dtype(p, &inputs[i])?;
            }
            for (i, what) in [(4, "lr"), (5, "bc1"), (6, "bc2"), (7, "gscale")] {
                if inputs[i].numel() != 1 {
                    return Err(format!("{what} must be a scalar, got {}", inputs[i]));
                }
            }
            Ok(vec![p.clone(), p.clone(), p.clone()])
        }
        Op::SumSquares => {
            if inputs.is_empty() {
                return Err("sum-squares takes at least one input".into());
            }
            for (i, x) in inputs.iter().enumerate() {
                want_float(x, &format!("input {i}"))?;
                want_same_dtype(&inputs[0], x)?;
            }
            Ok(vec![tt(vec![], DType::F32)])
        }
    }
}
