//! Checkpoints: safetensors files a user can open elsewhere (PyTorch loads them), holding the
//! parameters named by path, optimizer state beside them (`<name>.adam_m`, `<name>.adam_v`,
//! Muon's `<name>.muon_momentum`, rotational AdamW's `<name>.rot_norm0` and `<name>.rot_ms`),
//! and metadata — system, config hash, step, data cursor, seed, schedule, the parent's SHA-256
//! and `sha256`, a digest over every other metadata entry and the tensors, verified on load, so
//! an edited step, cursor, system or data path is refused even without the `.sha256` file
//! beside it (which covers the whole file). Written atomically: a temporary file, fsync,
//! rename, fsync of the folder, so a crash never leaves a half-written checkpoint; a write that
//! fails removes its temporary file, so a full disk is not kept full.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use sha2::{Digest, Sha256};

use crate::budget::BudgetState;
use alpha_learn::TimeBudget;

pub const FORMAT: &str = "alpha-checkpoint-2";
/// The earlier format, whose digest covered the tensors only: loaded only with a matching
/// `.sha256` file beside it, since nothing inside it vouches for its metadata.
const FORMAT_TENSORS_ONLY: &str = "alpha-checkpoint-1";
/// The metadata key holding the digest over the rest of the metadata and the tensors.
const DIGEST_KEY: &str = "sha256";

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
    /// The first group's peak rate (what `--lr` sets), so that a resume without `--lr` goes on
    /// at the rate the run had; None in checkpoints written before it was recorded.
    pub peak: Option<f64>,
    pub tokens: u64,
    pub parent: Option<String>,
    /// The prepared token directory the run read (its tokenizer decodes predictions).
    pub data: String,
    /// Under a wall-clock budget: the budget, the training time spent and the updates it was
    /// spent on, so a resume spends the rest ([`crate::budget`]). None for a run by steps; the
    /// entries are then absent, so such checkpoints are as they were before budgets existed.
    pub budget: Option<BudgetState>,
}

