//! The runs folder: which runs exist, each run's records followed incrementally, and the
//! figures the pages show (headline, profile tables, telemetry series), computed here so the
//! API answers with what a page draws.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use alpha_telemetry::Sample;
use serde::Serialize;
use serde_json::{json, Value};

use crate::records::{HealthRow, Invocation, Jsonl, LineageRow, Point, ProfileRow, RunInfo};

/// Every record of one run directory.
pub struct RunRecords {
    /// The run folder, links resolved (inside the runs folder).
    pub dir: PathBuf,
    root: PathBuf,
    pub info: Result<RunInfo, String>,
    pub points: Jsonl<Point>,
    pub lineage: Jsonl<LineageRow>,
    pub invocations: Jsonl<Invocation>,
    pub profile: Jsonl<ProfileRow>,
    /// `health.jsonl`: every tensor's optimizer health at each health step.
    pub health: Jsonl<HealthRow>,
    pub telemetry: Jsonl<Sample>,
}

impl RunRecords {
    /// The records of run folder `dir` (canonical), each file read only while it lies inside
    /// `root` (the canonical runs folder).
    fn new(dir: PathBuf, root: &Path) -> Self {
        RunRecords {
            info: Err("not read yet".into()),
            points: Jsonl::confined(dir.join("points.jsonl"), root.to_path_buf()),
            lineage: Jsonl::confined(dir.join("lineage.jsonl"), root.to_path_buf()),
            invocations: Jsonl::confined(dir.join("invocations.jsonl"), root.to_path_buf()),
            profile: Jsonl::confined(dir.join("profile.jsonl"), root.to_path_buf()),
            health: Jsonl::confined(dir.join("health.jsonl"), root.to_path_buf()),
            telemetry: Jsonl::confined(dir.join("telemetry.jsonl"), root.to_path_buf()),
            root: root.to_path_buf(),
            dir,
        }
    }

