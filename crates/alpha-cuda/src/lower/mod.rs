//! Plan → launches: every kernel of every phase becomes one or more GPU launches over one arena.
//!
//! Why: the product's promise is that a whole training step is one compiled program, replayed
//! as one CUDA graph. The plan (`alpha_plan::plan` with byte units) has already placed every
//! value in one arena; what remains is to choose, for each node, the kernel family that computes
//! it and the raw arguments (arena byte offsets, sizes) of each launch. Lowering is pure: it
//! needs no GPU, so the PTX of a whole system can be written out and checked with `ptxas`
//! anywhere, and the backend ([`crate::backend`]) only loads kernels, resolves offsets to device
//! addresses and captures the launches.
//!
//! How: kernels are deduplicated by their PTX text (a transformer's blocks share shapes, so
//! Coppelius needs a few dozen modules for thousands of launches). Beyond the plan's arena the
//! lowering appends a constant region (rotary tables) and one scratch region, reused by every
//! launch that needs temporary space (reduction partials, LayerNorm parameter partials,
//! attention's delta, split-K partial products, the checkpoints of the delta rule's and the
//! harmonic scan's backward passes): launches run in order on one stream, so one
//! region sized for the largest need suffices. Constant nodes are filled once, at load.
//!
//! Fusions: most are decided before a phase is lowered, by the passes of `crate::fusion`,
//! and recorded in its `FusionPlan`, which each family's lowering reads. Those that need the
//! launches as lowered (the spec a product settled on, launch positions) are merged here once a
//! phase's launches are built: a run of elementwise ops as one kernel, and over deep grids in
//! the epilogue of the product it alone reads (`Lowerer::elementwise_chain`,
//! `Lowerer::chain_into_product`); the LayerNorm backward adding the residual gradient and
//! storing its bf16 cast, the RMSNorm backward adding it (`Lowerer::norm_residual`,
//! `Lowerer::cast_of_sum`); activation
//! outputs nothing reads left unstored (`Lowerer::dead_activation_stores`); the gate and up
//! products as one gated launch (`Lowerer::gated_products`) and paired products
//! (`Lowerer::paired_products`); runs of parameter casts and of AdamWs as one launch. Each has
//! a switch ([`CudaConfig`]) to measure it against its absence. The plan is made with lifetime
//! hints ([`lower_program`]) so these fusions find what they need still in place.
//!
//! Files: this one is the driver (the arena's constant and scratch regions, kernels
//! deduplicated, the phase loop, and `lower_node`, which dispatches each node to its family);
//! one file per op family's lowering: `matmul.rs`, `attention.rs` (and rotaries), `layernorm.rs`,
//! `rmsnorm.rs`, `pointwise.rs` (elementwise and layout ops, fused chains, parameter casts),
//! `reduce.rs` (with the bf16 cast a column sum stores), `embedding.rs`, `loss.rs`,
//! `optimizer.rs`, `recurrence.rs` (the linear recurrence, the delta rule, the harmonic scan);
//! `tests.rs`.

use std::collections::HashMap;
use std::fmt;

use alpha_ir::{DType, Node, Op, Value};
use alpha_plan::Plan;
use anyhow::{anyhow, bail, Context, Result};

use crate::config::{ChainEpilogues, CudaConfig};
use crate::fusion::{
    cast_sources_through_their_gemms, casts_into_producers, casts_into_products, chain_slices, clear_of, column_casts,
    concat_view_candidates, concat_views, deep_epilogue_grid, deferred_folds, delta_heads, forward_copies,
    forward_rotaries, fuse, fuse_more, grouped_param_casts, head_split, joint_backward_apart, joint_cross_entropy,
    k_parts, merged_f32_windows, merged_gradients, mul_epilogues, nested_concat_candidates, nested_concats,
    norm_column_sums, norm_of, on_tma, overlap, partials_in_rows, plain_bf16_heads, producer_cast_candidates,
    product_part_candidates, products_into_concats, range, readers_of, recompute_unary_inputs, settled,
    sliced_permute_candidates, sliced_permutes, sliced_tree_candidates, summed_merged_gradients, tiled_gemm,
    touched_by, turned_heads, with_ring, FusionPlan, PhaseView,
};
use crate::kernels::attention::Dims;
use crate::kernels::gemm::simple::Product;
use crate::kernels::gemm::tma as gemm_tma;
use crate::kernels::gemm::{self, Epilogue, GemmShape, GemmSpec, Input, Layout};
use crate::kernels::layernorm::Norm;
use crate::kernels::pointwise::{broadcast_strides, contiguous_strides, grid_blocks, Body, Operand, Pointwise};
use crate::kernels::reduce::Reduction;
use crate::kernels::ScalarArg;
use crate::kernels::{adamw, cross_entropy, fused, multi, rotary};
use crate::ptx::Kernel;

mod attention;
mod embedding;
mod layernorm;
mod loss;
mod matmul;
mod optimizer;
mod padded;
mod pointwise;
mod recurrence;
mod reduce;
mod rmsnorm;
#[cfg(test)]
mod tests;

/// Alignment of the regions appended after the plan's arena.
const ALIGN: usize = 256;

/// One launch argument before the arena's base address is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LArg {
    /// Arena byte offset.
    Ptr(usize),
    U32(u32),
    U64(u64),
}

/// One launch of a lowered phase.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// Index into [`Lowered::kernels`].
    pub kernel: usize,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub args: Vec<LArg>,
    /// The plan node it computes (None for a phase-end copy).
    pub node: Option<u32>,
}

/// A plan lowered to launches.
pub struct Lowered {
    pub plan: Plan,
    /// Distinct kernels, in first-use order.
    pub kernels: Vec<Kernel>,
    /// Launches per phase, in order (kernels, then the phase's copies).
    pub phases: Vec<Vec<Launch>>,
    /// Total arena bytes: the plan's, then constants, then scratch.
    pub arena: usize,
    /// Bytes to write once at load: (offset, data).
    pub inits: Vec<(usize, Vec<u8>)>,
    /// Tensor maps to encode once the arena's address is known and write at load: (offset of
    /// the map's 128 bytes, offset of the operand it reads, its shape).
    pub tensor_maps: Vec<(usize, usize, gemm_tma::MapSpec)>,
}

impl fmt::Debug for Lowered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Lowered {{ {} kernels, {} launches, arena {} B }}",
            self.kernels.len(),
            self.phases.iter().map(|p| p.len()).sum::<usize>(),
            self.arena
        )
    }
}

