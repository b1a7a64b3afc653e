//! The Plan: a program lowered to ordered kernels over one static arena. Persistent tensors
//! (parameters, optimizer state, inputs, host scalars, constants) get fixed places; every value
//! a kernel produces gets a place by lifetime, reusing memory freed by values no longer read.
//!
//! Offsets are in units a backend chooses: bytes by dtype for a device, one slot an element
//! for the CPU reference (whose arena holds one float type).

pub mod backend;
pub mod profile;

use std::collections::{BTreeMap, HashMap};

pub use backend::Backend;
pub use profile::{kernel_info, LaunchTime};

use alpha_ir::{DType, Op, Program, Value};
use serde::{Deserialize, Serialize};

/// What a region of the arena holds, for accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Class {
    Parameter,
    OptimizerState,
    Input,
    Constant,
    Activation,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Parameter => "parameters",
            Class::OptimizerState => "optimizer state",
            Class::Input => "inputs",
            Class::Constant => "constants",
            Class::Activation => "activations",
        }
    }
}

/// Where one value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub offset: usize,
    pub len: usize,
    pub class: Class,
}

/// One launch: a node of the program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kernel {
    pub node: u32,
    pub family: String,
}

/// Copy `src` into `dst` at the end of a phase.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Copy {
    pub dst: Value,
    pub src: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhasePlan {
    pub name: String,
    pub kernels: Vec<Kernel>,
    pub copies: Vec<Copy>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub program: Program,
    pub phases: Vec<PhasePlan>,
    /// Place of every value: `slots[node][output]`.
    pub slots: Vec<Vec<Option<Slot>>>,
    /// Total arena length in the plan's units.
    pub arena: usize,
    /// Length by class (activations: the high-water mark of their region).
    pub by_class: BTreeMap<Class, usize>,
    /// The most activation units live at once (without fragmentation).
    pub activation_peak_live: usize,
}

/// Errors planning can find that the verifier cannot.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Ir(#[from] alpha_ir::IrError),
    #[error("{0}")]
    Invalid(String),
}

/// Units one element of `dtype` takes.
pub type UnitFn = fn(DType) -> usize;

/// Device layout: bytes by dtype.
pub fn bytes(d: DType) -> usize {
    d.size()
}
/// CPU reference layout: one slot an element.
pub fn elements(_: DType) -> usize {
    1
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Ops whose outputs overwrite inputs: output k aliases input `aliases[k]`.
fn in_place(op: &Op) -> Option<&'static [usize]> {
    match op {
        // p, g, m, v, … → p', m', v'
        Op::AdamW { .. } => Some(&[0, 2, 3]),
        _ => None,
    }
}

/// Whether Slice node `i` is one contiguous run of its input (every axis before the sliced one
/// of size 1), which the plan may place as a view; any other slice is a copy, a kernel.
pub fn one_run(g: &alpha_ir::Graph, i: usize) -> bool {
    let n = &g.nodes[i];
    let Op::Slice { axis, .. } = n.op else { return false };
    g.shape(n.inputs[0])[..axis].iter().product::<usize>() == 1
}

/// Where node `i`'s output lies inside its input, in elements, when it is a view: a reshape
/// (at 0), or a slice that is one contiguous run of its input — every axis before the sliced
/// one of size 1, as for q, k and v cut from attention's `[3, B, H, T, D]` projection — at
/// `start` times the elements of one index of the axis.
fn view_offset(g: &alpha_ir::Graph, i: usize) -> Option<usize> {
    let n = &g.nodes[i];
    match n.op {
        Op::Reshape { .. } => Some(0),
        Op::Slice { axis, start, .. } => {
            let inner: usize = g.shape(n.inputs[0])[axis + 1..].iter().product();
            one_run(g, i).then_some(start * inner)
        }
        _ => None,
    }
}

