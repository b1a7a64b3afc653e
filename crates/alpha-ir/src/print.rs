//! A readable listing of a graph, one node a line, for `alpha plan --print` and for errors.

use std::fmt::Write;

use crate::graph::Graph;
use crate::op::Op;

pub fn print(g: &Graph) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "graph {} ({} nodes)", g.system, g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let outs: Vec<String> = n.outputs.iter().map(|t| t.to_string()).collect();
        let ins: Vec<String> = n.inputs.iter().map(|v| v.to_string()).collect();
        let what = match &n.op {
            Op::Param { name, .. } => format!("param {name}"),
            Op::State { name, .. } => format!("state {name}"),
            Op::Input { name } => format!("input {name}"),
            Op::HostScalar { name } => format!("host {name}"),
            other => format!("{other:?}"),
        };
        let _ = writeln!(s, "%{i} = {what}({}) -> {}  [{}]", ins.join(", "), outs.join(", "), n.scope);
    }
    s
}
