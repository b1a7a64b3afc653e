//! The crate reads top to bottom — backend → lowering → fusion passes → kernels → runtime (the
//! driver and the PTX builder) — and no module imports from a layer above its own. This reads
//! every source file and fails on a path that reaches up (comments and docs aside), so a new
//! module keeps the layering the crate's documentation promises.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out
}

/// (file, line number, line) for each code line (not a comment) under `layer` naming one of
/// `above`.
fn upward_paths(layer: &str, above: &[&str]) -> Vec<(String, usize, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let at = root.join(layer);
    let files = if at.is_dir() { sources(&at) } else { vec![at.with_extension("rs")] };
    assert!(!files.is_empty(), "no sources for layer {layer}");
    let mut found = vec![];
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if above.iter().any(|p| code.contains(p)) {
                found.push((f.display().to_string(), i + 1, line.trim().to_string()));
            }
        }
    }
    found
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let backend = ["crate::backend", "crate::CudaBackend"];
    let lowering = ["crate::lower", "crate::config", "crate::CudaConfig"];
    let fusion = ["crate::fusion"];
    let kernels = ["crate::kernels", "crate::catalog"];
    let cases: [(&str, Vec<&str>); 5] = [
        ("lower", backend.to_vec()),
        ("fusion", [&backend[..], &["crate::lower"]].concat()),
        ("kernels", [&backend[..], &lowering[..], &fusion[..]].concat()),
        ("runtime", [&backend[..], &lowering[..], &fusion[..], &kernels[..]].concat()),
        ("ptx", [&backend[..], &lowering[..], &fusion[..], &kernels[..], &["crate::runtime"]].concat()),
    ];
    let mut wrong = vec![];
    for (layer, above) in &cases {
        wrong.extend(upward_paths(layer, above));
    }
    assert!(wrong.is_empty(), "imports from a layer above: {wrong:#?}");
}

/// The check above finds a path where one is written (so its silence means something).
#[test]
fn the_check_sees_an_upward_path() {
    let found = upward_paths("lower", &["crate::kernels"]);
    assert!(!found.is_empty(), "the lowering names the kernels it launches");
}
