//! The optimizers on the CPU reference against direct f64 implementations of their equations
//! (SYSTEMS.md §3.6, §4.2), and the group rules' errors.

use alpha_cpu::Cpu;
use alpha_ir::{Graph, Init, Program};
use alpha_learn::{AdamW, Decay, Group, Learner, Model, MomentumRamp, Muon, Optimizer, Rotational, Rows, Schedule};

/// A model of bare parameters (the update program reads only their names and shapes).
fn model(params: &[(&str, &[usize])]) -> Model {
    let mut g = Graph::new("test");
    let mut vs = vec![];
    for (name, shape) in params {
        vs.push(g.param(name, shape, Init::Zeros));
    }
    let loss = g.mean_all(vs[0]);
    let flat = g.reshape(vs[0], &[g.ty(vs[0]).numel()]);
    Model { graph: g, loss, losses: flat, logits: vs[0] }
}

/// Deterministic values in about [−1, 1].
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn adam() -> Optimizer {
    Optimizer::Adam { beta1: 0.9, beta2: 0.999, eps: 1e-8 }
}

fn f32s(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| v as f32 as f64).collect()
}

fn bf16(x: f64) -> f64 {
    half::bf16::from_f32(x as f32).to_f32() as f64
}

/// Run `steps` updates of `learner` over `params` from the given initial values and per-step
/// gradients; returns the CPU and the program.
fn run(
    learner: &Learner,
    params: &[(&str, &[usize])],
    init: &[Vec<f64>],
    grads: &dyn Fn(usize, usize) -> Vec<f64>,
    steps: usize,
) -> (Cpu<f32>, Program) {
    let program = learner.update_program(&model(params)).expect("program builds");
    let mut cpu = Cpu::<f32>::compile(&program).expect("plans");
    for (i, (name, _)) in params.iter().enumerate() {
        cpu.write_named(name, &init[i]);
    }
    for t in 1..=steps {
        for (i, (name, _)) in params.iter().enumerate() {
            cpu.write_named(&format!("{name}.grad"), &grads(i, t));
        }
        for (name, v) in learner.scalars(t as u64) {
            cpu.write_named(name, &[v]);
        }
        cpu.run_all();
    }
    (cpu, program)
}

fn read(cpu: &Cpu<f32>, name: &str) -> Vec<f64> {
    let v = cpu.leaf(name).unwrap_or_else(|| panic!("no {name}"));
    cpu.read(v).iter().map(|&x| x as f64).collect()
}

