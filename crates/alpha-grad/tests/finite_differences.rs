//! Every op's pullback against central finite differences in f64, on random shapes and values.
//!
//! Each case builds `loss = Σ op(params…) ⊙ R` with a random weight R (so every output element
//! matters), appends the backward pass, runs it on the CPU backend in f64, and compares each
//! gradient entry (all of them, or 48 random ones for big tensors) with
//! (loss(θ+h) − loss(θ−h)) / 2h.

use std::collections::BTreeMap;

use alpha_cpu::Cpu;
use alpha_grad::backward;
use alpha_ir::{Binary, DType, Graph, Init, Op, Program, Reduce, Unary, Value};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How a parameter's random values are drawn.
#[derive(Clone, Copy)]
enum Dist {
    Normal,
    Positive,
    /// In (0.2, 0.95): decay factors.
    Unit,
    /// Integer ids below n (an input, not differentiated).
    Ids(usize),
}

struct Case {
    g: Graph,
    params: Vec<(Value, Dist)>,
    ids: Vec<(Value, usize)>,
    out: Value,
}

fn case(name: &str) -> Case {
    Case { g: Graph::new(name), params: vec![], ids: vec![], out: Value { node: 0, index: 0 } }
}

impl Case {
    fn p(&mut self, shape: &[usize], dist: Dist) -> Value {
        let n = self.params.len();
        let v = self.g.param(&format!("p{n}"), shape, Init::Zeros);
        // Tests run in f64: retype the leaf.
        self.g.nodes[v.node as usize].outputs[0].dtype = DType::F64;
        self.params.push((v, dist));
        v
    }
    fn ids(&mut self, shape: &[usize], n: usize) -> Value {
        let v = self.g.input(&format!("ids{}", self.ids.len()), shape, DType::I32);
        self.ids.push((v, n));
        v
    }
}

fn draw(rng: &mut ChaCha8Rng, n: usize, dist: Dist) -> Vec<f64> {
    (0..n)
        .map(|_| match dist {
            Dist::Normal => rng.random_range(-1.5..1.5),
            Dist::Positive => rng.random_range(0.3..2.0),
            Dist::Unit => rng.random_range(0.2..0.95),
            Dist::Ids(k) => rng.random_range(0..k) as f64,
        })
        .collect()
}

/// Check the case's gradients; panics with the op, parameter and entry on a mismatch.
fn check(mut c: Case, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let g = &mut c.g;
    assert!(g.error().is_none(), "{}", g.error().unwrap());
    let oshape = g.shape(c.out).to_vec();
    let w = g.input("weight", &oshape, DType::F64);
    let weighted = g.mul(c.out, w);
    let loss = g.sum_all(weighted);
    let wrt: Vec<Value> = c.params.iter().map(|p| p.0).collect();
    let grads = backward(g, loss, &wrt).unwrap_or_else(|e| panic!("{e}"));
    let mut outputs = BTreeMap::new();
    outputs.insert("loss".to_string(), loss);
    for (i, &gv) in grads.iter().enumerate() {
        outputs.insert(format!("grad{i}"), gv);
    }
    let program = Program::single(c.g.clone().finish().unwrap_or_else(|e| panic!("{e}")), "check", outputs);
    let mut cpu = Cpu::<f64>::compile(&program).unwrap_or_else(|e| panic!("{e}"));
    let values: Vec<Vec<f64>> = c.params.iter().map(|&(v, d)| draw(&mut rng, program.graph.ty(v).numel(), d)).collect();
    for (&(v, _), x) in c.params.iter().zip(&values) {
        cpu.write(v, x);
    }
    for &(v, n) in &c.ids {
        let x = draw(&mut rng, program.graph.ty(v).numel(), Dist::Ids(n));
        cpu.write(v, &x);
    }
    let wv = draw(&mut rng, program.graph.ty(w).numel(), Dist::Normal);
    cpu.write(w, &wv);
    cpu.run_all();
    let analytic: Vec<Vec<f64>> = grads.iter().map(|&gv| cpu.read(gv).to_vec()).collect();
    let h = 1e-5;
    let eval = |cpu: &mut Cpu<f64>| {
        cpu.run_all();
        cpu.read(loss)[0]
    };
    for (pi, &(v, _)) in c.params.iter().enumerate() {
        let n = values[pi].len();
        let picks: Vec<usize> =
            if n <= 48 { (0..n).collect() } else { (0..48).map(|_| rng.random_range(0..n)).collect() };
        for &i in &picks {
            let mut x = values[pi].clone();
            x[i] += h;
            cpu.write(v, &x);
            let up = eval(&mut cpu);
            x[i] -= 2.0 * h;
            cpu.write(v, &x);
            let down = eval(&mut cpu);
            cpu.write(v, &values[pi]);
            let fd = (up - down) / (2.0 * h);
            let a = analytic[pi][i];
            let tol = 1e-6 * (1.0 + a.abs().max(fd.abs()));
            assert!(
                (a - fd).abs() <= tol,
                "{}: d/dp{pi}[{i}]: pullback {a:.9} vs finite difference {fd:.9}",
                program.graph.system
            );
        }
    }
}

