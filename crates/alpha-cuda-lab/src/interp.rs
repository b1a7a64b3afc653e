//! A reference interpreter of the PTX Alpha writes, for the instructions its scalar kernels use
//! (integer and address arithmetic, predicates and branches, f32 `add`/`sub`/`mul`/`div`/`neg` with their
//! rounding and `fma.rn.f32` as one rounding ([`f32::mul_add`]), bf16 loads widened by a shift
//! and stores rounded to the nearest (`cvt.rn.bf16.f32`, `st.global.b16`),
//! global (scalar and `v4`, `f32` or the copies' untyped `b32`), shared and parameter loads and stores, `bar.sync`, whole-warp
//! butterfly shuffles, each a point where the warp's lanes meet), over
//! grids and blocks of up to three dimensions (`%tid`, `%ntid`, `%ctaid`, `%nctaid` in x, y, z).
//!
//! Why: a kernel's arithmetic and indexing can be checked against the CPU reference where no
//! GPU is, bit for bit where the kernel claims the CPU's order, before the one run on a device.
//! It is a checker, not a simulator: each block's threads run one after another up to each
//! barrier, in ascending or descending thread order ([`Schedule`]); a kernel whose threads
//! race between barriers gives different results under the two orders, and an access outside
//! the memory a launch was given is an error naming the instruction.
//!
//! How: [`Module::parse`] reads a rendered kernel (registers, shared arrays, instructions,
//! labels); [`Memory`] is the device memory, addressed from a high base so that an address cut
//! to 32 bits does not land in it; [`Module::launch`] runs a grid.

use std::collections::HashMap;

use anyhow::{anyhow, bail, Context, Result};

/// One operand, decoded.
#[derive(Clone, Debug)]
enum Operand {
    Reg(usize),
    Imm(i64),
    F32(u32),
    /// `[reg+offset]`.
    Addr(usize, i64),
    /// `[symbol]`: a parameter.
    Param(usize),
    /// A shared array's address.
    Shared(u32),
    Label(usize),
    /// A special register in dimension 0 (x), 1 (y) or 2 (z).
    Special(Special, usize),
    /// `{%f1, %f2, …}`: registers a vector access reads or writes.
    Vector(Vec<usize>),
}

#[derive(Clone, Copy, Debug)]
enum Special {
    Tid,
    Ntid,
    Ctaid,
    Nctaid,
}

/// `%ctaid.y` → (Ctaid, 1).
fn special(s: &str) -> Option<(Special, usize)> {
    let (name, dim) = s.strip_prefix('%')?.split_once('.')?;
    let sp = match name {
        "tid" => Special::Tid,
        "ntid" => Special::Ntid,
        "ctaid" => Special::Ctaid,
        "nctaid" => Special::Nctaid,
        _ => return None,
    };
    Some((sp, ["x", "y", "z"].iter().position(|&d| d == dim)?))
}

/// An instruction's operands split at the commas outside braces.
fn split_operands(args: &str) -> Vec<&str> {
    let (mut out, mut depth, mut from) = (vec![], 0, 0);
    for (i, c) in args.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&args[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&args[from..]);
    out
}

#[derive(Clone, Debug)]
struct Ins {
    guard: Option<(usize, bool)>,
    op: String,
    args: Vec<Operand>,
    line: String,
}

/// A parsed kernel.
pub struct Module {
    pub name: String,
    params: usize,
    regs: usize,
    shared_bytes: usize,
    ins: Vec<Ins>,
}

/// The order in which a block's threads run between barriers, and the blocks of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    Ascending,
    Descending,
}

/// Device memory: one byte array from [`Memory::BASE`].
pub struct Memory {
    bytes: Vec<u8>,
}

impl Default for Memory {
    fn default() -> Self {
        Self::new()
    }
}

impl Memory {
    /// The address of the first byte.
    pub const BASE: u64 = 0x7_0000_0000;

    pub fn new() -> Self {
        Memory { bytes: vec![] }
    }

