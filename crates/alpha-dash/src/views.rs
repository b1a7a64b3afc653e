//! A run's model views ([`alpha_systems::views`]): what its system declares, with each tracked
//! view's series computed from every kept checkpoint of the run.
//!
//! A checkpoint is read at most once while it is unchanged: the figures of every view of it are
//! kept by (real path, size, modification time), and only the tensors the views name are read,
//! found through the safetensors header (8 bytes of length, then JSON giving each tensor's dtype,
//! shape and byte range after the header). Of a gigabyte's file, a view of a few small tensors
//! reads the header and those tensors' bytes. The figures are drawn, not trained on: the file's digest, which would need every
//! byte, is not checked here (a training resume checks it).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use alpha_systems::views::{Content, ModelView, Series, Tensors};
use serde_json::{json, Value};

/// The largest safetensors header read (a checkpoint's names and offsets; Diakosmos's is ~60 KB).
const MAX_HEADER_BYTES: u64 = 64 << 20;
/// The largest tensor a view may read: views read small tensors, and a header naming a larger
/// one is not followed.
const MAX_TENSOR_BYTES: u64 = 256 << 20;
/// Checkpoints whose figures are kept; beyond it the oldest entries go.
pub const VIEW_CACHE_ENTRIES: usize = 4096;

/// Where one tensor lies in a safetensors file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub start: u64,
    pub end: u64,
}

/// A safetensors file's tensors by name, from its header alone.
pub fn read_index(path: &Path) -> std::io::Result<BTreeMap<String, TensorEntry>> {
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {m}", path.display()));
    let mut f = File::open(path)?;
    let file_len = f.metadata()?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n)?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_BYTES || 8 + n > file_len {
        return Err(bad(format!("a safetensors header of {n} bytes in a file of {file_len}")));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header)?;
    let header: serde_json::Map<String, Value> =
        serde_json::from_slice(&header).map_err(|e| bad(format!("the safetensors header does not parse: {e}")))?;
    let data_start = 8 + n;
    let mut out = BTreeMap::new();
    for (name, entry) in header {
        if name == "__metadata__" {
            continue;
        }
        let dtype = entry["dtype"].as_str().unwrap_or_default().to_string();
        let shape: Vec<usize> = entry["shape"]
            .as_array()
            .map(|s| s.iter().filter_map(|d| d.as_u64().map(|d| d as usize)).collect())
            .unwrap_or_default();
        let offsets = entry["data_offsets"].as_array().and_then(|o| Some((o.first()?.as_u64()?, o.get(1)?.as_u64()?)));
        let Some((a, b)) = offsets else { return Err(bad(format!("tensor {name} has no data_offsets"))) };
        let (start, end) = (data_start + a, data_start + b);
        if a > b || end > file_len {
            return Err(bad(format!("tensor {name}'s bytes {a}..{b} lie past the file's end")));
        }
        out.insert(name, TensorEntry { dtype, shape, start, end });
    }
    Ok(out)
}

/// The f32 tensors of `path` whose names `wanted` accepts, reading only their bytes.
pub fn read_tensors(path: &Path, wanted: impl Fn(&str) -> bool) -> std::io::Result<Tensors> {
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {m}", path.display()));
    let index = read_index(path)?;
    let mut f = File::open(path)?;
    let mut out = Tensors::new();
    for (name, e) in index.into_iter().filter(|(n, _)| wanted(n)) {
        if e.dtype != "F32" {
            return Err(bad(format!("tensor {name} is {}, not F32", e.dtype)));
        }
        let len = e.end - e.start;
        let numel: usize = e.shape.iter().product();
        if len > MAX_TENSOR_BYTES || len != 4 * numel as u64 {
            return Err(bad(format!("tensor {name} spans {len} bytes for shape {:?}", e.shape)));
        }
        let mut bytes = vec![0u8; len as usize];
        f.seek(SeekFrom::Start(e.start))?;
        f.read_exact(&mut bytes)?;
        let values = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        out.insert(name, (e.shape, values));
    }
    Ok(out)
}

/// What identifies a checkpoint file's contents for the cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FileKey {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
}

/// Each tracked view's series (or why there are none) for one checkpoint.
type Figures = BTreeMap<&'static str, Result<Vec<Series>, String>>;

