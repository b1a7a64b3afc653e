//! One position at a time: a system's forward for the next token with every block's keys and
//! values (or, for a recurrent memory, its state) kept between runs, so that generating a token
//! costs one position's arithmetic, not a whole window's.
//!
//! Why a program of its own: the training and scoring programs run every position of a window;
//! generating n tokens with them costs n windows. The decode program reads one token and the
//! position it stands at, appends its key and value to each block's cache (state of the program,
//! written back at the end of every run by the phase's assignments), attends over the cache up
//! to that position and returns the next token's scores. A recurrent state is carried the same
//! way ([`Feeds::carried`]). The weights' bf16 copies are made once, by a phase of their own
//! ([`ROUND_WEIGHTS`]), not on every token.
//!
//! The host feeds, each run ([`DecodeStep`]): `token` `[1, 1]`, for systems with learned
//! positions `position` `[1, 1]`, `onehot` `[T, 1]` (1 at the
//! position), `mask` `[T]` (0 up to the position, −∞ after) and, for rotary systems, `rope_cos`
//! and `rope_sin` `[head_dim / 2]` for the position (the Rotary op's own angles, in f64 then
//! rounded). Matrix operands are rounded to bf16 as in training; the softmax runs in f32 over the
//! cache, so scores differ from the window's bf16 flash attention by its rounding of P (a test
//! bounds the difference).

use alpha_ir::{DType, Graph, Init, IrError, Node, Op, Phase, Program, TensorType, Value};
use std::collections::BTreeMap;

/// A system's decode program and what the host must feed it.
pub struct Decoder {
    pub program: Program,
    /// Positions the caches hold (the system's context).
    pub positions: usize,
    /// Rotary positions: (base, head dimension).
    pub rotary: Option<(f64, usize)>,
    /// Whether the program reads the position itself (`position`: learned positions).
    pub learned_positions: bool,
}

/// The inputs one run of a [`Decoder`] reads for `token` at `position`.
pub struct DecodeStep {
    pub token: u32,
    /// The position itself, for systems with learned positions (`position` `[1, 1]`).
    pub position: u32,
    pub onehot: Vec<f32>,
    pub mask: Vec<f32>,
    pub rope: Option<(Vec<f32>, Vec<f32>)>,
}

impl Decoder {
    /// What to write for `token` at `position` (< [`Decoder::positions`]).
    pub fn step(&self, token: u32, position: usize) -> DecodeStep {
        let t = self.positions;
        let onehot = (0..t).map(|j| if j == position { 1.0 } else { 0.0 }).collect();
        let mask = (0..t).map(|j| if j <= position { 0.0 } else { f32::NEG_INFINITY }).collect();
        // As `alpha_cpu::kernels::rotary`: θ_i = p · base^(−2i/d) in f64, sin and cos rounded.
        let rope = self.rotary.map(|(base, d)| {
            let angle = |i: usize| position as f64 * base.powf(-2.0 * i as f64 / d as f64);
            ((0..d / 2).map(|i| angle(i).cos() as f32).collect(), (0..d / 2).map(|i| angle(i).sin() as f32).collect())
        });
        DecodeStep { token, position: position as u32, onehot, mask, rope }
    }
}

/// The per-run inputs of a decode graph, made once and handed to every block.
pub struct Feeds {
    onehot: Value,
    keep: Value,
    mask: Value,
    rope: Option<(Value, Value)>,
    positions: usize,
}

impl Feeds {
    /// Declares `onehot`, `mask` and (with `rotary_dim`) `rope_cos`/`rope_sin` in `g`.
    pub fn new(g: &mut Graph, positions: usize, rotary_dim: Option<usize>) -> Feeds {
        let onehot = g.input("onehot", &[positions, 1], DType::F32);
        let one = g.constant(1.0, &[positions, 1], DType::F32);
        let keep = g.sub(one, onehot);
        let mask = g.input("mask", &[positions], DType::F32);
        let rope =
            rotary_dim.map(|d| (g.input("rope_cos", &[d / 2], DType::F32), g.input("rope_sin", &[d / 2], DType::F32)));
        Feeds { onehot, keep, mask, rope, positions }
    }
}

impl Feeds {
    /// A recurrent state carried between runs, named `name`, of `start`'s type: returns the
    /// state leaf (to assign the next value to) and its value for this run, which is `start` at
    /// position 0 (a sequence begins, or the host refills from the start) and the state after
    /// the previous run elsewhere.
    pub fn carried(&self, g: &mut Graph, name: &str, start: Value) -> (Value, Value) {
        let ty = g.ty(start).clone();
        let state = g.state(name, ty, Init::Zeros);
        let first = g.slice(self.onehot, 0, 0, 1);
        let first = g.reshape(first, &[1]);
        let one = g.constant(1.0, &[1], DType::F32);
        let later = g.sub(one, first);
        let kept = g.mul(state, later);
        let begun = g.mul(start, first);
        (state, g.add(kept, begun))
    }
}

