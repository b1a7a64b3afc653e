//! Elementwise and layout ops (unary, binary, casts, reshapes, broadcasts, permutes, slices,
//! concatenations) on the pointwise kernel, runs of them as one fused chain, and runs of
//! parameter casts as one multi-tensor launch.

use super::*;

impl Lowerer<'_> {
    /// An elementwise or layout node on the pointwise kernel.
    pub(super) fn lower_elementwise(&mut self, id: u32, permuted: Option<u32>) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (node, ins) = (&cx.node, &cx.node.inputs);
        let os = node.outputs[0].shape.clone();
        let odt = node.outputs[0].dtype;
        let n = cx.numel();
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::Unary(u) => {
                let (dst, odt) = self.destination(cx.out(0));
                // Reading the tensor under its slice in place (`chain_slices`): over the
                // slice's shape.
                let (shape, strides, src) = match (self.sliced_operand(ins[0]), permuted) {
                    (Some((strides, src)), _) => (cx.ishape(0), strides, src),
                    (None, Some(_)) => (os.clone(), contiguous_strides(&os), self.ptr(ins[0])),
                    (None, None) => (vec![n], vec![1], self.ptr(ins[0])),
                };
                let (dst, out) = match permuted {
                    Some(p) => (Value { node: p, index: 0 }, permuted_operand(self.g(), p, odt)),
                    None => (dst, Operand::contiguous(odt, &shape)),
                };
                let pw =
                    Pointwise { out, shape, ins: vec![Operand { dtype: cx.idt(0), strides }], body: Body::Unary(*u) };
                v.push(self.pointwise(pw, vec![self.ptr(dst), src], some)?);
            }
            Op::Binary(b) => {
                let (dst, odt) = self.destination(cx.out(0));
                let (dst, out) = match permuted {
                    Some(p) => (Value { node: p, index: 0 }, permuted_operand(self.g(), p, odt)),
                    None => (dst, Operand::contiguous(odt, &os)),
                };
                let mut args = vec![self.ptr(dst)];
                let mut operands = vec![];
                for (k, &x) in ins.iter().enumerate() {
                    let (strides, src) = match self.sliced_operand(x) {
                        Some(s) => s,
                        None => (broadcast_strides(&cx.ishape(k), &os), self.ptr(x)),
                    };
                    operands.push(Operand { dtype: cx.idt(k), strides });
                    args.push(src);
                }
                let pw = Pointwise { shape: os.clone(), out, ins: operands, body: Body::Binary(*b) };
                v.push(self.pointwise(pw, args, some)?);
            }
            // A bf16 matrix the padded products after it read in place: rows at their pitch.
            Op::Cast { .. } if self.room.contains_key(&cx.out(0)) => {
                let pitch = self.write_pitched(cx.out(0)).expect("room was given");
                let (rows, cols) = (os[0], os[1]);
                let pw = Pointwise {
                    shape: vec![rows, cols],
                    out: Operand { dtype: odt, strides: vec![pitch as u64, 1] },
                    ins: vec![Operand::contiguous(cx.idt(0), &[rows, cols])],
                    body: Body::Copy,
                };
                v.push(self.pointwise(pw, vec![self.ptr(cx.out(0)), self.ptr(ins[0])], some)?);
            }
            Op::Cast { .. } | Op::Reshape { .. } => {
                let pw = Pointwise {
                    shape: vec![n],
                    out: Operand::contiguous(odt, &[n]),
                    ins: vec![Operand::contiguous(cx.idt(0), &[n])],
                    body: Body::Copy,
                };
                v.push(self.pointwise(pw, vec![self.ptr(cx.out(0)), self.ptr(ins[0])], some)?);
            }
            Op::Broadcast { .. } => {
                let pw = Pointwise {
                    shape: os.clone(),
                    out: Operand::contiguous(odt, &os),
                    ins: vec![Operand { dtype: cx.idt(0), strides: broadcast_strides(&cx.ishape(0), &os) }],
                    body: Body::Copy,
                };
                v.push(self.pointwise(pw, vec![self.ptr(cx.out(0)), self.ptr(ins[0])], some)?);
            }
            Op::Permute { perm } => {
                let xs = contiguous_strides(&cx.ishape(0));
                let (dst, odt) = self.destination(cx.out(0));
                // Reading the source of the slice before it (`sliced_permutes`).
                let sliced = self.fusion.sliced_permutes.get(&id).copied();
                let (strides, src) = match sliced {
                    Some(vp) => {
                        let g = &self.plan.program.graph;
                        let (st, off) = crate::fusion::sliced_permute_strides(g, id, vp)
                            .ok_or_else(|| node_error(node, id, "sliced permute: strides do not compose"))?;
                        (st, self.ptr_at(vp.source, off))
                    }
                    None => (perm.iter().map(|&p| xs[p]).collect(), self.ptr(ins[0])),
                };
                let pw = Pointwise {
                    shape: os.clone(),
                    out: Operand::contiguous(odt, &os),
                    ins: vec![Operand { dtype: cx.idt(0), strides }],
                    body: Body::Copy,
                };
                v.push(self.pointwise(pw, vec![self.ptr(dst), src], some)?);
            }
            Op::Slice { axis, start, .. } => {
                let xs = contiguous_strides(&cx.ishape(0));
                let pw = Pointwise {
                    shape: os.clone(),
                    out: Operand::contiguous(odt, &os),
                    ins: vec![Operand { dtype: cx.idt(0), strides: xs.clone() }],
                    body: Body::Copy,
                };
                let src = self.ptr_at(ins[0], *start as u64 * xs[*axis]);
                v.push(self.pointwise(pw, vec![self.ptr(cx.out(0)), src], some)?);
            }
            Op::Concat { axis } => {
                let ost = contiguous_strides(&os);
                let mut at = 0u64;
                let views = self.fusion.concat_views.get(&id).cloned().unwrap_or_default();
                // Nested in an outer Concat (`nested_concats`): the parts go to their place there.
                let g = &self.plan.program.graph;
                let (into, base) = match self.fusion.nested_concats.get(&id) {
                    Some(&(o, k)) => {
                        let on = &g.nodes[o as usize];
                        let Op::Concat { axis: oa } = on.op else { unreachable!("nested into a Concat") };
                        let before: usize = on.inputs[..k].iter().map(|&x| g.shape(x)[oa]).sum();
                        let inner: usize = on.outputs[0].shape[oa + 1..].iter().product();
                        (Some(o), (before * inner) as u64)
                    }
                    None => (None, 0),
                };
                let nested_here: Vec<usize> =
                    self.fusion.nested_concats.values().filter(|&&(o, _)| o == id).map(|&(_, k)| k).collect();
                let stored_here: Vec<usize> =
                    self.fusion.products_into_concats.values().filter(|p| p.concat == id).map(|p| p.part).collect();
                let (dst_value, ost_at) = match into {
                    Some(o) => (Value { node: o, index: 0 }, crate::fusion::nested_strides(g, o, &os, &ost)),
                    None => (cx.out(0), ost.clone()),
                };
                for (kk, &part) in ins.iter().enumerate() {
                    let ps = cx.ishape(kk);
                    let len = ps[*axis] as u64;
                    let view = views.iter().find(|(k, _)| *k == kk).map(|&(_, vp)| vp);
                    if nested_here.contains(&kk) || stored_here.contains(&kk) {
                        // Written by the nested Concat, or the product, itself.
                    } else if let (Some(vp), true) = (view, ps.iter().product::<usize>() > 0) {
                        // Read through the permute or slice that made the part (`concat_views`).
                        let vc = crate::fusion::view_part_strides(&self.plan.program.graph, id, vp);
                        let pw = Pointwise {
                            shape: vc.shape,
                            out: Operand { dtype: odt, strides: vc.out },
                            ins: vec![Operand { dtype: cx.idt(kk), strides: vc.ins }],
                            body: Body::Copy,
                        };
                        let dst = self.ptr_at(cx.out(0), at * ost[*axis]);
                        let src = self.ptr_at(vp.source, vc.offset);
                        v.push(self.pointwise(pw, vec![dst, src], some)?);
                    } else if ps.iter().product::<usize>() > 0 {
                        let pw = Pointwise {
                            shape: ps.clone(),
                            out: Operand { dtype: odt, strides: ost_at.clone() },
                            ins: vec![Operand::contiguous(cx.idt(kk), &ps)],
                            body: Body::Copy,
                        };
                        let dst = self.ptr_at(dst_value, base + at * ost[*axis]);
                        v.push(self.pointwise(pw, vec![dst, self.ptr(part)], some)?);
                    }
                    at += len;
                }
            }
            _ => return Err(node_error(node, id, "not an elementwise or layout op")),
        }
        Ok(v)
    }

    /// A run of two or more same-length f32 elementwise nodes (unary, or binary whose operands
    /// are the output's shape, one broadcast value, or a row repeated over the leading axes: a
    /// bias) from `nodes[i]`, as one [`fused::Chain`] launch: it stores only the values
    /// read after the run, and only when no stored value partly overlaps an input (an exact
    /// overlap is safe: every element is loaded before any is stored). Returns the position
    /// after the run.
    pub(super) fn elementwise_chain(
        &mut self,
        nodes: &[u32],
        i: usize,
        skip: &mut std::collections::HashSet<u32>,
        uses: &HashMap<Value, usize>,
    ) -> Result<Option<ChainLowered>> {
        let g = &self.plan.program.graph;
        let f32 = |v: Value| g.dtype(v) == DType::F32;
        let groups = self.config.chain_groups;
        let len = |id: u32| {
            let n = &g.nodes[id as usize];
            let out = Value { node: id, index: 0 };
            let ok = match n.op {
                Op::Unary(_) => f32(n.inputs[0]) && g.ty(n.inputs[0]).numel() == n.outputs[0].numel(),
                Op::Binary(_) => n.inputs.iter().all(|&x| {
                    let b = chain_broadcast(g.shape(x), &n.outputs[0].shape);
                    f32(x) && b.is_some_and(|b| groups || !matches!(b, fused::Broadcast::Group { .. }))
                }),
                _ => false,
            };
            (ok && f32(out)).then(|| n.outputs[0].numel())
        };
        let Some(n) = len(nodes[i]) else { return Ok(None) };
        let mut end = i + 1;
        while end < nodes.len() && !skip.contains(&nodes[end]) && len(nodes[end]) == Some(n) {
            end += 1;
        }
        // A lone node is a chain of one where the node after it reduces its output whole: the
        // reduction then runs in its launch (`Lowerer::chain_reduction`), and the value (a
        // square before its sum, Diakosmos's norms of each group) is never stored.
        let out = Value { node: nodes[i], index: 0 };
        let reduced_next = nodes.get(end).is_some_and(|&next| {
            let r = &g.nodes[next as usize];
            !skip.contains(&next) && matches!(r.op, Op::Reduce { .. }) && r.inputs[0] == out
        });
        let alone = end == i + 1 && self.config.chain_column_sums && reduced_next && uses.get(&out) == Some(&1);
        let shortest = if alone { 1 } else { 2 };
        while end - i >= shortest {
            let run = &nodes[i..end];
            let step_of: HashMap<u32, usize> = run.iter().enumerate().map(|(k, &id)| (id, k)).collect();
            let mut inputs: Vec<Value> = vec![];
            let mut steps = vec![];
            let mut inner_uses: HashMap<u32, usize> = HashMap::new();
            for &id in run {
                let node = &g.nodes[id as usize];
                // A reshape of a run's value is that value: read from memory it would be the
                // slot's contents before this launch stores it. Only direct reads count as
                // inner uses, so a value a reshape also passes on is still stored.
                let mut src = |x: Value| {
                    let root = through_reshapes(g, x);
                    match step_of.get(&root.node) {
                        Some(&k) if root.index == 0 => {
                            if root == x {
                                *inner_uses.entry(x.node).or_default() += 1;
                            }
                            fused::Src::Step(k)
                        }
                        _ => {
                            let at = inputs.iter().position(|&v| v == x).unwrap_or_else(|| {
                                inputs.push(x);
                                inputs.len() - 1
                            });
                            fused::Src::Input(at)
                        }
                    }
                };
                steps.push(match node.op {
                    Op::Unary(u) => fused::Step::Unary(u, src(node.inputs[0])),
                    Op::Binary(b) => {
                        let (x, y) = (src(node.inputs[0]), src(node.inputs[1]));
                        fused::Step::Binary(b, x, y)
                    }
                    _ => unreachable!("only elementwise nodes join a run"),
                });
            }
            let outputs: Vec<usize> = (0..run.len())
                .filter(|&k| {
                    let v = Value { node: run[k], index: 0 };
                    uses.get(&v).copied().unwrap_or(0) > inner_uses.get(&run[k]).copied().unwrap_or(0)
                })
                .collect();
            let out_values: Vec<Value> = outputs.iter().map(|&k| Value { node: run[k], index: 0 }).collect();
            // What the chain reads in memory: its inputs, and the sources of those it reads in
            // place of their slices (`chain_slices`).
            let sliced: Vec<Value> =
                inputs.iter().filter_map(|x| self.fusion.chain_slices.get(x).map(|(_, read)| read.source)).collect();
            let read: Vec<Value> = inputs.iter().copied().chain(sliced.iter().copied()).collect();
            // Outputs that only a later bf16 cast reads go straight into the cast's slot, when
            // nothing the chain reads or the launches up to the cast read or write meets it.
            let mut into_casts = vec![];
            for &v in &out_values {
                let Some(&cast) = self.cast_candidates.get(&v) else { continue };
                let Some(pc) = nodes.iter().position(|&n| n == cast) else { continue };
                if self.fusion.store_as.contains_key(&v) || skip.contains(&cast) || pc < end {
                    continue;
                }
                let cv = Value { node: cast, index: 0 };
                let Some(slot) = range(self.plan, cv) else { continue };
                let meets = |x: Value| range(self.plan, x).is_some_and(|r| overlap(r, slot));
                let chain_reads = read.iter().any(|&x| meets(x));
                let chain_writes = out_values.iter().any(|&o| o != v && meets(self.destination(o).0));
                let between = nodes[end..pc].iter().any(|&id| {
                    let n = &g.nodes[id as usize];
                    n.inputs.iter().copied().chain(self.fusion.sliced_reads(id)).any(meets)
                        || (0..n.outputs.len()).any(|k| meets(Value { node: id, index: k as u16 }))
                });
                if !(chain_reads || chain_writes || between) {
                    into_casts.push((v, cv));
                }
            }
            for &(v, cv) in &into_casts {
                self.fusion.store_as.insert(v, cv);
            }
            // Outputs that other launches read as well as a bf16 cast soon after: the chain
            // stores the bf16 copy too, into the cast's slot (a bias gradient's reduction reads
            // the f32 value, the products after it the copy), when nothing the chain reads or the
            // launches up to the cast read or write meets that slot.
            let mut copies: Vec<(usize, Value)> = vec![];
            for (&k, &v) in outputs.iter().zip(&out_values) {
                if self.fusion.store_as.contains_key(&v) {
                    continue;
                }
                let reach = &nodes[end..(end + COPY_REACH).min(nodes.len())];
                let Some(pc) = reach.iter().position(|&c| {
                    let cn = &g.nodes[c as usize];
                    !skip.contains(&c) && cn.op == Op::Cast { to: DType::BF16 } && cn.inputs[0] == v
                }) else {
                    continue;
                };
                let cv = Value { node: reach[pc], index: 0 };
                let Some(slot) = range(self.plan, cv) else { continue };
                let meets = |x: Value| range(self.plan, x).is_some_and(|r| overlap(r, slot));
                let chain_meets =
                    read.iter().any(|&x| meets(x)) || out_values.iter().any(|&o| meets(self.destination(o).0));
                // (A Concat reading a part through its view reads the view's source too; one
                // nested in an outer Concat writes the outer's output.)
                let through_views =
                    |id: u32| self.fusion.concat_views.get(&id).into_iter().flatten().map(|p| p.1.source);
                let nested = |id: u32| self.fusion.nested_concats.get(&id).map(|&(o, _)| Value { node: o, index: 0 });
                let between = reach[..pc].iter().any(|&id| {
                    let n = &g.nodes[id as usize];
                    let sliced = self.fusion.sliced_reads(id);
                    n.inputs.iter().copied().chain(through_views(id)).chain(nested(id)).chain(sliced).any(meets)
                        || (0..n.outputs.len()).any(|j| meets(Value { node: id, index: j as u16 }))
                });
                if !(chain_meets || between) {
                    copies.push((k, cv));
                }
            }
            // A bf16 store (into a cast's slot) may not meet an input at all: its elements are
            // half the size, so even the same start is a different element.
            // An input that is a slice of a run's value would read the slot before the run
            // stores it (a reshape is read as the value itself, above).
            let views_a_step = inputs.iter().any(|&x| {
                let mut x = x;
                while let Op::Reshape { .. } | Op::Slice { .. } = g.nodes[x.node as usize].op {
                    x = g.nodes[x.node as usize].inputs[0];
                }
                step_of.contains_key(&x.node)
            });
            // Each input smaller than the run is read the one way every node reading it reads it
            // against its own output's shape: a run's nodes share the element count, not always
            // the shape (`[2, 19, 70]` beside `[38, 7, 10]`), and a held value read against
            // another shape would be read at the wrong element, or past its end.
            let read_as = |x: Value| -> Option<fused::Broadcast> {
                let mut ways = run.iter().filter_map(|&r| {
                    let node = &g.nodes[r as usize];
                    let reads = node.inputs.iter().any(|&y| {
                        y == x
                            || matches!(g.nodes[y.node as usize].op, Op::Unary(_))
                                && g.nodes[y.node as usize].inputs[0] == x
                    });
                    reads.then(|| chain_broadcast(g.shape(x), &node.outputs[0].shape))
                });
                let first = ways.next().flatten()?;
                ways.all(|w| w == Some(first)).then_some(first)
            };
            let misread = inputs.iter().any(|&x| g.ty(x).numel() < n && read_as(x).is_none());
            // A source read in place of its slice is read at other elements than those stored:
            // no store may meet it at all.
            let clash = views_a_step
                || misread
                || out_values.iter().any(|&o| {
                    let (dst, dt) = self.destination(o);
                    let ro = range(self.plan, dst);
                    let on_source = sliced.iter().any(|&x| match (ro, range(self.plan, x)) {
                        (Some(a), Some(b)) => overlap(a, b),
                        _ => true,
                    });
                    on_source
                        || inputs.iter().any(|&x| match (ro, range(self.plan, x)) {
                            (Some(a), Some(b)) => overlap(a, b) && (a != b || dt == DType::BF16),
                            _ => false,
                        })
                });
            if clash {
                for (v, _) in &into_casts {
                    self.fusion.store_as.remove(v);
                }
            } else {
                skip.extend(into_casts.iter().map(|&(_, cv)| cv.node));
                skip.extend(copies.iter().map(|&(_, cv)| cv.node));
                let mut dests: Vec<(Value, DType)> = out_values.iter().map(|&v| self.destination(v)).collect();
                dests.extend(copies.iter().map(|&(_, cv)| (cv, DType::BF16)));
                let mut outputs = outputs;
                outputs.extend(copies.iter().map(|&(k, _)| k));
                let bf16 = dests.iter().map(|d| d.1 == DType::BF16).collect();
                let read = inputs.clone();
                let (inputs, steps, outputs) = if self.config.recompute_unary {
                    recompute_unary_inputs(g, inputs, steps, outputs)
                } else {
                    (inputs, steps, outputs)
                };
                for x in read.into_iter().filter(|x| !inputs.contains(x)) {
                    for &r in run.iter().filter(|&&r| g.nodes[r as usize].inputs.contains(&x)) {
                        self.recomputed_reads.insert((x, r));
                    }
                }
                // How each input is read: a run's nodes all have `n` elements, so an input of
                // fewer is a scalar or a row of the outputs' shape.
                let broadcast = inputs
                    .iter()
                    .map(|&x| match (self.fusion.chain_slices.get(&x), read_as(x)) {
                        (Some((_, read)), _) => {
                            let (inner, mid, mid_step, outer_step) =
                                read.chain_steps(g.shape(x)).expect("chain_slices checked the steps");
                            fused::Broadcast::Strided { inner, mid, mid_step, outer_step }
                        }
                        (None, Some(b)) if g.ty(x).numel() < n => b,
                        _ => fused::Broadcast::None,
                    })
                    .collect();
                let chain = fused::Chain { n, inputs: inputs.len(), steps, outputs, bf16, broadcast };
                let kernel =
                    self.kernel(chain.kernel().map_err(|e| node_error(&g.nodes[run[0] as usize], run[0], e))?)?;
                let mut args: Vec<A> = dests.iter().map(|&(v, _)| self.ptr(v)).collect();
                args.extend(inputs.iter().map(|&v| self.sliced_operand(v).map_or_else(|| self.ptr(v), |(_, p)| p)));
                let (blocks, threads) = grid_blocks(n);
                let pending =
                    Pending { kernel, grid: (blocks, 1, 1), block: (threads, 1, 1), args, node: Some(run[0]) };
                let dests = dests.into_iter().map(|(v, _)| v).collect();
                let copies = copies.iter().map(|&(_, cv)| cv).collect();
                return Ok(Some(ChainLowered { end, copies, pending, chain, inputs, dests, run: run.to_vec() }));
            }
            end -= 1;
        }
        Ok(None)
    }

    /// A slice input read in place (`chain_slices`): the source's strides over the slice's
    /// shape, and the pointer to the slice's first element in the source.
    fn sliced_operand(&self, x: Value) -> Option<(Vec<u64>, A)> {
        let (_, read) = self.fusion.chain_slices.get(&x)?;
        Some((read.strides.clone(), self.ptr_at(read.source, read.offset)))
    }

    /// One launch for consecutive parameter casts: a chunk table of (source, destination,
    /// length) in the constant region.
    pub(super) fn lower_param_casts(&mut self, ids: &[u32]) -> Result<Pending> {
        let g = &self.plan.program.graph;
        let tensors: Vec<(usize, usize, usize)> = ids
            .iter()
            .map(|&id| {
                let n = &g.nodes[id as usize];
                let out = Value { node: id, index: 0 };
                (self.plan.slot(n.inputs[0]).offset, self.plan.slot(out).offset, n.outputs[0].numel())
            })
            .collect();
        let first = &g.nodes[ids[0] as usize];
        let (bytes, chunks) = multi::cast_table(&tensors).map_err(|e| node_error(first, ids[0], e))?;
        let table = self.constant(bytes);
        let kernel = self.kernel(multi::cast_kernel())?;
        let args = multi::cast_arguments([A::Ptr(0), A::Ptr(table)]);
        Ok(Pending { kernel, grid: (chunks as u32, 1, 1), block: (multi::THREADS, 1, 1), args, node: Some(ids[0]) })
    }
}

