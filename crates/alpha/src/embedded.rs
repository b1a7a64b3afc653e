//! `alpha build`: one self-contained executable per system. It is this binary with a payload
//! appended — the system, device, batch and its compiled plans (training step and forward
//! pass) — that it finds at start and runs by itself: `train`, `resume`, `predict`, `score`.

use std::fs;
use std::io::Write;
use std::path::Path;

use alpha_plan::Plan;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 16] = b"ALPHA-PAYLOAD-01";

#[derive(Serialize, Deserialize)]
pub struct Payload {
    pub system: String,
    pub device: String,
    pub batch: usize,
    pub plans: Vec<Plan>,
    /// For a CUDA build: each program's kernels as PTX, by program key.
    #[serde(default)]
    pub ptx: std::collections::HashMap<String, Vec<String>>,
    pub built_at: String,
}

/// The payload of the running executable, if it has one.
pub fn read_own() -> Option<Payload> {
    let exe = std::env::current_exe().ok()?;
    let bytes = fs::read(exe).ok()?;
    if bytes.len() < 24 || &bytes[bytes.len() - 16..] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(bytes[bytes.len() - 24..bytes.len() - 16].try_into().ok()?) as usize;
    let start = bytes.len().checked_sub(24 + len)?;
    serde_json::from_slice(&bytes[start..bytes.len() - 24]).ok()
}

/// Write `out`: this executable (without any payload of its own) plus `payload`.
pub fn write(out: &Path, payload: &Payload) -> Result<()> {
    let exe = std::env::current_exe().context("finding the running executable")?;
    let mut bytes = fs::read(&exe).with_context(|| format!("reading {}", exe.display()))?;
    if bytes.len() >= 24 && &bytes[bytes.len() - 16..] == MAGIC {
        bail!("this executable is itself a built system; build from the alpha binary");
    }
    let json = serde_json::to_vec(payload)?;
    bytes.extend_from_slice(&json);
    bytes.extend_from_slice(&(json.len() as u64).to_le_bytes());
    bytes.extend_from_slice(MAGIC);
    let tmp = out.with_extension("tmp");
    {
        let mut f = fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    }
    fs::rename(&tmp, out).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
