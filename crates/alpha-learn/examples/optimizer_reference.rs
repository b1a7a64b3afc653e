//! The optimizers' CPU reference on fixed tensors, written out for `bench/optim_reference.py`,
//! which applies PyTorch's AdamW, Adam and Muon and a PyTorch rotational AdamW to the same
//! tensors and gradients and compares.
//!
//! `cargo run --release -p alpha-learn --example optimizer_reference -- OUT.safetensors [UPDATES]`
//!
//! Every initial value and gradient comes from a counter-based generator (SplitMix64 of
//! parameter, update and element index) that the script recomputes, so only the initial values,
//! the host scalars and Alpha's parameters after update 1 and after the last update are written:
//! `<p>.init`, `<p>.after_1`, `<p>.after_last`, `<p>.grad_1` (a check on the generator), and
//! `scalars.<role>:<group>` (f64, one per update). Metadata holds the case as JSON.

use std::collections::HashMap;

use alpha_cpu::Cpu;
use alpha_ir::{Graph, Init};
use alpha_learn::{AdamW, Decay, Group, Learner, Model, Muon, Optimizer, Rotational, Rows, Schedule};
use safetensors::tensor::{Dtype, TensorView};

/// SplitMix64 of `x`, mapped to [−1, 1) with 53 bits.
fn unit(x: u64) -> f64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 11) as f64 / 9_007_199_254_740_992.0) * 2.0 - 1.0
}

fn key(p: u64, t: u64, i: u64) -> u64 {
    (p << 48) | (t << 32) | i
}

/// Values of parameter `p` at update `t` (0: the initial values), scaled, rounded to f32. With
/// `rank` > 0 (a matrix), a gradient shaped like a real one: Σₖ uₖvₖᵀ over `rank` random outer
/// products plus 0.3 of independent noise, summed in f64 in this order.
fn draw(p: u64, t: u64, shape: &[usize], scale: f64, rank: usize) -> Vec<f32> {
    let n: usize = shape.iter().product();
    if rank == 0 || t == 0 {
        return (0..n as u64).map(|i| (unit(key(p, t, i)) * scale) as f32).collect();
    }
    let (r, c) = (shape[0] as u64, shape[1] as u64);
    let (u_at, v_at) = (1u64 << 31, (1u64 << 31) + (1u64 << 30));
    let mut out = Vec::with_capacity(n);
    for i in 0..r {
        for j in 0..c {
            let mut acc = 0.0f64;
            for k in 0..rank as u64 {
                acc += unit(key(p, t, u_at + k * r + i)) * unit(key(p, t, v_at + k * c + j));
            }
            out.push(((acc + 0.3 * unit(key(p, t, i * c + j))) * scale) as f32);
        }
    }
    out
}

struct Param {
    name: &'static str,
    shape: Vec<usize>,
    init_scale: f64,
    grad_scale: f64,
    /// Outer products in the gradient (0: independent values).
    rank: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let out = args.get(1).ok_or("usage: optimizer_reference OUT.safetensors [UPDATES]")?;
    let updates: u64 = match args.get(2) {
        Some(s) => s.parse().map_err(|_| format!("UPDATES must be a whole number from 1, got '{s}'"))?,
        None => 200,
    };
    if updates == 0 || updates > 60_000 {
        return Err(format!("UPDATES must be from 1 to 60,000, got {updates}").into());
    }
    let p = |name, shape: &[usize], init_scale, grad_scale| Param {
        name,
        shape: shape.to_vec(),
        init_scale,
        grad_scale,
        rank: 0,
    };
    let low_rank =
        |name, shape: &[usize]| Param { name, shape: shape.to_vec(), init_scale: 0.05, grad_scale: 0.01, rank: 4 };
    let params = [
        p("adamw.w", &[256, 512], 0.02, 0.01),
        p("adamw.b", &[512], 0.02, 0.01),
        p("adam.w", &[64, 96], 0.005, 0.1),
        p("adam.g", &[96], 1.0, 0.1),
        p("muon.tall", &[384, 128], 0.05, 0.01),
        p("muon.wide", &[128, 352], 0.05, 0.01),
        p("muon.sq1", &[128, 128], 0.05, 0.01),
        p("muon.sq2", &[128, 128], 0.05, 0.01),
        low_rank("muon.lr_tall", &[384, 128]),
        low_rank("muon.lr_sq", &[128, 128]),
        p("rot.qkv", &[384, 128], 0.05, 0.01),
        p("rot.head", &[96, 200], 0.05, 0.01),
    ];
    // PyTorch's layout ([outputs, inputs]) so torch.optim.Muon's shape factor agrees.
    let learner = Learner {
        groups: vec![
            Group::new(
                "adamw",
                &["adamw.*"],
                Optimizer::AdamW(AdamW { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, decay: Decay::All }),
                1e-3,
            ),
            Group::new("adam", &["adam.*"], Optimizer::Adam { beta1: 0.9, beta2: 0.95, eps: 1e-8 }, 0.05),
            Group::new("muon", &["muon.*"], Optimizer::Muon(Muon::standard(Rows::Outputs)), 0.02),
            Group::new("rot", &["rot.*"], Optimizer::RotationalAdamW(Rotational::standard(Rows::Outputs)), 3e-3),
        ],
        schedule: Schedule::WarmupCosine { warmup: 20.min(updates), total: updates, floor: 0.1 },
        clip: None,
        accumulation: 1,
    };