impl Lowered {
    /// A description of launch `l` for errors: node, family, scope.
    pub fn describe(&self, l: &Launch) -> String {
        let k = &self.kernels[l.kernel].name;
        match l.node {
            Some(n) => {
                let node = &self.plan.program.graph.nodes[n as usize];
                format!("kernel {k} for node %{n} ({}, scope '{}')", node.op.family(), node.scope)
            }
            None => format!("kernel {k} (phase-end copy)"),
        }
    }

    /// Writes every distinct kernel's PTX to `dir` as `NNN_name.ptx`; returns the paths.
    pub fn dump_ptx(&self, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut out = vec![];
        for (i, k) in self.kernels.iter().enumerate() {
            // A long chain's name outgrows a file name (255 bytes): its start and the index,
            // which alone keeps names distinct, make the file's.
            let name: String = k.name.chars().take(160).collect();
            let p = dir.join(format!("{}_{i:03}_{name}.ptx", self.plan.program.graph.system));
            std::fs::write(&p, k.render()).with_context(|| format!("writing {}", p.display()))?;
            out.push(p);
        }
        Ok(out)
    }

    /// Launches in phase `i`.
    pub fn launch_count(&self, phase: usize) -> usize {
        self.phases[phase].len()
    }
}

/// Scratch offsets are relative to the scratch region until [`lower`] resolves them.
#[derive(Clone, Copy)]
enum A {
    Ptr(usize),
    Scratch(usize),
    U32(u32),
    U64(u64),
}

impl ScalarArg for A {
    fn u32(x: u32) -> Self {
        A::U32(x)
    }

    fn u64(x: u64) -> Self {
        A::U64(x)
    }
}

/// The arena offset an argument points at (None: a scalar, or the scratch region).
fn arena_offset(a: &A) -> Option<usize> {
    match *a {
        A::Ptr(o) => Some(o),
        _ => None,
    }
}

/// The bytes `[offset, offset + bytes)` that argument `j` of `l` points at in the arena (None:
/// not an arena pointer): what a merge pass checks a moved read or write against.
fn arg_span(l: &Pending, j: usize, bytes: usize) -> Option<(usize, usize)> {
    l.args.get(j).and_then(arena_offset).map(|o| (o, o + bytes))
}

/// Every pointer among `args` 16-byte aligned (the arena and the scratch region start aligned),
/// so a kernel may access them 16 bytes at a time.
fn aligned16(args: &[A]) -> bool {
    args.iter().all(|a| match a {
        A::Ptr(o) | A::Scratch(o) => o % 16 == 0,
        A::U32(_) | A::U64(_) => true,
    })
}

struct Pending {
    kernel: usize,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    args: Vec<A>,
    node: Option<u32>,
}

impl Pending {
    /// Makes this product launch run `kernel`, built from `spec`, with `spec`'s grid and block
    /// over `shape` (a fusion that changes a launched product's spec changes all three).
    fn respec(&mut self, kernel: usize, spec: &GemmSpec, shape: &GemmShape) {
        (self.kernel, self.grid, self.block) = (kernel, spec.grid(shape), (spec.threads(), 1, 1));
    }
}

struct Lowerer<'p> {
    plan: &'p Plan,
    config: &'p CudaConfig,
    kernels: Vec<Kernel>,
    index: HashMap<String, usize>,
    /// End of the constant region appended after the plan's arena.
    consts_end: usize,
    inits: Vec<(usize, Vec<u8>)>,
    tables: HashMap<(usize, usize, u64), usize>,
    scratch: usize,
    /// What each launch fuses, as the fusion passes decided it phase by phase.
    fusion: FusionPlan,
    /// [`producer_cast_candidates`] of the program.
    cast_candidates: HashMap<Value, u32>,
    /// [`grouped_param_casts`] of the program.
    param_casts: std::collections::HashSet<u32>,
    /// Tensor maps of the TMA engine's launches (see [`Lowered::tensor_maps`]), one per
    /// distinct operand and shape.
    tensor_maps: Vec<(usize, usize, gemm_tma::MapSpec)>,
    /// Tensor maps over scratch operands (a padded product's): (offset of the map, the
    /// operand's offset in the scratch region, its shape), placed once the region is.
    scratch_maps: Vec<(usize, usize, gemm_tma::MapSpec)>,
    /// The tiled product `lower_node` just lowered, for the caller to record in
    /// [`LaunchedProducts`].
    last_product: Option<ProductLaunch>,
    /// (value, reader) pairs where a fused chain recomputes the value instead of reading it.
    recomputed_reads: std::collections::HashSet<(Value, u32)>,
    /// The LayerNorm folds waiting for one launch after the last deferred one
    /// ([`FusionPlan::fold_flush_after`]): (shape, byte offsets of the gain gradient, the bias
    /// gradient and the pass-1 partials).
    pending_folds: Vec<(Norm, [usize; 3])>,
    /// Held regions for a delta-heads product's bf16 dO and delta ([`delta_heads`]), by their
    /// sizes in bytes: (dO's offset, delta's), shared by every such product of those sizes.
    delta_regions: HashMap<(usize, usize), (usize, usize)>,
    /// AttentionBackward → where its delta-heads product put (dO, delta).
    delta_at: HashMap<u32, (usize, usize)>,
    /// Column sum → where an attention backward wrote its partials and how many a column
    /// ([`summed_merged_gradients`]).
    attention_partials: HashMap<u32, (A, usize)>,
    /// Readers of each value, program outputs and phase assignments counted ([`readers_of`]).
    uses: HashMap<Value, usize>,
    /// The values the plan gave room for rows at an aligned pitch, with that pitch
    /// ([`padded::pitched_candidates`]).
    room: HashMap<Value, usize>,
    /// Those of them written pitched, as their writers were lowered: the padded products
    /// after them read them in place.
    pitched: HashMap<Value, usize>,
}

/// A tiled product as `lower_node` lowered it.
#[derive(Clone, Copy)]
struct ProductLaunch {
    id: u32,
    spec: GemmSpec,
    shape: GemmShape,
    /// One launch (not split-K).
    one_launch: bool,
    /// A store epilogue with nothing fused, unbatched.
    plain: bool,
}

/// The products of a phase launched so far (see `Lowerer::last_product`).
#[derive(Default)]
struct LaunchedProducts {
    /// The one-launch ones: node → (launch index, spec, shape).
    one_launch: HashMap<u32, (usize, GemmSpec, GemmShape)>,
    /// The plain ones (store epilogue, nothing fused, unbatched), split-K too.
    plain: std::collections::HashSet<u32>,
}

impl LaunchedProducts {
    /// `p`, whose (last) launch is at `index`.
    fn record(&mut self, p: ProductLaunch, index: usize) {
        if p.one_launch {
            self.one_launch.insert(p.id, (index, p.spec, p.shape));
        }
        if p.plain {
            self.plain.insert(p.id);
        }
    }

