//! The fusion passes: for each phase, before it is lowered, what each launch fuses.
//!
//! Why apart from the lowering: a fusion is a decision about the plan (which write or read
//! moves from one launch to another, checked against the plan's slots so that it meets nothing
//! live); the lowering only reads the decisions. One file per pass; this module holds what
//! they share: the phase's view of the plan and the decisions they record.
//!
//! The passes, in the order the lowering runs them for each phase, each checked against the plan's
//! slots so that a moved read or write meets nothing live: casts folded into GEMM operand loads
//! (with [`CudaConfig::fold_casts_into_gemms`]) and residual Adds as GEMM epilogues
//! (`gemm_loads_and_adds.rs`: [`fuse`]); activations as GEMM epilogues, head-split stores and
//! rotaries into attention's loads and stores (`epilogues.rs`: [`fuse_more`], with `activation.rs`,
//! `heads.rs`, `inverse_rotary.rs` and `rotaries.rs`); the q/k/v projection storing bf16 heads
//! turned by the rotary for attention to copy (`turned_heads.rs`); bf16 casts stored by the kernel
//! producing their source (`casts_into_producers.rs`: elementwise ops, permutes, LayerNorm, the
//! cross-entropy backward); the attention kernels storing the permuted bf16 tensors the projections
//! around them read (`merged_gradients.rs`, `forward_copies.rs`); the output gradient's product
//! storing dO as bf16 with delta (`delta_heads.rs`); a gated unit's multiply as the up product's
//! epilogue, computing `gelu(gate)` from the gate product (`mul_epilogues.rs`); LayerNorm backwards
//! whose gain and bias folds wait for one launch after the last (`deferred_folds.rs`); column sums
//! storing the bf16 cast of the tensor they sum (`column_casts.rs`); LayerNorm backwards summing
//! the columns of what they store for the bias gradient after them (`norm_column_sums.rs`); a
//! cross-entropy launching its backward too (`joint_cross_entropy.rs`); a Concat's copy of a
//! permuted or sliced part, a Permute of a slice, and elementwise nodes reading a slice, each
//! reading the tensor under the view (`concat_views.rs`).
//! `recompute.rs` is the chain rule the lowering's fused chains apply (a unary of an input
//! recomputed rather than read), and `gemm_spec.rs` the tiled product spec a MatMul runs as. Where
//! a fusion needs the launches as lowered, the lowering merges them itself (see [`crate::lower`]).

use std::collections::HashMap;

use alpha_ir::{DType, Node, Op, Value};
use alpha_plan::Plan;

use crate::config::CudaConfig;
use crate::kernels::attention;
use crate::kernels::attention::mma::Gradients;
use crate::kernels::fused;
use crate::kernels::gemm::tma as gemm_tma;
use crate::kernels::gemm::wgmma as gemm_wgmma;
use crate::kernels::gemm::{self, Epilogue, GemmShape, GemmSpec, Input, Layout};
use crate::kernels::layernorm::Norm;

mod activation;
mod casts_into_producers;
mod column_casts;
mod concat_views;
mod deferred_folds;
mod delta_heads;
mod epilogues;
mod forward_copies;
mod gemm_loads_and_adds;
mod gemm_spec;
mod heads;
mod inverse_rotary;
mod joint_cross_entropy;
mod merged_gradients;
mod mul_epilogues;
mod norm_column_sums;
mod plan;
mod recompute;
mod rotaries;
mod turned_heads;

pub(crate) use activation::*;
pub(crate) use casts_into_producers::*;
pub(crate) use column_casts::*;
pub(crate) use concat_views::*;
pub(crate) use deferred_folds::*;
pub(crate) use delta_heads::*;
pub(crate) use epilogues::*;
pub(crate) use forward_copies::*;
pub(crate) use gemm_loads_and_adds::*;
pub(crate) use gemm_spec::*;
pub(crate) use heads::*;
pub(crate) use inverse_rotary::*;
pub(crate) use joint_cross_entropy::*;
pub(crate) use merged_gradients::*;
pub(crate) use mul_epilogues::*;
pub(crate) use norm_column_sums::*;
pub(crate) use plan::*;
pub(crate) use recompute::*;
pub(crate) use rotaries::*;
pub(crate) use turned_heads::*;

