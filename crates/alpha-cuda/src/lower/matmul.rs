//! MatMul nodes: the tiled product (its engine, ring, split-K and the epilogue the fusion plan
//! gives it) or the simple kernel, and the merges done on a phase's launched products (an
//! elementwise chain run in a product's epilogue, activations nothing reads left unstored, the
//! gated pair and the paired products as one launch).

use super::*;

/// A product a merge pass may fold into one launch with another: on the TMA engine in
/// 128 × 128 tiles, A row-major, B in `b`'s layout, storing its tile whole (no heads or
/// chain).
pub(super) fn mergeable_tile(s: &GemmSpec, b: Layout) -> bool {
    s.engine == gemm::Engine::Tma
        && s.tile == gemm::Tile::T128x128
        && (s.a, s.b) == (Layout::RowMajor, b)
        && s.heads.is_none()
        && s.chain.is_none()
}

impl Lowerer<'_> {
    /// A MatMul node: the tiled product with the fusions planned for it, or the simple kernel.
    pub(super) fn lower_matmul(&mut self, id: u32) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (g, node, ins) = (cx.g, &cx.node, &cx.node.inputs);
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::MatMul { .. } => {
                if let Some((mut spec, shape)) = tiled_gemm(self.config, g, id) {
                    // Fusions decided per phase by `fuse`: f32 sources read with convert-on-load
                    // (the skipped casts' exact rounding), the following Add as the epilogue.
                    let (a, b) = self.fusion.f32_operands(id).copied().unwrap_or((ins[0], ins[1]));
                    let input = |v: Value| if g.dtype(v) == DType::F32 { Input::F32 } else { Input::Bf16 };
                    (spec.a_input, spec.b_input) = (input(a), input(b));
                    // C is the product, or the bf16 cast it stores rounded (`casts_into_products`).
                    let (dest, dest_dtype) = self.destination(cx.out(0));
                    let (c, r) = match self.fusion.residual_add(id) {
                        Some(&(add, r)) => {
                            spec.epilogue = Epilogue::AddResidual;
                            (Value { node: add, index: 0 }, r)
                        }
                        None => (dest, dest),
                    };
                    let act = self.fusion.activation(id).copied();
                    spec.activation = act.map(|x| x.1);
                    // A multiply after it as its epilogue: R = its other operand, U = its cast.
                    let mul = self.fusion.mul(id).copied();
                    let (c, r) = match mul {
                        Some((_, rv, _, u)) => {
                            spec.epilogue = Epilogue::StoreMul;
                            spec.activation = u;
                            (c, rv)
                        }
                        None => (c, r),
                    };
                    // Stored split into heads where the Permute after it was fused.
                    let (c, r) = match self.fusion.heads(id) {
                        Some(&(p, heads)) => {
                            spec.heads = Some(heads);
                            (Value { node: p, index: 0 }, Value { node: p, index: 0 })
                        }
                        None => (c, r),
                    };
                    // dO as bf16 with attention's delta, into held memory the backward reads:
                    // (O, and the held offsets of dO and delta).
                    let mut delta = None;
                    if let (Some(&(attn, o)), Some(h)) = (self.fusion.delta(id), spec.heads.as_mut()) {
                        h.delta = true;
                        let rows = (h.batch * h.heads * h.t) as usize;
                        let sizes = (rows * h.d as usize * 2, rows * 4);
                        let at = match self.delta_regions.get(&sizes) {
                            Some(&at) => at,
                            None => {
                                let at = (self.held(sizes.0), self.held(sizes.1));
                                self.delta_regions.insert(sizes, at);
                                at
                            }
                        };
                        self.delta_at.insert(attn, at);
                        delta = Some((o, at));
                    }
                    let parts = k_parts(self.config, &spec, &shape);
                    let plain = spec.epilogue == Epilogue::Store
                        && spec.activation.is_none()
                        && spec.heads.is_none()
                        && shape.batch == 1
                        && c == cx.out(0);
                    if let Some((splits, part)) = parts {
                        // K in parts into the scratch region, then the fixed-order sum with the
                        // epilogue (which runs after every operand read: the fusions' slot rules
                        // hold a fortiori).
                        let pspec = GemmSpec {
                            epilogue: Epilogue::Store,
                            activation: None,
                            tile: gemm::Tile::T128x128,
                            uneven_split: !shape.k.is_multiple_of(spec.bk * splits),
                            ..spec
                        };
                        let pspec = with_ring(self.config, on_tma(self.config, pspec, &part), &part);
                        let mn = shape.m * shape.n;
                        self.need_scratch(mn as usize * splits as usize * 4);
                        let kernel = self.kernel(pspec.kernel())?;
                        let ops = gemm::Operands {
                            maps: self.maps_for(&pspec, &part, a, b)?,
                            ..gemm::Operands::new([self.ptr(a), self.ptr(b), A::Scratch(0), A::Scratch(0)])
                        };
                        let args = gemm::arguments(&part, ops);
                        let block = (pspec.threads(), 1, 1);
                        v.push(Pending { kernel, grid: pspec.grid(&part), block, args, node: some });
                        self.last_product = Some(ProductLaunch { id, spec, shape, one_launch: false, plain });
                        let u = act.map(|(u, _)| self.ptr(Value { node: u, index: 0 }));
                        let args = gemm::splitk_reduce_arguments([self.ptr(c), self.ptr(r), A::Scratch(0)], u);
                        let width = gemm::splitk_reduce_width(mn, aligned16(&args));
                        let kernel = self.kernel(gemm::splitk_reduce_kernel(&spec, splits, mn, width))?;
                        let blocks = gemm::splitk_reduce_blocks(mn, width);
                        let block = (gemm::REDUCE_THREADS, 1, 1);
                        v.push(Pending { kernel, grid: (blocks, 1, 1), block, args, node: some });
                        return Ok(v);
                    }
                    let spec = settled(with_ring(self.config, on_tma(self.config, spec, &shape), &shape), &shape);
                    let spec = match dest_dtype {
                        DType::BF16 if gemm_tma::staged(&spec) == Some(gemm_tma::Staged::Store) => {
                            GemmSpec { store_bf16: true, ..spec }
                        }
                        DType::BF16 => {
                            return Err(node_error(node, id, format!("{}: cannot store its bf16 cast", spec.name())))
                        }
                        _ => spec,
                    };
                    self.last_product = Some(ProductLaunch { id, spec, shape, one_launch: true, plain });
                    if delta.is_some() && !(spec.engine == gemm::Engine::Tma && gemm_tma::ring_holds_tile(&spec)) {
                        return Err(node_error(node, id, format!("{}: no delta-heads store", spec.name())));
                    }
                    let kernel = self.kernel(spec.kernel())?;
                    // A delta-heads store: C the bf16 dO, R attention's O, U delta.
                    let (c_arg, r_arg, u_delta) = match delta {
                        Some((o, (do16, dl))) => (A::Ptr(do16), self.ptr(o), Some(A::Ptr(dl))),
                        None => (self.ptr(c), self.ptr(r), None),
                    };
                    // The second output: delta, the activation's or the multiply's cast (the
                    // fusion passes give a product one at most).
                    let act_u = act.map(|(u, _)| self.ptr(Value { node: u, index: 0 }));
                    let mul_u = mul.map(|(_, _, cast, _)| self.ptr(cast));
                    let u = match [u_delta, act_u, mul_u] {
                        [None, None, None] => None,
                        [Some(u), None, None] | [None, Some(u), None] | [None, None, Some(u)] => Some(u),
                        _ => return Err(node_error(node, id, "two second outputs fused into one product")),
                    };
                    // Tensor maps before the rotary table: both take their place in the constant
                    // region in this order.
                    let maps = self.maps_for(&spec, &shape, a, b)?;
                    let rot_tab = match spec.heads.is_some_and(|h| h.bf16_turned) {
                        false => None,
                        true => {
                            let Some(base) = self.fusion.turned_base(id) else {
                                return Err(node_error(node, id, "turned heads without their rotary base"));
                            };
                            let t = spec.heads.map_or(0, |h| h.t as usize);
                            Some(A::Ptr(self.rotary_table(t, 64, base)))
                        }
                    };
                    let bias = self.fusion.heads_bias(id).map(|&(_, row)| self.ptr(row));
                    let ops = gemm::Operands {
                        u,
                        maps,
                        rot_tab,
                        bias,
                        ..gemm::Operands::new([self.ptr(a), self.ptr(b), c_arg, r_arg])
                    };
                    let args = gemm::arguments(&shape, ops);
                    v.push(Pending {
                        kernel,
                        grid: spec.grid(&shape),
                        block: (spec.threads(), 1, 1),
                        args,
                        node: some,
                    });
                } else if let Some(p) = padded::Padded::of(g, id) {
                    v.extend(self.lower_padded_product(id, &p)?);
                } else {
                    let Some(p) = simple_product(self.config, g, id) else {
                        return Err(node_error(node, id, format!("matmul of {} operands", cx.idt(0))));
                    };
                    // Stored into its place in the Concat after it (`products_into_concats`).
                    let (p, c) = match self.fusion.products_into_concats.get(&id) {
                        Some(pp) => {
                            let c = self.ptr_at(Value { node: pp.concat, index: 0 }, pp.offset);
                            (Product { c_view: Some(pp.view), ..p }, c)
                        }
                        None => (p, self.ptr(cx.out(0))),
                    };
                    v.extend(self.lower_simple_product(&p, [c, self.ptr(ins[0]), self.ptr(ins[1])], id)?);
                }
            }
            _ => return Err(node_error(node, id, "not a matrix product")),
        }
        Ok(v)
    }

    /// The simple kernel's launch for MatMul `id` writing `c = a·b`; with K split
    /// ([`Product::split_k`]), the parts into the scratch region, then their fixed-order sum
    /// into `c` by the tiled split-K's reduction (a plain store).
    fn lower_simple_product(&mut self, p: &Product, [c, a, b]: [A; 3], id: u32) -> Result<Vec<Pending>> {
        let node = Some(id);
        let kernel = self.kernel(p.kernel())?;
        let (grid, block) = (p.grid(), p.block());
        if p.splits == 1 {
            return Ok(vec![Pending { kernel, grid, block, args: vec![c, a, b], node }]);
        }
        self.need_scratch(p.partial_bytes());
        let parts = Pending { kernel, grid, block, args: vec![A::Scratch(0), a, b], node };
        let mn = (p.batch * p.m * p.n) as u32;
        let args = gemm::splitk_reduce_arguments([c, c, A::Scratch(0)], None);
        let width = gemm::splitk_reduce_width(mn, aligned16(&args));
        let store = GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::F32);
        let kernel = self.kernel(gemm::splitk_reduce_kernel(&store, p.splits, mn, width))?;
        let grid = (gemm::splitk_reduce_blocks(mn, width), 1, 1);
        let sum = Pending { kernel, grid, block: (gemm::REDUCE_THREADS, 1, 1), args, node };
        Ok(vec![parts, sum])
    }

    /// The TMA engine's two tensor-map arguments for a launch of `spec` on `shape` reading
    /// `a` and `b` (none on the other engines).
    pub(super) fn maps_for(
        &mut self,
        spec: &GemmSpec,
        shape: &GemmShape,
        a: Value,
        b: Value,
    ) -> Result<Option<(A, A)>> {
        let (a, b) = (self.ptr(a), self.ptr(b));
        self.maps_over(spec, shape, [a, b], |_, map| map)
    }

    /// [`Self::maps_for`] over operands given as arguments (plan values or scratch places),
    /// each operand's map (0: A's, 1: B's) as `fit` makes it of the one over `shape` (an
    /// operand read in place, `padded`'s, over its true sizes).
    pub(super) fn maps_over(
        &mut self,
        spec: &GemmSpec,
        shape: &GemmShape,
        [a, b]: [A; 2],
        fit: impl Fn(usize, gemm_tma::MapSpec) -> gemm_tma::MapSpec,
    ) -> Result<Option<(A, A)>> {
        if spec.engine != gemm::Engine::Tma {
            return Ok(None);
        }
        gemm_tma::check_shape(spec, shape)?;
        let (ma, mb) = gemm_tma::map_specs(spec, shape);
        Ok(Some((self.tensor_map(a, fit(0, ma))?, self.tensor_map(b, fit(1, mb))?)))
    }

    /// Products whose activation epilogue ([`gemm::GemmSpec::activation`], `u(product)` as a
    /// second output) writes a value no launch reads: every reader of it either multiplies it in
    /// a StoreMul epilogue that computes it from the product itself, or is in a fused chain that
    /// recomputes it. Their launches lose the activation (its kernel and the `u` pointer): a
    /// gated unit's f32 `gelu(gate)`, 92 MB at sixteen contexts, is then never written.
    pub(super) fn dead_activation_stores(
        &mut self,
        view: &PhaseView,
        uses: &HashMap<Value, usize>,
        products: &LaunchedProducts,
        launches: &mut [Pending],
    ) -> Result<()> {
        // In node order, so that the catalog's order does not follow the map's.
        let mut acts: Vec<(u32, u32)> = self.fusion.activations().into_iter().map(|(host, (u, _))| (host, u)).collect();
        acts.sort_unstable();
        for (host, u) in acts {
            let Some(&(li, spec, _)) = products.one_launch.get(&host) else { continue };
            let act = Value { node: u, index: 0 };
            let readers = view.readers(act);
            let multiplied = |r: u32| self.fusion.muls().iter().any(|&(_, (m, _, _, a))| m == r && a.is_some());
            let unread = uses.get(&act).copied() == Some(readers.len())
                && readers.iter().all(|&r| multiplied(r) || self.recomputed_reads.contains(&(act, r)));
            if !unread || spec.activation.is_none() || spec.epilogue != Epilogue::Store {
                continue;
            }
            let spec = GemmSpec { activation: None, ..spec };
            let kernel = self.kernel(spec.kernel())?;
            let p = &mut launches[li];
            // The `u` pointer follows the shape's arguments.
            p.args.remove(gemm::SHAPE_ARGS);
            p.kernel = kernel;
        }
        Ok(())
    }

    /// Runs the chain `cl` (at launch position `i`) in the epilogue of the plain product it reads
    /// ([`gemm::ChainEpilogue`]), where it can: the product is read by the chain alone, has the
    /// chain's shape, and between the two only plain products run (launched as they are, no
    /// fusion moving other stores among them). The chain's outputs are then written while the
    /// product's operands and everything those products read or write are still in use, so
    /// their slots must be clear of all of it; and the chain's other inputs, now read earlier,
    /// must not be written in between. Patches the product's launch (in `launches`) and returns
    /// true, or returns false and changes nothing.
    ///
    /// A chain that stores bf16 copies for casts after it (`cl.copies`) is tried whole, then
    /// without them: Some with `whole` taken whole, Some without it taken without its copies
    /// (whose casts must then run), None not taken.
    pub(super) fn chain_into_product(
        &mut self,
        view: &PhaseView,
        i: usize,
        cl: &ChainLowered,
        launches: &mut [Pending],
        products: &LaunchedProducts,
        uses: &HashMap<Value, usize>,
    ) -> Result<Option<ChainInProduct>> {
        if let Some(taken) = self.chain_into_product_as(view, i, cl, &cl.chain, &cl.dests, launches, products, uses)? {
            return Ok(Some(taken));
        }
        if cl.copies.is_empty() {
            return Ok(None);
        }
        let kept = cl.dests.len() - cl.copies.len();
        let chain = fused::Chain {
            outputs: cl.chain.outputs[..kept].to_vec(),
            bf16: cl.chain.bf16[..kept].to_vec(),
            ..cl.chain.clone()
        };
        let taken = self.chain_into_product_as(view, i, cl, &chain, &cl.dests[..kept], launches, products, uses)?;
        Ok(taken.map(|t| ChainInProduct { whole: false, ..t }))
    }

    /// [`Self::chain_into_product`] for `chain` storing into `dests` (the chain as lowered, or
    /// without its copies).
    #[allow(clippy::too_many_arguments)]
    fn chain_into_product_as(
        &mut self,
        view: &PhaseView,
        i: usize,
        cl: &ChainLowered,
        chain: &fused::Chain,
        dests: &[Value],
        launches: &mut [Pending],
        products: &LaunchedProducts,
        uses: &HashMap<Value, usize>,
    ) -> Result<Option<ChainInProduct>> {
        // A row (a bias) is read at the product's column: as long as its rows. (Other
        // broadcasts `ChainEpilogue::new` refuses.)
        let rows_fit = |n: u32| {
            (0..chain.inputs).all(|j| !matches!(chain.broadcast_of(j), fused::Broadcast::Row(len) if len != n))
        };
        let grids = self.config.chain_epilogues;
        // Sums and products alone (a bias and a residual added): no arithmetic for the tensor
        // cores to wait on, so the epilogue pays over any grid, not only deep ones. Measured on
        // the H200 at sixteen contexts of GPT-2: 40.67 / 40.76 → 39.92 / 40.36 ms a step with
        // its bias-and-residual chains (768 blocks, under eight waves) in their products.
        let adds_alone = chain.steps.iter().all(|st| {
            matches!(st, fused::Step::Binary(alpha_ir::Binary::Add | alpha_ir::Binary::Sub | alpha_ir::Binary::Mul, ..))
        });
        let g = &self.plan.program.graph;
        let operands = |id: u32| {
            let n = &g.nodes[id as usize];
            self.fusion.f32_operands(id).copied().unwrap_or((n.inputs[0], n.inputs[1]))
        };
        // A plain product launched as it is: no fusion writes anything else from its launch.
        let plain =
            |id: u32| products.plain.contains(&id) && !self.writes_beside(id) && self.fusion.activation(id).is_none();
        for (j, &x) in cl.inputs.iter().enumerate() {
            let Some((li, spec, shape)) = products.plain_one_launch(x.node) else { continue };
            let Some(&pg) = view.pos.get(&x.node) else { continue };
            let read_in_run: usize =
                cl.run.iter().map(|&r| g.nodes[r as usize].inputs.iter().filter(|&&y| y == x).count()).sum();
            let whole = x.index == 0
                && (deep_epilogue_grid(&spec, &shape) || grids == ChainEpilogues::Everywhere || adds_alone)
                && plain(x.node)
                && uses.get(&x).copied() == Some(read_in_run)
                && shape.batch == 1
                && shape.ldc == shape.n
                && shape.m as usize * shape.n as usize == chain.n
                && rows_fit(shape.n);
            if !whole || pg >= i {
                continue;
            }
            let Some(ce) = gemm::ChainEpilogue::new(chain, j) else { continue };
            let between = &view.nodes[pg + 1..i];
            let only_products =
                between.iter().all(|&n| matches!(g.nodes[n as usize].op, Op::Reshape { .. }) || plain(n));
            if !only_products {
                continue;
            }
            let rng = |v: Value| range(self.plan, v);
            let (a, b) = operands(x.node);
            let mut touched = vec![rng(a), rng(b)];
            let mut written = vec![];
            for &n in between {
                if matches!(g.nodes[n as usize].op, Op::Reshape { .. }) {
                    continue;
                }
                let (na, nb) = operands(n);
                let out = rng(Value { node: n, index: 0 });
                touched.extend([rng(na), rng(nb), out]);
                written.push(out);
            }
            let dests_clear = dests.iter().all(|&d| rng(d).is_some_and(|r| clear_of(r, touched.iter().copied())));
            let others_unwritten = cl
                .inputs
                .iter()
                .filter(|&&y| y != x)
                .all(|&y| rng(y).is_some_and(|r| clear_of(r, written.iter().copied())));
            if !(dests_clear && others_unwritten) {
                continue;
            }
            let spec = GemmSpec { chain: Some(ce), staged_store: false, ..spec };
            let kernel = self.kernel(spec.kernel())?;
            let p = &mut launches[li];
            // (Two math groups a block give way to one where the chain works in the ring.)
            p.respec(kernel, &spec, &shape);
            // The chain's pointers go after the shape's arguments, before the tensor maps.
            let mut args: Vec<A> = p.args.drain(..gemm::SHAPE_ARGS).collect();
            args.extend(dests.iter().map(|&d| self.ptr(d)));
            args.extend(ce.others().into_iter().map(|k| self.ptr(cl.inputs[k])));
            args.append(&mut p.args);
            p.args = args;
            return Ok(Some(ChainInProduct { whole: true, launch: li, spec, shape }));
        }
        Ok(None)
    }

    /// Whether a fusion has MatMul `id`'s launch write something beside its product, or store
    /// its product elsewhere: a residual added, a multiply, heads, a cast.
    pub(super) fn writes_beside(&self, id: u32) -> bool {
        self.fusion.residual_add(id).is_some()
            || self.fusion.mul(id).is_some()
            || self.fusion.heads(id).is_some()
            || self.fusion.store_as.contains_key(&Value { node: id, index: 0 })
    }

    /// Merges each StoreMul product into the launch right before it where that launch computes
    /// its multiplier's product (a gated unit's gate, `x·W_gate`, beside the up product
    /// `x·W_up`): one gated launch ([`GemmSpec::gated`]) then computes both from the same A
    /// tile, stores the gate as before, and multiplies on registers instead of reading the gate
    /// back. Why: at sixteen contexts the up product read the f32 gate back (92 MB a block).
    /// Runs after [`Self::dead_activation_stores`], which leaves the gate a plain store where
    /// nothing reads its activation. Conditions: both on the TMA engine in 128 × 128 tiles, B
    /// row-major, the same shape, ring and A; the gate's launch storing the gate alone; and the
    /// up product's outputs (now written beside the gate) clear of every operand the merged
    /// launch reads.
    pub(super) fn gated_products(
        &mut self,
        products: &LaunchedProducts,
        launches: &mut [Pending],
        dead: &mut std::collections::HashSet<usize>,
    ) -> Result<()> {
        let tiled = |s: &GemmSpec| mergeable_tile(s, Layout::RowMajor);
        let mut merges = vec![];
        for (up_id, (_, gate, _, _)) in self.fusion.muls() {
            let (Some(&(ui, uspec, ushape)), Some(&(gi, gspec, gshape))) =
                (products.one_launch.get(&up_id), products.one_launch.get(&gate.node))
            else {
                continue;
            };
            // (Its activation store, unread, is gone: `dead_activation_stores` ran first.)
            let fused_elsewhere = self.writes_beside(gate.node);
            let (up, gl) = (&launches[ui], &launches[gi]);
            // The up launch's arguments: a, b, c, r, the shape, u (the bf16 product), its two
            // maps; the gate's, storing the gate alone: a, b, c, r, the shape, its two maps.
            let maps = up.args.len() == gemm::SHAPE_ARGS + 3 && gl.args.len() == gemm::SHAPE_ARGS + 2;
            let fits = gate.index == 0
                && gi + 1 == ui
                && !fused_elsewhere
                && maps
                && uspec.epilogue == Epilogue::StoreMul
                && gspec.epilogue == Epilogue::Store
                && tiled(&uspec)
                && tiled(&gspec)
                && gspec.stages == uspec.stages
                && gshape == ushape
                && ushape.batch == 1;
            if !fits {
                continue;
            }
            let (m, k, ld) = (ushape.m as usize, ushape.k as usize, ushape.ldc as usize);
            let (a_bytes, b_bytes) = (m * ushape.lda as usize * 2, k * ushape.ldb as usize * 2);
            let a = arg_span(up, 0, a_bytes);
            let b_up = arg_span(up, 1, b_bytes);
            let b_gate = arg_span(gl, 1, b_bytes);
            let c_up = arg_span(up, 2, m * ld * 4);
            let c_gate = arg_span(gl, 2, m * ld * 4);
            let u = arg_span(up, gemm::SHAPE_ARGS, m * ld * 2);
            let same_a = a.is_some() && a == arg_span(gl, 0, a_bytes);
            let gate_is_r = c_gate.is_some() && arg_span(up, 3, m * ld * 4) == c_gate;
            let reads = [a, b_up, b_gate];
            let clear = [c_up, u].iter().all(|&w| w.is_some_and(|w| clear_of(w, reads)))
                && c_gate.is_some_and(|w| clear_of(w, [b_up]));
            if same_a && gate_is_r && clear {
                merges.push((gi, ui, GemmSpec { gated: true, ..uspec }, ushape));
            }
        }
        // In launch order, so that the catalog's order does not follow the map's.
        merges.sort_unstable_by_key(|m| m.0);
        for (gi, ui, spec, shape) in merges {
            let kernel = self.kernel(spec.kernel())?;
            let mut args = std::mem::take(&mut launches[ui].args);
            args.push(launches[gi].args.pop().expect("the gate's B map"));
            let l = &mut launches[gi];
            l.respec(kernel, &spec, &shape);
            l.args = args;
            dead.insert(ui);
        }
        Ok(())
    }

    /// Pairs each residual-adding product with the plain product whose output it adds, where
    /// that output is read by nothing else: one launch then sums both products in one
    /// accumulator, `A₁·B₁ + A₂·B₂`, over the two K ([`GemmSpec::k_pair`]), in the second's
    /// place, and the first's f32 output is never stored. Why: a gated unit's input gradient
    /// is `dgate·W_gateᵀ + dup·W_upᵀ`, and at sixteen contexts the first product's f32 output
    /// (32 MB a block) was written and read back. The sum's rounding differs from adding the
    /// two products' results. Conditions: both on the TMA engine in 128 × 128 tiles, both
    /// operands K-major, the same shape and ring; between them only plain products, whose
    /// outputs miss A₁ and B₁ (now read later), as does the second's output.
    pub(super) fn paired_products(
        &mut self,
        products: &LaunchedProducts,
        uses: &HashMap<Value, usize>,
        launches: &mut [Pending],
        dead: &mut std::collections::HashSet<usize>,
    ) -> Result<()> {
        let paired_kind =
            |s: &GemmSpec| mergeable_tile(s, Layout::ColMajor) && s.activation.is_none() && !s.gated && !s.uneven_split;
        let fused = |id: u32| self.writes_beside(id) || self.fusion.activation(id).is_some();
        let mut pairs = vec![];
        for (&first, &(l1, s1, sh1)) in &products.one_launch {
            if !paired_kind(&s1) || s1.epilogue != Epilogue::Store || sh1.batch != 1 || fused(first) {
                continue;
            }
            if !products.plain.contains(&first) || uses.get(&Value { node: first, index: 0 }).copied() != Some(1) {
                continue;
            }
            // The product adding it: the one whose fused Add's residual is this product's output.
            let out1 = Value { node: first, index: 0 };
            let (m, n, c_bytes) = (sh1.m as usize, sh1.n as usize, sh1.m as usize * sh1.ldc as usize * 4);
            let c1 = arg_span(&launches[l1], 2, c_bytes);
            let second = products.one_launch.iter().find(|(id, &(l2, s2, sh2))| {
                self.fusion.residual_add(**id).is_some_and(|&(_, r)| r == out1)
                    && l2 > l1
                    && s2.epilogue == Epilogue::AddResidual
                    && paired_kind(&s2)
                    && sh2 == sh1
                    && s2.stages == s1.stages
                    && c1.is_some()
                    && arg_span(&launches[l2], 3, c_bytes) == c1
            });
            let Some((_, &(l2, s2, sh2))) = second else { continue };
            let (p1, p2) = (&launches[l1], &launches[l2]);
            let maps = p1.args.len() == gemm::SHAPE_ARGS + 2 && p2.args.len() == gemm::SHAPE_ARGS + 2;
            let a1 = arg_span(p1, 0, m * sh1.lda as usize * 2);
            let b1 = arg_span(p1, 1, n * sh1.ldb as usize * 2);
            let c2 = arg_span(p2, 2, c_bytes);
            let between_plain = launches[l1 + 1..l2]
                .iter()
                .all(|l| l.node.is_some_and(|id| products.plain.contains(&id) && !fused(id)));
            let written = launches[l1 + 1..l2]
                .iter()
                .filter_map(|l| l.node)
                .map(|id| range(self.plan, Value { node: id, index: 0 }));
            let kept = [a1, b1];
            let clear = c2.is_some_and(|w| clear_of(w, kept))
                && written.into_iter().all(|w| w.is_some_and(|w| clear_of(w, kept)));
            if maps && between_plain && clear {
                pairs.push((l1, l2, settled(GemmSpec { epilogue: Epilogue::Store, k_pair: true, ..s2 }, &sh2), sh2));
            }
        }
        pairs.sort_unstable_by_key(|p| p.0);
        for (l1, l2, spec, shape) in pairs {
            let kernel = self.kernel(spec.kernel())?;
            let first_maps: Vec<A> = launches[l1].args.split_off(gemm::SHAPE_ARGS);
            let l = &mut launches[l2];
            // R is unread under Store; K is both products'.
            l.args[3] = l.args[2];
            l.args[6] = A::U32(2 * shape.k);
            l.args.extend(first_maps);
            l.respec(kernel, &spec, &shape);
            dead.insert(l1);
        }
        Ok(())
    }
}