/// Random dimension in lo..=hi.
fn dim(rng: &mut ChaCha8Rng, lo: usize, hi: usize) -> usize {
    rng.random_range(lo..=hi)
}

const SEEDS: [u64; 3] = [1, 2, 3];

#[test]
fn unary_ops() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let shape = [dim(&mut rng, 1, 4), dim(&mut rng, 1, 5)];
        for (u, dist) in [
            (Unary::Neg, Dist::Normal),
            (Unary::Exp, Dist::Normal),
            (Unary::Log, Dist::Positive),
            (Unary::Tanh, Dist::Normal),
            (Unary::Sigmoid, Dist::Normal),
            (Unary::Gelu, Dist::Normal),
            (Unary::Relu, Dist::Normal),
            (Unary::Sin, Dist::Normal),
            (Unary::Cos, Dist::Normal),
            (Unary::Rsqrt, Dist::Positive),
            (Unary::Sqrt, Dist::Positive),
            (Unary::Square, Dist::Normal),
            (Unary::Recip, Dist::Positive),
            (Unary::Abs, Dist::Normal),
        ] {
            let mut c = case(&format!("{u:?}"));
            let x = c.p(&shape, dist);
            c.out = c.g.unary(u, x);
            check(c, seed);
        }
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (a, b) = (dim(&mut rng, 2, 4), dim(&mut rng, 2, 5));
        let shapes: [(&[usize], &[usize]); 4] =
            [(&[a, b], &[a, b]), (&[a, b], &[b]), (&[a, 1], &[1, b]), (&[2, a, b], &[])];
        for (sa, sb) in shapes {
            for (op, da, db) in [
                (Binary::Add, Dist::Normal, Dist::Normal),
                (Binary::Sub, Dist::Normal, Dist::Normal),
                (Binary::Mul, Dist::Normal, Dist::Normal),
                (Binary::Div, Dist::Normal, Dist::Positive),
                (Binary::Max, Dist::Normal, Dist::Normal),
                (Binary::Min, Dist::Normal, Dist::Normal),
                (Binary::Pow, Dist::Positive, Dist::Normal),
            ] {
                let mut c = case(&format!("{op:?} {sa:?} {sb:?}"));
                let x = c.p(sa, da);
                let y = c.p(sb, db);
                c.out = c.g.binary(op, x, y);
                check(c, seed);
            }
        }
    }
}