    /// The runs folder (canonical) this run's files must lie in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Rereads `run.json` (small, rewritten whole) and follows `points.jsonl`.
    pub fn refresh_core(&mut self) {
        self.info = match confine(&self.root, &self.dir.join("run.json")).and_then(|p| read_capped(&p, MAX_RUN_JSON)) {
            // A "running" run whose process is gone shows as interrupted, not running forever.
            Ok(bytes) => serde_json::from_slice::<RunInfo>(&bytes)
                .map(RunInfo::observed)
                .map_err(|e| format!("run.json does not parse: {e}")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("no run.json yet".into()),
            Err(e) => Err(format!("run.json: {e}")),
        };
        report(self.points.refresh(), self.points.path());
    }

    pub fn refresh_all(&mut self) {
        self.refresh_core();
        report(self.lineage.refresh(), self.lineage.path());
        report(self.invocations.refresh(), self.invocations.path());
        report(self.profile.refresh(), self.profile.path());
        report(self.health.refresh(), self.health.path());
        report(self.telemetry.refresh(), self.telemetry.path());
    }

    /// The run's state; "unknown" while `run.json` is missing or unreadable.
    pub fn state(&self) -> String {
        match &self.info {
            Ok(i) if !i.state.is_empty() => i.state.clone(),
            _ => "unknown".into(),
        }
    }

    /// Per-file health; an unterminated last line counts as skipped once the run has ended,
    /// because nothing will complete it.
    pub fn files(&self) -> Value {
        let running = self.state() == "running";
        fn one<T: serde::de::DeserializeOwned>(j: &Jsonl<T>, running: bool) -> Value {
            let h = j.health();
            let skipped = h.skipped + usize::from(h.partial_tail && !running);
            json!({"rows": h.rows, "skipped": skipped, "partial_tail": h.partial_tail, "behind": h.behind,
                   "first_bad_lines": j.first_bad_lines(), "problem": j.problem()})
        }
        json!({
            "points": one(&self.points, running),
            "lineage": one(&self.lineage, running),
            "invocations": one(&self.invocations, running),
            "profile": one(&self.profile, running),
            "health": one(&self.health, running),
            "telemetry": one(&self.telemetry, running),
        })
    }

    /// Lines skipped across every file.
    pub fn skipped_total(&self) -> usize {
        let f = self.files();
        f.as_object().map(|o| o.values().filter_map(|v| v["skipped"].as_u64()).sum::<u64>() as usize).unwrap_or(0)
    }

    /// One row of the runs list.
    pub fn summary(&self, name: &str) -> Value {
        let info = self.info.as_ref().ok();
        let last = self.points.rows().last();
        json!({
            "name": name,
            "system": info.map(|i| i.system.clone()),
            "device": info.map(|i| i.device.clone()),
            "state": self.state(),
            "steps_done": info.map(|i| i.steps_done).or(last.map(|p| p.step)),
            "steps_target": info.map(|i| i.steps_target),
            "started_at": info.and_then(|i| i.started_at.clone()),
            "updated_at": info.and_then(|i| i.updated_at.clone()),
            "parameters": info.and_then(|i| i.parameters),
            // A GPU run started by --skip-gates: the runs list says so beside its device.
            "gates_skipped": info.and_then(|i| i.gates.as_ref()).is_some_and(|g| g.skipped),
            "latest_loss": last.and_then(|p| p.loss),
            "points": self.points.rows().len(),
            "skipped_lines": self.skipped_total(),
            "problem": self.info.as_ref().err(),
        })
    }

    /// The figures at the top of a run page.
    pub fn headline(&self) -> Value {
        let info = self.info.as_ref().ok();
        let pts = self.points.rows();
        let recent = &pts[pts.len().saturating_sub(20)..];
        let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let ms_per_step = mean(recent.iter().filter_map(|p| p.ms).collect());
        let device_ms_per_step = mean(recent.iter().filter_map(|p| p.device_ms).collect());
        let tokens_per_step = info.and_then(|i| i.tokens_per_step).map(|t| t as f64).or_else(|| {
            // From the cumulative count when run.json does not give it.
            let first = recent.first()?.tokens? as f64;
            let last = recent.last()?.tokens? as f64;
            (recent.len() > 1).then(|| (last - first) / (recent.len() - 1) as f64)
        });
        let recent_tps = match (tokens_per_step, ms_per_step) {
            (Some(t), Some(ms)) if ms > 0.0 => Some(t / (ms / 1000.0)),
            _ => None,
        };
        let summary = info.and_then(|i| i.summary.as_ref());
        let from_summary = |k: &str| summary.and_then(|s| s.get(k)).and_then(Value::as_f64);
        let heldout: Vec<(u64, f64)> =
            self.lineage.rows().iter().filter_map(|r| r.heldout_loss.map(|l| (r.step, l))).collect();
        let best = heldout.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
        let best_train = pts.iter().filter_map(|p| p.loss).min_by(f64::total_cmp);
        // The run's energy from its first step: the newest checkpoint's of the run's branch
        // (summed over resumed invocations); run.json's summary holds the last invocation's.
        let branch = info.and_then(|i| i.branch).unwrap_or(0);
        let run_energy = self
            .lineage
            .rows()
            .iter()
            .filter(|r| r.branch.unwrap_or(0) == branch)
            .filter_map(|r| r.energy_j.map(|e| (r.step, e)))
            .max_by_key(|&(step, _)| step)
            .map(|(_, e)| e);
        json!({
            "tokens_per_s": from_summary("tokens_per_s").or(recent_tps),
            "tokens_per_s_recent": recent_tps,
            "ms_per_step": ms_per_step.or(from_summary("ms_per_step")),
            // The same steps on the device's own clock, where the trainer recorded it.
            "device_ms_per_step": device_ms_per_step,
            "latest_loss": pts.last().and_then(|p| p.loss),
            "best_loss": best_train,
            "latest_heldout": heldout.last().map(|h| h.1),
            "latest_heldout_step": heldout.last().map(|h| h.0),
            "best_heldout": best.map(|h| h.1),
            "best_heldout_step": best.map(|h| h.0),
            "steps_done": info.map(|i| i.steps_done).or(pts.last().map(|p| p.step)),
            "steps_target": info.map(|i| i.steps_target),
            "tokens": pts.last().and_then(|p| p.tokens),
            "energy_j": run_energy.or(from_summary("energy_j")),
            // A rate: the last invocation's joules over its tokens.
            "energy_per_token_j": from_summary("energy_per_token_j"),
            "checkpoints": self.lineage.rows().len(),
            // A run to a wall-clock budget: the budget, the training time spent by the newest
            // step (run.json's is written only at checkpoints) and that step's rate factor.
            "budget_s": info.and_then(|i| i.budget_s),
            "elapsed_s": pts.last().and_then(|p| p.elapsed_s).or(info.and_then(|i| i.elapsed_s)),
            "lr_factor": pts.last().and_then(|p| p.lr_factor),
        })
    }

    /// `points.jsonl` from row `since` on, as columns (what the loss chart draws).
    pub fn points_since(&self, since: usize) -> Value {
        let rows = self.points.rows();
        let tail = &rows[since.min(rows.len())..];
        let col = |f: fn(&Point) -> Value| tail.iter().map(f).collect::<Vec<_>>();
        json!({
            "total": rows.len(),
            "since": since.min(rows.len()),
            "step": col(|p| json!(p.step)),
            "loss": col(|p| json!(p.loss)),
            "lr": col(|p| json!(p.lr)),
            "tokens": col(|p| json!(p.tokens)),
            "ms": col(|p| json!(p.ms)),
            "device_ms": col(|p| json!(p.device_ms)),
            "unseen": col(|p| json!(p.unseen)),
            "p10": col(|p| json!(p.p10)),
            "p90": col(|p| json!(p.p90)),
            "grad_norm": col(|p| json!(p.grad_norm)),
            "health": self.files()["points"],
        })
    }

    /// The kernel-family and GEMM-shape tables of one profiled step (the newest by default).
    pub fn profile_tables(&self, step: Option<u64>) -> ProfileTables {
        profile_tables(self.profile.rows(), step)
    }

    /// Telemetry as columns, averaged into at most `max_points` buckets, from Unix time `since`.
    pub fn telemetry_series(&self, since: Option<f64>, max_points: usize) -> Value {
        telemetry_series(self.telemetry.rows(), since, max_points)
    }
}

fn report(r: std::io::Result<()>, path: &Path) {
    if let Err(e) = r {
        eprintln!("alpha serve: reading {}: {e}", path.display());
    }
}

#[derive(Debug, Serialize)]
pub struct FamilyRow {
    pub family: String,
    pub ms: f64,
    pub share: f64,
    pub launches: usize,
}

#[derive(Debug, Serialize)]
pub struct ShapeRow {
    pub shape: String,
    /// The first launch's name, which names the GEMM's role (phase) in the step.
    pub name: String,
    pub us: f64,
    pub tflops: Option<f64>,
    pub launches: usize,
    pub total_us: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct ProfileTables {
    pub steps: Vec<u64>,
    pub step: Option<u64>,
    pub total_ms: f64,
    pub launches: usize,
    pub families: Vec<FamilyRow>,
    pub shapes: Vec<ShapeRow>,
}

pub fn profile_tables(rows: &[ProfileRow], step: Option<u64>) -> ProfileTables {
    let mut steps: Vec<u64> = rows.iter().map(|r| r.step).collect();
    steps.sort_unstable();
    steps.dedup();
    let Some(step) = step.filter(|s| steps.contains(s)).or(steps.last().copied()) else {
        return ProfileTables::default();
    };
    let launches: Vec<&ProfileRow> = rows.iter().filter(|r| r.step == step).collect();
    let total_us: f64 = launches.iter().map(|r| r.us).sum();
    let mut fam: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    let mut shp: BTreeMap<&str, (String, f64, f64, bool, usize)> = BTreeMap::new();
    for r in &launches {
        let f = fam.entry(r.family.as_str()).or_default();
        f.0 += r.us;
        f.1 += 1;
        if let Some(shape) = r.shape.as_deref() {
            let s = shp.entry(shape).or_insert_with(|| (r.name.clone(), 0.0, 0.0, true, 0));
            s.1 += r.us;
            match r.flops {
                Some(fl) => s.2 += fl,
                None => s.3 = false,
            }
            s.4 += 1;
        }
    }
    let mut families: Vec<FamilyRow> = fam
        .into_iter()
        .map(|(family, (us, n))| FamilyRow {
            family: family.to_string(),
            ms: us / 1000.0,
            share: if total_us > 0.0 { us / total_us } else { 0.0 },
            launches: n,
        })
        .collect();
    families.sort_by(|a, b| b.ms.total_cmp(&a.ms).then(a.family.cmp(&b.family)));
    let mut shapes: Vec<ShapeRow> = shp
        .into_iter()
        .map(|(shape, (name, us, flops, all_flops, n))| ShapeRow {
            shape: shape.to_string(),
            name,
            us: us / n as f64,
            tflops: (all_flops && us > 0.0).then(|| flops / (us * 1e-6) / 1e12),
            launches: n,
            total_us: us,
        })
        .collect();
    shapes.sort_by(|a, b| b.total_us.total_cmp(&a.total_us).then(a.shape.cmp(&b.shape)));
    ProfileTables { steps, step: Some(step), total_ms: total_us / 1000.0, launches: launches.len(), families, shapes }
}

type Metric = (&'static str, fn(&Sample) -> Option<f64>);

/// The series the telemetry charts draw: GPU ones first, then the host's.
const METRICS: &[Metric] = &[
    ("gpu.util_pct", |s| s.gpu.as_ref()?.util_pct),
    ("gpu.mem_util_pct", |s| s.gpu.as_ref()?.mem_util_pct),
    ("gpu.power_w", |s| s.gpu.as_ref()?.power_w),
    ("gpu.power_limit_w", |s| s.gpu.as_ref()?.power_limit_w),
    ("gpu.energy_j", |s| s.gpu.as_ref()?.energy_j),
    ("gpu.temp_c", |s| s.gpu.as_ref()?.temp_c),
    ("gpu.sm_clock_mhz", |s| s.gpu.as_ref()?.sm_clock_mhz),
    ("gpu.mem_clock_mhz", |s| s.gpu.as_ref()?.mem_clock_mhz),
    ("gpu.mem_used_mib", |s| s.gpu.as_ref()?.mem_used_mib),
    ("gpu.mem_total_mib", |s| s.gpu.as_ref()?.mem_total_mib),
    ("gpu.pstate", |s| s.gpu.as_ref()?.pstate.map(f64::from)),
    ("gpu.clock_event_active", |s| {
        // Idle is not a slowdown: count only the reasons that hold a busy GPU back.
        let g = s.gpu.as_ref()?;
        g.clock_event_mask?;
        Some(f64::from(g.clock_events.iter().any(|e| e != "gpu_idle") as u8))
    }),
    ("gpu.pcie_tx_mbps", |s| s.gpu.as_ref()?.pcie_tx_mbps),
    ("gpu.pcie_rx_mbps", |s| s.gpu.as_ref()?.pcie_rx_mbps),
    ("host.load1", |s| s.host.load1),
    ("host.mem_available_mib", |s| s.host.mem_available_mib),
    ("host.mem_total_mib", |s| s.host.mem_total_mib),
    ("host.rss_mib", |s| s.host.rss_mib),
    ("host.cpu_pct", |s| s.host.cpu_pct),
];

pub fn telemetry_series(rows: &[Sample], since: Option<f64>, max_points: usize) -> Value {
    let start = since.map_or(0, |t| rows.partition_point(|s| s.t < t));
    let rows = &rows[start..];
    let bucket = rows.len().div_ceil(max_points.max(1)).max(1);
    let mut t = Vec::new();
    let mut series: Vec<Vec<Option<f64>>> = vec![Vec::new(); METRICS.len()];
    for chunk in rows.chunks(bucket) {
        t.push(chunk.iter().map(|s| s.t).sum::<f64>() / chunk.len() as f64);
        for (m, (_, get)) in METRICS.iter().enumerate() {
            let vals: Vec<f64> = chunk.iter().filter_map(get).collect();
            series[m].push((!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64));
        }
    }
    let map: serde_json::Map<String, Value> = METRICS
        .iter()
        .zip(series)
        .filter(|(_, v)| v.iter().any(Option::is_some))
        .map(|((k, _), v)| (k.to_string(), json!(v)))
        .collect();
    let gpu_name = rows.iter().rev().find_map(|s| s.gpu.as_ref()?.name.clone());
    json!({
        "rows": rows.len(),
        "points": t.len(),
        "bucket": bucket,
        "t": t,
        "series": map,
        "gpu_available": rows.iter().any(|s| s.gpu.is_some()),
        "gpu_name": gpu_name,
        "note": rows.iter().rev().find_map(|s| s.note.clone()),
        "last": rows.last(),
    })
}

/// The largest `run.json` read: the trainer writes a few hundred bytes.
const MAX_RUN_JSON: u64 = 1 << 20;

/// Reads at most `cap` bytes of `path`; a larger file is an error that says so.
fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::other(format!("larger than {cap} bytes: not a run record")));
    }
    Ok(bytes)
}

