//! Embedding lookups (Gather) and their gradient (ScatterAdd: the five launches of
//! [`embedding::ScatterAdd`] over the scratch region, zeroing the gradient on the way).

use super::*;
use crate::kernels::embedding;

impl Lowerer<'_> {
    /// A Gather or ScatterAdd node.
    pub(super) fn lower_embedding(&mut self, id: u32) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (g, node, ins) = (cx.g, &cx.node, &cx.node.inputs);
        let n = cx.numel();
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::Gather => {
                self.want_f32(node, id, &ins[..1])?;
                let rows = cx.ishape(0)[0];
                let d = g.ty(ins[0]).numel() / rows.max(1);
                let tokens = g.ty(ins[1]).numel();
                if d == 0 || !d.is_multiple_of(4) || cx.idt(1) != DType::I32 {
                    return Err(node_error(
                        node,
                        id,
                        format!(
                            "gather needs rows of a multiple of 4 floats and i32 ids (rows of {d}, ids {})",
                            cx.idt(1)
                        ),
                    ));
                }
                let kernel = self.kernel(embedding::gather_kernel())?;
                v.push(Pending {
                    kernel,
                    grid: (tokens as u32, 1, 1),
                    block: (embedding::THREADS, 1, 1),
                    args: embedding::gather_arguments(
                        [self.ptr(cx.out(0)), self.ptr(ins[0]), self.ptr(ins[1])],
                        rows as u32,
                        d as u32,
                    ),
                    node: some,
                });
            }
            Op::ScatterAdd { rows } => {
                self.want_f32(node, id, &ins[..1])?;
                let d = n / (*rows).max(1);
                let tokens = g.ty(ins[1]).numel();
                if d == 0 || !d.is_multiple_of(4) || cx.idt(1) != DType::I32 {
                    return Err(node_error(
                        node,
                        id,
                        format!(
                            "scatter-add needs rows of a multiple of 4 floats and i32 ids (rows of {d}, ids {})",
                            cx.idt(1)
                        ),
                    ));
                }
                // The tokens sorted by id in the scratch region, then each row's sum added once
                // (see `kernels::embedding`): five launches, the sorting one also zeroing the
                // gradient first where it is 16-byte aligned (else a fill launch before them).
                let plan = embedding::ScatterAdd::new(*rows as u32, d as u32, tokens as u32)
                    .map_err(|e| node_error(node, id, format!("{e:#}")))?;
                let out = self.ptr(cx.out(0));
                let plan = if aligned16(&[out]) {
                    plan.zeroing_table()
                } else {
                    let fill = Pointwise {
                        shape: vec![n],
                        out: Operand::contiguous(DType::F32, &[n]),
                        ins: vec![],
                        body: Body::Fill(0.0),
                    };
                    v.push(self.pointwise(fill, vec![out], some)?);
                    plan
                };
                self.need_scratch(plan.scratch_bytes());
                let kernels = embedding::scatter_add_kernels();
                for l in plan.launches([out, self.ptr(ins[0]), self.ptr(ins[1])], A::Scratch) {
                    let kernel = self.kernel(kernels[l.kernel].clone())?;
                    v.push(Pending { kernel, grid: l.grid, block: l.block, args: l.args, node: some });
                }
            }
            _ => return Err(node_error(node, id, "not an embedding op")),
        }
        Ok(v)
    }
}
