//! The machinery of the reverse-time kernels of recurrences whose state is too large to keep at
//! every position (the delta rule's memory, [`super::delta_rule`]; the harmonic scan's bank,
//! [`super::harmonic_scan`]): checkpoints and replay, and the ordered sums across a block.
//!
//! Why: the backward needs the state before and after every position, last position first.
//! Stepping the recurrence backwards divides by its decay or its write's contraction (unstable
//! where those are small), and storing every state costs the state's size at every position.
//! So, as the CPU reference does (`alpha_cpu::kernels::replay`), one forward pass keeps the
//! state at the start of every chunk of positions (⌈√T⌉ on the CPU, [`REPLAY_CHUNK`] here), and
//! each chunk, last first, is stepped again from its checkpoint with its states kept: the same
//! operations in the same order, so exactly the forward's states, whatever the chunk's length,
//! for a second forward pass.
//!
//! The gradients sum across the state's independent pieces (the delta rule's dq sums over the
//! memory's rows; the harmonic scan's dr over a head's coordinates). The CPU adds those terms
//! one after another, row 0 first; to give its bits, the GPU must add them in that order too.
//! A tree would be faster and still repeat bit for bit, but would differ from the reference in
//! the last place; the sums here are exact to it, and the kernels that use them are correct
//! first (a faster order can be measured against them).
//!
//! How: a backward kernel runs one block per independent window (a batch row, or a batch
//! row's head). Its *row* threads each own one independent piece of the state in registers (a
//! row of the memory; one coordinate of a head's harmonic states) and step it. At each position
//! a row writes its terms of every cross-row sum into shared memory; *task* threads (warps of
//! their own after the rows, one thread a sum) add the rows' terms in row order from +0. The
//! rows run one group of positions ahead of the tasks (two halves of the buffer, one barrier a
//! group), and a task keeps one sum a position of its group so that its dependent adds overlap.
//! Every pass that steps a state forward (the forward kernels', the record pass, the replay)
//! issues the loads of a few positions before stepping through them ([`positions_ahead`]): a
//! step has nothing to do but wait for its inputs, so this pays the memory's latency once for
//! several positions. Checkpoints and the replayed chunk's states live in the lowering's
//! scratch region, each thread's at addresses laid out so a warp's loads and stores coalesce. A
//! gradient summed over windows (the delta rule's dm0, the harmonic scan's dγ) is written by
//! each block as its window's part, and [`window_sum_kernel`] adds the parts window by window
//! in order, as the CPU's `sum_in_order` does.

use anyhow::{bail, Result};

use crate::ptx::{
    addr, Kernel, Opnd, ParamTy, Reg, RegKind, MAX_SHARED_PER_BLOCK, MAX_THREADS_PER_BLOCK, SHARED_PER_SM,
};

/// The most positions a replayed chunk has on the GPU.
///
/// Why: the replayed chunk's states are written once and read once, every position's, 8 floats
/// a coordinate in Diakosmos (5.6 GB each way at 64 windows); at the CPU's ⌈√T⌉ (46 of 2,048)
/// the resident blocks' chunks took 74 MB, more than the H200's 50 MB of L2, so that traffic
/// went to memory. At 16 they take 26 MB and stay in L2, for 128 checkpoints a window
/// instead of 45, each written once and read once. Any length gives the same states, so the
/// same bits as the CPU's replay.
pub const REPLAY_CHUNK: usize = 16;

/// Positions a chunk: [`REPLAY_CHUNK`], or the whole window where it is shorter.
pub fn chunk_len(t: usize) -> usize {
    t.clamp(1, REPLAY_CHUNK)
}

/// Chunks of a window of `t` positions.
pub fn chunk_count(t: usize) -> usize {
    t.div_ceil(chunk_len(t))
}

/// The most positions a group (how far the rows run ahead of the tasks) may have.
const MAX_GROUP: usize = 4;

