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
//! attention's delta, split-K partial products): launches run in order on one stream, so one
//! region sized for the largest need suffices. Constant nodes are filled once, at load.
//!
//! Fusions, each checked against the plan's slots so that a moved read or write meets nothing
//! live: bf16 casts stored by the kernel producing their source (`casts_into_producers`:
//! elementwise ops, permutes, LayerNorm, the cross-entropy backward), by the LayerNorm backward
//! adding the residual gradient (`Lowerer::cast_of_sum`), or (with
//! [`CudaConfig::fold_casts_into_gemms`]) folded into
//! GEMM operand loads (`fuse`); residual Adds as GEMM epilogues and in the LayerNorm backward's
//! store; activations as GEMM epilogues and rotaries into attention's loads and stores
//! (`fuse_more`); the q/k/v projection storing bf16 heads turned by the rotary for attention to
//! copy (`turned_heads`), the attention kernels storing the permuted bf16 tensors the
//! projections around them read (`forward_copies`, `merged_gradients`), a gated unit's multiply
//! as the up product's epilogue, computing `gelu(gate)` from the gate product
//! (`mul_epilogues`), the gate and up products then in one launch that multiplies on
//! registers (`Lowerer::gated_products`), and an activation output nothing then reads left
//! unstored (`Lowerer::dead_activation_stores`); runs of elementwise ops as one kernel, a unary of an
//! input recomputed rather than read, and over deep grids such a run in the epilogue of the
//! product it alone reads (`Lowerer::chain_into_product`); a LayerNorm backward's gain and bias
//! pass 1 in its input gradient's launch over many bands, and their pass 2 folds as one launch
//! after the last (`deferred_folds`); every AdamW of a step as one launch. Each has
//! a switch ([`CudaConfig`]) to measure it against its absence. The plan is made with lifetime
//! hints ([`lower_program`]) so these fusions find what they need still in place.

use std::collections::HashMap;
use std::fmt;

use alpha_ir::{DType, Node, Op, Value};
use alpha_plan::Plan;
use anyhow::{anyhow, bail, Context, Result};

use crate::config::{ChainEpilogues, CudaConfig};
use crate::kernels::attention::{self, Dims};
use crate::kernels::gemm::simple::Product;
use crate::kernels::gemm::tma as gemm_tma;
use crate::kernels::gemm::wgmma as gemm_wgmma;
use crate::kernels::gemm::{self, Epilogue, GemmShape, GemmSpec, Input, Layout};
use crate::kernels::layernorm::{self, Norm};
use crate::kernels::pointwise::{broadcast_strides, contiguous_strides, grid_blocks, Body, Operand, Pointwise};
use crate::kernels::reduce::Reduction;
use crate::kernels::{adamw, cross_entropy, embedding, fused, multi, recurrence, rotary};
use crate::ptx::Kernel;

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
            let p = dir.join(format!("{}_{i:03}_{}.ptx", self.plan.program.graph.system, k.name));
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

