//! What the reference examples (`diakosmos_reference`, `polf_reference`) share: the starting
//! state of a system, its windows of a prepared split, the loss and gradients on them, the
//! checkpoint metadata they write and the safetensors file of Alpha's numbers that a PyTorch
//! model is held against, and a few updates with the system's learner from a step-0 state. Each
//! example keeps what is its system's own: its geometry flags and reading its geometry off a
//! checkpoint.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use alpha_ir::Program;
use alpha_learn::gradient_program;
use alpha_learn::init::initial_leaves;
use alpha_run::checkpoint::{Meta, Tensors};
use alpha_run::session::{backend_for, persistent};
use alpha_run::{Backend, Device};
use alpha_systems::System;
use anyhow::{anyhow, bail, Result};
use safetensors::tensor::{Dtype, TensorView};

/// Alpha's initializers' state of `system` at `seed`, as `alpha train --save-initial` writes it.
pub fn seeded_state(system: &dyn System, seed: u64) -> Result<Tensors> {
    let program = alpha_learn::inference_program(system.model(1)?)?;
    let shapes: HashMap<String, Vec<usize>> = persistent(&program).into_iter().map(|(n, s, _)| (n, s)).collect();
    Ok(initial_leaves(&program.graph, seed).into_iter().map(|(n, v)| (n.clone(), (shapes[&n].clone(), v))).collect())
}

/// Write `state` into a training program's backend; optimizer state the checkpoint does not
/// hold starts as a fresh run's does (from `seed`'s initializers).
pub fn write_training_state(backend: &mut dyn Backend, program: &Program, state: &Tensors, seed: u64) -> Result<()> {
    let fresh = initial_leaves(&program.graph, seed);
    for (name, shape, is_param) in persistent(program) {
        match state.get(&name) {
            Some((s, v)) if *s == shape => backend.write(&name, v)?,
            Some((s, _)) => bail!("{name} has shape {s:?}; the model needs {shape:?}"),
            None if is_param => bail!("the checkpoint lacks parameter {name}"),
            None => backend.write(&name, &fresh.iter().find(|(n, _)| *n == name).expect("a leaf").1)?,
        }
    }
    Ok(())
}

/// N windows of `len` tokens of a prepared split, window i at token (first + i)·(len − 1).
pub fn prepared_windows(
    dir: &Path,
    split: alpha_data::Split,
    first: u64,
    n: usize,
    len: usize,
) -> Result<Vec<Vec<u32>>> {
    let stride = len as u64 - 1;
    let mut s = alpha_data::TokenStream::open(dir, split)?;
    (0..n as u64)
        .map(|i| {
            let mut buf = vec![0u32; len];
            s.read_at((first + i) * stride, &mut buf)?;
            Ok(buf)
        })
        .collect()
}

/// Inputs and targets of windows of T + 1 tokens: `[N·T]` each.
pub fn split_windows(ws: &[Vec<u32>]) -> (Vec<u32>, Vec<u32>) {
    let tokens = ws.iter().flat_map(|w| w[..w.len() - 1].iter().copied()).collect();
    let targets = ws.iter().flat_map(|w| w[1..].iter().copied()).collect();
    (tokens, targets)
}

/// A checkpoint's metadata after `step` updates of `context` tokens, as a run of `step` would
/// record it (its learner's schedule over that many).
pub fn meta_for(
    system: &dyn System,
    hash: String,
    step: u64,
    cursor: alpha_data::Cursor,
    seed: u64,
    data: &Path,
) -> Meta {
    let steps = step.max(1);
    Meta {
        system: system.name().into(),
        config_hash: hash,
        step,
        cursor: serde_json::to_string(&cursor).expect("a cursor serialises"),
        seed,
        schedule: system.learner(steps).describe(),
        schedule_total: steps,
        peak: None,
        tokens: step * (system.context() as u64),
        parent: None,
        data: data.display().to_string(),
        budget: None,
    }
}