/// The simple kernel's product for MatMul node `id` (f32 or bf16 operands), with its parts of K,
/// where the node runs on it: neither the tiled product nor a padded one takes it.
pub(super) fn simple_product(cfg: &CudaConfig, g: &alpha_ir::Graph, id: u32) -> Option<Product> {
    let node = &g.nodes[id as usize];
    let Op::MatMul { ta, tb } = node.op else { return None };
    let dtype = g.dtype(node.inputs[0]);
    let tiled = tiled_gemm(cfg, g, id).is_some() || padded::Padded::of(g, id).is_some();
    if tiled || !matches!(dtype, DType::F32 | DType::BF16) {
        return None;
    }
    let (sa, sb, os) = (g.shape(node.inputs[0]), g.shape(node.inputs[1]), &node.outputs[0].shape);
    let ra = sa.len();
    let (m, k) = if ta { (sa[ra - 1], sa[ra - 2]) } else { (sa[ra - 2], sa[ra - 1]) };
    let batch = sa[..ra - 2].iter().product();
    let p =
        Product { batch, m, n: os[os.len() - 1], k, ta, tb, b_batched: sb.len() > 2, dtype, splits: 1, c_view: None };
    let splits = if cfg.simple_split_k { p.split_k() } else { 1 };
    Some(Product { splits, ..p })
}

/// A chain run in a product's epilogue ([`Lowerer::chain_into_product`]): whether whole (its
/// copies too), and the product's launch with its spec and shape as patched.
pub(super) struct ChainInProduct {
    pub(super) whole: bool,
    pub(super) launch: usize,
    pub(super) spec: GemmSpec,
    pub(super) shape: GemmShape,
}
