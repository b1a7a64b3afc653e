//! Linear recurrences along time.

use super::*;
use crate::kernels::recurrence;

impl Lowerer<'_> {
    /// A Recurrence node.
    pub(super) fn lower_recurrence(&mut self, id: u32) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (node, ins) = (&cx.node, &cx.node.inputs);
        let n = cx.numel();
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::Recurrence { reverse } => {
                self.want_f32(node, id, ins)?;
                let s = cx.ishape(0);
                let (b, t) = (s[0], s[1]);
                let c = n / (b * t).max(1);
                let kernel = self.kernel(recurrence::kernel(b, t, c, *reverse))?;
                let (blocks, threads) = grid_blocks(b * c);
                v.push(Pending {
                    kernel,
                    grid: (blocks, 1, 1),
                    block: (threads, 1, 1),
                    args: recurrence::arguments([self.ptr(cx.out(0)), self.ptr(ins[0]), self.ptr(ins[1])]),
                    node: some,
                });
            }
            _ => return Err(node_error(node, id, "not a recurrence")),
        }
        Ok(v)
    }
}
