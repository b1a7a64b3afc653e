//! The fusion plan: what each launch fuses, as the passes decided it, typed by the node that
//! hosts it.
//!
//! Why one value: the passes record their decisions here and the lowering reads them from here
//! alone, so a new fusion is a field on the host's entry, the pass that sets it and the family's
//! lowering that reads it. Later passes read what earlier ones decided (a head-split product
//! may store turned heads; a multiply epilogue needs a product with nothing else fused).

use super::*;

/// A multiply after a product run as its epilogue: (the multiply node, the value the epilogue
/// reads as R, the bf16 cast the multiply stores, the activation applied to R).
pub(crate) type MulEpilogue = (u32, Value, Value, Option<alpha_ir::Unary>);

/// What the passes fused into the launch of one MatMul node.
#[derive(Clone, Copy, Default)]
pub(crate) struct ProductFusion {
    /// The f32 sources of its bf16 operands, read with convert-on-load instead of the casts
    /// ([`fuse`]).
    pub(crate) f32_operands: Option<(Value, Value)>,
    /// The Add after it as its epilogue: (the Add node, the residual it adds) ([`fuse`]).
    pub(crate) residual_add: Option<(u32, Value)>,
    /// The Unary node whose `u(product)` its epilogue also writes ([`fuse_more`]).
    pub(crate) activation: Option<(u32, alpha_ir::Unary)>,
    /// The Permute whose output it stores split into heads instead of its own ([`fuse_more`]).
    pub(crate) heads: Option<(u32, gemm::Heads)>,
    /// Storing q and k turned and everything bf16 ([`turned_heads`]): the rotary base of the
    /// table.
    pub(crate) turned_base: Option<f64>,
    /// The bias its head-split store adds: (the Add node that no longer runs, the bias row)
    /// ([`head_split`]).
    pub(crate) heads_bias: Option<(u32, Value)>,
    /// The multiply after it, whose bf16 cast its epilogue writes too ([`mul_epilogues`]).
    pub(crate) mul: Option<MulEpilogue>,
    /// (The bf16 AttentionBackward whose dO it is, its O): it stores dO as bf16 with delta
    /// instead of the f32 dO ([`delta_heads`]).
    pub(crate) delta: Option<(u32, Value)>,
}

/// What the passes fused into the launches of one Attention or AttentionBackward node.
#[derive(Clone, Copy, Default)]
pub(crate) struct AttentionFusion {
    /// Per q, k: (the forward Rotary's input it reads and turns on load instead of the Rotary's
    /// output, base) ([`fuse_more`]).
    pub(crate) load_rotary: Option<Turned>,
    /// Backward only, per dq, dk: (the inverse Rotary's output it writes instead, base)
    /// ([`fuse_more`]).
    pub(crate) store_rotary: Option<Turned>,
    /// Reading bf16 q, k and v stored turned by their projection: the heads tensor's f32 slot
    /// (the bf16 values lie at half their views' offsets from its start) ([`turned_heads`]).
    pub(crate) bf16_heads: Option<(usize, usize)>,
    /// Backward only: its permuted, concatenated gradients, which it stores itself: the bf16
    /// cast of them, or the f32 permute ([`merged_gradients`]).
    pub(crate) merged_gradients: Option<(Value, Gradients)>,
    /// Backward only: the column sum (Reduce) whose partials it writes beside its merged bf16
    /// gradients ([`summed_merged_gradients`]).
    pub(crate) column_sum: Option<u32>,
    /// Forward only: the bf16 cast of its permuted output, which it stores too
    /// ([`forward_copies`]).
    pub(crate) output_copy: Option<Value>,
}

