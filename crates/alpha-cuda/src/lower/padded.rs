//! Matrix products of bf16 operands whose sizes miss the tiled kernels' contract only by
//! alignment (K a multiple of the K step; M, N and every leading dimension multiples of 8):
//! each operand copied into zero-padded scratch, the tiled product over the padded sizes on
//! the `cp.async` wgmma ring, and the wanted rows and columns copied out.
//!
//! Why: such a product otherwise runs on the simple kernel, one thread an output element over
//! global memory, which put Diakosmos's width of 1,330 (7 groups × 190) at 29 s a step on the
//! H200 at 64 windows. The zeros add exact zeros to every f32 sum, so the padded product's
//! bits are the tiled product's on the true sizes.
//!
//! The padded product runs as a product of those sizes does anywhere: on the TMA engine where
//! its shape allows (tensor maps over the scratch operands, placed with the scratch region),
//! and with K split into parts summed in a fixed order where the aligned products' rule splits
//! it ([`GemmShape::split_k_uneven`]). Why: on the `cp.async` ring
//! and unsplit, Diakosmos's products ran at 166–309 TFLOP/s on the H200, where aligned products
//! on the TMA engine reach 500–600.
//!
//! Cost: each operand and the output cross memory twice more (a copy in, a copy out), against
//! a product that then runs on tensor cores.
//!
//! Pitched operands: a bf16 cast that only such products read is written with its rows at an
//! aligned pitch where its writer can (a cast, a LayerNorm storing it, a column sum storing it:
//! [`pitched_candidates`] gives the plan's room, `Lowerer::pitched` records what was written),
//! and a product on the TMA engine reads it in place through a tensor map over its true sizes:
//! the map's bounds give the zeros past its columns (K included) that the padded copy held, so
//! the products' bits are the same. Why: at 64 windows Diakosmos's pad copies of its 1,330- and
//! 3,990-wide operands moved about 28 GB a step (47 ms on the H200).

use super::*;

/// Multiply-adds from which padding pays: below, the simple kernel's one launch beats the
/// copies' (a test's 4 × 8 × 4 product, a small geometry's).
const MIN_WORK: f64 = (1u64 << 24) as f64;

/// The most padding may multiply a product's work by: a K of 8 padded to 64 would do eight
/// times the work, and whether that beats the simple kernel is unmeasured.
const MAX_GROWTH: f64 = 2.0;

/// A product's sizes and their padded sizes.
pub(super) struct Padded {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
    b_batched: bool,
}

/// `x` rounded up to a multiple of `to`.
fn up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// A matrix of one free size `x` and the shared size `k` (each with its padded size) as
/// stored: ((rows, columns), (padded rows, padded columns)), `k` first when `k_first`.
fn stored(k_first: bool, (x, xp): (usize, usize), (k, kp): (usize, usize)) -> ((usize, usize), (usize, usize)) {
    if k_first {
        ((k, x), (kp, xp))
    } else {
        ((x, k), (xp, kp))
    }
}

/// Scratch regions start 256-byte aligned (every pointer 16-byte aligned for vector copies).
fn region(bytes: usize) -> usize {
    up(bytes, 256)
}

impl Padded {
    /// MatMul node `id` when its operands are bf16 and its output f32 (the tiled kernels' types)
    /// and it is not already tiled.
    pub(super) fn of(g: &alpha_ir::Graph, id: u32) -> Option<Padded> {
        let node = &g.nodes[id as usize];
        let Op::MatMul { ta, tb } = node.op else { return None };
        let bf16 = node.inputs.iter().all(|&x| g.dtype(x) == DType::BF16);
        if !bf16 || node.outputs[0].dtype != DType::F32 {
            return None;
        }
        let (sa, sb) = (g.shape(node.inputs[0]), g.shape(node.inputs[1]));
        let ra = sa.len();
        let (m, k) = if ta { (sa[ra - 1], sa[ra - 2]) } else { (sa[ra - 2], sa[ra - 1]) };
        let os = &node.outputs[0].shape;
        let n = os[os.len() - 1];
        let batch = sa[..ra - 2].iter().product();
        let p = Padded { batch, m, n, k, ta, tb, b_batched: sb.len() > 2 };
        let (mp, np, kp) = p.padded();
        let (work, padded_work) = ((batch * m * n * k) as f64, (batch * mp * np * kp) as f64);
        (padded_work >= MIN_WORK && padded_work <= MAX_GROWTH * work).then_some(p)
    }

