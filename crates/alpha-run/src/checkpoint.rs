//! Checkpoints: safetensors files a user can open elsewhere (PyTorch loads them), holding the
//! parameters named by path, optimizer state beside them (`<name>.adam_m`, `<name>.adam_v`),
//! and metadata — system, config hash, step, data cursor, seed, schedule, the parent's SHA-256
//! and a SHA-256 of the tensor data, verified on load. Written atomically: a temporary file,
//! fsync, rename, fsync of the folder, so a crash never leaves a half-written checkpoint.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use sha2::{Digest, Sha256};

pub const FORMAT: &str = "alpha-checkpoint-1";

/// Tensors by name: (shape, values).
pub type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// What a checkpoint says about itself besides its tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    pub system: String,
    pub config_hash: String,
    pub step: u64,
    /// The data stream's cursor after `step`, as JSON.
    pub cursor: String,
    pub seed: u64,
    pub schedule: String,
    /// The update count the schedule's horizon was set for.
    pub schedule_total: u64,
    pub tokens: u64,
    pub parent: Option<String>,
    /// The prepared token directory the run read (its tokenizer decodes predictions).
    pub data: String,
}

impl Meta {
    fn to_map(&self, data_sha: &str) -> HashMap<String, String> {
        let mut m = HashMap::new();
        m.insert("format".into(), FORMAT.into());
        m.insert("system".into(), self.system.clone());
        m.insert("config_hash".into(), self.config_hash.clone());
        m.insert("step".into(), self.step.to_string());
        m.insert("cursor".into(), self.cursor.clone());
        m.insert("seed".into(), self.seed.to_string());
        m.insert("rng".into(), format!("chacha8 per-tensor streams from seed {}", self.seed));
        m.insert("schedule".into(), self.schedule.clone());
        m.insert("schedule_total".into(), self.schedule_total.to_string());
        m.insert("tokens".into(), self.tokens.to_string());
        m.insert("parent".into(), self.parent.clone().unwrap_or_default());
        m.insert("data_sha256".into(), data_sha.into());
        m.insert("data".into(), self.data.clone());
        m
    }

    fn from_map(m: &HashMap<String, String>, path: &Path) -> Result<Meta> {
        let get =
            |k: &str| m.get(k).cloned().ok_or_else(|| anyhow!("{}: checkpoint metadata lacks '{k}'", path.display()));
        let num = |k: &str| -> Result<u64> {
            get(k)?.parse().map_err(|_| anyhow!("{}: checkpoint metadata '{k}' is not a number", path.display()))
        };
        Ok(Meta {
            system: get("system")?,
            config_hash: get("config_hash")?,
            step: num("step")?,
            cursor: get("cursor")?,
            seed: num("seed")?,
            schedule: get("schedule")?,
            schedule_total: num("schedule_total")?,
            tokens: num("tokens")?,
            parent: get("parent").ok().filter(|p| !p.is_empty()),
            data: get("data").unwrap_or_default(),
        })
    }
}

/// A loaded checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub meta: Meta,
    /// name → (shape, values).
    pub tensors: Tensors,
    /// SHA-256 of the whole file.
    pub sha256: String,
}

fn data_digest(tensors: &Tensors) -> String {
    let mut h = Sha256::new();
    for (name, (shape, data)) in tensors {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        for &d in shape {
            h.update((d as u64).to_le_bytes());
        }
        for x in data {
            h.update(x.to_le_bytes());
        }
    }
    hex::encode(h.finalize())
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Write `bytes` to `path` so that readers see either the old file or the whole new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes).with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all().with_context(|| format!("syncing {}", tmp.display()))?;
    }
    fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Save tensors and metadata; returns the file's SHA-256. A `<path>.sha256` file beside it
/// holds the same digest.
pub fn save(path: &Path, meta: &Meta, tensors: &Tensors) -> Result<String> {
    let bytes_of: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, (s, d))| (n.clone(), s.clone(), d.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, TensorView)> = bytes_of
        .iter()
        .map(|(n, s, b)| Ok((n.clone(), TensorView::new(Dtype::F32, s.clone(), b)?)))
        .collect::<Result<_, safetensors::SafeTensorError>>()?;
    let bytes = canonical(safetensors::serialize(views, Some(meta.to_map(&data_digest(tensors))))?)?;
    let sha = sha256_hex(&bytes);
    write_atomic(path, &bytes)?;
    write_atomic(&sidecar(path), format!("{sha}\n").as_bytes())?;
    Ok(sha)
}

