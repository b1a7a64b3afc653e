//! The optimizers on the GPU against the CPU reference. Prints, on the device against the CPU
//! reference from the same state at updates 1 and 200: the update gate for the miniature's three
//! learners, and per learner the lowest cosine of the two changes of a parameter (the measure
//! that suits Muon, whose bf16 operands round differently once a product sums in another order),
//! also for the mixed learner with its rotational group, or its Muon group, made Adam, and for
//! Coppelius with Muon on its 80 block matrices; then the optimizer step of Coppelius timed on the
//! device: its own AdamW, Muon with each shape's matrices orthogonalised as one batched stack,
//! and Muon with one group a matrix (no batch), each the mean of 50 runs of the update program
//! after 5.
//!
//! `cargo run --release -p alpha-run --example optimizer_step_gpu [-- --coppelius-gate]`
//! (`--coppelius-gate` adds the update gate of Coppelius with Muon, a few minutes of CPU).

use std::time::Instant;

use alpha_ir::IrError;
use alpha_learn::{Group, Learner, Model, Muon, Optimizer, Rows};
use alpha_run::gates::{check, Gate};
use alpha_run::session::backend_for;
use alpha_run::Device;
use alpha_systems::{System, Tokens};
use anyhow::Result;

/// A system with another learner: `roles` of the inner system.
struct Relearned {
    inner: Box<dyn System>,
    name: &'static str,
    roles: fn(&dyn System, u64) -> Learner,
}

impl System for Relearned {
    fn name(&self) -> &'static str {
        self.name
    }
    fn description(&self) -> &'static str {
        self.inner.description()
    }
    fn vocab(&self) -> usize {
        self.inner.vocab()
    }
    fn tokens(&self) -> Tokens {
        self.inner.tokens()
    }
    fn context(&self) -> usize {
        self.inner.context()
    }
    fn default_batch(&self) -> usize {
        self.inner.default_batch()
    }
    fn default_steps(&self) -> u64 {
        self.inner.default_steps()
    }
    fn model(&self, batch: usize) -> Result<Model, IrError> {
        self.inner.model(batch)
    }
    fn learner(&self, steps: u64) -> Learner {
        (self.roles)(self.inner.as_ref(), steps)
    }
}

/// `l` with every Muon group split into one group a matrix of `s`.
fn split(s: &dyn System, mut l: Learner) -> Learner {
    let params = s.model(1).expect("model").graph.params();
    let mut groups = vec![];
    for g in l.groups.drain(..) {
        if matches!(g.optimizer, Optimizer::Muon(_)) {
            for (_, name) in params.iter().filter(|(_, n)| g.selects(n)) {
                groups.push(Group { name: format!("{}.{name}", g.name), select: vec![name.clone()], ..g.clone() });
            }
        } else {
            groups.push(g);
        }
    }
    l.groups = groups;
    l
}

fn own(s: &dyn System, steps: u64) -> Learner {
    s.learner(steps)
}

/// Muon on every block matrix, Adam on the embedding and the LayerNorms.
fn muon_adam(s: &dyn System, steps: u64) -> Learner {
    let mut l = s.learner(steps);
    l.groups = vec![
        Group::new(
            "muon",
            &["blocks.*.attn.*.weight", "blocks.*.ffn.*.weight"],
            Optimizer::Muon(Muon::standard(Rows::Inputs)),
            0.02,
        ),
        Group::new(
            "adam",
            &["embed.weight", "*.bias", "*ln*.weight"],
            Optimizer::Adam { beta1: 0.9, beta2: 0.95, eps: 1e-8 },
            1e-3,
        ),
    ];
    l
}

/// [`muon_adam`] with one Muon group a matrix: no batched products.
fn muon_adam_split(s: &dyn System, steps: u64) -> Learner {
    split(s, muon_adam(s, steps))
}

/// The mixed learner with its rotational group made Adam (Muon and Adam alone, in mixed's order).
fn mixed_without_rotational(s: &dyn System, steps: u64) -> Learner {
    let mut l = s.learner(steps);
    for g in &mut l.groups {
        if matches!(g.optimizer, Optimizer::RotationalAdamW(_)) {
            g.optimizer = Optimizer::Adam { beta1: 0.9, beta2: 0.95, eps: 1e-8 };
        }
    }
    l
}

/// The mixed learner with its Muon group made Adam (rotational and Adam alone).
fn mixed_without_muon(s: &dyn System, steps: u64) -> Learner {
    let mut l = s.learner(steps);
    for g in &mut l.groups {
        if matches!(g.optimizer, Optimizer::Muon(_)) {
            g.optimizer = Optimizer::Adam { beta1: 0.9, beta2: 0.95, eps: 1e-8 };
        }
    }
    l
}

fn find(name: &str) -> Box<dyn System> {
    alpha_systems::find(name).expect("a catalogue system")
}

/// The update program's step on the device: launches and milliseconds (mean of 50 after 5).
fn time_step(s: &dyn System) -> Result<(Option<usize>, f64)> {
    let learner = s.learner(s.default_steps());
    let program = learner.update_program(&s.model(1)?)?;
    let mut b = backend_for(Device::Cuda, &program)?;
    for (name, value) in learner.scalars(200) {
        b.write(name, &[value as f32])?;
    }
    let probe = program.graph.params()[0].1.clone();
    for _ in 0..5 {
        b.run("step")?;
    }
    b.read(&probe)?;
    let t0 = Instant::now();
    let n = 50;
    for _ in 0..n {
        b.run("step")?;
    }
    b.read(&probe)?;
    Ok((b.launches("step"), t0.elapsed().as_secs_f64() * 1e3 / n as f64))
}

