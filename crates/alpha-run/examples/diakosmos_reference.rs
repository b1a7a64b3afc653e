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

use alpha_run::checkpoint::{self, Tensors};
use alpha_run::session::config_hash;
use alpha_run::Device;
use alpha_systems::diakosmos::Diakosmos;
use alpha_systems::diakosmos_wire::GROUPS;
use alpha_systems::System;
use anyhow::{anyhow, bail, Context, Result};
use common::{gradient_outputs, meta_for, prepared_windows, seeded_state, train_updates, write_out, Updates};

struct Args {
    init: Option<PathBuf>,
    seed: u64,
    geometry: Diakosmos,
    data: PathBuf,
    split: alpha_data::Split,
    first: u64,
    windows: usize,
    device: Device,
    save_initial: Option<PathBuf>,
    updates: u64,
    batch: usize,
    accumulate: usize,
    save: Option<PathBuf>,
    out: PathBuf,
}

fn parse() -> Result<Args> {
    let mut a = Args {
        init: None,
        seed: 1,
        geometry: Diakosmos::default(),
        data: PathBuf::new(),
        split: alpha_data::Split::Valid,
        first: 0,
        windows: 1,
        device: Device::Cpu,
        save_initial: None,
        updates: 0,
        batch: 1,
        accumulate: 1,
        save: None,
        out: PathBuf::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--f32-products" {
            a.geometry.bf16 = false;
            continue;
        }
        let value = it.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        let num = |v: &str| -> Result<u64> { v.parse().map_err(|_| anyhow!("{flag} takes a whole number, not '{v}'")) };
        match flag.as_str() {
            "--init" => a.init = Some(value.into()),
            "--seed" => a.seed = num(&value)?,
            "--blocks" => a.geometry.blocks = num(&value)? as usize,
            "--phasors" => a.geometry.phasors = num(&value)? as usize,
            "--harmonics" => a.geometry.harmonics = num(&value)? as usize,
            "--context" => a.geometry.context = num(&value)? as usize,
            "--data" => a.data = value.into(),
            "--split" => {
                a.split = match value.as_str() {
                    "valid" => alpha_data::Split::Valid,
                    "train" => alpha_data::Split::Train,
                    other => bail!("--split is valid or train, not '{other}'"),
                }
            }
            "--first" => a.first = num(&value)?,
            "--windows" => a.windows = num(&value)? as usize,
            "--device" => a.device = value.parse().map_err(|e: String| anyhow!(e))?,
            "--save-initial" => a.save_initial = Some(value.into()),
            "--updates" => a.updates = num(&value)?,
            "--batch" => a.batch = num(&value)? as usize,
            "--accumulate" => a.accumulate = num(&value)? as usize,
            "--save" => a.save = Some(value.into()),
            "--out" => a.out = value.into(),
            other => bail!("unknown option {other} (the file's doc comment lists them)"),
        }
    }
    if a.data.as_os_str().is_empty() || a.out.as_os_str().is_empty() {
        bail!("--data and --out are required");
    }
    let g = &a.geometry;
    if g.blocks == 0
        || g.phasors == 0
        || g.harmonics == 0
        || g.context == 0
        || a.windows == 0
        || a.batch == 0
        || a.accumulate == 0
    {
        bail!("blocks, phasors, harmonics, context, windows, batch and accumulate must be at least 1");
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
    let args = parse()?;
    let source = Source::open(&args.data)?;
    // The starting state: a checkpoint's tensors, or Alpha's initializers at the given geometry.
    let (system, mut state, mut cursor, step) = match &args.init {
        Some(path) => {
            let ckpt = checkpoint::load(path)?;
            if ckpt.meta.system != "diakosmos" {
                bail!("{}: a checkpoint of {}, not of diakosmos", path.display(), ckpt.meta.system);
            }
            let system = geometry_of(&ckpt.tensors, args.geometry.context, args.geometry.bf16, path)?;
            let cursor: alpha_data::Cursor = serde_json::from_str(&ckpt.meta.cursor).unwrap_or_default();
            (system, ckpt.tensors, cursor, ckpt.meta.step)
        }
        None => {
            let state = seeded_state(&args.geometry, args.seed)?;
            (args.geometry.clone(), state, alpha_data::Cursor::default(), 0)
        }
    };
    eprintln!(
        "diakosmos: {} blocks, {} phasors a group, {} harmonics a head, context {}",
        system.blocks, system.phasors, system.harmonics, system.context
    );
    let t = system.context;

    if let Some(path) = &args.save_initial {
        let program = system.learner(1).training_program(system.model(1)?)?;
        checkpoint::save(
            path,
            &meta_for(&system, config_hash(&system, &program), 0, cursor, args.seed, &args.data),
            &state,
        )?;
        eprintln!("wrote {}", path.display());
    }

    let mut out: BTreeMap<String, (Vec<usize>, Vec<f32>)> = BTreeMap::new();
    let mut meta: HashMap<String, String> = HashMap::new();
    if args.updates > 0 {
        let Source::Prepared(dir) = &source else {
            bail!("--updates reads the training split of a prepared directory")
        };
        if step != 0 {
            // The updates run a fresh schedule from update 1, which only a step-0 state has.
            bail!("--updates starts the learner at update 1: give a step-0 checkpoint (this one is at step {step})");
        }
        let u = Updates {
            data: dir,
            device: args.device,
            updates: args.updates,
            batch: args.batch,
            accumulate: args.accumulate,
            seed: args.seed,
        };
        let program;
        (state, cursor, program) = train_updates(&system, &u, &state, cursor, &mut out, &mut meta)?;
        if let Some(path) = &args.save {
            let hash = config_hash(&system, &program);
            checkpoint::save(path, &meta_for(&system, hash, args.updates, cursor, args.seed, &args.data), &state)?;
            eprintln!("wrote {}", path.display());
        }
    }

    let ws = source.windows(args.split, args.first, args.windows, t + 1)?;
    gradient_outputs(&system, args.device, &state, &ws, &mut out)?;
    for (k, v) in [
        ("blocks", system.blocks.to_string()),
        ("phasors", system.phasors.to_string()),
        ("harmonics", system.harmonics.to_string()),
        ("context", t.to_string()),
        ("data", args.data.display().to_string()),
        ("split", args.split.to_string()),
        ("first", args.first.to_string()),
        ("device", format!("{:?}", args.device)),
        ("products", if system.bf16 { "bf16 operands, f32 sums" } else { "f32" }.to_string()),
        ("init", args.init.as_ref().map_or(format!("seed {}", args.seed), |p| p.display().to_string())),
    ] {
        meta.insert(k.into(), v);
    }
    write_out(&args.out, &out, meta)?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}