/// Every fusion decided so far, by host node; kept across phases (node ids are unique to one).
#[derive(Default)]
pub(crate) struct FusionPlan {
    products: HashMap<u32, ProductFusion>,
    attention: HashMap<u32, AttentionFusion>,
    /// Producer output → the bf16 cast it stores instead ([`casts_into_producers`]; the
    /// lowering's fused chains add theirs).
    pub(crate) store_as: HashMap<Value, Value>,
    /// The current phase's LayerNormBackwards whose pass 2 (the fold of the band partials into
    /// the gain and bias gradients) waits for one launch after the last of them
    /// ([`deferred_folds`]).
    pub(crate) deferred_folds: std::collections::HashSet<u32>,
    /// The current phase's LayerNormBackward after whose launch the waiting folds run.
    pub(crate) fold_flush_after: Option<u32>,
    /// Column sum (Reduce) → the output of the bf16 cast of its tensor that its first pass may
    /// store too ([`column_casts`]).
    pub(crate) column_casts: HashMap<u32, Value>,
    /// LayerNorm backward → the column sum of what it stores, whose chunk partials it writes
    /// ([`norm_column_sums`]).
    pub(crate) norm_column_sums: HashMap<u32, u32>,
    /// CrossEntropy → its backward, run in the same launch ([`joint_cross_entropy`]).
    pub(crate) joint_cross_entropy: HashMap<u32, JointCrossEntropy>,
    /// Concat → its parts (by input position) whose copies read through the permute or slice
    /// that made them, which does not run ([`concat_views`]).
    pub(crate) concat_views: HashMap<u32, Vec<(usize, ViewPart)>>,
    /// Concat → (the Concat it is a part of, which part): it copies its parts into that
    /// Concat's output, which does not copy the part ([`nested_concats`]).
    pub(crate) nested_concats: HashMap<u32, (u32, usize)>,
    /// Permute → the slice whose source it reads instead of the slice, which does not run
    /// ([`sliced_permutes`]).
    pub(crate) sliced_permutes: HashMap<u32, ViewPart>,
    /// A slice's (or its reshape's) output → the Unaries and Binaries reading it, which read
    /// the tensor under it in place instead, alone or in their chains; the slices do not run
    /// ([`chain_slices`]).
    pub(crate) chain_slices: HashMap<Value, (Vec<u32>, SlicedRead)>,
    /// MatMul → its place in the Concat it is a part of through a permute, where it stores
    /// ([`products_into_concats`]).
    pub(crate) products_into_concats: HashMap<u32, ProductPart>,
    /// A padded product stored in place → (the Add of a bias row after it, the row): it adds
    /// the row as it stores into the Add's output (`lower::padded::padded_biases`).
    pub(crate) padded_biases: HashMap<u32, (u32, Value)>,
}

impl FusionPlan {
    /// MatMul `id`'s entry, made empty where it has none.
    pub(crate) fn product_mut(&mut self, id: u32) -> &mut ProductFusion {
        self.products.entry(id).or_default()
    }

    /// Attention (or backward) `id`'s entry, made empty where it has none.
    pub(crate) fn attention_mut(&mut self, id: u32) -> &mut AttentionFusion {
        self.attention.entry(id).or_default()
    }

    pub(crate) fn f32_operands(&self, id: u32) -> Option<&(Value, Value)> {
        self.products.get(&id)?.f32_operands.as_ref()
    }

    pub(crate) fn residual_add(&self, id: u32) -> Option<&(u32, Value)> {
        self.products.get(&id)?.residual_add.as_ref()
    }

    pub(crate) fn activation(&self, id: u32) -> Option<&(u32, alpha_ir::Unary)> {
        self.products.get(&id)?.activation.as_ref()
    }

    pub(crate) fn heads(&self, id: u32) -> Option<&(u32, gemm::Heads)> {
        self.products.get(&id)?.heads.as_ref()
    }

    pub(crate) fn heads_bias(&self, id: u32) -> Option<&(u32, Value)> {
        self.products.get(&id)?.heads_bias.as_ref()
    }

    pub(crate) fn turned_base(&self, id: u32) -> Option<f64> {
        self.products.get(&id)?.turned_base
    }

