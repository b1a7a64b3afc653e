//! Recurrences along time: the plain linear one, the delta-rule memory and the harmonic scan.
//!
//! The last two's backward passes replay their states from checkpoints kept in the scratch
//! region, and leave each window's part of the gradient shared by the windows there for a
//! second launch, right after, to add in window order (see `kernels::replay`).

use std::array::from_fn;

use super::*;
use crate::kernels::replay::{window_sum_arguments, window_sum_kernel};
use crate::kernels::{delta_rule, harmonic_scan, recurrence};

impl Lowerer<'_> {
    /// A Recurrence, DeltaRule, HarmonicScan or either's backward node.
    pub(super) fn lower_recurrence(&mut self, id: u32) -> Result<Vec<Pending>> {
        let cx = At::of(self.plan, id);
        let (node, ins) = (&cx.node, &cx.node.inputs);
        let n = cx.numel();
        let some = Some(id);
        let mut v = vec![];
        self.want_f32(node, id, ins)?;
        // Inputs' and outputs' pointers.
        let p: Vec<A> = ins.iter().map(|&x| self.ptr(x)).collect();
        let o: Vec<A> = (0..node.outputs.len()).map(|k| self.ptr(cx.out(k as u16))).collect();
        let one_block_each = |kernel: usize, blocks: usize, threads: Option<u32>, args: Vec<A>| Pending {
            kernel,
            grid: (blocks as u32, 1, 1),
            block: (threads.unwrap_or(256), 1, 1),
            args,
            node: some,
        };
        match &node.op {
            Op::Recurrence { reverse } => {
                let s = cx.ishape(0);
                let (b, t) = (s[0], s[1]);
                let c = n / (b * t).max(1);
                let kernel = self.kernel(recurrence::kernel(b, t, c, *reverse))?;
                let (blocks, threads) = grid_blocks(b * c);
                v.push(Pending {
                    kernel,
                    grid: (blocks, 1, 1),
                    block: (threads, 1, 1),
                    args: recurrence::arguments([self.ptr(cx.out(0)), self.ptr(ins[0]), self.ptr(ins[1])]),
                    node: some,
                });
            }
            Op::DeltaRule | Op::DeltaRuleBackward => {
                let d = delta_rule::Dims::of(&cx.ishape(0), &cx.ishape(2));
                d.check().map_err(|e| node_error(node, id, e))?;
                if matches!(node.op, Op::DeltaRule) {
                    let kernel = self.kernel(delta_rule::forward_kernel(&d))?;
                    let (blocks, _) = grid_blocks(d.b * d.v);
                    let args = delta_rule::forward_arguments([o[0], p[0], p[1], p[2], p[3], p[4]]);
                    v.push(one_block_each(kernel, blocks as usize, None, args));
                } else {
                    let scan = Scan { kernel: delta_rule::backward_kernel(&d)?, windows: d.b, blocks: d.b };
                    let args = |scratch| delta_rule::backward_arguments(from_fn(|i| o[i]), scratch, from_fn(|i| p[i]));
                    v.extend(self.scan_backward(id, scan, d.scratch_floats()?, args, o[4])?);
                }
            }
            Op::HarmonicScan | Op::HarmonicScanBackward => {
                let d = harmonic_scan::Dims::of(&cx.ishape(0), &cx.ishape(2));
                d.check().map_err(|e| node_error(node, id, e))?;
                if matches!(node.op, Op::HarmonicScan) {
                    let per_sm = if self.config.scan_one_wave { harmonic_scan::FORWARD_BLOCKS_PER_SM } else { 1 };
                    let kernel = self.kernel(harmonic_scan::forward_kernel(&d, per_sm))?;
                    let (blocks, _) = grid_blocks(d.b * d.h * d.d);
                    let args = harmonic_scan::forward_arguments([o[0], p[0], p[1], p[2], p[3]]);
                    v.push(one_block_each(kernel, blocks as usize, None, args));
                } else {
                    let per_sm = if self.config.scan_two_blocks { harmonic_scan::BACKWARD_BLOCKS_PER_SM } else { 1 };
                    let kernel = harmonic_scan::backward_kernel(&d, per_sm)?;
                    let scan = Scan { kernel, windows: d.b, blocks: d.b * d.h };
                    let args =
                        |scratch| harmonic_scan::backward_arguments(from_fn(|i| o[i]), scratch, from_fn(|i| p[i]));
                    v.extend(self.scan_backward(id, scan, d.scratch_floats()?, args, o[3])?);
                }
            }
            _ => return Err(node_error(node, id, "not a recurrence")),
        }
        Ok(v)
    }

    /// A delta rule's or harmonic scan's backward: its launch, one block a window (or a
    /// window's head), with `args` made from its scratch pointers (the parts of the shared
    /// gradient, the checkpoints, the replayed chunk; `scratch` as the kernel's
    /// `scratch_floats`), then the launch adding the windows' parts into `shared` in window order.
    fn scan_backward(
        &mut self,
        id: u32,
        scan: Scan,
        (chunk_at, parts_at, total): (usize, usize, usize),
        args: impl FnOnce([A; 3]) -> Vec<A>,
        shared: A,
    ) -> Result<[Pending; 2]> {
        self.need_scratch(total * 4);
        let threads = scan.kernel.block_threads().unwrap_or(256);
        let kernel = self.kernel(scan.kernel)?;
        let parts = A::Scratch(parts_at * 4);
        let backward = Pending {
            kernel,
            grid: (scan.blocks as u32, 1, 1),
            block: (threads, 1, 1),
            args: args([parts, A::Scratch(0), A::Scratch(chunk_at * 4)]),
            node: Some(id),
        };
        let n = (total - parts_at) / scan.windows;
        let kernel = self.kernel(window_sum_kernel(n, scan.windows))?;
        let (blocks, threads) = grid_blocks(n);
        let sum = Pending {
            kernel,
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            args: window_sum_arguments([shared, parts]),
            node: Some(id),
        };
        Ok([backward, sum])
    }
}

/// A backward kernel and its grid: `blocks` blocks over `windows` windows.
struct Scan {
    kernel: crate::ptx::Kernel,
    windows: usize,
    blocks: usize,
}
