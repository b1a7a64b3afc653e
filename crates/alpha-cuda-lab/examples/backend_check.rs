//! Whole programs on the GPU against the CPU reference.
//!
//! `backend_check [--ptx-dir DIR] [--ptx-only] [--ops] [--system bob|coppelius|kickdelta|diakosmos]
//!                [--batch N] [--steps N] [--checked] [--seed N]`
//!
//! - `--ptx-dir DIR`: lowers the op cases and each system's training and inference programs
//!   (no GPU needed) and writes every distinct kernel's PTX to DIR for `ptxas`.
//! - `--ops`: one small program per op family (random data, odd shapes), run by the CPU
//!   reference and by `CudaBackend`; prints max |Δ| and ‖Δ‖/‖ref‖ per output.
//! - `--system S`: S's training program at `--batch` (S's default batch without it), with every
//!   gradient exposed as an output, the same initial leaves and tokens on both backends, one
//!   step; compares loss, per-position losses, each gradient (cosine, max |Δ| over the tensor's
//!   max) and each parameter after the update. Then determinism (two GPU runs of `--steps` steps from the same start, bit for bit) and the
//!   replayed step's device time and launch count.
//!
//! Without a GPU the GPU parts print "skipped: no CUDA device".

use std::collections::BTreeMap;
use std::time::Instant;

use alpha_cpu::CpuBackend;
use alpha_cuda::{CudaBackend, Gpu};
use alpha_ir::{Binary, DType, Graph, Init, Op, Program, Reduce, Unary, Value};
use alpha_learn::Model;
use alpha_plan::Backend;
use alpha_systems::System;
use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn rng_for(seed: u64, name: &str) -> ChaCha8Rng {
    let mut h = seed ^ 0x9E37_79B9_7F4A_7C15;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01B3);
    }
    ChaCha8Rng::seed_from_u64(h)
}

fn max_abs(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).abs()).fold(0.0, f64::max)
}
fn rel(a: &[f32], b: &[f32]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum();
    let r: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    if r == 0.0 {
        d.sqrt()
    } else {
        (d / r).sqrt()
    }
}
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let ab: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let aa: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum();
    let bb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum();
    if aa == 0.0 && bb == 0.0 {
        1.0
    } else {
        ab / (aa.sqrt() * bb.sqrt())
    }
}

// ---- op cases ------------------------------------------------------------------------------

struct Case {
    name: &'static str,
    program: Program,
    /// Integer inputs: (name, ids, bound).
    ids: Vec<(String, usize)>,
    tol: f64,
}

fn case(name: &'static str, tol: f64, build: impl FnOnce(&mut Graph) -> Vec<(&'static str, Value)>) -> Case {
    let mut g = Graph::new(name);
    let outs = build(&mut g);
    let mut outputs = BTreeMap::new();
    for (n, v) in outs {
        outputs.insert(n.to_string(), v);
    }
    let ids = g
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Input { name } => Some((name.clone(), n.outputs[0].numel())),
            _ => None,
        })
        .collect();
    let graph = g.finish().unwrap_or_else(|e| panic!("case {name}: {e}"));
    Case { name, program: Program::single(graph, "forward", outputs), ids, tol }
}

fn p(g: &mut Graph, name: &str, shape: &[usize]) -> Value {
    g.param(name, shape, Init::Uniform { bound: 1.0 })
}
fn pos(g: &mut Graph, name: &str, shape: &[usize]) -> Value {
    g.param(name, shape, Init::Linspace { start: 0.25, step: 0.01 })
}