/// Where `path` really is (every link followed), if that lies inside `root`, which must be
/// canonical. A path leading outside is a `PermissionDenied` error that names both; a missing
/// one is `NotFound`. Every file the dashboard reads goes through here, so neither a link in
/// the runs folder nor a path written in a record can make it read anything else.
pub fn confine(root: &Path, path: &Path) -> std::io::Result<PathBuf> {
    let real = path.canonicalize()?;
    if real.starts_with(root) {
        Ok(real)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} leads to {}, outside the runs folder {}", path.display(), real.display(), root.display()),
        ))
    }
}

/// A folder of the runs folder that the list leaves out, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SkippedRun {
    pub name: String,
    pub reason: String,
}

/// The runs folder and the records of every run seen so far.
pub struct RunStore {
    /// The runs folder as given (what the pages show).
    pub runs_dir: PathBuf,
    /// The runs folder with every link resolved: what each file read must lie inside.
    root: PathBuf,
    runs: Mutex<HashMap<String, Arc<Mutex<RunRecords>>>>,
    /// Folders already reported as skipped, so each is said once on stderr.
    noted: Mutex<HashSet<String>>,
}

impl RunStore {
    pub fn new(runs_dir: PathBuf) -> Self {
        let root = runs_dir.canonicalize().unwrap_or_else(|_| runs_dir.clone());
        RunStore { runs_dir, root, runs: Mutex::new(HashMap::new()), noted: Mutex::new(HashSet::new()) }
    }

