//! The training run policy: compile the system's step for a device, start from the seed or a
//! checkpoint, stream windows in order, run the step, record every point, checkpoint every K
//! steps (scored on held-out text), and stop cleanly — keeping the last good checkpoint — on a
//! non-finite loss. A run to a wall-clock budget ([`crate::budget`]) stops when its training
//! time is spent, its rates warmed down to 0 by then, and checkpoints there.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use alpha_data::{Cursor, Split, TokenStream};
use alpha_learn::{inference_program, Learner};
use alpha_systems::System;
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::backend::Backend;
use crate::budget::{human_seconds, BudgetState};
use crate::checkpoint::{self, Meta};
use crate::records::{now, Invocation, LineageRow, Point, Records, RunInfo, Summary};
use crate::rundir::{self, RunLock};
use crate::score::{ByteWindows, Heldout, Score};
use crate::session::{backend_for, check_ids, config_hash, restore, snapshot, Device};
use crate::testhook;
use alpha_learn::init::initial_leaves;

#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub system: String,
    pub device: Device,
    /// Updates in this invocation.
    pub steps: u64,
    pub batch: Option<usize>,
    /// A prepared token directory (`alpha data prepare`).
    pub data: PathBuf,
    pub run_dir: PathBuf,
    pub resume: Option<PathBuf>,
    /// Checkpoint every this many updates (and always at the end).
    pub checkpoint_every: Option<u64>,
    pub seed: u64,
    /// The schedule's horizon; by default the checkpoint's on resume, else `steps`.
    pub schedule_steps: Option<u64>,
    /// Override the schedule's peak learning rate.
    pub lr: Option<f64>,
    /// Micro-batches whose mean gradient makes one update.
    pub accumulation: usize,
    /// Time every launch of one step into `profile.jsonl`.
    pub profile: bool,
    /// On a fresh start, also checkpoint the initial weights as step 0 (the lineage's root, and
    /// what an independent implementation loads to train beside Alpha).
    pub save_initial: bool,
    /// Held-out windows scored at each checkpoint (0: none).
    pub heldout_windows: usize,
    /// Score those windows on another preparation's held-out bytes instead of `data`'s own
    /// held-out split (to compare with a model in other tokens on the same bytes).
    pub heldout_bytes: Option<ByteWindows>,
    /// Show progress: a bar where stderr is a terminal, a line now and then where it is not.
    pub progress: bool,
    /// Train until this much training time (seconds) is spent, the rates warming down to 0 at
    /// its end; `steps` then only caps the updates. A resume of a budgeted checkpoint goes on
    /// spending its budget without it (given, it replaces the budget's total).
    pub budget: Option<f64>,
    /// The budget's warmdown in updates' worth of time [default: the checkpoint's on resume,
    /// else the system's].
    pub warmdown_updates: Option<u64>,
    /// Tokens sampled from each scored checkpoint into its lineage row (0: none), so a page
    /// can show what the model writes at each cost beside another run's.
    pub checkpoint_sample_tokens: usize,
    /// What the gate ledger said when the run was allowed to start, recorded in `run.json`
    /// (None for a CPU run, which needs no gates).
    pub gates: Option<alpha_records::RunGates>,
    /// Record every parameter tensor's optimizer health (`health.jsonl`) every this many
    /// updates and at the invocation's last; 0: never, and the program has no health phase.
    pub health_every: u64,
}

/// The `--health-every` default on the CPU: a row every 100 updates keeps `health.jsonl` small
/// (one row holds every tensor's figures) and the heat map readable over a long run, while a
/// short run still gets its last update's.
pub const DEFAULT_HEALTH_EVERY: u64 = 100;

/// The `--health-every` default for a run on `device`: [`DEFAULT_HEALTH_EVERY`] on the CPU, and
/// on the GPU the same once the health gate (the health step, which takes the place of the step
/// on its updates, against the device's own step and the CPU reference:
/// [`crate::gates::Gate::Health`]) has passed there for this build (`health_gated`); otherwise
/// off. Asked for by the flag, it runs.
pub fn default_health_every(device: Device, health_gated: bool) -> u64 {
    match device {
        Device::Cpu => DEFAULT_HEALTH_EVERY,
        Device::Cuda if health_gated => DEFAULT_HEALTH_EVERY,
        Device::Cuda => 0,
    }
}

/// The prompt each scored checkpoint continues (the end-of-run sample's too).
pub const SAMPLE_PROMPT: &str = "The ";