fn cases() -> Vec<Case> {
    let mut v = vec![];
    v.push(case("unary", 2e-6, |g| {
        let x = p(g, "x", &[3, 37]);
        let y = pos(g, "y", &[3, 37]);
        let mut o = vec![];
        for (n, u) in [
            ("neg", Unary::Neg),
            ("exp", Unary::Exp),
            ("tanh", Unary::Tanh),
            ("sigmoid", Unary::Sigmoid),
            ("gelu", Unary::Gelu),
            ("gelu_grad", Unary::GeluGrad),
            ("relu", Unary::Relu),
            ("step", Unary::Step),
            ("sin", Unary::Sin),
            ("cos", Unary::Cos),
            ("square", Unary::Square),
            ("abs", Unary::Abs),
            ("sign", Unary::Sign),
        ] {
            o.push((n, g.unary(u, x)));
        }
        for (n, u) in [("log", Unary::Log), ("rsqrt", Unary::Rsqrt), ("sqrt", Unary::Sqrt), ("recip", Unary::Recip)] {
            o.push((n, g.unary(u, y)));
        }
        o
    }));
    v.push(case("binary-broadcast", 2e-6, |g| {
        let a = p(g, "a", &[4, 1, 5]);
        let b = p(g, "b", &[3, 1]);
        let c = pos(g, "c", &[4, 3, 5]);
        let mut o = vec![];
        for (n, op) in [
            ("add", Binary::Add),
            ("sub", Binary::Sub),
            ("mul", Binary::Mul),
            ("div", Binary::Div),
            ("max", Binary::Max),
            ("min", Binary::Min),
            ("ge", Binary::Ge),
        ] {
            o.push((n, g.binary(op, a, b)));
        }
        o.push(("pow", g.binary(Binary::Pow, c, b)));
        let s = g.constant(3.0, &[], DType::F32);
        o.push(("scalar", g.mul(c, s)));
        o
    }));
    v.push(case("layout", 0.0, |g| {
        let x = p(g, "x", &[2, 3, 4, 5]);
        let h = g.cast(x, DType::BF16);
        let back = g.cast(h, DType::F32);
        let r = g.reshape(x, &[6, 20]);
        let b = g.broadcast(r, &[2, 6, 20]);
        let pm = g.permute(x, &[2, 0, 3, 1]);
        let sl = g.slice(x, 2, 1, 3);
        let y = p(g, "y", &[2, 3, 2, 5]);
        let cat = g.concat(&[x, y, sl], 2);
        let pb = g.permute(h, &[3, 1, 0, 2]);
        let pbf = g.cast(pb, DType::F32);
        vec![("bf16", back), ("broadcast", b), ("permute", pm), ("slice", sl), ("concat", cat), ("permute_bf16", pbf)]
    }));
    // Sums of 300,300 values near zero by cancellation: the CPU adds them one after another in
    // f32, the GPU in chunks and trees, and ‖Δ‖/‖ref‖ then measures the CPU's rounding (both are
    // within f32 rounding of Σ|x| ≈ 1.5e5).
    v.push(case("reduce", 1e-4, |g| {
        let x = p(g, "x", &[6, 7, 9]);
        let big = p(g, "big", &[300, 1001]);
        vec![
            ("sum_last", g.reduce(Reduce::Sum, x, &[2], false)),
            ("sum_first", g.reduce(Reduce::Sum, x, &[0], false)),
            ("mean_mid", g.reduce(Reduce::Mean, x, &[1], true)),
            ("max_02", g.reduce(Reduce::Max, x, &[0, 2], false)),
            ("sum_all_big", g.sum_all(big)),
            ("mean_rows_big", g.reduce(Reduce::Mean, big, &[0], false)),
            ("max_all_big", g.reduce(Reduce::Max, big, &[0, 1], false)),
        ]
    }));
    v.push(case("matmul", 1e-5, |g| {
        let a = p(g, "a", &[2, 64, 96]);
        let w = p(g, "w", &[96, 40]);
        let wt = p(g, "wt", &[40, 96]);
        let a16 = g.cast(a, DType::BF16);
        let w16 = g.cast(w, DType::BF16);
        let wt16 = g.cast(wt, DType::BF16);
        let c = p(g, "c", &[2, 96, 64]);
        let c16 = g.cast(c, DType::BF16);
        let odd = p(g, "odd", &[3, 5, 7]);
        let odd2 = p(g, "odd2", &[3, 7, 6]);
        vec![
            ("bf16_nn_shared_b", g.matmul(a16, w16)),
            ("bf16_nt", g.matmul_t(a16, wt16, false, true)),
            ("bf16_tn_batched", g.matmul_t(c16, c16, true, false)),
            ("bf16_tt_batched", g.matmul_t(c16, a16, true, true)),
            ("f32_odd", g.matmul(odd, odd2)),
            ("f32_tt", g.matmul_t(odd2, odd, true, true)),
        ]
    }));
    // bf16 products whose sizes miss the tiled contract by alignment (Diakosmos's 1,330 and
    // 3,990): run padded on the tiled kernel, in every layout, batched and shared.
    v.push(case("matmul-padded", 1e-5, |g| {
        let x = g.param("x", &[2, 257, 330], Init::Uniform { bound: 1.0 });
        let w = g.param("w", &[330, 262], Init::Uniform { bound: 1.0 });
        let wt = g.param("wt", &[262, 330], Init::Uniform { bound: 1.0 });
        let y = g.param("y", &[2, 257, 262], Init::Uniform { bound: 1.0 });
        let z = g.param("z", &[2, 262, 257], Init::Uniform { bound: 1.0 });
        let [x16, w16, wt16, y16, z16] = [x, w, wt, y, z].map(|v| g.cast(v, DType::BF16));
        let flat = g.reshape(x16, &[514, 330]);
        let dy = g.reshape(y16, &[514, 262]);
        vec![
            ("nn_shared_b", g.matmul(x16, w16)),
            ("nt_shared_b", g.matmul_t(x16, wt16, false, true)),
            ("tn_weight_gradient", g.matmul_t(flat, dy, true, false)),
            ("nn_input_gradient", g.matmul_t(dy, wt16, false, false)),
            ("tt_batched", g.matmul_t(x16, z16, true, true)),
        ]
    }));
    // f32 products with long K and few outputs: K split into parts on the simple kernel, the
    // parts summed in order (Diakosmos's weight gradient, then every layout, batched and shared).
    v.push(case("matmul-long-k", 1e-5, |g| {
        let x = p(g, "x", &[7, 131_072, 8]);
        let dy = p(g, "dy", &[7, 131_072, 190]);
        let a = p(g, "a", &[2, 8, 20_000]);
        let wt = p(g, "wt", &[12, 20_000]);
        let r = p(g, "r", &[5, 6000]);
        let w = p(g, "w", &[6000, 3]);
        let c = p(g, "c", &[2, 3000, 9]);
        let d = p(g, "d", &[2, 10, 3000]);
        vec![
            ("tn_batched_diakosmos", g.matmul_t(x, dy, true, false)),
            ("nt_shared_b", g.matmul_t(a, wt, false, true)),
            ("nn_one_block", g.matmul(r, w)),
            ("tt_batched", g.matmul_t(c, d, true, true)),
        ]
    }));
    v.push(case("gather-scatter", 1e-6, |g| {
        let table = p(g, "table", &[11, 12]);
        let ids = g.input("ids", &[3, 7], DType::I32);
        let rows = g.gather(table, ids);
        let src = p(g, "src", &[3, 7, 12]);
        let sc = g.scatter_add(src, ids, 11);
        vec![("gather", rows), ("scatter_add", sc)]
    }));
    v.push(case("layernorm", 2e-6, |g| {
        let x = p(g, "x", &[130, 96]);
        let gain = p(g, "gain", &[96]);
        let bias = p(g, "bias", &[96]);
        let y = g.layer_norm(x, gain, bias, 1e-5);
        let mean = Value { node: y.node, index: 1 };
        let rstd = Value { node: y.node, index: 2 };
        let dy = p(g, "dy", &[130, 96]);
        let b = g.push(Op::LayerNormBackward, &[x, gain, mean, rstd, dy]);
        vec![("y", y), ("mean", mean), ("rstd", rstd), ("dx", b[0]), ("dgain", b[1]), ("dbias", b[2])]
    }));
    // A learned gain at a warp a row (ragged: 130 rows, 96 columns) and a block a row (512
    // columns), its gradient read; and a constant gain of ones (Polf's parameter-free norms) at
    // rows of 64, whose gradient nothing reads, so its passes are never launched, its input
    // gradient added to a residual (the backward adds it as it stores).
    v.push(case("rmsnorm", 1e-5, |g| {
        let mut o = vec![];
        for (rows, c, names) in
            [(130, 96, ["y", "rstd", "dx", "dgain"]), (67, 512, ["y512", "rstd512", "dx512", "dgain512"])]
        {
            let x = p(g, &format!("x{c}"), &[rows, c]);
            let gain = p(g, &format!("gain{c}"), &[c]);
            let y = g.rms_norm(x, gain, 1e-6);
            let rstd = Value { node: y.node, index: 1 };
            let dy = p(g, &format!("dy{c}"), &[rows, c]);
            let b = g.push(Op::RmsNormBackward, &[x, gain, rstd, dy]);
            o.extend(names.into_iter().zip([y, rstd, b[0], b[1]]));
        }
        let x = p(g, "heads", &[300, 64]);
        let ones = g.constant(1.0, &[64], DType::F32);
        let y = g.rms_norm(x, ones, f32::EPSILON as f64);
        let rstd = Value { node: y.node, index: 1 };
        let dy = p(g, "dheads", &[300, 64]);
        let b = g.push(Op::RmsNormBackward, &[x, ones, rstd, dy]);
        let residual = p(g, "residual", &[300, 64]);
        let sum = g.add(b[0], residual);
        o.extend([("y_ones", y), ("dx_ones_plus_residual", sum)]);
        o
    }));
    v.push(case("rotary", 1e-6, |g| {
        let x = p(g, "x", &[2, 3, 17, 8]);
        let r = g.rotary(x, 10000.0);
        let back = g.push(Op::Rotary { base: 10000.0, inverse: true }, &[r])[0];
        vec![("rotary", r), ("inverse", back)]
    }));
    for (name, h, gq, t, d, cap) in [
        ("attention-gqa", 4usize, 2usize, 100usize, 16usize, None),
        ("attention-softcap", 2, 1, 67, 8, Some(5.0)),
        ("attention-d64", 2, 2, 130, 64, None),
    ] {
        v.push(case(name, 2e-5, move |g| {
            let q = p(g, "q", &[2, h, t, d]);
            let k = p(g, "k", &[2, gq, t, d]);
            let vv = p(g, "v", &[2, gq, t, d]);
            let scale = 1.0 / (d as f64).sqrt();
            let o = g.attention(q, k, vv, scale, cap);
            let lse = Value { node: o.node, index: 1 };
            let dout = p(g, "do", &[2, h, t, d]);
            let b = g.push(Op::AttentionBackward { scale, softcap: cap, bf16: false }, &[q, k, vv, o, lse, dout]);
            vec![("o", o), ("lse", lse), ("dq", b[0]), ("dk", b[1]), ("dv", b[2])]
        }));
    }
    v.push(case("cross-entropy", 2e-6, |g| {
        let logits = p(g, "logits", &[37, 300]);
        let t = g.input("targets", &[37], DType::I32);
        let loss = g.cross_entropy(logits, t);
        let lse = Value { node: loss.node, index: 1 };
        let dl = p(g, "dloss", &[37]);
        let d = g.push(Op::CrossEntropyBackward { classes: None }, &[logits, lse, t, dl])[0];
        vec![("loss", loss), ("lse", lse), ("dlogits", d)]
    }));
    v.push(case("recurrence", 1e-6, |g| {
        let u = p(g, "u", &[2, 33, 3, 4]);
        let gamma = p(g, "gamma", &[3, 4]);
        let s = g.recurrence(u, gamma);
        let r = g.push(Op::Recurrence { reverse: true }, &[u, gamma])[0];
        vec![("forward", s), ("reverse", r)]
    }));
    v.push(case("diakosmos-paths", 1e-5, diakosmos_paths));
    // Keys of three numbers under 1 and write strengths from 0.25 to 0.46 keep each update a
    // contraction; a last chunk of the replay shorter than the rest (T = 11), rows that are
    // not a whole number of warps.
    v.push(case("delta-rule", 1e-6, |g| {
        let (b, t, k, vd) = (2, 11, 3, 7);
        let q = p(g, "q", &[b, t, k]);
        let kk = p(g, "k", &[b, t, k]);
        let vv = p(g, "v", &[b, t, vd]);
        let beta = pos(g, "beta", &[b, t]);
        let m0 = p(g, "m0", &[vd, k]);
        let o = g.delta_rule(q, kk, vv, beta, m0);
        let dout = p(g, "do", &[b, t, vd]);
        let d = g.push(Op::DeltaRuleBackward, &[q, kk, vv, beta, m0, dout]);
        vec![("o", o), ("dq", d[0]), ("dk", d[1]), ("dv", d[2]), ("dbeta", d[3]), ("dm0", d[4])]
    }));
    v.push(case("harmonic-scan", 1e-6, |g| {
        let (b, t, h, l, d) = (2, 50, 3, 2, 5);
        let r = p(g, "r", &[b, t, h, l]);
        let w = p(g, "w", &[b, t, h, l]);
        let vv = p(g, "v", &[b, t, h, d]);
        let gamma = p(g, "gamma", &[h, l]);
        let y = g.harmonic_scan(r, w, vv, gamma);
        let dy = p(g, "dy", &[b, t, h, d]);
        let dd = g.push(Op::HarmonicScanBackward, &[r, w, vv, gamma, dy]);
        vec![("y", y), ("dr", dd[0]), ("dw", dd[1]), ("dv", dd[2]), ("dgamma", dd[3])]
    }));
    v
}

