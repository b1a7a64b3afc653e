//! `alpha bench`: Alpha's training step against PyTorch's best on the same device, in one
//! invocation. Alpha's step is timed over replayed steps after warm-up (synchronised by reading
//! the loss back once at the end); the baseline is the system's independent PyTorch model
//! ([`BASELINES`]) run as `python3 SCRIPT bench --batch B`, whose last stdout line is JSON with
//! each setting's ms a step.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use alpha_systems::System;
use anyhow::{anyhow, bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::session::{backend_for, Device};
use alpha_learn::init::initial_leaves;

/// The systems with a PyTorch baseline and its script, relative to the repository root: each
/// script is the same model written again in PyTorch (no code shared with Alpha), whose `bench`
/// subcommand times one whole training step in PyTorch's four settings.
pub const BASELINES: &[(&str, &str)] = &[
    ("coppelius", "bench/coppelius_torch.py"),
    ("gpt2", "bench/gpt2_torch.py"),
    ("diakosmos", "bench/diakosmos_torch.py"),
    ("polf", "bench/polf_torch.py"),
];

/// The PyTorch script `alpha bench` times `system` against: `given` (`--baseline`) when set,
/// `none` for no baseline, else the system's own from [`BASELINES`]. A system without one, or
/// a script that is not there, is an error that says what to pass instead.
pub fn baseline_script(system: &str, given: Option<&Path>) -> Result<Option<PathBuf>> {
    let script = match given {
        Some(p) if p.as_os_str() == "none" => return Ok(None),
        Some(p) => {
            if !p.is_file() {
                bail!("--baseline {}: no such script (pass --baseline none to time Alpha alone)", p.display());
            }
            return Ok(Some(p.to_path_buf()));
        }
        None => match BASELINES.iter().find(|(s, _)| *s == system) {
            Some((_, script)) => PathBuf::from(script),
            None => {
                let with: Vec<&str> = BASELINES.iter().map(|(s, _)| *s).collect();
                bail!(
                    "{system} has no PyTorch baseline script (systems with one: {}); pass --baseline SCRIPT, \
                     or --baseline none to time Alpha alone",
                    with.join(", ")
                );
            }
        },
    };
    if !script.is_file() {
        bail!(
            "{system}'s PyTorch baseline {} is not here: run from the repository root, or pass --baseline \
             SCRIPT (--baseline none times Alpha alone)",
            script.display()
        );
    }
    Ok(Some(script))
}

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

/// What the PyTorch baseline measured at one batch size.
pub struct PytorchTimes {
    /// (setting, ms a step), fastest first.
    pub timed: Vec<(String, f64)>,
    /// (setting, why it has no time): an error such as running out of memory, or skipped at the
    /// deadline.
    pub untimed: Vec<(String, String)>,
}

/// PyTorch's settings for one batch size.
pub fn time_pytorch(script: &Path, batch: usize, extra: &[String]) -> Result<PytorchTimes> {
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
    parse_baseline(&stdout)
}

/// The baseline's result: its last stdout line, `{"settings": {NAME: {"ms_per_step": …} or
/// {"error": …} or {"skipped": …}}, …}`.
fn parse_baseline(stdout: &str) -> Result<PytorchTimes> {
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| anyhow!("the baseline printed no JSON"))?;
    let v: serde_json::Value = serde_json::from_str(last)?;
    let settings = v["settings"].as_object().ok_or_else(|| anyhow!("the baseline's JSON has no settings"))?;
    let mut timed: Vec<(String, f64)> =
        settings.iter().filter_map(|(k, s)| s["ms_per_step"].as_f64().map(|ms| (k.clone(), ms))).collect();
    timed.sort_by(|a, b| a.1.total_cmp(&b.1));
    let untimed = settings
        .iter()
        .filter(|(_, s)| s["ms_per_step"].as_f64().is_none())
        .map(|(k, s)| {
            let why = match (s["error"].as_str(), s["skipped"].as_str()) {
                (Some(e), _) => e.split(". ").next().unwrap_or(e).to_string(),
                (None, Some(skipped)) => format!("skipped ({skipped})"),
                (None, None) => "no time".to_string(),
            };
            (k.clone(), why)
        })
        .collect();
    Ok(PytorchTimes { timed, untimed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_baseline_is_a_system_with_its_script_in_the_repository() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for (system, script) in BASELINES {
            assert!(alpha_systems::find(system).is_ok(), "{system} is not a system");
            assert!(root.join(script).is_file(), "{script} ({system}'s baseline) is not in the repository");
        }
        let scripts: Vec<&str> = BASELINES.iter().map(|(_, s)| *s).collect();
        assert_eq!(
            scripts,
            ["bench/coppelius_torch.py", "bench/gpt2_torch.py", "bench/diakosmos_torch.py", "bench/polf_torch.py"]
        );
    }

    #[test]
    fn a_setting_without_a_time_is_reported_with_its_reason() {
        // The shape of diakosmos_torch.py's result at 64 windows on the H200 (eager out of memory).
        let out = concat!(
            "Diakosmos, PyTorch on NVIDIA H200: batch 64 x 2048 tokens\n",
            r#"{"batch": 64, "settings": {"eager": {"error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 666.00 MiB"}, "#,
            r#""compile": {"ms_per_step": 812.5, "tokens_per_s": 161000.0}, "compile+graph": {"skipped": "deadline"}, "#,
            r#""graph": {"ms_per_step": 790.25}}}"#,
            "\n"
        );
        let t = parse_baseline(out).unwrap();
        assert_eq!(t.timed, [("graph".to_string(), 790.25), ("compile".to_string(), 812.5)]);
        assert_eq!(
            t.untimed,
            [
                ("compile+graph".to_string(), "skipped (deadline)".to_string()),
                ("eager".to_string(), "OutOfMemoryError: CUDA out of memory".to_string())
            ]
        );
        let e = parse_baseline("no result\n").err().unwrap().to_string();
        assert!(e.contains("printed no JSON"), "{e}");
    }

    #[test]
    fn the_script_follows_the_system_and_none_or_a_given_script_overrides_it() {
        // Unit tests run in the crate's folder, where bench/ is not: the default is named, and
        // refused as missing with the way out.
        let e = baseline_script("gpt2", None).unwrap_err().to_string();
        assert!(e.contains("bench/gpt2_torch.py is not here") && e.contains("--baseline none"), "{e}");
        let e = baseline_script("coppelius", None).unwrap_err().to_string();
        assert!(e.contains("bench/coppelius_torch.py is not here"), "{e}");
        let e = baseline_script("bob", None).unwrap_err().to_string();
        assert!(
            e.contains("bob has no PyTorch baseline script (systems with one: coppelius, gpt2, diakosmos, polf)"),
            "{e}"
        );
        let e = baseline_script("diakosmos", None).unwrap_err().to_string();
        assert!(e.contains("bench/diakosmos_torch.py is not here"), "{e}");
        assert!(e.contains("--baseline none"), "{e}");
        assert_eq!(baseline_script("bob", Some(Path::new("none"))).unwrap(), None);
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        assert_eq!(baseline_script("bob", Some(&here)).unwrap(), Some(here.clone()));
        let e = baseline_script("gpt2", Some(Path::new("no-such.py"))).unwrap_err().to_string();
        assert!(e.contains("--baseline no-such.py: no such script"), "{e}");
    }
}
