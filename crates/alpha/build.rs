//! Names the commit a binary was built from, for `alpha --version`.
//!
//! Why: a binary carried to another machine (the GPU's) must say which tree it is; a stale one
//! sent by mistake otherwise measures the wrong code unnoticed. Outside a git checkout (a source
//! archive) the commit reads "unknown"; uncommitted changes add "+changes".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let changed = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let suffix = if changed { "+changes" } else { "" };
    println!("cargo:rustc-env=ALPHA_COMMIT={commit}{suffix}");
    // Run again when the checkout moves to another commit or its sources change (a directory
    // is watched whole), so "+changes" stays true.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for f in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={dir}/{f}");
        }
    }
    for tree in ["../../crates", "../../systems", "../../Cargo.toml"] {
        println!("cargo:rerun-if-changed={tree}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