/// One backward block's shape: `windows` blocks, each of `rows` threads owning `state` floats of
/// state and writing `slots` terms a position, and `tasks` threads each making one sum a
/// position; positions handed from rows to tasks `group` at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub windows: usize,
    pub t: usize,
    pub rows: usize,
    pub state: usize,
    pub slots: usize,
    pub tasks: usize,
    pub group: usize,
}

impl Layout {
    /// The layout with the largest group (up to [`MAX_GROUP`]) whose buffer fits a block's
    /// shared memory; an error where the block exceeds the launch limits even at one position.
    pub fn new(windows: usize, t: usize, rows: usize, state: usize, slots: usize, tasks: usize) -> Result<Layout> {
        let one = Layout { windows, t, rows, state, slots, tasks, group: 1 };
        if one.threads() > MAX_THREADS_PER_BLOCK as usize {
            bail!(
                "{rows} rows and {tasks} sums need {} threads a block, more than {MAX_THREADS_PER_BLOCK}",
                one.threads()
            );
        }
        if t == 0 || windows == 0 {
            bail!("an empty window");
        }
        let mut group = MAX_GROUP;
        while group > 1 && (Layout { group, ..one }).shared_bytes() > MAX_SHARED_PER_BLOCK as usize {
            group /= 2;
        }
        let l = Layout { group, ..one };
        if l.shared_bytes() > MAX_SHARED_PER_BLOCK as usize {
            bail!(
                "{} bytes of shared memory for one position's terms, more than {MAX_SHARED_PER_BLOCK}",
                l.shared_bytes()
            );
        }
        Ok(l)
    }

    /// This layout with its group cut (4, 3, 2, then 1 position) until `blocks` blocks' buffers
    /// fit one SM's shared memory together.
    pub fn for_blocks_per_sm(self, blocks: usize) -> Layout {
        let fits = |l: &Layout| blocks * (l.shared_bytes() + 1024) <= SHARED_PER_SM as usize;
        let mut l = self;
        while l.group > 1 && !fits(&l) {
            l.group -= 1;
        }
        l
    }

    /// Row threads, a whole number of warps.
    pub fn rows_pad(&self) -> usize {
        self.rows.div_ceil(32) * 32
    }

    /// Threads a block: the rows', then the tasks' warps.
    pub fn threads(&self) -> usize {
        self.rows_pad() + self.tasks.div_ceil(32) * 32
    }

    /// Floats between one slot's terms and the next's: odd, so that tasks reading their slots
    /// at the same row fall in distinct banks.
    pub fn stride(&self) -> usize {
        self.rows_pad() + 1
    }

    /// The buffer: two halves of `group` positions of `slots` slots.
    pub fn shared_bytes(&self) -> usize {
        2 * self.group * self.slots * self.stride() * 4
    }

    /// Groups in a window.
    pub fn groups(&self) -> usize {
        self.t.div_ceil(self.group)
    }

    /// Floats of every window's checkpoints.
    pub fn checkpoint_floats(&self) -> usize {
        self.windows * chunk_count(self.t) * self.state * self.rows
    }

    /// Floats of every window's replayed chunk.
    pub fn chunk_floats(&self) -> usize {
        self.windows * chunk_len(self.t) * self.state * self.rows
    }

    /// The backward's scratch with `parts` floats of the windows' parts of a shared gradient:
    /// checkpoints, the replayed chunk, then the parts, each 256-byte aligned; (offset of the
    /// chunk, offset of the parts, total), in floats.
    pub fn scratch_floats(&self, parts: usize) -> (usize, usize, usize) {
        let chunk_at = self.checkpoint_floats().div_ceil(64) * 64;
        let parts_at = (chunk_at + self.chunk_floats()).div_ceil(64) * 64;
        (chunk_at, parts_at, parts_at + parts)
    }
}

/// Loads `n` consecutive floats from `base + (index·n)·4`.
pub(crate) fn load_vector(k: &mut Kernel, base: Reg, index: Reg, n: usize) -> Vec<Reg> {
    let at = k.addr_of(base, index, (n * 4) as u32);
    (0..n)
        .map(|j| {
            let x = k.reg(RegKind::F32);
            k.op("ld.global.f32", [x.into(), addr(at, (j * 4) as i64)]);
            x
        })
        .collect()
}