    /// A plain product of one launch: (launch index, spec, shape).
    fn plain_one_launch(&self, id: u32) -> Option<(usize, GemmSpec, GemmShape)> {
        self.one_launch.get(&id).copied().filter(|_| self.plain.contains(&id))
    }
}

/// A fused elementwise chain as lowered: its launch, and what a product's epilogue needs to run
/// it instead ([`Lowerer::chain_into_product`]).
struct ChainLowered {
    /// The launch position after the chain's run.
    end: usize,
    /// The last outputs that are bf16 copies of others, each into the slot of a cast the chain
    /// stands in for (skipped while the chain stores them).
    copies: Vec<Value>,
    pending: Pending,
    chain: fused::Chain,
    inputs: Vec<Value>,
    /// Where each output is stored (a bf16 cast's slot where it stores the cast).
    dests: Vec<Value>,
    run: Vec<u32>,
}

/// One node as an op family's lowering reads it: its outputs by index, its inputs' shapes and
/// dtypes, the size of its first output.
struct At<'p> {
    id: u32,
    g: &'p alpha_ir::Graph,
    node: Node,
}

impl At<'_> {
    /// Node `id` of `plan`'s graph (borrowing the plan, not the lowerer, so the lowering can
    /// go on mutating itself).
    fn of(plan: &Plan, id: u32) -> At<'_> {
        let g = &plan.program.graph;
        At { id, g, node: g.nodes[id as usize].clone() }
    }
    fn out(&self, k: u16) -> Value {
        Value { node: self.id, index: k }
    }
    fn ishape(&self, k: usize) -> Vec<usize> {
        self.g.shape(self.node.inputs[k]).to_vec()
    }
    fn idt(&self, k: usize) -> DType {
        self.g.dtype(self.node.inputs[k])
    }
    fn numel(&self) -> usize {
        self.node.outputs[0].numel()
    }
}

fn node_error(node: &Node, id: u32, msg: impl fmt::Display) -> anyhow::Error {
    anyhow!("lowering node %{id} ({}, scope '{}') for the GPU: {msg}", node.op.family(), node.scope)
}

/// The bytes of a constant tensor of `n` elements of `dtype` equal to `value`.
fn constant_bytes(value: f64, dtype: DType, n: usize) -> Result<Vec<u8>> {
    let one: Vec<u8> = match dtype {
        DType::F32 => (value as f32).to_le_bytes().to_vec(),
        DType::BF16 => half::bf16::from_f64(value).to_bits().to_le_bytes().to_vec(),
        DType::I32 => (value.round() as i32).to_le_bytes().to_vec(),
        other => bail!("constants of dtype {other} are not supported on the GPU"),
    };
    Ok(one.repeat(n))
}

/// Lowers a plan made with byte units (`alpha_plan::bytes`) with `config`.
pub fn lower(plan: Plan, config: &CudaConfig) -> Result<Lowered> {
    lower_with_room(plan, config, HashMap::new())
}

