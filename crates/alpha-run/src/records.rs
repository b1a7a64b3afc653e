//! Run records: JSON Lines under `runs/<name>/`, the contract with `alpha serve`.
//! `run.json` (rewritten atomically: a temporary file, fsync, rename), `points.jsonl` (a row a
//! step), `lineage.jsonl` (a row a checkpoint), `invocations.jsonl` (a row a process run),
//! `profile.jsonl` (device-timed launches), `health.jsonl` (a row a health step: every tensor's
//! norms and non-finite counts), `telemetry.jsonl` (the samplers). Each row is
//! written whole — its JSON and newline in one write on an append-mode file — so a crash cuts
//! at most the last line; readers skip such a line, and opening the records for a new
//! invocation cuts it off, so the next row is not glued onto it.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::checkpoint::write_atomic;
use crate::testhook;

pub use alpha_records::{jsonl, HealthRow, Invocation, LineageRow, Point, ProfileRow, RunInfo, Summary, TensorHealth};

/// The JSON Lines files a run appends to (`telemetry.jsonl` by the sampler, which also writes
/// a row in one write).
const JSONL_FILES: [&str; 6] = [
    "points.jsonl",
    "lineage.jsonl",
    "invocations.jsonl",
    "profile.jsonl",
    "health.jsonl",
    alpha_telemetry::TELEMETRY_FILE,
];

/// The `run.json` of the run this process is training, while it runs: what an immediate exit
/// marks "interrupted". Its lock also keeps two threads from writing `run.json` at once.
static CURRENT_RUN: Mutex<Option<(PathBuf, RunInfo)>> = Mutex::new(None);

/// Mark the run in progress (if any) "interrupted" in its `run.json`, for a process about to
/// exit at once (a second Ctrl-C or SIGTERM). A record whose process dies without this reads
/// as interrupted anyway, by the pid it names; this only says so sooner.
pub fn mark_interrupted() {
    let mut current = CURRENT_RUN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((path, mut info)) = current.take() {
        info.state = alpha_records::INTERRUPTED.into();
        info.message = Some(match &info.last_checkpoint {
            Some(c) => {
                format!("interrupted: stopped at once after step {}; the last checkpoint is {c}", info.steps_done)
            }
            None => "interrupted: stopped at once before its first checkpoint".into(),
        });
        info.updated_at = Some(now());
        if let Ok(text) = serde_json::to_string_pretty(&info) {
            let _ = write_atomic(&path, text.as_bytes());
        }
    }
}

pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A run directory being written.
pub struct Records {
    pub dir: PathBuf,
    points: File,
}

fn append_file(path: &Path) -> Result<File> {
    jsonl::open_append(path).with_context(|| format!("opening {}", path.display()))
}

/// Append one row whole. At the test hook's `point` for `step`, half of it is written and the
/// process aborts, as a crash mid-write would leave it.
fn append_row<T: Serialize>(file: &mut File, path: &Path, row: &T, point: &str, step: u64) -> Result<()> {
    if testhook::crash_at(point, step) {
        let bytes = jsonl::line(row)?;
        let _ = std::io::Write::write_all(file, &bytes[..bytes.len() / 2]);
        testhook::crash();
    }
    jsonl::append(file, row).with_context(|| format!("appending to {}", path.display()))
}

/// Read a JSON Lines file's rows, skipping a line that does not parse or was cut short by a
/// crash; a missing or unreadable file has none.
pub fn read_rows<T: DeserializeOwned>(path: &Path) -> Vec<T> {
    jsonl::read(path).map(|r| r.rows).unwrap_or_default()
}

impl Records {
    /// Open a run directory's records for appending. The caller holds the directory's lock: a
    /// row a crash left cut short at the end of a file is removed first (and said on stderr).
    pub fn open(dir: &Path) -> Result<Records> {
        fs::create_dir_all(dir).with_context(|| format!("creating run directory {}", dir.display()))?;
        for name in JSONL_FILES {
            let path = dir.join(name);
            let cut = jsonl::cut_torn_tail(&path).with_context(|| format!("repairing {}", path.display()))?;
            if cut > 0 {
                eprintln!("{}: removed a last row cut short by a crash ({cut} bytes)", path.display());
            }
        }
        Ok(Records { dir: dir.to_path_buf(), points: append_file(&dir.join("points.jsonl"))? })
    }

    pub fn point(&mut self, p: &Point) -> Result<()> {
        let path = self.dir.join("points.jsonl");
        append_row(&mut self.points, &path, p, "points-row", p.step)
    }

    pub fn lineage(&self, row: &LineageRow) -> Result<()> {
        let path = self.dir.join("lineage.jsonl");
        append_row(&mut append_file(&path)?, &path, row, "lineage-row", row.step)
    }

    /// One health step's figures (see [`HealthRow`]).
    pub fn health(&self, row: &HealthRow) -> Result<()> {
        let path = self.dir.join("health.jsonl");
        append_row(&mut append_file(&path)?, &path, row, "health-row", row.step)
    }

    pub fn invocation(&self, row: &Invocation) -> Result<()> {
        let path = self.dir.join("invocations.jsonl");
        append_row(&mut append_file(&path)?, &path, row, "invocation-row", row.last_step)
    }