/// [`load_vector`] where `ok` holds, +0 where it does not (nothing is read there).
pub(crate) fn load_vector_if(k: &mut Kernel, ok: Reg, base: Reg, index: Reg, n: usize) -> Vec<Reg> {
    let at = k.addr_of(base, index, (n * 4) as u32);
    (0..n)
        .map(|j| {
            let x = k.imm_f32(0.0);
            k.op_if(ok, false, "ld.global.f32", [x.into(), addr(at, (j * 4) as i64)]);
            x
        })
        .collect()
}

/// The float at `base + index·4` where `ok` holds, +0 where it does not.
pub(crate) fn load_one_if(k: &mut Kernel, ok: Reg, base: Reg, index: Reg) -> Reg {
    load_vector_if(k, ok, base, index, 1)[0]
}

/// Walks positions `first..end` `ahead` at a time: first `load(k, s, ok)` for each of the
/// `ahead` positions (`ok`: s < end; it issues the position's loads, predicated on `ok`), then
/// `step(k, s, loaded)` for each in order that is before `end`. Why: a thread's step waits on its
/// position's loads, and a recurrence has nothing else to do meanwhile; issuing several
/// positions' loads together pays the memory's latency once for all of them, and changes no
/// arithmetic.
pub(crate) fn positions_ahead<L>(
    k: &mut Kernel,
    (first, end): (Reg, Opnd),
    ahead: usize,
    mut load: impl FnMut(&mut Kernel, Reg, Reg) -> L,
    mut step: impl FnMut(&mut Kernel, Reg, L),
) {
    let from = k.un("mov.u32", RegKind::B32, first);
    k.strided_loop(from, end.clone(), ahead as u32, ("positions", "positions_end"), |k, at| {
        let loaded: Vec<(Reg, Reg, L)> = (0..ahead)
            .map(|j| {
                let s = k.bin("add.u32", RegKind::B32, at, j as u32);
                let ok = k.setp("lt.u32", s, end.clone());
                let l = load(k, s, ok);
                (s, ok, l)
            })
            .collect();
        let done = k.label("ahead_done");
        for (s, ok, l) in loaded {
            k.bra_if(ok, true, &done);
            step(k, s, l);
        }
        k.place(&done);
    });
}

/// A backward block's threads: the window (block), and the role of this thread.
pub(crate) struct Roles {
    pub window: Reg,
    /// The row (or, past the rows, garbage that no row-only code reads).
    pub row: Reg,
    pub is_row: Reg,
    /// The task (likewise).
    pub task: Reg,
    pub is_task: Reg,
}

pub(crate) fn roles(k: &mut Kernel, lay: &Layout) -> Roles {
    let row = k.sreg("%tid.x");
    let window = k.sreg("%ctaid.x");
    let is_row = k.setp("lt.u32", row, lay.rows as u32);
    let task = k.bin("sub.u32", RegKind::B32, row, lay.rows_pad() as u32);
    let past = k.setp("ge.u32", row, lay.rows_pad() as u32);
    let within = k.setp("lt.u32", task, lay.tasks as u32);
    let is_task = k.bin("and.pred", RegKind::Pred, past, within);
    Roles { window, row, is_row, task, is_task }
}

/// The address of this thread's element 0 in a per-window array of `per_window` floats laid
/// out `[window][…][state element][row]`: `base + (window·per_window + row)·4`.
pub(crate) fn thread_base(k: &mut Kernel, base: Reg, r: &Roles, per_window: usize) -> Reg {
    let w = k.reg(RegKind::B64);
    k.op("mul.wide.u32", [w.into(), r.window.into(), ((per_window * 4) as u32).into()]);
    let at = k.addr_of(base, r.row, 4);
    k.bin("add.s64", RegKind::B64, at, w)
}

/// Bytes from one entry (a checkpoint or a replayed position) of a thread's array to the next.
fn entry_bytes(lay: &Layout) -> i64 {
    (lay.state * lay.rows * 4) as i64
}