/// [`lower`] a plan that gave the values of `room` space for rows at an aligned pitch (their
/// pitch in elements; [`padded::pitched_candidates`]).
fn lower_with_room(plan: Plan, config: &CudaConfig, room: HashMap<Value, usize>) -> Result<Lowered> {
    let consts_start = plan.arena.div_ceil(ALIGN) * ALIGN;
    let (uses, readers) = readers_of(&plan.program);
    let mut lw = Lowerer {
        plan: &plan,
        config,
        kernels: vec![],
        index: HashMap::new(),
        consts_end: consts_start,
        inits: vec![],
        tables: HashMap::new(),
        scratch: 0,
        fusion: FusionPlan::default(),
        cast_candidates: producer_cast_candidates(&plan.program),
        param_casts: grouped_param_casts(&plan.program),
        tensor_maps: vec![],
        scratch_maps: vec![],
        last_product: None,
        recomputed_reads: std::collections::HashSet::new(),
        pending_folds: vec![],
        delta_regions: HashMap::new(),
        delta_at: HashMap::new(),
        attention_partials: HashMap::new(),
        uses: uses.clone(),
        room,
        pitched: HashMap::new(),
    };
    // Constant nodes: filled once.
    for (i, node) in plan.program.graph.nodes.iter().enumerate() {
        if let Op::Constant { value } = node.op {
            let v = Value { node: i as u32, index: 0 };
            let slot = plan.slot(v);
            let bytes = constant_bytes(value, node.outputs[0].dtype, node.outputs[0].numel())
                .map_err(|e| node_error(node, i as u32, e))?;
            lw.inits.push((slot.offset, bytes));
        }
    }
    let mut phases = vec![];
    for ph in &plan.phases {
        let mut launches = vec![];
        let nodes: Vec<u32> = ph.kernels.iter().map(|k| k.node).collect();
        let view = PhaseView::new(&plan, &nodes, &readers);
        let mut skip = fuse(config, &plan, &nodes, &lw.cast_candidates, config.fold_casts_into_gemms, &mut lw.fusion);
        // A Broadcast nothing reads (its readers read its source: `read_broadcast_sources`).
        if config.held_broadcasts {
            let unread = |&&id: &&u32| {
                matches!(plan.program.graph.nodes[id as usize].op, Op::Broadcast { .. })
                    && !uses.contains_key(&Value { node: id, index: 0 })
            };
            skip.extend(nodes.iter().filter(unread));
        }
        let more = fuse_more(config, &plan, &nodes, &skip, &mut lw.fusion);
        skip.extend(more);
        if config.padded_biases {
            skip.extend(padded::padded_biases(config, (&view, &uses), &skip, &mut lw.fusion));
        }
        // Turned heads need every column of a row in one thread: the wgmma engines only.
        if config.bf16_attention && config.gemm_engine != gemm::Engine::Mma {
            turned_heads(&view, &skip, &mut lw.fusion);
            plain_bf16_heads(&view, &mut lw.fusion);
        }
        for (producer_out, cast) in casts_into_producers(&plan, &nodes, &skip, &lw.cast_candidates) {
            skip.insert(cast.node);
            lw.fusion.store_as.insert(producer_out, cast);
        }
        if config.product_casts {
            for (product_out, cast) in casts_into_products(config, &plan, &nodes, &skip, &lw.fusion) {
                skip.insert(cast.node);
                lw.fusion.store_as.insert(product_out, cast);
            }
        }
        if config.bf16_attention && config.merged_gradients {
            for permute in merged_gradients(config, &view, &skip, &mut lw.fusion) {
                skip.insert(permute);
            }
        }
        if config.bf16_attention && config.output_copy {
            for permute in forward_copies(&view, &skip, &mut lw.fusion) {
                skip.insert(permute);
            }
        }
        if config.bf16_attention && config.joint_attention_backward && config.delta_epilogue {
            delta_heads(config, &view, &uses, &mut lw.fusion);
        }
        if config.mul_epilogue {
            for mul in mul_epilogues(config, &view, &skip, &mut lw.fusion) {
                skip.insert(mul);
            }
        }
        if config.joint_cross_entropy {
            let (joints, gone) = joint_cross_entropy(&view, &skip, &lw.fusion.store_as);
            skip.extend(gone);
            lw.fusion.joint_cross_entropy.extend(joints);
        }
        if config.column_casts {
            column_casts(&view, &skip, &mut lw.fusion);
            if config.attention_column_sums {
                skip.extend(summed_merged_gradients(&view, &skip, &mut lw.fusion));
            }
        }
        if config.norm_column_sums {
            norm_column_sums(config, &view, &skip, &mut lw.fusion);
        }
        if config.products_into_concats {
            let simple = |id: u32| unsplit_simple(config, view.g, id);
            skip.extend(products_into_concats(&view, &uses, &skip, &mut lw.fusion, &simple));
        }
        if config.concat_views {
            skip.extend(concat_views(&view, &uses, &skip, &mut lw.fusion));
        }
        if config.nested_concats {
            nested_concats(&view, &uses, &skip, &mut lw.fusion);
        }
        if config.sliced_permutes {
            skip.extend(sliced_permutes(&view, &uses, &skip, &mut lw.fusion));
        }
        if config.chain_slices {
            skip.extend(chain_slices(&view, &uses, &skip, &mut lw.fusion));
        }
        (lw.fusion.deferred_folds, lw.fusion.fold_flush_after) = deferred_folds(config, &view);
        let mut products = LaunchedProducts::default();
        let mut i = 0;
        while i < nodes.len() {
            if skip.contains(&nodes[i]) {
                i += 1;
                continue;
            }
            if let Some(add) = lw.norm_residual(&nodes, i, &skip, &uses) {
                if plan.program.graph.nodes[nodes[i] as usize].op == Op::RmsNormBackward {
                    launches.extend(lw.lower_rmsnorm_backward(nodes[i], Some(add))?);
                    i += 2;
                    continue;
                }
                // The cast right after it, of the residual gradient, stored by it as well.
                let copy = if config.layernorm_copy { lw.cast_of_sum(&nodes, i, add, &skip) } else { None };
                let sum = lw.norm_sum(nodes[i], Some(add.0), copy, &skip);
                launches.extend(lw.lower_layernorm_backward(nodes[i], Some(add), copy, sum)?);
                skip.extend(copy.map(|c| c.node).into_iter().chain(sum));
                if lw.fusion.fold_flush_after == Some(nodes[i]) {
                    launches.extend(lw.flush_folds(nodes[i])?);
                }
                i += 2;
                continue;
            }
            if let Some(cl) = lw.elementwise_chain(&nodes, i, &mut skip, &uses)? {
                let end = cl.end;
                let taken = match config.chain_epilogues {
                    ChainEpilogues::Never => None,
                    _ => lw.chain_into_product(&view, i, &cl, &mut launches, &products, &uses)?,
                };
                match taken {
                    None => match lw.chain_reduction(&nodes, &cl, &skip, &uses)? {
                        Some((with_sum, sum)) => {
                            launches.extend(with_sum);
                            skip.insert(sum);
                        }
                        None => launches.push(cl.pending),
                    },
                    // In the product without its copies: their casts run after all.
                    Some(t) if !t.whole => {
                        for c in &cl.copies {
                            skip.remove(&c.node);
                        }
                    }
                    Some(t) => {
                        if let Some((finish, sum)) =
                            lw.product_column_sum(&nodes, &cl, &t, &skip, &uses, &mut launches)?
                        {
                            launches.push(finish);
                            skip.insert(sum);
                        }
                    }
                }
                i = end;
                continue;
            }
            // Consecutive casts of parameters (not folded into loads): one launch.
            let param_cast = |id: u32| lw.param_casts.contains(&id) && !skip.contains(&id);
            if param_cast(nodes[i]) {
                let mut j = i + 1;
                while j < nodes.len() && param_cast(nodes[j]) {
                    j += 1;
                }
                launches.push(lw.lower_param_casts(&nodes[i..j])?);
                i = j;
                continue;
            }
            // Consecutive AdamWs that share β₁, β₂, ε and their step scalars: one launch.
            let key = |id: u32| match plan.program.graph.nodes[id as usize].op {
                Op::AdamW { beta1, beta2, eps, .. } => Some((
                    [beta1, beta2, eps].map(f64::to_bits),
                    plan.program.graph.nodes[id as usize].inputs[4..8].to_vec(),
                )),
                _ => None,
            };
            if let Some(k0) = key(nodes[i]) {
                let mut j = i + 1;
                while j < nodes.len() && key(nodes[j]).as_ref() == Some(&k0) {
                    j += 1;
                }
                launches.push(lw.lower_adamw_group(&nodes[i..j])?);
                i = j;
                continue;
            }
            // A LayerNorm backward (adding nothing) writing the column sums of its dx.
            if let Some(sum) = lw.norm_sum(nodes[i], None, None, &skip) {
                skip.insert(sum);
                launches.extend(lw.lower_layernorm_backward(nodes[i], None, None, Some(sum))?);
                if lw.fusion.fold_flush_after == Some(nodes[i]) {
                    launches.extend(lw.flush_folds(nodes[i])?);
                }
                i += 1;
                continue;
            }
            // A column sum storing its tensor's bf16 cast, where no launch before took the cast.
            if let Some(cast) = lw.fusion.column_cast(nodes[i], &skip) {
                skip.insert(cast.node);
                launches.extend(lw.lower_reduce(nodes[i], Some(cast))?);
                i += 1;
                continue;
            }
            // A plain elementwise op storing into the place of the Permute that alone reads it.
            if let Some(p) = lw.permuted_store(&nodes, i, &skip, &uses) {
                launches.extend(lw.lower_elementwise(nodes[i], Some(p))?);
                skip.insert(p);
                i += 1;
                continue;
            }
            launches.extend(lw.lower_node(nodes[i])?);
            if lw.fusion.fold_flush_after == Some(nodes[i]) {
                launches.extend(lw.flush_folds(nodes[i])?);
            }
            if let Some(p) = lw.last_product.take() {
                products.record(p, launches.len() - 1);
            }
            i += 1;
        }
        lw.dead_activation_stores(&view, &uses, &products, &mut launches)?;
        // Launches merged into others; removed once every merge has found its indices.
        let mut dead = std::collections::HashSet::new();
        if config.gated_products {
            lw.gated_products(&products, &mut launches, &mut dead)?;
        }
        if config.paired_products {
            lw.paired_products(&products, &uses, &mut launches, &mut dead)?;
        }
        let mut launches: Vec<Pending> =
            launches.into_iter().enumerate().filter(|(i, _)| !dead.contains(i)).map(|(_, l)| l).collect();
        launches.extend(lw.lower_phase_copies(&ph.copies)?);
        phases.push(launches);
    }
    let scratch_at = lw.consts_end;
    let arena = scratch_at + lw.scratch.div_ceil(ALIGN) * ALIGN;
    let resolve = |p: Pending| Launch {
        kernel: p.kernel,
        grid: p.grid,
        block: p.block,
        args: p
            .args
            .into_iter()
            .map(|a| match a {
                A::Ptr(o) => LArg::Ptr(o),
                A::Scratch(o) => LArg::Ptr(scratch_at + o),
                A::U32(x) => LArg::U32(x),
                A::U64(x) => LArg::U64(x),
            })
            .collect(),
        node: p.node,
    };
    let phases: Vec<Vec<Launch>> = phases.into_iter().map(|ph| ph.into_iter().map(resolve).collect()).collect();
    let Lowerer { kernels, inits, mut tensor_maps, scratch_maps, .. } = lw;
    tensor_maps.extend(scratch_maps.into_iter().map(|(at, o, map)| (at, scratch_at + o, map)));
    let (kernels, phases) = launched_kernels(kernels, phases);
    Ok(Lowered { plan, kernels, phases, arena, inits, tensor_maps })
}

