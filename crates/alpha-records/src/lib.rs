//! The run records: the contract between the trainer that writes them and the dashboard that
//! reads them, in one place. A run directory `runs/<name>/` holds `run.json` (rewritten
//! atomically), and JSON Lines appended as the run goes: `points.jsonl` (a row a step),
//! `lineage.jsonl` (a row a checkpoint), `invocations.jsonl` (a row a process run),
//! `profile.jsonl` (a row a timed launch) and `telemetry.jsonl` (alpha-telemetry's samples).
//!
//! Every field but the identifying ones is optional with a default, so a record written by an
//! older or newer trainer still reads, and the dashboard shows what it has.
//!
//! A row is written whole: its JSON and newline in one `write` on a file opened for appending
//! ([`jsonl::append`]), so a crash leaves at most one unterminated last line, which readers
//! ([`jsonl::read`]) skip. `run.json` names the process writing it (pid, host, the process's
//! start time), so a reader can tell a run whose process is gone from one still going
//! ([`RunInfo::observed`]).
//!
//! The gate ledger ([`GateRecord`]) lives beside the runs rather than in one:
//! `<runs>/.gates/<system>.jsonl`, a row each time `alpha check` judges a gate. A gate judges a
//! build of a system on a device, not a run, so every run of that system under the same runs
//! folder reads the same ledger: `alpha train` finds it from its run directory's parent, and
//! `alpha serve --runs` from its folder. The leading dot keeps it from being listed as a run.

pub mod catalogue;
pub mod jsonl;
pub mod liveness;

use serde::{Deserialize, Serialize};

/// The summary a finished invocation writes into `run.json`: its rates, its energy and its last
/// losses. A resumed run's totals from its first step (training seconds, joules) are its
/// newest checkpoint's in `lineage.jsonl`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    pub tokens_per_s: Option<f64>,
    pub ms_per_step: Option<f64>,
    pub energy_j: Option<f64>,
    pub energy_per_token_j: Option<f64>,
    pub final_loss: Option<f64>,
    pub heldout_loss: Option<f64>,
    pub heldout_bpb: Option<f64>,
}

/// `run.json`, rewritten atomically by the trainer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunInfo {
    pub name: String,
    pub system: String,
    pub device: String,
    pub state: String,
    pub steps_target: u64,
    pub steps_done: u64,
    pub started_at: Option<String>,
    pub updated_at: Option<String>,
    pub parameters: Option<u64>,
    pub tokens_per_step: Option<u64>,
    pub batch: Option<u64>,
    pub context: Option<u64>,
    pub vocab: Option<u64>,
    pub seed: Option<u64>,
    pub message: Option<String>,
    pub summary: Option<serde_json::Map<String, serde_json::Value>>,
    /// The process training the run (while `state` is "running").
    pub pid: Option<u32>,
    /// The host that process runs on: liveness is judged only on the same host.
    pub host: Option<String>,
    /// The process's start time (clock ticks after boot, Linux), so a reused pid is not taken
    /// for the run's process.
    pub pid_started: Option<u64>,
    /// The newest checkpoint (at the start, the one resumed), as the path `--resume` takes from
    /// where the run was started.
    pub last_checkpoint: Option<String>,
    /// The invocation writing the run (1, 2, … a process run into this directory).
    pub invocation: Option<u64>,
    /// The branch the invocation writes (0 or absent: the main line).
    pub branch: Option<u64>,
    /// A run to a wall-clock budget: its budget of training time, seconds. Such a run's
    /// `steps_target` is an estimate while it runs (the steps done plus the budget left at the
    /// mean step time), and the steps done once it ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_s: Option<f64>,
    /// Training time of the budget spent, seconds (start-up, compilation, evaluation and
    /// checkpoint writes not counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_s: Option<f64>,
    /// The updates' worth of time over which the budget's warmdown takes the rate to 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmdown_updates: Option<u64>,
    /// What the gate ledger said when a GPU run started (absent for a CPU run: the CPU is the
    /// reference the gates compare against).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gates: Option<RunGates>,
    /// What the held-out figures score when it is not the run's own data's held-out windows
    /// (`--heldout-bytes`: another preparation's byte windows, so runs in different tokens are
    /// scored on the same bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heldout: Option<String>,
}

