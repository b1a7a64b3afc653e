//! Run records: JSON Lines under `runs/<name>/`, the contract with `alpha serve`.
//! `run.json` (rewritten atomically), `points.jsonl` (a row a step), `lineage.jsonl` (a row a
//! checkpoint), `invocations.jsonl` (a row a process run), `profile.jsonl` (device-timed
//! launches), `telemetry.jsonl` (the samplers). Rows are appended and flushed as they happen, so
//! a crash loses at most the row being written.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::checkpoint::write_atomic;

pub use alpha_records::{Invocation, LineageRow, Point, ProfileRow, RunInfo, Summary};

pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A run directory being written.
pub struct Records {
    pub dir: PathBuf,
    points: File,
}

fn append_file(path: &Path) -> Result<File> {
    OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("opening {}", path.display()))
}

fn append_row<T: Serialize>(path: &Path, row: &T) -> Result<()> {
    let mut f = append_file(path)?;
    writeln!(f, "{}", serde_json::to_string(row)?)?;
    Ok(())
}

/// Read a JSON Lines file, skipping lines that do not parse (a crash can truncate the last).
pub fn read_rows<T: for<'de> Deserialize<'de>>(path: &Path) -> Vec<T> {
    fs::read_to_string(path)
        .map(|s| s.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
        .unwrap_or_default()
}

impl Records {
    pub fn open(dir: &Path) -> Result<Records> {
        fs::create_dir_all(dir).with_context(|| format!("creating run directory {}", dir.display()))?;
        Ok(Records { dir: dir.to_path_buf(), points: append_file(&dir.join("points.jsonl"))? })
    }

    pub fn point(&mut self, p: &Point) -> Result<()> {
        writeln!(self.points, "{}", serde_json::to_string(p)?)?;
        Ok(())
    }

    pub fn lineage(&self, row: &LineageRow) -> Result<()> {
        append_row(&self.dir.join("lineage.jsonl"), row)
    }

    pub fn invocation(&self, row: &Invocation) -> Result<()> {
        append_row(&self.dir.join("invocations.jsonl"), row)
    }

    pub fn run_info(&self, info: &RunInfo) -> Result<()> {
        write_atomic(&self.dir.join("run.json"), serde_json::to_string_pretty(info)?.as_bytes())
    }

    /// One profiled step: a row a launch, in launch order.
    pub fn profile(&self, step: u64, launches: &[alpha_plan::LaunchTime]) -> Result<()> {
        let mut f = append_file(&self.dir.join("profile.jsonl"))?;
        for (index, l) in launches.iter().enumerate() {
            let row = ProfileRow {
                step,
                index: index as u64,
                family: l.family.clone(),
                name: l.name.clone(),
                us: l.us,
                flops: l.flops,
                shape: l.shape.clone(),
            };
            writeln!(f, "{}", serde_json::to_string(&row)?)?;
        }
        Ok(())
    }

    pub fn invocations(&self) -> Vec<Invocation> {
        read_rows(&self.dir.join("invocations.jsonl"))
    }

    pub fn read_run_info(dir: &Path) -> Option<RunInfo> {
        fs::read_to_string(dir.join("run.json")).ok().and_then(|s| serde_json::from_str(&s).ok())
    }
}
