//! The cross-entropy loss and its backward.

use super::*;

impl Lowerer<'_> {
    /// A CrossEntropy or CrossEntropyBackward node.
    pub(super) fn lower_cross_entropy(&mut self, id: u32) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (node, ins) = (&cx.node, &cx.node.inputs);
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::CrossEntropy { classes } => {
                let input = self.logits_dtype(node, id)?;
                let s = cx.ishape(0);
                let (classes, width) = (classes.unwrap_or(s[1]) as u32, s[1] as u32);
                if let Some(&(b, scale)) = self.fusion.joint_cross_entropy.get(&id) {
                    // The backward in this launch: its bf16 gradient where its cast lies.
                    let (dst, _) = self.destination(Value { node: b, index: 0 });
                    v.push(Pending {
                        kernel: self.kernel(cross_entropy::joint_kernel_of(width, input))?,
                        grid: (s[0] as u32, 1, 1),
                        block: (cross_entropy::JOINT_THREADS, 1, 1),
                        args: cross_entropy::joint_arguments(
                            [cx.out(0), cx.out(1), dst, ins[0], ins[1]].map(|a| self.ptr(a)),
                            (classes, width),
                            scale,
                        ),
                        node: some,
                    });
                    return Ok(v);
                }
                // The one-read form where every column of a row is a class.
                let kernel =
                    self.kernel(cross_entropy::forward_kernel_of((classes == width).then_some(classes), input))?;
                v.push(Pending {
                    kernel,
                    grid: (s[0] as u32, 1, 1),
                    block: (cross_entropy::THREADS, 1, 1),
                    args: cross_entropy::forward_arguments(
                        [self.ptr(cx.out(0)), self.ptr(cx.out(1)), self.ptr(ins[0]), self.ptr(ins[1])],
                        (classes, width),
                    ),
                    node: some,
                });
            }
            Op::CrossEntropyBackward { classes } => {
                let input = self.logits_dtype(node, id)?;
                self.want_f32(node, id, &[ins[1], ins[3]])?;
                let s = cx.ishape(0);
                let (classes, width) = (classes.unwrap_or(s[1]) as u32, s[1] as u32);
                // dlogits as bf16 where a cast alone reads them (see `casts_into_producers`).
                let (dst, dtype) = self.destination(cx.out(0));
                let kernel = self.kernel(cross_entropy::backward_kernel_of(dtype == DType::BF16, input))?;
                let args = cross_entropy::backward_arguments(
                    [dst, ins[0], ins[1], ins[2], ins[3]].map(|a| self.ptr(a)),
                    (classes, width),
                );
                v.push(Pending {
                    kernel,
                    grid: (s[0] as u32, 1, 1),
                    block: (cross_entropy::THREADS, 1, 1),
                    args,
                    node: some,
                });
            }
            _ => return Err(node_error(node, id, "not a cross-entropy")),
        }
        Ok(v)
    }

    /// The dtype a cross-entropy's logits are stored in: f32, or bf16 (rows of a multiple of 8,
    /// read two bytes a logit).
    fn logits_dtype(&self, node: &Node, id: u32) -> Result<DType> {
        let g = &self.plan.program.graph;
        let logits = node.inputs[0];
        match g.dtype(logits) {
            DType::F32 => Ok(DType::F32),
            DType::BF16 if g.shape(logits).last().is_some_and(|w| w % 8 == 0) => Ok(DType::BF16),
            dt => Err(node_error(
                node,
                id,
                format!(
                    "cross-entropy over {dt} logits of shape {:?}: f32, or bf16 rows of a multiple of 8",
                    g.shape(logits)
                ),
            )),
        }
    }
}