/// The gates a GPU run started on: the build and device it was checked for, the passing
/// ledger rows it relied on, or that it was told to skip them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunGates {
    /// The build identity the ledger was searched for (see [`GateRecord::build`]).
    pub build: String,
    pub device: String,
    /// Started with `--skip-gates`.
    pub skipped: bool,
    /// The gates with a passing record for this build and device, in the ledger's order.
    pub passed: Vec<String>,
    /// The gates without one (a skipped run names what it went without).
    pub missing: Vec<String>,
    /// The ledger read, as given to the trainer.
    pub ledger: String,
}

/// The gates `alpha check all` runs, in the order each must hold before the next is worth
/// running: the forward pass, its gradient, the optimizer's update, and causality.
pub const GATES: [&str; 4] = ["forward", "gradient", "update", "causality"];

/// The folder of gate ledgers under a runs folder.
pub const GATE_DIR: &str = ".gates";

/// The gate ledger of `system` under the runs folder `runs`.
pub fn gate_ledger(runs: &std::path::Path, system: &str) -> std::path::PathBuf {
    runs.join(GATE_DIR).join(format!("{}.jsonl", system.to_lowercase()))
}

/// One measured figure of a gate, beside the threshold it is judged by.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GateFigure {
    /// What was measured ("loss relative difference", "lowest gradient cosine", …).
    pub name: String,
    pub value: f64,
    /// The bound, as the gate states it ("≤ 1e-3", "≥ 0.9999", "= 0").
    pub threshold: String,
    pub holds: bool,
}

/// One weight set a gate ran on: its figures, the report's lines and its verdict.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GateCase {
    /// "initial" or "perturbed".
    pub weights: String,
    pub figures: Vec<GateFigure>,
    /// The report's lines for these weights (every tensor that missed a bound is named there).
    pub evidence: Vec<String>,
    pub passed: bool,
}

/// A row of a gate ledger: one gate judged once for a system, build and device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GateRecord {
    pub gate: String,
    pub system: String,
    /// "cuda" or "cpu": the device under test (the reference is always the CPU).
    pub device: String,
    /// The GPU's name as NVML gives it ("NVIDIA H200"), for a cuda gate where NVML answers.
    pub gpu: Option<String>,
    pub batch: u64,
    pub seed: u64,
    pub cases: Vec<GateCase>,
    pub passed: bool,
    /// The build judged: the SHA-256 of the executable that ran the gate. A commit does not
    /// name the bits (uncommitted edits, other flags), the executable does; a training run
    /// looks for its own executable's hash here.
    pub build: String,
    /// The commit the executable was built from, where the build recorded one.
    pub commit: Option<String>,
    pub time: String,
}

/// The state a run shows when `run.json` says "running" but its process is gone.
pub const INTERRUPTED: &str = "interrupted";

impl RunInfo {
    /// Whether `run.json` says "running" while the process it names is gone (on this host).
    /// A record without a pid, or from another host, is taken at its word.
    pub fn is_stale(&self) -> bool {
        self.state == "running"
            && self.pid.is_some_and(|pid| {
                self.host.as_deref().is_none_or(|h| h == liveness::hostname())
                    && !liveness::process_alive(pid, self.pid_started)
            })
    }

    /// The record as a reader should show it: a "running" run whose process is gone is
    /// "interrupted", its message naming the last checkpoint to resume from.
    pub fn observed(mut self) -> RunInfo {
        if self.is_stale() {
            self.state = INTERRUPTED.into();
            let pid = self.pid.unwrap_or_default();
            self.message = Some(match &self.last_checkpoint {
                Some(c) => format!(
                    "interrupted: its process (pid {pid}) ended without finishing; the last checkpoint is {c} (step {})",
                    self.steps_done
                ),
                None => format!("interrupted: its process (pid {pid}) ended before its first checkpoint"),
            });
        }
        self
    }
}