#[test]
fn reductions_and_layout() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let s = [dim(&mut rng, 2, 3), dim(&mut rng, 2, 4), dim(&mut rng, 2, 5)];
        for kind in [Reduce::Sum, Reduce::Mean, Reduce::Max] {
            for (axes, keep) in [(vec![2], false), (vec![0], true), (vec![0, 2], false), (vec![1], true)] {
                let mut c = case(&format!("{kind:?} {axes:?}"));
                let x = c.p(&s, Dist::Normal);
                c.out = c.g.reduce(kind, x, &axes, keep);
                check(c, seed);
            }
        }
        let mut c = case("reshape");
        let x = c.p(&s, Dist::Normal);
        c.out = c.g.reshape(x, &[s[0] * s[1], s[2]]);
        check(c, seed);
        let mut c = case("broadcast");
        let x = c.p(&[s[1], 1], Dist::Normal);
        c.out = c.g.broadcast(x, &[s[0], s[1], s[2]]);
        check(c, seed);
        let mut c = case("permute");
        let x = c.p(&s, Dist::Normal);
        c.out = c.g.permute(x, &[2, 0, 1]);
        check(c, seed);
        let mut c = case("slice");
        let x = c.p(&s, Dist::Normal);
        c.out = c.g.slice(x, 1, 1, s[1]);
        check(c, seed);
        // Slices that tile x along an axis (taken out of order): their adjoints settle as one
        // Concat. Overlapping slices plus a direct use: each padded and added.
        let mut c = case("slices tiling an axis");
        let x = c.p(&[s[0], 3 * s[1], s[2]], Dist::Normal);
        let (b, a, m) =
            (c.g.slice(x, 1, 2 * s[1], 3 * s[1]), c.g.slice(x, 1, 0, s[1]), c.g.slice(x, 1, s[1], 2 * s[1]));
        let am = c.g.mul(a, m);
        c.out = c.g.mul(am, b);
        check(c, seed);
        let mut c = case("overlapping slices and a direct use");
        let x = c.p(&[s[0], 3 * s[1], s[2]], Dist::Normal);
        let (a, m) = (c.g.slice(x, 1, 0, 2 * s[1]), c.g.slice(x, 1, s[1], 3 * s[1]));
        let am = c.g.mul(a, m);
        let xs = c.g.sum(x, &[1], true);
        c.out = c.g.add(am, xs);
        check(c, seed);
        let mut c = case("concat");
        let x = c.p(&s, Dist::Normal);
        let y = c.p(&[s[0], 1, s[2]], Dist::Normal);
        c.out = c.g.concat(&[x, y, x], 1);
        check(c, seed);
        let mut c = case("cast");
        let x = c.p(&s, Dist::Normal);
        c.out = c.g.cast(x, DType::F64);
        check(c, seed);
    }
}

#[test]
fn matmul_every_layout_batched_and_shared() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (m, k, n, b) = (dim(&mut rng, 1, 5), dim(&mut rng, 1, 6), dim(&mut rng, 1, 4), dim(&mut rng, 2, 3));
        for ta in [false, true] {
            for tb in [false, true] {
                let sa = |batch: &[usize]| {
                    let mut s = batch.to_vec();
                    s.extend(if ta { [k, m] } else { [m, k] });
                    s
                };
                let sb = |batch: &[usize]| {
                    let mut s = batch.to_vec();
                    s.extend(if tb { [n, k] } else { [k, n] });
                    s
                };
                for (ba, bb) in [(vec![], vec![]), (vec![b], vec![b]), (vec![b, 2], vec![])] {
                    let mut c = case(&format!("matmul ta={ta} tb={tb} batch={ba:?}/{bb:?}"));
                    let x = c.p(&sa(&ba), Dist::Normal);
                    let y = c.p(&sb(&bb), Dist::Normal);
                    c.out = c.g.matmul_t(x, y, ta, tb);
                    check(c, seed);
                }
            }
        }
    }
}

#[test]
fn gather_and_scatter_add() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (v, d, n) = (dim(&mut rng, 2, 6), dim(&mut rng, 1, 4), dim(&mut rng, 3, 9));
        let mut c = case("gather");
        let table = c.p(&[v, d], Dist::Normal);
        let ids = c.ids(&[2, n], v);
        c.out = c.g.gather(table, ids);
        check(c, seed);
        let mut c = case("scatter-add");
        let src = c.p(&[n, d], Dist::Normal);
        let ids = c.ids(&[n], v);
        c.out = c.g.scatter_add(src, ids, v);
        check(c, seed);
    }
}

