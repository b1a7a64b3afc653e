//! The verifier: every node's inputs come earlier, and its recorded output types are exactly
//! what the shape rules give. Run on every finished graph and again after each pass.

use crate::graph::{Graph, IrError};
use crate::infer::infer;

pub fn verify(g: &Graph) -> Result<(), IrError> {
    for (i, node) in g.nodes.iter().enumerate() {
        let fail = |message: String| IrError {
            system: g.system.clone(),
            op: node.op.family().to_string(),
            node: i as u32,
            scope: node.scope.clone(),
            inputs: node
                .inputs
                .iter()
                .filter(|v| (v.node as usize) < i)
                .map(|&v| g.ty(v).to_string())
                .collect::<Vec<_>>()
                .join(", "),
            message,
        };
        for v in &node.inputs {
            if v.node as usize >= i {
                return Err(fail(format!("input {v} is not defined before use")));
            }
            if v.index as usize >= g.nodes[v.node as usize].outputs.len() {
                return Err(fail(format!("input {v} names an output that does not exist")));
            }
        }
        if node.op.is_leaf() || matches!(node.op, crate::op::Op::Constant { .. }) {
            if !node.inputs.is_empty() || node.outputs.len() != 1 {
                return Err(fail("a leaf has no inputs and one output".into()));
            }
            continue;
        }
        let types: Vec<_> = node.inputs.iter().map(|&v| g.ty(v).clone()).collect();
        let want = infer(&node.op, &types).map_err(fail)?;
        if want != node.outputs {
            return Err(fail(format!("recorded outputs {:?} differ from the rules' {:?}", node.outputs, want)));
        }
    }
    Ok(())
}