    pub(crate) fn mul(&self, id: u32) -> Option<&MulEpilogue> {
        self.products.get(&id)?.mul.as_ref()
    }

    pub(crate) fn delta(&self, id: u32) -> Option<&(u32, Value)> {
        self.products.get(&id)?.delta.as_ref()
    }

    pub(crate) fn load_rotary(&self, id: u32) -> Option<&Turned> {
        self.attention.get(&id)?.load_rotary.as_ref()
    }

    pub(crate) fn store_rotary(&self, id: u32) -> Option<&Turned> {
        self.attention.get(&id)?.store_rotary.as_ref()
    }

    /// The slice sources node `id` reads in place of its slice inputs ([`chain_slices`]).
    pub(crate) fn sliced_reads(&self, id: u32) -> impl Iterator<Item = Value> + '_ {
        self.chain_slices.values().filter(move |(rs, _)| rs.contains(&id)).map(|(_, read)| read.source)
    }

    /// What the fusions node `id` hosts write beside its own outputs, as the fusion passes
    /// weigh them: a residual Add's sum, an activation's value, a head-split store, the rotated
    /// tensors an attention backward stores.
    pub(crate) fn hosted_writes(&self, id: u32) -> Vec<Value> {
        let at = |node: u32| Value { node, index: 0 };
        let mut vs = vec![];
        if let Some(&(add, _)) = self.residual_add(id) {
            vs.push(at(add));
        }
        if let Some(&(u, _)) = self.activation(id) {
            vs.push(at(u));
        }
        if let Some(&(pm, _)) = self.heads(id) {
            vs.push(at(pm));
        }
        if let Some(rot) = self.store_rotary(id) {
            vs.extend(rot.iter().flatten().map(|r| r.0));
        }
        vs
    }

    pub(crate) fn bf16_heads(&self, id: u32) -> Option<&(usize, usize)> {
        self.attention.get(&id)?.bf16_heads.as_ref()
    }

    pub(crate) fn merged_gradients(&self, id: u32) -> Option<&(Value, Gradients)> {
        self.attention.get(&id)?.merged_gradients.as_ref()
    }

    pub(crate) fn attention_column_sum(&self, id: u32) -> Option<u32> {
        self.attention.get(&id)?.column_sum
    }

    /// The cast that column sum `id` stores, unless another launch has taken it by the time
    /// the lowering reaches the sum (it is then in `skip`).
    pub(crate) fn column_cast(&self, id: u32, skip: &std::collections::HashSet<u32>) -> Option<Value> {
        self.column_casts.get(&id).copied().filter(|c| !skip.contains(&c.node))
    }

    pub(crate) fn output_copy(&self, id: u32) -> Option<&Value> {
        self.attention.get(&id)?.output_copy.as_ref()
    }

    /// The products with an activation epilogue: (MatMul, (Unary node, op)).
    pub(crate) fn activations(&self) -> Vec<(u32, (u32, alpha_ir::Unary))> {
        self.products.iter().filter_map(|(&id, p)| Some((id, p.activation?))).collect()
    }

    /// The head-split products: (MatMul, (Permute, split)).
    pub(crate) fn head_splits(&self) -> Vec<(u32, (u32, gemm::Heads))> {
        self.products.iter().filter_map(|(&id, p)| Some((id, p.heads?))).collect()
    }

    /// The products with a multiply epilogue: (MatMul, what [`ProductFusion::mul`] holds).
    pub(crate) fn muls(&self) -> Vec<(u32, MulEpilogue)> {
        self.products.iter().filter_map(|(&id, p)| Some((id, p.mul?))).collect()
    }

    /// The attention nodes reading bf16 heads: (node, heads tensor's slot).
    pub(crate) fn bf16_attentions(&self) -> Vec<(u32, (usize, usize))> {
        self.attention.iter().filter_map(|(&id, a)| Some((id, a.bf16_heads?))).collect()
    }
}