/// Largest |a − b| over the largest |b − before|: the error as a fraction of the change.
fn of_change(a: &[f64], b: &[f64], before: &[f64]) -> f64 {
    let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    let change = b.iter().zip(before).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    err / change
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn adam_and_adamw_follow_their_equations_over_five_updates() {
    let shape: &[usize] = &[3, 5];
    let params = [("a", shape), ("w", shape)];
    let learner = Learner {
        groups: vec![
            Group::new("adam", &["a"], adam(), 0.01),
            Group::new(
                "adamw",
                &["w"],
                Optimizer::AdamW(AdamW { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, decay: Decay::All }),
                0.02,
            ),
        ],
        schedule: Schedule::WarmupCosine { warmup: 2, total: 10, floor: 0.1 },
        clip: None,
        accumulation: 1,
    };
    let init = [f32s(&values(15, 1)), f32s(&values(15, 2))];
    let grads = |i: usize, t: usize| f32s(&values(15, 100 * t as u64 + i as u64));
    let (cpu, _) = run(&learner, &params, &init, &grads, 5);
    for (i, (name, b1, b2, wd, peak)) in [("a", 0.9, 0.999, 0.0, 0.01), ("w", 0.9, 0.95, 0.1, 0.02)].iter().enumerate()
    {
        let (mut p, mut m, mut v) = (init[i].clone(), vec![0.0; 15], vec![0.0; 15]);
        for t in 1..=5 {
            let g = grads(i, t);
            let lr = learner.schedule.lr(*peak, t as u64);
            for j in 0..15 {
                m[j] = b1 * m[j] + (1.0 - b1) * g[j];
                v[j] = b2 * v[j] + (1.0 - b2) * g[j] * g[j];
                let mh = m[j] / (1.0 - f64::powi(*b1, t as i32));
                let vh = v[j] / (1.0 - f64::powi(*b2, t as i32));
                p[j] -= lr * (mh / (vh.sqrt() + 1e-8) + wd * p[j]);
            }
        }
        let got = read(&cpu, name);
        let e = of_change(&got, &p, &init[i]);
        assert!(e < 1e-5, "{name}: {e:e} of the change");
        assert_eq!(read(&cpu, &format!("{name}.adam_m")).len(), 15);
    }
}

/// Muon in f64 from the equations, with the products' operands rounded to bf16 as Alpha does.
fn muon_reference(w: &[f64], grads: &[Vec<f64>], r: usize, c: usize, lrs: &[f64], mus: &[f64], scale: f64) -> Vec<f64> {
    let mut w = w.to_vec();
    let mut buf = vec![0.0; r * c];
    for (t, g) in grads.iter().enumerate() {
        let mu = mus[t];
        for j in 0..r * c {
            buf[j] = mu * buf[j] + g[j];
        }
        let u: Vec<f64> = (0..r * c).map(|j| g[j] + mu * buf[j]).collect();
        // Orient: rows ≤ cols.
        let (rr, cc, x0) = if r > c {
            let mut x = vec![0.0; r * c];
            for i in 0..r {
                for j in 0..c {
                    x[j * r + i] = u[i * c + j];
                }
            }
            (c, r, x)
        } else {
            (r, c, u)
        };
        let norm = x0.iter().map(|v| v * v).sum::<f64>().sqrt();
        let mut x: Vec<f64> = x0.iter().map(|v| v / (norm + 1e-7)).collect();
        let (a, b, cq) = Muon::NS_COEFFICIENTS;
        let mm = |p: &[f64], q: &[f64], n: usize, k: usize, m: usize, qt: bool| {
            let mut o = vec![0.0; n * m];
            for i in 0..n {
                for j in 0..m {
                    let mut s = 0.0;
                    for l in 0..k {
                        let qv = if qt { q[j * k + l] } else { q[l * m + j] };
                        s += bf16(p[i * k + l]) * bf16(qv);
                    }
                    o[i * m + j] = s;
                }
            }
            o
        };
        for _ in 0..5 {
            let gram = mm(&x, &x, rr, cc, rr, true);
            let g2 = mm(&gram, &gram, rr, rr, rr, false);
            let poly: Vec<f64> = gram.iter().zip(&g2).map(|(p, q)| b * p + cq * q).collect();
            let px = mm(&poly, &x, rr, rr, cc, false);
            x = x.iter().zip(&px).map(|(v, p)| a * v + p).collect();
        }
        let upd: Vec<f64> = if r > c { (0..r * c).map(|k| x[(k % c) * r + k / c]).collect() } else { x };
        for j in 0..r * c {
            w[j] -= lrs[t] * scale * upd[j];
        }
    }
    w
}

#[test]
fn muon_orthogonalises_batched_by_shape_as_the_equations_say() {
    // Two 4×8 matrices (batched together), one 8×4 (transposed before the iterations, √2 shape
    // factor with rows as outputs), and a vector on Adam.
    let (s48, s84, s8): (&[usize], &[usize], &[usize]) = (&[4, 8], &[8, 4], &[8]);
    let params = [("m1", s48), ("m2", s84), ("m3", s48), ("gain", s8)];
    let mut muon = Muon::standard(Rows::Outputs);
    muon.ramp = Some(MomentumRamp { from: 0.85, updates: 3 });
    let learner = Learner {
        groups: vec![
            Group::new("muon", &["m*"], Optimizer::Muon(muon.clone()), 0.04),
            Group::new("adam", &["gain"], adam(), 0.04),
        ],
        schedule: Schedule::LinearWarmdown { total: 4, warmdown: 2 },
        clip: None,
        accumulation: 1,
    };
    let init: Vec<Vec<f64>> = (0..4u64).map(|i| f32s(&values(if i == 3 { 8 } else { 32 }, 10 + i))).collect();
    let grads = |i: usize, t: usize| {
        let n = if i == 3 { 8 } else { 32 };
        f32s(&values(n, 1000 * t as u64 + i as u64))
    };
    let steps = 4;
    let (cpu, _) = run(&learner, &params, &init, &grads, steps);
    let lrs: Vec<f64> = (1..=steps as u64).map(|t| learner.schedule.lr(0.04, t) as f32 as f64).collect();
    let mus: Vec<f64> = (1..=steps as u64).map(|t| muon.momentum_at(t) as f32 as f64).collect();
    assert_eq!(mus[0], 0.85f32 as f64);
    for (i, (name, shape)) in params[..3].iter().enumerate() {
        let gs: Vec<Vec<f64>> = (1..=steps).map(|t| grads(i, t)).collect();
        let scale = muon.shape_scale(shape[0], shape[1]);
        let want = muon_reference(&init[i], &gs, shape[0], shape[1], &lrs, &mus, scale);
        let got = read(&cpu, name);
        let dw: Vec<f64> = want.iter().zip(&init[i]).map(|(a, b)| a - b).collect();
        let dg: Vec<f64> = got.iter().zip(&init[i]).map(|(a, b)| a - b).collect();
        let cos = cosine(&dg, &dw);
        let e = of_change(&got, &want, &init[i]);
        eprintln!("{name}: cosine {cos:.8}, {e:.2e} of the change");
        assert!(cos > 0.9999, "{name}: cosine {cos}");
        assert!(e < 1e-3, "{name}: {e:e} of the change");
        assert!(cpu.leaf(&format!("{name}.muon_momentum")).is_some());
    }
    assert_eq!(muon.shape_scale(8, 4), 2f64.sqrt());
    assert_eq!(Muon { rows: Rows::Inputs, ..muon.clone() }.shape_scale(8, 4), 1.0);

    // Batching does not change a matrix's arithmetic: m1 alone in its group ends the same.
    let alone = Learner {
        groups: vec![
            Group::new("muon", &["m1"], Optimizer::Muon(muon.clone()), 0.04),
            Group::new("adam", &["gain"], adam(), 0.04),
        ],
        ..learner.clone()
    };
    let p2 = [params[0], params[3]];
    let (cpu2, _) =
        run(&alone, &p2, &[init[0].clone(), init[3].clone()], &|i, t| grads(if i == 0 { 0 } else { 3 }, t), steps);
    assert_eq!(read(&cpu2, "m1"), read(&cpu, "m1"), "batched and alone differ");
}

#[test]
fn one_muon_update_is_nearly_orthogonal() {
    // After one update from a zero matrix at lr 1, −W is U's orthogonalisation: its singular
    // values lie in the quintic's band around 1 (about 0.68 to 1.13), so W·Wᵀ is near I.
    let shape: &[usize] = &[6, 16];
    let learner = Learner::single(Optimizer::Muon(Muon::standard(Rows::Outputs)), 1.0, Schedule::Constant, None);
    let (cpu, _) = run(&learner, &[("m", shape)], &[vec![0.0; 96]], &|_, _| values(96, 77), 1);
    let w = read(&cpu, "m");
    for i in 0..6 {
        for j in 0..6 {
            let d: f64 = (0..16).map(|k| w[i * 16 + k] * w[j * 16 + k]).sum();
            if i == j {
                assert!((0.4..1.3).contains(&d), "diagonal {i}: {d}");
            } else {
                assert!(d.abs() < 0.3, "off-diagonal ({i},{j}): {d}");
            }
        }
    }
}

/// Rotational AdamW in f64 from REQ's equations; rows are the stored rows (outputs).
fn rotational_reference(w0: &[f64], grads: &[Vec<f64>], r: usize, c: usize, cfg: &Rotational, lrs: &[f64]) -> Vec<f64> {
    let mut w = w0.to_vec();
    let mut n = vec![0.0; r];
    for i in 0..r {
        let row = &mut w[i * c..(i + 1) * c];
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        let mean = row.iter().sum::<f64>() / c as f64;
        row.iter_mut().for_each(|v| *v -= mean);
        let cn = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        row.iter_mut().for_each(|v| *v *= norm / cn);
        n[i] = norm;
    }
    let (mut m, mut v, mut s) = (vec![0.0; r * c], vec![0.0; r * c], vec![0.0; r]);
    for (k, g) in grads.iter().enumerate() {
        let t = (k + 1) as i32;
        let mut d = vec![0.0; r * c];
        for j in 0..r * c {
            m[j] = cfg.beta1 * m[j] + (1.0 - cfg.beta1) * g[j];
            v[j] = cfg.beta2 * v[j] + (1.0 - cfg.beta2) * g[j] * g[j];
            d[j] = (m[j] / (1.0 - cfg.beta1.powi(t))) / ((v[j] / (1.0 - cfg.beta2.powi(t))).sqrt() + cfg.eps);
        }
        let eta = cfg.angular_step(lrs[k]);
        for i in 0..r {
            let (dr, wr) = (&mut d[i * c..(i + 1) * c], &mut w[i * c..(i + 1) * c]);
            let mean = dr.iter().sum::<f64>() / c as f64;
            dr.iter_mut().for_each(|x| *x -= mean);
            let dot: f64 = dr.iter().zip(wr.iter()).map(|(a, b)| a * b).sum();
            for j in 0..c {
                dr[j] -= wr[j] * dot / (n[i] * n[i]);
            }
            let dn2: f64 = dr.iter().map(|x| x * x).sum();
            s[i] = (1.0 - cfg.rho) * dn2 + cfg.rho * s[i];
            let rms = (s[i] / (1.0 - cfg.rho.powi(t))).sqrt();
            for j in 0..c {
                wr[j] -= eta * n[i] * dr[j] / (rms + cfg.eps_rot);
            }
            let wn = wr.iter().map(|x| x * x).sum::<f64>().sqrt();
            wr.iter_mut().for_each(|x| *x *= n[i] / wn);
        }
    }
    w
}

#[test]
fn rotational_adamw_keeps_each_feature_on_its_sphere_and_follows_req() {
    let shape: &[usize] = &[5, 12];
    let cfg = Rotational::standard(Rows::Outputs);
    let lr = 0.003;
    let learner = Learner::single(Optimizer::RotationalAdamW(cfg.clone()), lr, Schedule::Constant, None);
    let init = vec![f32s(&values(60, 5))];
    let grads = |_: usize, t: usize| f32s(&values(60, 500 + t as u64));
    let steps = 6;
    let (cpu, _) = run(&learner, &[("q", shape)], &init, &grads, steps);
    let got = read(&cpu, "q");
    let gs: Vec<Vec<f64>> = (1..=steps).map(|t| grads(0, t)).collect();
    let want = rotational_reference(&init[0], &gs, 5, 12, &cfg, &vec![lr as f32 as f64; steps]);
    let e = of_change(&got, &want, &init[0]);
    eprintln!("rotational: {e:.2e} of the change");
    assert!(e < 1e-3, "{e:e} of the change");
    let n0 = read(&cpu, "q.rot_norm0");
    for i in 0..5 {
        let row = &got[i * 12..(i + 1) * 12];
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        let first = init[0][i * 12..(i + 1) * 12].iter().map(|v| v * v).sum::<f64>().sqrt();
        assert!((norm - first).abs() < 1e-5 * first, "row {i}: norm {norm} left {first}");
        assert!((n0[i] - first).abs() < 1e-6 * first, "stored norm {} of {first}", n0[i]);
    }
    assert!(read(&cpu, "q.rot_ms").iter().all(|&s| s > 0.0));

    // Columns as features: the transposed problem gives the transposed answer.
    let cols = Learner::single(
        Optimizer::RotationalAdamW(Rotational { rows: Rows::Inputs, ..cfg.clone() }),
        lr,
        Schedule::Constant,
        None,
    );
    let tr = |x: &[f64]| (0..60).map(|k| x[(k % 5) * 12 + k / 5]).collect::<Vec<f64>>();
    let (cpu_t, _) = run(&cols, &[("q", &[12, 5])], &[tr(&init[0])], &|_, t| tr(&grads(0, t)), steps);
    let e = of_change(&read(&cpu_t, "q"), &tr(&want), &tr(&init[0]));
    assert!(e < 1e-3, "columns as features: {e:e} of the change");
}

fn build_error(learner: &Learner, params: &[(&str, &[usize])]) -> String {
    match learner.training_program(model(params)) {
        Ok(_) => panic!("the program built"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_groups_are_refused_at_program_building_naming_the_parameter() {
    let (m, v): (&[usize], &[usize]) = (&[4, 4], &[4]);
    let params = [("blocks.0.w", m), ("blocks.0.gain", v)];
    let schedule = Schedule::Constant;
    let learner = |groups: Vec<Group>| Learner { groups, schedule: schedule.clone(), clip: None, accumulation: 1 };
    let muon = || Optimizer::Muon(Muon::standard(Rows::Inputs));

    let e = build_error(&learner(vec![Group::new("muon", &["blocks.*.w"], muon(), 0.02)]), &params);
    assert!(e.contains("parameter blocks.0.gain is in no optimizer group"), "{e}");

    let e = build_error(
        &learner(vec![
            Group::new("muon", &["blocks.*.w"], muon(), 0.02),
            Group::new("adam", &["blocks.*"], adam(), 0.01),
        ]),
        &params,
    );
    assert!(e.contains("parameter blocks.0.w is in two optimizer groups: 'muon' and 'adam'"), "{e}");

    let e = build_error(
        &learner(vec![Group::new("adam", &["*"], adam(), 0.01), Group::new("muon", &["head.*"], muon(), 0.02)]),
        &params,
    );
    assert!(e.contains("optimizer group 'muon' selects no parameter"), "{e}");

    let e = build_error(
        &learner(vec![Group::new("muon", &["blocks.0.*"], muon(), 0.02), Group::new("none", &["x"], adam(), 0.01)]),
        &params,
    );
    assert!(e.contains("parameter blocks.0.gain cannot be in group 'muon'"), "{e}");
    assert!(e.contains("Muon updates matrices"), "{e}");

    let rot = Optimizer::RotationalAdamW(Rotational::standard(Rows::Outputs));
    let e = build_error(&learner(vec![Group::new("rot", &["*"], rot, 0.003)]), &params);
    assert!(e.contains("parameter blocks.0.gain cannot be in group 'rot'"), "{e}");

    let e = build_error(&learner(vec![Group::new("adam", &["*"], adam(), f64::NAN)]), &params);
    assert!(e.contains("peak learning rate NaN"), "{e}");

    // The update-only program applies the same rules.
    let bad = learner(vec![Group::new("muon", &["*"], muon(), 0.02)]);
    let e = bad.update_program(&model(&params)).expect_err("refused").to_string();
    assert!(e.contains("blocks.0.gain"), "{e}");
}

#[test]
fn patterns_match_whole_paths() {
    let g = Group::new("g", &["blocks.*.attn.out.weight", "head"], adam(), 1.0);
    assert!(g.selects("blocks.3.attn.out.weight"));
    assert!(g.selects("blocks.12.attn.out.weight"));
    assert!(g.selects("head"));
    assert!(!g.selects("head.weight"));
    assert!(!g.selects("blocks.3.attn.out.weight.x"));
    assert!(!g.selects("xblocks.3.attn.out.weight"));
    assert!(Group::new("all", &["*"], adam(), 1.0).selects("anything.at.all"));
}

/// Adam, Muon and rotational AdamW groups under Diakosmos's schedule.
fn three_groups() -> Learner {
    Learner {
        groups: vec![
            Group::new("adam", &["a"], adam(), 0.05),
            Group::new("muon", &["m"], Optimizer::Muon(Muon::standard(Rows::Inputs)), 0.04),
            Group::new("rot", &["r"], Optimizer::RotationalAdamW(Rotational::standard(Rows::Outputs)), 0.003),
        ],
        schedule: Schedule::WarmupCosine { warmup: 200, total: 15_259, floor: 0.1 },
        clip: Some(1.0),
        accumulation: 1,
    }
}

#[test]
fn scalars_are_named_by_group_and_computed_in_f64() {
    let learner = three_groups();
    let s: std::collections::BTreeMap<&str, f64> = learner.scalars(200).into_iter().collect();
    let (first, lr) = learner.scalars(200)[0];
    assert_eq!(first, "lr:adam");
    assert!((lr - 0.05).abs() < 1e-15 && (s["lr:muon"] - 0.04).abs() < 1e-15, "update 200 is at peak");
    assert_eq!(s["lr:muon"], learner.schedule.lr(0.04, 200));
    assert_eq!(s["momentum:muon"], 0.95);
    assert_eq!(s["bc1:rot"], 1.0 - 0.9f64.powi(200));
    assert_eq!(s["bcs:rot"], 1.0 - 0.9f64.powi(200));
    // η at Diakosmos's peak is 1.78e-3 rad (SYSTEMS.md §3.6).
    assert!((s["angle:rot"] - 1.78e-3).abs() < 5e-6, "{}", s["angle:rot"]);
    assert!(!s.contains_key("bc1:muon"));
    assert_eq!(learner.with_peak(0.1).groups.iter().map(|g| g.peak).collect::<Vec<_>>(), vec![0.1, 0.08, 0.006]);
}

#[test]
fn a_budget_factor_scales_every_groups_rate_and_leaves_the_rest() {
    let learner = three_groups();
    for step in [1, 57, 200, 9_000, 20_000] {
        // A factor of 1 is the unscaled learner to the bit.
        let plain = learner.scalars(step);
        let one = learner.scalars_scaled(step, 1.0);
        assert_eq!(plain.len(), one.len());
        for ((n, a), (m, b)) in plain.iter().zip(&one) {
            assert_eq!((n, a.to_bits()), (m, b.to_bits()), "step {step}");
        }
        let scaled: std::collections::BTreeMap<&str, f64> = learner.scalars_scaled(step, 0.25).into_iter().collect();
        for (name, v) in &plain {
            let got = scaled[name];
            if name.starts_with("lr:") {
                assert!((got - 0.25 * v).abs() <= 1e-15 * v.abs().max(1e-300), "{name} at {step}: {got} vs {v}");
            } else if name.starts_with("angle:") {
                assert!(got < *v && got > 0.0, "{name}: the angle follows the scaled rate ({got} vs {v})");
            } else {
                assert_eq!(got.to_bits(), v.to_bits(), "{name} does not depend on the rate");
            }
        }
        assert!(learner.scalars_scaled(step, 0.0).iter().all(|(n, v)| !n.starts_with("lr:") || *v == 0.0));
    }
    assert_eq!(learner.lr_scaled(9_000, 1.0), learner.lr(9_000));
}

#[test]
fn one_adamw_group_describes_itself_as_the_schedule_alone() {
    // Checkpoints carry this line in their digest: a single AdamW group keeps the line it had
    // before groups existed, so those systems' checkpoints are byte-identical to before.
    let adamw = AdamW { beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.0, decay: Decay::None };
    let l = Learner::single(
        Optimizer::AdamW(adamw),
        0.1,
        Schedule::WarmupCosine { warmup: 20, total: 600, floor: 0.1 },
        None,
    );
    assert_eq!(l.describe(), "warm-up 20 to 0.1, cosine to 0.1×peak at 600");
    let two = Learner {
        groups: vec![
            Group::new("muon", &["m"], Optimizer::Muon(Muon::standard(Rows::Inputs)), 0.02),
            Group::new("adam", &["*"], adam(), 0.003),
        ],
        ..l
    };
    assert_eq!(
        two.describe(),
        "muon (Muon): warm-up 20 to 0.02, cosine to 0.1×peak at 600; adam (Adam): warm-up 20 to 0.003, cosine to 0.1×peak at 600"
    );
}