/// The output operand of an elementwise op whose result Permute `p` alone reads, stored in the
/// permute's place: over the op's shape, each element at the offset the permute moves it to.
fn permuted_operand(g: &alpha_ir::Graph, p: u32, dtype: DType) -> Operand {
    let n = &g.nodes[p as usize];
    let Op::Permute { perm } = &n.op else { unreachable!("a permuted store names its Permute") };
    let dest = contiguous_strides(&n.outputs[0].shape);
    let mut strides = vec![0u64; perm.len()];
    for (k, &a) in perm.iter().enumerate() {
        strides[a] = dest[k];
    }
    Operand { dtype, strides }
}

impl Lowerer<'_> {
    /// The Permute right after plain elementwise node `nodes[i]` (a Unary or Binary not in a
    /// chain, its f32 output read by the permute alone) whose place the op can store into: the
    /// permute then never runs. Its place must be clear of every input the op reads. Why: Polf's
    /// q gain and the attention's layouts: `[B, T, H, D]` scaled, then copied whole to
    /// `[B, H, T, D]` (134 MB read and written at 64 windows, in each of 9 blocks).
    pub(super) fn permuted_store(
        &self,
        nodes: &[u32],
        i: usize,
        skip: &std::collections::HashSet<u32>,
        uses: &HashMap<Value, usize>,
    ) -> Option<u32> {
        if !self.config.permuted_stores {
            return None;
        }
        let g = self.g();
        let id = nodes[i];
        let n = &g.nodes[id as usize];
        let out = Value { node: id, index: 0 };
        let plain = matches!(n.op, Op::Unary(_) | Op::Binary(_))
            && n.outputs[0].dtype == DType::F32
            && self.destination(out).0 == out
            && uses.get(&out).copied() == Some(1);
        let &p = nodes.get(i + 1).filter(|p| !skip.contains(p))?;
        let pn = &g.nodes[p as usize];
        let permute = matches!(pn.op, Op::Permute { .. }) && pn.inputs[0] == out;
        let rng = |v: Value| range(self.plan, v);
        let clear = rng(Value { node: p, index: 0 }).is_some_and(|dst| clear_of(dst, n.inputs.iter().map(|&x| rng(x))));
        let in_place = n.inputs.iter().all(|&x| self.sliced_operand(x).is_none());
        (plain && permute && clear && in_place).then_some(p)
    }
}