/// The example's output: F32 tensors by name and the metadata.
pub fn write_out(
    path: &Path,
    tensors: &BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    meta: HashMap<String, String>,
) -> Result<()> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, (s, d))| (n.clone(), s.clone(), d.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, TensorView)> = bytes
        .iter()
        .map(|(n, s, b)| Ok((n.clone(), TensorView::new(Dtype::F32, s.clone(), b)?)))
        .collect::<Result<_, safetensors::SafeTensorError>>()?;
    safetensors::serialize_to_file(views, Some(meta), path)?;
    Ok(())
}

/// The mean loss and every parameter's gradient of `state` on windows `ws` of T + 1 tokens,
/// put in `out` as `loss` [1], `grad:<name>` and `windows` [N, T + 1] (the ids, so a reader can
/// check it read the same windows).
pub fn gradient_outputs(
    system: &dyn System,
    device: Device,
    state: &Tensors,
    ws: &[Vec<u32>],
    out: &mut BTreeMap<String, (Vec<usize>, Vec<f32>)>,
) -> Result<()> {
    let (tokens, targets) = split_windows(ws);
    let program = gradient_program(system.model(ws.len())?)?;
    let mut backend = backend_for(device, &program)?;
    for (name, _, _) in persistent(&program) {
        let (_, v) = state.get(&name).ok_or_else(|| anyhow!("no tensor {name} to start from"))?;
        backend.write(&name, v)?;
    }
    backend.write_ids("tokens", &tokens)?;
    backend.write_ids("targets", &targets)?;
    let started = std::time::Instant::now();
    backend.run(&program.phases[0].name)?;
    let loss = backend.output("loss")?[0];
    eprintln!("loss {loss:.6} on {} windows ({:.1} s)", ws.len(), started.elapsed().as_secs_f64());
    for (name, shape, _) in persistent(&program) {
        out.insert(format!("grad:{name}"), (shape, backend.output(&format!("grad:{name}"))?));
    }
    out.insert("loss".into(), (vec![1], vec![loss]));
    let flat: Vec<f32> = ws.iter().flatten().map(|&x| x as f32).collect();
    out.insert("windows".into(), (vec![ws.len(), ws.first().map_or(0, Vec::len)], flat));
    Ok(())
}

/// What [`train_updates`] runs: `updates` updates of `accumulate` micro-batches of `batch`
/// windows from the training split of the prepared `data`, from `cursor`, on `device`.
pub struct Updates<'a> {
    pub data: &'a Path,
    pub device: Device,
    pub updates: u64,
    pub batch: usize,
    pub accumulate: usize,
    pub seed: u64,
}