impl Meta {
    /// The metadata entries, without the digest.
    fn to_map(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("format".into(), FORMAT.into());
        m.insert("system".into(), self.system.clone());
        m.insert("config_hash".into(), self.config_hash.clone());
        m.insert("step".into(), self.step.to_string());
        m.insert("cursor".into(), self.cursor.clone());
        m.insert("seed".into(), self.seed.to_string());
        m.insert("rng".into(), format!("chacha8 per-tensor streams from seed {}", self.seed));
        m.insert("schedule".into(), self.schedule.clone());
        m.insert("schedule_total".into(), self.schedule_total.to_string());
        if let Some(peak) = self.peak {
            // `{:?}` writes the shortest text that parses back to the same f64.
            m.insert("peak".into(), format!("{peak:?}"));
        }
        m.insert("tokens".into(), self.tokens.to_string());
        m.insert("parent".into(), self.parent.clone().unwrap_or_default());
        m.insert("data".into(), self.data.clone());
        if let Some(b) = &self.budget {
            m.insert("budget_s".into(), format!("{:?}", b.budget.seconds));
            m.insert("warmdown_updates".into(), b.budget.warmdown_updates.to_string());
            m.insert("budget_elapsed_s".into(), format!("{:?}", b.elapsed));
            m.insert("budget_steps".into(), b.timed_steps.to_string());
        }
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
            peak: match m.get("peak") {
                Some(p) => Some(
                    p.parse().map_err(|_| anyhow!("{}: checkpoint metadata 'peak' is not a number", path.display()))?,
                ),
                None => None,
            },
            tokens: num("tokens")?,
            parent: get("parent").ok().filter(|p| !p.is_empty()),
            data: get("data").unwrap_or_default(),
            budget: match m.get("budget_s") {
                Some(_) => {
                    let real = |k: &str| -> Result<f64> {
                        get(k)?
                            .parse::<f64>()
                            .ok()
                            .filter(|v| v.is_finite() && *v >= 0.0)
                            .ok_or_else(|| anyhow!("{}: checkpoint metadata '{k}' is not a time", path.display()))
                    };
                    Some(BudgetState {
                        budget: TimeBudget { seconds: real("budget_s")?, warmdown_updates: num("warmdown_updates")? },
                        elapsed: real("budget_elapsed_s")?,
                        timed_steps: num("budget_steps")?,
                    })
                }
                None => None,
            },
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

/// The digest a checkpoint carries: every metadata entry but the digest itself (in key order,
/// each length-prefixed) and then every tensor's name, shape and values.
fn content_digest(meta: &BTreeMap<String, String>, tensors: &Tensors) -> String {
    let mut h = Sha256::new();
    for (k, v) in meta.iter().filter(|(k, _)| k.as_str() != DIGEST_KEY) {
        h.update((k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_le_bytes());
        h.update(v.as_bytes());
    }
    h.update(tensor_digest(tensors));
    hex::encode(h.finalize())
}

/// The tensors' digest: each name, shape and values.
fn tensor_digest(tensors: &Tensors) -> [u8; 32] {
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
    h.finalize().into()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The temporary file `path` is written to before it is renamed into place: `<name>.tmp`.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// How a write of one file is to fail, for the crash tests ([`crate::testhook`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Abort after the temporary file is written, before the rename.
    AbortBeforeRename,
    /// Fail half way as a full disk does.
    DiskFull,
}

/// Write `bytes` to `path` so that readers see either the old file or the whole new one. On
/// failure the temporary file is removed, so nothing half written is left behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, bytes, Fault::None)
}

fn write_atomic_with(path: &Path, bytes: &[u8], fault: Fault) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = tmp_path(path);
    let written = (|| -> Result<()> {
        let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        if fault == Fault::DiskFull {
            f.write_all(&bytes[..bytes.len() / 2]).with_context(|| format!("writing {}", tmp.display()))?;
            return Err(std::io::Error::from_raw_os_error(28)).with_context(|| format!("writing {}", tmp.display()));
        }
        f.write_all(bytes).with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all().with_context(|| format!("syncing {}", tmp.display()))?;
        if fault == Fault::AbortBeforeRename {
            crate::testhook::crash();
        }
        fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
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
    let mut map = meta.to_map();
    let digest = content_digest(&map, tensors);
    map.insert(DIGEST_KEY.into(), digest);
    let bytes = canonical(safetensors::serialize(views, Some(map.into_iter().collect::<HashMap<_, _>>()))?)?;
    let sha = sha256_hex(&bytes);
    let fault = if crate::testhook::crash_at("checkpoint-tmp", meta.step) {
        Fault::AbortBeforeRename
    } else if crate::testhook::crash_at("checkpoint-full", meta.step) {
        Fault::DiskFull
    } else {
        Fault::None
    };
    write_atomic_with(path, &bytes, fault)?;
    if let Err(e) = write_atomic(&sidecar(path), format!("{sha}\n").as_bytes()) {
        // A checkpoint without its sidecar would still load; without both it is not written.
        let _ = fs::remove_file(path);
        return Err(e);
    }
    Ok(sha)
}

/// Rewrite a safetensors header with its keys sorted: the library writes metadata from a
/// HashMap, whose order changes from process to process, and checkpoints must repeat byte for
/// byte. The header stays padded to 8 bytes; tensor offsets are relative to the data, so they
/// hold.
fn canonical(bytes: Vec<u8>) -> Result<Vec<u8>> {
    let n = bytes.get(..8).ok_or_else(|| anyhow!("a safetensors file shorter than its header size"))?;
    let n = usize::try_from(u64::from_le_bytes(n.try_into()?))?;
    let end =
        n.checked_add(8).filter(|&e| e <= bytes.len()).ok_or_else(|| anyhow!("a safetensors header past its end"))?;
    // Ordered maps at both levels that vary (tensor names, metadata keys), whatever features
    // serde_json was built with.
    let mut header: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&bytes[8..end])?;
    if let Some(meta) = header.remove("__metadata__") {
        let sorted: BTreeMap<String, serde_json::Value> = serde_json::from_value(meta)?;
        header.insert("__metadata__".into(), serde_json::to_value(sorted)?);
    }
    let mut json = serde_json::to_vec(&header)?;
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + bytes.len() - end);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&bytes[end..]);
    Ok(out)
}

