//! Files that are either whole or absent: written to a temporary file beside the target,
//! synced, then renamed over it, so a kill at any moment leaves the old file or the new one,
//! never an empty or half-written one.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The temporary file `path` is written through (hidden, ends in `.tmp`, names the writer's
/// process so two writers never share one).
pub fn temporary_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Writes `bytes` to `path` atomically; `crash_point` names the write for [`crate::crash`].
pub fn write(path: &Path, bytes: &[u8], crash_point: &str) -> Result<()> {
    let tmp = temporary_path(path);
    let result = (|| -> Result<()> {
        let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let half = bytes.len() / 2;
        f.write_all(&bytes[..half]).with_context(|| format!("writing {}", tmp.display()))?;
        crate::crash::point(crash_point);
        f.write_all(&bytes[half..]).with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all().with_context(|| format!("syncing {}", tmp.display()))?;
        drop(f);
        std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
        sync_dir(path.parent().unwrap_or(Path::new(".")))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Syncs a folder, so that renames and removals in it survive a power cut.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing folder {}", dir.display()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_the_file_whole_and_leaves_no_temporary() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("manifest.json");
        std::fs::write(&path, "old").unwrap();
        super::write(&path, b"new contents", "unused").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new contents");
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["manifest.json"]);
    }
}