/// Trains `state` (a step-0 state: the learner starts at update 1) for `u.updates` updates with
/// `system`'s learner, filling each micro-batch window after window as the trainer does; returns
/// the state after and the stream's cursor, and adds to `out` the parameters after the last
/// update (`after:<name>`), `train_loss` (one an update) and `grad_norm` where the learner clips,
/// and to `meta` the run's settings. `--save` is the caller's (it needs the program's hash).
pub fn train_updates(
    system: &dyn System,
    u: &Updates,
    state: &Tensors,
    cursor: alpha_data::Cursor,
    out: &mut BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    meta: &mut HashMap<String, String>,
) -> Result<(Tensors, alpha_data::Cursor, Program)> {
    let t = system.context();
    let mut learner = system.learner(u.updates);
    learner.accumulation = u.accumulate;
    let program = learner.training_program(system.model(u.batch)?)?;
    let mut backend = backend_for(u.device, &program)?;
    write_training_state(backend.as_mut(), &program, state, u.seed)?;
    let mut stream = alpha_data::TokenStream::open(u.data, alpha_data::Split::Train)?;
    stream.seek(cursor)?;
    let clipped = program.outputs.contains_key("grad_norm");
    let (mut losses, mut norms) = (vec![], vec![]);
    for step in 1..=u.updates {
        for (name, x) in learner.scalars(step) {
            backend.write(name, &[x as f32])?;
        }
        let mut loss = 0.0;
        for _ in 0..u.accumulate {
            let ws: Vec<Vec<u32>> = (0..u.batch).map(|_| stream.next_window(t + 1)).collect::<Result<_, _>>()?;
            let (tokens, targets) = split_windows(&ws);
            backend.write_ids("tokens", &tokens)?;
            backend.write_ids("targets", &targets)?;
            backend.run(&program.phases[0].name)?;
            loss += backend.output("loss")?[0] / u.accumulate as f32;
        }
        if u.accumulate > 1 {
            backend.run("update")?;
        }
        losses.push(loss);
        if clipped {
            let norm = backend.output("grad_norm")?[0];
            eprintln!("update {step}/{}: loss {loss:.5}, gradient norm {norm:.4}", u.updates);
            norms.push(norm);
        } else {
            eprintln!("update {step}/{}: loss {loss:.5}", u.updates);
        }
    }
    let cursor = stream.cursor();
    let state = alpha_run::session::snapshot(backend.as_mut())?;
    for (name, shape, is_param) in persistent(&program) {
        if is_param {
            out.insert(format!("after:{name}"), (shape, state[&name].1.clone()));
        }
    }
    out.insert("train_loss".into(), (vec![losses.len()], losses));
    if clipped {
        out.insert("grad_norm".into(), (vec![norms.len()], norms));
    }
    meta.insert("updates".into(), u.updates.to_string());
    meta.insert("batch".into(), u.batch.to_string());
    meta.insert("accumulate".into(), u.accumulate.to_string());
    meta.insert("cursor_after".into(), serde_json::to_string(&cursor)?);
    Ok((state, cursor, program))
}

/// The flags both reference examples take (each adds its geometry's): where the state comes
/// from, the windows, the device, the updates and the files written.
pub struct RunArgs {
    pub init: Option<std::path::PathBuf>,
    pub seed: u64,
    pub data: std::path::PathBuf,
    pub split: alpha_data::Split,
    pub first: u64,
    pub windows: usize,
    pub device: Device,
    pub save_initial: Option<std::path::PathBuf>,
    pub updates: u64,
    pub batch: usize,
    pub accumulate: usize,
    pub save: Option<std::path::PathBuf>,
    pub out: std::path::PathBuf,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            init: None,
            seed: 1,
            data: Default::default(),
            split: alpha_data::Split::Valid,
            first: 0,
            windows: 1,
            device: Device::Cpu,
            save_initial: None,
            updates: 0,
            batch: 1,
            accumulate: 1,
            save: None,
            out: Default::default(),
        }
    }
}

/// `value` as a whole number for `flag`.
pub fn whole(flag: &str, value: &str) -> Result<u64> {
    value.parse().map_err(|_| anyhow!("{flag} takes a whole number, not '{value}'"))
}