/// Diakosmos's non-product paths at a small width, with their gradients: the spatial path
/// (unit vectors, a pair's planar turn by cos/sin of θ, the slices and concatenations that
/// pair groups, the per-group coupling), the block's per-group gate, and the head's running
/// mean with each group's alignment and the mean's length. Random θ so the turn is not the
/// identity, and random gates so a per-group broadcast read at the wrong index shows.
fn diakosmos_paths(g: &mut Graph) -> Vec<(&'static str, Value)> {
    let (b, t, groups, d, pairs) = (2, 19, 7, 10, 3);
    let n = b * t;
    let x = p(g, "x", &[n, groups, d]);
    let temporal = p(g, "temporal", &[n, groups, d]);
    let theta = p(g, "theta", &[pairs, d]);
    let coupling = p(g, "coupling", &[groups]);
    let gate = p(g, "gate", &[groups]);
    let unit = |g: &mut Graph, x: Value| {
        let sq = g.square(x);
        let ss = g.sum(sq, &[2], true);
        let eps = g.scalar_like(1e-6, ss);
        let ss = g.add(ss, eps);
        let inv = g.rsqrt(ss);
        g.mul(x, inv)
    };
    let u = unit(g, x);
    let paired = g.slice(u, 1, 0, 2 * pairs);
    let paired = g.reshape(paired, &[n, pairs, 2, d]);
    let first = g.slice(paired, 2, 0, 1);
    let second = g.slice(paired, 2, 1, 2);
    let angle = g.scale(theta, 0.3);
    let angle = g.reshape(angle, &[pairs, 1, d]);
    let (cos, sin) = (g.unary(Unary::Cos, angle), g.unary(Unary::Sin, angle));
    let (fc, fs) = (g.mul(first, cos), g.mul(first, sin));
    let (sc, ss) = (g.mul(second, cos), g.mul(second, sin));
    let turned_first = g.sub(fc, ss);
    let turned_second = g.add(fs, sc);
    let turned = g.concat(&[turned_first, turned_second], 2);
    let turned = g.reshape(turned, &[n, 2 * pairs, d]);
    let lone = g.slice(u, 1, 2 * pairs, groups);
    let all = g.concat(&[turned, lone], 1);
    let kappa = g.reshape(coupling, &[groups, 1]);
    let spatial = g.mul(all, kappa);
    let beta = g.reshape(gate, &[groups, 1]);
    let share = g.sigmoid(beta);
    let apart = g.sub(temporal, spatial);
    let weighted = g.mul(apart, share);
    let mixed = g.add(spatial, weighted);
    let stream = g.add(x, mixed);
    let w = groups * d;
    let v = unit(g, stream);
    let by_window = g.reshape(v, &[b, t, w]);
    let ones = g.constant(1.0, &[w], DType::F32);
    let running = g.recurrence(by_window, ones);
    let count = g.constant(1.0, &[1, t, 1], DType::F32);
    let one = g.constant(1.0, &[1], DType::F32);
    let seen = g.recurrence(count, one);
    let mean = g.div(running, seen);
    let mean = g.reshape(mean, &[n, groups, d]);
    let along = g.mul(v, mean);
    let alignment = g.sum(along, &[2], false);
    let sq = g.square(mean);
    let ss = g.sum(sq, &[2], false);
    let eps = g.scalar_like(1e-6, ss);
    let ss = g.add(ss, eps);
    let length = g.sqrt(ss);
    let flat = g.reshape(stream, &[n, w]);
    let features = g.concat(&[flat, alignment, length], 1);
    let dy = p(g, "dy", &[n, w + 2 * groups]);
    let weighted_features = g.mul(features, dy);
    let loss = g.sum_all(weighted_features);
    let grads = alpha_grad::backward(g, loss, &[x, temporal, theta, coupling, gate]).expect("the paths differentiate");
    vec![
        ("spatial", spatial),
        ("mixed", mixed),
        ("running", running),
        ("features", features),
        ("dx", grads[0]),
        ("dtemporal", grads[1]),
        ("dtheta", grads[2]),
        ("dcoupling", grads[3]),
        ("dgate", grads[4]),
    ]
}

