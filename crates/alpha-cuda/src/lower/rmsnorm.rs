//! RMSNorm and its backward: the forward storing its bf16 cast where one alone reads it, the
//! backward adding the residual gradient as it stores, and the gain's two deterministic passes
//! only where something reads the gain's gradient.

use super::*;
use crate::kernels::rmsnorm;

impl Lowerer<'_> {
    /// An RMSNorm forward, storing y as bf16 in the cast's slot where a cast alone reads it
    /// ([`casts_into_producers`]).
    pub(super) fn lower_rmsnorm(&mut self, id: u32) -> Result<Vec<Pending>> {
        let g = &self.plan.program.graph;
        let node = g.nodes[id as usize].clone();
        let Op::RmsNorm { eps } = node.op else { return Err(node_error(&node, id, "not an RMSNorm")) };
        self.want_f32(&node, id, &node.inputs)?;
        let &[x, gain] = node.inputs.as_slice() else {
            return Err(node_error(&node, id, "an RMSNorm takes x and its gain"));
        };
        let nm = norm_of(g, &node);
        let out = |k: u16| Value { node: id, index: k };
        let (dst, ydt) = self.destination(out(0));
        let kernel = self.kernel(rmsnorm::forward_kernel_storing(nm, eps as f32, ydt == DType::BF16))?;
        let args = rmsnorm::forward_arguments([dst, out(1), x, gain].map(|v| self.ptr(v)));
        let (grid, block) = rmsnorm::row_launch(nm);
        Ok(vec![Pending { kernel, grid, block, args, node: Some(id) }])
    }

    /// RMSNormBackward: the gain's gradient (band partials, then their fold in order) where
    /// anything reads it, then the input gradient (plus the following Add's other operand,
    /// written to the Add's slot, with `add`: see `Lowerer::norm_residual`), last so that it
    /// may overwrite x or dy.
    /// Why the gain's passes may be left out: a parameter-free RMSNorm is one with a constant
    /// gain of ones (Polf's 38 a step), whose gradient nothing reads; its passes would read x
    /// and dy a second time for nothing.
    pub(super) fn lower_rmsnorm_backward(&mut self, id: u32, add: Option<(u32, Value)>) -> Result<Vec<Pending>> {
        let g = &self.plan.program.graph;
        let node = g.nodes[id as usize].clone();
        self.want_f32(&node, id, &node.inputs)?;
        let &[x, gain, rstd, dy] = node.inputs.as_slice() else {
            return Err(node_error(&node, id, "an RMSNorm backward takes x, its gain, rstd and dy"));
        };
        let nm = norm_of(g, &node);
        let out = |k: u16| Value { node: id, index: k };
        let mut v = vec![];
        if self.uses.get(&out(1)).is_some_and(|&n| n > 0) {
            self.need_scratch(rmsnorm::scratch_floats(nm) * 4);
            let k1 = self.kernel(rmsnorm::backward_partials_kernel(nm))?;
            let args = rmsnorm::partials_arguments([A::Scratch(0), self.ptr(x), self.ptr(rstd), self.ptr(dy)]);
            let (grid, block) = rmsnorm::partials_launch(nm);
            v.push(Pending { kernel: k1, grid, block, args, node: Some(id) });
            let k2 = self.kernel(rmsnorm::backward_finish_kernel(nm))?;
            let args = rmsnorm::finish_arguments([self.ptr(out(1)), A::Scratch(0)]);
            let (grid, block) = rmsnorm::finish_launch(nm);
            v.push(Pending { kernel: k2, grid, block, args, node: Some(id) });
        }
        let kernel = self.kernel(rmsnorm::backward_dx_kernel_adding(nm, add.is_some()))?;
        let dst = add.map_or(out(0), |(a, _)| Value { node: a, index: 0 });
        let args = rmsnorm::dx_arguments([dst, x, gain, rstd, dy].map(|v| self.ptr(v)), add.map(|(_, r)| self.ptr(r)));
        let (grid, block) = rmsnorm::row_launch(nm);
        v.push(Pending { kernel, grid, block, args, node: Some(id) });
        Ok(v)
    }
}
