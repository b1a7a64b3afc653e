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
            if let crate::op::Op::Param { init: crate::op::Init::Values(v), .. }
            | crate::op::Op::State { init: crate::op::Init::Values(v), .. } = &node.op
            {
                if v.len() != node.outputs[0].numel() {
                    return Err(fail(format!("{} initial values given for a tensor of {}", v.len(), node.outputs[0])));
                }
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

#[cfg(test)]
mod tests {
    use crate::{DType, Graph, Init};

    #[test]
    fn errors_name_the_system_the_op_the_scope_and_the_shapes() {
        let mut g = Graph::new("coppelius");
        let x = g.input("tokens", &[4, 8], DType::F32);
        let w = g.scoped("blocks.3", |g| g.param("attn.qkv.weight", &[6, 2], Init::Zeros));
        let _ = g.scoped("blocks.3", |g| g.matmul(x, w));
        let e = g.finish().unwrap_err().to_string();
        assert!(e.starts_with("coppelius: gemm"), "{e}");
        assert!(e.contains("blocks.3"), "{e}");
        assert!(e.contains("f32[4×8]") && e.contains("f32[6×2]"), "{e}");
        assert!(e.contains("inner dimensions differ"), "{e}");
    }

    #[test]
    fn initial_values_must_fill_their_tensor() {
        let mut g = Graph::new("diakosmos");
        g.param("spectral_coeffs", &[2, 2], Init::Values(vec![1.0, 0.5, 1.0]));
        let e = g.finish().unwrap_err().to_string();
        assert!(e.contains("3 initial values given for a tensor of f32[2×2]"), "{e}");
        let mut g = Graph::new("diakosmos");
        g.param("spectral_coeffs", &[2, 2], Init::Values(vec![1.0, 0.5, 1.0, 0.5]));
        assert!(g.finish().is_ok());
    }

    #[test]
    fn row_values_must_match_the_rows() {
        let mut g = Graph::new("polf");
        let _ = g.scoped("blocks.0", |g| g.param("resid_mix", &[3, 4], Init::Rows(vec![1.0, 0.0])));
        let e = g.finish().unwrap_err().to_string();
        assert!(e.contains("blocks.0.resid_mix: 2 row values for a tensor of shape [3, 4]"), "{e}");
        let mut g = Graph::new("polf");
        g.param("resid_mix", &[2, 4], Init::Rows(vec![1.0, 0.0]));
        assert!(g.finish().is_ok());
    }

    #[test]
    fn a_cross_entropy_takes_one_to_a_rows_worth_of_classes() {
        for (classes, ok) in [(0, false), (5, true), (8, true), (9, false)] {
            let mut g = Graph::new("t");
            let logits = g.input("logits", &[2, 8], DType::F32);
            let targets = g.input("targets", &[2], DType::I32);
            g.cross_entropy_over(logits, targets, classes);
            match g.finish() {
                Ok(_) => assert!(ok, "{classes} classes of rows of 8 accepted"),
                Err(e) => {
                    assert!(!ok, "{e}");
                    assert!(e.to_string().contains(&format!("cross-entropy over {classes} classes")), "{e}");
                }
            }
        }
    }

    #[test]
    fn a_tampered_graph_is_caught() {
        let mut g = Graph::new("bob");
        let x = g.input("x", &[2, 3], DType::F32);
        let y = g.exp(x);
        let mut g = g.finish().unwrap();
        g.nodes[y.node as usize].outputs[0].shape = vec![3, 2];
        let e = super::verify(&g).unwrap_err().to_string();
        assert!(e.contains("differ from the rules"), "{e}");
    }
}