fn run_case(c: &Case, seed: u64, checked: bool) -> Result<Vec<(String, f64, f64, bool)>> {
    let mut cpu = CpuBackend::compile(&c.program)?;
    let mut gpu =
        CudaBackend::compile(&c.program, &alpha_cuda::CudaConfig::from_vars(|name| std::env::var(name).ok())?)?;
    gpu.set_checked(checked);
    for (name, values) in alpha_learn::init::initial_leaves(&c.program.graph, seed) {
        cpu.write(&name, &values)?;
        gpu.write(&name, &values)?;
    }
    for (name, n) in &c.ids {
        let mut r = rng_for(seed, name);
        let bound = if name == "ids" { 11 } else { 300 };
        let ids: Vec<u32> = (0..*n).map(|_| r.random_range(0..bound)).collect();
        cpu.write_ids(name, &ids)?;
        gpu.write_ids(name, &ids)?;
    }
    cpu.run("forward")?;
    gpu.run("forward")?;
    let mut rows = vec![];
    for name in c.program.outputs.keys() {
        let a = gpu.output(name)?;
        let b = cpu.output(name)?;
        let (m, r) = (max_abs(&a, &b), rel(&a, &b));
        let ok = a.iter().all(|x| x.is_finite()) == b.iter().all(|x| x.is_finite()) && r <= c.tol.max(1e-7);
        rows.push((name.clone(), m, r, ok));
    }
    Ok(rows)
}

