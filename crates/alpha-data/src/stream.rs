//! Reading prepared tokens back: training windows in order, resumable, and held-out windows
//! in a fixed order for scoring.
//!
//! A split's shards are read as one sequence of tokens. Training windows hold `len` tokens
//! (context + 1) and advance by `len - 1` (the context), so consecutive windows overlap by one
//! token and every token after the first is a prediction target exactly once per epoch. When
//! the next window would run past the end, the stream wraps to the start and the epoch count
//! goes up (the last `< len - 1` tokens of an epoch are not targets that epoch).
//!
//! The [`Cursor`] (position of the next window's first token, and the epoch) is all a
//! checkpoint needs to store to resume exactly.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};

use crate::corpus::Split;
use crate::error::DataError;
use crate::manifest::Manifest;
use crate::shard::{ShardHeader, HEADER_LEN};
use crate::tokenizer::Tokenizer;

/// Where a training stream stands; store it in the checkpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Index of the next window's first token within the split.
    pub position: u64,
    /// Completed passes over the split.
    pub epoch: u64,
}

struct ShardFile {
    path: PathBuf,
    file: File,
    start: u64,
    tokens: u64,
}

/// A split of a prepared directory, read as windows of tokens.
pub struct TokenStream {
    dir: PathBuf,
    split: Split,
    manifest: Manifest,
    tokenizer: Tokenizer,
    shards: Vec<ShardFile>,
    total: u64,
    cursor: Cursor,
    raw: Vec<u8>,
}

impl TokenStream {
    /// Opens `split` of the prepared directory `dir`: reads the manifest and tokenizer, checks
    /// every shard's header and length against them, and recomputes each shard's SHA-256
    /// against the manifest (a flipped byte is refused before it is trained on).
    pub fn open(dir: &Path, split: Split) -> Result<Self> {
        let manifest = Manifest::load(dir)?;
        let tokenizer = manifest.tokenizer(dir)?;
        let infos = &manifest.split(split).shards;
        let mut shards = Vec::new();
        let mut start = 0u64;
        for s in infos {
            let path = manifest.shard_path(dir, s)?;
            let header = ShardHeader::read(&path)?;
            manifest.check_header(&path, s, &header)?;
            let file = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
            shards.push(ShardFile { path, file, start, tokens: header.tokens });
            start = start
                .checked_add(header.tokens)
                .with_context(|| format!("{}: the {split} split's token counts overflow", dir.display()))?;
        }
        ensure!(start > 0, "{}: the {split} split holds no tokens", dir.display());
        {
            use rayon::prelude::*;
            shards.par_iter().zip(infos.par_iter()).try_for_each(|(f, info)| manifest.check_sha256(&f.path, info))?;
        }
        Ok(TokenStream {
            dir: dir.to_path_buf(),
            split,
            manifest,
            tokenizer,
            shards,
            total: start,
            cursor: Cursor::default(),
            raw: Vec::new(),
        })
    }

    /// Recomputes every shard's SHA-256 (both splits) against the manifest.
    pub fn verify(&self) -> Result<()> {
        self.manifest.verify_shards(&self.dir)
    }

    /// Fails with a clear message unless the data's vocabulary is the system's.
    pub fn check_vocab(&self, expected: usize) -> Result<(), DataError> {
        self.manifest.check_vocab(&self.dir, expected)
    }