    /// Rewrite `run.json` atomically, and remember it for [`mark_interrupted`].
    pub fn run_info(&self, info: &RunInfo) -> Result<()> {
        let mut current = CURRENT_RUN.lock().unwrap_or_else(|e| e.into_inner());
        let path = self.dir.join("run.json");
        write_atomic(&path, serde_json::to_string_pretty(info)?.as_bytes())?;
        *current = (info.state == "running").then(|| (path, info.clone()));
        Ok(())
    }

    /// One profiled step: a row a launch, in launch order, in one write.
    pub fn profile(&self, step: u64, launches: &[alpha_plan::LaunchTime]) -> Result<()> {
        let path = self.dir.join("profile.jsonl");
        let mut bytes = vec![];
        for (index, l) in launches.iter().enumerate() {
            let row = ProfileRow {
                step,
                index: index as u64,
                family: l.family.clone(),
                name: l.name.clone(),
                us: l.us,
                flops: l.flops,
                shape: l.shape.clone(),
                kernel: l.kernel.clone(),
            };
            bytes.extend(jsonl::line(&row)?);
        }
        std::io::Write::write_all(&mut append_file(&path)?, &bytes)
            .with_context(|| format!("appending to {}", path.display()))
    }

    /// Write the invocation row the run of `previous` (its last `run.json`) did not write
    /// because it crashed or failed, from its points; nothing when it wrote one or ran no step.
    pub fn close_invocation(&self, previous: &RunInfo) -> Result<()> {
        let Some(k) = previous.invocation else { return Ok(()) };
        if self.invocations().iter().any(|r| r.k == k) {
            return Ok(());
        }
        let points: Vec<Point> = read_rows(&self.dir.join("points.jsonl"));
        let mine: Vec<&Point> = points.iter().filter(|p| p.invocation == Some(k)).collect();
        let (Some(first), Some(last)) = (mine.first(), mine.last()) else { return Ok(()) };
        self.invocation(&Invocation {
            k,
            first_step: first.step,
            last_step: last.step,
            unseen_loss: first.loss,
            last_loss: last.loss,
            wall_s: None,
            device_s: mine.iter().filter_map(|p| p.device_ms).reduce(|a, b| a + b).map(|ms| ms / 1e3),
            branch: previous.branch,
        })
    }

    pub fn invocations(&self) -> Vec<Invocation> {
        read_rows(&self.dir.join("invocations.jsonl"))
    }

    /// `run.json` as a reader should see it: "interrupted" when it says "running" but its
    /// process is gone. `None` when it is missing or does not parse.
    pub fn read_run_info(dir: &Path) -> Option<RunInfo> {
        Self::read_run_info_as_written(dir).map(RunInfo::observed)
    }

    /// `run.json` as written.
    pub fn read_run_info_as_written(dir: &Path) -> Option<RunInfo> {
        fs::read(dir.join("run.json")).ok().and_then(|s| serde_json::from_slice(&s).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_immediate_exit_marks_the_running_run_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::open(dir.path()).unwrap();
        let info = RunInfo {
            state: "running".into(),
            steps_done: 6,
            pid: Some(std::process::id()),
            last_checkpoint: Some("runs/x/checkpoints/step-000006.safetensors".into()),
            ..Default::default()
        };
        records.run_info(&info).unwrap();
        mark_interrupted();
        let written = Records::read_run_info_as_written(dir.path()).unwrap();
        assert_eq!(written.state, "interrupted");
        assert!(written.message.unwrap().contains("step-000006.safetensors"));
        // Once the run has ended by itself, there is nothing to mark.
        let finished = RunInfo { state: "finished".into(), ..info };
        records.run_info(&finished).unwrap();
        mark_interrupted();
        assert_eq!(Records::read_run_info_as_written(dir.path()).unwrap().state, "finished");
    }

    #[test]
    fn a_crashed_invocations_row_sums_its_steps_device_time_and_old_rows_still_load() {
        let dir = tempfile::tempdir().unwrap();
        // Two rows of invocation 2 with device times, one written before they were recorded.
        let rows = [
            r#"{"step":1,"loss":5.5,"ms":4.0,"unseen":true,"invocation":1}"#,
            r#"{"step":2,"loss":5.0,"ms":4.0,"device_ms":1.25,"unseen":true,"invocation":2}"#,
            r#"{"step":3,"loss":4.5,"ms":4.0,"device_ms":2.5,"unseen":false,"invocation":2}"#,
        ];
        fs::write(dir.path().join("points.jsonl"), rows.join("\n") + "\n").unwrap();
        let records = Records::open(dir.path()).unwrap();
        let points: Vec<Point> = read_rows(&dir.path().join("points.jsonl"));
        assert_eq!(points.len(), 3, "the row without device_ms loads");
        assert_eq!((points[0].device_ms, points[0].ms), (None, Some(4.0)));
        records.close_invocation(&RunInfo { invocation: Some(2), ..Default::default() }).unwrap();
        records.close_invocation(&RunInfo { invocation: Some(1), ..Default::default() }).unwrap();
        let inv = records.invocations();
        assert_eq!((inv[0].k, inv[0].first_step, inv[0].last_step), (2, 2, 3));
        assert_eq!(inv[0].device_s, Some(3.75e-3));
        assert_eq!((inv[1].k, inv[1].device_s), (1, None), "no step of it has a device time");
    }
}
