//! What a system shows of its insides on a run page. A system declares its views
//! ([`crate::System::model_views`]); the dashboard draws whatever is declared, so it names no
//! system. A view is one of:
//!
//! - **tracked**: figures computed from a few tensors of a checkpoint, read from every kept
//!   checkpoint of a run so the page can draw how they moved over training. The view names the
//!   tensors it needs by pattern, so a reader takes only those from the file (a checkpoint of the
//!   largest system is over a gigabyte; the figures need kilobytes of it), and the patterns rather
//!   than a fixed list let one view serve every geometry of its system;
//! - **a table** or **labelled points** the system's definition fixes, needing no checkpoint.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::System;

/// Tensors by name: (shape, values), as a checkpoint holds them.
pub type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// How the page draws a series against the checkpoints' steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Draw {
    /// One line a value (each value is a named quantity: a group's frequency, a statistic).
    Lines,
    /// The values are one population (many half-lives): the page draws its percentiles.
    Spread,
}

/// Named numbers computed from one checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    pub name: String,
    pub unit: String,
    pub draw: Draw,
    /// One label a value.
    pub labels: Vec<String>,
    pub values: Vec<f64>,
    /// Where the values form a grid (row-major, as many columns as values ÷ rows): its rows'
    /// names, so the page can also draw one checkpoint's values as a heat map.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<String>>,
}

/// A table fixed by the system's definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// A point of the plane and what lies on it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelledPoint {
    pub x: f64,
    pub y: f64,
    /// The byte values that land here.
    pub bytes: Vec<u8>,
}

/// One panel of labelled points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointSet {
    pub name: String,
    pub points: Vec<LabelledPoint>,
}

/// Turns a checkpoint's selected tensors into series; an error says which tensor was missing or
/// of the wrong shape.
pub type Compute = Arc<dyn Fn(&Tensors) -> Result<Vec<Series>, String> + Send + Sync>;

/// What a view holds.
#[derive(Clone)]
pub enum Content {
    /// Read from each kept checkpoint: only the tensors whose names match `tensors` (`*` any run
    /// of characters, as a learner's groups take them) are read and passed to `compute`.
    Tracked {
        tensors: Vec<String>,
        compute: Compute,
    },
    Table(Table),
    Points(Vec<PointSet>),
}

/// One view of a system's insides.
#[derive(Clone)]
pub struct ModelView {
    /// Stable within the system: the page's element ids and the API name it.
    pub id: &'static str,
    pub title: String,
    /// What it shows and what to look for, in the page's words.
    pub about: String,
    pub content: Content,
}

impl ModelView {
    /// The tensor patterns a tracked view reads; none for the others.
    pub fn tensors(&self) -> &[String] {
        match &self.content {
            Content::Tracked { tensors, .. } => tensors,
            _ => &[],
        }
    }

    /// Whether a tracked view reads tensor `name`.
    pub fn reads(&self, name: &str) -> bool {
        self.tensors().iter().any(|p| alpha_learn::glob(p, name))
    }

    /// The view's series from a checkpoint's tensors (those it reads; others are ignored); an
    /// empty list for views that are not tracked.
    pub fn compute(&self, tensors: &Tensors) -> Result<Vec<Series>, String> {
        match &self.content {
            Content::Tracked { compute, .. } => compute(tensors),
            _ => Ok(vec![]),
        }
    }
}

/// Tensor `name`'s values, checked to hold `len` numbers.
pub fn tensor<'a>(tensors: &'a Tensors, name: &str, len: usize) -> Result<&'a [f32], String> {
    let (_, v) = tensors.get(name).ok_or_else(|| format!("the checkpoint has no tensor {name}"))?;
    if v.len() != len {
        return Err(format!("tensor {name} holds {} numbers, not {len}", v.len()));
    }
    Ok(v)
}

/// The `q`-quantile (0 to 1) of sorted values, linearly interpolated.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
}

/// The parameter table by optimizer: each parameter role (paths with their block index written
/// `*`), its shape, how many tensors and parameters it has, and the optimizer its learner gives
/// it; then one row per optimizer with its totals. Read from the system's own model and learner,
/// so the table cannot drift from what trains.
pub fn parameter_table(system: &dyn System) -> Result<Table, String> {
    let model = system.model(1).map_err(|e| e.to_string())?;
    let params: Vec<(String, Vec<usize>)> =
        model.graph.params().into_iter().map(|(v, n)| (n, model.graph.shape(v).to_vec())).collect();
    let learner = system.learner(system.default_steps());
    let group_of = learner.assign_groups(system.name(), &params).map_err(|e| e.to_string())?;
    // Role → (shape, tensors, parameters, optimizer), in first-seen order.
    let mut roles: Vec<(String, Vec<usize>, usize, usize, &'static str)> = vec![];
    // Each group's tensors and parameters, in the learner's order.
    let mut totals: Vec<(usize, usize)> = vec![(0, 0); learner.groups.len()];
    for ((path, shape), &g) in params.iter().zip(&group_of) {
        let role =
            path.split('.').map(|p| if p.parse::<usize>().is_ok() { "*" } else { p }).collect::<Vec<_>>().join(".");
        let optimizer = learner.groups[g].optimizer.name();
        let n: usize = shape.iter().product();
        match roles.iter_mut().find(|r| r.0 == role && r.1 == *shape && r.4 == optimizer) {
            Some(r) => {
                r.2 += 1;
                r.3 += n;
            }
            None => roles.push((role, shape.clone(), 1, n, optimizer)),
        }
        totals[g].0 += 1;
        totals[g].1 += n;
    }
    let all: usize = totals.iter().map(|t| t.1).sum();
    let mut rows: Vec<Vec<String>> = roles
        .into_iter()
        .map(|(role, shape, count, n, opt)| {
            let shape = shape.iter().map(usize::to_string).collect::<Vec<_>>().join(" × ");
            vec![role, shape, count.to_string(), n.to_string(), opt.to_string()]
        })
        .collect();
    for (group, (count, n)) in learner.groups.iter().zip(totals).filter(|(_, t)| t.0 > 0) {
        let opt = group.optimizer.name();
        let share = format!("{:.2}%", 100.0 * n as f64 / all.max(1) as f64);
        rows.push(vec![format!("all {opt}"), share, count.to_string(), n.to_string(), opt.to_string()]);
    }
    Ok(Table { columns: ["tensor", "shape", "tensors", "parameters", "optimizer"].map(String::from).to_vec(), rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_sorted_values() {
        let v = [1.0, 2.0, 4.0, 8.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 8.0);
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn the_parameter_table_sums_to_the_model() {
        let system = crate::kickdelta::KickDelta;
        let table = parameter_table(&system).unwrap();
        let total: Vec<&Vec<String>> = table.rows.iter().filter(|r| r[0].starts_with("all ")).collect();
        assert_eq!(total.len(), 1);
        assert_eq!(total[0][3], "7227");
        let roles: usize =
            table.rows.iter().filter(|r| !r[0].starts_with("all ")).map(|r| r[3].parse::<usize>().unwrap()).sum();
        assert_eq!(roles, 7227);
    }
}
