//! Alpha's own numbers for Polf, written out for `bench/polf_torch.py` to hold its independent
//! PyTorch model against: the loss and every parameter's gradient on given windows of a
//! checkpoint, and (optionally first) a few training updates with the system's learner.
//!
//! ```text
//! cargo run --release -p alpha-run --example polf_reference -- \
//!     (--init CKPT | --seed S [--blocks B --width C --heads H --kv-heads K --mlp M --vocab V]) \
//!     [--context T] --data DIR [--split valid|train] [--first I] [--windows N] \
//!     [--device cpu|cuda] [--save-initial CKPT0] [--updates K --batch B [--accumulate A] [--save CKPT]] \
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
use std::path::Path;

use alpha_run::checkpoint::Tensors;
use alpha_systems::polf::Polf;
use anyhow::{anyhow, bail, Result};
use common::{gradient_outputs, prepared_windows, run_updates, starting_state, whole, write_out, RunArgs};

struct Args {
    geometry: Polf,
    run: RunArgs,
}

fn parse() -> Result<Args> {
    let mut a = Args { geometry: Polf::default(), run: RunArgs::default() };
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
        let num = || whole(&flag, &value).map(|n| n as usize);
        let g = &mut a.geometry;
        match flag.as_str() {
            "--blocks" => g.blocks = num()?,
            "--width" => g.width = num()?,
            "--heads" => g.heads = num()?,
            "--kv-heads" => g.kv_heads = num()?,
            "--mlp" => g.mlp = num()?,
            "--vocab" => g.vocab = num()?,
            "--context" => g.context = num()?,
            other => bail!("unknown option {other} (the file's doc comment lists them)"),
        }
    }
    a.run.check()?;
    let g = &a.geometry;
    if [g.blocks, g.width, g.heads, g.kv_heads, g.mlp, g.vocab, g.context].contains(&0) {
        bail!("the geometry must be at least 1 throughout");
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
    let Args { geometry, run: args } = parse()?;
    let (context, bf16) = (geometry.context, geometry.bf16);
    let (system, state, cursor, step) =
        starting_state("polf", &args, &geometry, |tensors, path| geometry_of(tensors, context, bf16, path))?;
    let t = system.context;
    eprintln!(
        "polf: {} blocks of {}, {} query / {} key-value heads, MLP {}, vocabulary {}, context {t}",
        system.blocks, system.width, system.heads, system.kv_heads, system.mlp, system.vocab
    );

    let mut out: BTreeMap<String, (Vec<usize>, Vec<f32>)> = BTreeMap::new();
    let mut meta: HashMap<String, String> = HashMap::new();
    let (state, _) = run_updates(&system, &args, &args.data, (state, cursor, step), &mut out, &mut meta)?;

    let ws = prepared_windows(&args.data, args.split, args.first, args.windows, t + 1)?;
    gradient_outputs(&system, args.device, &state, &ws, &mut out)?;
    let geometry_meta = [
        ("blocks", system.blocks.to_string()),
        ("width", system.width.to_string()),
        ("heads", system.heads.to_string()),
        ("kv_heads", system.kv_heads.to_string()),
        ("mlp", system.mlp.to_string()),
        ("vocab", system.vocab.to_string()),
    ];
    for (k, v) in geometry_meta.into_iter().chain(args.meta(t, system.bf16)) {
        meta.insert(k.into(), v);
    }
    write_out(&args.out, &out, meta)?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}
