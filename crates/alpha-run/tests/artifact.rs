//! The parameter-golf artifact of a trained miniature on real prose: each large matrix comes
//! back within its row's int8 bound, small tensors exactly as fp16 rounds them, control tensors
//! bit for bit; the artifact scores within a small margin of its checkpoint; a damaged or
//! truncated file is refused with an error that says so.

mod common;

use std::path::Path;

use alpha_ir::IrError;
use alpha_learn::{inference_program, Learner, Model};
use alpha_run::artifact::{self, Artifact, Stored, CLIP_QUANTILE, SMALL_ELEMENTS};
use alpha_run::checkpoint::{self, Checkpoint};
use alpha_run::session::restore;
use alpha_run::{train, CpuBackend, TrainResult};
use alpha_systems::{System, Tokens};
use half::f16;

/// `mini-muon` whose layer-norm gains are declared control tensors, so that all three of the
/// format's dtypes appear in one artifact.
struct WithControls(Box<dyn System>);

impl System for WithControls {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn description(&self) -> &'static str {
        self.0.description()
    }
    fn vocab(&self) -> usize {
        self.0.vocab()
    }
    fn tokens(&self) -> Tokens {
        self.0.tokens()
    }
    fn context(&self) -> usize {
        self.0.context()
    }
    fn default_batch(&self) -> usize {
        self.0.default_batch()
    }
    fn default_steps(&self) -> u64 {
        self.0.default_steps()
    }
    fn model(&self, batch: usize) -> Result<Model, IrError> {
        self.0.model(batch)
    }
    fn learner(&self, steps: u64) -> Learner {
        self.0.learner(steps)
    }
    fn control_tensors(&self) -> &'static [&'static str] {
        &["*ln*.weight"]
    }
}

/// The miniature with Muon trained for 40 updates on tiny-shakespeare (BPE 4,096).
fn trained(dir: &Path) -> Option<(TrainResult, std::path::PathBuf)> {
    let data = common::bpe_stream(dir)?;
    let r = train(&common::options("mini-muon", 4, 3, &data, &dir.join("run"), 40)).unwrap();
    Some((r, data))
}