#[derive(Debug, Clone)]
pub struct TrainResult {
    pub run_dir: PathBuf,
    pub checkpoint: PathBuf,
    pub sha256: String,
    pub first_step: u64,
    pub last_step: u64,
    pub last_loss: f64,
    pub heldout: Option<Score>,
    pub tokens_per_s: f64,
    pub ms_per_step: f64,
    /// Tokens trained on since step 1 (this invocation and those it resumed).
    pub tokens: u64,
    /// A budgeted run's budget as it ended: the training time spent and the updates it took.
    pub budget: Option<BudgetState>,
    /// The factor on every peak of the last update (1 for a run by steps).
    pub last_factor: f64,
}

/// Set by an interrupt (Ctrl-C): the run finishes its step, checkpoints and stops.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Ask a running `train` to stop after the step in flight, keeping a checkpoint of it.
pub fn request_stop() {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn stop_requested() -> bool {
    STOP.load(std::sync::atomic::Ordering::SeqCst)
}

/// The learner with the run's overrides.
fn learner_for(system: &dyn System, horizon: u64, lr: Option<f64>) -> Learner {
    let l = system.learner(horizon);
    match lr {
        Some(peak) => l.with_peak(peak),
        None => l,
    }
}

/// The `p` quantile of `values` (reordered in place): a selection, not a sort, since it runs
/// every step over every position.
fn percentile(values: &mut [f32], p: f64) -> f64 {
    let i = ((values.len() - 1) as f64 * p).round() as usize;
    *values.select_nth_unstable_by(i, f32::total_cmp).1 as f64
}

/// Scores checkpoints with a forward-only program sharing the training run's parameters, and
/// samples text from them with a batch-1 one.
struct Evaluator {
    backend: Box<dyn Backend>,
    batch: usize,
    /// The held-out sequences, read once for the run.
    heldout: Heldout,
    /// The sampler's program: batch 1, because each sampled token reads its logits back, and
    /// the scoring batch's (16 × 1,024 × 50,257 for GPT-2) would be 16 times as many.
    sampler: Option<Box<dyn Backend>>,
}

impl Evaluator {
    fn new(system: &dyn System, device: Device, batch: usize, heldout: Heldout, samples: bool) -> Result<Self> {
        let program = inference_program(system.model(batch)?)?;
        let sampler = match samples {
            true => Some(backend_for(device, &inference_program(system.model(1)?)?)?),
            false => None,
        };
        Ok(Evaluator { backend: backend_for(device, &program)?, batch, heldout, sampler })
    }

    fn score(&mut self, from: &mut dyn Backend, system: &dyn System) -> Result<Score> {
        for (name, _, is_param) in crate::session::persistent(self.backend.program()) {
            if is_param {
                let v = from.read(&name)?;
                self.backend.write(&name, &v)?;
            }
        }
        self.heldout.score(self.backend.as_mut(), system, self.batch)
    }

    /// A short continuation of [`SAMPLE_PROMPT`] from the parameters last scored, at
    /// temperature 0.8 from the run's seed (so a rerun writes the same text); None without a
    /// sampler.
    fn sample(
        &mut self,
        system: &dyn System,
        tokenizer: &alpha_data::Tokenizer,
        tokens: usize,
        seed: u64,
    ) -> Result<Option<String>> {
        let Some(sampler) = self.sampler.as_mut() else { return Ok(None) };
        for (name, _, is_param) in crate::session::persistent(sampler.program()) {
            if is_param {
                sampler.write(&name, &self.backend.read(&name)?)?;
            }
        }
        let ids = tokenizer.encode(SAMPLE_PROMPT);
        check_ids(&ids, system.vocab())?;
        let p = crate::predict::continue_prompt(sampler.as_mut(), system, &ids, tokens, 0.8, seed)?;
        Ok(Some(tokenizer.decode(&p.tokens)))
    }
}

/// A scored checkpoint's held-out figures and the text sampled from it.
#[derive(Clone, Debug, Default)]
struct Scored {
    heldout: Option<Score>,
    sample: Option<String>,
}

/// What every checkpoint of a run shares, and the writing of one: the file, then its lineage row.
struct Checkpointer {
    meta: Meta,
    run_dir: PathBuf,
    /// The branch written: its checkpoints go to its folder (see [`crate::rundir`]).
    branch: u64,
    started: Instant,
}

/// What a run has cost up to a checkpoint, from its first step (see [`LineageRow`]).
#[derive(Clone, Copy, Debug, Default)]
struct Cost {
    device_s: f64,
    energy_j: Option<f64>,
}

impl Cost {
    /// The cost recorded for the checkpoint `sha` in `run_dir`'s lineage (zero when it is not
    /// listed there: a run started from another directory's checkpoint counts from itself).
    fn recorded(run_dir: &Path, sha: &str) -> Cost {
        let rows = alpha_records::jsonl::read::<LineageRow>(&run_dir.join("lineage.jsonl")).map(|r| r.rows);
        match rows.ok().and_then(|rows| rows.into_iter().rev().find(|r| r.sha256 == sha)) {
            Some(r) => Cost { device_s: r.device_s.unwrap_or(0.0), energy_j: r.energy_j },
            None => Cost::default(),
        }
    }

    /// This cost plus an invocation's: `step_ms` of steps (device time where measured) and
    /// `energy_j` drawn.
    fn plus(self, step_ms: f64, energy_j: Option<f64>) -> Cost {
        let energy_j = match (self.energy_j, energy_j) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        Cost { device_s: self.device_s + step_ms / 1e3, energy_j }
    }
}

impl Checkpointer {
    /// Checkpoint the backend's state after `step`; returns the file and its SHA-256.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        backend: &mut dyn Backend,
        records: &Records,
        step: u64,
        tokens: u64,
        cursor: Cursor,
        parent: Option<String>,
        train_loss: Option<f64>,
        scored: Scored,
        budget: Option<BudgetState>,
        cost: Cost,
    ) -> Result<(PathBuf, String)> {
        let meta = Meta {
            step,
            tokens,
            cursor: serde_json::to_string(&cursor)?,
            parent: parent.clone(),
            budget,
            ..self.meta.clone()
        };
        let rel = rundir::checkpoint_rel(self.branch, step);
        let path = self.run_dir.join(&rel);
        // The branch rule keeps every target new; an existing file here is never replaced.
        if path.exists() {
            bail!("{} exists already; a checkpoint is never written over another", path.display());
        }
        let sha = checkpoint::save(&path, &meta, &snapshot(backend)?)?;
        let heldout = scored.heldout;
        records.lineage(&LineageRow {
            step,
            path: rel.display().to_string(),
            sha256: sha.clone(),
            parent,
            train_loss,
            heldout_loss: heldout.map(|s| s.loss),
            heldout_bpb: heldout.map(|s| s.bits_per_byte),
            wall_s: Some(self.started.elapsed().as_secs_f64()),
            device_s: Some(cost.device_s),
            energy_j: cost.energy_j,
            heldout_bpb_se: heldout.and_then(|s| s.bpb_se),
            heldout_loss_se: heldout.and_then(|s| s.loss_se),
            sample_prompt: scored.sample.is_some().then(|| SAMPLE_PROMPT.to_string()),
            sample: scored.sample,
            time: Some(now()),
            branch: Some(self.branch),
        })?;
        Ok((path, sha))
    }
}