/// Device against reference for one update from the same state: per parameter, the cosine of
/// the two changes and the largest difference over the largest change; prints the worst.
fn agreement(s: &dyn System, step: u64) -> Result<()> {
    use rand::{Rng, SeedableRng};
    let learner = s.learner(s.default_steps());
    let program = learner.update_program(&s.model(1)?)?;
    let mut dev = backend_for(Device::Cuda, &program)?;
    let mut cpu = backend_for(Device::Cpu, &program)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let init = alpha_run::init::initial_leaves(&program.graph, 1);
    let mut all = vec![];
    for (name, shape, is_param) in alpha_run::session::persistent(&program) {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = if is_param {
            init.iter().find(|(b, _)| *b == name).map(|(_, v)| v.clone()).unwrap_or(vec![0.0; n])
        } else if name.ends_with(".adam_v") {
            (0..n).map(|_| rng.random_range(1e-8..1e-5)).collect()
        } else {
            (0..n).map(|_| rng.random_range(-1e-3..1e-3)).collect()
        };
        all.push((name, is_param, v));
    }
    for b in [&mut dev, &mut cpu] {
        for (name, _, v) in &all {
            b.write(name, v)?;
        }
        for (name, value) in learner.scalars(step) {
            b.write(name, &[value as f32])?;
        }
        b.run("step")?;
    }
    let (mut worst_cos, mut worst_rel) = ((1.0f64, String::new()), (0.0f64, String::new()));
    for (name, is_param, before) in &all {
        if !is_param {
            continue;
        }
        let (d, c) = (dev.read(name)?, cpu.read(name)?);
        let dd: Vec<f64> = d.iter().zip(before).map(|(a, b)| (*a - *b) as f64).collect();
        let dc: Vec<f64> = c.iter().zip(before).map(|(a, b)| (*a - *b) as f64).collect();
        let dot: f64 = dd.iter().zip(&dc).map(|(a, b)| a * b).sum();
        let nd = dd.iter().map(|x| x * x).sum::<f64>().sqrt();
        let nc = dc.iter().map(|x| x * x).sum::<f64>().sqrt();
        let cos = if nd == 0.0 && nc == 0.0 { 1.0 } else { dot / (nd * nc) };
        let change = dc.iter().fold(0f64, |m, x| m.max(x.abs()));
        let diff = dd.iter().zip(&dc).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
        let rel = if change == 0.0 { diff } else { diff / change };
        if cos < worst_cos.0 {
            worst_cos = (cos, name.clone());
        }
        if rel > worst_rel.0 {
            worst_rel = (rel, name.clone());
        }
    }
    println!(
        "{} update {step}: lowest cosine of device and reference changes {:.7} ({}); largest difference {:.2e} of the change ({})",
        s.name(),
        worst_cos.0,
        worst_cos.1,
        worst_rel.0,
        worst_rel.1
    );
    Ok(())
}

fn main() -> Result<()> {
    let coppelius_gate = std::env::args().any(|a| a == "--coppelius-gate");
    let minis: Vec<Relearned> = ["mini", "mini-muon", "mini-mixed"]
        .into_iter()
        .map(|n| Relearned { inner: find(n), name: n, roles: own })
        .collect();
    let mut passed = true;
    for s in &minis {
        let r = check(Gate::Update, s, Device::Cuda, 1, 1)?;
        print!("{}", r.text);
        passed &= r.passed;
    }
    for s in &minis {
        for step in [1, 200] {
            agreement(s, step)?;
        }
    }
    for (name, roles) in [
        ("mini-mixed, rotational as Adam", mixed_without_rotational as fn(&dyn System, u64) -> Learner),
        ("mini-mixed, Muon as Adam", mixed_without_muon),
    ] {
        let name: &'static str = Box::leak(name.to_string().into_boxed_str());
        let s = Relearned { inner: find("mini-mixed"), name, roles };
        for step in [1, 200] {
            agreement(&s, step)?;
        }
    }
    let cop_muon = Relearned { inner: find("coppelius"), name: "coppelius", roles: muon_adam };
    let cop_muon_split = Relearned { inner: find("coppelius"), name: "coppelius", roles: muon_adam_split };
    for step in [1, 200] {
        agreement(&cop_muon, step)?;
    }
    if coppelius_gate {
        let r = check(Gate::Update, &cop_muon, Device::Cuda, 1, 1)?;
        print!("{}", r.text);
        passed &= r.passed;
    }
    let cop = find("coppelius");
    for (what, s) in [
        ("AdamW (its own)", cop.as_ref()),
        ("Muon on 80 matrices batched by shape; Adam on the rest", &cop_muon as &dyn System),
        ("Muon on 80 matrices, one a group; Adam on the rest", &cop_muon_split as &dyn System),
    ] {
        let (launches, ms) = time_step(s)?;
        println!(
            "coppelius optimizer step, {what}: {ms:.3} ms, {} launches",
            launches.map_or("?".into(), |l| l.to_string())
        );
    }
    println!("{}", if passed { "every update gate passes" } else { "an update gate failed" });
    if !passed {
        std::process::exit(1);
    }
    Ok(())
}