/// Launches after a chain among which it looks for a bf16 cast of an output read elsewhere too.
const COPY_REACH: usize = 4;

/// The value `x` is a reshape (or reshapes) of: the same elements in the same order.
fn through_reshapes(g: &alpha_ir::Graph, mut x: Value) -> Value {
    while let Op::Reshape { .. } = g.nodes[x.node as usize].op {
        x = g.nodes[x.node as usize].inputs[0];
    }
    x
}

/// How a chain reads an operand of shape `x` for an output of shape `out`: at its own element
/// (the same shape), as one value (a single element), as a row repeated over the leading axes
/// (`x` the output's trailing axes, leading 1s aside), or as values each held over the
/// output's last axes where `x` has trailing 1s (`[N, 7, 1]` or `[7, 1]` against `[N, 7, D]`);
/// `None` for any other broadcast.
pub(super) fn chain_broadcast(x: &[usize], out: &[usize]) -> Option<fused::Broadcast> {
    let numel: usize = x.iter().product();
    if x == out {
        return Some(fused::Broadcast::None);
    }
    if numel == 1 {
        return Some(fused::Broadcast::Scalar);
    }
    if numel > u32::MAX as usize {
        return None;
    }
    // x without its leading 1s, aligned with out's last axes: the axes where x has its
    // trailing 1s are those each value is held over.
    let trimmed: Vec<usize> = x.iter().copied().skip_while(|&d| d == 1).collect();
    if trimmed.is_empty() || trimmed.len() > out.len() {
        return None;
    }
    let held = trimmed.iter().rev().take_while(|&&d| d == 1).count();
    let kept = &trimmed[..trimmed.len() - held];
    let at = out.len() - trimmed.len();
    if out[at..at + kept.len()] != *kept {
        return None;
    }
    let inner: usize = out[at + kept.len()..].iter().product();
    match inner {
        1 => Some(fused::Broadcast::Row(numel as u32)),
        _ if inner <= u32::MAX as usize => Some(fused::Broadcast::Group { inner: inner as u32, count: numel as u32 }),
        _ => None,
    }
}