/// Concats whose parts are computed straight into their place in the output, so the Concat is
/// no kernel: along an axis with only size-1 axes before it (each part one contiguous run of the
/// output, at an aligned offset), every part the whole output of a kernel of the Concat's phase
/// (through reshapes) that nothing but the Concat reads. Why: the adjoint of attention's q, k and
/// v is one such Concat of what the attention backward writes; placed, it costs no copy.
///
/// Returns (part → (Concat output, elements in)) and (Concat node → the node computing its
/// first part, where the output is given its place).
#[allow(clippy::type_complexity)]
fn placed_concats(
    program: &Program,
    root: &HashMap<Value, (Value, usize)>,
    unit: UnitFn,
    align: usize,
) -> (HashMap<Value, (Value, usize)>, HashMap<u32, u32>) {
    let g = &program.graph;
    let resolve = |v: Value| root.get(&v).copied().unwrap_or((v, 0));
    let phase = |id: u32| program.phases.iter().position(|p| p.nodes.contains(&(id as usize)));
    // Readers of each root, through views; named outputs and assignments count as readers too.
    let mut readers: HashMap<Value, Vec<u32>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if root.contains_key(&Value { node: i as u32, index: 0 }) {
            continue;
        }
        for &x in &n.inputs {
            readers.entry(resolve(x).0).or_default().push(i as u32);
        }
    }
    for &v in program.outputs.values().chain(program.phases.iter().flat_map(|p| p.assign.iter().map(|a| &a.1))) {
        readers.entry(resolve(v).0).or_default().push(u32::MAX);
    }
    let (mut members, mut placed) = (HashMap::new(), HashMap::new());
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::Concat { axis } = n.op else { continue };
        let shape = &n.outputs[0].shape;
        if shape[..axis].iter().product::<usize>() != 1 || phase(i as u32).is_none() {
            continue;
        }
        let mut parts = vec![];
        let mut at = 0usize;
        for &x in &n.inputs {
            let (r, off) = resolve(x);
            let producer = &g.nodes[r.node as usize];
            let computed = !producer.op.is_leaf()
                && !matches!(producer.op, Op::Constant { .. })
                && in_place(&producer.op).is_none()
                && phase(r.node) == phase(i as u32);
            let sole = readers.get(&r).is_some_and(|rs| rs.iter().all(|&k| k == i as u32) && rs.len() == 1);
            let aligned = (at * unit(g.dtype(r))).is_multiple_of(align);
            let whole = off == 0 && g.ty(r).numel() == g.ty(x).numel() && g.dtype(r) == n.outputs[0].dtype;
            if !(computed && sole && aligned && whole) || parts.iter().any(|&(p, _): &(Value, usize)| p == r) {
                parts.clear();
                break;
            }
            parts.push((r, at));
            at += g.ty(x).numel();
        }
        if parts.is_empty() {
            continue;
        }
        let out = Value { node: i as u32, index: 0 };
        let first = parts.iter().map(|p| p.0.node).min().expect("a Concat has parts");
        for (r, at) in parts {
            members.insert(r, (out, at));
        }
        placed.insert(i as u32, first);
    }
    (members, placed)
}

/// Lower a program. `unit` sizes elements; `align` aligns every region (in units).
pub fn plan(program: &Program, unit: UnitFn, align: usize) -> Result<Plan, PlanError> {
    plan_keeping(program, unit, align, &[])
}

/// [`plan`], with lifetimes extended: each `(value, node)` keeps the value (its root, after view
/// resolution) live at least through `node`'s kernel, so no output computed before then takes
/// its memory. A backend uses it to read a tensor later than the program does (a fused kernel
/// that recomputes a dropped intermediate from it). `node` must be a kernel of the value's
/// phase; persistent values (never reused) need no hint and are left as they are.
pub fn plan_keeping(program: &Program, unit: UnitFn, align: usize, keep: &[(Value, u32)]) -> Result<Plan, PlanError> {
    place(program, unit, align, keep, false, &HashMap::new())
}