    let mut g = Graph::new("optimizer-reference");
    let vs: Vec<_> = params.iter().map(|q| g.param(q.name, &q.shape, Init::Zeros)).collect();
    let loss = g.mean_all(vs[1]);
    let model = Model { graph: g, loss, losses: vs[1], logits: vs[0] };
    let program = learner.update_program(&model)?;
    let mut cpu = Cpu::<f32>::compile(&program)?;

    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = vec![];
    let mut put = |name: String, shape: Vec<usize>, data: &[f32]| {
        tensors.push((name, shape, data.iter().flat_map(|x| x.to_le_bytes()).collect()));
    };
    for (i, q) in params.iter().enumerate() {
        let init = draw(i as u64, 0, &q.shape, q.init_scale, 0);
        cpu.write(cpu.leaf(q.name).expect("parameter"), &init);
        put(format!("{}.init", q.name), q.shape.clone(), &init);
        put(format!("{}.grad_1", q.name), q.shape.clone(), &draw(i as u64, 1, &q.shape, q.grad_scale, q.rank));
    }
    let mut scalars: HashMap<&'static str, Vec<f64>> = HashMap::new();
    for t in 1..=updates {
        for (i, q) in params.iter().enumerate() {
            let grad = draw(i as u64, t, &q.shape, q.grad_scale, q.rank);
            cpu.write(cpu.leaf(&format!("{}.grad", q.name)).expect("gradient"), &grad);
        }
        for (name, v) in learner.scalars(t) {
            cpu.write_named(name, &[v]);
            // What the step read: the scalar as f32.
            scalars.entry(name).or_default().push(v as f32 as f64);
        }
        cpu.run_all();
        if t == 1 || t == updates {
            let tag = if t == 1 { "after_1" } else { "after_last" };
            for q in &params {
                let v = cpu.read(cpu.leaf(q.name).expect("parameter")).to_vec();
                put(format!("{}.{tag}", q.name), q.shape.clone(), &v);
            }
        }
    }
    let mut f64s: Vec<(String, Vec<usize>, Vec<u8>)> = scalars
        .into_iter()
        .map(|(k, v)| (format!("scalars.{k}"), vec![v.len()], v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    f64s.sort();
    let mut views: Vec<(String, TensorView)> = vec![];
    for (name, shape, bytes) in &tensors {
        views.push((name.clone(), TensorView::new(Dtype::F32, shape.clone(), bytes)?));
    }
    for (name, shape, bytes) in &f64s {
        views.push((name.clone(), TensorView::new(Dtype::F64, shape.clone(), bytes)?));
    }
    let case: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, q)| {
            format!(
                "{{\"name\":\"{}\",\"index\":{i},\"shape\":{:?},\"init_scale\":{:?},\"grad_scale\":{:?},\"rank\":{}}}",
                q.name, q.shape, q.init_scale, q.grad_scale, q.rank
            )
        })
        .collect();
    let mut meta = HashMap::new();
    meta.insert("params".to_string(), format!("[{}]", case.join(",")));
    meta.insert("updates".to_string(), updates.to_string());
    meta.insert("learner".to_string(), format!("{learner:?}"));
    std::fs::write(out, safetensors::serialize(views, Some(meta))?)?;
    eprintln!("wrote {out}: {} parameters, {updates} updates", params.len());
    Ok(())
}