impl RunArgs {
    /// Takes `flag`'s `value` if it is one of these flags; false for another.
    pub fn take(&mut self, flag: &str, value: &str) -> Result<bool> {
        let num = || whole(flag, value);
        match flag {
            "--init" => self.init = Some(value.into()),
            "--seed" => self.seed = num()?,
            "--data" => self.data = value.into(),
            "--split" => {
                self.split = match value {
                    "valid" => alpha_data::Split::Valid,
                    "train" => alpha_data::Split::Train,
                    other => bail!("--split is valid or train, not '{other}'"),
                }
            }
            "--first" => self.first = num()?,
            "--windows" => self.windows = num()? as usize,
            "--device" => self.device = value.parse().map_err(|e: String| anyhow!(e))?,
            "--save-initial" => self.save_initial = Some(value.into()),
            "--updates" => self.updates = num()?,
            "--batch" => self.batch = num()? as usize,
            "--accumulate" => self.accumulate = num()? as usize,
            "--save" => self.save = Some(value.into()),
            "--out" => self.out = value.into(),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The flags that must be given, and the counts that must be at least 1.
    pub fn check(&self) -> Result<()> {
        if self.data.as_os_str().is_empty() || self.out.as_os_str().is_empty() {
            bail!("--data and --out are required");
        }
        if [self.windows, self.batch, self.accumulate].contains(&0) {
            bail!("--windows, --batch and --accumulate must be at least 1");
        }
        Ok(())
    }

    /// The metadata every output carries about its windows and its state's origin.
    pub fn meta(&self, context: usize, bf16: bool) -> Vec<(&'static str, String)> {
        vec![
            ("context", context.to_string()),
            ("data", self.data.display().to_string()),
            ("split", self.split.to_string()),
            ("first", self.first.to_string()),
            ("device", format!("{:?}", self.device)),
            ("products", if bf16 { "bf16 operands, f32 sums" } else { "f32" }.to_string()),
            ("init", self.init.as_ref().map_or(format!("seed {}", self.seed), |p| p.display().to_string())),
        ]
    }
}

/// The starting state: `--init`'s checkpoint of `name` at the geometry `geometry_of` reads off
/// its tensors, or Alpha's initializers at `geometry` from `--seed`; with the stream's cursor and
/// the step. `--save-initial` writes it.
pub fn starting_state<S: System + Clone>(
    name: &str,
    args: &RunArgs,
    geometry: &S,
    geometry_of: impl Fn(&Tensors, &Path) -> Result<S>,
) -> Result<(S, Tensors, alpha_data::Cursor, u64)> {
    let (system, state, cursor, step) = match &args.init {
        Some(path) => {
            let ckpt = alpha_run::checkpoint::load(path)?;
            if ckpt.meta.system != name {
                bail!("{}: a checkpoint of {}, not of {name}", path.display(), ckpt.meta.system);
            }
            let system = geometry_of(&ckpt.tensors, path)?;
            let cursor: alpha_data::Cursor = serde_json::from_str(&ckpt.meta.cursor).unwrap_or_default();
            (system, ckpt.tensors, cursor, ckpt.meta.step)
        }
        None => (geometry.clone(), seeded_state(geometry, args.seed)?, alpha_data::Cursor::default(), 0),
    };
    if let Some(path) = &args.save_initial {
        let program = system.learner(1).training_program(system.model(1)?)?;
        let hash = alpha_run::session::config_hash(&system, &program);
        alpha_run::checkpoint::save(path, &meta_for(&system, hash, 0, cursor, args.seed, &args.data), &state)?;
        eprintln!("wrote {}", path.display());
    }
    Ok((system, state, cursor, step))
}

/// `--updates` from a step-0 `state` on the training split of the prepared `data` (and
/// `--save` of the result); returns the state and cursor after.
pub fn run_updates(
    system: &dyn System,
    args: &RunArgs,
    data: &Path,
    (state, cursor, step): (Tensors, alpha_data::Cursor, u64),
    out: &mut BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    meta: &mut HashMap<String, String>,
) -> Result<(Tensors, alpha_data::Cursor)> {
    if args.updates == 0 {
        return Ok((state, cursor));
    }
    if step != 0 {
        // The updates run a fresh schedule from update 1, which only a step-0 state has.
        bail!("--updates starts the learner at update 1: give a step-0 checkpoint (this one is at step {step})");
    }
    let u = Updates {
        data,
        device: args.device,
        updates: args.updates,
        batch: args.batch,
        accumulate: args.accumulate,
        seed: args.seed,
    };
    let (state, cursor, program) = train_updates(system, &u, &state, cursor, out, meta)?;
    if let Some(path) = &args.save {
        let hash = alpha_run::session::config_hash(system, &program);
        alpha_run::checkpoint::save(
            path,
            &meta_for(system, hash, args.updates, cursor, args.seed, &args.data),
            &state,
        )?;
        eprintln!("wrote {}", path.display());
    }
    Ok((state, cursor))
}