/// [`plan_keeping`] for a backend whose elementwise kernels load each element before they store
/// it, by the same thread (the CUDA backend's, alone or fused into chains): an elementwise
/// op's output then takes the exact place of an input of its size and type that dies there.
/// Why: first fit could place the output partly over that input, and a partial overlap keeps
/// the op from joining a fused chain with its producer (GPT-2's GELU backward, the residual
/// adds after the LayerNorm backwards). Not for the CPU backend, whose kernels read and write
/// whole slices (and may take more than one pass over them).
pub fn plan_in_place(program: &Program, unit: UnitFn, align: usize, keep: &[(Value, u32)]) -> Result<Plan, PlanError> {
    place(program, unit, align, keep, true, &HashMap::new())
}

/// [`plan_in_place`], with some values given more room than their elements take: `room[v]`
/// units (at least the elements'). Why: a device may store a matrix with its rows padded to an
/// aligned pitch, so that the products reading it take it as it is stored (the CUDA backend's
/// bf16 operands of 1,330 columns, read by the tensor memory accelerator, which needs rows
/// 16 bytes apart). Such a value must be no view's source: every reader reads its slot.
pub fn plan_in_place_with_room(
    program: &Program,
    unit: UnitFn,
    align: usize,
    keep: &[(Value, u32)],
    room: &HashMap<Value, usize>,
) -> Result<Plan, PlanError> {
    place(program, unit, align, keep, true, room)
}

