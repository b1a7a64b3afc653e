//! Reductions: one launch of partials per chunk of the reduced axes, and a fixed-order finish.

use super::matmul::ChainInProduct;
use super::*;
use crate::kernels::reduce;

impl Lowerer<'_> {
    /// A Reduce node; with `cast`, a column sum whose first pass also stores its tensor's bf16
    /// cast there ([`crate::fusion::column_casts`]).
    pub(super) fn lower_reduce(&mut self, id: u32, cast: Option<Value>) -> Result<Vec<Pending>> {
        // Partials an attention backward wrote (`summed_merged_gradients`): their column sum.
        if let Some(&(partials, chunks)) = self.attention_partials.get(&id) {
            return self.lower_column_sum_of(id, partials, chunks);
        }
        let cx = At::of(self.plan, id);
        let Op::Reduce { kind, axes, .. } = &cx.node.op else {
            return Err(node_error(&cx.node, id, "not a reduction"));
        };
        let r = Reduction::new(*kind, &cx.ishape(0), axes, cx.idt(0), cx.node.outputs[0].dtype)?;
        // The cast with its rows at their pitch where the padded products after it read it in
        // place.
        let cast = cast.map(|c| (self.ptr(c), self.write_pitched(c).unwrap_or(r.outputs())));
        self.reduction_passes(id, &r, self.ptr(cx.node.inputs[0]), cast, 0)
    }

    /// Column sum `id` taken over the f32 matrix `[rows, outputs]` at `x` in the scratch region
    /// (another launch's partials) instead of its input: the column path's passes, its own
    /// partials past every scratch byte lowered so far.
    fn lower_column_sum_of(&mut self, id: u32, x: A, rows: usize) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let r = Reduction::new(alpha_ir::Reduce::Sum, &[rows, cx.numel()], &[0], DType::F32, cx.node.outputs[0].dtype)
            .map_err(|e| node_error(&cx.node, id, e))?;
        let at = self.scratch_past_all(0);
        self.reduction_passes(id, &r, x, None, at)
    }

    /// Reduction `r` of node `id` over `x`: its first pass (storing the bf16 cast at `cast`,
    /// rows at the pitch given, on the column path where given), then, with several chunks,
    /// the finishing pass over the partials at `partials_at` in the scratch region.
    fn reduction_passes(
        &mut self,
        id: u32,
        r: &Reduction,
        x: A,
        cast: Option<(A, usize)>,
        partials_at: usize,
    ) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (out, partials) = self.reduction_outputs(id, r, partials_at);
        let (k1, args) = match cast {
            Some((c, pitch)) => (
                r.column_cast_kernel_pitched(pitch).map_err(|e| node_error(&cx.node, id, e))?,
                reduce::cast_arguments([out, x, partials, c]),
            ),
            None => (r.kernel(), reduce::arguments([out, x, partials])),
        };
        let kernel = self.kernel(k1)?;
        let first = Pending { kernel, grid: r.grid(), block: (reduce::THREADS, 1, 1), args, node: Some(id) };
        self.finished(id, r, first, partials_at)
    }

    /// Where reduction `r` of node `id` stores: its output, and its first pass's chunk partials
    /// (at `partials_at` in the scratch region; with one chunk unused, the output).
    fn reduction_outputs(&self, id: u32, r: &Reduction, partials_at: usize) -> (A, A) {
        let out = self.ptr(Value { node: id, index: 0 });
        (out, if r.chunks() > 1 { A::Scratch(partials_at) } else { out })
    }

    /// Reduction `r` of node `id` from its first pass `first`: with several chunks, the
    /// finishing pass over the partials at `partials_at` after it.
    fn finished(&mut self, id: u32, r: &Reduction, first: Pending, partials_at: usize) -> Result<Vec<Pending>> {
        let chunks = r.chunks();
        let mut v = vec![first];
        if chunks > 1 {
            self.need_scratch(partials_at + r.outputs() * chunks * 4);
            v.push(self.lower_reduce_finish(id, A::Scratch(partials_at), chunks)?);
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

    /// The reduction right after chain `cl` over one of its f32 outputs, run in the chain's
    /// launch ([`fused::Chain::reduction_kernel`]): that launch, then the reduction's finishing
    /// pass over its chunk partials where there are several, and the reduction's node; None
    /// where the next node is no such reduction. The reduced output is stored only where
    /// something besides the reduction reads it. Why: Polf's per-channel scales (resid_mix, the
    /// attention's and the MLP's scales, the skips' weights) take their gradients as column
    /// sums of products the chain before makes, 40 of them a step, each written and read back
    /// whole; Diakosmos's gate and norm gradients sum `[N, 7, 190]` products over each group or
    /// over everything, 42 a step at 64 windows.
    pub(super) fn chain_reduction(
        &mut self,
        nodes: &[u32],
        cl: &ChainLowered,
        skip: &std::collections::HashSet<u32>,
        uses: &HashMap<Value, usize>,
    ) -> Result<Option<(Vec<Pending>, u32)>> {
        if !self.config.chain_column_sums {
            return Ok(None);
        }
        let Some(&sum) = nodes.get(cl.end).filter(|s| !skip.contains(s)) else { return Ok(None) };
        let g = &self.plan.program.graph;
        let sn = &g.nodes[sum as usize];
        let Op::Reduce { kind, axes, .. } = &sn.op else { return Ok(None) };
        let x = sn.inputs[0];
        let Ok(r) = Reduction::new(*kind, g.shape(x), axes, g.dtype(x), sn.outputs[0].dtype) else { return Ok(None) };
        if r.outputs() * r.count() != cl.chain.n || !runs_in_chain(self.config, &r) {
            return Ok(None);
        }
        // With one chunk the launch stores the reduction's output itself while its blocks still
        // read the chain's inputs: the plan may have placed that output over an input (or an
        // output) that it took as dead by the reduction's turn, and a block storing there would
        // change what a later block reads.
        let placed = crate::fusion::range(self.plan, Value { node: sum, index: 0 });
        let met = cl.inputs.iter().chain(&cl.dests).map(|&v| crate::fusion::range(self.plan, v));
        if r.chunks() == 1 && !placed.is_some_and(|p| crate::fusion::clear_of(p, met)) {
            return Ok(None);
        }
        let chain = &cl.chain;
        let Some(j) = (0..chain.outputs.len()).find(|&j| !chain.bf16[j] && cl.dests[j] == x) else { return Ok(None) };
        let summed = chain.outputs[j];
        let mut chain = chain.clone();
        let mut args = cl.pending.args.clone();
        if uses.get(&x).copied().unwrap_or(0) <= 1 {
            chain.outputs.remove(j);
            chain.bf16.remove(j);
            args.remove(j);
        }
        let kernel = self.kernel(chain.reduction_kernel(summed, &r)?)?;
        let (out, partials) = self.reduction_outputs(sum, &r, 0);
        let args = [out, partials].into_iter().chain(args).collect();
        let first = Pending { kernel, grid: r.grid(), block: (reduce::THREADS, 1, 1), args, node: cl.pending.node };
        Ok(Some((self.finished(sum, &r, first, 0)?, sum)))
    }

    /// The column sum right after chain `cl`, which runs in product `t`'s epilogue, over one of
    /// the chain's f32 outputs: the product's staged epilogue sums each tile's columns
    /// ([`gemm::ChainEpilogue::with_column_sum`]) into the scratch region, and the sum's
    /// finishing pass (returned, with the sum's node) adds the tiles' partials in order. The
    /// summed output is no longer stored where the sum alone reads it. Taken where the
    /// product's epilogue is staged. The partials lie in the scratch region past every byte a
    /// launch lowered so far uses (the launches between the product and the sum, a weight
    /// gradient's parts among them, keep theirs). Why: GPT-2's first MLP bias takes its
    /// gradient as the column sum of dH, which the product stored in f32 (201 MB at sixteen
    /// contexts) for a launch of its own to read back.
    pub(super) fn product_column_sum(
        &mut self,
        nodes: &[u32],
        cl: &ChainLowered,
        t: &ChainInProduct,
        skip: &std::collections::HashSet<u32>,
        uses: &HashMap<Value, usize>,
        launches: &mut [Pending],
    ) -> Result<Option<(Pending, u32)>> {
        if !self.config.chain_column_sums {
            return Ok(None);
        }
        let Some(&sum) = nodes.get(cl.end).filter(|s| !skip.contains(s)) else { return Ok(None) };
        let g = &self.plan.program.graph;
        let sn = &g.nodes[sum as usize];
        let Op::Reduce { kind: alpha_ir::Reduce::Sum, axes, .. } = &sn.op else { return Ok(None) };
        let x = sn.inputs[0];
        let Ok(r) = Reduction::new(alpha_ir::Reduce::Sum, g.shape(x), axes, g.dtype(x), sn.outputs[0].dtype) else {
            return Ok(None);
        };
        let Some(ce) = t.spec.chain else { return Ok(None) };
        let (m, n) = (t.shape.m as usize, t.shape.n as usize);
        if !r.columns || r.outputs() != n || r.outputs() * r.count() != m * n {
            return Ok(None);
        }
        let Some(j) = (0..cl.chain.outputs.len()).find(|&j| !cl.chain.bf16[j] && cl.dests[j] == x) else {
            return Ok(None);
        };
        // The chain as the product runs it, less the summed output where only the sum reads it.
        // (Casts whose copies the chain stores read it too, but are not launched.)
        let g = &self.plan.program.graph;
        let copied = cl.copies.iter().filter(|c| g.nodes[c.node as usize].inputs.contains(&x)).count();
        let alone = uses.get(&x).copied().unwrap_or(0) <= 1 + copied;
        let mut chain = cl.chain.clone();
        if alone {
            chain.outputs.remove(j);
            chain.bf16.remove(j);
        }
        let Some(summing) = gemm::ChainEpilogue::new(&chain, ce.product()) else { return Ok(None) };
        let spec = GemmSpec { chain: Some(summing.with_column_sum(cl.chain.outputs[j])), ..t.spec };
        let staged = spec.engine == gemm::Engine::Tma && gemm_tma::staged(&spec) == Some(gemm_tma::Staged::Chain);
        if !staged {
            return Ok(None);
        }
        let row_tiles = m.div_ceil(128);
        let at = self.scratch_past_all(row_tiles * n * 4);
        let kernel = self.kernel(spec.kernel())?;
        let p = &mut launches[t.launch];
        p.kernel = kernel;
        // The chain's pointers follow the shape's arguments: its outputs, its other inputs, then
        // the partials.
        if alone {
            p.args.remove(gemm::SHAPE_ARGS + j);
        }
        p.args.insert(gemm::SHAPE_ARGS + summing.pointers(), A::Scratch(at));
        let finish = self.lower_reduce_finish(sum, A::Scratch(at), row_tiles)?;
        Ok(Some((finish, sum)))
    }
}

/// Whether reduction `r` may run in the launch of the elementwise chain before it
/// ([`Lowerer::chain_reduction`]), as `config` allows.
pub(super) fn runs_in_chain(config: &CudaConfig, r: &Reduction) -> bool {
    config.chain_column_sums && (r.columns || config.chain_row_reductions)
}