/// Entry `index`'s address in this thread's array at `base` (see [`thread_base`]).
fn entry_at(k: &mut Kernel, lay: &Layout, base: Reg, index: Reg) -> Reg {
    let w = k.reg(RegKind::B64);
    k.op("mul.wide.u32", [w.into(), index.into(), (entry_bytes(lay) as u32).into()]);
    k.bin("add.s64", RegKind::B64, base, w)
}

/// State element `e`'s offset within an entry: the rows' values of one element lie together.
fn element_offset(lay: &Layout, e: usize) -> i64 {
    (e * lay.rows * 4) as i64
}

/// Stores (`store`) or loads the `state` registers at entry `index` (a checkpoint or a
/// replayed position) of this thread's array at `base` (see [`thread_base`]).
fn move_state(k: &mut Kernel, lay: &Layout, base: Reg, index: Reg, state: &[Reg], store: bool) {
    let at = entry_at(k, lay, base, index);
    for (e, &x) in state.iter().enumerate() {
        let off = element_offset(lay, e);
        if store {
            k.op("st.global.f32", [addr(at, off), x.into()]);
        } else {
            k.op("ld.global.f32", [x.into(), addr(at, off)]);
        }
    }
}

/// Loads the state stored before the replayed chunk's position `j`.
pub(crate) fn load_replayed(k: &mut Kernel, lay: &Layout, states: Reg, j: Reg, into: &[Reg]) {
    move_state(k, lay, states, j, into, false);
}

/// The record pass: steps `state` through the window (`load(k, s, ok)` issues position s's
/// loads, `step(k, loaded)` takes the state past it; see [`positions_ahead`]), storing it at
/// the start of every chunk into this thread's checkpoints at `checkpoints`.
pub(crate) fn record<L>(
    k: &mut Kernel,
    lay: &Layout,
    checkpoints: Reg,
    state: &[Reg],
    ahead: usize,
    load: impl FnMut(&mut Kernel, Reg, Reg) -> L,
    mut step: impl FnMut(&mut Kernel, L),
) {
    let chunk = chunk_len(lay.t) as u32;
    let zero = k.imm_u32(0);
    positions_ahead(k, (zero, (lay.t as u32).into()), ahead, load, |k, s, loaded| {
        let within = k.bin("rem.u32", RegKind::B32, s, chunk);
        let starts = k.setp("eq.u32", within, 0u32);
        let skip = k.label("no_checkpoint");
        k.bra_if(starts, true, &skip);
        let c = k.bin("div.u32", RegKind::B32, s, chunk);
        move_state(k, lay, checkpoints, c, state, true);
        k.place(&skip);
        step(k, loaded);
    });
}

/// At position `s` of the reverse walk: where s ends its chunk (the walk enters the chunk
/// there), steps the chunk again from its checkpoint up to and including s (`load` and `step`
/// as in [`record`]), storing the state before each position into `states`, so that `state`
/// ends as the state after s. Returns j, s's place in its chunk (the state before s is entry j
/// of `states`), and whether s ends its chunk (the chunk was replayed here).
#[allow(clippy::too_many_arguments)]
pub(crate) fn replay_at_chunk_end<L>(
    k: &mut Kernel,
    lay: &Layout,
    s: Reg,
    (checkpoints, states): (Reg, Reg),
    state: &[Reg],
    ahead: usize,
    load: impl FnMut(&mut Kernel, Reg, Reg) -> L,
    mut step: impl FnMut(&mut Kernel, L),
) -> (Reg, Reg) {
    let chunk = chunk_len(lay.t) as u32;
    let c = k.bin("div.u32", RegKind::B32, s, chunk);
    let start = k.bin("mul.lo.u32", RegKind::B32, c, chunk);
    let j = k.bin("sub.u32", RegKind::B32, s, start);
    let next = k.bin("add.u32", RegKind::B32, s, 1u32);
    let within = k.bin("rem.u32", RegKind::B32, next, chunk);
    let boundary = k.setp("eq.u32", within, 0u32);
    let last = k.setp("eq.u32", next, lay.t as u32);
    let ends = k.bin("or.pred", RegKind::Pred, boundary, last);
    let skip = k.label("no_replay");
    k.bra_if(ends, true, &skip);
    move_state(k, lay, checkpoints, c, state, false);
    positions_ahead(k, (start, next.into()), ahead, load, |k, pos, loaded| {
        let jj = k.bin("sub.u32", RegKind::B32, pos, start);
        move_state(k, lay, states, jj, state, true);
        step(k, loaded);
    });
    k.place(&skip);
    (j, ends)
}