/// Self-attention of one position from its fused projection `qkv` `[1, 3·heads·hd]` (columns
/// ordered q/k/v, head, dim, as [`crate::layers::causal_self_attention`] reads them) over this
/// block's cache, which it extends: returns the heads concatenated `[1, heads·hd]` and the
/// (state, new value) pairs the phase must assign.
pub fn cached_attention(
    g: &mut Graph,
    qkv: Value,
    heads: usize,
    feeds: &Feeds,
    scope: &str,
) -> (Value, Vec<(Value, Value)>) {
    let hd = g.shape(qkv)[1] / 3 / heads;
    let qkv = g.reshape(qkv, &[3, heads, 1, hd]);
    let part = |g: &mut Graph, i: usize| {
        let s = g.slice(qkv, 0, i, i + 1);
        g.reshape(s, &[heads, 1, hd])
    };
    let (q, k, v) = (part(g, 0), part(g, 1), part(g, 2));
    cached_heads(g, q, k, v, feeds, scope)
}

/// Attention of one position's query heads `q` `[heads, 1, hd]` over this block's cache of
/// key/value heads, extended by the position's `k`, `v` `[kv_heads, 1, hd]` (rotated here when
/// the feeds carry rotary angles). Query head i reads key/value head i / (heads / kv_heads), as
/// the Attention op groups them. Returns the heads concatenated `[1, heads·hd]` and the
/// (state, new value) pairs the phase must assign.
pub fn cached_heads(
    g: &mut Graph,
    mut q: Value,
    mut k: Value,
    v: Value,
    feeds: &Feeds,
    scope: &str,
) -> (Value, Vec<(Value, Value)>) {
    let (heads, hd) = (g.shape(q)[0], g.shape(q)[2]);
    let kv_heads = g.shape(k)[0];
    let t = feeds.positions;
    if let Some((cos, sin)) = feeds.rope {
        q = turn(g, q, cos, sin);
        k = turn(g, k, cos, sin);
    }
    let cache_ty = TensorType::new([kv_heads, t, hd], DType::F32);
    let k_cache = g.state(&format!("cache.{scope}.k"), cache_ty.clone(), Init::Zeros);
    let v_cache = g.state(&format!("cache.{scope}.v"), cache_ty, Init::Zeros);
    // The position's key and value written into its row; the rest kept.
    let write = |g: &mut Graph, cache: Value, x: Value| {
        let kept = g.mul(cache, feeds.keep);
        let placed = g.mul(x, feeds.onehot);
        g.add(kept, placed)
    };
    let (k_all, v_all) = (write(g, k_cache, k), write(g, v_cache, v));
    // The query heads of a group as the rows of one product with its key/value head.
    let q = g.reshape(q, &[kv_heads, heads / kv_heads, hd]);
    let [q16, k16, v16] = [q, k_all, v_all].map(|x| g.cast(x, DType::BF16));
    let scores = g.matmul_t(q16, k16, false, true);
    let scores = g.scale(scores, 1.0 / (hd as f64).sqrt());
    let scores = g.add(scores, feeds.mask);
    let top = g.reduce(alpha_ir::Reduce::Max, scores, &[2], true);
    let shifted = g.sub(scores, top);
    let e = g.exp(shifted);
    let z = g.sum(e, &[2], true);
    let p = g.div(e, z);
    let p16 = g.cast(p, DType::BF16);
    let o = g.matmul(p16, v16);
    let o = g.reshape(o, &[1, heads * hd]);
    (o, vec![(k_cache, k_all), (v_cache, v_all)])
}

/// `blocks` blocks in scopes `blocks.{i}` over `x`, each built by `block(g, x, attend)` with
/// `attend` that block's attention over its cache; returns the stream after them and the caches'
/// assignments.
pub fn cached_blocks(
    g: &mut Graph,
    mut x: Value,
    blocks: usize,
    heads: usize,
    feeds: &Feeds,
    block: impl Fn(&mut Graph, Value, &mut dyn FnMut(&mut Graph, Value) -> Value) -> Value,
) -> (Value, Vec<(Value, Value)>) {
    let mut assign = vec![];
    for i in 0..blocks {
        let scope = format!("blocks.{i}");
        x = g.scoped(scope.clone(), |g| {
            block(g, x, &mut |g, qkv| {
                let (o, cache) = cached_attention(g, qkv, heads, feeds, &scope);
                assign.extend(cache);
                o
            })
        });
    }
    (x, assign)
}