/// Only the kernels some launch runs, the launches renumbered: a launch patched after it was
/// lowered (`Lowerer::chain_into_product`, `Lowerer::dead_activation_stores`) leaves its first
/// kernel in the catalog, which would otherwise be loaded for nothing.
fn launched_kernels(kernels: Vec<Kernel>, mut phases: Vec<Vec<Launch>>) -> (Vec<Kernel>, Vec<Vec<Launch>>) {
    let mut used = vec![false; kernels.len()];
    for l in phases.iter().flatten() {
        used[l.kernel] = true;
    }
    let mut index = vec![usize::MAX; kernels.len()];
    let mut kept = vec![];
    for (i, k) in kernels.into_iter().enumerate() {
        if used[i] {
            index[i] = kept.len();
            kept.push(k);
        }
    }
    for l in phases.iter_mut().flatten() {
        l.kernel = index[l.kernel];
    }
    (kept, phases)
}

/// Plans `program` with byte units and lowers it.
///
/// The inputs of forward Rotaries that the attention kernels may turn on load are kept alive
/// through their AttentionBackward (see `fuse_more`), so that the fusion finds them
/// unwritten, and through the inverse Rotaries of its dq and dk: those fuse into the backward's
/// stores, which must not land on the pre-rotary tensors the backward reads (a plain plan puts
/// them exactly there). The f32 sources of the bf16 casts that only GEMMs read are kept alive
/// through those GEMMs (`cast_sources_through_their_gemms`), so that every such cast folds
/// into the GEMMs' loads. The bf16 attention backward's inputs are kept alive through the
/// permute of its gradients where it may store that permute's f32 output
/// (`merged_f32_windows`). The tensor under a Concat part's permute or slice is kept alive to
/// the Concat (`concat_views`), and the tensor under a Permute's slice to the Permute
/// (`sliced_permutes`), and the tensor under slices that elementwise nodes read in place to
/// those nodes (`chain_slices`).
pub fn lower_program(program: &alpha_ir::Program, config: &CudaConfig) -> Result<Lowered> {
    let held = config.held_broadcasts.then(|| read_broadcast_sources(program)).flatten();
    let program = held.as_ref().unwrap_or(program);
    let room = padded::pitched_candidates(config, program);
    let room_bytes: HashMap<Value, usize> =
        room.iter().map(|(&v, &pitch)| (v, program.graph.shape(v)[0] * pitch * DType::BF16.size())).collect();
    let plan_with = |keep: &[(Value, u32)]| {
        alpha_plan::plan_in_place_with_room(program, alpha_plan::bytes, ALIGN, keep, &room_bytes)
            .map_err(|e| anyhow!("planning: {e}"))
    };
    let g = &program.graph;
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    let mut keep: Vec<(Value, u32)> = vec![];
    for f in forward_rotaries(program) {
        keep.push((f.input, f.backward));
        let grads = [Value { node: f.backward, index: 0 }, Value { node: f.backward, index: 1 }];
        for (i, n) in g.nodes.iter().enumerate() {
            let inverse = matches!(n.op, Op::Rotary { inverse: true, .. });
            if inverse && grads.contains(&n.inputs[0]) && phase(i as u32) == phase(f.backward) {
                keep.push((f.input, i as u32));
            }
        }
    }
    // A product that stores the heads a Permute after it splits (`heads_candidate`) writes
    // them while it reads its operands: those are kept to the Permute, so its output does not
    // land on them.
    let (uses, _) = readers_of(program);
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::Permute { perm } = &n.op else { continue };
        let Some((mm, _, _)) = head_split(config, g, &uses, n, perm) else { continue };
        if phase(mm) == phase(i as u32) {
            keep.extend(g.nodes[mm as usize].inputs.iter().map(|&v| (v, i as u32)));
        }
    }
    let into_producers = producer_cast_candidates(program);
    // (Kept with the casts launched too: the plan that results keeps every add-epilogue fusion,
    // a plain one lost 14 of them at one context.)
    keep.extend(
        cast_sources_through_their_gemms(config, program)
            .into_iter()
            .filter(|(src, _)| !into_producers.contains_key(src)),
    );
    // A producer storing into its cast's slot writes it from its own launch (or its chain's,
    // which may start a few elementwise nodes earlier) on: what those read must not lie there.
    // (Other casts' outputs stored by the same chain among them: all of the window is kept.)
    let mut keep_up_to = |from: u32, cast: u32, with_outputs: bool| {
        for id in from..cast {
            let n = &g.nodes[id as usize];
            let outs = (0..n.outputs.len() as u16).map(|k| Value { node: id, index: k }).filter(|_| with_outputs);
            let vals = n.inputs.iter().copied().chain(outs).filter(|v| phase(v.node) == phase(cast));
            keep.extend(vals.map(|v| (v, cast)).filter(|_| phase(id) == phase(cast)));
        }
    };
    for (x, &cast) in &into_producers {
        keep_up_to(x.node.saturating_sub(8), cast, true);
    }
    for (product, cast) in copy_windows(program, &into_producers) {
        keep_up_to(product, cast, false);
    }
    for (norm, cast) in norm_copy_windows(program) {
        keep_up_to(norm, cast, true);
    }
    // A Concat writing into its place in the outer Concat that reads it (`nested_concats`)
    // writes that slot from its own launch on: what it and every launch up to the outer read or
    // write is kept alive to the outer, so that the outer's slot lies clear of them.
    if config.nested_concats {
        for (inner, outer) in nested_concat_candidates(program) {
            if outer - inner <= NESTED_SPAN {
                keep_up_to(inner, outer, true);
            }
        }
    }
    // A product storing into its Concat's place (`products_into_concats`) writes that slot
    // from its own launch on: kept the same way.
    if config.products_into_concats {
        for pp in product_part_candidates(program, &|id| unsplit_simple(config, g, id)) {
            if pp.concat - pp.product <= NESTED_SPAN {
                keep_up_to(pp.product, pp.concat, true);
            }
        }
    }
    // A reduction run in the launch of the elementwise chain before it
    // (`Lowerer::chain_reduction`) stores its output while that launch's blocks still read the
    // chain's inputs: what the run of elementwise nodes before it reads and writes is kept alive
    // to it, so that its output lies clear of them. (Placed over a chain input, Diakosmos's
    // per-group sums made four steps leave different bits on every run on the H200.)
    let elementwise = |id: u32| matches!(g.nodes[id as usize].op, Op::Unary(_) | Op::Binary(_) | Op::Reshape { .. });
    for (i, n) in g.nodes.iter().enumerate() {
        let reduce = i as u32;
        let Op::Reduce { kind, axes, .. } = &n.op else { continue };
        // Only a reduction in one chunk stores its output from the chain's launch (over
        // several, partials in the scratch region, and a launch of its own the output).
        let x = n.inputs[0];
        let Ok(r) = Reduction::new(*kind, g.shape(x), axes, g.dtype(x), n.outputs[0].dtype) else { continue };
        if r.chunks() > 1 || !reduce::runs_in_chain(config, &r) {
            continue;
        }
        let mut start = reduce;
        while start > 0 && elementwise(start - 1) && phase(start - 1) == phase(reduce) {
            start -= 1;
        }
        if start < reduce && x.node >= start && x.node < reduce {
            keep_up_to(start, reduce, true);
        }
    }
    if config.bf16_attention && config.merged_gradients {
        keep.extend(merged_f32_windows(program, &into_producers));
    }
    // A tensor read through a view at the view's reader instead of at the view is kept alive to
    // that reader: a Concat's copy of a permuted or sliced part (`concat_views`), a Permute of a
    // slice (`sliced_permutes`), elementwise nodes reading their slices in place
    // (`chain_slices`). (Within one phase: the plan refuses a hint across phases.)
    let mut reads_through_views: Vec<(Value, u32)> = vec![];
    if config.concat_views {
        reads_through_views.extend(concat_view_candidates(program).into_iter().map(|(c, _, vp)| (vp.source, c)));
    }
    if config.sliced_permutes {
        reads_through_views.extend(sliced_permute_candidates(program).into_iter().map(|(p, vp)| (vp.source, p)));
    }
    if config.chain_slices {
        for tree in sliced_tree_candidates(program) {
            reads_through_views.extend(tree.reads.into_iter().map(|(r, _, _)| (tree.root, r)));
        }
    }
    keep.extend(reads_through_views.into_iter().filter(|&(v, r)| phase(r).is_some() && phase(v.node) == phase(r)));
    lower_with_room(plan_with(&keep)?, config, room)
}