#[test]
fn norms() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (r, ch) = (dim(&mut rng, 1, 4), dim(&mut rng, 2, 7));
        let mut c = case("layernorm");
        let x = c.p(&[2, r, ch], Dist::Normal);
        let gain = c.p(&[ch], Dist::Normal);
        let bias = c.p(&[ch], Dist::Normal);
        c.out = c.g.layer_norm(x, gain, bias, 1e-5);
        check(c, seed);
        let mut c = case("rmsnorm");
        let x = c.p(&[r, ch], Dist::Normal);
        let gain = c.p(&[ch], Dist::Normal);
        c.out = c.g.rms_norm(x, gain, 1e-6);
        check(c, seed);
    }
}

#[test]
fn rotary() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let s = [dim(&mut rng, 1, 2), dim(&mut rng, 1, 3), dim(&mut rng, 2, 6), 2 * dim(&mut rng, 1, 4)];
        let mut c = case("rotary");
        let x = c.p(&s, Dist::Normal);
        c.out = c.g.rotary(x, 10000.0);
        check(c, seed);
    }
}

#[test]
fn attention_grouped_query_with_and_without_softcap() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (b, g, per, t, d) =
            (dim(&mut rng, 1, 2), dim(&mut rng, 1, 2), dim(&mut rng, 1, 2), dim(&mut rng, 2, 6), dim(&mut rng, 2, 5));
        for softcap in [None, Some(3.0)] {
            let mut c = case(&format!("attention softcap={softcap:?}"));
            let q = c.p(&[b, g * per, t, d], Dist::Normal);
            let k = c.p(&[b, g, t, d], Dist::Normal);
            let v = c.p(&[b, g, t, d], Dist::Normal);
            c.out = c.g.attention(q, k, v, 1.0 / (d as f64).sqrt(), softcap);
            check(c, seed);
        }
    }
}

#[test]
fn cross_entropy() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (n, v) = (dim(&mut rng, 1, 6), dim(&mut rng, 2, 9));
        let mut c = case("cross-entropy");
        let logits = c.p(&[n, v], Dist::Normal);
        let t = c.ids(&[n], v);
        c.out = c.g.cross_entropy(logits, t);
        check(c, seed);
    }
}

/// Over the first `v` of rows of `w` logits (a padded vocabulary): finite differences see no
/// effect of the padded columns, and the pullback gives them none.
#[test]
fn cross_entropy_over_fewer_classes_than_the_row() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (n, v) = (dim(&mut rng, 1, 6), dim(&mut rng, 2, 9));
        let w = v + dim(&mut rng, 1, 4);
        let mut c = case("cross-entropy over classes");
        let logits = c.p(&[n, w], Dist::Normal);
        let t = c.ids(&[n], v);
        c.out = c.g.cross_entropy_over(logits, t, v);
        check(c, seed);
    }
}

#[test]
fn recurrence_forward_and_reverse() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (b, t, ch) = (dim(&mut rng, 1, 2), dim(&mut rng, 1, 7), dim(&mut rng, 1, 3));
        for reverse in [false, true] {
            let mut c = case(&format!("recurrence reverse={reverse}"));
            let u = c.p(&[b, t, ch, 2], Dist::Normal);
            let gamma = c.p(&[ch, 2], Dist::Unit);
            c.out = c.g.push(Op::Recurrence { reverse }, &[u, gamma])[0];
            check(c, seed);
        }
    }
}