/// A product launch's shape arguments after A, B, C and R ([`gemm::SHAPE_ARGS`] in all): m, n,
/// k, the leading dimensions, the batch strides.
fn shape_args(s: &GemmShape) -> impl Iterator<Item = A> {
    [s.m, s.n, s.k, s.lda, s.ldb, s.ldc].map(A::U32).into_iter().chain([s.stride_a, s.stride_b, s.stride_c].map(A::U64))
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

/// A product a merge pass may fold into one launch with another: on the TMA engine in
/// 128 × 128 tiles, A row-major, B in `b`'s layout, storing its tile whole (no heads or
/// chain).
fn mergeable_tile(s: &GemmSpec, b: Layout) -> bool {
    s.engine == gemm::Engine::Tma
        && s.tile == gemm::Tile::T128x128
        && (s.a, s.b) == (Layout::RowMajor, b)
        && s.heads.is_none()
        && s.chain.is_none()
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
    /// MatMuls that read their operands' f32 sources (convert-on-load) instead of bf16 casts.
    f32_gemm: HashMap<u32, (Value, Value)>,
    /// MatMuls whose following Add is fused into the add epilogue: (add node, residual).
    gemm_add: HashMap<u32, (u32, Value)>,
    /// Further fusions (activation epilogues, rotary into attention).
    more: More,
    /// Producer output → the bf16 cast it stores instead (see [`casts_into_producers`]).
    store_as: HashMap<Value, Value>,
    /// [`producer_cast_candidates`] of the program.
    cast_candidates: HashMap<Value, u32>,
    /// [`grouped_param_casts`] of the program.
    param_casts: std::collections::HashSet<u32>,
    /// Tensor maps of the TMA engine's launches (see [`Lowered::tensor_maps`]), one per
    /// distinct operand and shape.
    tensor_maps: Vec<(usize, usize, gemm_tma::MapSpec)>,
    /// The tiled product `lower_node` just lowered, for the caller to record in
    /// [`LaunchedProducts`].
    last_product: Option<ProductLaunch>,
    /// (value, reader) pairs where a fused chain recomputes the value instead of reading it.
    recomputed_reads: std::collections::HashSet<(Value, u32)>,
    /// LayerNormBackwards of this phase whose pass 2 waits for one launch after the last of them
    /// ([`deferred_folds`]), that last one, and the folds waiting: (shape, byte offsets of the
    /// gain gradient, the bias gradient and the pass-1 partials).
    deferred_folds: std::collections::HashSet<u32>,
    fold_flush_after: Option<u32>,
    pending_folds: Vec<(Norm, [usize; 3])>,
    /// Held regions for a delta-heads product's bf16 dO and delta ([`delta_heads`]), by their
    /// sizes in bytes: (dO's offset, delta's), shared by every such product of those sizes.
    delta_regions: HashMap<(usize, usize), (usize, usize)>,
    /// AttentionBackward → where its delta-heads product put (dO, delta).
    delta_at: HashMap<u32, (usize, usize)>,
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
    pending: Pending,
    chain: fused::Chain,
    inputs: Vec<Value>,
    /// Where each output is stored (a bf16 cast's slot where it stores the cast).
    dests: Vec<Value>,
    run: Vec<u32>,
}

/// Per q (dq), k (dk): the tensor a fused rotary reads or writes instead, and its base.
type Turned = [Option<(Value, f64)>; 2];

/// The fusions decided by [`fuse_more`].
#[derive(Default)]
struct More {
    /// MatMul → the Unary node whose `u(product)` its epilogue also writes.
    gemm_act: HashMap<u32, (u32, alpha_ir::Unary)>,
    /// AttentionBackward → per dq, dk: (the inverse Rotary's output it writes instead, base).
    attnb_rot: HashMap<u32, Turned>,
    /// Attention and AttentionBackward → per q, k: (the forward Rotary's input it reads and
    /// turns on load instead of the Rotary's output, base).
    attn_load: HashMap<u32, Turned>,
    /// MatMul → the Permute whose output it stores split into heads instead of its own.
    gemm_heads: HashMap<u32, (u32, gemm::Heads)>,
    /// Head-split MatMuls storing q and k turned and everything bf16 ([`turned_heads`]): the
    /// rotary base of their table.
    turned_base: HashMap<u32, f64>,
    /// Attention and AttentionBackward reading those bf16 q, k and v: the heads tensor's f32
    /// slot (the bf16 values lie at half their views' offsets from its start).
    bf16_attention: HashMap<u32, (usize, usize)>,
    /// AttentionBackward → the bf16 cast of its permuted, concatenated gradients, which it
    /// stores itself ([`merged_gradients`]).
    merged_grads: HashMap<u32, Value>,
    /// MatMul → (the multiply after it, the value its epilogue reads as R, the bf16 cast the
    /// multiply stores, the activation applied to R): the product's epilogue writes that cast
    /// too ([`mul_epilogues`]).
    gemm_mul: HashMap<u32, (u32, Value, Value, Option<alpha_ir::Unary>)>,
    /// Attention → the bf16 cast of its permuted output, which it stores too
    /// ([`forward_copies`]).
    output_copy: HashMap<u32, Value>,
    /// Head-split MatMul → (the bf16 AttentionBackward whose dO it is, its O): the product
    /// stores dO as bf16 with delta instead of the f32 dO ([`delta_heads`]).
    delta_heads: HashMap<u32, (u32, Value)>,
}

fn node_error(node: &Node, id: u32, msg: impl fmt::Display) -> anyhow::Error {
    anyhow!("lowering node %{id} ({}, scope '{}') for the GPU: {msg}", node.op.family(), node.scope)
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

    /// The TMA engine's two tensor-map arguments for a launch of `spec` on `shape` reading
    /// `a` and `b` (none on the other engines).
    fn maps_for(&mut self, spec: &GemmSpec, shape: &GemmShape, a: Value, b: Value) -> Result<Vec<A>> {
        if spec.engine != gemm::Engine::Tma {
            return Ok(vec![]);
        }
        gemm_tma::check_shape(spec, shape)?;
        let (ma, mb) = gemm_tma::map_specs(spec, shape);
        Ok(vec![self.tensor_map(self.ptr(a), ma)?, self.tensor_map(self.ptr(b), mb)?])
    }

    fn need_scratch(&mut self, bytes: usize) {
        self.scratch = self.scratch.max(bytes);
    }

    fn pointwise(&mut self, pw: Pointwise, args: Vec<A>, node: Option<u32>) -> Result<Pending> {
        // Four elements a thread where the layout allows and every pointer is 16-byte aligned.
        let vector = aligned16(&args) && self.config.pointwise_vector && pw.vectorizable();
        let (blocks, threads) = pw.grid_with(vector);
        let kernel = self.kernel(pw.kernel_with(vector)?)?;
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

    /// A tensor map over operand `v` (a plan value) in the constant region, encoded at load.
    fn tensor_map(&mut self, v: A, map: gemm_tma::MapSpec) -> Result<A> {
        let A::Ptr(operand) = v else { bail!("a tensor map over a scratch operand") };
        if let Some(&(at, _, _)) = self.tensor_maps.iter().find(|(_, o, m)| *o == operand && *m == map) {
            return Ok(A::Ptr(at));
        }
        let at = self.consts_end;
        self.consts_end = (at + 128).div_ceil(ALIGN) * ALIGN;
        self.tensor_maps.push((at, operand, map));
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

    /// One launch of pass 2 for every LayerNorm of a shape whose fold waited
    /// ([`deferred_folds`]), counted as the last one's (`node`).
    fn flush_folds(&mut self, node: u32) -> Result<Vec<Pending>> {
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

    /// A run of AdamW nodes sharing β₁, β₂, ε and their scalar inputs (lr, bc1, bc2, gscale):
    /// one multi-tensor launch driven by a chunk table (see [`crate::kernels::multi`]).
    fn lower_adamw_group(&mut self, ids: &[u32]) -> Result<Pending> {
        let g = self.g();
        let first = &g.nodes[ids[0] as usize];
        let Op::AdamW { beta1, beta2, eps, .. } = first.op else { unreachable!("an AdamW group") };
        let mut tensors = vec![];
        for &id in ids {
            let node = &g.nodes[id as usize];
            let Op::AdamW { weight_decay, .. } = node.op else { unreachable!("an AdamW group") };
            self.want_f32(node, id, &node.inputs)?;
            let off = |k: usize| self.plan.slot(node.inputs[k]).offset;
            tensors.push(multi::AdamwTensor {
                p: off(0),
                g: off(1),
                m: off(2),
                v: off(3),
                len: g.ty(node.inputs[0]).numel(),
                weight_decay: weight_decay as f32,
            });
        }
        let scalars: Vec<A> = first.inputs[4..8].iter().map(|&x| self.ptr(x)).collect();
        let (bytes, chunks) = multi::adamw_table(&tensors).map_err(|e| node_error(first, ids[0], e))?;
        let table = self.constant(bytes);
        let kernel = self.kernel(multi::adamw_kernel(beta1, beta2, eps))?;
        let mut args = vec![A::Ptr(0), A::Ptr(table)];
        args.extend(scalars);
        Ok(Pending { kernel, grid: (chunks as u32, 1, 1), block: (multi::THREADS, 1, 1), args, node: Some(ids[0]) })
    }

    /// A run of two or more same-length f32 elementwise nodes (unary, or binary without
    /// broadcasting) from `nodes[i]`, as one [`fused::Chain`] launch: it stores only the values
    /// read after the run, and only when no stored value partly overlaps an input (an exact
    /// overlap is safe: every element is loaded before any is stored). Returns the position
    /// after the run.
    fn elementwise_chain(
        &mut self,
        nodes: &[u32],
        i: usize,
        skip: &mut std::collections::HashSet<u32>,
        uses: &HashMap<Value, usize>,
    ) -> Result<Option<ChainLowered>> {
        let g = &self.plan.program.graph;
        let f32 = |v: Value| g.dtype(v) == DType::F32;
        let len = |id: u32| {
            let n = &g.nodes[id as usize];
            let out = Value { node: id, index: 0 };
            let ok = match n.op {
                Op::Unary(_) => f32(n.inputs[0]) && g.ty(n.inputs[0]).numel() == n.outputs[0].numel(),
                Op::Binary(_) => n.inputs.iter().all(|&x| f32(x) && g.shape(x) == n.outputs[0].shape.as_slice()),
                _ => false,
            };
            (ok && f32(out)).then(|| n.outputs[0].numel())
        };
        let Some(n) = len(nodes[i]) else { return Ok(None) };
        let mut end = i + 1;
        while end < nodes.len() && !skip.contains(&nodes[end]) && len(nodes[end]) == Some(n) {
            end += 1;
        }
        while end - i >= 2 {
            let run = &nodes[i..end];
            let step_of: HashMap<u32, usize> = run.iter().enumerate().map(|(k, &id)| (id, k)).collect();
            let mut inputs: Vec<Value> = vec![];
            let mut steps = vec![];
            let mut inner_uses: HashMap<u32, usize> = HashMap::new();
            for &id in run {
                let node = &g.nodes[id as usize];
                let mut src = |x: Value| match step_of.get(&x.node) {
                    Some(&k) if x.index == 0 => {
                        *inner_uses.entry(x.node).or_default() += 1;
                        fused::Src::Step(k)
                    }
                    _ => {
                        let at = inputs.iter().position(|&v| v == x).unwrap_or_else(|| {
                            inputs.push(x);
                            inputs.len() - 1
                        });
                        fused::Src::Input(at)
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
            // Outputs that only a later bf16 cast reads go straight into the cast's slot, when
            // nothing the chain reads or the launches up to the cast read or write meets it.
            let mut into_casts = vec![];
            for &v in &out_values {
                let Some(&cast) = self.cast_candidates.get(&v) else { continue };
                let Some(pc) = nodes.iter().position(|&n| n == cast) else { continue };
                if self.store_as.contains_key(&v) || skip.contains(&cast) || pc < end {
                    continue;
                }
                let cv = Value { node: cast, index: 0 };
                let Some(slot) = range(self.plan, cv) else { continue };
                let meets = |x: Value| range(self.plan, x).is_some_and(|r| overlap(r, slot));
                let chain_reads = inputs.iter().any(|&x| meets(x));
                let chain_writes = out_values.iter().any(|&o| o != v && meets(self.destination(o).0));
                let between = nodes[end..pc].iter().any(|&id| {
                    let n = &g.nodes[id as usize];
                    n.inputs.iter().any(|&x| meets(x))
                        || (0..n.outputs.len()).any(|k| meets(Value { node: id, index: k as u16 }))
                });
                if !(chain_reads || chain_writes || between) {
                    into_casts.push((v, cv));
                }
            }
            for &(v, cv) in &into_casts {
                self.store_as.insert(v, cv);
            }
            // A bf16 store (into a cast's slot) may not meet an input at all: its elements are
            // half the size, so even the same start is a different element.
            let clash = out_values.iter().any(|&o| {
                let (dst, dt) = self.destination(o);
                let ro = range(self.plan, dst);
                inputs.iter().any(|&x| match (ro, range(self.plan, x)) {
                    (Some(a), Some(b)) => overlap(a, b) && (a != b || dt == DType::BF16),
                    _ => false,
                })
            });
            if clash {
                for (v, _) in &into_casts {
                    self.store_as.remove(v);
                }
            } else {
                skip.extend(into_casts.iter().map(|&(_, cv)| cv.node));
                let dests: Vec<(Value, DType)> = out_values.iter().map(|&v| self.destination(v)).collect();
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
                let chain = fused::Chain { n, inputs: inputs.len(), steps, outputs, bf16 };
                let kernel =
                    self.kernel(chain.kernel().map_err(|e| node_error(&g.nodes[run[0] as usize], run[0], e))?)?;
                let mut args: Vec<A> = dests.iter().map(|&(v, _)| self.ptr(v)).collect();
                args.extend(inputs.iter().map(|&v| self.ptr(v)));
                let (blocks, threads) = grid_blocks(n);
                let pending =
                    Pending { kernel, grid: (blocks, 1, 1), block: (threads, 1, 1), args, node: Some(run[0]) };
                let dests = dests.into_iter().map(|(v, _)| v).collect();
                return Ok(Some(ChainLowered { end, pending, chain, inputs, dests, run: run.to_vec() }));
            }
            end -= 1;
        }
        Ok(None)
    }

    /// Products whose activation epilogue ([`gemm::GemmSpec::activation`], `u(product)` as a
    /// second output) writes a value no launch reads: every reader of it either multiplies it in
    /// a StoreMul epilogue that computes it from the product itself, or is in a fused chain that
    /// recomputes it. Their launches lose the activation (its kernel and the `u` pointer): a
    /// gated unit's f32 `gelu(gate)`, 92 MB at sixteen contexts, is then never written.
    fn dead_activation_stores(
        &mut self,
        view: &PhaseView,
        uses: &HashMap<Value, usize>,
        products: &LaunchedProducts,
        launches: &mut [Pending],
    ) -> Result<()> {
        // In node order, so that the catalog's order does not follow the map's.
        let mut acts: Vec<(u32, u32)> = self.more.gemm_act.iter().map(|(&host, &(u, _))| (host, u)).collect();
        acts.sort_unstable();
        for (host, u) in acts {
            let Some(&(li, spec, _)) = products.one_launch.get(&host) else { continue };
            let act = Value { node: u, index: 0 };
            let readers = view.readers(act);
            let multiplied = |r: u32| self.more.gemm_mul.values().any(|&(m, _, _, a)| m == r && a.is_some());
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
    fn chain_into_product(
        &mut self,
        view: &PhaseView,
        i: usize,
        cl: &ChainLowered,
        launches: &mut [Pending],
        products: &LaunchedProducts,
        uses: &HashMap<Value, usize>,
    ) -> Result<bool> {
        let grids = self.config.chain_epilogues;
        let g = &self.plan.program.graph;
        let operands = |id: u32| {
            let n = &g.nodes[id as usize];
            self.f32_gemm.get(&id).copied().unwrap_or((n.inputs[0], n.inputs[1]))
        };
        // A plain product launched as it is: no fusion writes anything else from its launch.
        let plain =
            |id: u32| products.plain.contains(&id) && !self.writes_beside(id) && !self.more.gemm_act.contains_key(&id);
        for (j, &x) in cl.inputs.iter().enumerate() {
            let Some((li, spec, shape)) = products.plain_one_launch(x.node) else { continue };
            let Some(&pg) = view.pos.get(&x.node) else { continue };
            let read_in_run: usize =
                cl.run.iter().map(|&r| g.nodes[r as usize].inputs.iter().filter(|&&y| y == x).count()).sum();
            let whole = x.index == 0
                && (deep_epilogue_grid(&spec, &shape) || grids == ChainEpilogues::Everywhere)
                && plain(x.node)
                && uses.get(&x).copied() == Some(read_in_run)
                && shape.batch == 1
                && shape.ldc == shape.n
                && shape.m as usize * shape.n as usize == cl.chain.n;
            if !whole || pg >= i {
                continue;
            }
            let Some(ce) = gemm::ChainEpilogue::new(&cl.chain, j) else { continue };
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
            let dests_clear = cl.dests.iter().all(|&d| rng(d).is_some_and(|r| clear_of(r, touched.iter().copied())));
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
            args.extend(cl.dests.iter().map(|&d| self.ptr(d)));
            args.extend(ce.others().into_iter().map(|k| self.ptr(cl.inputs[k])));
            args.append(&mut p.args);
            p.args = args;
            return Ok(true);
        }
        Ok(false)
    }

    /// Whether a fusion has MatMul `id`'s launch write something beside its product, or store
    /// its product elsewhere: a residual added, a multiply, heads, a cast.
    fn writes_beside(&self, id: u32) -> bool {
        self.gemm_add.contains_key(&id)
            || self.more.gemm_mul.contains_key(&id)
            || self.more.gemm_heads.contains_key(&id)
            || self.store_as.contains_key(&Value { node: id, index: 0 })
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
    fn gated_products(
        &mut self,
        products: &LaunchedProducts,
        launches: &mut [Pending],
        dead: &mut std::collections::HashSet<usize>,
    ) -> Result<()> {
        let tiled = |s: &GemmSpec| mergeable_tile(s, Layout::RowMajor);
        let mut merges = vec![];
        for (&up_id, &(_, gate, _, _)) in &self.more.gemm_mul {
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
    fn paired_products(
        &mut self,
        products: &LaunchedProducts,
        uses: &HashMap<Value, usize>,
        launches: &mut [Pending],
        dead: &mut std::collections::HashSet<usize>,
    ) -> Result<()> {
        let paired_kind =
            |s: &GemmSpec| mergeable_tile(s, Layout::ColMajor) && s.activation.is_none() && !s.gated && !s.uneven_split;
        let fused = |id: u32| self.writes_beside(id) || self.more.gemm_act.contains_key(&id);
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
                self.gemm_add.get(id).is_some_and(|&(_, r)| r == out1)
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

    /// The Add right after the LayerNormBackward at `nodes[i]` that its input-gradient kernel
    /// can do as it stores (`dx + r`): the Add's only LayerNorm operand is dx, read by nothing
    /// else, and the Add's slot meets x, dy and r only exactly and the gain and row statistics
    /// not at all. Returns (Add, r).
    fn layernorm_residual(
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
        if ln.op != Op::LayerNormBackward || an.op != Op::Binary(alpha_ir::Binary::Add) || skip.contains(&add) {
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
        let clear = apart(ln.inputs[0]) && apart(ln.inputs[4]) && apart(r);
        let stats = ln.inputs[1..4].iter().all(|&x| range(self.plan, x).is_none_or(|x| !overlap(sum, x)));
        (same && uses.get(&dx) == Some(&1) && clear && stats).then_some((add, r))
    }

    /// The bf16 cast at position `i + 2` of the residual gradient that the LayerNorm backward at
    /// `i` adds (`add`), where that launch may store it too ([`layernorm::backward_dx_kernel_copying`]):
    /// the cast's slot clear of everything the launch reads and writes. Returns the cast's output.
    fn cast_of_sum(
        &self,
        nodes: &[u32],
        i: usize,
        (add, r): (u32, Value),
        skip: &std::collections::HashSet<u32>,
    ) -> Option<Value> {
        let g = self.g();
        let &c = nodes.get(i + 2)?;
        let cn = &g.nodes[c as usize];
        let sum = Value { node: add, index: 0 };
        if skip.contains(&c) || !matches!(cn.op, Op::Cast { to: DType::BF16 }) || cn.inputs[0] != sum {
            return None;
        }
        let out = Value { node: c, index: 0 };
        let cr = range(self.plan, out)?;
        let ln = nodes[i];
        let touched = g.nodes[ln as usize].inputs.iter().copied().chain([
            r,
            sum,
            Value { node: ln, index: 1 },
            Value { node: ln, index: 2 },
        ]);
        clear_of(cr, touched.map(|v| range(self.plan, v))).then_some(out)
    }

    /// LayerNormBackward: the two deterministic parameter-gradient passes, then the input
    /// gradient (plus the following Add's other operand, written to the Add's slot, with `add`),
    /// last so that it may overwrite x or dy.
    fn lower_layernorm_backward(
        &mut self,
        id: u32,
        add: Option<(u32, Value)>,
        copy: Option<Value>,
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
        if partials_in_rows(self.config, nm) {
            let mut args: Vec<A> = [dst, x, gain, mean, rstd, dy].iter().map(|&a| self.ptr(a)).collect();
            args.extend(add.map(|(_, r)| self.ptr(r)));
            args.extend(copy.map(|c| self.ptr(c)));
            let k1 = self.kernel(layernorm::backward_dx_partials_kernel(nm, add.is_some(), copy.is_some()))?;
            let (grid, block) = layernorm::dx_partials_launch(nm);
            if self.deferred_folds.contains(&id) {
                // The partials wait in a region of their own for one pass-2 launch later.
                let held = self.held(nm.scratch_floats() * 4);
                args.push(A::Ptr(held));
                let grads = [out(1), out(2)].map(|v| self.plan.slot(v).offset);
                self.pending_folds.push((nm, [grads[0], grads[1], held]));
                return Ok(vec![Pending { kernel: k1, grid, block, args, node: Some(id) }]);
            }
            args.push(A::Scratch(0));
            let k3 = self.kernel(layernorm::backward_finish_kernel(nm))?;
            let (grid3, block3) = layernorm::finish_launch(nm);
            return Ok(vec![
                Pending { kernel: k1, grid, block, args, node: Some(id) },
                Pending {
                    kernel: k3,
                    grid: grid3,
                    block: block3,
                    args: vec![self.ptr(out(1)), self.ptr(out(2)), A::Scratch(0)],
                    node: Some(id),
                },
            ]);
        }
        let cols = (nm.c as u32).div_ceil(layernorm::THREADS);
        let k2 = self.kernel(layernorm::backward_partials_kernel(nm))?;
        let mut args = vec![A::Scratch(0)];
        args.extend([x, mean, rstd, dy].iter().map(|&a| self.ptr(a)));
        let mut v = vec![Pending {
            kernel: k2,
            grid: (cols, nm.bands() as u32, 1),
            block: (layernorm::THREADS, 1, 1),
            args,
            node: Some(id),
        }];
        let mut args: Vec<A> = [dst, x, gain, mean, rstd, dy].iter().map(|&a| self.ptr(a)).collect();
        if let Some((_, r)) = add {
            args.push(self.ptr(r));
        }
        if let Some(c) = copy {
            args.push(self.ptr(c));
        }
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
            args.extend([self.ptr(out(1)), self.ptr(out(2)), A::Scratch(0)]);
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
            args: vec![self.ptr(out(1)), self.ptr(out(2)), A::Scratch(0)],
            node: Some(id),
        });
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

    /// Where `v` is stored, and as what: its own slot in its dtype, or the slot of the bf16
    /// cast that alone reads it (see [`casts_into_producers`]).
    fn destination(&self, v: Value) -> (Value, DType) {
        match self.store_as.get(&v) {
            Some(&cast) => (cast, DType::BF16),
            None => (v, self.g().dtype(v)),
        }
    }

    /// One launch for consecutive parameter casts: a chunk table of (source, destination,
    /// length) in the constant region.
    fn lower_param_casts(&mut self, ids: &[u32]) -> Result<Pending> {
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
        let args = vec![A::Ptr(0), A::Ptr(table)];
        Ok(Pending { kernel, grid: (chunks as u32, 1, 1), block: (multi::THREADS, 1, 1), args, node: Some(ids[0]) })
    }

    fn want_f32(&self, node: &Node, id: u32, vals: &[Value]) -> Result<()> {
        for &v in vals {
            if self.g().dtype(v) != DType::F32 {
                return Err(node_error(node, id, format!("{v} is {}, this kernel takes f32", self.g().ty(v))));
            }
        }
        Ok(())
    }

    fn lower_node(&mut self, id: u32) -> Result<Vec<Pending>> {
        let plan = self.plan;
        let g = &plan.program.graph;
        let node = g.nodes[id as usize].clone();
        let out = |k: u16| Value { node: id, index: k };
        let ins = &node.inputs;
        let ishape = |k: usize| g.shape(ins[k]).to_vec();
        let idt = |k: usize| g.dtype(ins[k]);
        let os = node.outputs[0].shape.clone();
        let odt = node.outputs[0].dtype;
        let n = node.outputs[0].numel();
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::Unary(u) => {
                let (dst, odt) = self.destination(out(0));
                let pw = Pointwise {
                    shape: vec![n],
                    out: Operand::contiguous(odt, &[n]),
                    ins: vec![Operand::contiguous(idt(0), &[n])],
                    body: Body::Unary(*u),
                };
                v.push(self.pointwise(pw, vec![self.ptr(dst), self.ptr(ins[0])], some)?);
            }
            Op::Binary(b) => {
                let (dst, odt) = self.destination(out(0));
                let pw = Pointwise {
                    shape: os.clone(),
                    out: Operand::contiguous(odt, &os),
                    ins: vec![
                        Operand { dtype: idt(0), strides: broadcast_strides(&ishape(0), &os) },
                        Operand { dtype: idt(1), strides: broadcast_strides(&ishape(1), &os) },
                    ],
                    body: Body::Binary(*b),
                };
                v.push(self.pointwise(pw, vec![self.ptr(dst), self.ptr(ins[0]), self.ptr(ins[1])], some)?);
            }
            Op::Cast { .. } | Op::Reshape { .. } => {
                let pw = Pointwise {
                    shape: vec![n],
                    out: Operand::contiguous(odt, &[n]),
                    ins: vec![Operand::contiguous(idt(0), &[n])],
                    body: Body::Copy,
                };
                v.push(self.pointwise(pw, vec![self.ptr(out(0)), self.ptr(ins[0])], some)?);
            }
            Op::Broadcast { .. } => {
                let pw = Pointwise {
                    shape: os.clone(),
                    out: Operand::contiguous(odt, &os),
                    ins: vec![Operand { dtype: idt(0), strides: broadcast_strides(&ishape(0), &os) }],
                    body: Body::Copy,
                };
                v.push(self.pointwise(pw, vec![self.ptr(out(0)), self.ptr(ins[0])], some)?);
            }
            Op::Permute { perm } => {
                let xs = contiguous_strides(&ishape(0));
                let (dst, odt) = self.destination(out(0));
                let pw = Pointwise {
                    shape: os.clone(),
                    out: Operand::contiguous(odt, &os),
                    ins: vec![Operand { dtype: idt(0), strides: perm.iter().map(|&p| xs[p]).collect() }],
                    body: Body::Copy,
                };
                v.push(self.pointwise(pw, vec![self.ptr(dst), self.ptr(ins[0])], some)?);
            }
            Op::Slice { axis, start, .. } => {
                let xs = contiguous_strides(&ishape(0));
                let pw = Pointwise {
                    shape: os.clone(),
                    out: Operand::contiguous(odt, &os),
                    ins: vec![Operand { dtype: idt(0), strides: xs.clone() }],
                    body: Body::Copy,
                };
                let src = self.ptr_at(ins[0], *start as u64 * xs[*axis]);
                v.push(self.pointwise(pw, vec![self.ptr(out(0)), src], some)?);
            }
            Op::Concat { axis } => {
                let ost = contiguous_strides(&os);
                let mut at = 0u64;
                for (kk, &part) in ins.iter().enumerate() {
                    let ps = ishape(kk);
                    let len = ps[*axis] as u64;
                    if ps.iter().product::<usize>() > 0 {
                        let pw = Pointwise {
                            shape: ps.clone(),
                            out: Operand { dtype: odt, strides: ost.clone() },
                            ins: vec![Operand::contiguous(idt(kk), &ps)],
                            body: Body::Copy,
                        };
                        let dst = self.ptr_at(out(0), at * ost[*axis]);
                        v.push(self.pointwise(pw, vec![dst, self.ptr(part)], some)?);
                    }
                    at += len;
                }
            }
            Op::Reduce { kind, axes, .. } => {
                let r = Reduction::new(*kind, &ishape(0), axes, idt(0), odt)?;
                let chunks = r.chunks();
                let k1 = self.kernel(r.kernel())?;
                // With one chunk the partials pointer is unused; it still points into the arena.
                let partials = if chunks > 1 { A::Scratch(0) } else { self.ptr(out(0)) };
                v.push(Pending {
                    kernel: k1,
                    grid: (r.outputs() as u32, chunks as u32, 1),
                    block: (crate::kernels::reduce::THREADS, 1, 1),
                    args: vec![self.ptr(out(0)), self.ptr(ins[0]), partials],
                    node: some,
                });
                if chunks > 1 {
                    self.need_scratch(r.outputs() * chunks * 4);
                    let k2 = self.kernel(r.finish_kernel())?;
                    v.push(Pending {
                        kernel: k2,
                        grid: (r.outputs() as u32, 1, 1),
                        block: (crate::kernels::reduce::THREADS, 1, 1),
                        args: vec![self.ptr(out(0)), A::Scratch(0)],
                        node: some,
                    });
                }
            }
            Op::MatMul { ta, tb } => {
                let (sa, sb) = (ishape(0), ishape(1));
                let ra = sa.len();
                let (m, kd) = if *ta { (sa[ra - 1], sa[ra - 2]) } else { (sa[ra - 2], sa[ra - 1]) };
                let nn = os[os.len() - 1];
                let batch: usize = sa[..ra - 2].iter().product();
                let b_batched = sb.len() > 2;
                if let Some((mut spec, shape)) = tiled_gemm(self.config, g, id) {
                    // Fusions decided per phase by `fuse`: f32 sources read with convert-on-load
                    // (the skipped casts' exact rounding), the following Add as the epilogue.
                    let (a, b) = self.f32_gemm.get(&id).copied().unwrap_or((ins[0], ins[1]));
                    let input = |v: Value| if g.dtype(v) == DType::F32 { Input::F32 } else { Input::Bf16 };
                    (spec.a_input, spec.b_input) = (input(a), input(b));
                    let (c, r) = match self.gemm_add.get(&id) {
                        Some(&(add, r)) => {
                            spec.epilogue = Epilogue::AddResidual;
                            (Value { node: add, index: 0 }, r)
                        }
                        None => (out(0), out(0)),
                    };
                    let act = self.more.gemm_act.get(&id).copied();
                    spec.activation = act.map(|x| x.1);
                    // A multiply after it as its epilogue: R = its other operand, U = its cast.
                    let mul = self.more.gemm_mul.get(&id).copied();
                    let (c, r) = match mul {
                        Some((_, rv, _, u)) => {
                            spec.epilogue = Epilogue::StoreMul;
                            spec.activation = u;
                            (c, rv)
                        }
                        None => (c, r),
                    };
                    // Stored split into heads where the Permute after it was fused.
                    let (c, r) = match self.more.gemm_heads.get(&id) {
                        Some(&(p, heads)) => {
                            spec.heads = Some(heads);
                            (Value { node: p, index: 0 }, Value { node: p, index: 0 })
                        }
                        None => (c, r),
                    };
                    // dO as bf16 with attention's delta, into held memory the backward reads:
                    // (O, and the held offsets of dO and delta).
                    let mut delta = None;
                    if let (Some(&(attn, o)), Some(h)) = (self.more.delta_heads.get(&id), spec.heads.as_mut()) {
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
                    // Parts of whole K steps that may differ by one where the parts run on the
                    // TMA engine ([`GemmShape::split_k_uneven`]); else equal parts.
                    let uneven_ok = self.config.uneven_split && on_tma(self.config, spec).engine == gemm::Engine::Tma;
                    let splits = match (self.config.split_k, uneven_ok) {
                        (false, _) => 1,
                        (true, true) => shape.split_k_uneven(spec.bk),
                        (true, false) => shape.split_k(spec.bk),
                    };
                    let uneven = !shape.k.is_multiple_of(spec.bk * splits);
                    let plain = spec.epilogue == Epilogue::Store
                        && spec.activation.is_none()
                        && spec.heads.is_none()
                        && shape.batch == 1
                        && c == out(0);
                    if splits > 1 {
                        // K in parts into the scratch region, then the fixed-order sum with the
                        // epilogue (which runs after every operand read: the fusions' slot rules
                        // hold a fortiori).
                        let part = if uneven { shape.split_uneven(splits) } else { shape.split(&spec, splits) };
                        let pspec = GemmSpec {
                            epilogue: Epilogue::Store,
                            activation: None,
                            tile: gemm::Tile::T128x128,
                            ..spec
                        };
                        let pspec = GemmSpec {
                            uneven_split: uneven,
                            ..with_ring(self.config, on_tma(self.config, pspec), &part)
                        };
                        let mn = shape.m * shape.n;
                        self.need_scratch(mn as usize * splits as usize * 4);
                        let kernel = self.kernel(pspec.kernel())?;
                        let mut args = vec![self.ptr(a), self.ptr(b), A::Scratch(0), A::Scratch(0)];
                        args.extend(shape_args(&part));
                        args.extend(self.maps_for(&pspec, &part, a, b)?);
                        let block = (pspec.threads(), 1, 1);
                        v.push(Pending { kernel, grid: pspec.grid(&part), block, args, node: some });
                        self.last_product = Some(ProductLaunch { id, spec, shape, one_launch: false, plain });
                        let mut args = vec![self.ptr(c), self.ptr(r), A::Scratch(0)];
                        if let Some((u, _)) = act {
                            args.push(self.ptr(Value { node: u, index: 0 }));
                        }
                        let width = gemm::splitk_reduce_width(mn, aligned16(&args));
                        let kernel = self.kernel(gemm::splitk_reduce_kernel(&spec, splits, mn, width))?;
                        let blocks = gemm::splitk_reduce_blocks(mn, width);
                        let block = (gemm::REDUCE_THREADS, 1, 1);
                        v.push(Pending { kernel, grid: (blocks, 1, 1), block, args, node: some });
                        return Ok(v);
                    }
                    let spec = settled(with_ring(self.config, on_tma(self.config, spec), &shape), &shape);
                    self.last_product = Some(ProductLaunch { id, spec, shape, one_launch: true, plain });
                    if delta.is_some() && !(spec.engine == gemm::Engine::Tma && gemm_tma::ring_holds_tile(&spec)) {
                        return Err(node_error(&node, id, format!("{}: no delta-heads store", spec.name())));
                    }
                    let kernel = self.kernel(spec.kernel())?;
                    // A delta-heads store: C the bf16 dO, R attention's O, U delta.
                    let (c_arg, r_arg, u_delta) = match delta {
                        Some((o, (do16, dl))) => (A::Ptr(do16), self.ptr(o), Some(A::Ptr(dl))),
                        None => (self.ptr(c), self.ptr(r), None),
                    };
                    let mut args = vec![self.ptr(a), self.ptr(b), c_arg, r_arg];
                    args.extend(shape_args(&shape));
                    args.extend(u_delta);
                    if let Some((u, _)) = act {
                        args.push(self.ptr(Value { node: u, index: 0 }));
                    }
                    if let Some((_, _, cast, _)) = mul {
                        args.push(self.ptr(cast));
                    }
                    args.extend(self.maps_for(&spec, &shape, a, b)?);
                    if spec.heads.is_some_and(|h| h.bf16_turned) {
                        let base = self.more.turned_base[&id];
                        let t = spec.heads.map_or(0, |h| h.t as usize);
                        args.push(A::Ptr(self.rotary_table(t, 64, base)));
                    }
                    v.push(Pending {
                        kernel,
                        grid: spec.grid(&shape),
                        block: (spec.threads(), 1, 1),
                        args,
                        node: some,
                    });
                } else {
                    if !matches!(idt(0), DType::F32 | DType::BF16) {
                        return Err(node_error(&node, id, format!("matmul of {} operands", idt(0))));
                    }
                    let p = Product { batch, m, n: nn, k: kd, ta: *ta, tb: *tb, b_batched, dtype: idt(0) };
                    let kernel = self.kernel(p.kernel())?;
                    v.push(Pending {
                        kernel,
                        grid: p.grid(),
                        block: (16, 16, 1),
                        args: vec![self.ptr(out(0)), self.ptr(ins[0]), self.ptr(ins[1])],
                        node: some,
                    });
                }
            }
            Op::Gather => {
                self.want_f32(&node, id, &ins[..1])?;
                let rows = ishape(0)[0];
                let d = g.ty(ins[0]).numel() / rows.max(1);
                let tokens = g.ty(ins[1]).numel();
                if d == 0 || !d.is_multiple_of(4) || idt(1) != DType::I32 {
                    return Err(node_error(
                        &node,
                        id,
                        format!(
                            "gather needs rows of a multiple of 4 floats and i32 ids (rows of {d}, ids {})",
                            idt(1)
                        ),
                    ));
                }
                let kernel = self.kernel(embedding::gather_kernel())?;
                v.push(Pending {
                    kernel,
                    grid: (tokens as u32, 1, 1),
                    block: (embedding::THREADS, 1, 1),
                    args: vec![
                        self.ptr(out(0)),
                        self.ptr(ins[0]),
                        self.ptr(ins[1]),
                        A::U32(rows as u32),
                        A::U32(d as u32),
                    ],
                    node: some,
                });
            }
            Op::ScatterAdd { rows } => {
                self.want_f32(&node, id, &ins[..1])?;
                let d = n / (*rows).max(1);
                let tokens = g.ty(ins[1]).numel();
                if d == 0 || !d.is_multiple_of(4) || idt(1) != DType::I32 {
                    return Err(node_error(
                        &node,
                        id,
                        format!(
                            "scatter-add needs rows of a multiple of 4 floats and i32 ids (rows of {d}, ids {})",
                            idt(1)
                        ),
                    ));
                }
                let fill = Pointwise {
                    shape: vec![n],
                    out: Operand::contiguous(DType::F32, &[n]),
                    ins: vec![],
                    body: Body::Fill(0.0),
                };
                v.push(self.pointwise(fill, vec![self.ptr(out(0))], some)?);
                let blocks = embedding::scatter_add_blocks(*rows as u32);
                let args = vec![
                    self.ptr(out(0)),
                    self.ptr(ins[0]),
                    self.ptr(ins[1]),
                    A::U32(tokens as u32),
                    A::U32(*rows as u32),
                    A::U32(d as u32),
                ];
                let kernel = self.kernel(embedding::scatter_add_kernel())?;
                v.push(Pending { kernel, grid: (blocks, 1, 1), block: (embedding::THREADS, 1, 1), args, node: some });
            }
            Op::LayerNorm { eps } => {
                self.want_f32(&node, id, ins)?;
                let nm = norm_of(g, &node);
                let (dst, ydt) = self.destination(out(0));
                let kernel = self.kernel(layernorm::forward_kernel_storing(nm, *eps as f32, ydt == DType::BF16))?;
                let args = vec![self.ptr(dst), self.ptr(out(1)), self.ptr(out(2))]
                    .into_iter()
                    .chain(ins.iter().map(|&x| self.ptr(x)))
                    .collect();
                v.push(Pending {
                    kernel,
                    grid: (nm.rows as u32, 1, 1),
                    block: (layernorm::THREADS, 1, 1),
                    args,
                    node: some,
                });
            }
            Op::LayerNormBackward => v.extend(self.lower_layernorm_backward(id, None, None)?),
            Op::Rotary { base, inverse } => {
                self.want_f32(&node, id, ins)?;
                let s = ishape(0);
                if s.len() != 4 || !s[3].is_multiple_of(2) {
                    return Err(node_error(&node, id, format!("rotary takes [B, H, T, D] with D even, got {s:?}")));
                }
                let (t, d) = (s[2], s[3]);
                let table = self.rotary_table(t, d, *base);
                let kernel = self.kernel(rotary::kernel(n / d, t, d, *inverse))?;
                let (blocks, threads) = grid_blocks(n / 2);
                v.push(Pending {
                    kernel,
                    grid: (blocks, 1, 1),
                    block: (threads, 1, 1),
                    args: vec![self.ptr(out(0)), self.ptr(ins[0]), A::Ptr(table)],
                    node: some,
                });
            }
            Op::Attention { scale, softcap, bf16 } | Op::AttentionBackward { scale, softcap, bf16 } => {
                self.want_f32(&node, id, ins)?;
                let (q, kv) = (ishape(0), ishape(1));
                let dims = Dims {
                    b: q[0],
                    h: q[1],
                    g: kv[1],
                    t: q[2],
                    d: q[3],
                    scale: *scale as f32,
                    softcap: softcap.map(|c| c as f32),
                };
                dims.check().map_err(|e| node_error(&node, id, e))?;
                // bf16 operands at head dimension 64: the tensor-core kernels (same parameters
                // and grids). Otherwise the fp32 kernels, which round nothing: a bf16 attention
                // of another head size runs more precisely than it asks.
                use crate::kernels::attention::mma;
                let tc = *bf16 && mma::applies(&dims);
                let block = if tc { mma::block() } else { (attention::ROWS, 1, 1) };
                // Forward rotary fused: q (k) read before its Rotary and turned on load.
                let load = self.more.attn_load.get(&id).copied().unwrap_or_default();
                let src = |k: usize| load[k].map_or(ins[k], |x| x.0);
                // q, k and v as bf16 (turned by the projection's epilogue) where `turned_heads`
                // chose it: at half their f32 offsets within the heads tensor.
                let bf16_at = self.more.bf16_attention.get(&id).map(|t| t.0);
                if bf16_at.is_some() && !tc {
                    return Err(node_error(&node, id, "bf16 q, k, v need the tensor-core kernels"));
                }
                let qkv = |lw: &Self, k: usize| -> A {
                    let x = if k < 2 { src(k) } else { ins[2] };
                    match bf16_at {
                        Some(at) => A::Ptr(at + (lw.plan.slot(x).offset - at) / 2),
                        None => lw.ptr(x),
                    }
                };
                let (load, turned) = match bf16_at {
                    Some(_) => ([None, None], [false, false]),
                    None => (load, load.map(|x| x.is_some())),
                };
                let tabs: Vec<A> =
                    load.iter().flatten().map(|&(_, base)| A::Ptr(self.rotary_table(dims.t, dims.d, base))).collect();
                let [qa, ka, va] = [0, 1, 2].map(|k| qkv(self, k));
                if matches!(node.op, Op::Attention { .. }) {
                    let copy = self.more.output_copy.get(&id).copied();
                    let wgmma = self.config.wgmma_attention && crate::kernels::attention::wgmma::applies(&dims);
                    let kernel = self.kernel(match (tc, bf16_at, copy) {
                        (true, Some(_), c) if wgmma => {
                            crate::kernels::attention::wgmma::forward_kernel(&dims, c.is_some())
                        }
                        (true, Some(_), Some(_)) => mma::forward_kernel_bf16_copying(&dims),
                        (true, Some(_), None) => mma::forward_kernel_bf16(&dims),
                        (true, None, _) => mma::forward_kernel_rotating(&dims, turned),
                        _ => attention::forward_kernel_rotating(&dims, turned),
                    })?;
                    let mut args: Vec<A> = vec![self.ptr(out(0)), self.ptr(out(1)), qa, ka, va];
                    args.extend(tabs);
                    args.extend(copy.map(|c| self.ptr(c)));
                    v.push(Pending { kernel, grid: dims.grid_q(), block, args, node: some });
                } else {
                    self.need_scratch(dims.scratch_floats() * 4);
                    // Inverse rotary fused: dq (dk) stored turned back, into the Rotary's slot.
                    let rot = self.more.attnb_rot.get(&id).copied().unwrap_or_default();
                    let dst = |k: usize| rot[k].map_or(out(k as u16), |x| x.0);
                    let (ov, lse, dov) = (ins[3], ins[4], ins[5]);
                    // Both passes in one launch (after delta alone) where their grids agree and
                    // no output lies on an input: the passes then run side by side.
                    let apart = joint_backward_apart(self.plan, &self.more, id, &node);
                    let fused_delta = self.delta_at.get(&id).copied();
                    if fused_delta.is_some() && !(tc && bf16_at.is_some() && dims.g == dims.h && apart) {
                        return Err(node_error(
                            &node,
                            id,
                            "its product stored dO and delta, but it runs in two passes",
                        ));
                    }
                    if tc && dims.g == dims.h && apart && self.config.joint_attention_backward {
                        // With bf16 q, k, v the delta kernel also writes dO as bf16 (after delta
                        // in the scratch region), which the passes then copy as they copy q, k, v
                        // — or the output gradient's product wrote both ([`delta_heads`]).
                        let (delta, do16) = match fused_delta {
                            Some((do16, delta)) => (A::Ptr(delta), Some(A::Ptr(do16))),
                            None => {
                                let do16 = bf16_at.map(|_| {
                                    let (at, end) = attention_scratch(&dims).do16;
                                    self.need_scratch(end);
                                    A::Scratch(at)
                                });
                                let kd = self.kernel(match do16 {
                                    Some(_) => mma::backward_delta_kernel_bf16(&dims),
                                    None => mma::backward_delta_kernel(&dims),
                                })?;
                                let mut args = vec![A::Scratch(0), self.ptr(ov), self.ptr(dov)];
                                args.extend(do16);
                                v.push(Pending { kernel: kd, grid: dims.grid_q(), block, args, node: some });
                                (A::Scratch(0), do16)
                            }
                        };
                        let inverse = [rot[0].is_some(), rot[1].is_some()];
                        let merged = self.more.merged_grads.get(&id).copied();
                        let wgmma =
                            self.config.wgmma_attention_backward && crate::kernels::attention::wgmma::applies(&dims);
                        let kb = self.kernel(match (bf16_at, merged) {
                            (Some(_), m) if wgmma => {
                                crate::kernels::attention::wgmma::backward_kernel(&dims, inverse, m.is_some())
                            }
                            (Some(_), Some(_)) => mma::backward_kernel_bf16_merged(&dims, inverse),
                            (Some(_), None) => mma::backward_kernel_bf16(&dims, inverse),
                            _ => mma::backward_kernel_rotating(&dims, inverse, turned),
                        })?;
                        let mut args: Vec<A> = match merged {
                            Some(cast) => vec![self.ptr(cast); 3],
                            None => [dst(0), dst(1), out(2)].iter().map(|&a| self.ptr(a)).collect(),
                        };
                        args.push(delta);
                        args.extend([qa, ka, va]);
                        args.extend([ov, lse, dov].iter().map(|&a| self.ptr(a)));
                        args.extend(do16);
                        for r in rot.iter().flatten() {
                            args.push(A::Ptr(self.rotary_table(dims.t, dims.d, r.1)));
                        }
                        args.extend(tabs);
                        v.push(Pending { kernel: kb, grid: dims.grid_q(), block, args, node: some });
                        return Ok(v);
                    }
                    let k1 = self.kernel(match (tc, bf16_at) {
                        (true, Some(_)) => mma::backward_dq_kernel_bf16(&dims, rot[0].is_some()),
                        (true, None) => mma::backward_dq_kernel_rotating(&dims, rot[0].is_some(), turned),
                        _ => attention::backward_dq_kernel_rotating(&dims, rot[0].is_some(), turned),
                    })?;
                    let mut args = vec![self.ptr(dst(0)), A::Scratch(0), qa, ka, va];
                    args.extend([ov, lse, dov].iter().map(|&a| self.ptr(a)));
                    if let Some((_, base)) = rot[0] {
                        args.push(A::Ptr(self.rotary_table(dims.t, dims.d, base)));
                    }
                    args.extend(tabs.iter().copied());
                    v.push(Pending { kernel: k1, grid: dims.grid_q(), block, args, node: some });
                    let k2 = self.kernel(match (tc, bf16_at) {
                        (true, Some(_)) => mma::backward_dkv_kernel_bf16(&dims, rot[1].is_some()),
                        (true, None) => mma::backward_dkv_kernel_rotating(&dims, rot[1].is_some(), turned),
                        _ => attention::backward_dkv_kernel_rotating(&dims, rot[1].is_some(), turned),
                    })?;
                    let mut args: Vec<A> = vec![self.ptr(dst(1)), self.ptr(out(2)), qa, ka, va, self.ptr(lse)];
                    args.push(A::Scratch(0));
                    args.push(self.ptr(dov));
                    if let Some((_, base)) = rot[1] {
                        args.push(A::Ptr(self.rotary_table(dims.t, dims.d, base)));
                    }
                    args.extend(tabs);
                    v.push(Pending { kernel: k2, grid: dims.grid_kv(), block, args, node: some });
                }
            }
            Op::CrossEntropy => {
                self.want_f32(&node, id, &ins[..1])?;
                let s = ishape(0);
                let vocab = u32::try_from(s[s.len() - 1]).ok();
                let kernel = self.kernel(cross_entropy::forward_kernel_for(vocab))?;
                v.push(Pending {
                    kernel,
                    grid: (s[0] as u32, 1, 1),
                    block: (cross_entropy::THREADS, 1, 1),
                    args: vec![
                        self.ptr(out(0)),
                        self.ptr(out(1)),
                        self.ptr(ins[0]),
                        self.ptr(ins[1]),
                        A::U32(s[1] as u32),
                    ],
                    node: some,
                });
            }
            Op::CrossEntropyBackward => {
                self.want_f32(&node, id, &[ins[0], ins[1], ins[3]])?;
                let s = ishape(0);
                // dlogits as bf16 where a cast alone reads them (see `casts_into_producers`).
                let (dst, dtype) = self.destination(out(0));
                let kernel = self.kernel(if dtype == DType::BF16 {
                    cross_entropy::backward_kernel_bf16()
                } else {
                    cross_entropy::backward_kernel()
                })?;
                let mut args: Vec<A> = [dst, ins[0], ins[1], ins[2], ins[3]].iter().map(|&a| self.ptr(a)).collect();
                args.push(A::U32(s[1] as u32));
                v.push(Pending {
                    kernel,
                    grid: (s[0] as u32, 1, 1),
                    block: (cross_entropy::THREADS, 1, 1),
                    args,
                    node: some,
                });
            }
            Op::Recurrence { reverse } => {
                self.want_f32(&node, id, ins)?;
                let s = ishape(0);
                let (b, t) = (s[0], s[1]);
                let c = n / (b * t).max(1);
                let kernel = self.kernel(recurrence::kernel(b, t, c, *reverse))?;
                let (blocks, threads) = grid_blocks(b * c);
                v.push(Pending {
                    kernel,
                    grid: (blocks, 1, 1),
                    block: (threads, 1, 1),
                    args: vec![self.ptr(out(0)), self.ptr(ins[0]), self.ptr(ins[1])],
                    node: some,
                });
            }
            Op::AdamW { beta1, beta2, eps, weight_decay } => {
                self.want_f32(&node, id, ins)?;
                let kernel = self.kernel(adamw::step_kernel(*beta1, *beta2, *eps, *weight_decay, n))?;
                let (blocks, threads) = grid_blocks(n);
                v.push(Pending {
                    kernel,
                    grid: (blocks, 1, 1),
                    block: (threads, 1, 1),
                    args: ins.iter().map(|&a| self.ptr(a)).collect(),
                    node: some,
                });
            }
            Op::SumSquares => {
                self.want_f32(&node, id, ins)?;
                let tensors: Vec<(usize, usize)> =
                    ins.iter().map(|&x| (plan.slot(x).offset, g.ty(x).numel())).collect();
                if tensors.iter().all(|t| t.1 == 0) {
                    let fill = Pointwise {
                        shape: vec![1],
                        out: Operand::contiguous(DType::F32, &[1]),
                        ins: vec![],
                        body: Body::Fill(0.0),
                    };
                    v.push(self.pointwise(fill, vec![self.ptr(out(0))], some)?);
                    return Ok(v);
                }
                let (bytes, chunks) = multi::sumsq_table(&tensors).map_err(|e| node_error(&node, id, e))?;
                let table = self.constant(bytes);
                self.need_scratch(chunks * 8);
                let k1 = self.kernel(multi::sumsq_chunks_kernel())?;
                v.push(Pending {
                    kernel: k1,
                    grid: (chunks as u32, 1, 1),
                    block: (multi::THREADS, 1, 1),
                    args: vec![A::Scratch(0), A::Ptr(0), A::Ptr(table)],
                    node: some,
                });
                let k2 = self.kernel(multi::sumsq_finish_kernel())?;
                v.push(Pending {
                    kernel: k2,
                    grid: (1, 1, 1),
                    block: (multi::THREADS, 1, 1),
                    args: vec![self.ptr(out(0)), A::Scratch(0), A::U32(chunks as u32)],
                    node: some,
                });
            }
            Op::RmsNorm { .. } | Op::RmsNormBackward => {
                return Err(node_error(&node, id, "RMSNorm has no GPU kernel yet (no system on the GPU uses it)"));
            }
            Op::Param { .. } | Op::State { .. } | Op::Input { .. } | Op::HostScalar { .. } | Op::Constant { .. } => {
                return Err(node_error(&node, id, "a leaf is not a kernel"));
            }
        }
        Ok(v)
    }
}

/// The tiled GEMM's spec (bf16 inputs, store epilogue) and shape for MatMul node `id`, when
/// its operands are bf16 and the shape meets the tiled kernel's contract.
fn tiled_gemm(cfg: &CudaConfig, g: &alpha_ir::Graph, id: u32) -> Option<(GemmSpec, GemmShape)> {
    let node = &g.nodes[id as usize];
    let Op::MatMul { ta, tb } = node.op else { return None };
    let (sa, sb) = (g.shape(node.inputs[0]), g.shape(node.inputs[1]));
    let os = &node.outputs[0].shape;
    let ra = sa.len();
    let (m, kd) = if ta { (sa[ra - 1], sa[ra - 2]) } else { (sa[ra - 2], sa[ra - 1]) };
    let nn = os[os.len() - 1];
    let batch: usize = sa[..ra - 2].iter().product();
    let b_batched = sb.len() > 2;
    let layout = |t: bool| if t { Layout::ColMajor } else { Layout::RowMajor };
    let spec = GemmSpec::new(layout(ta), layout(tb), Input::Bf16);
    let shape = GemmShape {
        m: m as u32,
        n: nn as u32,
        k: kd as u32,
        batch: batch as u32,
        lda: if ta { m } else { kd } as u32,
        ldb: if tb { kd } else { nn } as u32,
        ldc: nn as u32,
        stride_a: (m * kd) as u64,
        stride_b: if b_batched { (kd * nn) as u64 } else { 0 },
        stride_c: (m * nn) as u64,
    };
    let bf16 = g.dtype(node.inputs[0]) == DType::BF16 && g.dtype(node.inputs[1]) == DType::BF16;
    let spec = GemmSpec { tile: shape.tile(), tuning: cfg.gemm_tuning, ..spec };
    // The wgmma engine wherever K allows it.
    let wgmma = cfg.gemm_engine != gemm::Engine::Mma && shape.k.is_multiple_of(gemm_wgmma::BK);
    let spec = if wgmma { spec.wgmma() } else { spec };
    (bf16 && node.outputs[0].dtype == DType::F32 && shape.check(&spec).is_ok()).then_some((spec, shape))
}

/// The store of a product launched alone or paired (`spec`, on its engine and ring) over
/// `shape`: plain f32 stores of tall outputs through shared memory ([`tall_store`]).
fn settled(spec: GemmSpec, shape: &GemmShape) -> GemmSpec {
    GemmSpec { staged_store: tall_store(&spec, shape), ..spec }
}

/// Rows (tokens) from which a product's plain f32 store runs through shared memory
/// ([`GemmSpec::staged_store`]).
const TALL_ROWS: u32 = 8192;

/// Whether a plain f32 store of `spec` over `shape` runs through shared memory a row a warp
/// ([`GemmSpec::staged_store`]): unbatched products over at least [`TALL_ROWS`] rows of a
/// row-major A (rows are tokens: not a weight gradient's `Xᵀ·dY`) on the TMA engine, where
/// the configuration leaves it to the lowering. Why: whole 512-byte rows a warp write sixteen
/// contexts' large outputs (the logits' 805 MB, the 32 MB input gradients) faster than the
/// fragments' scattered 16-byte pieces (every plain store staged, sixteen contexts' step
/// 0.2 ms faster), while one context's outputs sit in L2 and the staging's barriers showed
/// (0.05–0.07 ms slower).
fn tall_store(spec: &GemmSpec, shape: &GemmShape) -> bool {
    spec.tuning.staged_epilogues == gemm::StagedEpilogues::Tall
        && spec.engine == gemm::Engine::Tma
        && spec.epilogue == Epilogue::Store
        && spec.activation.is_none()
        && spec.heads.is_none()
        && spec.chain.is_none()
        && spec.a == Layout::RowMajor
        && shape.batch == 1
        && shape.m >= TALL_ROWS
}

/// Where an attention backward's values lie in the scratch region, each as (offset, end):
/// delta (f32 a query row) from 0, dO as bf16 after it.
struct AttentionScratch {
    do16: (usize, usize),
}

fn attention_scratch(dims: &Dims) -> AttentionScratch {
    let rows = dims.scratch_floats();
    let do16 = (rows * 4).div_ceil(ALIGN) * ALIGN;
    AttentionScratch { do16: (do16, do16 + rows * dims.d * 2) }
}

/// Whether a launch of `spec` on `shape` spans [`gemm_wgmma::DEEP_EPILOGUE_WAVES`] waves of
/// blocks a tile: deep enough for a fused epilogue's extra
/// work to pay.
fn deep_epilogue_grid(spec: &GemmSpec, shape: &GemmShape) -> bool {
    let (gx, gy) = spec.tiles(shape);
    gx * gy * shape.batch >= gemm_wgmma::DEEP_EPILOGUE_WAVES * gemm::SMS
}

/// `spec` on the TMA-fed engine where it runs on `wgmma` with bf16 operands (unless the
/// configuration keeps the `cp.async` ring).
fn on_tma(cfg: &CudaConfig, spec: GemmSpec) -> GemmSpec {
    let bf16 = spec.a_input == Input::Bf16 && spec.b_input == Input::Bf16;
    if spec.engine == gemm::Engine::Wgmma && bf16 && cfg.gemm_engine == gemm::Engine::Tma {
        spec.tma()
    } else {
        spec
    }
}

/// `spec` (inputs, tile and epilogue settled) with the `wgmma` ring depth for a launch of
/// `shape`: [`gemm_wgmma::stages_for`] its grid, or the forced depth where it is allowed.
fn with_ring(cfg: &CudaConfig, spec: GemmSpec, shape: &GemmShape) -> GemmSpec {
    if spec.engine == gemm::Engine::Mma {
        return spec;
    }
    let f32_operand = spec.a_input == Input::F32 || spec.b_input == Input::F32;
    let (gx, gy, gz) = spec.grid(shape);
    let stages = match cfg.ring_stages {
        n if n >= 4 || (n == 3 && !f32_operand) => n,
        _ => gemm_wgmma::stages_for(&spec, gx * gy * gz, cfg.ring_waves),
    };
    GemmSpec { stages, ..spec }
}

/// The MatMul whose product Permute `p` (with `perm`) splits into attention heads, and the
/// split: the product `[B·T, S·H·D]` reshaped (each link read once) to `[B, T, S, H, D]` and
/// permuted to `[S, B, H, T, D]`, or to `[B, T, H, D]` and permuted to `[B, H, T, D]`; an
/// unbatched f32 tiled product that split-K leaves whole, D a multiple of 8.
fn head_split(
    cfg: &CudaConfig,
    g: &alpha_ir::Graph,
    uses: &HashMap<Value, usize>,
    p: &Node,
    perm: &[usize],
) -> Option<(u32, gemm::Heads)> {
    let mut x = p.inputs[0];
    let shape = g.shape(x).to_vec();
    let (b, t, h, d) = match (perm, shape.as_slice()) {
        ([2, 0, 3, 1, 4], &[b, t, _, h, d]) | ([0, 2, 1, 3], &[b, t, h, d]) => (b, t, h, d),
        _ => return None,
    };
    while matches!(g.nodes[x.node as usize].op, Op::Reshape { .. }) && uses.get(&x) == Some(&1) {
        x = g.nodes[x.node as usize].inputs[0];
    }
    let mm = x.node;
    let (spec, shape) = tiled_gemm(cfg, g, mm)?;
    let whole = shape.batch == 1 && shape.split_k(spec.bk) == 1;
    let ok = x.index == 0
        && uses.get(&x) == Some(&1)
        && whole
        && shape.m as usize == b * t
        && d.is_multiple_of(8)
        && p.outputs[0].dtype == DType::F32;
    let heads =
        gemm::Heads { batch: b as u32, t: t as u32, heads: h as u32, d: d as u32, bf16_turned: false, delta: false };
    ok.then_some((mm, heads))
}

/// Byte range of `v`'s slot, if it has one.
fn range(plan: &Plan, v: Value) -> Option<(usize, usize)> {
    let s = plan.slots.get(v.node as usize)?.get(v.index as usize).copied().flatten()?;
    let bytes = plan.program.graph.ty(v).numel() * plan.program.graph.dtype(v).size();
    Some((s.offset, s.offset + bytes))
}

fn overlap(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// The fusions of one phase (`nodes`, in launch order), decided before lowering it.
///
/// * GEMM add epilogue: `Add(x, MatMul)` or `Add(MatMul, x)` right after its MatMul, the
///   product read by nothing else, x of the output's shape in f32: the GEMM computes
///   `acc + x` (the same f32 addition) straight into the Add's slot. Its slot must not overlap
///   the GEMM's operands (the planner may reuse their space once the MatMul is done), and may
///   coincide with x only exactly (each element is read, then written, by one thread).
/// * Casts into GEMM loads (with `fold_casts`): a MatMul operand that is a `Cast{BF16}` of an f32 tensor, unwritten
///   from the cast through the MatMul, may read the source with the GEMM's round-to-nearest-even
///   convert-on-load (the cast's own rounding). A cast every reading operand of which may do so
///   is skipped, and those operands load f32; each operand chooses alone.
///
/// Casts among `producer_casts` ([`producer_cast_candidates`]) are left to their producers.
/// Returns the nodes not to launch (fused casts and Adds); fills `f32_gemm` and `gemm_add`.
fn fuse(
    cfg: &CudaConfig,
    plan: &Plan,
    nodes: &[u32],
    producer_casts: &HashMap<Value, u32>,
    fold_casts: bool,
    f32_gemm: &mut HashMap<u32, (Value, Value)>,
    gemm_add: &mut HashMap<u32, (u32, Value)>,
) -> std::collections::HashSet<u32> {
    let g = &plan.program.graph;
    let p = &plan.program;
    let (uses, readers) = readers_of(p);
    let pos: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let outs = |id: u32| -> Vec<(usize, usize)> {
        (0..g.nodes[id as usize].outputs.len())
            .filter_map(|k| range(plan, Value { node: id, index: k as u16 }))
            .collect()
    };
    let is_bf16_cast = |id: u32| {
        let n = &g.nodes[id as usize];
        matches!(n.op, Op::Cast { to: DType::BF16 }) && g.dtype(n.inputs[0]) == DType::F32
    };
    // The Add that a MatMul at position i may fuse: the next node that is neither a cast nor
    // another MatMul (at most MAX_BETWEEN of those: a backward's weight-gradient product between
    // the two input-gradient products whose sum the Add makes). Casts in between must all end up
    // skipped, and nothing in between may touch the Add's slot; checked below. Returns (add
    // position, add, residual).
    const MAX_BETWEEN: usize = 2;
    let is_matmul = |id: u32| matches!(g.nodes[id as usize].op, Op::MatMul { .. });
    let add_partner = |i: usize| -> Option<(usize, u32, Value)> {
        let mm = nodes[i];
        let mut j = i + 1;
        let mut products = 0;
        while j < nodes.len() && (is_bf16_cast(nodes[j]) || (is_matmul(nodes[j]) && products < MAX_BETWEEN)) {
            products += usize::from(is_matmul(nodes[j]));
            j += 1;
        }
        let add = *nodes.get(j)?;
        let an = &g.nodes[add as usize];
        if an.op != Op::Binary(alpha_ir::Binary::Add) {
            return None;
        }
        let prod = Value { node: mm, index: 0 };
        let r = match (an.inputs[0] == prod, an.inputs[1] == prod) {
            (true, false) => an.inputs[1],
            (false, true) => an.inputs[0],
            _ => return None,
        };
        let ok = uses.get(&prod) == Some(&1)
            && g.ty(r) == &an.outputs[0]
            && g.ty(prod) == &an.outputs[0]
            && an.outputs[0].dtype == DType::F32;
        ok.then_some((j, add, r))
    };
    // What each launch position may write: its node's outputs (none for a skipped cast), and a
    // MatMul's possibly-fused Add's outputs too (written early when fused).
    let writes = |skip: &std::collections::HashSet<u32>| -> Vec<Vec<(usize, usize)>> {
        (0..nodes.len())
            .map(|i| {
                if skip.contains(&nodes[i]) {
                    return vec![];
                }
                let mut w = outs(nodes[i]);
                if matches!(g.nodes[nodes[i] as usize].op, Op::MatMul { .. }) {
                    if let Some((_, add, _)) = add_partner(i) {
                        w.extend(outs(add));
                    }
                }
                w
            })
            .collect()
    };

    // Casts into GEMM loads: start from every cast all of whose readers are tiled MatMuls of
    // this phase, and drop casts until each skipped cast's readers can all read the f32
    // sources (skipping a cast removes its write, so this is a fixpoint from above).
    let readers_of = |id: u32| {
        let v = Value { node: id, index: 0 };
        let rs = readers.get(&v).cloned().unwrap_or_default();
        let ok = !rs.is_empty()
            && uses.get(&v) == Some(&rs.len())
            && rs.iter().all(|r| pos.contains_key(r) && tiled_gemm(cfg, g, *r).is_some());
        ok.then_some(rs)
    };
    // Casts a producer may store itself (bf16, half the GEMMs' bytes) are left to it, and so are
    // runs of parameter casts: one launch casts them all (see `grouped_param_casts`).
    let to_producers: std::collections::HashSet<u32> = producer_casts.values().copied().collect();
    let grouped = grouped_param_casts(p);
    let mut skip: std::collections::HashSet<u32> = nodes
        .iter()
        .copied()
        .filter(|&id| {
            fold_casts
                && is_bf16_cast(id)
                && readers_of(id).is_some()
                && !to_producers.contains(&id)
                && !grouped.contains(&id)
        })
        .collect();
    // (GEMM, operand) → the f32 source that operand may read instead of its cast.
    let mut eligible: HashMap<(u32, usize), Value>;
    loop {
        let w = writes(&skip);
        let source = |v: Value, at: usize| -> Option<Value> {
            if !is_bf16_cast(v.node) {
                return None;
            }
            let src = g.nodes[v.node as usize].inputs[0];
            let pc = *pos.get(&v.node)?;
            let r = range(plan, src)?;
            let clean = (pc + 1..=at).all(|q| w[q].iter().all(|&x| !overlap(x, r)));
            (pc < at && clean).then_some(src)
        };
        eligible = HashMap::new();
        for (i, &id) in nodes.iter().enumerate() {
            if tiled_gemm(cfg, g, id).is_none() {
                continue;
            }
            let ins = &g.nodes[id as usize].inputs;
            for (k, &operand) in ins.iter().take(2).enumerate() {
                if let Some(src) = source(operand, i) {
                    eligible.insert((id, k), src);
                }
            }
        }
        // A cast is skipped when every operand slot of every GEMM reading it may read its source.
        let next: std::collections::HashSet<u32> = skip
            .iter()
            .copied()
            .filter(|&id| {
                let out = Value { node: id, index: 0 };
                readers_of(id).is_some_and(|rs| {
                    rs.iter().all(|&r| {
                        let ins = &g.nodes[r as usize].inputs;
                        (0..2).filter(|&k| ins[k] == out).all(|k| eligible.contains_key(&(r, k)))
                    })
                })
            })
            .collect();
        if next == skip {
            break;
        }
        skip = next;
    }
    // Each operand reads the f32 source of a skipped cast, or what the program gives it.
    for &id in nodes {
        if tiled_gemm(cfg, g, id).is_none() {
            continue;
        }
        let ins = &g.nodes[id as usize].inputs;
        let read = |k: usize| if skip.contains(&ins[k].node) { eligible[&(id, k)] } else { ins[k] };
        let (a, b) = (read(0), read(1));
        if (a, b) != (ins[0], ins[1]) {
            f32_gemm.insert(id, (a, b));
        }
    }

    // GEMM add epilogues, checked against the operands the GEMM actually reads. A product
    // between a fused MatMul and its Add keeps its own Add unfused (its early write could land
    // on the slot the first Add's output holds until its readers).
    let mut between_products: std::collections::HashSet<u32> = std::collections::HashSet::new();
    for i in 0..nodes.len() {
        let id = nodes[i];
        if tiled_gemm(cfg, g, id).is_none() || between_products.contains(&id) {
            continue;
        }
        let Some((j, add, r)) = add_partner(i) else { continue };
        let ins = &g.nodes[id as usize].inputs;
        let (a, b) = f32_gemm.get(&id).copied().unwrap_or((ins[0], ins[1]));
        let (Some(c), Some(ra), Some(rb), Some(rr)) =
            (range(plan, Value { node: add, index: 0 }), range(plan, a), range(plan, b), range(plan, r))
        else {
            continue;
        };
        if overlap(c, ra) || overlap(c, rb) || (overlap(c, rr) && c != rr) {
            continue;
        }
        // Casts between the MatMul and the Add: all skipped, and their sources (read later by
        // f32 GEMMs) not under the Add's slot, which is now written before them. Products in
        // between: neither reading nor writing the Add's slot, nor writing the residual (read
        // now, before them).
        let between_ok = nodes[i + 1..j].iter().all(|&x| {
            if is_matmul(x) {
                let xi = &g.nodes[x as usize].inputs;
                let (xa, xb) = f32_gemm.get(&x).copied().unwrap_or((xi[0], xi[1]));
                let reads_ok = [xa, xb].iter().all(|&v| range(plan, v).is_some_and(|vr| !overlap(c, vr)));
                let writes_ok = outs(x).iter().all(|&w| !overlap(c, w) && !overlap(rr, w));
                return reads_ok && writes_ok && !skip.contains(&x);
            }
            skip.contains(&x) && range(plan, g.nodes[x as usize].inputs[0]).is_some_and(|sr| !overlap(c, sr))
        });
        if !between_ok {
            continue;
        }
        between_products.extend(nodes[i + 1..j].iter().copied().filter(|&x| is_matmul(x)));
        gemm_add.insert(id, (add, r));
        skip.insert(add);
    }
    skip
}

/// A forward Rotary that the attention kernels can apply on load (see [`fuse_more`]): its
/// output is read only by one Attention, as q (`operand` 0) or k (1), and by that attention's
/// AttentionBackward as the same operand; all three in one phase, in that order.
#[derive(Clone, Copy, Debug)]
struct ForwardRotary {
    rotary: u32,
    input: Value,
    base: f64,
    attention: u32,
    backward: u32,
    operand: usize,
}

/// How often each value is read (by nodes, program outputs and phase-end assignments), and which
/// nodes read it: a fusion may hide an intermediate only when its fused reader is its only use.
fn readers_of(program: &alpha_ir::Program) -> (HashMap<Value, usize>, HashMap<Value, Vec<u32>>) {
    let mut uses: HashMap<Value, usize> = HashMap::new();
    let mut readers: HashMap<Value, Vec<u32>> = HashMap::new();
    for (i, n) in program.graph.nodes.iter().enumerate() {
        for &x in &n.inputs {
            *uses.entry(x).or_default() += 1;
            readers.entry(x).or_default().push(i as u32);
        }
    }
    for &x in program.outputs.values() {
        *uses.entry(x).or_default() += 1;
    }
    for ph in &program.phases {
        for &(_, x) in &ph.assign {
            *uses.entry(x).or_default() += 1;
        }
    }
    (uses, readers)
}

/// The forward Rotaries of `program` that qualify for rotation on load by their shape and
/// readers alone. Whether each is fused is decided against the plan ([`fuse_more`]);
/// [`lower_program`] keeps their inputs alive through the backward so that it can be.
fn forward_rotaries(program: &alpha_ir::Program) -> Vec<ForwardRotary> {
    let g = &program.graph;
    let (uses, readers) = readers_of(program);
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    let mut found = vec![];
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::Rotary { base, inverse: false } = n.op else { continue };
        let id = i as u32;
        let (x, out) = (n.inputs[0], Value { node: id, index: 0 });
        let xs = g.shape(x);
        if g.dtype(x) != DType::F32 || xs.len() != 4 || !attention::rotary_fits(xs[3]) {
            continue;
        }
        let Some(rs) = readers.get(&out) else { continue };
        if rs.len() != 2 || uses.get(&out) != Some(&2) {
            continue;
        }
        let (a, b) = (rs[0].min(rs[1]), rs[0].max(rs[1]));
        let (an, bn) = (&g.nodes[a as usize], &g.nodes[b as usize]);
        if !matches!(an.op, Op::Attention { .. }) || !matches!(bn.op, Op::AttentionBackward { .. }) {
            continue;
        }
        let Some(operand) = an.inputs.iter().position(|&v| v == out) else { continue };
        let ok = operand < 2
            && bn.inputs.get(operand) == Some(&out)
            && bn.inputs[3] == Value { node: a, index: 0 }
            && bn.inputs[4] == Value { node: a, index: 1 }
            && id < a
            && phase(id).is_some()
            && phase(id) == phase(a)
            && phase(a) == phase(b);
        if ok {
            found.push(ForwardRotary { rotary: id, input: x, base, attention: a, backward: b, operand });
        }
    }
    found
}

/// A fusion of [`fuse_more`]: the node positions it removes from the launch list, the host
/// node, and the ranges whose write or read it moves from one position to another, each with
/// the open interval of positions that must neither read nor write it.
struct Moved {
    host: u32,
    skipped: Vec<u32>,
    moved: Vec<((usize, usize), usize, usize)>,
}

/// Fusions decided after [`fuse`] (whose choices they respect), each moving a write or a read
/// of whole tensors from one launch to another:
///
/// * GEMM activation epilogue: a `Unary` of f32 reading a tiled MatMul's product: the GEMM also
///   writes `u(acc)` to the Unary's slot (the product is still stored: pullbacks such as
///   GeluGrad read it). The Unary's write moves from its position to the GEMM's.
/// * Inverse rotary into attention's stores: an inverse Rotary whose only input is an
///   AttentionBackward's dq (or dk), read by nothing else: the backward kernel writes the
///   turned-back gradient straight into the Rotary's slot. The write moves from the Rotary's
///   position to the AttentionBackward's.
///
/// Memory discipline (the plan reuses slots by liveness in the original order): a moved range
/// must not be touched — read or written, by a node's own inputs and outputs or by any fusion
/// hosted there — by any launch strictly between the two positions; and within the host
/// launch, the ranges it writes must not overlap each other or the ranges it reads, except
/// where one coincides exactly with a row read only by the thread that writes it (see the
/// backward case). The first is checked until no fusion fails (a dropped fusion never comes
/// back, so the fusions left pass against the launches as finally lowered).
///
/// * Forward rotary into attention's loads ([`forward_rotaries`]): the attention forward and
///   both backward kernels read the Rotary's input and turn each q (k) row on load, with the
///   rotary kernel's table and arithmetic; the Rotary is not launched and its output never
///   written. The Rotary's read moves from its position to the Attention's and the
///   AttentionBackward's, so nothing from the Rotary through the backward may write the input:
///   a plain plan gives its space away at once (in Coppelius the attention's o landed exactly on
///   the pre-rotary k, the rotated k on the pre-rotary q); [`lower_program`] plans with the
///   input kept alive through the backward (`alpha_plan::plan_keeping`), and this checks it
///   against every write in between, those moved there by the other fusions included, and
///   against the backward's own (dk may still coincide exactly with the pre-rotary k: the
///   dK/dV kernel's thread j reads k row j only, before it writes dk row j).
fn fuse_more(
    cfg: &CudaConfig,
    plan: &Plan,
    nodes: &[u32],
    skip: &std::collections::HashSet<u32>,
    f32_gemm: &HashMap<u32, (Value, Value)>,
    gemm_add: &HashMap<u32, (u32, Value)>,
    more: &mut More,
) -> std::collections::HashSet<u32> {
    let g = &plan.program.graph;
    let p = &plan.program;
    let (uses, readers) = readers_of(p);
    let pos: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let val = |node: u32, index: u16| Value { node, index };
    let rng = |v: Value| range(plan, v);
    // Pairwise: writes disjoint from each other and from reads. None if a range is missing.
    let disjoint = |writes: &[Value], reads: &[Value]| -> bool {
        let (Some(w), Some(r)) = (
            writes.iter().map(|&x| rng(x)).collect::<Option<Vec<_>>>(),
            reads.iter().map(|&x| rng(x)).collect::<Option<Vec<_>>>(),
        ) else {
            return false;
        };
        w.iter()
            .enumerate()
            .all(|(i, a)| w[i + 1..].iter().all(|b| !overlap(*a, *b)) && r.iter().all(|b| !overlap(*a, *b)))
    };
    let rotary = |id: u32| match g.nodes[id as usize].op {
        Op::Rotary { base, inverse } => Some((base, inverse)),
        _ => None,
    };
    let mut cands: Vec<Moved> = vec![];
    // AttentionBackward → its inverse-rotary fusion checked against pre-rotary and rotated q, k.
    let mut fallback: HashMap<u32, (Turned, Moved)> = HashMap::new();
    // Forward Rotaries that may be turned on load here: (candidate, its position, the
    // Attention's, the backward's).
    let fwd: Vec<(ForwardRotary, usize, usize, usize)> = forward_rotaries(p)
        .into_iter()
        .filter_map(|f| {
            let (pr, pa, pb) = (*pos.get(&f.rotary)?, *pos.get(&f.attention)?, *pos.get(&f.backward)?);
            let ok = pr < pa && pa < pb && !skip.contains(&f.rotary) && rng(f.input).is_some();
            ok.then_some((f, pr, pa, pb))
        })
        .collect();

    for (i, &id) in nodes.iter().enumerate() {
        let node = &g.nodes[id as usize];
        match &node.op {
            // A product split into heads by the Permute after it (through reshapes, each value
            // read once): the product's epilogue stores the Permute's output.
            Op::Permute { perm } => {
                let Some((mm, heads)) = head_split(cfg, g, &uses, node, perm) else { continue };
                // Measured on the H200 (bench/results/2026-11-29-h200-coppelius-speedups.md):
                // 16 contexts' step 35.31 → 34.23 ms with the split stores, one context's 4.81
                // → 4.72 ms (slower there, 5.18 → 5.37 ms, while kernels let their dependents
                // launch as they started). `CudaConfig::head_split` turns them off.
                if !cfg.head_split.unwrap_or(true) {
                    continue;
                }
                let Some(&pm) = pos.get(&mm) else { continue };
                let taken = gemm_add.contains_key(&mm) || more.gemm_act.contains_key(&mm) || skip.contains(&id);
                let reads_cast = readers
                    .get(&val(id, 0))
                    .is_some_and(|rs| rs.iter().any(|&r| matches!(g.nodes[r as usize].op, Op::Cast { .. })));
                if taken || reads_cast || pm >= i {
                    continue;
                }
                let mn = &g.nodes[mm as usize];
                let (a, b) = f32_gemm.get(&mm).copied().unwrap_or((mn.inputs[0], mn.inputs[1]));
                if !disjoint(&[val(id, 0)], &[a, b]) {
                    continue;
                }
                let Some(pr) = rng(val(id, 0)) else { continue };
                more.gemm_heads.insert(mm, (id, heads));
                cands.push(Moved { host: mm, skipped: vec![id], moved: vec![(pr, pm, i)] });
            }
            // Activation epilogue: the first f32 Unary (in launch order) reading the product.
            Op::MatMul { .. } => {
                if tiled_gemm(cfg, g, id).is_none() || gemm_add.contains_key(&id) {
                    continue;
                }
                let prod = val(id, 0);
                let Some(rs) = readers.get(&prod) else { continue };
                let Some((j, u, un)) = rs
                    .iter()
                    .filter_map(|&r| {
                        let rn = &g.nodes[r as usize];
                        let Op::Unary(un) = rn.op else { return None };
                        let j = *pos.get(&r)?;
                        let ok = j > i && rn.outputs[0] == *g.ty(prod) && rn.outputs[0].dtype == DType::F32;
                        ok.then_some((j, r, un))
                    })
                    .min_by_key(|x| x.0)
                else {
                    continue;
                };
                let (a, b) = f32_gemm.get(&id).copied().unwrap_or((node.inputs[0], node.inputs[1]));
                if !disjoint(&[val(u, 0), prod], &[a, b]) {
                    continue;
                }
                let Some(ur) = rng(val(u, 0)) else { continue };
                more.gemm_act.insert(id, (u, un));
                cands.push(Moved { host: id, skipped: vec![u], moved: vec![(ur, i, j)] });
            }
            Op::AttentionBackward { .. } => {
                let qs = g.shape(node.inputs[0]);
                if qs.len() != 4 || !attention::rotary_fits(qs[3]) {
                    continue;
                }
                // Per dq, dk: (the inverse Rotary's output, base, its position, its node).
                let mut found: [Option<(Value, f64, usize, u32)>; 2] = [None, None];
                for kk in 0..2u16 {
                    let dx = val(id, kk);
                    let Some(rs) = readers.get(&dx) else { continue };
                    if rs.len() != 1 || uses.get(&dx) != Some(&1) {
                        continue;
                    }
                    let r = rs[0];
                    let Some((base, true)) = rotary(r) else { continue };
                    let Some(&pr) = pos.get(&r) else { continue };
                    let ro = val(r, 0);
                    if pr <= i || g.ty(ro) != g.ty(dx) || g.dtype(dx) != DType::F32 || rng(ro).is_none() {
                        continue;
                    }
                    found[kk as usize] = Some((ro, base, pr, r));
                }
                // Exactly coinciding is safe for a row that only its writer reads, and only in
                // the launch that writes it: dq with o (the dQ kernel's thread i reads o row i,
                // then writes dq row i; the dK/dV kernel does not read o), dk with k and dv with
                // v (the dK/dV kernel's thread j reads k and v row j, then writes dk and dv row
                // j; the dQ kernel, which reads every k and v row, has finished); so may dk with
                // v, and with the pre-rotary k where the dK/dV kernel reads that instead.
                // Where the forward Rotary of q (k) is a candidate, the kernels read its input
                // instead of its output, which nothing reads after them: `assumed` checks
                // against what they read if every candidate fuses, `union` against both
                // tensors, for whatever mix fuses (used where a forward fusion fails below).
                let mut assumed = node.inputs.clone();
                let mut union = node.inputs.clone();
                for (f, ..) in fwd.iter().filter(|x| x.0.backward == id) {
                    assumed[f.operand] = f.input;
                    union.push(f.input);
                }
                let k_pre = fwd.iter().find(|x| x.0.backward == id && x.0.operand == 1).map(|x| x.0.input);
                let (k_, v_, o_) = (node.inputs[1], node.inputs[2], node.inputs[3]);
                // Which write (dq, dk, dv) may coincide exactly with which tensor read.
                let exact_ok = |a: usize, x: Value| match a {
                    0 => x == o_,
                    1 => x == k_ || Some(x) == k_pre || x == v_,
                    _ => x == v_,
                };
                let safe = |rot: &[Option<(Value, f64, usize, u32)>; 2], reads: &[Value]| -> bool {
                    let Some(rr) = reads.iter().map(|&x| rng(x)).collect::<Option<Vec<_>>>() else { return false };
                    let writes: Vec<Value> =
                        (0..2).map(|kk| rot[kk].map_or(val(id, kk as u16), |r| r.0)).chain([val(id, 2)]).collect();
                    let Some(wr) = writes.iter().map(|&x| rng(x)).collect::<Option<Vec<_>>>() else { return false };
                    wr.iter().enumerate().all(|(a, &wa)| {
                        wr[a + 1..].iter().all(|&wb| !overlap(wa, wb))
                            && reads.iter().zip(&rr).all(|(&x, &xr)| !overlap(wa, xr) || (wa == xr && exact_ok(a, x)))
                    })
                };
                // Both if safe, else whichever one is.
                let choices = [found, [found[0], None], [None, found[1]]];
                let pick =
                    |reads: &[Value]| choices.iter().copied().find(|c| c.iter().any(Option::is_some) && safe(c, reads));
                let fusion = |pick: [Option<(Value, f64, usize, u32)>; 2]| {
                    let rot: Turned = pick.map(|x| x.map(|(ro, base, _, _)| (ro, base)));
                    let moved = pick.iter().flatten().map(|&(ro, _, pr, _)| (rng(ro).unwrap(), i, pr)).collect();
                    let skipped = pick.iter().flatten().map(|x| x.3).collect();
                    (rot, Moved { host: id, skipped, moved })
                };
                if let Some(u) = pick(&union) {
                    fallback.insert(id, fusion(u));
                }
                let Some(a) = pick(&assumed) else { continue };
                let (rot, m) = fusion(a);
                more.attnb_rot.insert(id, rot);
                cands.push(m);
            }
            _ => {}
        }
    }

    // Forward rotaries: the input must not be written from after the Rotary up to the backward
    // (its raw outputs included; its fused stores were checked with its reads above), counting
    // every write the candidate fusions move into that span (they only move writes earlier, and
    // dropping one below only removes writes).
    let writes_at = |q: usize, with_hosted: bool| -> Vec<(usize, usize)> {
        let id = nodes[q];
        let mut vs: Vec<Value> = (0..g.nodes[id as usize].outputs.len()).map(|k| val(id, k as u16)).collect();
        if with_hosted {
            if let Some(&(add, _)) = gemm_add.get(&id) {
                vs.push(val(add, 0));
            }
            if let Some(&(u, _)) = more.gemm_act.get(&id) {
                vs.push(val(u, 0));
            }
            if let Some(&(pm, _)) = more.gemm_heads.get(&id) {
                vs.push(val(pm, 0));
            }
            if let Some(rot) = more.attnb_rot.get(&id) {
                vs.extend(rot.iter().flatten().map(|r| r.0));
            }
        }
        vs.into_iter().filter_map(rng).collect()
    };
    let clean: Vec<bool> = fwd
        .iter()
        .map(|&(f, pr, _, pb)| {
            let xr = rng(f.input).expect("checked above");
            (pr + 1..=pb).all(|q| writes_at(q, q < pb).iter().all(|&w| !overlap(w, xr)))
        })
        .collect();
    let mut fused_rotaries = vec![];
    for (&(f, ..), clean) in fwd.iter().zip(clean) {
        if !clean {
            // The backward's fused stores were checked assuming this fusion: check them against
            // the pre-rotary and the rotated tensors both instead.
            if more.attnb_rot.remove(&f.backward).is_some() {
                cands.retain(|m| m.host != f.backward);
                if let Some((rot, m)) = fallback.remove(&f.backward) {
                    more.attnb_rot.insert(f.backward, rot);
                    cands.push(m);
                }
            }
            continue;
        }
        for host in [f.attention, f.backward] {
            more.attn_load.entry(host).or_default()[f.operand] = Some((f.input, f.base));
        }
        fused_rotaries.push(f.rotary);
    }

    // What each launch position touches: its node's inputs and outputs and what the fusions it
    // hosts read and write; nothing for a node that is not launched (every effect of a fused
    // node is at its host: a skipped cast's read moves to its GEMM, a fused Add's to its
    // GEMM, a fused Unary's or Rotary's write to its host, and their reads disappear).
    let touched = |more: &More, gone: &std::collections::HashSet<u32>| -> Vec<Vec<(usize, usize)>> {
        nodes
            .iter()
            .map(|&id| {
                if skip.contains(&id) || gone.contains(&id) {
                    return vec![];
                }
                let n = &g.nodes[id as usize];
                let mut vs: Vec<Value> = n.inputs.clone();
                vs.extend((0..n.outputs.len()).map(|k| val(id, k as u16)));
                if let Some(&(a, b)) = f32_gemm.get(&id) {
                    vs.extend([a, b]);
                }
                if let Some(&(add, _)) = gemm_add.get(&id) {
                    let an = &g.nodes[add as usize];
                    vs.extend(an.inputs.iter().copied());
                    vs.push(val(add, 0));
                }
                if let Some(&(u, _)) = more.gemm_act.get(&id) {
                    vs.push(val(u, 0));
                }
                if let Some(&(pm, _)) = more.gemm_heads.get(&id) {
                    vs.push(val(pm, 0));
                }
                if let Some(rot) = more.attnb_rot.get(&id) {
                    vs.extend(rot.iter().flatten().map(|r| r.0));
                }
                if let Some(load) = more.attn_load.get(&id) {
                    vs.extend(load.iter().flatten().map(|r| r.0));
                }
                vs.into_iter().filter_map(rng).collect()
            })
            .collect()
    };
    loop {
        let gone: std::collections::HashSet<u32> =
            cands.iter().flat_map(|m| m.skipped.iter().copied()).chain(fused_rotaries.iter().copied()).collect();
        let t = touched(more, &gone);
        let bad: Vec<usize> = (0..cands.len())
            .filter(|&c| {
                cands[c].moved.iter().any(|&(r, lo, hi)| (lo + 1..hi).any(|q| t[q].iter().any(|&x| overlap(x, r))))
            })
            .collect();
        if bad.is_empty() {
            break;
        }
        for &c in bad.iter().rev() {
            let m = cands.remove(c);
            more.gemm_act.remove(&m.host);
            more.gemm_heads.remove(&m.host);
            more.attnb_rot.remove(&m.host);
        }
    }
    cands.into_iter().flat_map(|m| m.skipped).chain(fused_rotaries).collect()
}

/// A chain's inputs that are a unary function of another of its inputs (a gated unit's
/// `gelu(gate)` beside `gate` in its backward) recomputed as a first step instead of read: one
/// tensor fewer from memory. The step is the pointwise kernel's own instruction sequence, which
/// wrote the value (as a launch or a GEMM's activation epilogue), so the same bits. Returns the
/// chain's inputs, steps and outputs renumbered.
fn recompute_unary_inputs(
    g: &alpha_ir::Graph,
    mut inputs: Vec<Value>,
    mut steps: Vec<fused::Step>,
    mut outputs: Vec<usize>,
) -> (Vec<Value>, Vec<fused::Step>, Vec<usize>) {
    use fused::{Src, Step};
    loop {
        // An input x = u(y) with y an input too.
        let found = inputs.iter().enumerate().find_map(|(ix, x)| {
            let Op::Unary(u) = g.nodes[x.node as usize].op else { return None };
            let iy = inputs.iter().position(|&y| y == g.nodes[x.node as usize].inputs[0])?;
            Some((ix, iy, u))
        });
        let Some((ix, iy, u)) = found else { return (inputs, steps, outputs) };
        // Step 0 computes x from y; the old steps move up one; input x goes.
        let at = |j: usize| if j > ix { j - 1 } else { j };
        let map = |src: Src| match src {
            Src::Step(k) => Src::Step(k + 1),
            Src::Input(j) if j == ix => Src::Step(0),
            Src::Input(j) => Src::Input(at(j)),
        };
        let mut next = vec![Step::Unary(u, Src::Input(at(iy)))];
        next.extend(steps.iter().map(|st| match *st {
            Step::Unary(f, a) => Step::Unary(f, map(a)),
            Step::Binary(b, x, y) => Step::Binary(b, map(x), map(y)),
        }));
        steps = next;
        outputs = outputs.iter().map(|&k| k + 1).collect();
        inputs.remove(ix);
    }
}

/// One phase as the fusion passes that run after `fuse_more` see it: the plan, the phase's nodes
/// in launch order and their positions, and every value's readers (computed once for the
/// program).
struct PhaseView<'a> {
    plan: &'a Plan,
    g: &'a alpha_ir::Graph,
    nodes: &'a [u32],
    pos: HashMap<u32, usize>,
    readers: &'a HashMap<Value, Vec<u32>>,
}

impl<'a> PhaseView<'a> {
    fn new(plan: &'a Plan, nodes: &'a [u32], readers: &'a HashMap<Value, Vec<u32>>) -> Self {
        let pos = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        PhaseView { plan, g: &plan.program.graph, nodes, pos, readers }
    }

    fn range(&self, v: Value) -> Option<(usize, usize)> {
        range(self.plan, v)
    }

    fn readers(&self, v: Value) -> &[u32] {
        self.readers.get(&v).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The node reading `v` through single-reader reshapes, and the value it reads.
    fn through_reshapes(&self, mut v: Value) -> Option<(u32, Value)> {
        loop {
            let &[r] = self.readers(v) else { return None };
            if !matches!(self.g.nodes[r as usize].op, Op::Reshape { .. }) {
                return Some((r, v));
            }
            v = Value { node: r, index: 0 };
        }
    }

    /// Whether no kernel runs strictly between launch positions `from` and `to` (each node
    /// between skipped, a reshape, or a placed Concat), with `from` before `to`: a store moved
    /// from `to` to `from` then passes nothing.
    fn nothing_launched(&self, from: usize, to: usize, skip: &std::collections::HashSet<u32>) -> bool {
        from < to
            && self.nodes[from + 1..to].iter().all(|&x| {
                skip.contains(&x) || matches!(self.g.nodes[x as usize].op, Op::Reshape { .. } | Op::Concat { .. })
            })
    }

    /// The bf16 cast that the permute `p` (by `perm`) stores, where the kernel at launch
    /// position `at` may store it itself instead: `p` launched after it with nothing between,
    /// and the cast's slot clear of `touched` (what that kernel reads and writes).
    fn permute_cast_for(
        &self,
        at: usize,
        p: u32,
        perm: &[usize],
        skip: &std::collections::HashSet<u32>,
        store_as: &HashMap<Value, Value>,
        touched: impl IntoIterator<Item = Option<(usize, usize)>>,
    ) -> Option<Value> {
        let Op::Permute { perm: pp } = &self.g.nodes[p as usize].op else { return None };
        let &cast = store_as.get(&Value { node: p, index: 0 })?;
        let (&pos, cr) = (self.pos.get(&p)?, self.range(cast)?);
        let ok = pp.as_slice() == perm && !skip.contains(&p) && self.nothing_launched(at, pos, skip);
        (ok && clear_of(cr, touched)).then_some(cast)
    }
}

/// Whether `slot` meets none of `ranges` (a value without a slot counts as meeting it): where a
/// moved store may land while those are read or written.
fn clear_of(slot: (usize, usize), ranges: impl IntoIterator<Item = Option<(usize, usize)>>) -> bool {
    ranges.into_iter().all(|r| r.is_some_and(|r| !overlap(r, slot)))
}

/// The head-split q/k/v projections whose tensor only attention reads, through fused forward
/// rotaries for q and k: their epilogue then stores q and k turned and all three as bf16 (the
/// values the attention kernels would round on load, [`gemm::Heads::bf16_turned`]), and the
/// attention kernels copy them straight into shared memory. Records both in `more`.
///
/// Conditions: heads of 64, three sections; every reader of the tensor (through slices and
/// reshapes) a fused forward Rotary of q or k, or the v of an attention host; every host of this
/// phase turning both q and k on load with one base; and no host writing into the tensor's slot
/// (the bf16 values sit at half their f32 offsets, so the slots the plan gives the f32 views
/// no longer say where each one is).
fn turned_heads(ph: &PhaseView, skip: &std::collections::HashSet<u32>, more: &mut More) {
    let (g, plan) = (ph.g, ph.plan);
    let val = |node: u32| Value { node, index: 0 };
    let mut found = vec![];
    'gemms: for (&mm, &(p, heads)) in &more.gemm_heads {
        let pv = val(p);
        let shape = g.shape(pv);
        if !ph.pos.contains_key(&mm) || heads.d != 64 || shape.len() != 5 || shape[0] != 3 {
            continue;
        }
        let Some(pr) = ph.range(pv) else { continue };
        let section = (pr.1 - pr.0) / 3;
        // Walk the views of the tensor to what reads them.
        let (mut stack, mut leaves) = (vec![pv], vec![]);
        while let Some(x) = stack.pop() {
            for &r in ph.readers(x) {
                let n = &g.nodes[r as usize];
                if matches!(n.op, Op::Slice { axis: 0, .. } | Op::Reshape { .. }) {
                    stack.push(val(r));
                } else {
                    leaves.push((r, x));
                }
            }
        }
        let sec = |x: Value| range(plan, x).filter(|r| r.0 >= pr.0 && r.1 <= pr.1).map(|r| (r.0 - pr.0) / section);
        let mut hosts = std::collections::BTreeSet::new();
        for &(r, x) in &leaves {
            let n = &g.nodes[r as usize];
            match n.op {
                Op::Rotary { inverse: false, .. } if skip.contains(&r) && matches!(sec(x), Some(0 | 1)) => {
                    hosts.extend(ph.readers(val(r)));
                }
                Op::Attention { .. } | Op::AttentionBackward { .. } if n.inputs[2] == x && sec(x) == Some(2) => {
                    hosts.insert(r);
                }
                _ => continue 'gemms,
            }
        }
        let mut base = None;
        for &h in &hosts {
            let n = &g.nodes[h as usize];
            let host = matches!(n.op, Op::Attention { bf16: true, .. } | Op::AttentionBackward { bf16: true, .. });
            let Some([Some(q), Some(k)]) = more.attn_load.get(&h).copied() else { continue 'gemms };
            let one_base = q.1 == k.1 && base.is_none_or(|b| b == q.1);
            let sections = (sec(q.0), sec(k.0), sec(n.inputs[2])) == (Some(0), Some(1), Some(2));
            // Outputs (as relocated by fused inverse rotaries) clear of the tensor.
            let rot = more.attnb_rot.get(&h).copied().unwrap_or_default();
            let outs = (0..n.outputs.len() as u16)
                .map(|k| rot.get(k as usize).copied().flatten().map_or(Value { node: h, index: k }, |r| r.0));
            let clear = clear_of(pr, outs.map(|o| ph.range(o)));
            if !(host && ph.pos.contains_key(&h) && one_base && sections && clear) {
                continue 'gemms;
            }
            base = Some(q.1);
        }
        let Some(base) = base else { continue };
        found.push((mm, base, pr, hosts));
    }
    for (mm, base, tensor, hosts) in found {
        if let Some(h) = more.gemm_heads.get_mut(&mm) {
            h.1.bf16_turned = true;
        }
        more.turned_base.insert(mm, base);
        for h in hosts {
            more.bf16_attention.insert(h, tensor);
        }
    }
}

/// Whether AttentionBackward `id`'s outputs (where fused inverse rotaries put dq and dk) all
/// lie clear of its inputs (where fused forward rotaries read q and k): the condition for its
/// two passes to run in one launch, where a block's dQ pass reads what others' dK/dV passes
/// have written.
fn joint_backward_apart(plan: &Plan, more: &More, id: u32, node: &Node) -> bool {
    let out = |k: u16| Value { node: id, index: k };
    let rot = more.attnb_rot.get(&id).copied().unwrap_or_default();
    let load = more.attn_load.get(&id).copied().unwrap_or_default();
    let dst = |k: usize| rot[k].map_or(out(k as u16), |x| x.0);
    let src = |k: usize| load[k].map_or(node.inputs[k], |x| x.0);
    let writes = [dst(0), dst(1), out(2)].map(|x| range(plan, x));
    let ins = &node.inputs;
    let reads = [src(0), src(1), ins[2], ins[3], ins[4], ins[5]].map(|x| range(plan, x));
    writes.iter().chain(&reads).all(Option::is_some)
        && writes.iter().flatten().all(|&w| reads.iter().flatten().all(|&r| !overlap(w, r)))
}

/// The head-split products ([`gemm::Heads`], S = 1) whose output is dO of a bf16 attention
/// backward run as one launch, and nothing else's: they store dO as bf16 with delta
/// ([`gemm::Heads::delta`]) into held memory, and the backward's delta launch does not run.
/// Conditions: heads of 64, O f32 in dO's layout, the product on the TMA engine with bf16
/// operands in 128 × 128 tiles whose ring holds the f32 tile, and the backward's joint-launch
/// conditions. Why: at sixteen contexts the product stored dO as f32 (34 MB) for the delta
/// launch to read back with O.
fn delta_heads(
    cfg: &CudaConfig,
    ph: &PhaseView,
    uses: &HashMap<Value, usize>,
    f32_gemm: &HashMap<u32, (Value, Value)>,
    more: &mut More,
) {
    let g = ph.g;
    let mut found = vec![];
    for (&mm, &(p, heads)) in &more.gemm_heads {
        let dov = Value { node: p, index: 0 };
        let Some(&[attn]) = ph.readers.get(&dov).map(Vec::as_slice) else { continue };
        let n = &g.nodes[attn as usize];
        let Op::AttentionBackward { bf16: true, .. } = n.op else { continue };
        let o = n.inputs[3];
        let Some((spec, shape)) = tiled_gemm(cfg, g, mm) else { continue };
        let spec = GemmSpec { heads: Some(gemm::Heads { delta: true, ..heads }), ..spec };
        let spec = with_ring(cfg, on_tma(cfg, spec), &shape);
        let (q_heads, kv_heads) = (g.shape(n.inputs[0]), g.shape(n.inputs[1]));
        let fits = ph.pos.contains_key(&mm)
            && ph.pos.contains_key(&attn)
            && n.inputs[5] == dov
            && uses.get(&dov) == Some(&1)
            && heads.d == 64
            && !heads.bf16_turned
            && g.shape(dov).len() == 4
            && g.shape(o) == g.shape(dov)
            && g.dtype(o) == DType::F32
            && q_heads.get(1) == kv_heads.get(1)
            && !f32_gemm.contains_key(&mm)
            && spec.engine == gemm::Engine::Tma
            && gemm_tma::ring_holds_tile(&spec)
            && more.bf16_attention.contains_key(&attn)
            && joint_backward_apart(ph.plan, more, attn, n);
        if fits {
            found.push((mm, attn, o));
        }
    }
    for (mm, attn, o) in found {
        more.delta_heads.insert(mm, (attn, o));
    }
}

/// The bf16 attention backwards (one launch, q heads equal to k heads) whose three gradients —
/// dq and dk as their fused inverse rotaries leave them, and dv — reach the q/k/v projection's
/// backward only as one Concat, permuted to `[B, T, 3, H, D]` and cast to bf16 (the permute
/// launched storing the cast): the backward then stores that bf16 tensor itself
/// ([`crate::kernels::attention::mma::backward_kernel_bf16_merged`]) and the permute does not run.
/// Records them in `more.merged_grads`; returns the permutes to skip.
///
/// Conditions: the chain through single-reader reshapes exactly so; nothing launched between
/// the backward and the permute; the cast's slot clear of everything the backward reads (it is
/// now written while the backward's blocks read).
fn merged_gradients(
    ph: &PhaseView,
    skip: &std::collections::HashSet<u32>,
    store_as: &HashMap<Value, Value>,
    more: &mut More,
) -> Vec<u32> {
    let g = ph.g;
    let mut permutes = vec![];
    'hosts: for (&h, &tensor) in &more.bf16_attention {
        let n = &g.nodes[h as usize];
        let (Op::AttentionBackward { .. }, Some(&at)) = (&n.op, ph.pos.get(&h)) else { continue };
        if g.shape(n.inputs[0]) != g.shape(n.inputs[1]) {
            continue;
        }
        let rot = more.attnb_rot.get(&h).copied().unwrap_or_default();
        let part = |k: usize| rot.get(k).copied().flatten().map_or(Value { node: h, index: k as u16 }, |r| r.0);
        let mut concat = None;
        for s in 0..3usize {
            let Some((c, x)) = ph.through_reshapes(part(s)) else { continue 'hosts };
            let cn = &g.nodes[c as usize];
            let in_place = matches!(cn.op, Op::Concat { axis: 0 }) && cn.inputs.len() == 3 && cn.inputs[s] == x;
            if !in_place || concat.is_some_and(|c0| c0 != c) {
                continue 'hosts;
            }
            concat = Some(c);
        }
        let Some(c) = concat else { continue };
        let Some((p, _)) = ph.through_reshapes(Value { node: c, index: 0 }) else { continue };
        let reads = n.inputs[3..].iter().map(|&v| ph.range(v)).chain([Some(tensor)]);
        if let Some(cast) = ph.permute_cast_for(at, p, &[1, 3, 0, 2, 4], skip, store_as, reads) {
            more.merged_grads.insert(h, cast);
            permutes.push(p);
        }
    }
    permutes
}

/// The bf16 attention forwards whose output reaches the output projection through a permute to
/// `[B, T, H, D]` launched right after it, storing its bf16 cast: the forward stores that cast
/// itself as well ([`crate::kernels::attention::mma::forward_kernel_bf16_copying`]) and the permute does
/// not run. The cast's slot must be clear of what the forward reads and writes. Records them in
/// `more.output_copy`; returns the permutes to skip.
fn forward_copies(
    ph: &PhaseView,
    skip: &std::collections::HashSet<u32>,
    store_as: &HashMap<Value, Value>,
    more: &mut More,
) -> Vec<u32> {
    let g = ph.g;
    let mut permutes = vec![];
    for (&a, &tensor) in &more.bf16_attention {
        let n = &g.nodes[a as usize];
        let (Op::Attention { .. }, Some(&at)) = (&n.op, ph.pos.get(&a)) else { continue };
        if g.shape(n.inputs[0]) != g.shape(n.inputs[1]) {
            continue;
        }
        let o = Value { node: a, index: 0 };
        let is_permute = |r: &&u32| matches!(g.nodes[**r as usize].op, Op::Permute { .. });
        let &[p] = ph.readers(o).iter().filter(is_permute).copied().collect::<Vec<u32>>().as_slice() else { continue };
        let touched = [ph.range(o), ph.range(Value { node: a, index: 1 }), Some(tensor)];
        if let Some(cast) = ph.permute_cast_for(at, p, &[0, 2, 1, 3], skip, store_as, touched) {
            more.output_copy.insert(a, cast);
            permutes.push(p);
        }
    }
    permutes
}

/// Multiplies `x · y` stored as bf16 by their producer (the cast that alone reads them, see
/// [`casts_into_producers`]) where one operand is the product of the tiled MatMul launched just
/// before, stored plainly and whole (no split), and the other was computed before it: the
/// product's epilogue writes the bf16 product too ([`gemm::Epilogue::StoreMul`], the same f32
/// multiply and rounding), and the multiply does not run — a gated unit's `gelu(gate) · up`,
/// which read both halves again. Over deep grids only (see below). Records them in
/// `more.gemm_mul`; returns the multiplies.
///
/// The cast's slot must be clear of the product's operands, the product and the other operand
/// (it is written while they are read).
fn mul_epilogues(
    cfg: &CudaConfig,
    ph: &PhaseView,
    skip: &std::collections::HashSet<u32>,
    store_as: &HashMap<Value, Value>,
    f32_gemm: &HashMap<u32, (Value, Value)>,
    gemm_add: &HashMap<u32, (u32, Value)>,
    more: &mut More,
) -> Vec<u32> {
    let g = ph.g;
    let launched = |id: u32| !skip.contains(&id) && !matches!(g.nodes[id as usize].op, Op::Reshape { .. });
    let mut found = vec![];
    for (j, &m) in ph.nodes.iter().enumerate() {
        let mn = &g.nodes[m as usize];
        if skip.contains(&m) || mn.op != Op::Binary(alpha_ir::Binary::Mul) {
            continue;
        }
        let Some(&cast) = store_as.get(&Value { node: m, index: 0 }) else { continue };
        let Some(i) = (0..j).rev().find(|&i| launched(ph.nodes[i])) else { continue };
        let gid = ph.nodes[i];
        let Some((spec, shape)) = tiled_gemm(cfg, g, gid) else { continue };
        let whole = !cfg.split_k || shape.split_k(spec.bk) == 1;
        // Deep grids only: measured on the H200, sixteen contexts' step 26.89 -> 26.79 /
        // 26.84 ms with the fusion, one context's 3.853 -> 3.869 / 3.866 ms (its shallow grid
        // leaves the epilogue's extra traffic exposed).
        let deep = deep_epilogue_grid(&spec, &shape);
        let plain = !gemm_add.contains_key(&gid)
            && !more.gemm_act.contains_key(&gid)
            && !more.gemm_heads.contains_key(&gid)
            && !more.gemm_mul.contains_key(&gid);
        let prod = Value { node: gid, index: 0 };
        let other = match (mn.inputs[0] == prod, mn.inputs[1] == prod) {
            (true, false) => mn.inputs[1],
            (false, true) => mn.inputs[0],
            _ => continue,
        };
        // Written before the product: by its own launch, or (an activation fused into an
        // earlier product's epilogue) by that product's. That activation is then computed from
        // the earlier product (`gelu(gate)` from the gate) instead of read: its value, which the
        // gated unit's backward recomputes too, then need not be stored at all
        // (`dead_activation_stores`).
        let host = more.gemm_act.iter().find(|(_, &(u, _))| u == other.node).map(|(&host, &(_, u))| (host, u));
        let writer = host.map_or(other.node, |(h, _)| h);
        let before = ph.pos.get(&writer).is_none_or(|&p| p < i);
        // The earlier product must still be alive here (read again at or after it); where it
        // is not (a forward alone), the activation is read as stored.
        let alive = |v: Value| ph.readers(v).iter().any(|r| ph.pos.get(r).is_some_and(|&p| p >= i));
        let (other, act) = match host {
            Some((h, u)) if cfg.mul_recompute && alive(Value { node: h, index: 0 }) => {
                (Value { node: h, index: 0 }, Some(u))
            }
            _ => (other, None),
        };
        let same = g.ty(other) == g.ty(prod) && mn.outputs[0] == *g.ty(prod) && g.dtype(prod) == DType::F32;
        let gn = &g.nodes[gid as usize];
        let (a, b) = f32_gemm.get(&gid).copied().unwrap_or((gn.inputs[0], gn.inputs[1]));
        let clear = ph.range(cast).is_some_and(|cr| clear_of(cr, [a, b, prod, other].map(|v| ph.range(v))));
        if whole && deep && plain && before && same && clear {
            more.gemm_mul.insert(gid, (m, other, cast, act));
            found.push(m);
        }
    }
    found
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
    let consts_start = plan.arena.div_ceil(ALIGN) * ALIGN;
    let mut lw = Lowerer {
        plan: &plan,
        config,
        kernels: vec![],
        index: HashMap::new(),
        consts_end: consts_start,
        inits: vec![],
        tables: HashMap::new(),
        scratch: 0,
        f32_gemm: HashMap::new(),
        gemm_add: HashMap::new(),
        more: More::default(),
        store_as: HashMap::new(),
        cast_candidates: producer_cast_candidates(&plan.program),
        param_casts: grouped_param_casts(&plan.program),
        tensor_maps: vec![],
        last_product: None,
        recomputed_reads: std::collections::HashSet::new(),
        deferred_folds: std::collections::HashSet::new(),
        fold_flush_after: None,
        pending_folds: vec![],
        delta_regions: HashMap::new(),
        delta_at: HashMap::new(),
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
    let (uses, readers) = readers_of(&plan.program);
    let mut phases = vec![];
    for ph in &plan.phases {
        let mut launches = vec![];
        let nodes: Vec<u32> = ph.kernels.iter().map(|k| k.node).collect();
        let view = PhaseView::new(&plan, &nodes, &readers);
        let mut skip = fuse(
            config,
            &plan,
            &nodes,
            &lw.cast_candidates,
            config.fold_casts_into_gemms,
            &mut lw.f32_gemm,
            &mut lw.gemm_add,
        );
        let more = fuse_more(config, &plan, &nodes, &skip, &lw.f32_gemm, &lw.gemm_add, &mut lw.more);
        skip.extend(more);
        // Turned heads need every column of a row in one thread: the wgmma engines only.
        if config.bf16_attention && config.gemm_engine != gemm::Engine::Mma {
            turned_heads(&view, &skip, &mut lw.more);
        }
        for (producer_out, cast) in casts_into_producers(&plan, &nodes, &skip, &lw.cast_candidates) {
            skip.insert(cast.node);
            lw.store_as.insert(producer_out, cast);
        }
        if config.bf16_attention && config.merged_gradients {
            for permute in merged_gradients(&view, &skip, &lw.store_as, &mut lw.more) {
                skip.insert(permute);
            }
        }
        if config.bf16_attention && config.output_copy {
            for permute in forward_copies(&view, &skip, &lw.store_as, &mut lw.more) {
                skip.insert(permute);
            }
        }
        if config.bf16_attention && config.joint_attention_backward && config.delta_epilogue {
            delta_heads(config, &view, &uses, &lw.f32_gemm, &mut lw.more);
        }
        if config.mul_epilogue {
            for mul in mul_epilogues(config, &view, &skip, &lw.store_as, &lw.f32_gemm, &lw.gemm_add, &mut lw.more) {
                skip.insert(mul);
            }
        }
        (lw.deferred_folds, lw.fold_flush_after) = deferred_folds(config, &view);
        let mut products = LaunchedProducts::default();
        let mut i = 0;
        while i < nodes.len() {
            if skip.contains(&nodes[i]) {
                i += 1;
                continue;
            }
            if let Some(add) = lw.layernorm_residual(&nodes, i, &skip, &uses) {
                // The cast right after it, of the residual gradient, stored by it as well.
                let copy = if config.layernorm_copy { lw.cast_of_sum(&nodes, i, add, &skip) } else { None };
                launches.extend(lw.lower_layernorm_backward(nodes[i], Some(add), copy)?);
                if let Some(c) = copy {
                    skip.insert(c.node);
                }
                if lw.fold_flush_after == Some(nodes[i]) {
                    launches.extend(lw.flush_folds(nodes[i])?);
                }
                i += 2;
                continue;
            }
            if let Some(cl) = lw.elementwise_chain(&nodes, i, &mut skip, &uses)? {
                let end = cl.end;
                let taken = config.chain_epilogues != ChainEpilogues::Never
                    && lw.chain_into_product(&view, i, &cl, &mut launches, &products, &uses)?;
                if !taken {
                    launches.push(cl.pending);
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
            launches.extend(lw.lower_node(nodes[i])?);
            if lw.fold_flush_after == Some(nodes[i]) {
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
        for c in &ph.copies {
            let (d, s) = (plan.slot(c.dst), plan.slot(c.src));
            if d.offset == s.offset {
                continue;
            }
            let ty = plan.program.graph.ty(c.dst).clone();
            let n = ty.numel();
            let pw = Pointwise {
                shape: vec![n],
                out: Operand::contiguous(ty.dtype, &[n]),
                ins: vec![Operand::contiguous(plan.program.graph.dtype(c.src), &[n])],
                body: Body::Copy,
            };
            launches.push(lw.pointwise(pw, vec![A::Ptr(d.offset), A::Ptr(s.offset)], None)?);
        }
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
    let Lowerer { kernels, inits, tensor_maps, .. } = lw;
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
/// into the GEMMs' loads.
pub fn lower_program(program: &alpha_ir::Program, config: &CudaConfig) -> Result<Lowered> {
    let plan_with = |keep: &[(Value, u32)]| {
        alpha_plan::plan_keeping(program, alpha_plan::bytes, ALIGN, keep).map_err(|e| anyhow!("planning: {e}"))
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
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    // (Other casts' outputs stored by the same chain among them: all of the window is kept.)
    for (x, &cast) in &into_producers {
        let from = x.node.saturating_sub(8);
        for id in from..cast {
            let n = &g.nodes[id as usize];
            if phase(id) != phase(cast) {
                continue;
            }
            let outs = (0..n.outputs.len() as u16).map(|k| Value { node: id, index: k });
            let vals: Vec<Value> = n.inputs.iter().copied().chain(outs).collect();
            keep.extend(vals.into_iter().filter(|v| phase(v.node) == phase(cast)).map(|v| (v, cast)));
        }
    }
    lower(plan_with(&keep)?, config)
}

/// LayerNorm backwards of up to this many bands of rows run their band fold beside the input
/// gradient's rows (see `Lowerer::lower_layernorm_backward`).
const FOLD_BESIDE_ROWS_MAX_BANDS: usize = 64;

/// The LayerNormBackwards of a phase whose pass 2 (the fold of pass 1's band partials into the
/// gain and bias gradients) can wait for one launch after the last of them
/// ([`layernorm::backward_finish_multi_kernel`]), and that last one: those whose pass 1 runs in
/// the input gradient's launch (many bands) and whose gain and bias gradients nothing in the
/// phase reads before that last one (the optimizer reads them at the end of a step).
fn deferred_folds(cfg: &CudaConfig, view: &PhaseView) -> (std::collections::HashSet<u32>, Option<u32>) {
    let g = view.g;
    let none = (std::collections::HashSet::new(), None);
    if !cfg.ln_fold_together {
        return none;
    }
    let deep: Vec<u32> = view
        .nodes
        .iter()
        .copied()
        .filter(|&id| {
            let n = &g.nodes[id as usize];
            n.op == Op::LayerNormBackward && partials_in_rows(cfg, norm_of(g, n))
        })
        .collect();
    let Some(&last) = deep.last() else { return none };
    let last_pos = view.pos[&last];
    // Read only after the last (program outputs and phase copies come after every launch).
    let waits = |id: u32| {
        (1..3u16).all(|k| {
            let v = Value { node: id, index: k };
            view.readers(v).iter().all(|r| view.pos.get(r).is_none_or(|&p| p > last_pos))
        })
    };
    let deferred: std::collections::HashSet<u32> = deep.iter().copied().filter(|&id| waits(id)).collect();
    let flush = deep.iter().rev().copied().find(|id| deferred.contains(id));
    (deferred, flush)
}

/// The shape of a LayerNorm (forward or backward) node: rows of its input's last axis.
fn norm_of(g: &alpha_ir::Graph, node: &Node) -> Norm {
    let c = *g.shape(node.inputs[0]).last().unwrap_or(&1);
    Norm { rows: node.outputs[0].numel() / c.max(1), c }
}

/// Whether a LayerNorm backward of shape `n` runs pass 1 in its input gradient's launch.
fn partials_in_rows(cfg: &CudaConfig, n: Norm) -> bool {
    cfg.ln_partials && n.bands() >= PARTIALS_IN_ROWS_MIN_BANDS
}

/// Bands from which a LayerNorm backward's pass 1 runs in its input gradient's launch: two
/// blocks an SM, so that the band-at-a-time rows still fill the GPU (sixteen contexts' 1,024
/// bands do; one context's 64 keep the row-a-block grid).
const PARTIALS_IN_ROWS_MIN_BANDS: usize = 2 * gemm::SMS as usize;

/// Casts of parameters to bf16, read by two products or more, that stand next to another such
/// cast in the graph: a model that rounds a block's weights together (`systems/coppelius.rs`). They are launched as one
/// multi-tensor cast instead of being folded into every GEMM's loads, so the forward and the
/// input-gradient products read each weight as bf16, half the bytes.
fn grouped_param_casts(program: &alpha_ir::Program) -> std::collections::HashSet<u32> {
    let g = &program.graph;
    let (_, readers) = readers_of(program);
    // Read by two products or more (a training step's forward and input gradient): the bf16
    // copy is then read more than once, and pays for its launch.
    let is = |i: usize| {
        g.nodes.get(i).is_some_and(|n| {
            let out = Value { node: i as u32, index: 0 };
            matches!(n.op, Op::Cast { to: DType::BF16 })
                && g.dtype(n.inputs[0]) == DType::F32
                && matches!(g.nodes[n.inputs[0].node as usize].op, Op::Param { .. })
                && readers.get(&out).is_some_and(|r| r.len() >= 2)
        })
    };
    (0..g.nodes.len()).filter(|&i| is(i) && ((i > 0 && is(i - 1)) || is(i + 1))).map(|i| i as u32).collect()
}

/// f32 values (by the root they view) whose only reader is one bf16 cast and whose producer can
/// store bf16 itself (a unary or binary op, a permute, a LayerNorm's output, the logits' gradient):
/// value → cast.
/// Why: the GEMMs after such a cast then read bf16, half the bytes of their f32 loads, and the
/// cast costs no launch; on the H200 the tiled GEMM is bound by those bytes.
fn producer_cast_candidates(program: &alpha_ir::Program) -> HashMap<Value, u32> {
    let g = &program.graph;
    let (uses, _) = readers_of(program);
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    let mut out = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if !matches!(n.op, Op::Cast { to: DType::BF16 }) || g.dtype(n.inputs[0]) != DType::F32 {
            continue;
        }
        // Through reshapes to the value a kernel writes, each link read by the next alone.
        let mut x = n.inputs[0];
        while matches!(g.nodes[x.node as usize].op, Op::Reshape { .. }) && uses.get(&x) == Some(&1) {
            x = g.nodes[x.node as usize].inputs[0];
        }
        let single = uses.get(&x) == Some(&1) && uses.get(&n.inputs[0]) == Some(&1);
        let pn = &g.nodes[x.node as usize];
        let can = match pn.op {
            Op::Unary(_) | Op::Binary(_) | Op::Permute { .. } => true,
            Op::LayerNorm { .. } => x.index == 0,
            // Four logits a thread: a vocabulary of a multiple of 4.
            Op::CrossEntropyBackward => g.shape(x).last().is_some_and(|v| v % 4 == 0),
            _ => false,
        };
        let same_size = g.ty(x).numel() == n.outputs[0].numel();
        if single && can && phase(x.node) == phase(i as u32) && same_size {
            out.insert(x, i as u32);
        }
    }
    out
}

/// The candidates ([`producer_cast_candidates`]) that this phase's plan lets the producer store
/// as bf16 into the cast's slot: the producer launched (not fused elsewhere), before the cast,
/// and nothing from the producer up to the cast reading or writing that slot — the store moves
/// from the cast's position to the producer's. Returns (producer output → cast output).
fn casts_into_producers(
    plan: &Plan,
    nodes: &[u32],
    skip: &std::collections::HashSet<u32>,
    candidates: &HashMap<Value, u32>,
) -> Vec<(Value, Value)> {
    let g = &plan.program.graph;
    let pos: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut found = vec![];
    for (&x, &cast) in candidates {
        let (Some(&pp), Some(&pc)) = (pos.get(&x.node), pos.get(&cast)) else { continue };
        if pp >= pc || skip.contains(&x.node) || skip.contains(&cast) {
            continue;
        }
        let out = Value { node: cast, index: 0 };
        let Some(slot) = range(plan, out) else { continue };
        let clear = nodes[pp..pc].iter().all(|&id| {
            let n = &g.nodes[id as usize];
            let ins = n.inputs.iter().copied();
            let outs = (0..n.outputs.len()).map(|k| Value { node: id, index: k as u16 });
            ins.chain(outs).all(|v| range(plan, v).is_none_or(|r| !overlap(r, slot)))
        });
        if clear {
            found.push((x, out));
        }
    }
    found
}

/// (f32 source, last position) of every bf16 cast that only tiled GEMMs of its phase read:
/// kept alive through those GEMMs (and the Adds that may become their epilogues), so that
/// [`fuse`] finds each source unwritten and the GEMMs convert on load instead of the cast.
/// Why: a plain plan frees an activation once its forward readers are done, so the backward's
/// GEMMs would read the bf16 copy and every such cast would stay a launch (196 in Coppelius's
/// step); an f32 source kept instead of a bf16 copy costs 2 bytes an element of memory.
fn cast_sources_through_their_gemms(cfg: &CudaConfig, program: &alpha_ir::Program) -> Vec<(Value, u32)> {
    let g = &program.graph;
    let (uses, readers) = readers_of(program);
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    let mut keep = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let id = i as u32;
        if !matches!(n.op, Op::Cast { to: DType::BF16 }) || g.dtype(n.inputs[0]) != DType::F32 {
            continue;
        }
        let v = Value { node: id, index: 0 };
        let rs = readers.get(&v).cloned().unwrap_or_default();
        let only_gemms = !rs.is_empty()
            && uses.get(&v) == Some(&rs.len())
            && rs.iter().all(|&r| phase(r) == phase(id) && tiled_gemm(cfg, g, r).is_some());
        if !only_gemms {
            continue;
        }
        for &gemm in &rs {
            let prod = Value { node: gemm, index: 0 };
            let add = readers
                .get(&prod)
                .into_iter()
                .flatten()
                .copied()
                .find(|&a| g.nodes[a as usize].op == Op::Binary(alpha_ir::Binary::Add) && phase(a) == phase(gemm));
            keep.push((n.inputs[0], add.unwrap_or(gemm).max(gemm)));
        }
    }
    keep
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

#[cfg(test)]
mod tests {
    use super::*;
    use alpha_ir::{Graph, Init, Program};
    use std::collections::BTreeMap;

    /// Lowers `g` as a one-phase forward program whose output "s" is `s`.
    fn lower_forward(g: Graph, s: Value) -> Lowered {
        lower_forward_with(g, s, CudaConfig { fold_casts_into_gemms: false, ..CudaConfig::default() })
    }

    /// [`lower_forward`] folding casts into the GEMMs' loads.
    fn lower_forward_folding(g: Graph, s: Value) -> Lowered {
        lower_forward_with(g, s, CudaConfig { fold_casts_into_gemms: true, ..CudaConfig::default() })
    }

    fn lower_forward_with(g: Graph, s: Value, config: CudaConfig) -> Lowered {
        let mut outs = BTreeMap::new();
        outs.insert("s".to_string(), s);
        lower_program(&Program::single(g.finish().unwrap(), "forward", outs), &config).unwrap()
    }

    /// x [64, 64] · w [64, n], both cast to bf16 first: (graph, [x, w, x16, w16, product]).
    fn product_of_casts(n: usize) -> (Graph, [Value; 5]) {
        let mut g = Graph::new("t");
        let x = g.param("x", &[64, 64], Init::Zeros);
        let w = g.param("w", &[64, n], Init::Zeros);
        let x16 = g.cast(x, DType::BF16);
        let w16 = g.cast(w, DType::BF16);
        let y = g.matmul(x16, w16);
        (g, [x, w, x16, w16, y])
    }

    /// The kernel of each of phase 0's launches, in order.
    fn launch_names(l: &Lowered) -> Vec<&str> {
        l.phases[0].iter().map(|x| l.kernels[x.kernel].name.as_str()).collect()
    }

    #[test]
    fn a_small_program_lowers_with_shared_kernels_and_constants() {
        let mut g = Graph::new("t");
        let x = g.param("x", &[4, 8], Init::Zeros);
        let w = g.param("w", &[8, 4], Init::Zeros);
        let b = g.param("b", &[4], Init::Zeros);
        let x16 = g.cast(x, DType::BF16);
        let w16 = g.cast(w, DType::BF16);
        let y = g.matmul(x16, w16);
        let y = g.add(y, b);
        let two = g.constant(2.0, &[], DType::F32);
        let y = g.mul(y, two);
        let s = g.sum_all(y);
        let l = lower_forward(g, s);
        // The two casts (32 elements each) share one kernel, four elements a thread; K = 8 is
        // outside the tiled GEMM's contract → simple GEMM; the broadcasting multiply by a
        // scalar stays one element a thread.
        let names = launch_names(&l);
        assert_eq!(
            names,
            ["pw_cast_f32_bf16_v4", "pw_cast_f32_bf16_v4", "gemm_simple", "pw_add_v4", "pw_mul", "reduce_sum"]
        );
        assert_eq!(l.phases[0][0].kernel, l.phases[0][1].kernel);
        assert_eq!(l.inits.len(), 1);
        assert_eq!(l.inits[0].1, 2.0f32.to_le_bytes());
        assert!(l.arena >= l.plan.arena);
        for launch in &l.phases[0] {
            for a in &launch.args {
                if let LArg::Ptr(o) = a {
                    assert!(*o < l.arena);
                }
            }
        }
    }

    #[test]
    fn casts_fold_into_gemm_loads_and_the_residual_add_into_its_epilogue() {
        let (mut g, [x, w, _, _, y]) = product_of_casts(64);
        let r = g.add(x, y);
        let s = g.sum_all(r);
        let l = lower_forward_folding(g, s);
        let names = launch_names(&l);
        assert_eq!(names, ["gemm_rr_f32_add_64x64_wg", "reduce_sum"]);
        // A = x's and B = w's f32 slots, C = the Add's slot, R = x.
        let args = &l.phases[0][0].args;
        let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
        assert_eq!(args[..4], [slot(x), slot(w), slot(r), slot(x)]);
    }

    /// By default the casts are launched and the product reads bf16 on the TMA engine: its
    /// last two arguments point at tensor maps over the casts' slots, encoded at load.
    #[test]
    fn by_default_casts_launch_and_the_product_reads_bf16_through_tensor_maps() {
        let (mut g, [_, _, x16, w16, y]) = product_of_casts(64);
        let s = g.sum_all(y);
        let l = lower_forward(g, s);
        let names = launch_names(&l);
        assert_eq!(names, ["pw_cast_f32_bf16_v4", "pw_cast_f32_bf16_v4", "gemm_rr_bf16_store_64x64_tma", "reduce_sum"]);
        let args = &l.phases[0][2].args;
        let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
        assert_eq!(args[..2], [slot(x16), slot(w16)]);
        let maps: Vec<_> = args[args.len() - 2..].to_vec();
        let over: Vec<_> = l.tensor_maps.iter().map(|&(at, operand, _)| (LArg::Ptr(at), LArg::Ptr(operand))).collect();
        assert_eq!(over, [(maps[0], slot(x16)), (maps[1], slot(w16))]);
        for &(at, _, m) in &l.tensor_maps {
            assert!(at % 64 == 0 && at >= l.plan.arena && at + 128 <= l.arena);
            assert_eq!((m.box_inner, m.stride_bytes), (64, 128));
        }
    }

    /// A chain input that is a unary function of another input is recomputed as step 0: the
    /// inputs lose it, every step and output moves up one, and its readers read step 0.
    #[test]
    fn a_unary_of_an_input_is_recomputed_not_read() {
        use crate::kernels::fused::{Src, Step};
        use alpha_ir::{Binary, Unary};
        let mut g = Graph::new("t");
        let gate = g.param("gate", &[4, 8], Init::Zeros);
        let dh = g.param("dh", &[4, 8], Init::Zeros);
        let act = g.gelu(gate);
        let g = g.finish().unwrap();
        // Inputs (dh, act, gate): dh·act, gelu'(gate), their product; outputs steps 0 and 2.
        let steps = vec![
            Step::Binary(Binary::Mul, Src::Input(0), Src::Input(1)),
            Step::Unary(Unary::GeluGrad, Src::Input(2)),
            Step::Binary(Binary::Mul, Src::Step(0), Src::Step(1)),
        ];
        let (inputs, steps, outputs) = recompute_unary_inputs(&g, vec![dh, act, gate], steps, vec![0, 2]);
        assert_eq!(inputs, vec![dh, gate]);
        assert_eq!(
            steps,
            vec![
                Step::Unary(Unary::Gelu, Src::Input(1)),
                Step::Binary(Binary::Mul, Src::Input(0), Src::Step(0)),
                Step::Unary(Unary::GeluGrad, Src::Input(1)),
                Step::Binary(Binary::Mul, Src::Step(1), Src::Step(2)),
            ]
        );
        assert_eq!(outputs, vec![1, 3]);
    }

    /// Instruction mnemonics of a rendered kernel (guards, registers and labels dropped).
    fn mnemonics(text: &str) -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('.') && !l.ends_with(':'))
            .filter(|l| !l.starts_with('{') && !l.starts_with('}') && !l.starts_with(')') && !l.starts_with('('))
            .map(|l| {
                let l = if l.starts_with('@') { l.split_once(' ').map_or(l, |x| x.1) } else { l };
                l.split_whitespace().next().unwrap_or("").trim_end_matches(';').to_string()
            })
            .collect()
    }

    fn contains_run(hay: &[String], needle: &[String]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn gelu_of_a_product_becomes_the_gemm_epilogue_with_the_pointwise_instructions() {
        let (mut g, [x, w, _, _, y]) = product_of_casts(96);
        let a = g.gelu(y);
        // The pre-activation has another reader (as GeluGrad would), so it is still stored.
        let h = g.mul(a, y);
        let s = g.sum_all(h);
        let l = lower_forward_folding(g, s);
        let names = launch_names(&l);
        assert_eq!(names, ["gemm_rr_f32_store_gelu_64x64_wg", "pw_mul_v4", "reduce_sum"]);
        let args = &l.phases[0][0].args;
        let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
        // A, B = the f32 sources, C = R = the product, then (after the strides) u = gelu's slot.
        assert_eq!(args[..4], [slot(x), slot(w), slot(y), slot(y)]);
        assert_eq!(args.len(), 14);
        assert_eq!(args[13], slot(a));
        assert_eq!(l.kernels[l.phases[0][0].kernel].params.last().unwrap().name, "u");
        // The same GELU instruction sequence as the pointwise kernel's.
        let mut k = Kernel::new("probe");
        let r = k.reg(crate::ptx::RegKind::F32);
        crate::kernels::pointwise::emit_unary(&mut k, alpha_ir::Unary::Gelu, r);
        let body = mnemonics(&k.render());
        let body: Vec<String> = body.into_iter().filter(|m| m != "ret" && !m.starts_with("griddepcontrol")).collect();
        assert!(body.len() > 10, "{body:?}");
        let gemm = mnemonics(&l.kernels[l.phases[0][0].kernel].render());
        let pw = Pointwise {
            shape: vec![8],
            out: Operand::contiguous(DType::F32, &[8]),
            ins: vec![Operand::contiguous(DType::F32, &[8])],
            body: Body::Unary(alpha_ir::Unary::Gelu),
        };
        let pw = mnemonics(&pw.kernel().unwrap().render());
        assert!(contains_run(&pw, &body) && contains_run(&gemm, &body));
        // A 64×64 tile on one warpgroup: 64 · 64 / 128 = 32 accumulators per thread.
        assert_eq!(gemm.iter().filter(|m| *m == "ex2.approx.f32").count(), 32, "one GELU per accumulator");
    }

    /// `h = relu(y)·y` of the product `y = bf16(Σ x) · bf16(w)`, summed: (graph, [y0 = Σ x,
    /// relu(y), h, the sum]).
    fn relu_times_product() -> (Graph, [Value; 4]) {
        let mut g = Graph::new("t");
        let x = g.param("x", &[64, 64, 2], Init::Zeros);
        let w = g.param("w", &[64, 64], Init::Zeros);
        let y0 = g.sum(x, &[2], false);
        let y16 = g.cast(y0, DType::BF16);
        let w16 = g.cast(w, DType::BF16);
        let y = g.matmul(y16, w16);
        let a = g.relu(y);
        let h = g.mul(a, y);
        let s = g.sum_all(h);
        (g, [y0, a, h, s])
    }

    #[test]
    fn a_unary_whose_slot_the_plan_gives_an_operand_is_not_fused() {
        // y0 (a reduction: it cannot store bf16 itself) dies when the GEMM (reading it as its
        // f32 A) is done, so the plan puts relu's output exactly on it: writing relu from the
        // GEMM's epilogue would clobber A for the blocks still reading it. The Unary stays a
        // launch.
        let (g, [y0, a, _, s]) = relu_times_product();
        let l = lower_forward_folding(g, s);
        let names = launch_names(&l);
        assert_eq!(l.plan.slot(a).offset, l.plan.slot(y0).offset, "the premise: relu's slot is y0's");
        assert_eq!(names, ["reduce_sum", "gemm_rr_f32_store_64x64_wg", "ew_relu_mul", "reduce_sum"]);
    }

    /// A gated unit over a deep grid (16,384 rows), its gate read again at the end (`gate_late`,
    /// as its backward reads it) and its GELU by a sum too where `extra_reader`.
    fn gated_unit(gate_late: bool, extra_reader: bool) -> Vec<String> {
        let mut g = Graph::new("t");
        let x = g.param("x", &[16384, 512], Init::Zeros);
        let [wg, wu] = ["wg", "wu"].map(|n| g.param(n, &[512, 1408], Init::Zeros));
        let wd = g.param("wd", &[1408, 512], Init::Zeros);
        let [x16, wg16, wu16, wd16] = [x, wg, wu, wd].map(|v| g.cast(v, DType::BF16));
        let gate = g.matmul(x16, wg16);
        let act = g.gelu(gate);
        let up = g.matmul(x16, wu16);
        let h = g.mul(act, up);
        let h16 = g.cast(h, DType::BF16);
        let y = g.matmul(h16, wd16);
        let mut s = g.sum_all(y);
        for (read, v) in [(gate_late, gate), (extra_reader, act)] {
            if read {
                let t = g.sum_all(v);
                s = g.add(s, t);
            }
        }
        let l = lower_forward_with(g, s, CudaConfig::default());
        launch_names(&l).into_iter().map(String::from).collect()
    }

    /// The gate and up products' kernels in [`gated_unit`]'s lowering.
    fn gate_and_up(gate_late: bool, extra_reader: bool) -> (String, String) {
        let names = gated_unit(gate_late, extra_reader);
        assert!(!names.iter().any(|n| n.contains("pw_gelu") || n.contains("pw_mul")), "{names:?}");
        let mut gemms = names.into_iter().filter(|n| n.starts_with("gemm_"));
        (gemms.next().unwrap(), gemms.next().unwrap())
    }

    #[test]
    fn an_activation_nothing_reads_is_not_stored() {
        // The StoreMul computes gelu(gate) from the gate product, so its GELU output is unread,
        // the gate product is a plain store, and the two run as one gated launch.
        let (gated, down) = gate_and_up(true, false);
        assert_eq!(
            (gated.as_str(), down.as_str()),
            ("gemm_rr_bf16_storemul_gelu_tma_s3_gated", "gemm_rr_bf16_store_tma_s3_rows")
        );
        // Read by a sum too: the gate product stores it (so it is no plain gate to merge), and the
        // StoreMul still computes its own.
        let (gate, up) = gate_and_up(true, true);
        assert_eq!(
            (gate.as_str(), up.as_str()),
            ("gemm_rr_bf16_store_gelu_tma_s3", "gemm_rr_bf16_storemul_gelu_tma_s3")
        );
        // A forward alone: the gate's slot may be reused before the up product, so the StoreMul
        // reads the stored GELU output.
        let (gate, up) = gate_and_up(false, false);
        assert_eq!((gate.as_str(), up.as_str()), ("gemm_rr_bf16_store_gelu_tma_s3", "gemm_rr_bf16_storemul_tma_s3"));
    }

    /// Two LayerNorm backwards over 16,384 rows; the first's gain gradient feeds the second's
    /// dy, so it is read before the last of them: its pass 2 runs at once, and only the second's
    /// waits for the launch that folds the deferred ones.
    #[test]
    fn a_fold_read_before_the_last_layernorm_backward_runs_at_once() {
        let mut g = Graph::new("t");
        let (rows, c) = (16384, 512);
        let backward = |g: &mut Graph, name: &str, dy: Option<Value>| {
            let x = g.param(&format!("{name}.x"), &[rows, c], Init::Zeros);
            let gain = g.param(&format!("{name}.gain"), &[c], Init::Zeros);
            let bias = g.param(&format!("{name}.bias"), &[c], Init::Zeros);
            let y = g.layer_norm(x, gain, bias, 1e-5);
            let (mean, rstd) = (Value { node: y.node, index: 1 }, Value { node: y.node, index: 2 });
            let dy = dy.unwrap_or_else(|| g.param(&format!("{name}.dy"), &[rows, c], Init::Zeros));
            g.push(Op::LayerNormBackward, &[x, gain, mean, rstd, dy])
        };
        let first = backward(&mut g, "a", None);
        let dy2 = g.add(first[0], first[1]);
        let second = backward(&mut g, "b", Some(dy2));
        let mut s = g.sum_all(second[0]);
        for v in [first[2], second[1], second[2]] {
            let t = g.sum_all(v);
            s = g.add(s, t);
        }
        let l = lower_forward_with(g, s, CudaConfig::default());
        let names = launch_names(&l);
        let at = |name: &str| names.iter().position(|n| *n == name);
        let (partials, finish, multi) = (
            names.iter().filter(|n| n.starts_with("layernorm_bwd_dx") && n.contains("_partials")).count(),
            at("layernorm_bwd_params_finish"),
            at("layernorm_bwd_params_finish_multi"),
        );
        assert_eq!(partials, 2, "{names:?}");
        let (finish, multi) = (finish.expect("the first's own fold"), multi.expect("the second's, deferred"));
        let second_rows = names.iter().rposition(|n| n.starts_with("layernorm_bwd_dx")).unwrap();
        assert!(finish < second_rows && second_rows < multi, "{names:?}");
        let fold = &l.phases[0][multi];
        assert_eq!(fold.grid.0, 2 * 512 / 32, "one LayerNorm's fold blocks");
    }

    /// With chain epilogues on, the same program's chain relu(y)·y, which alone reads y, runs in
    /// the product's epilogue: y is never stored, only h, whose slot is clear of the GEMM's A.
    #[test]
    fn a_chain_read_alone_runs_in_the_products_epilogue() {
        let (g, [y0, _, h, s]) = relu_times_product();
        let config = CudaConfig {
            fold_casts_into_gemms: true,
            chain_epilogues: ChainEpilogues::Everywhere,
            ..CudaConfig::default()
        };
        let l = lower_forward_with(g, s, config);
        let names = launch_names(&l);
        assert_eq!(names, ["reduce_sum", "gemm_rr_f32_store_64x64_then_relui0_muls0i0_out1f_p0_wg", "reduce_sum"]);
        let (hs, ys) = (l.plan.slot(h), l.plan.slot(y0));
        assert!(hs.offset + hs.len <= ys.offset || ys.offset + ys.len <= hs.offset, "h clear of y0");
        // The product's pointers, then h's.
        let gemm = &l.phases[0][1];
        assert_eq!(gemm.args[13], LArg::Ptr(hs.offset));
        assert_eq!(l.kernels[gemm.kernel].params[13].name, "chain_out0");
    }

    /// A product's operand that only a cast reads is stored as bf16 by its producer, straight
    /// into the cast's slot: the GEMM reads bf16 there, the f32 value is never written, and
    /// the cast is no launch.
    #[test]
    fn a_cast_read_alone_is_stored_by_its_producer() {
        let mut g = Graph::new("t");
        let x = g.param("x", &[64, 64], Init::Zeros);
        let w = g.param("w", &[64, 64], Init::Zeros);
        let y0 = g.mul(x, x);
        let y16 = g.cast(y0, DType::BF16);
        let w16 = g.cast(w, DType::BF16);
        let y = g.matmul(y16, w16);
        let s = g.sum_all(y);
        let l = lower_forward_folding(g, s);
        let names = launch_names(&l);
        assert_eq!(names, ["pw_mul_v4", "gemm_rr_bf16f32_store_64x64_wg", "reduce_sum"]);
        let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
        // The multiply writes the cast's slot; the GEMM reads it and w's f32 slot.
        assert_eq!(l.phases[0][0].args[0], slot(y16));
        assert_eq!(l.phases[0][1].args[..2], [slot(y16), slot(w)]);
        let text = l.kernels[l.phases[0][0].kernel].render();
        assert!(text.contains("cvt.rn.bf16x2.f32") && text.contains("st.global.v2.b32"));
    }

    /// q, k, v [1, 2, 64, 8]; the backward's dq and dk each turned back by an inverse Rotary.
    fn attention_backward_program(dq_also_output: bool, keep_lse: bool) -> (Program, [Value; 5]) {
        let mut g = Graph::new("t");
        let sh = [1, 2, 64, 8];
        let q = g.param("q", &sh, Init::Zeros);
        let k = g.param("k", &sh, Init::Zeros);
        let v = g.param("v", &sh, Init::Zeros);
        let dout = g.param("do", &sh, Init::Zeros);
        let fwd = g.push(Op::Attention { scale: 0.25, softcap: None, bf16: false }, &[q, k, v]);
        let b =
            g.push(Op::AttentionBackward { scale: 0.25, softcap: None, bf16: false }, &[q, k, v, fwd[0], fwd[1], dout]);
        let rq = g.push(Op::Rotary { base: 10000.0, inverse: true }, &[b[0]])[0];
        let rk = g.push(Op::Rotary { base: 10000.0, inverse: true }, &[b[1]])[0];
        let mut outs = BTreeMap::new();
        outs.insert("dq".to_string(), rq);
        outs.insert("dk".to_string(), rk);
        outs.insert("dv".to_string(), b[2]);
        if dq_also_output {
            outs.insert("dq_raw".to_string(), b[0]);
        }
        if keep_lse {
            outs.insert("lse".to_string(), fwd[1]);
        }
        (Program::single(g.finish().unwrap(), "backward", outs), [rq, rk, b[2], b[0], b[1]])
    }

    #[test]
    fn inverse_rotaries_of_dq_and_dk_fold_into_the_attention_backward_stores() {
        // lse kept alive (an output), so the plan puts neither turned-back gradient on it.
        let (p, [rq, rk, dv, _, _]) = attention_backward_program(false, true);
        let l = lower_program(&p, &CudaConfig::default()).unwrap();
        let names = launch_names(&l);
        assert_eq!(names, ["attention_fwd", "attention_bwd_dq_rotary", "attention_bwd_dkv_rotary"]);
        let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
        let (dq, dkv) = (&l.phases[0][1].args, &l.phases[0][2].args);
        assert_eq!(dq.len(), 9);
        assert_eq!(dkv.len(), 9);
        assert_eq!(dq[0], slot(rq), "dq goes straight to the inverse Rotary's slot");
        assert_eq!((dkv[0], dkv[1]), (slot(rk), slot(dv)));
        // Both read the host-computed table, the one the rotary kernel would read.
        assert_eq!(dq[8], dkv[8]);
        let LArg::Ptr(tab) = dq[8] else { panic!("table pointer") };
        assert!(tab >= l.plan.arena);
        let want: Vec<u8> = rotary::table(64, 8, 10000.0).iter().flat_map(|x| x.to_le_bytes()).collect();
        assert!(l.inits.iter().any(|(o, b)| *o == tab && *b == want));
        // The rotation is the rotary kernel's instruction sequence (inverse: the sine negated).
        let pair: Vec<String> =
            ["neg.f32", "mul.rn.f32", "mul.rn.f32", "sub.rn.f32", "mul.rn.f32", "mul.rn.f32", "add.rn.f32"]
                .map(String::from)
                .to_vec();
        assert!(contains_run(&mnemonics(&rotary::kernel(128, 64, 8, true).render()), &pair[1..]));
        for launch in &l.phases[0][1..] {
            let m = mnemonics(&l.kernels[launch.kernel].render());
            assert!(contains_run(&m, &pair));
            assert_eq!(m.iter().filter(|x| *x == "neg.f32").count(), 4, "one per pair of the row");
        }
    }

    #[test]
    fn a_turned_back_gradient_planned_over_lse_keeps_its_rotary_and_one_exactly_on_o_fuses() {
        // Without lse as an output the plan puts dk's inverse Rotary on lse and dq (both dead
        // after the backward): writing it from the dK/dV kernel would clobber lse while it is
        // read. dq's lies exactly on o, which only the dQ kernel's own thread reads: allowed.
        let (p, [rq, rk, _, _, _]) = attention_backward_program(false, false);
        let l = lower_program(&p, &CudaConfig::default()).unwrap();
        let g = &l.plan.program.graph;
        let attn = (0..g.nodes.len() as u32).find(|&i| matches!(g.nodes[i as usize].op, Op::Attention { .. })).unwrap();
        let (o, lse) = (Value { node: attn, index: 0 }, Value { node: attn, index: 1 });
        assert_eq!(l.plan.slot(rq).offset, l.plan.slot(o).offset, "the premise: dq's Rotary on o");
        assert_eq!(l.plan.slot(rk).offset, l.plan.slot(lse).offset, "the premise: dk's Rotary on lse");
        let names = launch_names(&l);
        assert_eq!(names, ["attention_fwd", "attention_bwd_dq_rotary", "attention_bwd_dkv", "rotary_inverse"]);
        let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
        assert_eq!(l.phases[0][1].args[0], slot(rq));
        assert_eq!(l.phases[0][3].args[0], slot(rk));
    }

    /// q, k computed [1, 2, 64, 8], turned by forward Rotaries, then attention, its backward and
    /// the inverse Rotaries of dq and dk, as in Coppelius; with `rq_output` the rotated q is
    /// also a program output.
    fn rotary_attention_program(rq_output: bool) -> (Program, [Value; 4]) {
        let mut g = Graph::new("t");
        let sh = [1, 2, 64, 8];
        let (q0, k0) = (g.param("q", &sh, Init::Zeros), g.param("k", &sh, Init::Zeros));
        let v = g.param("v", &sh, Init::Zeros);
        let dout = g.param("do", &sh, Init::Zeros);
        let (q, k) = (g.mul(q0, q0), g.mul(k0, k0));
        let rq = g.push(Op::Rotary { base: 10000.0, inverse: false }, &[q])[0];
        let rk = g.push(Op::Rotary { base: 10000.0, inverse: false }, &[k])[0];
        let fwd = g.push(Op::Attention { scale: 0.25, softcap: None, bf16: false }, &[rq, rk, v]);
        let b = g.push(
            Op::AttentionBackward { scale: 0.25, softcap: None, bf16: false },
            &[rq, rk, v, fwd[0], fwd[1], dout],
        );
        let dq = g.push(Op::Rotary { base: 10000.0, inverse: true }, &[b[0]])[0];
        let dk = g.push(Op::Rotary { base: 10000.0, inverse: true }, &[b[1]])[0];
        let mut outs = BTreeMap::new();
        outs.insert("o".to_string(), fwd[0]);
        outs.insert("dq".to_string(), dq);
        outs.insert("dk".to_string(), dk);
        outs.insert("dv".to_string(), b[2]);
        if rq_output {
            outs.insert("rq".to_string(), rq);
        }
        (Program::single(g.finish().unwrap(), "step", outs), [q, k, rq, rk])
    }

    #[test]
    fn forward_rotaries_are_turned_on_load_by_the_attention_kernels() {
        let (p, [q, k, _, _]) = rotary_attention_program(false);
        let l = lower_program(&p, &CudaConfig::default()).unwrap();
        let names = launch_names(&l);
        assert_eq!(
            names,
            [
                "ew_mul_mul",
                "attention_fwd_rotload",
                "attention_bwd_dq_rotload_rotary",
                "attention_bwd_dkv_rotload_rotary"
            ]
        );
        let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
        let tab = l.phases[0][2].args[8];
        for (launch, at) in [(1, 5), (2, 9), (3, 9)] {
            let args = &l.phases[0][launch].args;
            assert_eq!((args[2], args[3]), (slot(q), slot(k)), "the pre-rotary q and k");
            assert_eq!((args[at], args[at + 1]), (tab, tab), "the rotary table for q and k");
        }
        let want: Vec<u8> = rotary::table(64, 8, 10000.0).iter().flat_map(|x| x.to_le_bytes()).collect();
        assert!(l.inits.iter().any(|(o, b)| LArg::Ptr(*o) == tab && *b == want));
        // On load, the rotary kernel's instruction sequence (no negated sine).
        let pair: Vec<String> = ["mul.rn.f32", "mul.rn.f32", "sub.rn.f32", "mul.rn.f32", "mul.rn.f32", "add.rn.f32"]
            .map(String::from)
            .to_vec();
        assert!(contains_run(&mnemonics(&rotary::kernel(128, 64, 8, false).render()), &pair));
        assert!(contains_run(&mnemonics(&l.kernels[l.phases[0][1].kernel].render()), &pair));
    }

    #[test]
    fn a_rotated_tensor_read_elsewhere_keeps_its_rotary() {
        let (p, [q, k, rq, _]) = rotary_attention_program(true);
        let l = lower_program(&p, &CudaConfig::default()).unwrap();
        let names = launch_names(&l);
        assert_eq!(
            names,
            [
                "ew_mul_mul",
                "rotary",
                "attention_fwd_rotload",
                "attention_bwd_dq_rotload_rotary",
                "attention_bwd_dkv_rotload",
                "rotary_inverse"
            ]
        );
        // dk's inverse Rotary lies over lse (dead after the backward), which the dK/dV kernel
        // reads: it stays a launch.
        let g = &l.plan.program.graph;
        let attn = (0..g.nodes.len() as u32).find(|&i| matches!(g.nodes[i as usize].op, Op::Attention { .. })).unwrap();
        let lse =
            (l.plan.slot(Value { node: attn, index: 1 }).offset, g.ty(Value { node: attn, index: 1 }).numel() * 4);
        let LArg::Ptr(dk) = l.phases[0][5].args[0] else { panic!("dk pointer") };
        assert!(dk < lse.0 + lse.1 && lse.0 < dk + 64 * 2 * 8 * 4, "the premise: dk's Rotary over lse");
        let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
        for launch in &l.phases[0][2..5] {
            assert_eq!((launch.args[2], launch.args[3]), (slot(rq), slot(k)), "rotated q, pre-rotary k");
        }
        assert_eq!(l.phases[0][1].args[1], slot(q));
    }

    #[test]
    fn a_gradient_read_elsewhere_keeps_its_inverse_rotary() {
        let (p, [_, rk, _, dq, _]) = attention_backward_program(true, true);
        let l = lower_program(&p, &CudaConfig::default()).unwrap();
        let names = launch_names(&l);
        assert_eq!(names, ["attention_fwd", "attention_bwd_dq", "attention_bwd_dkv_rotary", "rotary_inverse"]);
        let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
        assert_eq!(l.phases[0][1].args[0], slot(dq));
        assert_eq!(l.phases[0][1].args.len(), 8);
        assert_eq!(l.phases[0][2].args[0], slot(rk));
    }
}