// ---- systems -------------------------------------------------------------------------------

fn system_program(name: &str, batch: Option<usize>) -> Result<(Box<dyn System>, Program)> {
    let sys: Box<dyn System> = alpha_systems::find(name).map_err(anyhow::Error::msg)?;
    let model: Model = sys.model(batch.unwrap_or(sys.default_batch()))?;
    let mut program = sys.learner(sys.default_steps()).training_program(model)?;
    // Expose the gradient of every parameter AdamW updates (its update's second input); other
    // optimizers' updates take theirs through ops of their own.
    let g = &program.graph;
    let mut grads = vec![];
    for n in &g.nodes {
        if let Op::AdamW { .. } = n.op {
            if let Op::Param { name, .. } = &g.node(n.inputs[0]).op {
                grads.push((format!("grad:{name}"), n.inputs[1]));
            }
        }
    }
    program.outputs.extend(grads);
    Ok((sys, program))
}

fn tokens(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut r = rng_for(seed, "tokens");
    (0..n).map(|_| r.random_range(0..vocab as u32)).collect()
}

fn feed(b: &mut dyn Backend, sys: &dyn System, program: &Program, step: u64, seed: u64) -> Result<()> {
    let n = program
        .graph
        .ty(program
            .graph
            .nodes
            .iter()
            .position(|x| matches!(&x.op, Op::Input { name } if name == "tokens"))
            .map(|i| Value { node: i as u32, index: 0 })
            .context("no tokens input")?)
        .numel();
    let t = tokens(seed + step, n + 1, sys.vocab());
    b.write_ids("tokens", &t[..n])?;
    b.write_ids("targets", &t[1..])?;
    let learner = sys.learner(sys.default_steps());
    for (name, value) in learner.scalars(step) {
        b.write(name, &[value as f32])?;
    }
    Ok(())
}

