//! What the records say about a system on each device: the gate ledger's standing and the runs
//! recorded under a runs folder. `alpha systems` and the catalogue page both show these facts
//! instead of a system's own description of itself, so a system is shown on a GPU only when a
//! gate record or a run there says so.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{GateRecord, RunInfo, GATES};

/// One recorded run, as the catalogue counts it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunFact {
    pub name: String,
    pub device: String,
    pub state: String,
    pub steps_done: u64,
    pub heldout_bpb: Option<f64>,
    pub tokens_per_s: Option<f64>,
    /// A GPU run started with `--skip-gates` while a gate had no passing record.
    pub gates_skipped: bool,
}

impl RunFact {
    /// The facts of a run from its `run.json` (as observed) and its newest held-out score.
    pub fn of(name: &str, info: &RunInfo, heldout_bpb: Option<f64>) -> RunFact {
        let summary = |k: &str| info.summary.as_ref().and_then(|s| s.get(k)).and_then(|v| v.as_f64());
        RunFact {
            name: name.into(),
            device: info.device.clone(),
            state: info.state.clone(),
            steps_done: info.steps_done,
            heldout_bpb: heldout_bpb.or(summary("heldout_bpb")),
            tokens_per_s: summary("tokens_per_s"),
            gates_skipped: info.gates.as_ref().is_some_and(|g| g.skipped),
        }
    }
}

/// A system on one device, from its records.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceFacts {
    pub device: String,
    /// The card the newest gate record here judged ("NVIDIA H200"), where it was named.
    pub gpu: Option<String>,
    /// The build the gate standing is for: the one asked about, else the newest judged here.
    pub gate_build: Option<String>,
    /// Whether `gate_build` is the build asking (None when the asker's build is unknown).
    pub this_build: Option<bool>,
    /// Gates whose newest record for `gate_build` passed, and those without one.
    pub gates_passed: Vec<String>,
    pub gates_missing: Vec<String>,
    pub runs: usize,
    pub finished: usize,
    /// Runs that started with `--skip-gates`.
    pub ungated_runs: usize,
    /// The lowest held-out bits per byte of any run here, and that run.
    pub best_bpb: Option<f64>,
    pub best_run: Option<String>,
    /// The fastest finished run's tokens a second.
    pub best_tokens_per_s: Option<f64>,
    /// In words: what the records show this device doing with the system.
    pub state: String,
}

/// Each gate whose newest record for `build` on `device` passed, and each without one (never
/// judged, or judged last as failed).
pub fn standing(records: &[GateRecord], build: &str, device: &str) -> (Vec<String>, Vec<String>) {
    let (mut passed, mut missing) = (vec![], vec![]);
    for gate in GATES {
        match newest_passed(records, gate, build, device) {
            true => passed.push(gate.to_string()),
            false => missing.push(gate.to_string()),
        }
    }
    (passed, missing)
}

/// Whether the newest record of `gate` for `build` on `device` passed (false without one).
pub fn newest_passed(records: &[GateRecord], gate: &str, build: &str, device: &str) -> bool {
    records.iter().rev().find(|r| r.gate == gate && r.build == build && r.device == device).is_some_and(|r| r.passed)
}

/// The devices the records show the system on: the CPU (the reference, always) and every device
/// with a gate record or a run. `build` is the asker's build identity, where known.
pub fn device_facts(ledger: &[GateRecord], runs: &[RunFact], build: Option<&str>) -> Vec<DeviceFacts> {
    let mut devices: Vec<String> = vec!["cpu".into()];
    for d in ledger.iter().map(|r| &r.device).chain(runs.iter().map(|r| &r.device)) {
        if !d.is_empty() && !devices.contains(d) {
            devices.push(d.clone());
        }
    }
    devices
        .into_iter()
        .map(|device| {
            let mine: Vec<&RunFact> = runs.iter().filter(|r| r.device == device).collect();
            let best = mine.iter().filter(|r| r.heldout_bpb.is_some_and(f64::is_finite)).min_by(|a, b| {
                a.heldout_bpb.unwrap_or(f64::INFINITY).total_cmp(&b.heldout_bpb.unwrap_or(f64::INFINITY))
            });
            let newest_judged = ledger.iter().rev().find(|r| r.device == device).map(|r| r.build.clone());
            let judged_here = |b: &str| ledger.iter().any(|r| r.device == device && r.build == b);
            let gate_build = match build {
                Some(b) if judged_here(b) => Some(b.to_string()),
                _ => newest_judged,
            };
            let (gates_passed, gates_missing) = match &gate_build {
                Some(b) => standing(ledger, b, &device),
                None => (vec![], GATES.iter().map(|g| g.to_string()).collect()),
            };
            let this_build = build.zip(gate_build.as_deref()).map(|(a, b)| a == b);
            let judged = |r: &&GateRecord| r.device == device && Some(&r.build) == gate_build.as_ref();
            let gpu = ledger.iter().rev().filter(judged).find_map(|r| r.gpu.clone());
            let finished = mine.iter().filter(|r| r.state == "finished").count();
            let ungated_runs = mine.iter().filter(|r| r.gates_skipped).count();
            let mut f = DeviceFacts {
                device: device.clone(),
                gpu,
                this_build,
                gates_passed,
                gates_missing,
                runs: mine.len(),
                finished,
                ungated_runs,
                best_bpb: best.and_then(|r| r.heldout_bpb),
                best_run: best.map(|r| r.name.clone()),
                best_tokens_per_s: mine
                    .iter()
                    .filter(|r| r.state == "finished")
                    .filter_map(|r| r.tokens_per_s)
                    .max_by(f64::total_cmp),
                gate_build,
                state: String::new(),
            };
            f.state = describe(&f);
            f
        })
        .collect()
}

