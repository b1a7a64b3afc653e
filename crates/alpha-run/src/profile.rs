//! `alpha profile <run-dir>`: the seed's tables from `profile.jsonl` — per-step time by kernel
//! family (ms a step, share, launches), then per matrix-product shape (µs a launch, TFLOP/s,
//! launches a step). The newest profiled step is the one shown.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use anyhow::{bail, Result};

use crate::records::{read_rows, ProfileRow};

pub fn tables(run_dir: &Path) -> Result<String> {
    let path = run_dir.join("profile.jsonl");
    if !path.is_file() {
        bail!("{} has no profile.jsonl: train with --profile to time every launch of a step", run_dir.display());
    }
    let rows: Vec<ProfileRow> = read_rows(&path);
    let Some(step) = rows.iter().map(|r| r.step).max() else {
        bail!("{} holds no launches", path.display());
    };
    let rows: Vec<&ProfileRow> = rows.iter().filter(|r| r.step == step).collect();
    let total_us: f64 = rows.iter().map(|r| r.us).sum();
    let mut s = String::new();
    let _ = writeln!(s, "step {step}: {:.3} ms in {} launches", total_us / 1e3, rows.len());
    let _ = writeln!(s);

    let mut families: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for r in &rows {
        let e = families.entry(r.family.as_str()).or_default();
        e.0 += r.us;
        e.1 += 1;
    }
    let mut fam: Vec<_> = families.into_iter().collect();
    fam.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(a.0.cmp(b.0)));
    let _ = writeln!(s, "{:<28} {:>10} {:>7} {:>9}", "Family", "ms a step", "Share", "Launches");
    for (f, (us, n)) in fam {
        let _ = writeln!(s, "{:<28} {:>10.3} {:>6.1}% {:>9}", f, us / 1e3, 100.0 * us / total_us.max(1e-9), n);
    }

    let mut shapes: BTreeMap<&str, (f64, f64, usize)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.shape.is_some()) {
        let e = shapes.entry(r.shape.as_deref().unwrap_or_default()).or_default();
        e.0 += r.us;
        e.1 += r.flops.unwrap_or(0.0);
        e.2 += 1;
    }
    if !shapes.is_empty() {
        let mut sh: Vec<_> = shapes.into_iter().collect();
        sh.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        let _ = writeln!(s);
        let _ = writeln!(s, "{:<32} {:>10} {:>9} {:>9}", "GEMM shape", "µs", "TFLOP/s", "× a step");
        for (shape, (us, flops, n)) in sh {
            let _ = writeln!(s, "{:<32} {:>10.1} {:>9.2} {:>9}", shape, us / n as f64, flops / (us * 1e-6) / 1e12, n);
        }
    }
    Ok(s)
}