fn place(
    program: &Program,
    unit: UnitFn,
    align: usize,
    keep: &[(Value, u32)],
    elementwise_in_place: bool,
    room: &HashMap<Value, usize>,
) -> Result<Plan, PlanError> {
    program.verify()?;
    let g = &program.graph;
    let size = |v: Value| {
        let elements = g.ty(v).numel().max(1) * unit(g.dtype(v));
        align_up(room.get(&v).map_or(elements, |&r| r.max(elements)), align)
    };

    // Persistent regions first, in node order so layouts are stable. Constants are read-only,
    // so all constants of one value and dtype share one region, as large as the largest.
    let mut slots: HashMap<Value, Slot> = HashMap::new();
    let mut by_class: BTreeMap<Class, usize> = BTreeMap::new();
    let mut shared: HashMap<(u64, DType), Value> = HashMap::new();
    let mut shared_len: HashMap<(u64, DType), usize> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if let Op::Constant { value } = n.op {
            let v = Value { node: i as u32, index: 0 };
            let e = shared_len.entry((value.to_bits(), n.outputs[0].dtype)).or_default();
            *e = (*e).max(size(v));
        }
    }
    let mut at = 0usize;
    for (i, n) in g.nodes.iter().enumerate() {
        let class = match n.op {
            Op::Param { .. } => Class::Parameter,
            Op::State { .. } => Class::OptimizerState,
            Op::Input { .. } | Op::HostScalar { .. } => Class::Input,
            Op::Constant { .. } => Class::Constant,
            _ => continue,
        };
        let v = Value { node: i as u32, index: 0 };
        if let Op::Constant { value } = n.op {
            let key = (value.to_bits(), n.outputs[0].dtype);
            if let Some(first) = shared.get(&key) {
                let s = slots[first];
                slots.insert(v, Slot { offset: s.offset, len: size(v), class });
                continue;
            }
            shared.insert(key, v);
            let len = shared_len[&key];
            slots.insert(v, Slot { offset: at, len: size(v), class });
            *by_class.entry(class).or_default() += len;
            at += len;
            continue;
        }
        let len = size(v);
        slots.insert(v, Slot { offset: at, len, class });
        *by_class.entry(class).or_default() += len;
        at += len;
    }
    let act_base = at;

    // Views: no kernel, a place inside the tensor they view (their root), `elements` in.
    let mut root: HashMap<Value, (Value, usize)> = HashMap::new();
    for i in 0..g.nodes.len() {
        // A view must start on the alignment every kernel may assume of its operands.
        let aligned = |at: usize| (at * unit(g.nodes[i].outputs[0].dtype)).is_multiple_of(align);
        if let Some(at) = view_offset(g, i).filter(|&at| aligned(at)) {
            let src = g.nodes[i].inputs[0];
            let (r, base) = root.get(&src).copied().unwrap_or((src, 0));
            root.insert(Value { node: i as u32, index: 0 }, (r, base + at));
        }
    }
    let is_view = |i: usize| root.contains_key(&Value { node: i as u32, index: 0 });
    let resolve = |v: Value| root.get(&v).map_or(v, |x| x.0);
    let (members, placed) = placed_concats(program, &root, unit, align);

    // Kernels in order; the global index orders lifetimes across phases.
    let mut phases = vec![];
    let mut order: Vec<(usize, u32)> = vec![]; // (phase, node)
    for (pi, p) in program.phases.iter().enumerate() {
        let mut kernels = vec![];
        for i in p.nodes.clone() {
            let n = &g.nodes[i];
            if n.op.is_leaf() || is_view(i) || placed.contains_key(&(i as u32)) || matches!(n.op, Op::Constant { .. }) {
                continue;
            }
            kernels.push(Kernel { node: i as u32, family: n.op.family().to_string() });
            order.push((pi, i as u32));
        }
        let copies = p.assign.iter().map(|&(dst, src)| Copy { dst, src }).collect();
        phases.push(PhasePlan { name: p.name.clone(), kernels, copies });
    }
    let position: HashMap<u32, usize> = order.iter().enumerate().map(|(k, &(_, n))| (n, k)).collect();
    let mut phase_of: HashMap<u32, usize> = order.iter().map(|&(p, n)| (n, p)).collect();
    for (&c, first) in &placed {
        phase_of.insert(c, phase_of[first]);
    }
    let phase_end: Vec<usize> =
        (0..program.phases.len()).map(|p| order.iter().rposition(|&(q, _)| q == p).map_or(0, |k| k)).collect();

    // Last reader of each computed value; values read by copies or named outputs live to the
    // end of their phase.
    let mut last_use: HashMap<Value, usize> = HashMap::new();
    for &(_, n) in &order {
        for &inp in &g.nodes[n as usize].inputs {
            let inp = resolve(inp);
            if phase_of.contains_key(&inp.node) {
                let k = position[&n];
                if phase_of[&inp.node] != phase_of[&n] {
                    return Err(PlanError::Invalid(format!(
                        "{inp} is computed in phase {} but read in phase {}",
                        program.phases[phase_of[&inp.node]].name, program.phases[phase_of[&n]].name
                    )));
                }
                let e = last_use.entry(inp).or_insert(k);
                *e = (*e).max(k);
            }
        }
    }
    let mut to_phase_end = |v: Value| {
        let v = resolve(v);
        if let Some(&p) = phase_of.get(&v.node) {
            last_use.insert(v, phase_end[p]);
        }
    };
    for p in &program.phases {
        for &(_, src) in &p.assign {
            to_phase_end(src);
        }
    }
    for &v in program.outputs.values() {
        to_phase_end(v);
    }
    // Lifetimes the caller extends.
    for &(v, until) in keep {
        let r = resolve(v);
        let Some(&k) = position.get(&until) else {
            return Err(PlanError::Invalid(format!("keeping {v} until %{until}: %{until} is not a kernel")));
        };
        let Some(&p) = phase_of.get(&r.node) else { continue };
        if p != phase_of[&until] {
            return Err(PlanError::Invalid(format!(
                "keeping {v} until %{until}: {r} is computed in phase {}, %{until} runs in phase {}",
                program.phases[p].name, program.phases[phase_of[&until]].name
            )));
        }
        let e = last_use.entry(r).or_insert(k);
        *e = (*e).max(k);
    }

    // In-place ops: their outputs take their inputs' slots; nothing later in their phase may
    // read the old value. A later phase reading the same persistent tensor reads the new one,
    // as it would after the phase's assignment (two variants of a step, each updating the
    // parameters in place, are both allowed).
    for &(pn, n) in &order {
        let node = &g.nodes[n as usize];
        if let Some(aliases) = in_place(&node.op) {
            for (k, &input) in aliases.iter().enumerate() {
                let src = resolve(node.inputs[input]);
                let readers_after = order
                    .iter()
                    .skip(position[&n] + 1)
                    .take_while(|&&(pm, _)| pm == pn)
                    .any(|&(_, m)| g.nodes[m as usize].inputs.iter().any(|&i| resolve(i) == src));
                if readers_after {
                    return Err(PlanError::Invalid(format!(
                        "{src} is read after {} overwrites it in place",
                        node.op.family()
                    )));
                }
                let slot =
                    *slots.get(&src).ok_or_else(|| PlanError::Invalid(format!("in-place input {src} has no place")))?;
                slots.insert(Value { node: n, index: k as u16 }, slot);
            }
        }
    }

    // First-fit placement of activations by lifetime.
    let mut free: Vec<(usize, usize)> = vec![]; // (offset, len) relative to act_base, sorted
    let mut high = 0usize;
    let mut live: Vec<(usize, Value)> = vec![]; // (last use, value)
    let mut live_units = 0usize;
    let mut peak_live = 0usize;
    for (k, &(_, n)) in order.iter().enumerate() {
        // Release values whose last reader came before this kernel.
        live.retain(|&(end, v)| {
            if end < k {
                let s = slots[&v];
                release(&mut free, s.offset - act_base, s.len);
                live_units -= s.len;
                false
            } else {
                true
            }
        });
        let node = &g.nodes[n as usize];
        if in_place(&node.op).is_some() {
            continue;
        }
        // A placed Concat's output takes its place when its first part is computed.
        let mut outputs: Vec<Value> =
            placed.iter().filter(|(_, &first)| first == n).map(|(&c, _)| Value { node: c, index: 0 }).collect();
        outputs.sort_by_key(|v| v.node);
        outputs.extend(
            (0..node.outputs.len())
                .map(|idx| Value { node: n, index: idx as u16 })
                .filter(|v| !members.contains_key(v)),
        );
        // In place ([`plan_in_place`]): an elementwise op's output on an input that dies here.
        if let (true, Op::Unary(_) | Op::Binary(_), [out]) = (elementwise_in_place, &node.op, node.outputs.as_slice()) {
            let v = Value { node: n, index: 0 };
            let dying = node.inputs.iter().find_map(|&x| {
                let (r, base) = root.get(&x).copied().unwrap_or((x, 0));
                let same = base == 0 && g.dtype(x) == out.dtype && g.ty(x).numel() == out.numel();
                let at = live.iter().position(|&(end, lv)| lv == r && end == k && slots[&lv].len == size(v));
                at.filter(|_| same && outputs == [v])
            });
            if let Some(at) = dying {
                let (_, r) = live.remove(at);
                slots.insert(v, slots[&r]);
                live.push((last_use.get(&v).copied().unwrap_or(k), v));
                peak_live = peak_live.max(live_units);
                continue;
            }
        }
        for v in outputs {
            let len = size(v);
            let off = take(&mut free, &mut high, len);
            slots.insert(v, Slot { offset: act_base + off, len, class: Class::Activation });
            live.push((last_use.get(&v).copied().unwrap_or(k), v));
            live_units += len;
        }
        peak_live = peak_live.max(live_units);
    }
    by_class.insert(Class::Activation, high);
    for (&part, &(c, at)) in &members {
        let s =
            *slots.get(&c).ok_or_else(|| PlanError::Invalid(format!("{part} is placed in {c}, which has no place")))?;
        slots.insert(part, Slot { offset: s.offset + at * unit(g.dtype(part)), len: size(part), ..s });
    }
    for (&view, &(r, at)) in &root {
        let s = *slots.get(&r).ok_or_else(|| PlanError::Invalid(format!("{view} views {r}, which has no place")))?;
        slots.insert(view, Slot { offset: s.offset + at * unit(g.dtype(view)), len: size(view), ..s });
    }
    // Assignments whose value already sits in its destination (in-place updates) need no copy.
    for p in phases.iter_mut() {
        p.copies.retain(|c| slots[&c.dst].offset != slots[&c.src].offset);
    }
    let mut table: Vec<Vec<Option<Slot>>> = g.nodes.iter().map(|n| vec![None; n.outputs.len()]).collect();
    for (v, s) in slots {
        table[v.node as usize][v.index as usize] = Some(s);
    }
    Ok(Plan {
        program: program.clone(),
        phases,
        slots: table,
        arena: act_base + high,
        by_class,
        activation_peak_live: peak_live,
    })
}