/// `program` with each Binary that reads a Broadcast's output reading the Broadcast's source
/// instead, where broadcasting the source gives the Binary the same output shape (the IR's
/// binaries broadcast as numpy does); the Broadcast, then read by nothing, does not launch
/// (`lower`). None where there is none. Why: an explicit Broadcast (a sum's gradient: Diakosmos's
/// head spreads `[N, 7, 1]` over `[N, 7, 190]`) copies a whole tensor that the Binary, alone or
/// in a fused chain, reads held from the source instead: the same values, so the same bits.
/// Only a Broadcast that Binaries of its own phase alone read (no program output, no phase
/// assignment); node ids and phases stay as they were.
fn read_broadcast_sources(program: &alpha_ir::Program) -> Option<alpha_ir::Program> {
    let g = &program.graph;
    let (uses, readers) = readers_of(program);
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    let mut out = program.clone();
    let mut any = false;
    for (b, n) in g.nodes.iter().enumerate() {
        let Op::Broadcast { .. } = n.op else { continue };
        let bv = Value { node: b as u32, index: 0 };
        let rs = readers.get(&bv).map(Vec::as_slice).unwrap_or(&[]);
        let src = n.inputs[0];
        let fits = |&r: &u32| {
            let rn = &g.nodes[r as usize];
            let other: Vec<&[usize]> =
                rn.inputs.iter().map(|&x| if x == bv { g.shape(src) } else { g.shape(x) }).collect();
            matches!(rn.op, Op::Binary(_))
                && phase(r) == phase(b as u32)
                && other.len() == 2
                && alpha_ir::infer::broadcast_shapes(other[0], other[1]).as_deref() == Some(&rn.outputs[0].shape[..])
        };
        if rs.is_empty() || uses.get(&bv) != Some(&rs.len()) || !rs.iter().all(fits) {
            continue;
        }
        for &r in rs {
            for x in out.graph.nodes[r as usize].inputs.iter_mut().filter(|x| **x == bv) {
                *x = src;
            }
        }
        any = true;
    }
    any.then_some(out)
}

/// Nodes from a nested Concat to the outer one whose windows are kept (`nested_concats`).
const NESTED_SPAN: u32 = 8;

/// The windows of the bf16 copies a LayerNorm backward stores of the residual gradient it adds
/// (`Lowerer::cast_of_sum`): (the LayerNormBackward, the cast). The copy is written from the
/// LayerNorm's launch, so what it and every launch up to the cast read or write is kept alive
/// to the cast. Why: with a block's weights rounded together at its start, the plan put 9 of
/// GPT-2's 24 copies on a value a launch between reads, and those casts ran as launches.
fn norm_copy_windows(program: &alpha_ir::Program) -> Vec<(u32, u32)> {
    /// Nodes from the LayerNorm to its copy's cast that a window spans at most.
    const SPAN: u32 = 8;
    let g = &program.graph;
    let mut windows = vec![];
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::Cast { to: DType::BF16 } = n.op else { continue };
        let sum = &g.nodes[n.inputs[0].node as usize];
        if g.dtype(n.inputs[0]) != DType::F32 || sum.op != Op::Binary(alpha_ir::Binary::Add) {
            continue;
        }
        let norm = sum.inputs.iter().map(|x| x.node).find(|&x| g.nodes[x as usize].op == Op::LayerNormBackward);
        if let Some(norm) = norm.filter(|&m| (i as u32).saturating_sub(m) <= SPAN) {
            windows.push((norm, i as u32));
        }
    }
    windows
}

