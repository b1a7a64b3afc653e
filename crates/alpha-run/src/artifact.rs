//! The artifact: a trained system's parameters in the parameter-golf format (SYSTEMS.md §4.3),
//! small enough to count against a size limit and readable without Alpha.
//!
//! What is stored, tensor by tensor (only parameters: optimizer state is dropped):
//!
//! - a **control tensor** (one the system names, [`alpha_systems::System::control_tensors`]):
//!   fp32, exact, whatever its size — gains and mixes steer whole layers;
//! - any other tensor of at most [`SMALL_ELEMENTS`] (65,536) elements: fp16;
//! - a larger tensor: int8 by row, with one fp16 scale a row. A row is the tensor's first axis
//!   (a matrix's row; a tensor of other rank is viewed as `[shape[0], rest]`, a vector as one
//!   row). Each row is clipped to `c`, the [`CLIP_QUANTILE`] (99.99984th percentile, linear
//!   interpolation between order statistics, as `torch.quantile`) of its |w|; its scale is
//!   `s = c / 127` rounded to fp16, and `q = round(clamp(w, −c, c) / s)` in −127..=127, so
//!   `q·s` is within `s/2` of every value inside the clip. The reference floors the scale at
//!   1/127, which quantises a row whose largest |w| is 0.05 in steps of 0.008; here the floor is
//!   fp16's smallest normal number (needed only for all-zero rows), so small rows keep their
//!   resolution.
//!
//! # Layout
//!
//! The file is one zlib stream (RFC 1950, level 9: Python's `zlib.decompress` reads it) whose
//! content is:
//!
//! ```text
//! bytes 0..8     magic  "ALPHAART"
//! bytes 8..12    n      u32, little-endian: the header's length in bytes
//! next n bytes   header UTF-8 JSON, below
//! the rest       each tensor's data in the header's order, back to back, little-endian
//! ```
//!
//! The header:
//!
//! ```text
//! {"format": "alpha-artifact-1",
//!  "system": "polf", "config_hash": "…", "step": 13780,
//!  "checkpoint": "runs/polf/checkpoints/step-013780.safetensors", "checkpoint_sha256": "…",
//!  "data": "…",                       (the prepared data the checkpoint trained on)
//!  "tensors": [{"name": "blocks.0.attn.c_q.weight", "dtype": "int8-rows",
//!               "shape": [512, 512], "bytes": 263168}, …]}
//! ```
//!
//! and each tensor's data by its `dtype`, with `n` = the product of `shape` and `rows` =
//! `shape[0]` (1 for a vector):
//!
//! - `f32`: `n` IEEE binary32 values, row-major;
//! - `f16`: `n` IEEE binary16 values, row-major;
//! - `int8-rows`: `n` signed bytes `q`, row-major, then `rows` binary16 scales `s`; the value
//!   at row `r` is `q · s[r]`.
//!
//! `bytes` is the data's length, so a reader can skip a tensor. In numpy, an `int8-rows` tensor
//! of shape `[r, c]` at offset `o` of the data is
//! `np.frombuffer(d, np.int8, r*c, o).reshape(r, c) * np.frombuffer(d, '<f2', r, o + r*c)[:, None]`.
//!
//! Reading checks the magic, the header, every tensor's length against its shape and dtype,
//! that the content ends where the last tensor does, and zlib's Adler-32 of the content, so a
//! damaged or truncated file is an error that says so, never a model with wrong weights.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use alpha_learn::inference_program;
use alpha_systems::System;
use anyhow::{anyhow, bail, Context, Result};
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use flate2::Compression;
use half::f16;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self, Checkpoint, Meta, Tensors};
use crate::session::persistent;

pub const MAGIC: &[u8; 8] = b"ALPHAART";
pub const FORMAT: &str = "alpha-artifact-1";
/// Tensors of at most this many elements are kept as floats rather than quantised: their int8
/// saving is a few kilobytes, and they are the biases, norms and small tables whose every
/// value matters.
pub const SMALL_ELEMENTS: usize = 65_536;
/// The quantile of a row's |w| it is clipped to: the parameter-golf baseline's 99.99984th
/// percentile, which for rows under about 600,000 values clips only by interpolating toward
/// the second-largest.
pub const CLIP_QUANTILE: f64 = 0.999_998_4;
/// The parameter-golf contest's limit, bytes: the default `--limit` reported against.
pub const DEFAULT_LIMIT: u64 = 16_000_000;
/// The largest header a reader accepts: far above any system's (a few hundred bytes a tensor),
/// so a damaged length cannot make it allocate gigabytes.
const MAX_HEADER: usize = 64 << 20;

