//! Alpha's own numbers for Diakosmos, written out for `bench/diakosmos_torch.py` to hold its
//! independent PyTorch model against: the loss and every parameter's gradient on given windows
//! of a checkpoint, and (optionally first) a few training updates with the system's learner.
//!
//! ```text
//! cargo run --release -p alpha-run --example diakosmos_reference -- \
//!     (--init CKPT | --seed S [--blocks B --phasors P --harmonics H]) [--context T] \
//!     --data DIR|FILE [--split valid|train] [--first I] [--windows N] [--device cpu|cuda] \
//!     [--save-initial CKPT0] [--updates K --batch B [--accumulate A] [--save CKPT]] [--f32-products] \
//!     --out OUT.safetensors
//! ```
//!
//! The model is the system's own code ([`alpha_systems::diakosmos::Diakosmos`]) at the geometry
//! of `--init`'s tensors (blocks counted, phasors from the stream's width, harmonics from
//! `spectral_coeffs`), or at the given one from Alpha's initializers with `--seed`; the context
//! is not in the tensors (nothing in the model is positional), so it is `--context`
//! (default 2,048). The seed's geometry is the default; a small one checks in seconds.
//! `--f32-products` turns off the bf16 rounding of the three large products' operands
//! ([`Diakosmos::bf16`]), so the equations can be compared apart from that rounding.
//!
//! With `--updates K`, the checkpoint first trains for K updates of `--batch` windows from the
//! training split's stream (from the checkpoint's cursor), with `Diakosmos::learner(K)`: the
//! three optimizers, the schedule and the clip; with `--accumulate A`, an update is the mean
//! gradient of A such micro-batches, as `alpha train --accumulate` makes it. `train_loss` and `grad_norm` (one an update)
//! and the parameters after the last update (`after:<name>`) are written; `--save` writes the
//! trained state as a checkpoint. `--save-initial` writes the starting state first (a fresh
//! one, from `--seed`, as `alpha train --save-initial` would).
//!
//! Then the gradient: on N windows of T + 1 tokens, window i starting at token (I + i)·T of
//! the `--split` (the held-out split by default), or of the file's bytes when `--data` is a
//! raw file. Written: `windows` [N, T + 1] (the byte values, so the reader can check it read
//! the same), `loss` [1] (the mean over N·T positions) and `grad:<name>` for every parameter;
//! the metadata holds the geometry and where the windows came from.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use alpha_run::checkpoint::Tensors;
use alpha_systems::diakosmos::Diakosmos;
use alpha_systems::diakosmos_wire::GROUPS;
use anyhow::{anyhow, bail, Context, Result};
use common::{gradient_outputs, prepared_windows, run_updates, starting_state, whole, write_out, RunArgs};

struct Args {
    geometry: Diakosmos,
    run: RunArgs,
}

fn parse() -> Result<Args> {
    let mut a = Args { geometry: Diakosmos::default(), run: RunArgs::default() };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--f32-products" {
            a.geometry.bf16 = false;
            continue;
        }
        let value = it.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        if a.run.take(&flag, &value)? {
            continue;
        }
        let g = &mut a.geometry;
        match flag.as_str() {
            "--blocks" => g.blocks = whole(&flag, &value)? as usize,
            "--phasors" => g.phasors = whole(&flag, &value)? as usize,
            "--harmonics" => g.harmonics = whole(&flag, &value)? as usize,
            "--context" => g.context = whole(&flag, &value)? as usize,
            other => bail!("unknown option {other} (the file's doc comment lists them)"),
        }
    }
    a.run.check()?;
    let g = &a.geometry;
    if [g.blocks, g.phasors, g.harmonics, g.context].contains(&0) {
        bail!("blocks, phasors, harmonics and context must be at least 1");
    }
    Ok(a)
}

/// The geometry of a checkpoint's tensors, at `context`.
fn geometry_of(tensors: &Tensors, context: usize, bf16: bool, path: &Path) -> Result<Diakosmos> {
    let shape = |name: &str| {
        tensors
            .get(name)
            .map(|t| t.0.clone())
            .ok_or_else(|| anyhow!("{}: no tensor {name}; is this a Diakosmos checkpoint of Alpha's?", path.display()))
    };
    let width = shape("ln_f.weight")?[0];
    if width % (2 * GROUPS) != 0 {
        bail!("{}: a stream of {width} is not 7 groups of phasor pairs", path.display());
    }
    let blocks = (0..).take_while(|i| tensors.contains_key(&format!("blocks.{i}.gate_logit"))).count();
    let harmonics = shape("blocks.0.attn.spectral_coeffs")?[1];
    Ok(Diakosmos { blocks, phasors: width / (2 * GROUPS), harmonics, context, bf16 })
}

/// The token stream of `data` (a prepared directory), or a raw file's bytes.
enum Source {
    Prepared(PathBuf),
    Raw(Vec<u8>),
}

impl Source {
    fn open(data: &Path) -> Result<Source> {
        if alpha_run::data::is_prepared(data) {
            Ok(Source::Prepared(data.to_path_buf()))
        } else {
            Ok(Source::Raw(std::fs::read(data).with_context(|| format!("reading {}", data.display()))?))
        }
    }

    /// N windows of `len` tokens, window i at token (first + i)·(len − 1).
    fn windows(&self, split: alpha_data::Split, first: u64, n: usize, len: usize) -> Result<Vec<Vec<u32>>> {
        let stride = len as u64 - 1;
        match self {
            Source::Prepared(dir) => prepared_windows(dir, split, first, n, len),
            Source::Raw(bytes) => (0..n as u64)
                .map(|i| {
                    let at = ((first + i) * stride) as usize;
                    let w = bytes.get(at..at + len).ok_or_else(|| anyhow!("the file ends before window {i}"))?;
                    Ok(w.iter().map(|&b| u32::from(b)).collect())
                })
                .collect(),
        }
    }
}

fn main() -> Result<()> {
    let Args { geometry, run: args } = parse()?;
    let source = Source::open(&args.data)?;
    let (context, bf16) = (geometry.context, geometry.bf16);
    let (system, state, cursor, step) =
        starting_state("diakosmos", &args, &geometry, |tensors, path| geometry_of(tensors, context, bf16, path))?;
    eprintln!(
        "diakosmos: {} blocks, {} phasors a group, {} harmonics a head, context {}",
        system.blocks, system.phasors, system.harmonics, system.context
    );
    let t = system.context;

    let mut out: BTreeMap<String, (Vec<usize>, Vec<f32>)> = BTreeMap::new();
    let mut meta: HashMap<String, String> = HashMap::new();
    let state = match &source {
        Source::Prepared(dir) => run_updates(&system, &args, dir, (state, cursor, step), &mut out, &mut meta)?.0,
        Source::Raw(_) if args.updates > 0 => bail!("--updates reads the training split of a prepared directory"),
        Source::Raw(_) => state,
    };

    let ws = source.windows(args.split, args.first, args.windows, t + 1)?;
    gradient_outputs(&system, args.device, &state, &ws, &mut out)?;
    let geometry_meta = [
        ("blocks", system.blocks.to_string()),
        ("phasors", system.phasors.to_string()),
        ("harmonics", system.harmonics.to_string()),
    ];
    for (k, v) in geometry_meta.into_iter().chain(args.meta(t, system.bf16)) {
        meta.insert(k.into(), v);
    }
    write_out(&args.out, &out, meta)?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}