pub fn train(opts: &TrainOptions) -> Result<TrainResult> {
    let system = alpha_systems::find(&opts.system).map_err(anyhow::Error::msg)?;
    let system = system.as_ref();
    let batch = opts.batch.unwrap_or(system.default_batch());
    if batch == 0 || opts.steps == 0 {
        bail!("--batch and --steps must be at least 1");
    }
    let t = system.context();

    // Data first: a bad path should fail before any compiling.
    let mut stream = TokenStream::open(&opts.data, Split::Train)
        .with_context(|| format!("opening the training data at {}", opts.data.display()))?;
    stream.check_vocab(crate::data::token_vocab(system))?;

    let resumed = match &opts.resume {
        Some(p) => Some((checkpoint::load(p)?, p.clone())),
        None => None,
    };
    // Step and token counts checked before anything is written: a step count past u64 is
    // refused, not wrapped.
    let accumulation = opts.accumulation.max(1);
    let (start_step, start_tokens) = resumed.as_ref().map_or((0, 0), |(c, _)| (c.meta.step, c.meta.tokens));
    let last_step = start_step.checked_add(opts.steps).ok_or_else(|| {
        anyhow!(
            "--steps {} from step {start_step} would pass the largest step count ({}); ask for fewer",
            opts.steps,
            u64::MAX
        )
    })?;
    let tokens_per_step =
        accumulation.checked_mul(batch).and_then(|n| n.checked_mul(t)).and_then(|n| u64::try_from(n).ok()).ok_or_else(
            || anyhow!("--batch {batch} × --accumulate {accumulation} × context {t} tokens a step is too many"),
        )?;
    tokens_per_step.checked_mul(opts.steps).and_then(|n| n.checked_add(start_tokens)).ok_or_else(|| {
        anyhow!(
            "--steps {} of {tokens_per_step} tokens each would pass the largest token count; ask for fewer",
            opts.steps
        )
    })?;

    let budget = budget_state(opts, system, resumed.as_ref().map(|(c, _)| c))?;
    // Read once for every checkpoint, before the run directory is touched: windows that
    // cannot be scored are refused now, not at the first checkpoint.
    let heldout = (opts.heldout_windows > 0)
        .then(|| Heldout::read(system, &opts.data, opts.heldout_bytes.as_ref(), opts.heldout_windows))
        .transpose()?;

    // The run directory: one process at a time, one run a directory; a resume from an older
    // checkpoint writes a branch. Refusals here leave the directory as it was.
    let _lock = RunLock::acquire(&opts.run_dir)?;
    let placement = rundir::place(&opts.run_dir, resumed.as_ref().map(|(c, p)| (p.as_path(), c)))?;
    let branch = placement.branch;
    let previous = Records::read_run_info_as_written(&opts.run_dir);
    if let Some(prev) = previous.as_ref().filter(|p| p.is_stale()) {
        let seen = prev.clone().observed();
        eprintln!("{}: {}", opts.run_dir.display(), seen.message.as_deref().unwrap_or("interrupted"));
        crate::checkpoint::write_atomic(
            &opts.run_dir.join("run.json"),
            serde_json::to_string_pretty(&seen)?.as_bytes(),
        )?;
    }
    for p in rundir::sweep_tmp(&opts.run_dir)? {
        eprintln!("removed {}, left by a write that did not finish", p.display());
    }
    if branch > 0 {
        eprintln!(
            "{} has later checkpoints than {}: this run is branch {branch}, its checkpoints in {}",
            opts.run_dir.display(),
            opts.resume.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            opts.run_dir.join(rundir::branch_folder(branch)).display()
        );
    }

    let horizon = opts.schedule_steps.or(resumed.as_ref().map(|(c, _)| c.meta.schedule_total)).unwrap_or(opts.steps);
    // A resume without --lr goes on at the peak the run had (recorded in its checkpoint).
    let lr = opts.lr.or(resumed.as_ref().and_then(|(c, _)| c.meta.peak));
    let mut learner = learner_for(system, horizon, lr);
    learner.accumulation = accumulation;
    let (program, health_rows) = if opts.health_every > 0 {
        learner.training_program_with_health(system.model(batch)?)?
    } else {
        (learner.training_program(system.model(batch)?)?, vec![])
    };
    let mut backend = backend_for(opts.device, &program)?;
    let hash = config_hash(system, &program);

    let (mut step, mut tokens, mut parent, seed) = match &resumed {
        Some((ckpt, path)) => {
            restore(ckpt, system, backend.as_mut(), &path.display().to_string())?;
            let cursor: Cursor = serde_json::from_str(&ckpt.meta.cursor)
                .with_context(|| format!("{}: the data cursor does not parse", path.display()))?;
            stream.seek(cursor)?;
            (ckpt.meta.step, ckpt.meta.tokens, Some(ckpt.sha256.clone()), ckpt.meta.seed)
        }
        None => {
            for (name, values) in initial_leaves(&program.graph, opts.seed) {
                backend.write(&name, &values)?;
            }
            (0, 0, None, opts.seed)
        }
    };

    let mut records = Records::open(&opts.run_dir)?;
    if let Some(row) = &placement.unlisted {
        records.lineage(&LineageRow { time: Some(now()), ..row.clone() })?;
    }
    if let Some(prev) = &previous {
        records.close_invocation(prev)?;
    }
    let parameters = program.graph.parameter_count() as u64;
    let first_step = step + 1;
    // This process's number among those run into the directory (a crashed one left its
    // run.json, if not its invocation row).
    let invocation = records
        .invocations()
        .iter()
        .map(|r| r.k)
        .chain(previous.as_ref().and_then(|p| p.invocation))
        .max()
        .unwrap_or(0)
        .saturating_add(1);
    let started = Instant::now();
    let pid = std::process::id();
    let mut info = RunInfo {
        name: opts.run_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        system: system.name().into(),
        device: backend.device().into(),
        state: "running".into(),
        steps_target: last_step,
        steps_done: step,
        started_at: previous.as_ref().and_then(|r| r.started_at.clone()).or_else(|| Some(now())),
        updated_at: Some(now()),
        parameters: Some(parameters),
        tokens_per_step: Some(tokens_per_step),
        batch: Some(batch as u64),
        context: Some(t as u64),
        vocab: Some(system.vocab() as u64),
        seed: Some(seed),
        message: None,
        summary: None,
        pid: Some(pid),
        host: Some(alpha_records::liveness::hostname()),
        pid_started: alpha_records::liveness::process_start(pid),
        last_checkpoint: opts.resume.as_ref().map(|p| p.display().to_string()),
        invocation: Some(invocation),
        branch: Some(branch),
        budget_s: budget.map(|b| b.budget.seconds),
        elapsed_s: budget.map(|b| b.elapsed),
        warmdown_updates: budget.map(|b| b.budget.warmdown_updates),
        gates: opts.gates.clone(),
        heldout: heldout.as_ref().and_then(|h| h.described().map(String::from)),
    };
    if let Some(b) = &budget {
        info.steps_target = budget_target(step, b, last_step);
    }
    records.run_info(&info)?;
    // From here on an error leaves run.json "failed" with its message, not "running".
    let outcome = (|| -> Result<TrainResult> {
        // A CPU run on a GPU machine must not claim the GPU's energy.
        let sampler = alpha_telemetry::Sampler::start_with(
            &opts.run_dir,
            alpha_telemetry::SamplerOptions {
                period: Duration::from_secs(1),
                gpu: opts.device == Device::Cuda,
                ..Default::default()
            },
        )
        .ok();
        // The data folder as an absolute path, so probes from anywhere find its tokenizer.
        let data_path = opts.data.canonicalize().unwrap_or_else(|_| opts.data.clone()).display().to_string();
        // The step whose launches are timed: the second of the invocation (the first warms caches).
        let profiled_step = opts.profile.then(|| first_step.saturating_add(1).min(last_step));

        // The sample's tokenizer: without one (a stream prepared elsewhere) there is no sample.
        let tokenizer = if opts.checkpoint_sample_tokens > 0 && opts.heldout_windows > 0 {
            alpha_data::Tokenizer::load(&opts.data).ok()
        } else {
            None
        };
        let mut evaluator = match heldout {
            Some(h) => {
                Some(Evaluator::new(system, opts.device, batch.min(opts.heldout_windows), h, tokenizer.is_some())?)
            }
            None => None,
        };
        let checkpointer = Checkpointer {
            meta: Meta {
                system: system.name().into(),
                config_hash: hash.clone(),
                step: 0,
                cursor: String::new(),
                seed,
                schedule: learner.describe(),
                schedule_total: horizon,
                peak: learner.groups.first().map(|g| g.peak),
                tokens: 0,
                parent: None,
                data: data_path,
                budget: None,
            },
            run_dir: opts.run_dir.clone(),
            branch,
            started,
        };
        if opts.save_initial && resumed.is_none() {
            let (_, sha) = checkpointer.write(
                backend.as_mut(),
                &records,
                0,
                0,
                stream.cursor(),
                None,
                None,
                Scored::default(),
                budget,
                Cost::default(),
            )?;
            parent = Some(sha);
        }
        let mut budget = budget;
        let bar = progress_bar(opts.progress, opts.steps, budget.as_ref());
        let mut step_lines = crate::progress::StepLines::new(opts.progress, opts.steps, budget.as_ref());
        let mut inputs = vec![0u32; batch * t];
        let mut targets = vec![0u32; batch * t];
        let mut window = vec![0u32; t + 1];
        let mut last_loss = f64::NAN;
        let mut first_loss = f64::NAN;
        let mut last_ckpt: Option<(PathBuf, String)> = None;
        let mut last_heldout = None;
        let mut step_ms_total = 0.0;
        // The steps' device time (where the backend gave one), and their cost: device time
        // where there is one, wall time where not (see `LineageRow::device_s`).
        let mut device_ms_total: Option<f64> = None;
        let mut cost_ms_total = 0.0;
        // The cost of the run before this invocation: its resumed checkpoint's.
        let cost_before = parent.as_deref().map_or(Cost::default(), |sha| Cost::recorded(&opts.run_dir, sha));
        let mut factor = 1.0;

        while step < last_step {
            step += 1;
            let t0 = Instant::now();
            // A health step runs the health variant of the step's last phase in its place: every
            // `health_every`, and the invocation's last as far as it is known before it runs (the
            // step cap, a budget's last update at the mean step time, a stop already asked for).
            let health = !health_rows.is_empty()
                && (step % opts.health_every == 0
                    || step == last_step
                    || budget.as_ref().is_some_and(|b| b.updates_left().is_some_and(|n| n <= 1))
                    || stop_requested());
            let out = |name: &str| if health { format!("{}{name}", alpha_learn::health::PREFIX) } else { name.into() };
            if testhook::crash_at("non-finite-grad", step) {
                inject_non_finite_gradient(backend.as_mut())?;
            }
            let epoch = stream.cursor().epoch;
            // The budget's warmdown, from the time spent before this update (1 without one).
            factor = budget.as_ref().map_or(1.0, BudgetState::factor);
            for (name, value) in learner.scalars_scaled(step, factor) {
                backend.write(name, &[value as f32])?;
            }
            // One micro-batch a pass; with accumulation the last pass is followed by the update.
            let mut loss = 0.0;
            let mut losses = Vec::with_capacity(accumulation * batch * t);
            // The sum of the step's runs on the device's clock; None once one is untimed.
            let mut device_ms = Some(0.0);
            for _ in 0..accumulation {
                for b in 0..batch {
                    stream.fill_window(&mut window)?;
                    inputs[b * t..(b + 1) * t].copy_from_slice(&window[..t]);
                    targets[b * t..(b + 1) * t].copy_from_slice(&window[1..]);
                }
                check_ids(&inputs, system.vocab())?;
                backend.write_ids("tokens", &inputs)?;
                backend.write_ids("targets", &targets)?;
                let phase = match health && accumulation == 1 {
                    true => alpha_learn::health::PHASE,
                    false => program.phases[0].name.as_str(),
                };
                if Some(step) == profiled_step {
                    let launches = backend.profile(phase)?;
                    records.profile(step, &launches)?;
                } else {
                    backend.run(phase)?;
                }
                let (loss_name, losses_name) = match accumulation == 1 {
                    true => (out("loss"), out("losses")),
                    false => ("loss".to_string(), "losses".to_string()),
                };
                loss += backend.output(&loss_name)?[0] as f64 / accumulation as f64;
                losses.extend(backend.output(&losses_name)?);
                // Read after the outputs, which waited for the run already.
                device_ms = device_ms.zip(backend.last_run_device_ms()?).map(|(a, b)| a + b);
            }
            if accumulation > 1 {
                backend.run(if health { alpha_learn::health::PHASE } else { "update" })?;
                device_ms = device_ms.zip(backend.last_run_device_ms()?).map(|(a, b)| a + b);
            }
            // Recorded before the loss is judged, so the step a run fails at shows its figures.
            if health {
                let table = backend.output(alpha_learn::health::OUTPUT)?;
                records.health(&health_row(&health_rows, &table, step, invocation, branch))?;
            }
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            step_ms_total += ms;
            cost_ms_total += device_ms.unwrap_or(ms);
            if let Some(d) = device_ms {
                *device_ms_total.get_or_insert(0.0) += d;
            }
            tokens = tokens.saturating_add(tokens_per_step);
            if testhook::crash_at("non-finite-loss", step) {
                loss = f64::NAN;
            }
            if !loss.is_finite() {
                bar.abandon();
                let kept = last_ckpt
                    .as_ref()
                    .map(|(p, _)| p.display().to_string())
                    .or(opts.resume.as_ref().map(|p| p.display().to_string()))
                    .unwrap_or_else(|| "none (no checkpoint was written yet)".into());
                let msg = format!(
                    "loss became non-finite ({loss}) at step {step}; training stopped; last good checkpoint: {kept}"
                );
                info.state = "failed".into();
                info.steps_done = step - 1;
                info.message = Some(msg.clone());
                info.updated_at = Some(now());
                records.run_info(&info)?;
                bail!(msg);
            }
            let grad_norm = backend.output(&out("grad_norm")).ok().map(|g| g[0] as f64);
            if step == first_step {
                first_loss = loss;
            }
            last_loss = loss;
            records.point(&Point {
                step,
                loss: Some(loss),
                lr: Some(learner.lr_scaled(step, factor)),
                tokens: Some(tokens),
                ms: Some(ms),
                device_ms,
                unseen: epoch == 0,
                p10: Some(percentile(&mut losses, 0.1)),
                p90: Some(percentile(&mut losses, 0.9)),
                grad_norm,
                invocation: Some(invocation),
                branch: Some(branch),
                lr_factor: budget.is_some().then_some(factor),
                elapsed_s: budget.map(|b| b.elapsed + t0.elapsed().as_secs_f64()),
            })?;
            if testhook::crash_at("after-step", step) {
                testhook::crash();
            }
            let tok_s = (accumulation * batch * t) as f64 / (ms / 1e3);
            match budget.as_mut() {
                Some(b) => {
                    // The update's training time: everything since it began, up to here.
                    b.add(t0.elapsed());
                    bar.set_position((b.elapsed * 10.0) as u64);
                    bar.set_message(format!(
                        "step {step} · loss {loss:.4} · {tok_s:.0} tok/s · lr ×{factor:.3} · {} left",
                        human_seconds(b.left())
                    ));
                    step_lines.budgeted(step, step - first_step + 1, loss, tok_s, b, factor);
                }
                None => {
                    bar.set_position(step - first_step + 1);
                    bar.set_message(format!("loss {loss:.4} · {:.0} tok/s", tok_s));
                    step_lines.step(step, step - first_step + 1, last_step, loss, tok_s);
                }
            }
            let finished = step == last_step || budget.as_ref().is_some_and(BudgetState::spent);
            let stopping = stop_requested() && !finished;
            if opts.checkpoint_every.is_some_and(|k| k > 0 && step % k == 0) || finished || stopping {
                let scored = match evaluator.as_mut() {
                    Some(ev) => {
                        let heldout = Some(ev.score(backend.as_mut(), system)?);
                        let sample = match &tokenizer {
                            Some(tok) => ev.sample(system, tok, opts.checkpoint_sample_tokens, seed)?,
                            None => None,
                        };
                        Scored { heldout, sample }
                    }
                    None => Scored::default(),
                };
                let heldout = scored.heldout;
                let (path, sha) = checkpointer.write(
                    backend.as_mut(),
                    &records,
                    step,
                    tokens,
                    stream.cursor(),
                    parent.clone(),
                    Some(loss),
                    scored,
                    budget,
                    cost_before.plus(cost_ms_total, sampler.as_ref().and_then(|s| s.energy_joules_since_start())),
                )?;
                parent = Some(sha.clone());
                info.last_checkpoint = Some(path.display().to_string());
                last_ckpt = Some((path, sha));
                last_heldout = heldout.or(last_heldout);
                info.steps_done = step;
                if let Some(b) = &budget {
                    info.elapsed_s = Some(b.elapsed);
                    info.steps_target = if finished { step } else { budget_target(step, b, last_step) };
                }
                info.updated_at = Some(now());
                records.run_info(&info)?;
            }
            if stopping {
                bar.abandon();
                let (path, _) = last_ckpt.as_ref().expect("a stopping step checkpoints");
                let msg = format!(
                    "interrupted after step {step}; checkpoint {} keeps it (continue with --resume {})",
                    path.display(),
                    path.display()
                );
                records.invocation(&Invocation {
                    k: invocation,
                    first_step,
                    last_step: step,
                    unseen_loss: Some(first_loss),
                    last_loss: Some(last_loss),
                    wall_s: Some(started.elapsed().as_secs_f64()),
                    device_s: device_ms_total.map(|ms| ms / 1e3),
                    branch: Some(branch),
                })?;
                info.state = "stopped".into();
                info.message = Some(msg.clone());
                info.updated_at = Some(now());
                records.run_info(&info)?;
                bail!(msg);
            }
            if finished {
                break;
            }
        }
        bar.finish_and_clear();
        // A budgeted run may end before `last_step`: what ran is what counts from here.
        let last_step = step;
        let wall = started.elapsed().as_secs_f64();
        let steps_run = (last_step - first_step + 1) as f64;
        let tokens_run = steps_run * (accumulation * batch * t) as f64;
        let energy = sampler.as_ref().and_then(|s| s.energy_joules_since_start());
        drop(sampler);
        records.invocation(&Invocation {
            k: invocation,
            first_step,
            last_step,
            unseen_loss: Some(first_loss),
            last_loss: Some(last_loss),
            wall_s: Some(wall),
            device_s: device_ms_total.map(|ms| ms / 1e3),
            branch: Some(branch),
        })?;
        let result_tok_s = tokens_run / (step_ms_total / 1e3);
        info.state = "finished".into();
        info.steps_done = last_step;
        info.updated_at = Some(now());
        let summary = Summary {
            tokens_per_s: Some(result_tok_s),
            ms_per_step: Some(step_ms_total / steps_run),
            energy_j: energy,
            energy_per_token_j: energy.map(|e| e / tokens_run),
            final_loss: Some(last_loss),
            heldout_loss: last_heldout.map(|s| s.loss),
            heldout_bpb: last_heldout.map(|s| s.bits_per_byte),
        };
        info.summary = serde_json::to_value(summary)?.as_object().cloned();
        records.run_info(&info)?;
        let (checkpoint, sha256) = last_ckpt.expect("the last step always checkpoints");
        Ok(TrainResult {
            run_dir: opts.run_dir.clone(),
            checkpoint,
            sha256,
            first_step,
            last_step,
            last_loss,
            heldout: last_heldout,
            tokens_per_s: result_tok_s,
            ms_per_step: step_ms_total / steps_run,
            tokens,
            budget,
            last_factor: factor,
        })
    })();
    if let Err(e) = &outcome {
        if info.state == "running" {
            info.state = "failed".into();
            info.message = Some(format!("{e:#}"));
            info.updated_at = Some(now());
            let _ = records.run_info(&info);
        }
    }
    outcome
}

