//! The run records: the contract between the trainer that writes them and the dashboard that
//! reads them, in one place. A run directory `runs/<name>/` holds `run.json` (rewritten
//! atomically), and JSON Lines appended as the run goes: `points.jsonl` (a row a step),
//! `lineage.jsonl` (a row a checkpoint), `invocations.jsonl` (a row a process run),
//! `profile.jsonl` (a row a timed launch) and `telemetry.jsonl` (alpha-telemetry's samples).
//!
//! Every field but the identifying ones is optional with a default, so a record written by an
//! older or newer trainer still reads, and the dashboard shows what it has.

use serde::{Deserialize, Serialize};

/// The summary a finished run writes into `run.json`.
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
    pub ms: Option<f64>,
    pub unseen: bool,
    pub p10: Option<f64>,
    pub p90: Option<f64>,
    pub grad_norm: Option<f64>,
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
    pub device_s: Option<f64>,
    pub time: Option<String>,
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
    pub wall_s: Option<f64>,
    pub device_s: Option<f64>,
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
}
