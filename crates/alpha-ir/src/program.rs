//! A Program: a finished graph cut into phases, each a run of nodes followed by assignments
//! to persistent tensors. A training step is one program: the `step` phase (forward, backward,
//! update); with gradient accumulation, an `accumulate` phase runs K times before `update`.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::graph::{Graph, IrError, Value};
use crate::op::Op;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Phase {
    pub name: String,
    /// The nodes this phase computes (leaves in the range are skipped).
    pub nodes: Range<usize>,
    /// At the end of the phase: persistent leaf ← computed value.
    pub assign: Vec<(Value, Value)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Program {
    pub graph: Graph,
    pub phases: Vec<Phase>,
    /// Named results the host reads back (`loss`, `losses`, `logits`, `grad_norm`).
    pub outputs: BTreeMap<String, Value>,
}

impl Program {
    /// A program of one phase over the whole graph.
    pub fn single(graph: Graph, name: &str, outputs: BTreeMap<String, Value>) -> Program {
        let n = graph.nodes.len();
        Program { graph, phases: vec![Phase { name: name.into(), nodes: 0..n, assign: vec![] }], outputs }
    }

    /// A stable identity: the SHA-256 of the serialised program. Plans and kernels carried by a
    /// built executable are looked up by it.
    pub fn key(&self) -> String {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(serde_json::to_vec(self).expect("programs serialise")))
    }

    pub fn phase(&self, name: &str) -> Option<usize> {
        self.phases.iter().position(|p| p.name == name)
    }

    /// Check the phases cover the graph in order and assignments target persistent leaves of
    /// the same type.
    pub fn verify(&self) -> Result<(), IrError> {
        crate::verify::verify(&self.graph)?;
        let fail = |node: u32, message: String| IrError {
            system: self.graph.system.clone(),
            op: "program".into(),
            node,
            scope: String::new(),
            inputs: String::new(),
            message,
        };
        let mut at = 0;
        for p in &self.phases {
            if p.nodes.start != at || p.nodes.end < p.nodes.start || p.nodes.end > self.graph.nodes.len() {
                return Err(fail(at as u32, format!("phase {} does not continue the previous one", p.name)));
            }
            at = p.nodes.end;
            for &(dst, src) in &p.assign {
                let leaf = &self.graph.node(dst).op;
                if !matches!(leaf, Op::Param { .. } | Op::State { .. }) {
                    return Err(fail(
                        dst.node,
                        format!("phase {} assigns to {dst}, which is not a parameter or state", p.name),
                    ));
                }
                if self.graph.ty(dst) != self.graph.ty(src) {
                    return Err(fail(
                        dst.node,
                        format!("phase {} assigns {} to {}", p.name, self.graph.ty(src), self.graph.ty(dst)),
                    ));
                }
            }
        }
        if at != self.graph.nodes.len() {
            return Err(fail(at as u32, "phases do not cover the graph".into()));
        }
        Ok(())
    }
}