/// `health.jsonl`'s row for `step` from the health output `table` (`[rows, 2]`: a norm and a
/// non-finite count each, in `rows`' order), grouped by tensor in the program's order.
pub fn health_row(
    rows: &[alpha_learn::health::Row],
    table: &[f32],
    step: u64,
    invocation: u64,
    branch: u64,
) -> crate::records::HealthRow {
    let mut tensors: Vec<crate::records::TensorHealth> = vec![];
    for (r, f) in rows.iter().zip(table.chunks(2)) {
        if tensors.last().is_none_or(|t| t.tensor != r.tensor) {
            tensors.push(crate::records::TensorHealth { tensor: r.tensor.clone(), ..Default::default() });
        }
        let t = tensors.last_mut().expect("pushed above");
        if r.quantity == "param" {
            t.numel = r.numel as u64;
        }
        t.norms.insert(r.quantity.clone(), f[0].is_finite().then_some(f[0] as f64));
        t.nonfinite.insert(r.quantity.clone(), f[1] as u64);
    }
    crate::records::HealthRow { step, invocation: Some(invocation), branch: Some(branch), tensors }
}

/// The test hook `non-finite-grad:N`: before update N, one element of the first parameter's
/// gradient made NaN — through its accumulator where the update reads one (accumulation), so
/// that gradient alone is touched; else through the parameter itself, whose NaN the backward
/// carries into the gradients.
fn inject_non_finite_gradient(backend: &mut dyn Backend) -> Result<()> {
    let params = crate::session::persistent(backend.program());
    let (name, _, _) = params.iter().find(|p| p.2).ok_or_else(|| anyhow!("the program has no parameter"))?;
    let acc = format!("{name}.grad_acc");
    let target = if params.iter().any(|p| p.0 == acc) { acc } else { name.clone() };
    let mut values = backend.read(&target)?;
    values[0] = f32::NAN;
    eprintln!("{}: {target}[0] made NaN before this update, as the test asked", testhook::VAR);
    backend.write(&target, &values)
}

