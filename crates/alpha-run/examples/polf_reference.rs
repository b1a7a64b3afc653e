//! Alpha's own numbers for Polf, written out for `bench/polf_torch.py` to hold its independent
//! PyTorch model against: the loss and every parameter's gradient on given windows of a
//! checkpoint, and (optionally first) a few training updates with the system's learner.
//!
//! ```text
//! cargo run --release -p alpha-run --example polf_reference -- \
//!     (--init CKPT | --seed S [--blocks B --width C --heads H --kv-heads K --mlp M --vocab V]) \
//!     [--context T] --data DIR [--split valid|train] [--first I] [--windows N] \
//!     [--device cpu|cuda] [--save-initial CKPT0] [--updates K --batch B [--save CKPT]] \
//!     [--f32-products] --out OUT.safetensors
//! ```
//!
//! The model is the system's own code ([`alpha_systems::polf::Polf`]) at the geometry of
//! `--init`'s tensors (blocks counted; width and vocabulary from `tok_emb.weight`; query heads
//! from a block's `q_gain`; key/value heads from `c_k`'s outputs over the head width; the MLP's
//! width from `fc`), or at the given one from Alpha's initializers with `--seed`. The context is
//! not in the tensors (the rotary has no parameters), so it is `--context` (default 1,024).
//! `--f32-products` turns off the bf16 rounding of the products' operands ([`Polf::bf16`]).
//!
//! With `--updates K`, the state first trains for K updates of `--batch` windows from the
//! training split's stream (from the checkpoint's cursor) with `Polf::learner(K)`: Adam on the
//! tied embedding, Muon on the block matrices with its momentum ramp, Adam on the controls, and
//! the warmdown over the last min(1,200, K) updates, so a short run warms down over all of it.
//! `train_loss` (one an update) and the parameters after the last update (`after:<name>`) are
//! written; `--save` writes the trained state as a checkpoint, `--save-initial` the starting
//! state first (a fresh one, from `--seed`, as `alpha train --save-initial` would).
//!
//! Then the gradient: on N windows of T + 1 tokens, window i starting at token (I + i)·T of the
//! `--split` (the held-out split by default). Written: `windows` [N, T + 1] (the token ids, so
//! the reader can check it read the same), `loss` [1] (the mean over N·T positions) and
//! `grad:<name>` for every parameter; the metadata holds the geometry and the windows' origin.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use alpha_run::checkpoint::{self, Tensors};
use alpha_run::session::config_hash;
use alpha_run::Device;
use alpha_systems::polf::Polf;
use alpha_systems::System;
use anyhow::{anyhow, bail, Result};
use common::{gradient_outputs, meta_for, prepared_windows, seeded_state, train_updates, write_out, Updates};

struct Args {
    init: Option<PathBuf>,
    seed: u64,
    geometry: Polf,
    data: PathBuf,
    split: alpha_data::Split,
    first: u64,
    windows: usize,
    device: Device,
    save_initial: Option<PathBuf>,
    updates: u64,
    batch: usize,
    save: Option<PathBuf>,
    out: PathBuf,
}

fn parse() -> Result<Args> {
    let mut a = Args {
        init: None,
        seed: 1,
        geometry: Polf::default(),
        data: PathBuf::new(),
        split: alpha_data::Split::Valid,
        first: 0,
        windows: 1,
        device: Device::Cpu,
        save_initial: None,
        updates: 0,
        batch: 1,
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
        let g = &mut a.geometry;
        match flag.as_str() {
            "--init" => a.init = Some(value.into()),
            "--seed" => a.seed = num(&value)?,
            "--blocks" => g.blocks = num(&value)? as usize,
            "--width" => g.width = num(&value)? as usize,
            "--heads" => g.heads = num(&value)? as usize,
            "--kv-heads" => g.kv_heads = num(&value)? as usize,
            "--mlp" => g.mlp = num(&value)? as usize,
            "--vocab" => g.vocab = num(&value)? as usize,
            "--context" => g.context = num(&value)? as usize,
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
            "--save" => a.save = Some(value.into()),
            "--out" => a.out = value.into(),
            other => bail!("unknown option {other} (the file's doc comment lists them)"),
        }
    }
    if a.data.as_os_str().is_empty() || a.out.as_os_str().is_empty() {
        bail!("--data and --out are required");
    }
    let g = &a.geometry;
    if [g.blocks, g.width, g.heads, g.kv_heads, g.mlp, g.vocab, g.context, a.windows, a.batch].contains(&0) {
        bail!("the geometry, windows and batch must all be at least 1");
    }
    if !g.width.is_multiple_of(g.heads) || !g.heads.is_multiple_of(g.kv_heads) {
        bail!("the width must split into the query heads, and those into the key/value heads");
    }
    Ok(a)
}