/// The clip of a row, computed here independently of the exporter: a full sort and the linear
/// interpolation `torch.quantile` uses.
fn clip_of(row: &[f32]) -> f64 {
    let mut abs: Vec<f64> = row.iter().map(|w| w.abs() as f64).collect();
    abs.sort_by(f64::total_cmp);
    let pos = CLIP_QUANTILE * (abs.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(abs.len() - 1);
    abs[lo] + (pos - lo as f64) * (abs[hi] - abs[lo])
}

#[test]
fn an_artifact_round_trips_each_tensor_within_what_its_type_allows() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((r, _)) = trained(tmp.path()) else { return };
    let system = WithControls(alpha_systems::find("mini-muon").unwrap());
    let ckpt = checkpoint::load(&r.checkpoint).unwrap();
    let art = Artifact::from_checkpoint(&system, &ckpt, &r.checkpoint).unwrap();
    let (bytes, content) = art.encode().unwrap();
    let path = tmp.path().join("mini.art");
    artifact::write(&path, &bytes, false).unwrap();
    let (back, _, size) = artifact::read(&path).unwrap();
    assert_eq!(back, art, "the file reads back as written");
    let restored = back.dequantise();

    // Only parameters, every one of them.
    let program = inference_program(system.model(1).unwrap()).unwrap();
    let params: Vec<String> =
        alpha_run::session::persistent(&program).into_iter().filter(|p| p.2).map(|p| p.0).collect();
    assert_eq!(restored.len(), params.len());
    let (mut int8, mut fp16, mut fp32) = (0, 0, 0);
    let mut worst_ratio = 0f64;
    for e in &back.tensors {
        let (shape, w) = &ckpt.tensors[&e.name];
        let (_, got) = &restored[&e.name];
        assert_eq!(shape, &e.shape);
        let control = e.name.contains("ln") && e.name.ends_with(".weight");
        match &e.stored {
            Stored::F32(_) => {
                assert!(control, "{} kept in fp32 but is not a control tensor", e.name);
                assert!(w.iter().zip(got).all(|(a, b)| a.to_bits() == b.to_bits()), "{} not exact", e.name);
                fp32 += 1;
            }
            Stored::F16(_) => {
                assert!(!control && w.len() <= SMALL_ELEMENTS, "{} ({} elements) in fp16", e.name, w.len());
                for (a, b) in w.iter().zip(got) {
                    assert_eq!(*b, f16::from_f32(*a).to_f32(), "{}: {a} came back as {b}", e.name);
                    assert!((a - b).abs() <= a.abs() * 2f32.powi(-11) + 6e-8, "{}: {a} → {b}", e.name);
                }
                fp16 += 1;
            }
            Stored::Int8Rows { scales, .. } => {
                assert!(!control && w.len() > SMALL_ELEMENTS, "{} ({} elements) as int8", e.name, w.len());
                assert_eq!(scales.len(), shape[0]);
                let cols = w.len() / shape[0];
                for (r, (row, back_row)) in w.chunks(cols).zip(got.chunks(cols)).enumerate() {
                    let clip = clip_of(row);
                    let s = scales[r].to_f32() as f64;
                    // The scale is the clip over 127, to fp16's precision.
                    assert!(
                        (s - clip / 127.0).abs() <= s * 2f64.powi(-10),
                        "{} row {r}: scale {s}, clip {clip}",
                        e.name
                    );
                    for (&a, &b) in row.iter().zip(back_row) {
                        let (a, b) = (a as f64, b as f64);
                        let err = (a - b).abs();
                        if a.abs() <= clip {
                            assert!(err <= s / 2.0 * (1.0 + 1e-6), "{} row {r}: {a} → {b}, scale {s}", e.name);
                            worst_ratio = worst_ratio.max(err / s);
                        } else {
                            // Clipped: it comes back at the clip, on its side.
                            assert!(b.signum() == a.signum() && (b.abs() - clip).abs() <= s / 2.0 * (1.0 + 1e-6));
                        }
                    }
                }
                int8 += 1;
            }
        }
    }
    eprintln!(
        "{int8} int8 tensors, {fp16} fp16, {fp32} fp32; worst error {worst_ratio:.4} of a row's scale; {size} bytes (zlib of {content}) from {} parameters",
        params.len()
    );
    assert!(int8 > 0 && fp16 > 0 && fp32 > 0, "every dtype appears");
    assert!(worst_ratio > 0.4, "some value should sit near half a step from the grid ({worst_ratio})");
    // int8 and fp16 take a quarter and a half of f32's bytes; zlib takes some more off.
    let f32_bytes: usize = ckpt.tensors.iter().filter(|(n, _)| params.contains(n)).map(|(_, (_, v))| 4 * v.len()).sum();
    assert!(content * 2 < f32_bytes, "{content} bytes before zlib against {f32_bytes} as f32");
    assert!((size as usize) < content, "zlib did not shrink it: {size} of {content}");

    // Written once: a second write is refused unless forced, and leaves no temporary file.
    let e = artifact::write(&path, &bytes, false).unwrap_err().to_string();
    assert!(e.contains("exists already") && e.contains("--force"), "{e}");
    artifact::write(&path, &bytes, true).unwrap();
    assert!(!checkpoint::tmp_path(&path).exists());
}