/// Take `len` units from the free list (first fit) or from the top.
fn take(free: &mut Vec<(usize, usize)>, high: &mut usize, len: usize) -> usize {
    if let Some(i) = free.iter().position(|&(_, l)| l >= len) {
        let (off, l) = free[i];
        if l == len {
            free.remove(i);
        } else {
            free[i] = (off + len, l - len);
        }
        return off;
    }
    // Extend the last free block if it touches the top.
    if let Some(&(off, l)) = free.last() {
        if off + l == *high {
            free.pop();
            *high = off + len;
            return off;
        }
    }
    let off = *high;
    *high += len;
    off
}

/// Return a region to the free list, merging neighbours.
fn release(free: &mut Vec<(usize, usize)>, off: usize, len: usize) {
    let i = free.partition_point(|&(o, _)| o < off);
    free.insert(i, (off, len));
    if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
        free[i].1 += free[i + 1].1;
        free.remove(i + 1);
    }
    if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
        free[i - 1].1 += free[i].1;
        free.remove(i);
    }
}

impl Plan {
    pub fn slot(&self, v: Value) -> Slot {
        self.slots[v.node as usize][v.index as usize].unwrap_or_else(|| panic!("{v} has no place in the plan"))
    }
    pub fn kernel_count(&self) -> usize {
        self.phases.iter().map(|p| p.kernels.len()).sum()
    }

