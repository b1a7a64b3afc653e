//! `alpha bench`: Alpha's training step against PyTorch's best on the same device, in one
//! invocation. Alpha's step is timed over replayed steps after warm-up (synchronised by reading
//! the loss back once at the end); the baseline is `bench/coppelius_torch.py bench`, whose last
//! stdout line is JSON with each setting's ms a step.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use alpha_systems::System;
use anyhow::{anyhow, bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::session::{backend_for, Device};
use alpha_learn::init::initial_leaves;

#[derive(Debug, Clone)]
pub struct AlphaTiming {
    pub batch: usize,
    pub ms_per_step: f64,
    pub tokens_per_s: f64,
    pub launches: usize,
}

/// Time `steps` training steps of `system` at `batch` after `warmup` untimed ones.
pub fn time_alpha(system: &dyn System, device: Device, batch: usize, warmup: u64, steps: u64) -> Result<AlphaTiming> {
    let learner = system.learner(warmup + steps);
    let program = learner.training_program(system.model(batch)?)?;
    let mut backend = backend_for(device, &program)?;
    let launches = match backend.launches(&program.phases[0].name) {
        Some(n) => n,
        None => alpha_plan::plan(&program, alpha_plan::bytes, 256)?.kernel_count(),
    };
    for (name, values) in initial_leaves(&program.graph, 1) {
        backend.write(&name, &values)?;
    }
    let n = batch * system.context();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let ids: Vec<u32> = (0..n).map(|_| rng.random_range(0..system.vocab() as u32)).collect();
    let targets: Vec<u32> = (0..n).map(|_| rng.random_range(0..system.vocab() as u32)).collect();
    backend.write_ids("tokens", &ids)?;
    backend.write_ids("targets", &targets)?;
    let phase = program.phases[0].name.clone();
    let run = |step: u64, backend: &mut Box<dyn alpha_plan::Backend>| -> Result<()> {
        for (name, value) in learner.scalars(step) {
            backend.write(name, &[value as f32])?;
        }
        backend.run(&phase)
    };
    for s in 1..=warmup {
        run(s, &mut backend)?;
    }
    backend.output("loss")?;
    let t0 = Instant::now();
    for s in warmup + 1..=warmup + steps {
        run(s, &mut backend)?;
    }
    let loss = backend.output("loss")?[0];
    let secs = t0.elapsed().as_secs_f64();
    if !loss.is_finite() {
        bail!("the timed steps ended with a non-finite loss ({loss})");
    }
    let ms = secs * 1e3 / steps as f64;
    Ok(AlphaTiming { batch, ms_per_step: ms, tokens_per_s: n as f64 / (ms / 1e3), launches })
}

/// PyTorch's settings for one batch size: (setting, ms a step), fastest first.
pub fn time_pytorch(script: &Path, batch: usize, extra: &[String]) -> Result<Vec<(String, f64)>> {
    let out = Command::new("python3")
        .arg(script)
        .args(["bench", "--batch", &batch.to_string()])
        .args(extra)
        .output()
        .with_context(|| format!("running python3 {}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("the PyTorch baseline failed:\n{}{}", stdout, String::from_utf8_lossy(&out.stderr));
    }
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| anyhow!("the baseline printed no JSON"))?;
    let v: serde_json::Value = serde_json::from_str(last)?;
    let settings = v["settings"].as_object().ok_or_else(|| anyhow!("the baseline's JSON has no settings"))?;
    let mut rows: Vec<(String, f64)> =
        settings.iter().filter_map(|(k, s)| s["ms_per_step"].as_f64().map(|ms| (k.clone(), ms))).collect();
    rows.sort_by(|a, b| a.1.total_cmp(&b.1));
    Ok(rows)
}