    fn padded(&self) -> (usize, usize, usize) {
        (up(self.m, 8), up(self.n, 8), up(self.k, gemm::wgmma::BK as usize))
    }

    /// A's stored (rows, columns) and their padded sizes: `[M, K]`, or `[K, M]` transposed.
    fn a_dims(&self) -> ((usize, usize), (usize, usize)) {
        let (mp, _, kp) = self.padded();
        stored(self.ta, (self.m, mp), (self.k, kp))
    }

    /// B's stored (rows, columns) and their padded sizes: `[K, N]`, or `[N, K]` transposed.
    fn b_dims(&self) -> ((usize, usize), (usize, usize)) {
        let (_, np, kp) = self.padded();
        stored(!self.tb, (self.n, np), (self.k, kp))
    }

    /// The tiled product over the padded sizes, reading the padded operands.
    fn shape(&self) -> GemmShape {
        let (mp, np, kp) = self.padded();
        let ((_, _), (ar, ac)) = self.a_dims();
        let ((_, _), (br, bc)) = self.b_dims();
        GemmShape {
            m: mp as u32,
            n: np as u32,
            k: kp as u32,
            batch: self.batch as u32,
            lda: ac as u32,
            ldb: bc as u32,
            ldc: np as u32,
            stride_a: (ar * ac) as u64,
            stride_b: if self.b_batched { (br * bc) as u64 } else { 0 },
            stride_c: (mp * np) as u64,
        }
    }
}

impl Padded {
    /// The tiled product's spec over the padded sizes, before its engine and store are settled.
    fn spec(&self, cfg: &CudaConfig) -> GemmSpec {
        let layout = |t: bool| if t { Layout::ColMajor } else { Layout::RowMajor };
        let spec = GemmSpec {
            tile: self.shape().tile(),
            tuning: cfg.gemm_tuning,
            ..GemmSpec::new(layout(self.ta), layout(self.tb), Input::Bf16)
        };
        match cfg.gemm_engine {
            gemm::Engine::Mma => spec,
            _ => spec.wgmma(),
        }
    }

    /// The product stored in place (`GemmSpec::narrow_store`), where it is one: unbatched, K
    /// whole, on the aligned paths with a staged plain store (a tall output), its width even;
    /// (spec, shape over C's own rows and width).
    fn in_place(&self, cfg: &CudaConfig) -> Option<(GemmSpec, GemmShape)> {
        let (spec, shape) = (self.spec(cfg), self.shape());
        if !(cfg.padded_tma && cfg.narrow_stores && self.batch == 1) || k_parts(cfg, &spec, &shape).is_some() {
            return None;
        }
        let spec = settled(with_ring(cfg, on_tma(cfg, spec, &shape), &shape), &shape);
        let direct = GemmShape { m: self.m as u32, n: self.n as u32, ldc: self.n as u32, ..shape };
        let narrow = GemmSpec { narrow_store: true, ..spec };
        let staged = gemm_tma::staged(&spec) == Some(gemm_tma::Staged::Store);
        (staged && direct.check(&narrow).is_ok()).then_some((narrow, direct))
    }
}

/// Elements (bf16) a pitched operand's rows are aligned to: 128 bytes, a line of the tensor
/// maps' swizzled boxes, as the padded copies' K-major rows were. Why: at a pitch of 16 bytes
/// (the least a map takes) Diakosmos's K-major operands ran their products up to 1.46× slower
/// on the H200 (the q/k/v projection 2.70 → 3.94 ms), each box's rows straddling lines.
const PITCH_ELEMENTS: usize = 64;