/// The state before position s (entry j of the replayed chunk at `states`; `ends`: s ends its
/// chunk), read one position ahead: `ahead` holds entry j where the walk came from s + 1 in
/// the same chunk, and is loaded here where s ends its chunk (just replayed); then entry j − 1,
/// the next position's, is loaded into `ahead` while s's step runs. Why: read as each
/// position starts, the state's load waited on memory at every position.
pub(crate) fn load_replayed_ahead(
    k: &mut Kernel,
    lay: &Layout,
    states: Reg,
    (j, ends): (Reg, Reg),
    ahead: &[Reg],
) -> Vec<Reg> {
    let at = entry_at(k, lay, states, j);
    for (e, &x) in ahead.iter().enumerate() {
        k.op_if(ends, false, "ld.global.f32", [x.into(), addr(at, element_offset(lay, e))]);
    }
    let prev: Vec<Reg> = ahead.iter().map(|&x| k.un("mov.f32", RegKind::F32, x)).collect();
    let more = k.setp("ne.u32", j, 0u32);
    let before = k.bin("sub.s64", RegKind::B64, at, entry_bytes(lay));
    for (e, &x) in ahead.iter().enumerate() {
        k.op_if(more, false, "ld.global.f32", [x.into(), addr(before, element_offset(lay, e))]);
    }
    prev
}

/// The reverse walk, one group of positions a barrier. Rows first issue the loads of the
/// group's positions (`load(k, s, ok)`, predicated on `ok`: the window has s), then, for s from
/// T − 1 down, write their terms of position s (`rows(k, s, terms, loaded)`) at `terms`, the
/// shared address of slot 0 of their row (slot n at `terms + n·stride·4`); a group later, tasks
/// (`tasks(k, half, g)`) read group g's terms from `half`, the shared address of its half of
/// the buffer (position p of the group, slot n, row i at `half + ((p·slots + n)·stride + i)·4`).
pub(crate) fn walk<L>(
    k: &mut Kernel,
    lay: &Layout,
    r: &Roles,
    buf: &str,
    (mut load, mut rows): (impl FnMut(&mut Kernel, Reg, Reg) -> L, impl FnMut(&mut Kernel, Reg, Reg, L)),
    mut tasks: impl FnMut(&mut Kernel, Reg, Reg),
) {
    let (groups, group, t) = (lay.groups() as u32, lay.group as u32, lay.t as u32);
    let position_bytes = (lay.slots * lay.stride() * 4) as u32;
    let half_bytes = group * position_bytes;
    let base = k.un("mov.u32", RegKind::B32, Opnd::S(buf.to_string()));
    let row_at = k.tri("mad.lo.u32", RegKind::B32, r.row, 4u32, base);
    let zero = k.imm_u32(0);
    // One tick more than there are groups: the tasks finish the last group after the rows.
    k.strided_loop(zero, groups + 1, 1, ("tick", "tick_end"), |k, tick| {
        let rows_done = k.label("rows_done");
        k.bra_if(r.is_row, true, &rows_done);
        let past = k.setp("ge.u32", tick, groups);
        k.bra_if(past, false, &rows_done);
        let half = k.bin("and.b32", RegKind::B32, tick, 1u32);
        let at = k.tri("mad.lo.u32", RegKind::B32, half, half_bytes, row_at);
        let loaded: Vec<(Reg, Reg, L)> = (0..lay.group)
            .map(|p| {
                let q = k.tri("mad.lo.u32", RegKind::B32, tick, group, p as u32);
                let ok = k.setp("lt.u32", q, t);
                let s = k.bin("sub.u32", RegKind::B32, t - 1, q);
                let l = load(k, s, ok);
                (s, ok, l)
            })
            .collect();
        for (p, (s, ok, l)) in loaded.into_iter().enumerate() {
            k.bra_if(ok, true, &rows_done);
            let terms = k.bin("add.u32", RegKind::B32, at, p as u32 * position_bytes);
            rows(k, s, terms, l);
        }
        k.place(&rows_done);
        let tasks_done = k.label("tasks_done");
        k.bra_if(r.is_task, true, &tasks_done);
        let first_tick = k.setp("eq.u32", tick, 0u32);
        k.bra_if(first_tick, false, &tasks_done);
        let g = k.bin("sub.u32", RegKind::B32, tick, 1u32);
        let gh = k.bin("and.b32", RegKind::B32, g, 1u32);
        let half = k.tri("mad.lo.u32", RegKind::B32, gh, half_bytes, base);
        tasks(k, half, g);
        k.place(&tasks_done);
        k.barrier();
    });
}

