//! The optimizer's ops: AdamW (a run of them sharing their scalars as one multi-tensor launch)
//! and the gradients' global sum of squares.

use super::*;

impl Lowerer<'_> {
    /// An AdamW or SumSquares node launched alone.
    pub(super) fn lower_optimizer(&mut self, id: u32) -> Result<Vec<Pending>> {
        let plan = self.plan;
        let g = &plan.program.graph;
        let node = g.nodes[id as usize].clone();
        let out = |k: u16| Value { node: id, index: k };
        let ins = &node.inputs;
        let n = node.outputs[0].numel();
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::AdamW { beta1, beta2, eps, weight_decay } => {
                self.want_f32(&node, id, ins)?;
                let kernel = self.kernel(adamw::step_kernel(*beta1, *beta2, *eps, *weight_decay, n))?;
                let (blocks, threads) = grid_blocks(n);
                v.push(Pending {
                    kernel,
                    grid: (blocks, 1, 1),
                    block: (threads, 1, 1),
                    args: ins.iter().map(|&a| self.ptr(a)).collect(),
                    node: some,
                });
            }
            Op::SumSquares => {
                self.want_f32(&node, id, ins)?;
                let tensors: Vec<(usize, usize)> =
                    ins.iter().map(|&x| (plan.slot(x).offset, g.ty(x).numel())).collect();
                if tensors.iter().all(|t| t.1 == 0) {
                    let fill = Pointwise {
                        shape: vec![1],
                        out: Operand::contiguous(DType::F32, &[1]),
                        ins: vec![],
                        body: Body::Fill(0.0),
                    };
                    v.push(self.pointwise(fill, vec![self.ptr(out(0))], some)?);
                    return Ok(v);
                }
                let (bytes, chunks) = multi::sumsq_table(&tensors).map_err(|e| node_error(&node, id, e))?;
                let table = self.constant(bytes);
                self.need_scratch(chunks * 8);
                let k1 = self.kernel(multi::sumsq_chunks_kernel())?;
                v.push(Pending {
                    kernel: k1,
                    grid: (chunks as u32, 1, 1),
                    block: (multi::THREADS, 1, 1),
                    args: multi::sumsq_chunks_arguments([A::Scratch(0), A::Ptr(0), A::Ptr(table)]),
                    node: some,
                });
                let k2 = self.kernel(multi::sumsq_finish_kernel())?;
                v.push(Pending {
                    kernel: k2,
                    grid: (1, 1, 1),
                    block: (multi::THREADS, 1, 1),
                    args: multi::sumsq_finish_arguments([self.ptr(out(0)), A::Scratch(0)], chunks as u32),
                    node: some,
                });
            }
            _ => return Err(node_error(&node, id, "not an optimizer op")),
        }
        Ok(v)
    }

    /// A run of AdamW nodes sharing β₁, β₂, ε and their scalar inputs (lr, bc1, bc2, gscale):
    /// one multi-tensor launch driven by a chunk table (see [`crate::kernels::multi`]).
    pub(super) fn lower_adamw_group(&mut self, ids: &[u32]) -> Result<Pending> {
        let g = self.g();
        let first = &g.nodes[ids[0] as usize];
        let Op::AdamW { beta1, beta2, eps, .. } = first.op else { unreachable!("an AdamW group") };
        let mut tensors = vec![];
        for &id in ids {
            let node = &g.nodes[id as usize];
            let Op::AdamW { weight_decay, .. } = node.op else { unreachable!("an AdamW group") };
            self.want_f32(node, id, &node.inputs)?;
            let off = |k: usize| self.plan.slot(node.inputs[k]).offset;
            tensors.push(multi::AdamwTensor {
                p: off(0),
                g: off(1),
                m: off(2),
                v: off(3),
                len: g.ty(node.inputs[0]).numel(),
                weight_decay: weight_decay as f32,
            });
        }
        let Some(&[lr, bc1, bc2, gscale]) = first.inputs.get(4..) else {
            return Err(node_error(
                first,
                ids[0],
                "an AdamW takes p, g, m, v, lr, two bias corrections and a gradient scale",
            ));
        };
        let scalars = [lr, bc1, bc2, gscale].map(|x| self.ptr(x));
        let (bytes, chunks) = multi::adamw_table(&tensors).map_err(|e| node_error(first, ids[0], e))?;
        let table = self.constant(bytes);
        let kernel = self.kernel(multi::adamw_kernel(beta1, beta2, eps))?;
        let args = multi::adamw_arguments([A::Ptr(0), A::Ptr(table)], scalars);
        Ok(Pending { kernel, grid: (chunks as u32, 1, 1), block: (multi::THREADS, 1, 1), args, node: Some(ids[0]) })
    }
}