/// Per q (dq), k (dk): the tensor a fused rotary reads or writes instead, and its base.
pub(crate) type Turned = [Option<(Value, f64)>; 2];

/// Byte range of `v`'s slot, if it has one.
pub(crate) fn range(plan: &Plan, v: Value) -> Option<(usize, usize)> {
    let s = plan.slots.get(v.node as usize)?.get(v.index as usize).copied().flatten()?;
    let bytes = plan.program.graph.ty(v).numel() * plan.program.graph.dtype(v).size();
    Some((s.offset, s.offset + bytes))
}

pub(crate) fn overlap(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// How often each value is read (by nodes, program outputs and phase-end assignments), and which
/// nodes read it: a fusion may hide an intermediate only when its fused reader is its only use.
/// `v`, or the value its chain of reshapes ends in where each link is its value's only reader:
/// what a kernel reading `v` through views reads.
pub(crate) fn past_reshapes(g: &alpha_ir::Graph, readers: &HashMap<Value, Vec<u32>>, mut v: Value) -> Value {
    while let Some(&[r]) = readers.get(&v).map(Vec::as_slice) {
        if !matches!(g.nodes[r as usize].op, Op::Reshape { .. }) {
            break;
        }
        v = Value { node: r, index: 0 };
    }
    v
}

pub(crate) fn readers_of(program: &alpha_ir::Program) -> (HashMap<Value, usize>, HashMap<Value, Vec<u32>>) {
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

/// One phase as the fusion passes that run after `fuse_more` see it: the plan, the phase's nodes
/// in launch order and their positions, and every value's readers (computed once for the
/// program).
pub(crate) struct PhaseView<'a> {
    pub(crate) plan: &'a Plan,
    pub(crate) g: &'a alpha_ir::Graph,
    pub(crate) nodes: &'a [u32],
    pub(crate) pos: HashMap<u32, usize>,
    pub(crate) readers: &'a HashMap<Value, Vec<u32>>,
}

impl<'a> PhaseView<'a> {
    pub(crate) fn new(plan: &'a Plan, nodes: &'a [u32], readers: &'a HashMap<Value, Vec<u32>>) -> Self {
        let pos = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        PhaseView { plan, g: &plan.program.graph, nodes, pos, readers }
    }

    pub(crate) fn range(&self, v: Value) -> Option<(usize, usize)> {
        range(self.plan, v)
    }

    pub(crate) fn readers(&self, v: Value) -> &[u32] {
        self.readers.get(&v).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The node reading `v` through single-reader reshapes, and the value it reads.
    pub(crate) fn through_reshapes(&self, v: Value) -> Option<(u32, Value)> {
        let v = past_reshapes(self.g, self.readers, v);
        let &[r] = self.readers(v) else { return None };
        Some((r, v))
    }

    /// Whether no kernel runs strictly between launch positions `from` and `to` (each node
    /// between skipped, a reshape, or a placed Concat), with `from` before `to`: a store moved
    /// from `to` to `from` then passes nothing.
    pub(crate) fn nothing_launched(&self, from: usize, to: usize, skip: &std::collections::HashSet<u32>) -> bool {
        from < to
            && self.nodes[from + 1..to].iter().all(|&x| {
                skip.contains(&x) || matches!(self.g.nodes[x as usize].op, Op::Reshape { .. } | Op::Concat { .. })
            })
    }

    /// The bf16 cast that the permute `p` (by `perm`) stores, where the kernel at launch
    /// position `at` may store it itself instead: `p` launched after it with nothing between,
    /// and the cast's slot clear of `touched` (what that kernel reads and writes).
    pub(crate) fn permute_cast_for(
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
/// Every value `nodes` read or write (their inputs and outputs): what a store moved from after
/// them to before them must not meet.
pub(crate) fn touched_by<'g>(g: &'g alpha_ir::Graph, nodes: &'g [u32]) -> impl Iterator<Item = Value> + 'g {
    nodes.iter().flat_map(move |&id| {
        let n = &g.nodes[id as usize];
        let outs = (0..n.outputs.len() as u16).map(move |k| Value { node: id, index: k });
        n.inputs.iter().copied().chain(outs)
    })
}

pub(crate) fn clear_of(slot: (usize, usize), ranges: impl IntoIterator<Item = Option<(usize, usize)>>) -> bool {
    ranges.into_iter().all(|r| r.is_some_and(|r| !overlap(r, slot)))
}