/// The geometry of a checkpoint's tensors, at `context`.
fn geometry_of(tensors: &Tensors, context: usize, bf16: bool, path: &Path) -> Result<Polf> {
    let shape = |name: &str| {
        tensors
            .get(name)
            .map(|t| t.0.clone())
            .ok_or_else(|| anyhow!("{}: no tensor {name}; is this a Polf checkpoint of Alpha's?", path.display()))
    };
    let embed = shape("tok_emb.weight")?;
    let (vocab, width) = (embed[0], embed[1]);
    let blocks = (0..).take_while(|i| tensors.contains_key(&format!("blocks.{i}.attn.c_q.weight"))).count();
    let heads = shape("blocks.0.attn.q_gain")?[0];
    let kv_width = shape("blocks.0.attn.c_k.weight")?[1];
    let mlp = shape("blocks.0.mlp.fc.weight")?[1];
    if heads == 0 || width % heads != 0 || kv_width % (width / heads) != 0 {
        bail!("{}: {heads} heads do not split a width of {width} and key/values of {kv_width}", path.display());
    }
    Ok(Polf { blocks, width, heads, kv_heads: kv_width / (width / heads), mlp, vocab, context, bf16 })
}

fn main() -> Result<()> {
    let args = parse()?;
    // The starting state: a checkpoint's tensors, or Alpha's initializers at the given geometry.
    let (system, mut state, mut cursor, step) = match &args.init {
        Some(path) => {
            let ckpt = checkpoint::load(path)?;
            if ckpt.meta.system != "polf" {
                bail!("{}: a checkpoint of {}, not of polf", path.display(), ckpt.meta.system);
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
    let t = system.context;
    eprintln!(
        "polf: {} blocks of {}, {} query / {} key-value heads, MLP {}, vocabulary {}, context {t}",
        system.blocks, system.width, system.heads, system.kv_heads, system.mlp, system.vocab
    );

    if let Some(path) = &args.save_initial {
        let program = system.learner(1).training_program(system.model(1)?)?;
        let hash = config_hash(&system, &program);
        checkpoint::save(path, &meta_for(&system, hash, 0, cursor, args.seed, &args.data), &state)?;
        eprintln!("wrote {}", path.display());
    }

    let mut out: BTreeMap<String, (Vec<usize>, Vec<f32>)> = BTreeMap::new();
    let mut meta: HashMap<String, String> = HashMap::new();
    if args.updates > 0 {
        if step != 0 {
            // The updates run a fresh schedule from update 1, which only a step-0 state has.
            bail!("--updates starts the learner at update 1: give a step-0 checkpoint (this one is at step {step})");
        }
        let u = Updates {
            data: &args.data,
            device: args.device,
            updates: args.updates,
            batch: args.batch,
            accumulate: 1,
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

    let ws = prepared_windows(&args.data, args.split, args.first, args.windows, t + 1)?;
    gradient_outputs(&system, args.device, &state, &ws, &mut out)?;
    for (k, v) in [
        ("blocks", system.blocks.to_string()),
        ("width", system.width.to_string()),
        ("heads", system.heads.to_string()),
        ("kv_heads", system.kv_heads.to_string()),
        ("mlp", system.mlp.to_string()),
        ("vocab", system.vocab.to_string()),
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