/// A device's standing in words.
fn describe(f: &DeviceFacts) -> String {
    let runs = match (f.runs, f.finished) {
        (0, _) => "no run recorded".to_string(),
        (n, k) => format!("{n} run{} recorded, {k} finished", if n == 1 { "" } else { "s" }),
    };
    if f.device == "cpu" {
        return format!("the reference; {runs}");
    }
    let gates = match (&f.gate_build, f.gates_missing.is_empty(), f.this_build) {
        (None, _, _) => "no gate record".to_string(),
        (Some(_), true, Some(false)) => "every gate passed, for another build".to_string(),
        (Some(_), true, _) => "every gate passed".to_string(),
        (Some(_), false, _) => {
            format!("gates passed {} of {} (not {})", f.gates_passed.len(), GATES.len(), f.gates_missing.join(", "))
        }
    };
    let ungated = if f.ungated_runs > 0 { format!(", {} with gates skipped", f.ungated_runs) } else { String::new() };
    let on = f.gpu.as_ref().map(|g| format!("{g}: ")).unwrap_or_default();
    format!("{on}{gates}; {runs}{ungated}")
}

/// The runs of `system` under the runs folder `runs`, from each run folder's `run.json` and
/// newest held-out score (folders that do not parse are left out).
pub fn gather_runs(runs: &Path, system: &str) -> Vec<RunFact> {
    let Ok(entries) = std::fs::read_dir(runs) else { return vec![] };
    let mut out = vec![];
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let dir = entry.path();
        let Some(info) =
            std::fs::read(dir.join("run.json")).ok().and_then(|b| serde_json::from_slice::<RunInfo>(&b).ok())
        else {
            continue;
        };
        if !info.system.eq_ignore_ascii_case(system) {
            continue;
        }
        let lineage: Vec<crate::LineageRow> =
            crate::jsonl::read(&dir.join("lineage.jsonl")).map(|r| r.rows).unwrap_or_default();
        let bpb = lineage.iter().rev().find_map(|r| r.heldout_bpb);
        out.push(RunFact::of(&name, &info.observed(), bpb));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(gate: &str, build: &str, passed: bool) -> GateRecord {
        GateRecord { gate: gate.into(), build: build.into(), device: "cuda".into(), passed, ..Default::default() }
    }

    #[test]
    fn a_gpu_is_shown_only_from_its_gate_records_and_runs() {
        let cpu_run =
            RunFact { name: "r".into(), device: "cpu".into(), state: "finished".into(), ..Default::default() };
        let only_cpu = device_facts(&[], std::slice::from_ref(&cpu_run), Some("b1"));
        assert_eq!(only_cpu.len(), 1, "no gate record and no run: no GPU");
        assert_eq!(only_cpu[0].state, "the reference; 1 run recorded, 1 finished");

        let mut ledger: Vec<GateRecord> = GATES.iter().map(|g| gate(g, "b1", true)).collect();
        ledger.push(gate("update", "b1", false));
        let facts = device_facts(&ledger, &[cpu_run], Some("b1"));
        assert_eq!(facts[1].device, "cuda");
        assert_eq!(facts[1].gates_missing, ["update"]);
        assert!(facts[1].state.starts_with("gates passed 3 of 4 (not update)"), "{}", facts[1].state);
        // Asked from another build, the newest judged build's standing is shown as another's.
        ledger.push(gate("update", "b1", true));
        let other = device_facts(&ledger, &[], Some("b2"));
        assert_eq!(other[1].this_build, Some(false));
        assert!(other[1].state.starts_with("every gate passed, for another build"), "{}", other[1].state);
    }
}