/// How one tensor is stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// Row-major int8 values and one fp16 scale a row.
    Int8Rows {
        q: Vec<i8>,
        scales: Vec<f16>,
    },
}

impl Stored {
    fn dtype(&self) -> &'static str {
        match self {
            Stored::F32(_) => "f32",
            Stored::F16(_) => "f16",
            Stored::Int8Rows { .. } => "int8-rows",
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Stored::F32(v) => 4 * v.len(),
            Stored::F16(v) => 2 * v.len(),
            Stored::Int8Rows { q, scales } => q.len() + 2 * scales.len(),
        }
    }
}

/// One stored tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: String,
    pub shape: Vec<usize>,
    pub stored: Stored,
}

/// Where an artifact came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    pub system: String,
    pub config_hash: String,
    pub step: u64,
    pub checkpoint: String,
    pub checkpoint_sha256: String,
    pub data: String,
}

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    #[serde(flatten)]
    source: Source,
    tensors: Vec<TensorHeader>,
}

#[derive(Serialize, Deserialize)]
struct TensorHeader {
    name: String,
    dtype: String,
    shape: Vec<usize>,
    bytes: usize,
}

/// A system's parameters as the format stores them.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub source: Source,
    /// In name order.
    pub tensors: Vec<Entry>,
}

/// Rows of a tensor of `shape` as the format cuts it: the first axis (1 for a vector).
fn rows_of(shape: &[usize]) -> usize {
    if shape.len() >= 2 {
        shape[0]
    } else {
        1
    }
}

/// The `q` quantile of `values` (reordered), interpolating linearly between the order
/// statistics around position q·(n − 1), as `torch.quantile` does.
pub fn quantile(values: &mut [f32], q: f64) -> f32 {
    if values.is_empty() {
        return 0.0;
    }
    let pos = q.clamp(0.0, 1.0) * (values.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let (_, &mut below, above) = values.select_nth_unstable_by(lo, f32::total_cmp);
    let next = above.iter().copied().fold(f32::INFINITY, f32::min);
    if lo + 1 >= values.len() || next == below {
        return below;
    }
    (below as f64 + (pos - lo as f64) * (next as f64 - below as f64)) as f32
}

/// One row as int8 and its fp16 scale: clipped to its |w|'s [`CLIP_QUANTILE`], `q` computed
/// with the scale as stored (rounded to fp16), so the round trip's error inside the clip is at
/// most half the stored scale.
pub fn quantise_row(row: &[f32]) -> (Vec<i8>, f16) {
    let mut abs: Vec<f32> = row.iter().map(|w| w.abs()).collect();
    let clip = quantile(&mut abs, CLIP_QUANTILE);
    let scale = f16::from_f32(clip / 127.0).max(f16::MIN_POSITIVE);
    let s = scale.to_f32();
    let q = row.iter().map(|&w| (w.clamp(-clip, clip) / s).round().clamp(-127.0, 127.0) as i8).collect();
    (q, scale)
}

/// Whether parameter `name` is one of the system's control tensors.
fn is_control(system: &dyn System, name: &str) -> bool {
    system.control_tensors().iter().any(|p| alpha_learn::glob(p, name))
}

/// Store one tensor as the format says; `control`: the system names it a control tensor.
fn store(name: &str, shape: &[usize], values: &[f32], control: bool) -> Result<Stored> {
    if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
        bail!("parameter {name} holds {bad}: a checkpoint with non-finite weights cannot be exported");
    }
    if control {
        return Ok(Stored::F32(values.to_vec()));
    }
    if values.len() <= SMALL_ELEMENTS {
        let half: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
        if let Some(i) = half.iter().position(|h| h.is_infinite()) {
            bail!(
                "parameter {name} holds {} at index {i}, beyond fp16's range (±65,504): name it among the system's control tensors to keep it in fp32",
                values[i]
            );
        }
        return Ok(Stored::F16(half));
    }
    let rows = rows_of(shape);
    let cols = values.len() / rows.max(1);
    let mut q = Vec::with_capacity(values.len());
    let mut scales = Vec::with_capacity(rows);
    for row in values.chunks(cols.max(1)) {
        let (qr, s) = quantise_row(row);
        q.extend(qr);
        scales.push(s);
    }
    Ok(Stored::Int8Rows { q, scales })
}