#[test]
fn a_composed_transformer_block() {
    // The ops as a block uses them, chained: norm → projection → rotary → attention → residual.
    let mut c = case("block");
    let (t, dm, h, hd) = (5, 8, 2, 4);
    let x = c.p(&[t, dm], Dist::Normal);
    let gain = c.p(&[dm], Dist::Normal);
    let bias = c.p(&[dm], Dist::Normal);
    let w = c.p(&[dm, 3 * dm], Dist::Normal);
    let g = &mut c.g;
    let a = g.layer_norm(x, gain, bias, 1e-5);
    let qkv = g.matmul(a, w);
    let qkv = g.reshape(qkv, &[1, t, 3, h, hd]);
    let qkv = g.permute(qkv, &[2, 0, 3, 1, 4]);
    let q = g.slice(qkv, 0, 0, 1);
    let q = g.reshape(q, &[1, h, t, hd]);
    let k = g.slice(qkv, 0, 1, 2);
    let k = g.reshape(k, &[1, h, t, hd]);
    let v = g.slice(qkv, 0, 2, 3);
    let v = g.reshape(v, &[1, h, t, hd]);
    let q = g.rotary(q, 10000.0);
    let k = g.rotary(k, 10000.0);
    let o = g.attention(q, k, v, 0.5, None);
    let o = g.permute(o, &[0, 2, 1, 3]);
    let o = g.reshape(o, &[t, dm]);
    let y = g.gelu(o);
    c.out = g.add(x, y);
    check(c, 7);
}

/// The adjoint of a value cut into slices that tile an axis is one Concat of the slices'
/// adjoints: no zero padding and no Adds (attention's q, k, v out of one projection).
#[test]
fn tiling_slices_settle_as_one_concat() {
    let mut g = Graph::new("tiles");
    let x = g.param("x", &[6, 4], Init::Zeros);
    let parts: Vec<Value> = (0..3).map(|i| g.slice(x, 0, 2 * i, 2 * i + 2)).collect();
    let ab = g.mul(parts[0], parts[1]);
    let abc = g.mul(ab, parts[2]);
    let loss = g.sum_all(abc);
    let before = g.nodes.len();
    let dx = alpha_grad::backward(&mut g, loss, &[x]).unwrap()[0];
    let added = &g.nodes[before..];
    assert!(matches!(g.nodes[dx.node as usize].op, Op::Concat { axis: 0 }), "{:?}", g.nodes[dx.node as usize].op);
    assert_eq!(g.nodes[dx.node as usize].inputs.len(), 3);
    assert_eq!(added.iter().filter(|n| matches!(n.op, Op::Concat { .. })).count(), 1);
    assert!(!added.iter().any(|n| matches!(n.op, Op::Constant { .. }) && n.outputs[0].shape == [4, 4]));
}

#[test]
fn delta_rule() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // At least five positions: the backward recomputes in chunks of ⌈√T⌉, so several chunks.
        let (b, t, k, v) = (dim(&mut rng, 1, 2), dim(&mut rng, 5, 11), dim(&mut rng, 1, 4), dim(&mut rng, 1, 5));
        let mut c = case(&format!("delta-rule {b}×{t}, K {k}, V {v}"));
        let q = c.p(&[b, t, k], Dist::Normal);
        let keys = c.p(&[b, t, k], Dist::Normal);
        let values = c.p(&[b, t, v], Dist::Normal);
        // Strengths in (0.2, 0.95) and keys of about unit size keep the memory contracting,
        // as a system keeps it (unit keys, β from a sigmoid).
        let beta = c.p(&[b, t], Dist::Unit);
        let m0 = c.p(&[v, k], Dist::Normal);
        let g = &mut c.g;
        let scaled = g.scale(keys, 0.5);
        c.out = g.delta_rule(q, scaled, values, beta, m0);
        check(c, seed);
    }
}

#[test]
fn harmonic_scan() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // At least five positions: the backward recomputes in chunks of ⌈√T⌉, so several chunks.
        let (b, t, h, l, d) =
            (dim(&mut rng, 1, 2), dim(&mut rng, 5, 11), dim(&mut rng, 1, 3), dim(&mut rng, 1, 3), dim(&mut rng, 1, 4));
        let mut c = case(&format!("harmonic-scan {b}×{t}, H {h}, L {l}, D {d}"));
        let r = c.p(&[b, t, h, l], Dist::Normal);
        let w = c.p(&[b, t, h, l], Dist::Normal);
        let v = c.p(&[b, t, h, d], Dist::Normal);
        let gamma = c.p(&[h, l], Dist::Unit);
        c.out = c.g.harmonic_scan(r, w, v, gamma);
        check(c, seed);
    }
}