/// The bf16 values the plan gives the room of rows at an aligned pitch, with that pitch (in
/// elements): each a Cast to bf16 of a matrix `[rows, cols]` whose rows are not 16 bytes apart,
/// read by nothing but unbatched products that pad (and no program output or assignment).
/// Whether it is written pitched is settled when its writer is lowered (`Lowerer::pitched`);
/// unwritten so, the room is left unused and the products copy it as before.
pub(super) fn pitched_candidates(cfg: &CudaConfig, program: &alpha_ir::Program) -> HashMap<Value, usize> {
    let mut out = HashMap::new();
    if !(cfg.pitched_operands && cfg.padded_tma && cfg.gemm_engine != gemm::Engine::Mma) {
        return out;
    }
    let g = &program.graph;
    let (uses, readers) = readers_of(program);
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::Cast { to: DType::BF16 } = n.op else { continue };
        let v = Value { node: i as u32, index: 0 };
        let shape = &n.outputs[0].shape;
        let [_, cols] = shape.as_slice() else { continue };
        let rs = readers.get(&v).map(Vec::as_slice).unwrap_or(&[]);
        let padded_products = !rs.is_empty()
            && rs.iter().all(|&r| {
                let unbatched = Padded::of(g, r).is_some_and(|p| p.batch == 1);
                unbatched && tiled_gemm(cfg, g, r).is_none()
            });
        if !cols.is_multiple_of(8) && uses.get(&v) == Some(&rs.len()) && padded_products {
            out.insert(v, up(*cols, PITCH_ELEMENTS));
        }
    }
    out
}

/// An operand a padded product reads in place, rows `pitch` elements apart.
#[derive(Clone, Copy, Debug)]
pub(super) struct InPlace {
    rows: usize,
    cols: usize,
    pitch: usize,
}

impl InPlace {
    /// The tensor map over it as stored, boxes as `standard`'s (the map over its padded copy).
    fn map(&self, standard: gemm_tma::MapSpec) -> gemm_tma::MapSpec {
        gemm_tma::MapSpec {
            inner: self.cols as u64,
            outer: self.rows as u64,
            stride_bytes: self.pitch as u64 * 2,
            ..standard
        }
    }
}

/// The phase's padded products stored in place whose output only an Add of a bias row (one
/// value a column, f32) launched right after them reads: the product adds the row as it
/// stores, into the Add's output, and the Add does not launch (`GemmSpec::narrow_bias`).
/// Diakosmos's q/k/v projection at 64 windows: its bias Add read and wrote 2.1 GB. Records
/// them in `fp.padded_biases`; returns the Adds to skip.
pub(super) fn padded_biases(
    cfg: &CudaConfig,
    (ph, uses): (&PhaseView, &HashMap<Value, usize>),
    skip: &std::collections::HashSet<u32>,
    fp: &mut FusionPlan,
) -> Vec<u32> {
    let (g, mut adds) = (ph.g, vec![]);
    for pair in ph.nodes.windows(2) {
        let (mm, add) = (pair[0], pair[1]);
        let out = Value { node: mm, index: 0 };
        // (A product the tiled kernels take as it is never pads.)
        let Some(p) = Padded::of(g, mm).filter(|_| tiled_gemm(cfg, g, mm).is_none()) else { continue };
        let an = &g.nodes[add as usize];
        let Op::Binary(alpha_ir::Binary::Add) = an.op else { continue };
        let Some(&bias) = an.inputs.iter().find(|&&x| x != out) else { continue };
        let row = g.shape(bias).last() == Some(&p.n) && g.ty(bias).numel() == p.n;
        let reads = an.inputs.contains(&out) && uses.get(&out) == Some(&1);
        let f32s = g.dtype(bias) == DType::F32 && an.outputs[0].dtype == DType::F32;
        let free =
            !skip.contains(&mm) && !skip.contains(&add) && !fp.store_as.contains_key(&Value { node: add, index: 0 });
        let same_shape = an.outputs[0].shape == g.nodes[mm as usize].outputs[0].shape;
        // The row is read while C is stored: the Add's output must not lie on it.
        let apart = ph.range(Value { node: add, index: 0 }).is_some_and(|slot| clear_of(slot, [ph.range(bias)]));
        if row && reads && f32s && free && same_shape && apart && p.in_place(cfg).is_some() {
            fp.padded_biases.insert(mm, (add, bias));
            adds.push(add);
        }
    }
    adds
}

