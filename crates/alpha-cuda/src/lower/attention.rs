//! Attention, its backward and rotaries: the fp32, `mma.sync` or `wgmma` kernels, with the
//! rotaries, bf16 heads, copies and merged gradients the fusion plan gives them.

use super::*;
use crate::kernels::attention;

/// Where an attention backward's values lie in the scratch region, each as (offset, end):
/// delta (f32 a query row) from 0, dO as bf16 after it.
pub(super) struct AttentionScratch {
    do16: (usize, usize),
}

pub(super) fn attention_scratch(dims: &Dims) -> AttentionScratch {
    let rows = dims.scratch_floats();
    let do16 = (rows * 4).div_ceil(ALIGN) * ALIGN;
    AttentionScratch { do16: (do16, do16 + rows * dims.d * 2) }
}

impl Lowerer<'_> {
    /// A Rotary launched alone (one the plan did not fuse into attention).
    pub(super) fn lower_rotary(&mut self, id: u32) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (node, ins) = (&cx.node, &cx.node.inputs);
        let n = cx.numel();
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::Rotary { base, inverse } => {
                self.want_f32(node, id, ins)?;
                let s = cx.ishape(0);
                if s.len() != 4 || !s[3].is_multiple_of(2) {
                    return Err(node_error(node, id, format!("rotary takes [B, H, T, D] with D even, got {s:?}")));
                }
                let (t, d) = (s[2], s[3]);
                let table = self.rotary_table(t, d, *base);
                let kernel = self.kernel(rotary::kernel(n / d, t, d, *inverse))?;
                let (blocks, threads) = grid_blocks(n / 2);
                v.push(Pending {
                    kernel,
                    grid: (blocks, 1, 1),
                    block: (threads, 1, 1),
                    args: rotary::arguments([self.ptr(cx.out(0)), self.ptr(ins[0]), A::Ptr(table)]),
                    node: some,
                });
            }
            _ => return Err(node_error(node, id, "not a rotary")),
        }
        Ok(v)
    }

    /// An Attention or AttentionBackward node.
    pub(super) fn lower_attention(&mut self, id: u32) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (node, ins) = (&cx.node, &cx.node.inputs);
        let some = Some(id);
        let mut v = vec![];
        match &node.op {
            Op::Attention { scale, softcap, bf16 } | Op::AttentionBackward { scale, softcap, bf16 } => {
                self.want_f32(node, id, ins)?;
                let (q, kv) = (cx.ishape(0), cx.ishape(1));
                let dims = Dims {
                    b: q[0],
                    h: q[1],
                    g: kv[1],
                    t: q[2],
                    d: q[3],
                    scale: *scale as f32,
                    softcap: softcap.map(|c| c as f32),
                };
                dims.check().map_err(|e| node_error(node, id, e))?;
                // bf16 operands at head dimension 64: the tensor-core kernels (same parameters
                // and grids). Otherwise the fp32 kernels, which round nothing: a bf16 attention
                // of another head size runs more precisely than it asks.
                use crate::kernels::attention::mma;
                let tc = *bf16 && mma::applies(&dims);
                let block = if tc { mma::block() } else { (attention::ROWS, 1, 1) };
                // Forward rotary fused: q (k) read before its Rotary and turned on load.
                let load = self.fusion.load_rotary(id).copied().unwrap_or_default();
                let src = |k: usize| load[k].map_or(ins[k], |x| x.0);
                // q, k and v as bf16 (turned by the projection's epilogue) where `turned_heads`
                // chose it: at half their f32 offsets within the heads tensor.
                let bf16_at = self.fusion.bf16_heads(id).map(|t| t.0);
                if bf16_at.is_some() && !tc {
                    return Err(node_error(node, id, "bf16 q, k, v need the tensor-core kernels"));
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
                    let copy = self.fusion.output_copy(id).copied();
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
                    let tensors = [self.ptr(cx.out(0)), self.ptr(cx.out(1)), qa, ka, va];
                    let args = attention::forward_arguments(tensors, tabs, copy.map(|c| self.ptr(c)));
                    v.push(Pending { kernel, grid: dims.grid_q(), block, args, node: some });
                } else {
                    self.need_scratch(dims.scratch_floats() * 4);
                    // Inverse rotary fused: dq (dk) stored turned back, into the Rotary's slot.
                    let rot = self.fusion.store_rotary(id).copied().unwrap_or_default();
                    let dst = |k: usize| rot[k].map_or(cx.out(k as u16), |x| x.0);
                    let (ov, lse, dov) = (ins[3], ins[4], ins[5]);
                    // Both passes in one launch (after delta alone) where their grids agree and
                    // no output lies on an input: the passes then run side by side.
                    let apart = joint_backward_apart(self.plan, &self.fusion, id, node);
                    let fused_delta = self.delta_at.get(&id).copied();
                    if fused_delta.is_some() && !(tc && bf16_at.is_some() && dims.g == dims.h && apart) {
                        return Err(node_error(node, id, "its product stored dO and delta, but it runs in two passes"));
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
                                let args =
                                    attention::delta_arguments([A::Scratch(0), self.ptr(ov), self.ptr(dov)], do16);
                                v.push(Pending { kernel: kd, grid: dims.grid_q(), block, args, node: some });
                                (A::Scratch(0), do16)
                            }
                        };
                        let inverse = [rot[0].is_some(), rot[1].is_some()];
                        let merged = self.fusion.merged_gradients(id).copied();
                        let grads = merged.map_or(mma::Gradients::Apart, |m| m.1);
                        let wgmma =
                            self.config.wgmma_attention_backward && crate::kernels::attention::wgmma::applies(&dims);
                        let kb = self.kernel(match (bf16_at, grads) {
                            (Some(_), m) if wgmma => {
                                crate::kernels::attention::wgmma::backward_kernel(&dims, inverse, m)
                            }
                            (Some(_), mma::Gradients::MergedBf16) => mma::backward_kernel_bf16_merged(&dims, inverse),
                            (Some(_), mma::Gradients::MergedBf16Summed) => {
                                mma::backward_kernel_bf16_merged_summed(&dims, inverse)
                            }
                            (Some(_), mma::Gradients::MergedF32) => {
                                mma::backward_kernel_bf16_merged_f32(&dims, inverse)
                            }
                            (Some(_), mma::Gradients::Apart) => mma::backward_kernel_bf16(&dims, inverse),
                            _ => mma::backward_kernel_rotating(&dims, inverse, turned),
                        })?;
                        let [dq, dk, dv] = match merged {
                            Some((to, _)) => [self.ptr(to); 3],
                            None => [dst(0), dst(1), cx.out(2)].map(|a| self.ptr(a)),
                        };
                        let inverse_tables =
                            rot.iter().flatten().map(|r| A::Ptr(self.rotary_table(dims.t, dims.d, r.1))).collect();
                        let [o, l, d_o] = [ov, lse, dov].map(|a| self.ptr(a));
                        let tensors = [dq, dk, dv, delta, qa, ka, va, o, l, d_o];
                        let mut args = attention::backward_arguments(tensors, do16, inverse_tables, tabs);
                        if grads == mma::Gradients::MergedBf16Summed {
                            // The column sums' partials, `[B·T/16][3·H·64]`, for the sum
                            // launched next.
                            let Some(sum) = self.fusion.attention_column_sum(id) else {
                                return Err(node_error(node, id, "its column sums have no sum to finish them"));
                            };
                            let chunks = dims.b * dims.t / 16;
                            let at = self.scratch_past_all(3 * dims.h * dims.d * chunks * 4);
                            args.push(A::Scratch(at));
                            self.attention_partials.insert(sum, (A::Scratch(at), chunks));
                        }
                        v.push(Pending { kernel: kb, grid: dims.grid_q(), block, args, node: some });
                        return Ok(v);
                    }
                    if self.fusion.merged_gradients(id).is_some() {
                        return Err(node_error(
                            node,
                            id,
                            "its gradients were to be stored merged, but it runs in two passes",
                        ));
                    }
                    let k1 = self.kernel(match (tc, bf16_at) {
                        (true, Some(_)) => mma::backward_dq_kernel_bf16(&dims, rot[0].is_some()),
                        (true, None) => mma::backward_dq_kernel_rotating(&dims, rot[0].is_some(), turned),
                        _ => attention::backward_dq_kernel_rotating(&dims, rot[0].is_some(), turned),
                    })?;
                    let [o, l, d_o] = [ov, lse, dov].map(|a| self.ptr(a));
                    let tensors = [self.ptr(dst(0)), A::Scratch(0), qa, ka, va, o, l, d_o];
                    let inverse_table = rot[0].map(|(_, base)| A::Ptr(self.rotary_table(dims.t, dims.d, base)));
                    let args = attention::dq_arguments(tensors, inverse_table, tabs.clone());
                    v.push(Pending { kernel: k1, grid: dims.grid_q(), block, args, node: some });
                    let k2 = self.kernel(match (tc, bf16_at) {
                        (true, Some(_)) => mma::backward_dkv_kernel_bf16(&dims, rot[1].is_some()),
                        (true, None) => mma::backward_dkv_kernel_rotating(&dims, rot[1].is_some(), turned),
                        _ => attention::backward_dkv_kernel_rotating(&dims, rot[1].is_some(), turned),
                    })?;
                    let tensors = [
                        self.ptr(dst(1)),
                        self.ptr(cx.out(2)),
                        qa,
                        ka,
                        va,
                        self.ptr(lse),
                        A::Scratch(0),
                        self.ptr(dov),
                    ];
                    let inverse_table = rot[1].map(|(_, base)| A::Ptr(self.rotary_table(dims.t, dims.d, base)));
                    let args = attention::dkv_arguments(tensors, inverse_table, tabs);
                    v.push(Pending { kernel: k2, grid: dims.grid_kv(), block, args, node: some });
                }
            }
            _ => return Err(node_error(node, id, "not an attention")),
        }
        Ok(v)
    }
}