impl Artifact {
    /// The artifact of `system`'s parameters in `ckpt` (read from `path`).
    pub fn from_checkpoint(system: &dyn System, ckpt: &Checkpoint, path: &Path) -> Result<Artifact> {
        if ckpt.meta.system != system.name() {
            bail!("checkpoint {} is of system '{}', not '{}'", path.display(), ckpt.meta.system, system.name());
        }
        let program = inference_program(system.model(1)?)?;
        let mut params: Vec<(String, Vec<usize>)> =
            persistent(&program).into_iter().filter(|(_, _, p)| *p).map(|(n, s, _)| (n, s)).collect();
        params.sort();
        let mut tensors = Vec::with_capacity(params.len());
        for (name, shape) in params {
            let (s, values) = ckpt
                .tensors
                .get(&name)
                .ok_or_else(|| anyhow!("checkpoint {} lacks parameter {name} of {}", path.display(), system.name()))?;
            if *s != shape {
                bail!(
                    "checkpoint {} holds {name} with shape {s:?}, but {} needs {shape:?}",
                    path.display(),
                    system.name()
                );
            }
            let stored = store(&name, &shape, values, is_control(system, &name))?;
            tensors.push(Entry { name, shape, stored });
        }
        let source = Source {
            system: system.name().into(),
            config_hash: ckpt.meta.config_hash.clone(),
            step: ckpt.meta.step,
            checkpoint: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()).display().to_string(),
            checkpoint_sha256: ckpt.sha256.clone(),
            data: ckpt.meta.data.clone(),
        };
        Ok(Artifact { source, tensors })
    }

    /// The content before compression: magic, header length, header, data.
    fn content(&self) -> Result<Vec<u8>> {
        let header = Header {
            format: FORMAT.into(),
            source: self.source.clone(),
            tensors: self
                .tensors
                .iter()
                .map(|e| TensorHeader {
                    name: e.name.clone(),
                    dtype: e.stored.dtype().into(),
                    shape: e.shape.clone(),
                    bytes: e.stored.bytes(),
                })
                .collect(),
        };
        let json = serde_json::to_vec(&header)?;
        let data: usize = self.tensors.iter().map(|e| e.stored.bytes()).sum();
        let mut out = Vec::with_capacity(12 + json.len() + data);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&u32::try_from(json.len())?.to_le_bytes());
        out.extend_from_slice(&json);
        for e in &self.tensors {
            match &e.stored {
                Stored::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                Stored::F16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                Stored::Int8Rows { q, scales } => {
                    out.extend(q.iter().map(|&x| x as u8));
                    scales.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                }
            }
        }
        Ok(out)
    }

    /// The file's bytes: the content through zlib at level 9. Also returns the content's length.
    pub fn encode(&self) -> Result<(Vec<u8>, usize)> {
        let content = self.content()?;
        let mut z = ZlibEncoder::new(Vec::new(), Compression::best());
        z.write_all(&content)?;
        Ok((z.finish()?, content.len()))
    }

    /// Read an artifact from its file's bytes; `path` names it in errors.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Artifact> {
        let damaged = |what: String| anyhow!("artifact {} is damaged or truncated: {what}", path.display());
        let mut z = ZlibDecoder::new(bytes);
        let mut fixed = [0u8; 12];
        z.read_exact(&mut fixed).map_err(|e| damaged(format!("its start does not decompress ({e})")))?;
        if &fixed[..8] != MAGIC {
            bail!("{} is not an Alpha artifact (its content does not begin with {:?})", path.display(), "ALPHAART");
        }
        let n = u32::from_le_bytes(fixed[8..12].try_into()?) as usize;
        if n > MAX_HEADER {
            return Err(damaged(format!("its header claims {n} bytes")));
        }
        let mut json = vec![0u8; n];
        z.read_exact(&mut json).map_err(|e| damaged(format!("its header does not decompress ({e})")))?;
        let header: Header =
            serde_json::from_slice(&json).map_err(|e| damaged(format!("its header does not parse ({e})")))?;
        if header.format != FORMAT {
            bail!("artifact {} is of format {:?}; this build reads {FORMAT}", path.display(), header.format);
        }
        let mut tensors = Vec::with_capacity(header.tensors.len());
        let mut seen = std::collections::HashSet::new();
        for t in header.tensors {
            if !seen.insert(t.name.clone()) {
                return Err(damaged(format!("it holds {} twice", t.name)));
            }
            let n = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            let rows = rows_of(&t.shape);
            let expected = match t.dtype.as_str() {
                "f32" => n.and_then(|n| n.checked_mul(4)),
                "f16" => n.and_then(|n| n.checked_mul(2)),
                "int8-rows" => n.and_then(|n| rows.checked_mul(2).and_then(|r| r.checked_add(n))),
                other => return Err(damaged(format!("{} has the unknown dtype {other:?}", t.name))),
            };
            // zlib expands at most about 1,032 to 1: a length beyond that is damage, refused
            // before it is allocated.
            if expected != Some(t.bytes) || t.bytes > bytes.len().saturating_mul(1100) {
                return Err(damaged(format!(
                    "{} of shape {:?} as {} cannot take {} bytes",
                    t.name, t.shape, t.dtype, t.bytes
                )));
            }
            let mut data = vec![0u8; t.bytes];
            z.read_exact(&mut data).map_err(|e| damaged(format!("the data of {} ends early ({e})", t.name)))?;
            let n = n.unwrap_or(0);
            let stored = match t.dtype.as_str() {
                "f32" => {
                    Stored::F32(data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
                }
                "f16" => Stored::F16(data.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect()),
                _ => Stored::Int8Rows {
                    q: data[..n].iter().map(|&b| b as i8).collect(),
                    scales: data[n..].chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect(),
                },
            };
            tensors.push(Entry { name: t.name, shape: t.shape, stored });
        }
        // Reading to the end also checks zlib's Adler-32 over the whole content.
        let mut rest = Vec::new();
        z.read_to_end(&mut rest).map_err(|e| damaged(format!("its end does not decompress ({e})")))?;
        if !rest.is_empty() {
            return Err(damaged(format!("{} bytes follow its last tensor", rest.len())));
        }
        Ok(Artifact { source: header.source, tensors })
    }

    /// The parameters as f32, as a model loads them.
    pub fn dequantise(&self) -> Tensors {
        let mut out = BTreeMap::new();
        for e in &self.tensors {
            let values = match &e.stored {
                Stored::F32(v) => v.clone(),
                Stored::F16(v) => v.iter().map(|h| h.to_f32()).collect(),
                Stored::Int8Rows { q, scales } => {
                    let cols = q.len() / scales.len().max(1);
                    q.chunks(cols.max(1))
                        .zip(scales)
                        .flat_map(|(row, s)| row.iter().map(move |&x| x as f32 * s.to_f32()))
                        .collect()
                }
            };
            out.insert(e.name.clone(), (e.shape.clone(), values));
        }
        out
    }

    /// The artifact as a checkpoint of parameters only, for the scoring and prediction paths
    /// (which check its system and configuration as they check any checkpoint's).
    pub fn as_checkpoint(&self, file_sha256: String) -> Checkpoint {
        Checkpoint {
            meta: Meta {
                system: self.source.system.clone(),
                config_hash: self.source.config_hash.clone(),
                step: self.source.step,
                cursor: String::new(),
                seed: 0,
                schedule: String::new(),
                schedule_total: 0,
                peak: None,
                tokens: 0,
                parent: Some(self.source.checkpoint_sha256.clone()),
                data: self.source.data.clone(),
                budget: None,
            },
            tensors: self.dequantise(),
            sha256: file_sha256,
        }
    }

    /// Tensors and their bytes before compression, by dtype: (dtype, tensors, bytes).
    pub fn by_dtype(&self) -> Vec<(&'static str, usize, usize)> {
        let mut out: Vec<(&'static str, usize, usize)> = vec![];
        for e in &self.tensors {
            let d = e.stored.dtype();
            match out.iter_mut().find(|(k, _, _)| *k == d) {
                Some(row) => {
                    row.1 += 1;
                    row.2 += e.stored.bytes();
                }
                None => out.push((d, 1, e.stored.bytes())),
            }
        }
        out
    }
}