/// The windows whose reads the bf16 copies of fused chains must not meet (`elementwise_chain`'s
/// copies, of an f32 output a cast and other launches read): (the product the chain's node reads,
/// the cast). The copy is written from the product's epilogue, so what every launch from the
/// product up to the cast reads is kept alive to the cast. Why: the plan put GPT-2's bf16 `dh`
/// on the weight gradient's dead operand, and 11 of its 12 layers kept the cast as a launch.
fn copy_windows(program: &alpha_ir::Program, into_producers: &HashMap<Value, u32>) -> Vec<(u32, u32)> {
    let g = &program.graph;
    let op = |v: Value| &g.nodes[v.node as usize].op;
    let mut windows = vec![];
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::Cast { to: DType::BF16 } = n.op else { continue };
        let v = n.inputs[0];
        if g.dtype(v) != DType::F32 || !matches!(op(v), Op::Unary(_) | Op::Binary(_)) || into_producers.contains_key(&v)
        {
            continue;
        }
        // The products the node reads, directly or through a unary; the window starts at the
        // first of them or of those unaries.
        let e = &g.nodes[v.node as usize];
        let unaries: Vec<Value> = e.inputs.iter().copied().filter(|&x| matches!(op(x), Op::Unary(_))).collect();
        let reads = e.inputs.iter().chain(unaries.iter().flat_map(|x| &g.nodes[x.node as usize].inputs));
        if let Some(first) = reads.filter(|&&x| matches!(op(x), Op::MatMul { .. })).map(|x| x.node).min() {
            windows.push((unaries.iter().map(|u| u.node).fold(first, u32::min), i as u32));
        }
    }
    windows
}

