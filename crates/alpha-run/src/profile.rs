//! `alpha profile <run-dir>`: the seed's tables from `profile.jsonl` — per-step time by kernel
//! family (ms a step, share, launches), then per matrix-product shape (µs a product, all its
//! launches counted, TFLOP/s, products a step), then the device kernels that took the most time
//! (where the backend names them). The newest profiled step is the one shown.

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

    // A product's later launches (split-K's sum, a padded product's copies and the product
    // itself) carry no shape: their time is the product's, added to the shape of the launch
    // that opened it.
    let mut shapes: BTreeMap<&str, (f64, f64, usize)> = BTreeMap::new();
    let mut open: Option<(&str, &str)> = None;
    let mut ordered = rows.clone();
    ordered.sort_by_key(|r| r.index);
    for r in ordered {
        match r.shape.as_deref() {
            Some(shape) => {
                let e = shapes.entry(shape).or_default();
                e.0 += r.us;
                e.1 += r.flops.unwrap_or(0.0);
                e.2 += 1;
                open = Some((shape, r.name.as_str()));
            }
            None => match open {
                Some((shape, name)) if r.family == "gemm" && r.name == name => {
                    shapes.entry(shape).or_default().0 += r.us;
                }
                _ => open = None,
            },
        }
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
    s.push_str(&kernel_table(&rows, total_us));
    Ok(s)
}

/// Kernels shown in the kernel table: those that take the most time.
const TOP_KERNELS: usize = 30;

/// The device kernels that took the most time in the step (rows that name one): ms a step,
/// share, launches, µs a launch, the family of its first launch. Why: a family's time (a
/// hundred binaries) does not say which fused chain or copy to take on next.
fn kernel_table(rows: &[&ProfileRow], total_us: f64) -> String {
    let mut kernels: BTreeMap<&str, (f64, usize, &str)> = BTreeMap::new();
    for r in rows {
        let Some(k) = r.kernel.as_deref() else { continue };
        let e = kernels.entry(k).or_insert((0.0, 0, r.family.as_str()));
        e.0 += r.us;
        e.1 += 1;
    }
    if kernels.is_empty() {
        return String::new();
    }
    let shown = kernels.len().min(TOP_KERNELS);
    let mut ks: Vec<_> = kernels.into_iter().collect();
    ks.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(a.0.cmp(b.0)));
    let mut s = String::new();
    let _ = writeln!(s);
    let _ = writeln!(s, "Kernels ({shown} of {} taking the most time)", ks.len());
    let _ =
        writeln!(s, "{:>10} {:>7} {:>9} {:>10}  {:<14} Kernel", "ms a step", "Share", "Launches", "µs each", "Family");
    for (k, (us, n, family)) in ks.into_iter().take(TOP_KERNELS) {
        let share = 100.0 * us / total_us.max(1e-9);
        let each = us / n as f64;
        let _ = writeln!(s, "{:>10.3} {:>6.1}% {:>9} {:>10.1}  {:<14} {k}", us / 1e3, share, n, each, family);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_products_later_launches_count_in_its_shapes_time_and_its_arithmetic_once() {
        let dir = tempfile::tempdir().unwrap();
        let row = |index: u64, family: &str, name: &str, us: f64, shape: Option<&str>| ProfileRow {
            step: 2,
            index,
            family: family.into(),
            name: name.into(),
            us,
            flops: shape.map(|_| 2e9),
            shape: shape.map(String::from),
            kernel: Some(if shape.is_some() || family == "gemm" {
                "gemm_tma".into()
            } else {
                format!("{family}_kernel")
            }),
        };
        // A padded product (copy in, product, copy out), a lone product, then an elementwise.
        let rows = [
            row(0, "gemm", "blocks.0.attn/matmul", 100.0, Some("rc-m8-n8-k8")),
            row(1, "gemm", "blocks.0.attn/matmul", 900.0, None),
            row(2, "gemm", "blocks.0.attn/matmul", 1000.0, None),
            row(3, "gemm", "blocks.1.attn/matmul", 2000.0, Some("rc-m8-n8-k8")),
            row(4, "binary", "blocks.1/binary", 50.0, None),
        ];
        let text: String = rows.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect();
        std::fs::write(dir.path().join("profile.jsonl"), text).unwrap();
        let tables = tables(dir.path()).unwrap();
        let line = tables.lines().find(|l| l.starts_with("rc-m8-n8-k8")).unwrap();
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Two products of 2 GFLOP in 4,000 µs: 2,000 µs a product, 1 TFLOP/s.
        assert_eq!(cols[1..], ["2000.0", "1.00", "2"], "{tables}");
        // The kernel table: the product's kernel first (four launches, 4 ms), then the binary.
        let kernels: Vec<&str> = tables.lines().skip_while(|l| !l.starts_with("Kernels")).skip(2).collect();
        assert_eq!(kernels.len(), 2, "{tables}");
        let first: Vec<&str> = kernels[0].split_whitespace().collect();
        assert_eq!(first, ["4.000", "98.8%", "4", "1000.0", "gemm", "gemm_tma"], "{tables}");
        assert!(kernels[1].ends_with("binary_kernel"), "{tables}");
    }
}
