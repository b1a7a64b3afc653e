//! LayerNorm and its backward: the residual gradient added and its cast stored by the backward,
//! and the gain and bias folds deferred to one launch after the last backward.

use super::*;
use crate::kernels::layernorm;

/// LayerNorm backwards of up to this many bands of rows run their band fold beside the input
/// gradient's rows (see `Lowerer::lower_layernorm_backward`).
pub(super) const FOLD_BESIDE_ROWS_MAX_BANDS: usize = 64;

impl Lowerer<'_> {
    /// A LayerNorm forward.
    pub(super) fn lower_layernorm(&mut self, id: u32) -> Result<Vec<Pending>> {
        let plan = self.plan;
        let g = &plan.program.graph;
        let node = g.nodes[id as usize].clone();
        let out = |k: u16| Value { node: id, index: k };
        let ins = &node.inputs;
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::LayerNorm { eps } => {
                self.want_f32(&node, id, ins)?;
                let nm = norm_of(g, &node);
                let (dst, ydt) = self.destination(out(0));
                // A bf16 output the padded products after it read in place: rows at their pitch.
                let pitch = if ydt == DType::BF16 { self.write_pitched(dst) } else { None };
                let kernel = match pitch {
                    Some(pitch) => layernorm::forward_kernel_pitched(nm, *eps as f32, pitch)?,
                    None => layernorm::forward_kernel_storing(nm, *eps as f32, ydt == DType::BF16),
                };
                let kernel = self.kernel(kernel)?;
                let &[x, gain, bias] = ins.as_slice() else {
                    return Err(node_error(&node, id, "a LayerNorm takes x, its gain and its bias"));
                };
                let args = layernorm::forward_arguments([dst, out(1), out(2), x, gain, bias].map(|v| self.ptr(v)));
                v.push(Pending {
                    kernel,
                    grid: (nm.rows as u32, 1, 1),
                    block: (layernorm::THREADS, 1, 1),
                    args,
                    node: some,
                });
            }
            _ => return Err(node_error(&node, id, "not a LayerNorm")),
        }
        Ok(v)
    }

    /// LayerNormBackward: the two deterministic parameter-gradient passes, then the input
    /// gradient (plus the following Add's other operand, written to the Add's slot, with `add`),
    /// last so that it may overwrite x or dy. With `sum` (see [`Lowerer::norm_sum`]), the input
    /// gradient's launch also writes the band sums of what it stores, and the column sum `sum`
    /// launches only its finishing pass, right after.
    pub(super) fn lower_layernorm_backward(
        &mut self,
        id: u32,
        add: Option<(u32, Value)>,
        copy: Option<Value>,
        sum: Option<u32>,
    ) -> Result<Vec<Pending>> {
        let g = &self.plan.program.graph;
        let node = g.nodes[id as usize].clone();
        let ins = &node.inputs;
        self.want_f32(&node, id, ins)?;
        let out = |k: u16| Value { node: id, index: k };
        let nm = norm_of(g, &node);
        let (x, gain, mean, rstd, dy) = (ins[0], ins[1], ins[2], ins[3], ins[4]);
        self.need_scratch(nm.scratch_floats() * 4);
        let dst = add.map_or(out(0), |(a, _)| Value { node: a, index: 0 });
        // Over many bands, pass 1 runs in the input gradient's launch (reading x and dy once),
        // a block a band, then pass 2 ([`layernorm::backward_dx_partials_kernel`]).
        let rows = [dst, x, gain, mean, rstd, dy].map(|v| self.ptr(v));
        let (residual, copy_ptr) = (add.map(|(_, r)| self.ptr(r)), copy.map(|c| self.ptr(c)));
        if partials_in_rows(self.config, nm) {
            // The column sums in the scratch region after pass 1's partials, for the sum's
            // finishing launch after this one's.
            let columns = sum.map(|_| {
                let at = (nm.scratch_floats() * 4).div_ceil(ALIGN) * ALIGN;
                self.need_scratch(at + nm.c * nm.bands() * 4);
                A::Scratch(at)
            });
            let (residual_on, copy_on) = (add.is_some(), copy.is_some());
            let k1 = self.kernel(match columns {
                Some(_) => layernorm::backward_dx_column_partials_kernel(nm, residual_on, copy_on),
                None => layernorm::backward_dx_partials_kernel(nm, residual_on, copy_on),
            })?;
            let passes = |partials: A| match columns {
                Some(columns) => layernorm::DxPasses::PartialsAndColumns { partials, columns },
                None => layernorm::DxPasses::Partials(partials),
            };
            let (grid, block) = layernorm::dx_partials_launch(nm);
            let mut v = vec![];
            if self.fusion.deferred_folds.contains(&id) {
                // The partials wait in a region of their own for one pass-2 launch later.
                let held = self.held(nm.scratch_floats() * 4);
                let args = layernorm::dx_arguments(rows, residual, copy_ptr, passes(A::Ptr(held)));
                let grads = [out(1), out(2)].map(|v| self.plan.slot(v).offset);
                self.pending_folds.push((nm, [grads[0], grads[1], held]));
                v.push(Pending { kernel: k1, grid, block, args, node: Some(id) });
            } else {
                let args = layernorm::dx_arguments(rows, residual, copy_ptr, passes(A::Scratch(0)));
                let k3 = self.kernel(layernorm::backward_finish_kernel(nm))?;
                let (grid3, block3) = layernorm::finish_launch(nm);
                v.push(Pending { kernel: k1, grid, block, args, node: Some(id) });
                v.push(Pending {
                    kernel: k3,
                    grid: grid3,
                    block: block3,
                    args: layernorm::finish_arguments([self.ptr(out(1)), self.ptr(out(2)), A::Scratch(0)]),
                    node: Some(id),
                });
            }
            if let (Some(s), Some(columns)) = (sum, columns) {
                v.push(self.lower_reduce_finish(s, columns, nm.bands())?);
            }
            return Ok(v);
        }
        if sum.is_some() {
            return Err(node_error(&node, id, "its column sums were asked for, but it runs pass 1 apart"));
        }
        let cols = (nm.c as u32).div_ceil(layernorm::THREADS);
        let k2 = self.kernel(layernorm::backward_partials_kernel(nm))?;
        let [xp, mp, rp, dyp] = [x, mean, rstd, dy].map(|v| self.ptr(v));
        let args = layernorm::partials_arguments([A::Scratch(0), xp, mp, rp, dyp]);
        let mut v = vec![Pending {
            kernel: k2,
            grid: (cols, nm.bands() as u32, 1),
            block: (layernorm::THREADS, 1, 1),
            args,
            node: Some(id),
        }];
        // Up to FOLD_BESIDE_ROWS_MAX_BANDS bands, the fold runs in blocks after the rows' (it
        // reads only pass 1's partials and writes the gain and bias gradients, which the rows
        // never touch): one launch fewer. Measured on the H200: one context's 64 bands
        // 4.341 → 4.307 ms a step; sixteen contexts' 1,024 bands 34.30 → 34.75 ms, their fold
        // running after the rows as a serial tail — so there it keeps its own launch.
        if self.config.ln_fold.unwrap_or(nm.bands() <= FOLD_BESIDE_ROWS_MAX_BANDS) {
            let k1 = self.kernel(match copy {
                Some(_) => layernorm::backward_dx_kernel_copying(nm, add.is_some(), true),
                None => layernorm::backward_dx_kernel_folding(nm, add.is_some()),
            })?;
            let passes =
                layernorm::DxPasses::Fold { dgain: self.ptr(out(1)), dbias: self.ptr(out(2)), partials: A::Scratch(0) };
            let args = layernorm::dx_arguments(rows, residual, copy_ptr, passes);
            let (grid, block) = layernorm::dx_fold_launch(nm);
            v.push(Pending { kernel: k1, grid, block, args, node: Some(id) });
            return Ok(v);
        }
        let k3 = self.kernel(layernorm::backward_finish_kernel(nm))?;
        let (grid, block) = layernorm::finish_launch(nm);
        v.push(Pending {
            kernel: k3,
            grid,
            block,
            args: layernorm::finish_arguments([self.ptr(out(1)), self.ptr(out(2)), A::Scratch(0)]),
            node: Some(id),
        });
        let args = layernorm::dx_arguments(rows, residual, copy_ptr, layernorm::DxPasses::Apart);
        let k1 = self.kernel(match copy {
            Some(_) => layernorm::backward_dx_kernel_copying(nm, add.is_some(), false),
            None => layernorm::backward_dx_kernel_adding(nm, add.is_some()),
        })?;
        v.push(Pending {
            kernel: k1,
            grid: (nm.rows as u32, 1, 1),
            block: (layernorm::THREADS, 1, 1),
            args,
            node: Some(id),
        });
        Ok(v)
    }

    /// The Add right after the LayerNormBackward or RMSNormBackward at `nodes[i]` that its
    /// input-gradient kernel can do as it stores (`dx + r`): the Add's only norm operand is dx,
    /// read by nothing else, and the Add's slot meets x, dy and r only exactly and the gain and
    /// row statistics not at all. Returns (Add, r).
    pub(super) fn norm_residual(
        &self,
        nodes: &[u32],
        i: usize,
        skip: &std::collections::HashSet<u32>,
        uses: &HashMap<Value, usize>,
    ) -> Option<(u32, Value)> {
        let g = self.g();
        let (id, &add) = (nodes[i], nodes.get(i + 1)?);
        let ln = &g.nodes[id as usize];
        let an = &g.nodes[add as usize];
        // Where dy is among the norm's inputs; the gain and row statistics lie before it.
        let dy_at = match ln.op {
            Op::LayerNormBackward => 4,
            Op::RmsNormBackward => 3,
            _ => return None,
        };
        if an.op != Op::Binary(alpha_ir::Binary::Add) || skip.contains(&add) {
            return None;
        }
        let dx = Value { node: id, index: 0 };
        let r = match (an.inputs[0] == dx, an.inputs[1] == dx) {
            (true, false) => an.inputs[1],
            (false, true) => an.inputs[0],
            _ => return None,
        };
        let same = g.ty(r) == &an.outputs[0] && g.ty(dx) == &an.outputs[0] && an.outputs[0].dtype == DType::F32;
        let sum = range(self.plan, Value { node: add, index: 0 })?;
        // Exactly on x, dy or r is safe: each block reads its row before it stores it, and the
        // parameter passes run first.
        let apart = |v: Value| range(self.plan, v).is_none_or(|x| !overlap(sum, x) || x == sum);
        let clear = apart(ln.inputs[0]) && apart(ln.inputs[dy_at]) && apart(r);
        let stats = ln.inputs[1..dy_at].iter().all(|&x| range(self.plan, x).is_none_or(|x| !overlap(sum, x)));
        (same && uses.get(&dx) == Some(&1) && clear && stats).then_some((add, r))
    }

    /// The column sum the LayerNorm backward `ln` writes the band sums for
    /// ([`crate::fusion::norm_column_sums`]): where it stores what the sum reads (the sum of
    /// `add`, or dx), and where the sum does not store a cast of it that is still a launch of its
    /// own (`copy` is the cast the backward stores).
    pub(super) fn norm_sum(
        &self,
        ln: u32,
        add: Option<u32>,
        copy: Option<Value>,
        skip: &std::collections::HashSet<u32>,
    ) -> Option<u32> {
        let &sum = self.fusion.norm_column_sums.get(&ln)?;
        let stored = Value { node: add.unwrap_or(ln), index: 0 };
        let cast_to_store = self.fusion.column_cast(sum, skip).is_some_and(|c| Some(c) != copy);
        let reads = self.g().nodes[sum as usize].inputs[0] == stored;
        (reads && !skip.contains(&sum) && !cast_to_store).then_some(sum)
    }

    /// The bf16 cast of the residual gradient that the LayerNorm backward at `i` adds (`add`),
    /// at position `i + 2` or a few after it (past launches that only read the sum, as a bias
    /// gradient's reduction does), where that launch may store it too
    /// ([`layernorm::backward_dx_kernel_copying`]): the cast's slot clear of everything the launch
    /// and the launches up to the cast read and write. Returns the cast's output.
    pub(super) fn cast_of_sum(
        &self,
        nodes: &[u32],
        i: usize,
        (add, r): (u32, Value),
        skip: &std::collections::HashSet<u32>,
    ) -> Option<Value> {
        /// Launches from the sum to its cast that the store may move past.
        const REACH: usize = 3;
        let g = self.g();
        let sum = Value { node: add, index: 0 };
        let is_cast = |c: u32| {
            let cn = &g.nodes[c as usize];
            !skip.contains(&c) && matches!(cn.op, Op::Cast { to: DType::BF16 }) && cn.inputs[0] == sum
        };
        let at = (i + 2..(i + 2 + REACH).min(nodes.len())).find(|&j| is_cast(nodes[j]))?;
        let out = Value { node: nodes[at], index: 0 };
        let cr = range(self.plan, out)?;
        let ln = nodes[i];
        let mut touched: Vec<Value> = g.nodes[ln as usize].inputs.clone();
        touched.extend([r, sum, Value { node: ln, index: 1 }, Value { node: ln, index: 2 }]);
        touched.extend(touched_by(g, &nodes[i + 2..at]));
        clear_of(cr, touched.into_iter().map(|v| range(self.plan, v))).then_some(out)
    }

    /// One launch of pass 2 for every LayerNorm of a shape whose fold waited
    /// ([`deferred_folds`]), counted as the last one's (`node`).
    pub(super) fn flush_folds(&mut self, node: u32) -> Result<Vec<Pending>> {
        let pending = std::mem::take(&mut self.pending_folds);
        let mut shapes: Vec<Norm> = vec![];
        for (n, _) in &pending {
            if !shapes.contains(n) {
                shapes.push(*n);
            }
        }
        let mut v = vec![];
        for n in shapes {
            let entries: Vec<[usize; 3]> = pending.iter().filter(|(m, _)| *m == n).map(|(_, e)| *e).collect();
            let bytes: Vec<u8> = entries.iter().flatten().flat_map(|&o| (o as u64).to_le_bytes()).collect();
            let table = self.constant(bytes);
            let kernel = self.kernel(layernorm::backward_finish_multi_kernel(n))?;
            let (grid, block) = layernorm::finish_multi_launch(n, entries.len());
            v.push(Pending { kernel, grid, block, args: vec![A::Ptr(0), A::Ptr(table)], node: Some(node) });
        }
        Ok(v)
    }
}