/// Half-split rotary of `x` `[heads, 1, d]` by the position's `cos`, `sin` `[d / 2]`, in the
/// Rotary op's order: (x₁c − x₂s, x₁s + x₂c).
fn turn(g: &mut Graph, x: Value, cos: Value, sin: Value) -> Value {
    let d = g.shape(x)[2];
    let x1 = g.slice(x, 2, 0, d / 2);
    let x2 = g.slice(x, 2, d / 2, d);
    let (x1c, x2s) = (g.mul(x1, cos), g.mul(x2, sin));
    let (x1s, x2c) = (g.mul(x1, sin), g.mul(x2, cos));
    let first = g.sub(x1c, x2s);
    let second = g.add(x1s, x2c);
    g.concat(&[first, second], 2)
}

/// The decode program's phase: one position's run.
pub const DECODE: &str = "decode";
/// The decode program's one-time phase: rounds every weight the products read to bf16 into a
/// state of its own (`{name}.bf16`). The host runs it once after writing the parameters, before
/// the first `decode`.
pub const ROUND_WEIGHTS: &str = "round-weights";

/// The decode program: a `decode` phase computing `logits` `[1, V]` and assigning every cache,
/// then the [`ROUND_WEIGHTS`] phase.
///
/// Why the weights are rounded apart: the systems' blocks are written once for training and
/// decoding, and training casts each weight to bf16 where a product reads it (the weight
/// changes every update). In decoding the weights never change, so casting them on every token
/// rewrote every weight each run (the largest memory traffic of a token on the CPU). Here each
/// cast of a parameter to bf16 is taken out of the decode phase: the products read a bf16 state
/// instead, which the one-time phase fills. The decode phase stays first so that a backend that
/// runs phase 0 per token still finds the caches' assignments there; the casts read only
/// parameters, so they can stand after it in the graph.
pub fn program(g: Graph, logits: Value, assign: Vec<(Value, Value)>) -> Result<Program, IrError> {
    let graph = g.finish()?;
    let system = graph.system.clone();
    let old = graph.nodes;
    let weight_cast = |n: &Node| {
        matches!(n.op, Op::Cast { to: DType::BF16 }) && matches!(old[n.inputs[0].node as usize].op, Op::Param { .. })
    };
    // Old node → new node; a weight's casts all map to its one rounded state.
    let mut moved = vec![0u32; old.len()];
    let mut rounded: BTreeMap<u32, u32> = BTreeMap::new();
    let mut casts = vec![];
    let mut nodes: Vec<Node> = Vec::with_capacity(old.len());
    let at = |moved: &[u32], v: Value| Value { node: moved[v.node as usize], index: v.index };
    for (i, n) in old.iter().enumerate() {
        if weight_cast(n) {
            let param = n.inputs[0].node;
            let state = *rounded.entry(param).or_insert_with(|| {
                let Op::Param { name, .. } = &old[param as usize].op else { unreachable!("a parameter") };
                casts.push(i);
                nodes.push(Node {
                    op: Op::State { name: format!("{name}.bf16"), init: Init::Zeros },
                    inputs: vec![],
                    outputs: n.outputs.clone(),
                    scope: n.scope.clone(),
                });
                nodes.len() as u32 - 1
            });
            moved[i] = state;
        } else {
            let inputs = n.inputs.iter().map(|&v| at(&moved, v)).collect();
            nodes.push(Node { inputs, ..n.clone() });
            moved[i] = nodes.len() as u32 - 1;
        }
    }
    let decode_end = nodes.len();
    let mut round = vec![];
    for i in casts {
        let n = &old[i];
        let param = at(&moved, n.inputs[0]);
        nodes.push(Node { inputs: vec![param], ..n.clone() });
        let cast = Value { node: nodes.len() as u32 - 1, index: 0 };
        round.push((at(&moved, Value { node: i as u32, index: 0 }), cast));
    }
    let mut graph = Graph::new(system);
    graph.nodes = nodes;
    let graph = graph.finish()?;
    let n = graph.nodes.len();
    let assign = assign.into_iter().map(|(dst, src)| (at(&moved, dst), at(&moved, src))).collect();
    let outputs = BTreeMap::from([("logits".to_string(), at(&moved, logits))]);
    let phases = vec![
        Phase { name: DECODE.into(), nodes: 0..decode_end, assign },
        Phase { name: ROUND_WEIGHTS.into(), nodes: decode_end..n, assign: round },
    ];
    let program = Program { graph, phases, outputs };
    program.verify()?;
    Ok(program)
}

/// The decode program's caches and carried states: the state leaves its `decode` phase assigns.
pub fn caches(program: &Program) -> Vec<(String, usize)> {
    let carried: Vec<Value> = program.phases[0].assign.iter().map(|&(dst, _)| dst).collect();
    carried
        .into_iter()
        .filter_map(|v| match &program.graph.node(v).op {
            Op::State { name, .. } => Some((name.clone(), program.graph.ty(v).numel())),
            _ => None,
        })
        .collect()
}