/// Counts launches by kernel name in phase `i` (for reports).
pub fn launches_by_kernel(l: &Lowered, phase: usize) -> Vec<(String, usize)> {
    let mut m: std::collections::BTreeMap<String, usize> = Default::default();
    for x in &l.phases[phase] {
        *m.entry(l.kernels[x.kernel].name.clone()).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

impl Lowerer<'_> {
    fn kernel(&mut self, k: Kernel) -> Result<usize> {
        k.check_budget()?;
        let text = k.render();
        if let Some(&i) = self.index.get(&text) {
            return Ok(i);
        }
        self.kernels.push(k);
        self.index.insert(text, self.kernels.len() - 1);
        Ok(self.kernels.len() - 1)
    }

    fn g(&self) -> &alpha_ir::Graph {
        &self.plan.program.graph
    }

    fn ptr(&self, v: Value) -> A {
        A::Ptr(self.plan.slot(v).offset)
    }

    fn ptr_at(&self, v: Value, elements: u64) -> A {
        A::Ptr(self.plan.slot(v).offset + elements as usize * self.g().dtype(v).size())
    }

    fn need_scratch(&mut self, bytes: usize) {
        self.scratch = self.scratch.max(bytes);
    }

    /// `bytes` of the scratch region past every byte a launch lowered so far uses (their
    /// offset): for values that outlive launches using the region themselves, up to the launch
    /// that reads them.
    fn scratch_past_all(&mut self, bytes: usize) -> usize {
        let at = self.scratch.div_ceil(256) * 256;
        self.need_scratch(at + bytes);
        at
    }

    fn pointwise(&mut self, pw: Pointwise, args: Vec<A>, node: Option<u32>) -> Result<Pending> {
        // Four or two elements a thread where the layout allows and every pointer is aligned
        // to its operand's whole access.
        let operands: Vec<&Operand> = std::iter::once(&pw.out).chain(&pw.ins).collect();
        let aligned = |w: u32| {
            args.iter().zip(&operands).all(|(a, o)| match *a {
                A::Ptr(x) | A::Scratch(x) => x.is_multiple_of(w as usize * o.dtype.size()),
                A::U32(_) | A::U64(_) => true,
            })
        };
        let most = if self.config.pointwise_vector { pw.vector_width() } else { 1 };
        let width = [most, 2].into_iter().find(|&w| w > 1 && most.is_multiple_of(w) && aligned(w)).unwrap_or(1);
        let (blocks, threads) = pw.grid_with(width);
        let kernel = self.kernel(pw.kernel_with(width)?)?;
        Ok(Pending { kernel, grid: (blocks, 1, 1), block: (threads, 1, 1), args, node })
    }

    fn rotary_table(&mut self, t: usize, d: usize, base: f64) -> usize {
        if let Some(&o) = self.tables.get(&(t, d, base.to_bits())) {
            return o;
        }
        let data = rotary::table(t, d, base);
        let off = self.consts_end;
        self.consts_end = (off + data.len() * 4).div_ceil(ALIGN) * ALIGN;
        self.inits.push((off, data.iter().flat_map(|x| x.to_le_bytes()).collect()));
        self.tables.insert((t, d, base.to_bits()), off);
        off
    }

    /// The copies a phase ends with (its new state into the state's slots, where the plan could
    /// not compute it in place): the 4-byte ones, 16-byte aligned and none reading what another
    /// writes, as one multi-tensor launch ([`multi::copy_kernel`]) where there are several; the
    /// rest a pointwise copy each.
    fn lower_phase_copies(&mut self, copies: &[alpha_plan::Copy]) -> Result<Vec<Pending>> {
        let g = &self.plan.program.graph;
        let moves: Vec<(usize, usize, usize, &alpha_plan::Copy)> = copies
            .iter()
            .map(|c| (self.plan.slot(c.src).offset, self.plan.slot(c.dst).offset, g.ty(c.dst).numel(), c))
            .filter(|&(s, d, _, _)| s != d)
            .collect();
        let word = |c: &alpha_plan::Copy| {
            let (ds, dd) = (g.dtype(c.src), g.dtype(c.dst));
            ds == dd && matches!(ds, DType::F32 | DType::I32)
        };
        let rng = |v: Value| range(self.plan, v);
        // Writes nothing another copy reads, and reads nothing another writes.
        let disjoint = |c: &alpha_plan::Copy| match (rng(c.src), rng(c.dst)) {
            (Some(reads), Some(writes)) => copies
                .iter()
                .filter(|c2| !std::ptr::eq(c, *c2))
                .all(|c2| clear_of(writes, [rng(c2.src)]) && clear_of(reads, [rng(c2.dst)])),
            _ => false,
        };
        let (mut grouped, mut apart) = (vec![], vec![]);
        for &m in &moves {
            let (s, d, _, c) = m;
            let together = self.config.multi_copies && word(c) && s % 16 == 0 && d % 16 == 0 && disjoint(c);
            if together {
                grouped.push(m);
            } else {
                apart.push(m);
            }
        }
        if grouped.len() < 2 {
            apart.append(&mut grouped);
        }
        let mut v = vec![];
        if !grouped.is_empty() {
            let tensors: Vec<(usize, usize, usize)> = grouped.iter().map(|&(s, d, n, _)| (s, d, n)).collect();
            let (bytes, chunks) = multi::copy_table(&tensors)?;
            let table = self.constant(bytes);
            let kernel = self.kernel(multi::copy_kernel())?;
            let args = multi::copy_arguments([A::Ptr(0), A::Ptr(table)]);
            v.push(Pending { kernel, grid: (chunks as u32, 1, 1), block: (multi::THREADS, 1, 1), args, node: None });
        }
        for (s, d, n, c) in apart {
            let pw = Pointwise {
                shape: vec![n],
                out: Operand::contiguous(g.dtype(c.dst), &[n]),
                ins: vec![Operand::contiguous(g.dtype(c.src), &[n])],
                body: Body::Copy,
            };
            v.push(self.pointwise(pw, vec![A::Ptr(d), A::Ptr(s)], None)?);
        }
        Ok(v)
    }

    /// A tensor map over operand `v` (a plan value, or a place in the scratch region) in the
    /// constant region, encoded at load.
    fn tensor_map(&mut self, v: A, map: gemm_tma::MapSpec) -> Result<A> {
        let (maps, operand) = match v {
            A::Ptr(o) => (&self.tensor_maps, o),
            A::Scratch(o) => (&self.scratch_maps, o),
            _ => bail!("a tensor map over a scalar argument"),
        };
        if let Some(&(at, _, _)) = maps.iter().find(|(_, o, m)| *o == operand && *m == map) {
            return Ok(A::Ptr(at));
        }
        let at = self.consts_end;
        self.consts_end = (at + 128).div_ceil(ALIGN) * ALIGN;
        match v {
            A::Scratch(_) => self.scratch_maps.push((at, operand, map)),
            _ => self.tensor_maps.push((at, operand, map)),
        }
        Ok(A::Ptr(at))
    }

    /// Appends `data` to the constant region (written once at load); returns its offset.
    fn constant(&mut self, data: Vec<u8>) -> usize {
        let off = self.held(data.len());
        self.inits.push((off, data));
        off
    }

    /// `bytes` of the region after the plan's arena that no other launch reuses (unlike the
    /// scratch region): for values kept from one launch to a later one that the plan does not
    /// know of.
    fn held(&mut self, bytes: usize) -> usize {
        let off = self.consts_end;
        self.consts_end = (off + bytes).div_ceil(ALIGN) * ALIGN;
        off
    }

    /// The pitch (in elements) to write bf16 matrix `v` at, where the plan gave it the room:
    /// recorded, so that the padded products after it read it in place (`padded`'s doc).
    fn write_pitched(&mut self, v: Value) -> Option<usize> {
        let pitch = self.room.get(&v).copied()?;
        self.pitched.insert(v, pitch);
        Some(pitch)
    }

    /// Where `v` is stored, and as what: its own slot in its dtype, or the slot of the bf16
    /// cast that alone reads it (see [`casts_into_producers`]).
    fn destination(&self, v: Value) -> (Value, DType) {
        match self.fusion.store_as.get(&v) {
            Some(&cast) => (cast, DType::BF16),
            None => (v, self.g().dtype(v)),
        }
    }

    fn want_f32(&self, node: &Node, id: u32, vals: &[Value]) -> Result<()> {
        for &v in vals {
            if self.g().dtype(v) != DType::F32 {
                return Err(node_error(node, id, format!("{v} is {}, this kernel takes f32", self.g().ty(v))));
            }
        }
        Ok(())
    }

    /// The launches of node `id`, by its op's family (one file each in this module).
    fn lower_node(&mut self, id: u32) -> Result<Vec<Pending>> {
        let plan = self.plan;
        let node = &plan.program.graph.nodes[id as usize];
        match &node.op {
            Op::Unary(_)
            | Op::Binary(_)
            | Op::Cast { .. }
            | Op::Reshape { .. }
            | Op::Broadcast { .. }
            | Op::Permute { .. }
            | Op::Slice { .. }
            | Op::Concat { .. } => self.lower_elementwise(id, None),
            Op::Reduce { .. } => self.lower_reduce(id, None),
            Op::MatMul { .. } => self.lower_matmul(id),
            Op::Gather | Op::ScatterAdd { .. } => self.lower_embedding(id),
            Op::LayerNorm { .. } => self.lower_layernorm(id),
            Op::LayerNormBackward => self.lower_layernorm_backward(id, None, None, None),
            Op::Rotary { .. } => self.lower_rotary(id),
            Op::Attention { .. } | Op::AttentionBackward { .. } => self.lower_attention(id),
            Op::CrossEntropy { .. } | Op::CrossEntropyBackward { .. } => self.lower_cross_entropy(id),
            Op::Recurrence { .. }
            | Op::DeltaRule
            | Op::DeltaRuleBackward
            | Op::HarmonicScan
            | Op::HarmonicScanBackward => self.lower_recurrence(id),
            Op::AdamW { .. } | Op::SumSquares => self.lower_optimizer(id),
            Op::RmsNorm { .. } => self.lower_rmsnorm(id),
            Op::RmsNormBackward => self.lower_rmsnorm_backward(id, None),
            Op::Param { .. } | Op::State { .. } | Op::Input { .. } | Op::HostScalar { .. } | Op::Constant { .. } => {
                Err(node_error(node, id, "a leaf is not a kernel"))
            }
        }
    }
}

/// Whether MatMul `id` runs on the simple kernel in one part with an f32 output, which may then
/// store into a view of a larger tensor (`products_into_concats`).
fn unsplit_simple(config: &CudaConfig, g: &alpha_ir::Graph, id: u32) -> bool {
    let f32_out = g.nodes[id as usize].outputs[0].dtype == DType::F32;
    f32_out && matmul::simple_product(config, g, id).is_some_and(|p| p.splits == 1)
}