fn params_of(program: &Program) -> Vec<String> {
    program.graph.params().into_iter().map(|(_, n)| n).collect()
}

fn hash_params(b: &mut dyn Backend, names: &[String]) -> Result<u64> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for n in names {
        for x in b.read(n)? {
            for byte in x.to_bits().to_le_bytes() {
                h = (h ^ byte as u64).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    Ok(h)
}

fn check_system(
    name: &str,
    batch: Option<usize>,
    seed: u64,
    steps: u64,
    checked: bool,
    summary: &mut Vec<String>,
) -> Result<bool> {
    let (sys, program) = system_program(name, batch)?;
    let sys = sys.as_ref();
    let t0 = Instant::now();
    let mut gpu = CudaBackend::compile(&program, &alpha_cuda::CudaConfig::from_vars(|name| std::env::var(name).ok())?)?;
    gpu.set_checked(checked);
    let compile_s = t0.elapsed().as_secs_f64();
    let phase = program.phases[0].name.clone();
    println!(
        "{name}: {} nodes, {} plan kernels, {} launches, {} distinct kernels, arena {:.1} MiB, compile {compile_s:.2} s on {}",
        program.graph.nodes.len(),
        gpu.lowered().plan.kernel_count(),
        gpu.launches(&phase)?,
        gpu.lowered().kernels.len(),
        gpu.lowered().arena as f64 / (1 << 20) as f64,
        gpu.info().name
    );
    let mut cpu = CpuBackend::compile(&program)?;
    let init = alpha_learn::init::initial_leaves(&program.graph, seed);
    for (n, v) in &init {
        cpu.write(n, v)?;
        gpu.write(n, v)?;
    }
    feed(&mut cpu, sys, &program, 1, seed)?;
    feed(&mut gpu, sys, &program, 1, seed)?;
    let t = Instant::now();
    cpu.run(&phase)?;
    let cpu_s = t.elapsed().as_secs_f64();
    gpu.run(&phase)?;
    let (lc, lg) = (cpu.output("loss")?[0], gpu.output("loss")?[0]);
    let loss_rel = ((lg as f64 - lc as f64) / lc as f64).abs();
    let (pc, pg) = (cpu.output("losses")?, gpu.output("losses")?);
    let pos_max = max_abs(&pg, &pc);
    // The mean over positions, exactly (f64), of each side's per-position losses: the CPU sums
    // them one after another in f32, whose own error at 16,384 positions exceeds 1e-5.
    let mean64 = |v: &[f32]| v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
    let (ec, eg) = (mean64(&pc), mean64(&pg));
    println!(
        "{name}: exact means of the per-position losses cpu {ec:.7} gpu {eg:.7}; loss vs its exact mean: cpu {:.2e}, gpu {:.2e}",
        ((lc as f64 - ec) / ec).abs(),
        ((lg as f64 - eg) / eg).abs()
    );
    println!("{name}: loss cpu {lc:.7} gpu {lg:.7} rel {loss_rel:.2e}; per-position max|Δ| {pos_max:.2e}; cpu step {cpu_s:.2} s");
    let (gnc, gng) = (cpu.output("grad_norm")?[0], gpu.output("grad_norm")?[0]);
    println!("{name}: grad norm cpu {gnc:.6e} gpu {gng:.6e}");
    let mut worst_cos = (1.0f64, String::new());
    let mut worst_rel = (0.0f64, String::new());
    let mut worst_p = (0.0f64, String::new());
    let lr = sys.learner(sys.default_steps()).scalars(1)[0].1;
    let params = params_of(&program);
    let mut compared = 0;
    for pn in &params {
        let key = format!("grad:{pn}");
        // Only AdamW's gradients are outputs here (see `system_program`); the others' are the
        // gradient gate's (`alpha check gradient`).
        if program.outputs.contains_key(&key) {
            let (a, b) = (gpu.output(&key)?, cpu.output(&key)?);
            let cs = cosine(&a, &b);
            let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs() as f64)).max(1e-30);
            let r = max_abs(&a, &b) / scale;
            if cs < worst_cos.0 {
                worst_cos = (cs, pn.clone());
            }
            if r > worst_rel.0 {
                worst_rel = (r, pn.clone());
            }
            compared += 1;
        }
        let (pa, pb) = (gpu.read(pn)?, cpu.read(pn)?);
        let dp = max_abs(&pa, &pb);
        if dp > worst_p.0 {
            worst_p = (dp, pn.clone());
        }
    }
    println!(
        "{name}: gradients of the {compared} of {} parameters AdamW updates: min cosine {:.7} ({}), max |Δ|/max|g| {:.2e} ({})",
        params.len(),
        worst_cos.0,
        worst_cos.1,
        worst_rel.0,
        worst_rel.1
    );
    println!("{name}: parameters after the update: max |Δ| {:.2e} ({}), lr {lr:.3e}", worst_p.0, worst_p.1);
    let (loss_tol, cos_tol) = if name == "bob" { (1e-5, 0.99999) } else { (1e-3, 0.9999) };
    // Forward: the GPU's loss against the exact mean of the CPU's per-position losses, and the
    // per-position losses themselves.
    let loss_rel = ((lg as f64 - ec) / ec).abs();
    let ok_fwd = loss_rel <= loss_tol && lg.is_finite() && pos_max <= 100.0 * loss_tol;
    let ok_grad = worst_cos.0 >= cos_tol;
    summary.push(format!(
        "| {name} | loss vs exact mean of CPU positions rel {loss_rel:.2e} (tol {loss_tol:.0e}) {} | per-pos max|Δ| {pos_max:.2e} | min grad cos {:.7} {} | max|Δp| {:.2e} |",
        if ok_fwd { "PASS" } else { "FAIL" },
        worst_cos.0,
        if ok_grad { "PASS" } else { "FAIL" },
        worst_p.0
    ));

    // Determinism: the same start and steps twice on the GPU.
    let names = params_of(&program);
    let mut hashes = vec![];
    let mut last_losses = vec![];
    for _ in 0..2 {
        for (n, v) in &init {
            gpu.write(n, v)?;
        }
        let mut l = 0.0;
        for s in 1..=steps {
            feed(&mut gpu, sys, &program, s, seed)?;
            gpu.run(&phase)?;
            l = gpu.output("loss")?[0];
        }
        last_losses.push(l);
        hashes.push(hash_params(&mut gpu, &names)?);
    }
    let same = hashes[0] == hashes[1] && last_losses[0].to_bits() == last_losses[1].to_bits();
    println!(
        "{name}: determinism over {steps} steps: parameter hashes {:016x} / {:016x}, loss {} / {} → {}",
        hashes[0],
        hashes[1],
        last_losses[0],
        last_losses[1],
        if same { "bit-identical" } else { "DIFFERENT" }
    );
    summary.push(format!(
        "| {name} | determinism {steps} steps: {} | | | |",
        if same { "bit-identical PASS" } else { "FAIL" }
    ));

    // Time per replayed step.
    if !checked {
        let mut ms = gpu.time_phase(&phase, 3, 20)?;
        ms.sort_by(f32::total_cmp);
        let med = ms[ms.len() / 2];
        let launches = gpu.launches(&phase)?;
        println!(
            "{name}: replayed step: median {med:.3} ms (min {:.3}, max {:.3}) over 20, {launches} launches",
            ms[0],
            ms[ms.len() - 1]
        );
        summary.push(format!("| {name} | step {med:.3} ms median of 20 replays | {launches} launches | | |"));
        // Per-kernel device time, launch by launch (event-bracketed, so it adds overhead).
        let prof = gpu.profile_events(&phase)?;
        let mut by: BTreeMap<String, (usize, f64)> = BTreeMap::new();
        for (k, _, ms) in &prof {
            let e = by.entry(k.clone()).or_default();
            e.0 += 1;
            e.1 += *ms as f64;
        }
        let total: f64 = by.values().map(|v| v.1).sum();
        let mut rows: Vec<(String, (usize, f64))> = by.into_iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        println!("{name}: profile, launch by launch: {total:.3} ms in {} launches", prof.len());
        println!("| kernel | launches | ms a step | share |\n| --- | ---: | ---: | ---: |");
        for (k, (n, ms)) in &rows {
            println!("| {k} | {n} | {ms:.3} | {:.1}% |", 100.0 * ms / total);
        }
    }
    Ok(ok_fwd && ok_grad && same)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let value = |f: &str| args.iter().position(|a| a == f).and_then(|i| args.get(i + 1).cloned());
    let seed: u64 = value("--seed").and_then(|s| s.parse().ok()).unwrap_or(7);
    let checked = flag("--checked");
    if let Some(dir) = value("--ptx-dir") {
        let config = alpha_cuda::CudaConfig::from_vars(|name| std::env::var(name).ok())?;
        let dir = std::path::PathBuf::from(dir);
        let mut count = 0;
        for c in cases() {
            count +=
                alpha_cuda::lower::lower_program(&c.program, &config)?.dump_ptx(&dir.join("ops").join(c.name))?.len();
        }
        for s in ["bob", "coppelius", "gpt2", "polf", "kickdelta", "diakosmos"] {
            let (sys, program) = system_program(s, None)?;
            let l = alpha_cuda::lower::lower_program(&program, &config)?;
            count += l.dump_ptx(&dir.join(s))?.len();
            println!(
                "{s}: training step lowers to {} launches of {} distinct kernels",
                l.launch_count(0),
                l.kernels.len()
            );
            let by: Vec<String> =
                alpha_cuda::lower::launches_by_kernel(&l, 0).iter().map(|(k, n)| format!("{k}×{n}")).collect();
            println!("{s}: {}", by.join(", "));
            println!("{s}: arena {} bytes (plan {})", l.arena, l.plan.arena);
            let inf = alpha_learn::inference_program(sys.model(sys.default_batch())?)?;
            count +=
                alpha_cuda::lower::lower_program(&inf, &config)?.dump_ptx(&dir.join(format!("{s}-forward")))?.len();
        }
        println!("wrote {count} PTX files under {}", dir.display());
        if flag("--ptx-only") {
            return Ok(());
        }
    }
    let Some(gpu) = Gpu::open_or_skip() else {
        return Ok(());
    };
    println!("device: {}", gpu.info());
    drop(gpu);
    let mut all_ok = true;
    let mut summary = vec![];
    if flag("--ops") {
        println!("| case | output | max abs | rel | ok |\n| --- | --- | --- | --- | --- |");
        for c in cases() {
            match run_case(&c, seed, checked) {
                Ok(rows) => {
                    let bad = rows.iter().filter(|r| !r.3).count();
                    for (o, m, r, ok) in &rows {
                        println!("| {} | {o} | {m:.2e} | {r:.2e} | {} |", c.name, if *ok { "PASS" } else { "FAIL" });
                    }
                    all_ok &= bad == 0;
                    summary.push(format!("| ops {} | {} outputs | {} failed | | |", c.name, rows.len(), bad));
                }
                Err(e) => {
                    println!("| {} | error | {e:#} | | FAIL |", c.name);
                    summary.push(format!("| ops {} | ERROR | | | |", c.name));
                    all_ok = false;
                }
            }
        }
    }
    if let Some(s) = value("--system") {
        let steps = value("--steps").and_then(|s| s.parse().ok()).unwrap_or(3);
        let batch = value("--batch").and_then(|s| s.parse().ok());
        match check_system(&s, batch, seed, steps, checked, &mut summary) {
            Ok(ok) => all_ok &= ok,
            Err(e) => {
                println!("{s}: ERROR {e:#}");
                summary.push(format!("| {s} | ERROR | | | |"));
                all_ok = false;
            }
        }
    }
    println!("\nsummary:");
    for l in &summary {
        println!("{l}");
    }
    println!("{}", if all_ok { "ALL PASS" } else { "SOME FAILED" });
    if !all_ok {
        std::process::exit(1);
    }
    Ok(())
}