/// A row of `points.jsonl`: one training step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Point {
    pub step: u64,
    /// `null` where the trainer recorded a non-finite loss.
    pub loss: Option<f64>,
    pub lr: Option<f64>,
    pub tokens: Option<u64>,
    /// The step's wall time on the host's clock, milliseconds: everything the loop did for it.
    pub ms: Option<f64>,
    /// The step's time on the device's own clock, milliseconds: its phases' runs as the
    /// backend timed them (CUDA events around each graph; the host clock around the CPU's
    /// kernels). Absent where the backend does not time its runs, on a profiled step (run
    /// launch by launch), and in rows written before it was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_ms: Option<f64>,
    pub unseen: bool,
    pub p10: Option<f64>,
    pub p90: Option<f64>,
    pub grad_norm: Option<f64>,
    /// The invocation that ran the step: a step run again after a crash or on a branch has a
    /// row from each invocation, and the newest is the one its checkpoints continue.
    pub invocation: Option<u64>,
    /// The branch the step belongs to (0 or absent: the main line).
    pub branch: Option<u64>,
    /// Under a wall-clock budget: the factor the step's rates were multiplied by (the
    /// warmdown; `lr` already includes it) and the training time spent by the step's end,
    /// seconds. Absent for a run by steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lr_factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_s: Option<f64>,
}

/// A row of `lineage.jsonl`: one checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LineageRow {
    pub step: u64,
    pub path: String,
    pub sha256: String,
    pub parent: Option<String>,
    pub train_loss: Option<f64>,
    pub heldout_loss: Option<f64>,
    pub heldout_bpb: Option<f64>,
    pub wall_s: Option<f64>,
    /// Seconds of training steps from the run's first step to this checkpoint, over every
    /// invocation of its line: the cost axis of a learning curve. Each step counts its device
    /// time ([`Point::device_ms`]) where it has one, its wall time where it has not.
    pub device_s: Option<f64>,
    /// Joules the GPU drew from the run's first invocation to this checkpoint (NVML's energy
    /// counter; compilation and evaluation included), where a GPU trained it.
    pub energy_j: Option<f64>,
    /// The held-out bits per byte's standard error over windows (a ratio's, by the delta
    /// method), and the held-out loss's, nats a token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heldout_bpb_se: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heldout_loss_se: Option<f64>,
    /// Text sampled from the checkpoint when it was scored: `sample_prompt` and its
    /// continuation, so the page can set what a model writes beside another's at the same cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<String>,
    pub time: Option<String>,
    /// The branch the checkpoint belongs to (0 or absent: the main line, `checkpoints/`;
    /// branch N lives in `checkpoints/branch-N/`).
    pub branch: Option<u64>,
}

/// A row of `invocations.jsonl`: a chain of steps in one process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Invocation {
    pub k: u64,
    pub first_step: u64,
    pub last_step: u64,
    pub unseen_loss: Option<f64>,
    pub last_loss: Option<f64>,
    /// The invocation's wall time, seconds: from opening the run's records to its last step.
    pub wall_s: Option<f64>,
    /// The sum of its steps' [`Point::device_ms`], seconds (steps without one not counted;
    /// absent where none has one).
    pub device_s: Option<f64>,
    /// The branch it wrote (0 or absent: the main line).
    pub branch: Option<u64>,
}

/// A row of `profile.jsonl`: one launch of a profiled step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProfileRow {
    pub step: u64,
    pub index: u64,
    pub family: String,
    pub name: String,
    pub us: f64,
    pub flops: Option<f64>,
    pub shape: Option<String>,
    /// The device kernel that ran the launch (absent in older records and on the CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
}

/// A row of `health.jsonl`: every parameter tensor's optimizer health after one update, as the
/// device computed it (written every `--health-every` updates and at each invocation's end).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthRow {
    /// The update measured: its gradient, its change, and the tensors after it.
    pub step: u64,
    pub invocation: Option<u64>,
    /// The branch it was written on (0 or absent: the main line).
    pub branch: Option<u64>,
    pub tensors: Vec<TensorHealth>,
}

/// One parameter tensor's figures: by quantity (`grad`, `param`, `update`, then its optimizer's
/// states: `adam_m`, `adam_v`, `muon_momentum`, `rot_norm0`, `rot_ms`), the L2 norm and the count
/// of elements that are NaN or infinite. A non-finite norm is written as null.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TensorHealth {
    pub tensor: String,
    /// Elements of the parameter.
    pub numel: u64,
    pub norms: std::collections::BTreeMap<String, Option<f64>>,
    pub nonfinite: std::collections::BTreeMap<String, u64>,
}