/// Rewrite a safetensors header with its keys sorted: the library writes metadata from a
/// HashMap, whose order changes from process to process, and checkpoints must repeat byte for
/// byte. The header stays padded to 8 bytes; tensor offsets are relative to the data, so they
/// hold.
fn canonical(bytes: Vec<u8>) -> Result<Vec<u8>> {
    let n = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
    // Ordered maps at both levels that vary (tensor names, metadata keys), whatever features
    // serde_json was built with.
    let mut header: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + n])?;
    if let Some(meta) = header.remove("__metadata__") {
        let sorted: BTreeMap<String, serde_json::Value> = serde_json::from_value(meta)?;
        header.insert("__metadata__".into(), serde_json::to_value(sorted)?);
    }
    let mut json = serde_json::to_vec(&header)?;
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + bytes.len() - 8 - n);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&bytes[8 + n..]);
    Ok(out)
}

fn sidecar(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

/// Load and verify a checkpoint: it must parse, its tensor data must match the SHA-256 in its
/// metadata, and the file must match the `.sha256` beside it when there is one.
pub fn load(path: &Path) -> Result<Checkpoint> {
    let bytes = fs::read(path).with_context(|| format!("reading checkpoint {}", path.display()))?;
    let sha = sha256_hex(&bytes);
    if let Ok(expected) = fs::read_to_string(sidecar(path)) {
        let expected = expected.trim();
        if expected != sha {
            bail!(
                "checkpoint {} is damaged: its SHA-256 is {sha}, but {expected} was recorded when it was written",
                path.display()
            );
        }
    }
    let (_, header) = SafeTensors::read_metadata(&bytes)
        .map_err(|e| anyhow!("checkpoint {} is truncated or not a safetensors file: {e}", path.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| anyhow!("checkpoint {} is truncated or not a safetensors file: {e}", path.display()))?;
    let map = header.metadata().clone().ok_or_else(|| anyhow!("{} has no Alpha metadata", path.display()))?;
    if map.get("format").map(String::as_str) != Some(FORMAT) {
        bail!("{} is not an Alpha checkpoint (format {:?})", path.display(), map.get("format"));
    }
    let meta = Meta::from_map(&map, path)?;
    let mut tensors = BTreeMap::new();
    for (name, view) in st.tensors() {
        if view.dtype() != Dtype::F32 {
            bail!("{}: tensor {name} is {:?}, expected F32", path.display(), view.dtype());
        }
        let data: Vec<f32> =
            view.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        tensors.insert(name, (view.shape().to_vec(), data));
    }
    let digest = data_digest(&tensors);
    if map.get("data_sha256") != Some(&digest) {
        bail!("checkpoint {} is damaged: its tensor data does not match the SHA-256 recorded in it", path.display());
    }
    Ok(Checkpoint { meta, tensors, sha256: sha })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Meta, Tensors) {
        let meta = Meta {
            system: "bob".into(),
            config_hash: "abc".into(),
            step: 7,
            cursor: "{}".into(),
            seed: 1,
            schedule: "constant 0.1".into(),
            schedule_total: 10,
            tokens: 70,
            parent: None,
            data: "data-cache/x".into(),
        };
        let mut t = BTreeMap::new();
        t.insert("logits".to_string(), (vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.5]));
        (meta, t)
    }

    #[test]
    fn round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.safetensors");
        let (meta, t) = sample();
        let sha = save(&path, &meta, &t).unwrap();
        let c = load(&path).unwrap();
        assert_eq!(c.meta, meta);
        assert_eq!(c.tensors, t);
        assert_eq!(c.sha256, sha);

        // One flipped byte in the data: caught by the sidecar, and without it by the data hash.
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("damaged"), "{e}");
        fs::remove_file(sidecar(&path)).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("does not match the SHA-256"), "{e}");

        // Truncated.
        fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
    }
}