#[test]
fn a_damaged_or_truncated_artifact_is_refused() {
    // The miniature's initial weights, as a checkpoint of them holds them: no data needed.
    let tmp = tempfile::tempdir().unwrap();
    let system = alpha_systems::find("mini-muon").unwrap();
    let program = inference_program(system.model(1).unwrap()).unwrap();
    let ckpt_path = tmp.path().join("initial.safetensors");
    let meta = checkpoint::Meta {
        system: system.name().into(),
        config_hash: alpha_run::session::config_hash(system.as_ref(), &program),
        step: 0,
        cursor: String::new(),
        seed: 3,
        schedule: String::new(),
        schedule_total: 0,
        peak: None,
        tokens: 0,
        parent: None,
        data: String::new(),
        budget: None,
    };
    let shapes = alpha_run::session::persistent(&program);
    let tensors = alpha_learn::init::initial_leaves(&program.graph, 3)
        .into_iter()
        .map(|(name, values)| {
            let shape = shapes.iter().find(|s| s.0 == name).unwrap().1.clone();
            (name, (shape, values))
        })
        .collect();
    checkpoint::save(&ckpt_path, &meta, &tensors).unwrap();
    let ckpt = checkpoint::load(&ckpt_path).unwrap();
    let (bytes, _) = Artifact::from_checkpoint(system.as_ref(), &ckpt, &ckpt_path).unwrap().encode().unwrap();
    let path = tmp.path().join("x.art");
    let n = bytes.len();
    // The error, or what was read (its name only: the weights would fill the screen).
    let refused = |bytes: &[u8]| match Artifact::decode(bytes, &path) {
        Ok(a) => format!("read as an artifact of {} tensors", a.tensors.len()),
        Err(e) => format!("{e:#}"),
    };
    // Any byte but the deflate stream's last, whose high bits may be padding after the end.
    for at in [0, 1, 2, 40, n / 3, n / 2, n - 4, n - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x10;
        let e = refused(&bad);
        assert!(e.contains("damaged or truncated"), "byte {at} of {n} flipped: {e}");
    }
    for len in [0, 1, 11, 100, n / 2, n - 4, n - 1] {
        let e = refused(&bytes[..len]);
        assert!(e.contains("damaged or truncated"), "cut to {len} bytes: {e}");
    }
    // A zlib stream of something else, and a checkpoint given as an artifact.
    let other = {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(b"{\"not\": \"an artifact\"}").unwrap();
        z.finish().unwrap()
    };
    let e = Artifact::decode(&other, &path).unwrap_err().to_string();
    assert!(e.contains("damaged or truncated") || e.contains("not an Alpha artifact"), "{e}");
    let e = format!("{:#}", artifact::read(&ckpt_path).unwrap_err());
    assert!(e.contains("damaged or truncated"), "{e}");
}

/// Held-out bits per byte of `ckpt`'s parameters.
fn bpb(system: &dyn System, ckpt: &Checkpoint, data: &Path) -> f64 {
    let program = inference_program(system.model(8).unwrap()).unwrap();
    let mut backend = CpuBackend::compile(&program).unwrap();
    restore(ckpt, system, &mut backend, "under test").unwrap();
    alpha_run::score::score(&mut backend, system, 8, data, 64).unwrap().bits_per_byte
}

#[test]
fn a_round_tripped_artifact_scores_within_a_small_margin_of_its_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((r, data)) = trained(tmp.path()) else { return };
    let system = alpha_systems::find("mini-muon").unwrap();
    let ckpt = checkpoint::load(&r.checkpoint).unwrap();
    let (bytes, _) = Artifact::from_checkpoint(system.as_ref(), &ckpt, &r.checkpoint).unwrap().encode().unwrap();
    let path = tmp.path().join("mini.art");
    artifact::write(&path, &bytes, false).unwrap();
    let (art, sha, _) = artifact::read(&path).unwrap();
    // The artifact finds the checkpoint it was made from.
    let (source, _) = artifact::source_checkpoint(&art).expect("the source checkpoint is where it was");
    assert_eq!(source.sha256, ckpt.sha256);

    let untrained = {
        let mut c = ckpt.clone();
        for (name, values) in
            alpha_learn::init::initial_leaves(&inference_program(system.model(1).unwrap()).unwrap().graph, 3)
        {
            let shape = c.tensors[&name].0.clone();
            c.tensors.insert(name, (shape, values));
        }
        bpb(system.as_ref(), &c, &data)
    };
    let before = bpb(system.as_ref(), &ckpt, &data);
    let after = bpb(system.as_ref(), &art.as_checkpoint(sha), &data);
    eprintln!(
        "held-out bits per byte: untrained {untrained:.4}, checkpoint {before:.4}, artifact {after:.4} ({:+.5})",
        after - before
    );
    assert!(before < untrained - 0.5, "the miniature did not learn ({untrained} → {before})");
    assert!((after - before).abs() < 0.01, "the artifact scores {after}, its checkpoint {before}");
    assert!(after != before, "int8 rounding left the score unchanged to the bit: was anything quantised?");
}