/// Rows whose terms a task loads together before adding them ([`ordered_sums`]), for a plain
/// sum; half as many where each row has a minus term too. Why: a task's adds over the rows
/// are one dependent chain a position; loading one row at a time waited out the shared
/// memory's latency at every row (on the H200 the task warp, not the rows, set the harmonic
/// scan backward's pace). Loading several rows first pays it once for all of them; the adds
/// stay in row order, so the sums are the same bits.
pub const SUM_ROWS_AHEAD: usize = 8;

/// The task's sums over the rows, one a position of the group: acc_p = Σ_i plus_p,i in row
/// order from +0, or, with `minus` (the bytes from the plus slot to the minus slot),
/// acc_p = (acc_p + plus_p,i) − minus_p,i row after row. `at` is the plus slot's shared
/// address in position 0 of the half. The terms of [`SUM_ROWS_AHEAD`] rows are loaded before
/// any of them is added.
pub(crate) fn ordered_sums(k: &mut Kernel, lay: &Layout, at: Reg, minus: Option<u32>) -> Vec<Reg> {
    let position_bytes = (lay.slots * lay.stride() * 4) as i64;
    let acc: Vec<Reg> = (0..lay.group).map(|_| k.imm_f32(0.0)).collect();
    let ahead = if minus.is_some() { SUM_ROWS_AHEAD / 2 } else { SUM_ROWS_AHEAD };
    // Rows `first..first + count` of the terms at `a` (row `first`'s address): loads, then adds.
    let rows = |k: &mut Kernel, a: Reg, count: usize| {
        let load = |k: &mut Kernel, off: i64| {
            let x = k.reg(RegKind::F32);
            k.op("ld.shared.f32", [x.into(), addr(a, off)]);
            x
        };
        let terms: Vec<Vec<(Reg, Option<Reg>)>> = (0..count)
            .map(|u| {
                (0..lay.group)
                    .map(|p| {
                        let off = u as i64 * 4 + p as i64 * position_bytes;
                        (load(k, off), minus.map(|m| load(k, off + m as i64)))
                    })
                    .collect()
            })
            .collect();
        for row in terms {
            for (p, (plus, less)) in row.into_iter().enumerate() {
                k.op("add.rn.f32", [acc[p].into(), acc[p].into(), plus.into()]);
                if let Some(y) = less {
                    k.op("sub.rn.f32", [acc[p].into(), acc[p].into(), y.into()]);
                }
            }
        }
    };
    let whole = lay.rows / ahead * ahead;
    if whole > 0 {
        let zero = k.imm_u32(0);
        k.strided_loop(zero, whole as u32, ahead as u32, ("sum", "sum_end"), |k, i| {
            let a = k.tri("mad.lo.u32", RegKind::B32, i, 4u32, at);
            rows(k, a, ahead);
        });
    }
    if whole < lay.rows {
        let a = k.bin("add.u32", RegKind::B32, at, (whole * 4) as u32);
        rows(k, a, lay.rows - whole);
    }
    acc
}

