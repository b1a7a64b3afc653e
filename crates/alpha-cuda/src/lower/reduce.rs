//! Reductions: one launch of partials per chunk of the reduced axes, and a fixed-order finish.

use super::*;
use crate::kernels::reduce;

impl Lowerer<'_> {
    /// A Reduce node; with `cast`, a column sum whose first pass also stores its tensor's bf16
    /// cast there ([`crate::fusion::column_casts`]).
    pub(super) fn lower_reduce(&mut self, id: u32, cast: Option<Value>) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (node, ins) = (&cx.node, &cx.node.inputs);
        let odt = node.outputs[0].dtype;
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::Reduce { kind, axes, .. } => {
                let r = Reduction::new(*kind, &cx.ishape(0), axes, cx.idt(0), odt)?;
                let chunks = r.chunks();
                // With one chunk the partials pointer is unused; it still points into the arena.
                let partials = if chunks > 1 { A::Scratch(0) } else { self.ptr(cx.out(0)) };
                let [out, x] = [self.ptr(cx.out(0)), self.ptr(ins[0])];
                let (k1, args) = match cast {
                    Some(c) => (
                        r.column_cast_kernel().map_err(|e| node_error(node, id, e))?,
                        reduce::cast_arguments([out, x, partials, self.ptr(c)]),
                    ),
                    None => (r.kernel(), reduce::arguments([out, x, partials])),
                };
                let kernel = self.kernel(k1)?;
                v.push(Pending { kernel, grid: r.grid(), block: (reduce::THREADS, 1, 1), args, node: some });
                if chunks > 1 {
                    self.need_scratch(r.outputs() * chunks * 4);
                    let k2 = self.kernel(r.finish_kernel())?;
                    v.push(Pending {
                        kernel: k2,
                        grid: (r.outputs() as u32, 1, 1),
                        block: (reduce::THREADS, 1, 1),
                        args: reduce::finish_arguments([self.ptr(cx.out(0)), A::Scratch(0)]),
                        node: some,
                    });
                }
            }
            _ => return Err(node_error(node, id, "not a reduction")),
        }
        Ok(v)
    }

    /// Column sum `id`'s finishing launch over `chunks` partials an output that another launch
    /// wrote at `partials` ([`crate::fusion::norm_column_sums`]).
    pub(super) fn lower_reduce_finish(&mut self, id: u32, partials: A, chunks: usize) -> Result<Pending> {
        let cx = At::of(self.plan, id);
        let node = &cx.node;
        let Op::Reduce { kind, axes, .. } = &node.op else { return Err(node_error(node, id, "not a reduction")) };
        let r = Reduction::new(*kind, &cx.ishape(0), axes, cx.idt(0), node.outputs[0].dtype)?;
        let kernel = self.kernel(r.finish_kernel_over(chunks as u32))?;
        Ok(Pending {
            kernel,
            grid: (r.outputs() as u32, 1, 1),
            block: (reduce::THREADS, 1, 1),
            args: reduce::finish_arguments([self.ptr(cx.out(0)), partials]),
            node: Some(id),
        })
    }
}