/// The `.sha256` file beside a checkpoint.
pub fn sidecar(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

/// The SHA-256 recorded in the `.sha256` file beside `path`, if there is one. A sidecar that
/// is not text or does not hold a SHA-256 is an error: it was damaged or replaced.
fn read_sidecar(path: &Path) -> Result<Option<String>> {
    let side = sidecar(path);
    let bytes = match fs::read(&side) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", side.display())),
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| {
        anyhow!("{} is damaged: it is not text (it should hold the checkpoint's SHA-256)", side.display())
    })?;
    let digest = text.trim();
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!(
            "{} is damaged: it does not hold a SHA-256 (64 hex digits), but {:?}",
            side.display(),
            truncate(digest, 80)
        );
    }
    Ok(Some(digest.to_ascii_lowercase()))
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The budget a checkpoint carries, from its header alone (not verified: [`load`] verifies the
/// whole when the run starts). None where the file does not read or has no budget. For choosing
/// defaults before the checkpoint is loaded, without reading its tensors.
pub fn peek_budget(path: &Path) -> Option<BudgetState> {
    use std::io::Read;
    let mut f = File::open(path).ok()?;
    let mut n = [0u8; 8];
    f.read_exact(&mut n).ok()?;
    let n = usize::try_from(u64::from_le_bytes(n)).ok().filter(|&n| n <= 100 << 20)?;
    let mut header = vec![0u8; n];
    f.read_exact(&mut header).ok()?;
    let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
    let map: HashMap<String, String> = serde_json::from_value(header.get("__metadata__")?.clone()).ok()?;
    Meta::from_map(&map, path).ok()?.budget
}

/// Load and verify a checkpoint: it must parse, its metadata and tensors must match the digest
/// in its metadata, and the file must match the `.sha256` beside it when there is one.
pub fn load(path: &Path) -> Result<Checkpoint> {
    let bytes = fs::read(path).with_context(|| format!("reading checkpoint {}", path.display()))?;
    let sha = sha256_hex(&bytes);
    let recorded = read_sidecar(path)?;
    if let Some(expected) = &recorded {
        if *expected != sha {
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
    let format = map.get("format").map(String::as_str);
    if format == Some(FORMAT_TENSORS_ONLY) && recorded.is_none() {
        bail!(
            "checkpoint {} is of the format {FORMAT_TENSORS_ONLY}, whose metadata no digest inside it covers, and its .sha256 file is missing: it cannot be verified",
            path.display()
        );
    }
    if format != Some(FORMAT) && format != Some(FORMAT_TENSORS_ONLY) {
        bail!("{} is not an Alpha checkpoint (format {:?})", path.display(), map.get("format"));
    }
    let mut tensors = BTreeMap::new();
    for (name, view) in st.tensors() {
        if view.dtype() != Dtype::F32 {
            bail!("{}: tensor {name} is {:?}, expected F32", path.display(), view.dtype());
        }
        let data: Vec<f32> =
            view.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        tensors.insert(name, (view.shape().to_vec(), data));
    }
    let (key, digest) = if format == Some(FORMAT) {
        let sorted: BTreeMap<String, String> = map.clone().into_iter().collect();
        (DIGEST_KEY, content_digest(&sorted, &tensors))
    } else {
        ("data_sha256", hex::encode(tensor_digest(&tensors)))
    };
    if map.get(key) != Some(&digest) {
        bail!(
            "checkpoint {} is damaged or edited: its metadata or tensor data does not match the SHA-256 recorded in it",
            path.display()
        );
    }
    let meta = Meta::from_map(&map, path)?;
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
            peak: Some(0.1),
            tokens: 70,
            parent: None,
            data: "data-cache/x".into(),
            budget: None,
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

    #[test]
    fn a_budget_round_trips_exactly_and_its_absence_adds_no_entries() {
        let dir = tempfile::tempdir().unwrap();
        let (mut meta, t) = sample();
        assert!(!meta.to_map().keys().any(|k| k.contains("budget") || k.contains("warmdown")));
        meta.budget = Some(BudgetState {
            budget: TimeBudget { seconds: 600.0, warmdown_updates: 1200 },
            elapsed: 123.456_789_012_345_67,
            timed_steps: 2833,
        });
        let path = dir.path().join("b.safetensors");
        save(&path, &meta, &t).unwrap();
        assert_eq!(load(&path).unwrap().meta, meta, "times are kept to the bit");
        assert_eq!(peek_budget(&path), meta.budget, "the header alone gives it");
        let plain = dir.path().join("plain.safetensors");
        save(&plain, &sample().0, &t).unwrap();
        assert_eq!(peek_budget(&plain), None);
        assert_eq!(peek_budget(&dir.path().join("missing.safetensors")), None);
        fs::remove_file(sidecar(&path)).unwrap();
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, with_meta(&bytes, "budget_elapsed_s", "1.0")).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("damaged or edited"));
    }

    use crate::testhook::with_metadata_entry as with_meta;

    #[test]
    fn edited_metadata_is_refused_without_the_sidecar() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.safetensors");
        let (meta, t) = sample();
        save(&path, &meta, &t).unwrap();
        fs::remove_file(sidecar(&path)).unwrap();
        let bytes = fs::read(&path).unwrap();
        // The unedited rewrite loads: the check is on the content, not the byte layout.
        fs::write(&path, with_meta(&bytes, "step", "7")).unwrap();
        assert_eq!(load(&path).unwrap().meta, meta);
        for (key, value) in [("step", "8"), ("cursor", "{\"epoch\":3}"), ("system", "coppelius"), ("data", "/etc")] {
            fs::write(&path, with_meta(&bytes, key, value)).unwrap();
            let e = load(&path).unwrap_err().to_string();
            assert!(e.contains("damaged or edited"), "{key}: {e}");
        }
        // The digest itself edited.
        fs::write(&path, with_meta(&bytes, DIGEST_KEY, &"0".repeat(64))).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("damaged or edited"));
    }

    #[test]
    fn a_sidecar_that_is_not_a_sha256_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.safetensors");
        let (meta, t) = sample();
        save(&path, &meta, &t).unwrap();
        fs::write(sidecar(&path), b"\xff\xfe not text\n").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("is not text"), "{e}");
        fs::write(sidecar(&path), b"hello\n").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("does not hold a SHA-256"), "{e}");
    }

    #[test]
    fn the_earlier_format_loads_only_with_its_sidecar() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.safetensors");
        let (meta, t) = sample();
        save(&path, &meta, &t).unwrap();
        let bytes = fs::read(&path).unwrap();
        let old = with_meta(
            &with_meta(&bytes, "format", FORMAT_TENSORS_ONLY),
            "data_sha256",
            &hex::encode(tensor_digest(&t)),
        );
        fs::write(&path, &old).unwrap();
        fs::write(sidecar(&path), format!("{}\n", sha256_hex(&old))).unwrap();
        assert_eq!(load(&path).unwrap().meta, meta);
        fs::remove_file(sidecar(&path)).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("cannot be verified"), "{e}");
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // The rename fails: a non-empty folder holds the target's name.
        let target = dir.path().join("step-000001.safetensors");
        fs::create_dir_all(target.join("inside")).unwrap();
        let e = write_atomic(&target, b"bytes").unwrap_err();
        assert!(format!("{e:#}").contains("renaming"), "{e:#}");
        assert!(!tmp_path(&target).exists());
        // A write cut short as by a full disk.
        let other = dir.path().join("run.json");
        let e = write_atomic_with(&other, b"0123456789", Fault::DiskFull).unwrap_err();
        assert!(format!("{e:#}").contains("No space left"), "{e:#}");
        assert!(!tmp_path(&other).exists() && !other.exists());
    }
}