/// The systems' declared views (built once a system: a parameter table builds the model's
/// graph) and the figures of every checkpoint read so far.
#[derive(Default)]
pub struct ViewCache {
    systems: Mutex<HashMap<String, Arc<Vec<ModelView>>>>,
    figures: Mutex<HashMap<FileKey, (u64, Arc<Figures>)>>,
    /// A counter for the cache's age order.
    uses: Mutex<u64>,
    /// Files read (not answered from the cache), for tests and the reader.
    pub reads: Mutex<u64>,
}

impl ViewCache {
    /// The views `system` declares; none for a system this build does not know.
    pub fn views_of(&self, system: &str) -> Arc<Vec<ModelView>> {
        if let Some(v) = self.systems.lock().unwrap().get(system) {
            return v.clone();
        }
        let views = Arc::new(alpha_systems::find(&system.to_lowercase()).map(|s| s.model_views()).unwrap_or_default());
        self.systems.lock().unwrap().insert(system.to_string(), views.clone());
        views
    }

    /// Every tracked view's figures for checkpoint `path` (real, inside the runs folder): from
    /// the cache while the file is unchanged, otherwise read once for all the views.
    fn figures(&self, views: &[ModelView], path: &Path) -> Result<Arc<Figures>, String> {
        let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
        let key = FileKey { path: path.to_path_buf(), len: meta.len(), modified: meta.modified().ok() };
        let tick = {
            let mut u = self.uses.lock().unwrap();
            *u += 1;
            *u
        };
        if let Some(hit) = self.figures.lock().unwrap().get_mut(&key) {
            hit.0 = tick;
            return Ok(hit.1.clone());
        }
        let tracked: Vec<&ModelView> = views.iter().filter(|v| matches!(v.content, Content::Tracked { .. })).collect();
        let tensors = read_tensors(path, |n| tracked.iter().any(|v| v.reads(n))).map_err(|e| e.to_string())?;
        *self.reads.lock().unwrap() += 1;
        let figures: Figures = tracked.iter().map(|v| (v.id, v.compute(&tensors))).collect();
        let figures = Arc::new(figures);
        let mut cache = self.figures.lock().unwrap();
        cache.insert(key, (tick, figures.clone()));
        if cache.len() > VIEW_CACHE_ENTRIES {
            let oldest = cache.iter().min_by_key(|(_, (t, _))| *t).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                cache.remove(&k);
            }
        }
        Ok(figures)
    }
}

/// A kept checkpoint of the run: its lineage row's step, branch, path and digest, and where the
/// file really is (None, with the reason, where it is gone or leads out of the runs folder).
pub struct Kept {
    pub step: u64,
    pub branch: u64,
    pub path: String,
    pub sha256: String,
    pub file: Result<PathBuf, String>,
}

/// The run's views as the page draws them: each declared view with its static content, and for
/// a tracked view its series at every kept checkpoint (oldest first).
pub fn answer(cache: &ViewCache, system: &str, kept: &[Kept]) -> Value {
    let views = cache.views_of(system);
    let figures: Vec<Result<Arc<Figures>, String>> = if views.iter().any(|v| !v.tensors().is_empty()) {
        kept.iter().map(|k| k.file.clone().and_then(|f| cache.figures(&views, &f))).collect()
    } else {
        vec![]
    };
    let out: Vec<Value> = views
        .iter()
        .map(|v| {
            let head = json!({"id": v.id, "title": v.title, "about": v.about});
            let mut v_json = head;
            match &v.content {
                Content::Table(t) => {
                    v_json["kind"] = json!("table");
                    v_json["table"] = json!(t);
                }
                Content::Points(p) => {
                    v_json["kind"] = json!("points");
                    v_json["points"] = json!(p);
                }
                Content::Tracked { tensors, .. } => {
                    v_json["kind"] = json!("tracked");
                    v_json["tensors"] = json!(tensors);
                    let rows: Vec<Value> = kept
                        .iter()
                        .zip(&figures)
                        .map(|(k, f)| {
                            let mut row =
                                json!({"step": k.step, "branch": k.branch, "path": k.path, "sha256": k.sha256});
                            match f.as_ref().map(|f| f.get(v.id)) {
                                Ok(Some(Ok(series))) => row["series"] = json!(series),
                                Ok(Some(Err(e))) => row["error"] = json!(e),
                                Ok(None) => row["error"] = json!("not computed"),
                                Err(e) => row["error"] = json!(e),
                            }
                            row
                        })
                        .collect();
                    v_json["checkpoints"] = json!(rows);
                }
            }
            v_json
        })
        .collect();
    json!({"system": system, "views": out})
}
