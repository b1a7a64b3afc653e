//! Samples telemetry into `RUN_DIR/telemetry.jsonl` while a command runs (or for SECONDS), then
//! prints what was recorded: a quick check of the NVML path on a GPU machine.
//!
//! `cargo run --release -p alpha-telemetry --example sample -- RUN_DIR SECONDS [COMMAND ARGS...]`

use std::path::PathBuf;
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "telemetry-sample".into()));
    let seconds: f64 = args.next().map_or(Ok(5.0), |s| s.parse())?;
    let command: Vec<String> = args.collect();
    let mut sampler = alpha_telemetry::Sampler::start(&dir, Duration::from_secs(1))?;
    println!("{}", sampler.note().unwrap_or(""));
    let start = Instant::now();
    if let Some((program, rest)) = command.split_first() {
        let status = std::process::Command::new(program).args(rest).status()?;
        println!("{program} exited: {status}");
    }
    let left = Duration::from_secs_f64(seconds).saturating_sub(start.elapsed());
    std::thread::sleep(left);
    let energy = sampler.energy_joules_since_start();
    sampler.stop();
    println!(
        "{} samples in {:.1} s into {}; GPU: {}; energy: {}",
        sampler.samples(),
        start.elapsed().as_secs_f64(),
        sampler.path().display(),
        sampler.gpu_available(),
        energy.map_or("none".to_string(), |j| format!("{j:.1} J"))
    );
    Ok(())
}