    /// A human summary: kernels by family and the arena by class.
    pub fn summary(&self, unit_name: &str) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "system {}: {} kernels in {} phase(s)",
            self.program.graph.system,
            self.kernel_count(),
            self.phases.len()
        );
        for p in &self.phases {
            let mut fam: BTreeMap<&str, usize> = BTreeMap::new();
            for k in &p.kernels {
                *fam.entry(k.family.as_str()).or_default() += 1;
            }
            let list: Vec<String> = fam.iter().map(|(f, n)| format!("{f}×{n}")).collect();
            let _ = writeln!(
                s,
                "  phase {}: {} kernels, {} copies: {}",
                p.name,
                p.kernels.len(),
                p.copies.len(),
                list.join(", ")
            );
        }
        let _ = writeln!(s, "arena: {} {unit_name}", group(self.arena));
        for (c, n) in &self.by_class {
            let _ = writeln!(s, "  {:<16} {:>16} {unit_name}", c.name(), group(*n));
        }
        let _ = writeln!(
            s,
            "  activation peak live {} {unit_name} (region {} after reuse)",
            group(self.activation_peak_live),
            group(self.by_class.get(&Class::Activation).copied().unwrap_or(0))
        );
        s
    }
}

/// 1234567 → "1,234,567".
pub fn group(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_merges_and_reuses() {
        let mut free = vec![];
        let mut high = 0;
        let a = take(&mut free, &mut high, 10);
        let b = take(&mut free, &mut high, 20);
        let c = take(&mut free, &mut high, 5);
        assert_eq!((a, b, c, high), (0, 10, 30, 35));
        release(&mut free, a, 10);
        release(&mut free, b, 20);
        assert_eq!(free, vec![(0, 30)]);
        assert_eq!(take(&mut free, &mut high, 25), 0);
        assert_eq!(free, vec![(25, 5)]);
        assert_eq!(high, 35);
    }

    /// Slices that are one contiguous run of their input are views at their offset, kept
    /// alive with it; a slice across an inner axis, or one off the alignment, is a kernel.
    #[test]
    fn contiguous_aligned_slices_are_views() {
        use alpha_ir::{Graph, Init};
        let mut g = Graph::new("t");
        let x = g.param("x", &[1, 3, 8, 16], Init::Zeros);
        let y = g.mul(x, x);
        let k = g.slice(y, 1, 1, 2); // [1, 1, 8, 16]: elements 128..256 of y
        let inner = g.slice(y, 2, 0, 4); // [1, 3, 4, 16]: strided
        let odd = g.slice(y, 3, 1, 2); // not contiguous either
        let ks = g.sum_all(k);
        let is = g.sum_all(inner);
        let os = g.sum_all(odd);
        let t = g.add(ks, is);
        let t = g.add(t, os);
        let mut outs = BTreeMap::new();
        outs.insert("t".to_string(), t);
        let p = Program::single(g.finish().unwrap(), "forward", outs);
        let pl = plan(&p, bytes, 256).unwrap();
        let kernels: Vec<u32> = pl.phases[0].kernels.iter().map(|k| k.node).collect();
        assert!(!kernels.contains(&k.node) && kernels.contains(&inner.node) && kernels.contains(&odd.node));
        assert_eq!(pl.slot(k).offset, pl.slot(y).offset + 128 * 4);
        assert_eq!(pl.slot(k).len, align_up(128 * 4, 256));
        // 16 elements in: 64 bytes, off a 256-byte alignment, so a kernel.
        let mut g = Graph::new("t");
        let x = g.param("x", &[4, 16], Init::Zeros);
        let y = g.mul(x, x);
        let row = g.slice(y, 0, 1, 2);
        let s = g.sum_all(row);
        let mut outs = BTreeMap::new();
        outs.insert("s".to_string(), s);
        let pl = plan(&Program::single(g.finish().unwrap(), "forward", outs), bytes, 256).unwrap();
        assert!(pl.phases[0].kernels.iter().any(|k| k.node == row.node));
        assert!(plan(&pl.program, bytes, 64).unwrap().phases[0].kernels.iter().all(|k| k.node != row.node));
    }

    /// An in-place update may not be followed by a read of the old value in its phase, but a
    /// later phase (another variant of the step) may read the tensor and update it again.
    #[test]
    fn in_place_updates_bind_their_own_phase_only() {
        use alpha_ir::{DType, Graph, Init, Op, Phase, TensorType};
        let build = |read_after: bool| {
            let mut g = Graph::new("t");
            let p = g.param("p", &[4], Init::Zeros);
            let m = g.state("p.m", TensorType::new(vec![4], DType::F32), Init::Zeros);
            let v = g.state("p.v", TensorType::new(vec![4], DType::F32), Init::Zeros);
            let one = g.constant(1.0, &[], DType::F32);
            let adamw = |g: &mut Graph| {
                let grad = g.mul(p, p);
                let op = Op::AdamW { beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.0 };
                g.push(op, &[p, grad, m, v, one, one, one, one])
            };
            let first = adamw(&mut g);
            let mut phases = vec![Phase { name: "step".into(), nodes: 0..g.nodes.len(), assign: vec![] }];
            if read_after {
                g.add(p, p);
                phases[0].nodes = 0..g.nodes.len();
            }
            let start = g.nodes.len();
            let second = adamw(&mut g);
            phases.push(Phase { name: "again".into(), nodes: start..g.nodes.len(), assign: vec![] });
            let mut outs = BTreeMap::new();
            outs.insert("p".to_string(), first[0]);
            outs.insert("p2".to_string(), second[0]);
            Program { graph: g.finish().unwrap(), phases, outputs: outs }
        };
        let pl = plan(&build(false), elements, 16).unwrap();
        assert_eq!(pl.phases[1].kernels.len(), 2, "the second phase's square and its AdamW");
        let err = plan(&build(true), elements, 16).unwrap_err().to_string();
        assert!(err.contains("is read after adamw overwrites it in place"), "{err}");
    }

    /// Parts read only by their Concat are computed in place; a part read elsewhere too makes
    /// the Concat a kernel.
    #[test]
    fn concat_parts_are_computed_in_place() {
        use alpha_ir::{Graph, Init};
        let build = |shared: bool| {
            let mut g = Graph::new("t");
            let x = g.param("x", &[1, 4, 64], Init::Zeros);
            let a = g.mul(x, x);
            let b = g.add(x, x);
            let b2 = g.reshape(b, &[1, 4, 64]);
            let c = g.concat(&[a, b2], 1);
            let mut t = g.sum_all(c);
            if shared {
                let sa = g.sum_all(a);
                t = g.add(t, sa);
            }
            let mut outs = BTreeMap::new();
            outs.insert("t".to_string(), t);
            (Program::single(g.finish().unwrap(), "forward", outs), a, b, c)
        };
        let (p, a, b, c) = build(false);
        let pl = plan(&p, bytes, 256).unwrap();
        assert!(pl.phases[0].kernels.iter().all(|k| k.node != c.node));
        assert_eq!((pl.slot(a).offset, pl.slot(b).offset), (pl.slot(c).offset, pl.slot(c).offset + 256 * 4));
        let (p, _, _, c) = build(true);
        assert!(plan(&p, bytes, 256).unwrap().phases[0].kernels.iter().any(|k| k.node == c.node));
    }

    /// a = x·x dies at b; c takes its place unless a is kept until d.
    #[test]
    fn in_place_elementwise_outputs_take_a_dying_inputs_exact_place() {
        use alpha_ir::{Graph, Init};
        let mut g = Graph::new("t");
        let x = g.param("x", &[64], Init::Zeros);
        let a = g.exp(x);
        let b = g.neg(a);
        let c = g.mul(a, b);
        let d = g.exp(c);
        let e = g.add(d, a);
        let p = Program::single(g.finish().unwrap(), "f", [("e".to_string(), e)].into_iter().collect());
        let plain = plan(&p, bytes, 256).unwrap();
        let placed = plan_in_place(&p, bytes, 256, &[]).unwrap();
        let at = |pl: &Plan, v: Value| pl.slot(v).offset;
        // b reads a, which lives on: no place to take. c takes b's exactly (b dies at c; a lives
        // on to e), and d then takes c's.
        assert_ne!(at(&placed, b), at(&placed, a));
        assert_eq!(at(&placed, c), at(&placed, b));
        assert_eq!(at(&placed, d), at(&placed, c));
        assert_ne!(at(&plain, c), at(&plain, b), "the premise: first fit places c apart from b");
        assert!(placed.arena <= plain.arena);
    }

    #[test]
    fn keeping_a_value_stops_its_slot_being_reused() {
        use alpha_ir::{Graph, Init};
        let mut g = Graph::new("t");
        let x = g.param("x", &[16], Init::Zeros);
        let a = g.mul(x, x);
        let b = g.add(a, x);
        let c = g.mul(b, b);
        let d = g.add(c, x);
        let s = g.sum_all(d);
        let mut outs = BTreeMap::new();
        outs.insert("s".to_string(), s);
        let p = Program::single(g.finish().unwrap(), "forward", outs);
        let span = |pl: &Plan, v: Value| {
            let s = pl.slot(v);
            (s.offset, s.offset + s.len)
        };
        let disjoint = |x: (usize, usize), y: (usize, usize)| x.1 <= y.0 || y.1 <= x.0;

        let plain = plan(&p, bytes, 256).unwrap();
        assert_eq!(plain.slot(c).offset, plain.slot(a).offset, "the premise: c reuses a's slot");
        assert_eq!(plan_keeping(&p, bytes, 256, &[]).unwrap().slots, plain.slots);

        let kept = plan_keeping(&p, bytes, 256, &[(a, d.node)]).unwrap();
        for v in [b, c, d] {
            assert!(disjoint(span(&kept, a), span(&kept, v)), "{v} overlaps the kept {a}");
        }
        // Kept only until c: d (computed after) may take a's place again.
        let until_c = plan_keeping(&p, bytes, 256, &[(a, c.node)]).unwrap();
        assert!(disjoint(span(&until_c, a), span(&until_c, c)));
        assert_eq!(until_c.slot(d).offset, until_c.slot(a).offset);

        // The node must be a kernel.
        assert!(plan_keeping(&p, bytes, 256, &[(a, x.node)]).is_err());
    }
}