impl Lowerer<'_> {
    /// The launches of a padded product for MatMul node `id` (see the module's doc).
    pub(super) fn lower_padded_product(&mut self, id: u32, p: &Padded) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let node = &cx.node;
        let shape = p.shape();
        let spec = p.spec(self.config);
        // The launch the product runs as: stored in place (a tall output, C's own rows and
        // width), K in parts summed in a fixed order into the padded output, or whole.
        let aligned_paths = self.config.padded_tma;
        let in_place = p.in_place(self.config);
        let parts = match (&in_place, aligned_paths) {
            (None, true) => k_parts(self.config, &spec, &shape),
            _ => None,
        };
        let main = match (&in_place, parts) {
            (Some((narrow, _)), _) => *narrow,
            (None, Some((splits, part))) => {
                let uneven = !shape.k.is_multiple_of(spec.bk * splits);
                let pspec = GemmSpec { tile: gemm::Tile::T128x128, uneven_split: uneven, ..spec };
                with_ring(self.config, on_tma(self.config, pspec, &part), &part)
            }
            (None, None) => match aligned_paths {
                true => settled(with_ring(self.config, on_tma(self.config, spec, &shape), &shape), &shape),
                false => with_ring(self.config, spec, &shape),
            },
        };
        // Each operand copied into zero-padded scratch, or, written pitched, read in place by
        // the TMA engine's maps (module doc).
        let reads_in_place = main.engine == gemm::Engine::Tma && p.batch == 1;
        let b_count = if p.b_batched { p.batch } else { 1 };
        let some = Some(id);
        let mut v = vec![];
        let (mut places, mut direct) = ([A::Scratch(0); 2], [None; 2]);
        let mut c_at = 0;
        for (k, (value, count, ((rows, cols), padded))) in
            [(node.inputs[0], p.batch, p.a_dims()), (node.inputs[1], b_count, p.b_dims())].into_iter().enumerate()
        {
            let (src, pitch) = (self.ptr(value), self.pitched.get(&value).copied());
            match pitch.filter(|_| reads_in_place) {
                Some(pitch) => (places[k], direct[k]) = (src, Some(InPlace { rows, cols, pitch })),
                None => {
                    v.extend(self.pad_into(src, (count, rows, cols, pitch.unwrap_or(cols)), padded, c_at, some)?);
                    places[k] = A::Scratch(c_at);
                    c_at += region(count * padded.0 * padded.1 * 2);
                }
            }
        }
        let [pa, pb] = places;
        let (mp, np, _) = p.padded();
        let parts_at = c_at + region(p.batch * mp * np * 4);
        self.need_scratch(if in_place.is_some() { c_at } else { parts_at });
        let pc = A::Scratch(c_at);
        // A tall output stored in place, C's own rows and width, not copied out of a padded
        // one; with the bias row of the Add after it added, into the Add's output
        // (`padded_biases`).
        if let Some((narrow, direct_shape)) = in_place {
            let (narrow, c, bias) = match self.fusion.padded_biases.get(&id) {
                Some(&(add, row)) => {
                    let c = self.ptr(Value { node: add, index: 0 });
                    (GemmSpec { narrow_bias: true, ..narrow }, c, Some(self.ptr(row)))
                }
                None => (narrow, self.ptr(cx.out(0)), None),
            };
            v.push(self.tiled_launch_with(&narrow, &direct_shape, [pa, pb, c], bias, direct, some)?);
            return Ok(v);
        }
        if let Some((splits, part)) = parts {
            part.check(&main).map_err(|e| node_error(node, id, format!("padded product: {e:#}")))?;
            let mn = (mp * np) as u32;
            self.need_scratch(parts_at + mn as usize * splits as usize * 4);
            let parts = A::Scratch(parts_at);
            v.push(self.tiled_launch_with(&main, &part, [pa, pb, parts], None, direct, some)?);
            let args = gemm::splitk_reduce_arguments([pc, pc, parts], None);
            let width = gemm::splitk_reduce_width(mn, aligned16(&args));
            let kernel = self.kernel(gemm::splitk_reduce_kernel(&spec, splits, mn, width))?;
            let grid = (gemm::splitk_reduce_blocks(mn, width), 1, 1);
            v.push(Pending { kernel, grid, block: (gemm::REDUCE_THREADS, 1, 1), args, node: some });
        } else {
            shape.check(&main).map_err(|e| node_error(node, id, format!("padded product: {e:#}")))?;
            v.push(self.tiled_launch_with(&main, &shape, [pa, pb, pc], None, direct, some)?);
        }
        // The wanted rows and columns out of the padded product.
        let out = [p.batch, p.m, p.n];
        let copy = Pointwise {
            shape: out.to_vec(),
            out: Operand::contiguous(DType::F32, &out),
            ins: vec![Operand { dtype: DType::F32, strides: vec![(mp * np) as u64, np as u64, 1] }],
            body: Body::Copy,
        };
        v.push(self.pointwise(copy, vec![self.ptr(cx.out(0)), A::Scratch(c_at)], some)?);
        Ok(v)
    }

    /// The tiled product's launch of `spec` over `shape` reading `a` and `b` (scratch places,
    /// or operands read in place through maps over their true sizes, `direct`) and storing `c`,
    /// with a narrow store's bias row (`GemmSpec::narrow_bias`): its tensor maps where it runs
    /// on the TMA engine.
    fn tiled_launch_with(
        &mut self,
        spec: &GemmSpec,
        shape: &GemmShape,
        [a, b, c]: [A; 3],
        bias: Option<A>,
        direct: [Option<InPlace>; 2],
        node: Option<u32>,
    ) -> Result<Pending> {
        if spec.engine != gemm::Engine::Tma && direct.iter().any(Option::is_some) {
            bail!("an operand read in place needs the TMA engine");
        }
        let kernel = self.kernel(spec.kernel())?;
        let maps = self.maps_over(spec, shape, [a, b], |k, map| direct[k].map_or(map, |d| d.map(map)))?;
        let ops = gemm::Operands { maps, bias, ..gemm::Operands::new([a, b, c, c]) };
        let args = gemm::arguments(shape, ops);
        Ok(Pending { kernel, grid: spec.grid(shape), block: (spec.threads(), 1, 1), args, node })
    }

    /// Copies `count` bf16 matrices of `rows × cols` at `src` (rows `pitch` elements apart)
    /// into scratch at `at` as `rows_p × cols_p` ones, zero beyond: the copy, then the right
    /// and bottom margins filled.
    fn pad_into(
        &mut self,
        src: A,
        (count, rows, cols, pitch): (usize, usize, usize, usize),
        (rows_p, cols_p): (usize, usize),
        at: usize,
        node: Option<u32>,
    ) -> Result<Vec<Pending>> {
        let padded = vec![(rows_p * cols_p) as u64, cols_p as u64, 1];
        let bf16 = |strides: Vec<u64>| Operand { dtype: DType::BF16, strides };
        let mut v = vec![];
        let copy = Pointwise {
            shape: vec![count, rows, cols],
            out: bf16(padded.clone()),
            ins: vec![bf16(vec![(rows * pitch) as u64, pitch as u64, 1])],
            body: Body::Copy,
        };
        v.push(self.pointwise(copy, vec![A::Scratch(at), src], node)?);
        let fill =
            |shape: Vec<usize>| Pointwise { shape, out: bf16(padded.clone()), ins: vec![], body: Body::Fill(0.0) };
        if cols_p > cols {
            let right = fill(vec![count, rows, cols_p - cols]);
            v.push(self.pointwise(right, vec![A::Scratch(at + cols * 2)], node)?);
        }
        if rows_p > rows {
            let bottom = fill(vec![count, rows_p - rows, cols_p]);
            v.push(self.pointwise(bottom, vec![A::Scratch(at + rows * cols_p * 2)], node)?);
        }
        Ok(v)
    }
}
