//! What a profile says about each launch: its family, a name, its arithmetic and, for matrix
//! products, its shape as the seed's tables name it (`rr-m1024-n1536-k512`: A then B layout,
//! r = as stored, c = transposed).

use alpha_ir::{Op, Program};
use serde::{Deserialize, Serialize};

/// One timed launch, as `profile.jsonl` records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchTime {
    pub family: String,
    pub name: String,
    pub us: f64,
    pub flops: Option<f64>,
    pub shape: Option<String>,
    /// The device kernel that ran it, where the backend names its kernels (the CUDA backend's
    /// PTX function): what `alpha profile`'s kernel table sums by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
}

/// Family, name, FLOPs and shape of the kernel computing `node`.
pub fn kernel_info(program: &Program, node: u32) -> (String, String, Option<f64>, Option<String>) {
    let g = &program.graph;
    let n = &g.nodes[node as usize];
    let name = if n.scope.is_empty() { n.op.family().to_string() } else { format!("{}/{}", n.scope, n.op.family()) };
    match &n.op {
        Op::MatMul { ta, tb } => {
            let a = g.shape(n.inputs[0]);
            let out = &n.outputs[0].shape;
            let r = a.len();
            let k = if *ta { a[r - 2] } else { a[r - 1] };
            let (m, nn) = (out[out.len() - 2], out[out.len() - 1]);
            let batch: usize = out[..out.len() - 2].iter().product();
            let layout = |t: bool| if t { 'c' } else { 'r' };
            let mut shape = format!("{}{}-m{m}-n{nn}-k{k}", layout(*ta), layout(*tb));
            if batch > 1 {
                shape = format!("{shape}-b{batch}");
            }
            ("gemm".into(), name, Some(2.0 * (batch * m * nn * k) as f64), Some(shape))
        }
        op => (op.family().to_string(), name, None, None),
    }
}