/// The budget a run trains to: the one given (its warmdown from the flag, the checkpoint or the
/// system), or the resumed checkpoint's, with the time already spent; None for a run by steps.
/// A budget already spent is refused, before anything is written.
fn budget_state(
    opts: &TrainOptions,
    system: &dyn System,
    resumed: Option<&checkpoint::Checkpoint>,
) -> Result<Option<BudgetState>> {
    let carried = resumed.and_then(|c| c.meta.budget);
    let Some(seconds) = opts.budget.or(carried.map(|c| c.budget.seconds)) else {
        if opts.warmdown_updates.is_some() {
            bail!("--warmdown-updates shapes a wall-clock budget's end: give --budget too");
        }
        return Ok(None);
    };
    if !(seconds.is_finite() && seconds > 0.0) {
        bail!("the budget must be a positive time, not {seconds} s");
    }
    let warmdown_updates = opts
        .warmdown_updates
        .or(carried.map(|c| c.budget.warmdown_updates))
        .unwrap_or_else(|| system.warmdown_updates());
    let mut state = carried.unwrap_or(BudgetState::new(alpha_learn::TimeBudget { seconds, warmdown_updates }));
    state.budget = alpha_learn::TimeBudget { seconds, warmdown_updates };
    if state.spent() {
        bail!(
            "the budget of {} is spent: the checkpoint has trained for {} already; give a larger --budget to train on",
            human_seconds(seconds),
            human_seconds(state.elapsed)
        );
    }
    Ok(Some(state))
}

/// `run.json`'s `steps_target` for a budgeted run after `step`: the steps the rest of the budget
/// holds at the mean step time, within the run's cap; 0 (unknown) before the first update.
fn budget_target(step: u64, b: &BudgetState, cap: u64) -> u64 {
    b.updates_left().map_or(0, |left| step.saturating_add(left).min(cap))
}

/// A bar by updates, or under a budget by tenths of a second of training time.
fn progress_bar(show: bool, steps: u64, budget: Option<&BudgetState>) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    if let Some(b) = budget {
        let bar = ProgressBar::new((b.budget.seconds * 10.0) as u64);
        bar.set_position((b.elapsed * 10.0) as u64);
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        return bar;
    }
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} steps · {msg} · eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}