/// Position p of group g, and whether the window has it: s = T − 1 − (g·group + p).
pub(crate) fn group_position(k: &mut Kernel, lay: &Layout, g: Reg, p: usize) -> (Reg, Reg) {
    let q = k.tri("mad.lo.u32", RegKind::B32, g, lay.group as u32, p as u32);
    let valid = k.setp("lt.u32", q, lay.t as u32);
    let s = k.bin("sub.u32", RegKind::B32, (lay.t - 1) as u32, q);
    (valid, s)
}

/// Params (out, parts): out[e] = Σ_w parts[w·n + e] over `windows` windows in order from +0,
/// the CPU's `sum_in_order`. Grid-stride over n.
pub fn window_sum_kernel(n: usize, windows: usize) -> Kernel {
    let mut k = Kernel::new("scan_window_sum").with_block(256, 1, 1);
    let out = k.param_reg("out", ParamTy::U64);
    let parts = k.param_reg("parts", ParamTy::U64);
    let count = k.imm_u32(n as u32);
    let (e, stride, top, end) = crate::kernels::pointwise::grid_stride_begin_with(&mut k, count, Some(256));
    let at = k.addr_of(parts, e, 4);
    let acc = k.imm_f32(0.0);
    let zero = k.imm_u32(0);
    k.strided_loop(zero, windows as u32, 1, ("window", "window_end"), |k, _| {
        let x = k.reg(RegKind::F32);
        k.op("ld.global.f32", [x.into(), addr(at, 0)]);
        k.op("add.rn.f32", [acc.into(), acc.into(), x.into()]);
        k.op("add.s64", [at.into(), at.into(), ((n * 4) as u64 as i64).into()]);
    });
    let oa = k.addr_of(out, e, 4);
    k.op("st.global.f32", [addr(oa, 0), acc.into()]);
    crate::kernels::pointwise::grid_stride_end(&mut k, e, stride, count, &top, &end);
    k
}

/// A window sum's arguments: out, parts.
pub fn window_sum_arguments<T>([out, parts]: [T; 2]) -> Vec<T> {
    vec![out, parts]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks cover the window: REPLAY_CHUNK positions each, the last possibly fewer.
    #[test]
    fn chunks_cover_the_window() {
        for (t, len, count) in
            [(1, 1, 1), (2, 2, 1), (5, 5, 1), (16, 16, 1), (17, 16, 2), (512, 16, 32), (2048, 16, 128)]
        {
            assert_eq!((chunk_len(t), chunk_count(t)), (len, count), "T {t}");
            assert!(chunk_len(t) * chunk_count(t) >= t && chunk_len(t) * (chunk_count(t) - 1) < t);
        }
    }

    /// The group shrinks until the buffer fits; a block past the thread limit is refused.
    #[test]
    fn the_layout_fits_the_launch_limits() {
        let small = Layout::new(2, 100, 190, 8, 24, 24).unwrap();
        assert_eq!((small.group, small.threads(), small.stride()), (4, 224, 193));
        let wide = Layout::new(32, 512, 256, 15, 46, 31).unwrap();
        assert_eq!(wide.group, 2);
        assert!(wide.shared_bytes() <= MAX_SHARED_PER_BLOCK as usize);
        assert!(Layout { group: 4, ..wide }.shared_bytes() > MAX_SHARED_PER_BLOCK as usize);
        assert!(Layout::new(1, 8, 1024, 4, 4, 4).is_err());
        assert!(Layout::new(1, 8, 512, 40, 121, 81).is_err());
    }

    /// The window sum reads every window's part of the element, in window order.
    #[test]
    fn the_window_sum_walks_the_windows_in_order() {
        let k = window_sum_kernel(3840, 32);
        k.check_budget().unwrap();
        let text = k.render();
        assert!(text.contains("add.rn.f32") && text.contains("add.s64") && text.contains(", 15360;"), "{text}");
        assert_eq!(k.params.len(), window_sum_arguments([0u64; 2]).len());
    }
}