    /// `n` floats, filled with NaN (what a kernel must overwrite); returns their address.
    pub fn alloc(&mut self, n: usize) -> u64 {
        let at = self.bytes.len().div_ceil(256) * 256;
        self.bytes.resize(at + n * 4, 0);
        for x in self.bytes[at..].chunks_exact_mut(4) {
            x.copy_from_slice(&f32::NAN.to_bits().to_le_bytes());
        }
        Self::BASE + at as u64
    }

    /// A fresh allocation holding `x`.
    pub fn upload(&mut self, x: &[f32]) -> u64 {
        let at = self.alloc(x.len());
        let o = (at - Self::BASE) as usize;
        for (i, v) in x.iter().enumerate() {
            self.bytes[o + 4 * i..o + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        at
    }

    /// `bytes` zeroed bytes (as the backend clears its arena); returns their address.
    pub fn alloc_zeroed(&mut self, bytes: usize) -> u64 {
        let at = self.bytes.len().div_ceil(256) * 256;
        self.bytes.resize(at + bytes, 0);
        Self::BASE + at as u64
    }

    /// Writes `data` from address `at`.
    pub fn write_bytes(&mut self, at: u64, data: &[u8]) {
        let o = (at - Self::BASE) as usize;
        self.bytes[o..o + data.len()].copy_from_slice(data);
    }

    /// `n` 16-bit words from `at` (bf16 values as their bits).
    pub fn read_u16(&self, at: u64, n: usize) -> Vec<u16> {
        let o = (at - Self::BASE) as usize;
        self.bytes[o..o + 2 * n].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()
    }

    pub fn read(&self, at: u64, n: usize) -> Vec<f32> {
        let o = (at - Self::BASE) as usize;
        self.bytes[o..o + 4 * n].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }

    /// The `len` bytes at `at`, which must be aligned to `len` as the hardware asks.
    fn span(&mut self, at: u64, len: usize) -> Result<&mut [u8]> {
        let o = at.checked_sub(Self::BASE).ok_or_else(|| anyhow!("global address {at:#x} below the memory"))? as usize;
        if !at.is_multiple_of(len as u64) {
            bail!("global address {at:#x} not aligned to {len} bytes");
        }
        self.bytes.get_mut(o..o + len).ok_or_else(|| anyhow!("global address {at:#x} past the memory"))
    }
}

/// `%rd12` → ("rd", 12).
fn reg_name(s: &str) -> Option<(&str, usize)> {
    let body = s.strip_prefix('%')?;
    let split = body.find(|c: char| c.is_ascii_digit())?;
    Some((&body[..split], body[split..].parse().ok()?))
}

impl Module {
    /// Parses a kernel rendered by `alpha_cuda::ptx::Kernel::render`, its dynamic shared
    /// memory `dynamic` bytes.
    pub fn parse(text: &str, dynamic: u32) -> Result<Module> {
        let mut name = String::new();
        let mut params: HashMap<String, usize> = HashMap::new();
        let mut bases: HashMap<String, usize> = HashMap::new();
        let mut regs = 0;
        let mut shared: HashMap<String, u32> = HashMap::new();
        let mut shared_bytes = 0u32;
        let mut dynamic_name = None;
        let mut body: Vec<(Option<String>, String)> = vec![];
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with("//") || line == "{" || line == "}" || line == ")" {
                continue;
            }
            if let Some(rest) = line.strip_prefix(".visible .entry ") {
                name = rest.trim_end_matches('(').to_string();
            } else if let Some(rest) = line.strip_prefix(".param ") {
                let sym = rest.split_whitespace().nth(1).context("a parameter's name")?.trim_end_matches(',');
                let n = params.len();
                params.insert(sym.to_string(), n);
            } else if let Some(rest) = line.strip_prefix(".reg ") {
                // `.reg .b32 %r<12>;`
                let decl = rest.split_whitespace().nth(1).context("a register declaration")?;
                let prefix = decl.trim_start_matches('%').split('<').next().unwrap_or("").to_string();
                let count: usize =
                    decl.split('<').nth(1).and_then(|x| x.split('>').next()).context("a count")?.parse()?;
                bases.insert(prefix, regs);
                regs += count;
            } else if line.starts_with(".shared ") || line.starts_with(".extern .shared") {
                // `.shared .align 16 .b8 name[bytes];` or `.extern .shared .align 16 .b8 name[];`
                let decl = line.split_whitespace().last().context("a shared array")?.trim_end_matches(';');
                let (sym, size) = decl.split_once('[').context("a shared array's size")?;
                let size = size.trim_end_matches(']');
                shared_bytes = shared_bytes.div_ceil(16) * 16;
                shared.insert(sym.to_string(), shared_bytes);
                if size.is_empty() {
                    dynamic_name = Some(sym.to_string());
                } else {
                    shared_bytes += size.parse::<u32>()?;
                }
            } else if line.starts_with('.') {
                continue;
            } else if let Some(label) = line.strip_suffix(':') {
                body.push((Some(label.to_string()), String::new()));
            } else {
                body.push((None, line.trim_end_matches(';').to_string()));
            }
        }
        if let Some(d) = &dynamic_name {
            shared_bytes = shared_bytes.div_ceil(16) * 16;
            shared.insert(d.clone(), shared_bytes);
            shared_bytes += dynamic;
        }
        let mut labels = HashMap::new();
        let mut count = 0;
        for (label, _) in &body {
            match label {
                Some(l) => {
                    labels.insert(l.clone(), count);
                }
                None => count += 1,
            }
        }
        let reg = |s: &str| -> Result<usize> {
            let (prefix, idx) = reg_name(s).ok_or_else(|| anyhow!("{s} is not a register"))?;
            Ok(bases.get(prefix).ok_or_else(|| anyhow!("undeclared register {s}"))? + idx)
        };
        let operand = |s: &str| -> Result<Operand> {
            let s = s.trim();
            if let Some((sp, dim)) = special(s) {
                return Ok(Operand::Special(sp, dim));
            }
            Ok(match s {
                _ if s.starts_with('{') => Operand::Vector(
                    s.trim_start_matches('{')
                        .trim_end_matches('}')
                        .split(',')
                        .map(|r| reg(r.trim()))
                        .collect::<Result<_>>()?,
                ),
                _ if s.starts_with('[') => {
                    let inner = s.trim_start_matches('[').trim_end_matches(']');
                    if inner.starts_with('%') {
                        // ptxas takes `[%r+8]`, not `[%r-8]`: refuse what the driver would.
                        if inner.contains('-') {
                            bail!("address {s}: ptxas takes no minus in an address");
                        }
                        let (r, off) = match inner.find('+') {
                            Some(i) => (&inner[..i], inner[i + 1..].parse::<i64>()?),
                            None => (inner, 0),
                        };
                        Operand::Addr(reg(r)?, off)
                    } else {
                        Operand::Param(*params.get(inner).ok_or_else(|| anyhow!("unknown parameter {inner}"))?)
                    }
                }
                _ if s.starts_with('%') => Operand::Reg(reg(s)?),
                _ if s.starts_with("0f") => Operand::F32(u32::from_str_radix(&s[2..], 16)?),
                _ if s.starts_with('-') || s.starts_with(|c: char| c.is_ascii_digit()) => Operand::Imm(s.parse()?),
                _ => match (shared.get(s), labels.get(s)) {
                    (Some(&at), _) => Operand::Shared(at),
                    (None, Some(&l)) => Operand::Label(l),
                    _ => bail!("unknown symbol {s}"),
                },
            })
        };
        let mut ins = vec![];
        for (label, text) in &body {
            if label.is_some() {
                continue;
            }
            let mut rest = text.as_str();
            let mut guard = None;
            if let Some(g) = rest.strip_prefix('@') {
                let (p, tail) = g.split_once(' ').context("a guarded instruction")?;
                let (neg, p) = match p.strip_prefix('!') {
                    Some(p) => (true, p),
                    None => (false, p),
                };
                guard = Some((reg(p)?, neg));
                rest = tail;
            }
            let (op, args) = rest.split_once(' ').unwrap_or((rest, ""));
            let args = if args.trim().is_empty() {
                vec![]
            } else {
                split_operands(args)
                    .into_iter()
                    .map(operand)
                    .collect::<Result<Vec<_>>>()
                    .with_context(|| text.clone())?
            };
            ins.push(Ins { guard, op: op.to_string(), args, line: text.clone() });
        }
        Ok(Module { name, params: params.len(), regs, shared_bytes: shared_bytes as usize, ins })
    }

    /// Runs a grid of `grid` blocks of `block` threads with `args` (parameter values, pointers
    /// as [`Memory`] addresses) over `mem`.
    pub fn launch(&self, grid: u32, block: u32, args: &[u64], mem: &mut Memory, schedule: Schedule) -> Result<()> {
        self.launch_3d([grid, 1, 1], [block, 1, 1], args, mem, schedule)
    }

    /// [`Module::launch`] over a grid and blocks of three dimensions (x, y, z). Blocks run in
    /// order of x, then y, then z; a block's threads in the order of their linear index
    /// (x fastest), or its reverse.
    pub fn launch_3d(
        &self,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[u64],
        mem: &mut Memory,
        schedule: Schedule,
    ) -> Result<()> {
        if args.len() != self.params {
            bail!("kernel {}: {} arguments for {} parameters", self.name, args.len(), self.params);
        }
        let cube =
            |[x, y, z]: [u32; 3]| (0..z).flat_map(move |k| (0..y).flat_map(move |j| (0..x).map(move |i| [i, j, k])));
        // Blocks in either order too: a launch whose blocks store over what other blocks still
        // read gives different results one way round.
        let mut blocks: Vec<[u32; 3]> = cube(grid).collect();
        if schedule == Schedule::Descending {
            blocks.reverse();
        }
        for b in blocks {
            let mut shared = vec![0xFFu8; self.shared_bytes];
            let mut threads: Vec<Thread> = cube(block)
                .map(|t| Thread { regs: vec![0; self.regs], pc: 0, done: false, tid: t, shuffle: None })
                .collect();
            if schedule == Schedule::Descending {
                threads.reverse();
            }
            let ids = Ids { ntid: block, ctaid: b, nctaid: grid };
            loop {
                for t in threads.iter_mut().filter(|t| !t.done) {
                    self.run_to_barrier(t, &ids, args, mem, &mut shared)
                        .with_context(|| format!("kernel {}, block {b:?}, thread {:?}", self.name, t.tid))?;
                }
                exchange_shuffles(&mut threads, block).with_context(|| format!("kernel {}, block {b:?}", self.name))?;
                if threads.iter().all(|t| t.done) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Runs `t` up to its next barrier (past it) or its end.
    fn run_to_barrier(
        &self,
        t: &mut Thread,
        ids: &Ids,
        args: &[u64],
        mem: &mut Memory,
        shared: &mut [u8],
    ) -> Result<()> {
        loop {
            let Some(i) = self.ins.get(t.pc) else {
                t.done = true;
                return Ok(());
            };
            t.pc += 1;
            if let Some((p, neg)) = i.guard {
                if (t.regs[p] != 0) == neg {
                    continue;
                }
            }
            let v = |k: usize| -> Result<u64> {
                Ok(match &i.args[k] {
                    Operand::Reg(r) => t.regs[*r],
                    Operand::Imm(x) => *x as u64,
                    Operand::F32(b) => *b as u64,
                    Operand::Shared(at) => *at as u64,
                    Operand::Special(Special::Tid, d) => t.tid[*d] as u64,
                    Operand::Special(Special::Ntid, d) => ids.ntid[*d] as u64,
                    Operand::Special(Special::Ctaid, d) => ids.ctaid[*d] as u64,
                    Operand::Special(Special::Nctaid, d) => ids.nctaid[*d] as u64,
                    Operand::Param(p) => args[*p],
                    other => bail!("{other:?} is not a value"),
                })
            };
            let f = |x: u64| f32::from_bits(x as u32);
            let u = |x: u64| x as u32;
            let addr = |k: usize, regs: &[u64]| -> Result<u64> {
                match &i.args[k] {
                    Operand::Addr(r, off) => Ok(regs[*r].wrapping_add(*off as u64)),
                    Operand::Param(p) => Ok(args[*p]),
                    other => bail!("{other:?} is not an address"),
                }
            };
            let dst = match i.args.first() {
                Some(Operand::Reg(r)) => Some(*r),
                _ => None,
            };
            let out: Option<u64> = match i.op.as_str() {
                "griddepcontrol.wait" => None,
                "ret" => {
                    t.done = true;
                    return Ok(());
                }
                "bar.sync" => return Ok(()),
                // Every lane of the warp stops here; `exchange_shuffles` gives each its partner's.
                "shfl.sync.bfly.b32" => {
                    let d = dst.ok_or_else(|| anyhow!("{}: a shuffle into no register", i.line))?;
                    if v(3)? != 31 || v(4)? as i64 != -1 {
                        bail!("{}: only whole-warp butterflies are interpreted", i.line);
                    }
                    t.shuffle = Some((d, u(v(1)?), u(v(2)?)));
                    return Ok(());
                }
                "bra" | "bra.uni" => match i.args[0] {
                    Operand::Label(l) => {
                        t.pc = l;
                        None
                    }
                    _ => bail!("{}: a branch to no label", i.line),
                },
                "mov.u32" | "mov.f32" | "mov.b32" => Some(u(v(1)?) as u64),
                "mov.u64" => Some(v(1)?),
                "ld.param.u64" | "ld.param.u32" => Some(addr(1, &t.regs)?),
                "ld.global.f32" | "ld.global.b32" => {
                    let at = addr(1, &t.regs)?;
                    let b = mem.span(at, 4).with_context(|| i.line.clone())?;
                    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
                }
                "ld.global.nc.u32" | "ld.global.u32" => {
                    let at = addr(1, &t.regs)?;
                    let b = mem.span(at, 4).with_context(|| i.line.clone())?;
                    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
                }
                "ld.global.nc.u64" | "ld.global.u64" => {
                    let at = addr(1, &t.regs)?;
                    let b = mem.span(at, 8).with_context(|| i.line.clone())?;
                    Some(u64::from_le_bytes(b.try_into().expect("eight bytes")))
                }
                "ld.global.u16" | "ld.global.b16" => {
                    let at = addr(1, &t.regs)?;
                    let b = mem.span(at, 2).with_context(|| i.line.clone())?;
                    Some(u16::from_le_bytes([b[0], b[1]]) as u64)
                }
                "st.global.f32" | "st.global.b32" => {
                    let at = addr(0, &t.regs)?;
                    let x = u(v(1)?);
                    mem.span(at, 4).with_context(|| i.line.clone())?.copy_from_slice(&x.to_le_bytes());
                    None
                }
                "st.global.b16" => {
                    let at = addr(0, &t.regs)?;
                    let x = v(1)? as u16;
                    mem.span(at, 2).with_context(|| i.line.clone())?.copy_from_slice(&x.to_le_bytes());
                    None
                }
                "cvt.rn.bf16.f32" => Some(bf16_nearest_even(f(v(1)?)) as u64),
                "ld.global.v4.f32" | "ld.global.v4.b32" | "ld.global.v2.f32" | "ld.global.v2.b32" => {
                    let Operand::Vector(rs) = &i.args[0] else { bail!("{}: not a vector load", i.line) };
                    let at = addr(1, &t.regs)?;
                    let b = mem.span(at, 4 * rs.len()).with_context(|| i.line.clone())?.to_vec();
                    for (r, w) in rs.iter().zip(b.chunks_exact(4)) {
                        t.regs[*r] = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64;
                    }
                    None
                }
                "st.global.v4.f32" | "st.global.v4.b32" | "st.global.v2.f32" | "st.global.v2.b32" => {
                    let Operand::Vector(rs) = &i.args[1] else { bail!("{}: not a vector store", i.line) };
                    let at = addr(0, &t.regs)?;
                    let words: Vec<u8> = rs.iter().flat_map(|&r| (t.regs[r] as u32).to_le_bytes()).collect();
                    mem.span(at, words.len()).with_context(|| i.line.clone())?.copy_from_slice(&words);
                    None
                }
                // d = (bf16(a) << 16) | bf16(b): the first source in the upper half.
                "cvt.rn.bf16x2.f32" => {
                    let hi = bf16_nearest_even(f(v(1)?)) as u64;
                    let lo = bf16_nearest_even(f(v(2)?)) as u64;
                    Some((hi << 16) | lo)
                }
                "ld.shared.f32" => {
                    let at = (addr(1, &t.regs)? as u32) as usize;
                    let b = shared.get(at..at + 4).ok_or_else(|| anyhow!("{}: shared address {at} outside", i.line))?;
                    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
                }
                "st.shared.f32" => {
                    let at = (addr(0, &t.regs)? as u32) as usize;
                    let x = u(v(1)?);
                    let len = shared.len();
                    shared
                        .get_mut(at..at + 4)
                        .ok_or_else(|| anyhow!("{}: shared address {at} outside {len} bytes", i.line))?
                        .copy_from_slice(&x.to_le_bytes());
                    None
                }
                "add.u32" => Some(u(v(1)?).wrapping_add(u(v(2)?)) as u64),
                "sub.u32" => Some(u(v(1)?).wrapping_sub(u(v(2)?)) as u64),
                "mul.lo.u32" => Some(u(v(1)?).wrapping_mul(u(v(2)?)) as u64),
                "mad.lo.u32" => Some(u(v(1)?).wrapping_mul(u(v(2)?)).wrapping_add(u(v(3)?)) as u64),
                "div.u32" | "rem.u32" => {
                    let (a, b) = (u(v(1)?), u(v(2)?));
                    if b == 0 {
                        bail!("{}: division by zero", i.line);
                    }
                    Some(if i.op == "div.u32" { a / b } else { a % b } as u64)
                }
                "and.b32" => Some((u(v(1)?) & u(v(2)?)) as u64),
                "shr.u32" => Some(u(v(1)?).checked_shr(u(v(2)?)).unwrap_or(0) as u64),
                "shl.b32" => Some(u(v(1)?).checked_shl(u(v(2)?)).unwrap_or(0) as u64),
                "min.u32" => Some(u(v(1)?).min(u(v(2)?)) as u64),
                "mul.wide.u32" => Some(u(v(1)?) as u64 * u(v(2)?) as u64),
                "add.s64" => Some(v(1)?.wrapping_add(v(2)?)),
                "sub.s64" => Some(v(1)?.wrapping_sub(v(2)?)),
                "and.pred" => Some(((v(1)? != 0) && (v(2)? != 0)) as u64),
                "or.pred" => Some(((v(1)? != 0) || (v(2)? != 0)) as u64),
                "selp.b64" => Some(if v(3)? != 0 { v(1)? } else { v(2)? }),
                // (`add.f32` may contract only with a multiply feeding it; the block reductions'
                // operands come from shuffles and shared memory, so it rounds as `.rn` does.)
                "add.rn.f32" | "add.f32" => Some((f(v(1)?) + f(v(2)?)).to_bits() as u64),
                "sub.rn.f32" => Some((f(v(1)?) - f(v(2)?)).to_bits() as u64),
                // PTX max: the other operand where one is NaN, as f32::max.
                "max.f32" => Some(f(v(1)?).max(f(v(2)?)).to_bits() as u64),
                "mul.rn.f32" => Some((f(v(1)?) * f(v(2)?)).to_bits() as u64),
                "neg.f32" => Some((u(v(1)?) ^ 0x8000_0000) as u64),
                "div.rn.f32" => Some((f(v(1)?) / f(v(2)?)).to_bits() as u64),
                // IEEE square root, correctly rounded as `.rn` asks.
                "sqrt.rn.f32" => Some(f(v(1)?).sqrt().to_bits() as u64),
                "fma.rn.f32" => Some(f(v(1)?).mul_add(f(v(2)?), f(v(3)?)).to_bits() as u64),
                op if op.starts_with("setp.") && op.ends_with(".u32") => {
                    let (a, b) = (u(v(1)?), u(v(2)?));
                    let r = match &op[5..op.len() - 4] {
                        "lt" => a < b,
                        "le" => a <= b,
                        "gt" => a > b,
                        "ge" => a >= b,
                        "eq" => a == b,
                        "ne" => a != b,
                        c => bail!("{}: comparison {c} is not interpreted", i.line),
                    };
                    Some(r as u64)
                }
                _ => bail!("instruction `{}` is not interpreted", i.line),
            };
            if let (Some(x), Some(d)) = (out, dst) {
                t.regs[d] = x;
            }
        }
    }
}

/// `cvt.rn.bf16.f32`: the nearest bf16, ties to even, a NaN as the canonical `0x7FFF`.
fn bf16_nearest_even(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7FFF;
    }
    let b = x.to_bits();
    ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

struct Thread {
    regs: Vec<u64>,
    pc: usize,
    done: bool,
    tid: [u32; 3],
    /// A butterfly shuffle it stopped at: (destination register, its value, the lane mask).
    shuffle: Option<(usize, u32, u32)>,
}

/// Completes the butterfly shuffles the block's threads stopped at: each gets the value of the
/// lane its mask names in its warp (warps of 32 consecutive linear thread ids), which must have
/// stopped at a shuffle too.
fn exchange_shuffles(threads: &mut [Thread], block: [u32; 3]) -> Result<()> {
    let linear = |t: &Thread| (t.tid[0] + block[0] * (t.tid[1] + block[1] * t.tid[2])) as usize;
    let offered: HashMap<usize, u32> =
        threads.iter().filter_map(|t| t.shuffle.map(|(_, value, _)| (linear(t), value))).collect();
    for t in threads.iter_mut() {
        let Some((d, _, mask)) = t.shuffle.take() else { continue };
        let lane = linear(t);
        let partner = (lane & !31) | ((lane & 31) ^ mask as usize);
        let got =
            offered.get(&partner).ok_or_else(|| anyhow!("lane {lane}'s shuffle: lane {partner} is not at one"))?;
        t.regs[d] = *got as u64;
    }
    Ok(())
}

struct Ids {
    ntid: [u32; 3],
    ctaid: [u32; 3],
    nctaid: [u32; 3],
}

/// Runs phase `phase` of a lowered program launch by launch in the interpreter, its arena
/// cleared and its load-time constants written as the backend does, after writing the named
/// f32 leaves; returns the arena's memory and base address. Only programs whose kernels use
/// the interpreted instructions run (elementwise chains, copies, the simple matrix product and
/// the split-K sum).
pub fn run_lowered(
    lowered: &alpha_cuda::lower::Lowered,
    phase: usize,
    leaves: &[(&str, Vec<f32>)],
) -> Result<(Memory, u64)> {
    run_lowered_with(lowered, phase, leaves, Schedule::Ascending)
}

/// [`run_lowered`], every block's threads run in `schedule`'s order.
pub fn run_lowered_with(
    lowered: &alpha_cuda::lower::Lowered,
    phase: usize,
    leaves: &[(&str, Vec<f32>)],
    schedule: Schedule,
) -> Result<(Memory, u64)> {
    use alpha_cuda::lower::LArg;
    let mut mem = Memory::new();
    let base = mem.alloc_zeroed(lowered.arena);
    for (off, bytes) in &lowered.inits {
        mem.write_bytes(base + *off as u64, bytes);
    }
    let g = &lowered.plan.program.graph;
    for (name, data) in leaves {
        let v = g
            .nodes
            .iter()
            .position(
                |n| matches!(&n.op, alpha_ir::Op::Param { name: p, .. } | alpha_ir::Op::Input { name: p } if p == name),
            )
            .map(|i| alpha_ir::Value { node: i as u32, index: 0 })
            .ok_or_else(|| anyhow!("no leaf named {name}"))?;
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        mem.write_bytes(base + lowered.plan.slot(v).offset as u64, &bytes);
    }
    for l in &lowered.phases[phase] {
        let k = &lowered.kernels[l.kernel];
        let module = Module::parse(&k.render(), k.dynamic_shared)?;
        let args: Vec<u64> = l
            .args
            .iter()
            .map(|a| match *a {
                LArg::Ptr(off) => base + off as u64,
                LArg::U32(x) => x as u64,
                LArg::U64(x) => x,
            })
            .collect();
        module
            .launch_3d([l.grid.0, l.grid.1, l.grid.2], [l.block.0, l.block.1, l.block.2], &args, &mut mem, schedule)
            .with_context(|| lowered.describe(l))?;
    }
    Ok((mem, base))
}