    /// The runs folder with every link resolved.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Run directories, newest first (by `run.json`'s modification time). A run is a folder
    /// holding `run.json` or `points.jsonl`.
    pub fn list(&self) -> std::io::Result<Vec<String>> {
        Ok(self.list_noting()?.0)
    }

    /// [`RunStore::list`], and the folders left out because they lead outside the runs folder
    /// (each also said once on stderr).
    pub fn list_noting(&self) -> std::io::Result<(Vec<String>, Vec<SkippedRun>)> {
        let mut found: Vec<(SystemTime, String)> = Vec::new();
        let mut skipped = Vec::new();
        for entry in std::fs::read_dir(&self.root)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            if name.starts_with('.') {
                continue;
            }
            let dir = match self.run_dir(&name) {
                Ok(Some(dir)) => dir,
                Ok(None) => continue,
                Err(reason) => {
                    if self.noted.lock().unwrap().insert(name.clone()) {
                        eprintln!("alpha serve: skipping {name}: {reason}");
                    }
                    skipped.push(SkippedRun { name, reason });
                    continue;
                }
            };
            let marker = ["run.json", "points.jsonl"].iter().find_map(|f| confine(&self.root, &dir.join(f)).ok());
            if let Some(marker) = marker {
                let t = std::fs::metadata(&marker).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((t, name));
            }
        }
        found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        skipped.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((found.into_iter().map(|(_, n)| n).collect(), skipped))
    }

    /// Where run `name` really is: `Ok(None)` if it is no folder (or not a plain name),
    /// `Err` with the reason if it leads outside the runs folder.
    fn run_dir(&self, name: &str) -> Result<Option<PathBuf>, String> {
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && !name.contains(['/', '\\'])
            && Path::new(name).components().count() == 1;
        if !plain {
            return Ok(None);
        }
        match confine(&self.root, &self.root.join(name)) {
            Ok(dir) if dir != self.root && dir.is_dir() => Ok(Some(dir)),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(e.to_string()),
            Err(_) => Ok(None),
        }
    }

    /// The records of run `name`, or `None` if there is no such run folder inside the runs
    /// folder. Names are single path components and links are followed only to folders inside
    /// the runs folder, so a request cannot reach outside it.
    pub fn get(&self, name: &str) -> Option<Arc<Mutex<RunRecords>>> {
        let dir = self.run_dir(name).ok()??;
        let mut runs = self.runs.lock().unwrap();
        let rec = runs
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Mutex::new(RunRecords::new(dir.clone(), &self.root))));
        // A link retargeted since: its records are another folder's.
        if rec.lock().unwrap().dir != dir {
            *rec = Arc::new(Mutex::new(RunRecords::new(dir, &self.root)));
        }
        Some(rec.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(step: u64, family: &str, us: f64, shape: Option<&str>, flops: Option<f64>) -> ProfileRow {
        ProfileRow {
            step,
            index: 0,
            family: family.into(),
            name: format!("{family}-x"),
            us,
            flops,
            shape: shape.map(str::to_string),
            kernel: None,
        }
    }

    #[test]
    fn profile_tables_sum_families_and_shapes_of_the_newest_step() {
        let rows = vec![
            launch(1, "adamw", 999.0, None, None),
            launch(5, "gemm", 100.0, Some("rr-m1024-n1536-k512"), Some(2.0 * 1024.0 * 1536.0 * 512.0)),
            launch(5, "gemm", 300.0, Some("rr-m1024-n1536-k512"), Some(2.0 * 1024.0 * 1536.0 * 512.0)),
            launch(5, "gemm", 50.0, Some("cc-m8-n8-k8"), None),
            launch(5, "adamw", 550.0, None, None),
        ];
        let t = profile_tables(&rows, None);
        assert_eq!(t.steps, [1, 5]);
        assert_eq!(t.step, Some(5));
        assert_eq!(t.launches, 4);
        assert!((t.total_ms - 1.0).abs() < 1e-12);
        assert_eq!(t.families[0].family, "adamw");
        assert!((t.families[0].share - 0.55).abs() < 1e-12);
        assert_eq!(t.families[1].launches, 3);
        assert!((t.families[1].ms - 0.45).abs() < 1e-12);
        let s = &t.shapes[0];
        assert_eq!((s.shape.as_str(), s.launches), ("rr-m1024-n1536-k512", 2));
        assert!((s.us - 200.0).abs() < 1e-12);
        // 2·m·n·k flops twice in 400 µs.
        let want = 2.0 * 2.0 * 1024.0 * 1536.0 * 512.0 / 400e-6 / 1e12;
        assert!((s.tflops.unwrap() - want).abs() < 1e-9);
        assert_eq!(t.shapes[1].tflops, None, "no FLOP count, no rate");
        assert_eq!(profile_tables(&rows, Some(1)).families[0].ms, 0.999);
        assert!(profile_tables(&[], None).families.is_empty());
    }

    #[test]
    fn telemetry_is_bucketed_to_the_point_budget() {
        let rows: Vec<Sample> = (0..10)
            .map(|i| {
                let mut s = Sample { t: i as f64, ..Sample::default() };
                s.host.load1 = Some(i as f64);
                s
            })
            .collect();
        let all = telemetry_series(&rows, None, 100);
        assert_eq!(all["points"], 10);
        assert_eq!(all["gpu_available"], false);
        assert!(all["series"].get("gpu.power_w").is_none(), "absent series are left out");
        let b = telemetry_series(&rows, None, 4);
        assert_eq!(b["rows"], 10);
        assert_eq!(b["bucket"], 3);
        assert_eq!(b["series"]["host.load1"], json!([1.0, 4.0, 7.0, 9.0]));
        let recent = telemetry_series(&rows, Some(7.5), 100);
        assert_eq!(recent["t"], json!([8.0, 9.0]));
    }
}