/// Write `bytes` to `path`, atomically (a temporary file renamed into place), refusing to
/// replace an existing file unless `force`.
pub fn write(path: &Path, bytes: &[u8], force: bool) -> Result<()> {
    if path.is_dir() {
        bail!("-o {}: is a folder; give the artifact's file name", path.display());
    }
    if path.exists() && !force {
        bail!("{} exists already; pass --force to replace it", path.display());
    }
    checkpoint::write_atomic(path, bytes)
}

/// Read and check the artifact at `path`; also returns the file's SHA-256 and size.
pub fn read(path: &Path) -> Result<(Artifact, String, u64)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading artifact {}", path.display()))?;
    let artifact = Artifact::decode(&bytes, path)?;
    Ok((artifact, checkpoint::sha256_hex(&bytes), bytes.len() as u64))
}

/// The checkpoint an artifact was made from, where it still is (its recorded path, the same
/// SHA-256); None otherwise.
pub fn source_checkpoint(a: &Artifact) -> Option<(Checkpoint, PathBuf)> {
    let path = PathBuf::from(&a.source.checkpoint);
    let c = checkpoint::load(&path).ok()?;
    (c.sha256 == a.source.checkpoint_sha256).then_some((c, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quantile_interpolates_as_torch_does() {
        let mut v: Vec<f32> = (0..=10).map(|i| i as f32).collect();
        assert_eq!(quantile(&mut v, 0.5), 5.0);
        assert_eq!(quantile(&mut v, 1.0), 10.0);
        assert!((quantile(&mut v, 0.95) - 9.5).abs() < 1e-6);
        // 512 values: the clip lies 0.99918 of the way from the second largest to the largest.
        let mut w: Vec<f32> = (0..512).map(|i| i as f32).collect();
        let c = quantile(&mut w, CLIP_QUANTILE);
        assert!((c - (510.0 + 0.999_181_6)).abs() < 1e-3, "{c}");
    }

    /// Values spread over ±`scale` with a few larger outliers, from a fixed sequence.
    fn spread(n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let x = ((i as f32 * 0.618_034).fract() - 0.5) * 2.0 * scale;
                if i % 9973 == 0 {
                    x * 40.0
                } else {
                    x
                }
            })
            .collect()
    }

    #[test]
    fn tensors_of_any_rank_are_cut_into_rows_by_their_first_axis() {
        for shape in [vec![70_000], vec![4, 130, 200], vec![300, 300]] {
            let n: usize = shape.iter().product();
            let w = spread(n, 0.03);
            let Stored::Int8Rows { q, scales } = store("t", &shape, &w, false).unwrap() else {
                panic!("{shape:?} ({n} elements) should be int8");
            };
            let rows = if shape.len() == 1 { 1 } else { shape[0] };
            assert_eq!((q.len(), scales.len()), (n, rows), "{shape:?}");
            let a = Artifact {
                source: Source {
                    system: "x".into(),
                    config_hash: String::new(),
                    step: 0,
                    checkpoint: String::new(),
                    checkpoint_sha256: String::new(),
                    data: String::new(),
                },
                tensors: vec![Entry { name: "t".into(), shape: shape.clone(), stored: Stored::Int8Rows { q, scales } }],
            };
            let (bytes, _) = a.encode().unwrap();
            let back = Artifact::decode(&bytes, Path::new("t.art")).unwrap();
            assert_eq!(back, a);
            let got = &back.dequantise()["t"].1;
            let Stored::Int8Rows { scales, .. } = &a.tensors[0].stored else { unreachable!() };
            for (r, (row, got)) in w.chunks(n / rows).zip(got.chunks(n / rows)).enumerate() {
                let s = scales[r].to_f32();
                let clip = quantile(&mut row.iter().map(|w| w.abs()).collect::<Vec<_>>(), CLIP_QUANTILE);
                // Inside the clip, half a step; beyond it (the largest outlier), the clip.
                let worst = row.iter().zip(got).map(|(a, b)| (a.clamp(-clip, clip) - b).abs()).fold(0f32, f32::max);
                assert!(worst <= s * 0.5001, "{shape:?} row {r}: error {worst} at scale {s}");
            }
        }
        // Small: fp16, or fp32 when a control tensor.
        assert!(matches!(store("t", &[256, 256], &spread(65_536, 1.0), false).unwrap(), Stored::F16(_)));
        assert!(matches!(store("t", &[65_537], &spread(65_537, 1.0), true).unwrap(), Stored::F32(_)));
    }

    #[test]
    fn weights_no_format_can_hold_are_refused_by_name() {
        let e = store("blocks.0.gain", &[3], &[1.0, 1e6, 2.0], false).unwrap_err().to_string();
        assert!(e.contains("blocks.0.gain") && e.contains("fp16's range") && e.contains("control tensors"), "{e}");
        assert!(store("blocks.0.gain", &[3], &[1.0, 1e6, 2.0], true).is_ok(), "fp32 holds it");
        let e = store("w", &[2], &[f32::NAN, 0.0], true).unwrap_err().to_string();
        assert!(e.contains("non-finite"), "{e}");
    }

    #[test]
    fn a_row_of_zeros_round_trips_to_zeros() {
        let (q, s) = quantise_row(&[0.0; 7]);
        assert!(q.iter().all(|&x| x == 0) && s.to_f32() > 0.0);
    }
}