    pub fn split(&self) -> Split {
        self.split
    }
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.vocab_size()
    }
    pub fn eot_id(&self) -> u32 {
        self.tokenizer.eot_id()
    }
    /// Tokens in this split.
    pub fn len_tokens(&self) -> u64 {
        self.total
    }

    /// Windows of `len` tokens in one epoch (stride `len - 1`).
    pub fn windows_per_epoch(&self, len: usize) -> u64 {
        if len < 2 || self.total < len as u64 {
            0
        } else {
            (self.total - 1) / (len as u64 - 1)
        }
    }

    pub fn cursor(&self) -> Cursor {
        self.cursor
    }

    /// Resumes from a cursor a checkpoint stored.
    pub fn seek(&mut self, cursor: Cursor) -> Result<()> {
        ensure!(
            cursor.position < self.total,
            "cursor position {} is past the end of the {} split ({} tokens): \
             was the checkpoint made on other data?",
            cursor.position,
            self.split,
            self.total
        );
        self.cursor = cursor;
        Ok(())
    }

    /// The next training window of `len` = context + 1 tokens.
    pub fn next_window(&mut self, len: usize) -> Result<Vec<u32>> {
        let mut buf = vec![0u32; len];
        self.fill_window(&mut buf)?;
        Ok(buf)
    }

    /// Fills `buf` (context + 1 tokens) with the next training window and advances.
    pub fn fill_window(&mut self, buf: &mut [u32]) -> Result<()> {
        let len = buf.len() as u64;
        ensure!(len >= 2, "a window needs at least 2 tokens (context + 1)");
        ensure!(
            len <= self.total,
            "window of {len} tokens is longer than the {} split ({} tokens)",
            self.split,
            self.total
        );
        if self.total - len < self.cursor.position {
            self.cursor.position = 0;
            self.cursor.epoch += 1;
        }
        self.read_at(self.cursor.position, buf)?;
        self.cursor.position += len - 1;
        Ok(())
    }

    /// Up to `max_windows` windows of `len` tokens from this split, always the same ones in
    /// the same order: all windows (stride `len - 1`) if they number at most `max_windows`,
    /// else `max_windows` of them spread evenly (window `i * n / max_windows`). Does not move
    /// the cursor.
    pub fn heldout_windows(&mut self, len: usize, max_windows: usize) -> Result<Vec<Vec<u32>>> {
        let n = self.windows_per_epoch(len);
        ensure!(n > 0, "the {} split ({} tokens) is shorter than one window of {len}", self.split, self.total);
        let count = n.min(max_windows as u64);
        let mut out = Vec::with_capacity(count as usize);
        for i in 0..count {
            let w = if count == n { i } else { i * n / count };
            let mut buf = vec![0u32; len];
            self.read_at(w * (len as u64 - 1), &mut buf)?;
            out.push(buf);
        }
        Ok(out)
    }

    /// UTF-8 bytes the given target tokens decode to (end-of-text: 0): the denominator of
    /// bits per byte. Bytes tokenizer: 1 per byte token; BPE: each token's byte length.
    pub fn decoded_bytes(&self, tokens_predicted: &[u32]) -> u64 {
        self.tokenizer.decoded_bytes(tokens_predicted)
    }

    /// Reads tokens `[start, start + out.len())` of the split, across shard boundaries.
    pub fn read_at(&mut self, start: u64, out: &mut [u32]) -> Result<()> {
        ensure!(
            start.checked_add(out.len() as u64).is_some_and(|end| end <= self.total),
            "read of {} tokens at {start} is past the end of the {} split ({} tokens)",
            out.len(),
            self.split,
            self.total
        );
        let mut pos = start;
        let mut done = 0usize;
        let mut idx = self.shards.partition_point(|s| s.start + s.tokens <= pos);
        while done < out.len() {
            let s = &mut self.shards[idx];
            let offset = pos - s.start;
            let n = ((s.tokens - offset) as usize).min(out.len() - done);
            self.raw.resize(n * 2, 0);
            s.file.seek(SeekFrom::Start(HEADER_LEN + offset * 2))?;
            s.file.read_exact(&mut self.raw).with_context(|| format!("reading {}", s.path.display()))?;
            for (o, c) in out[done..done + n].iter_mut().zip(self.raw.chunks_exact(2)) {
                *o = u16::from_le_bytes([c[0], c[1]]) as u32;
            }
            done += n;
            pos += n as u64;
            idx += 1;
        }
        Ok(())
    }
}
