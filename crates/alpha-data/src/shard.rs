//! The token shard file: a fixed 64-byte header, then the tokens as u16 little endian.
//!
//! ```text
//! offset size field
//!      0    8 magic  b"ALPHATOK"
//!      8    4 version (u32 LE, currently 1)
//!     12    4 vocabulary size (u32 LE)
//!     16    8 token count (u64 LE)
//!     24    4 end-of-text id (u32 LE)
//!     28    4 reserved, zero
//!     32   32 SHA-256 of the tokenizer
//!     64      tokens, 2 bytes each
//! ```
//! The header carries the vocabulary and tokenizer hash so a shard read without its manifest
//! still refuses to feed a model of another vocabulary; the token count lets a truncated copy
//! be caught before training reads garbage.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::error::DataError;

pub const MAGIC: &[u8; 8] = b"ALPHATOK";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: u64 = 64;
/// Most tokens one shard holds (200 MB of u16).
pub const MAX_SHARD_TOKENS: u64 = 100_000_000;

/// A parsed shard header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardHeader {
    pub version: u32,
    pub vocab_size: u32,
    pub tokens: u64,
    pub eot_id: u32,
    pub tokenizer_sha256: [u8; 32],
}

impl ShardHeader {
    pub fn to_bytes(&self) -> [u8; HEADER_LEN as usize] {
        let mut h = [0u8; HEADER_LEN as usize];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&self.version.to_le_bytes());
        h[12..16].copy_from_slice(&self.vocab_size.to_le_bytes());
        h[16..24].copy_from_slice(&self.tokens.to_le_bytes());
        h[24..28].copy_from_slice(&self.eot_id.to_le_bytes());
        h[32..64].copy_from_slice(&self.tokenizer_sha256);
        h
    }

    /// Parses and checks a header: magic, version, and that the file holds every token.
    pub fn parse(path: &Path, h: &[u8], file_len: u64) -> Result<Self, DataError> {
        if h.len() < HEADER_LEN as usize || &h[0..8] != MAGIC {
            return Err(DataError::BadMagic {
                path: path.to_path_buf(),
                found: String::from_utf8_lossy(&h[..h.len().min(8)]).into_owned(),
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap());
        let version = u32_at(8);
        if version != VERSION {
            return Err(DataError::UnsupportedVersion { path: path.to_path_buf(), found: version, expected: VERSION });
        }
        let tokens = u64::from_le_bytes(h[16..24].try_into().unwrap());
        // The count is untrusted: a crafted 2^63 + n must not wrap around to a plausible length.
        let Some(expected_len) = tokens.checked_mul(2).and_then(|b| b.checked_add(HEADER_LEN)) else {
            return Err(DataError::ImpossibleTokenCount { path: path.to_path_buf(), tokens, actual_len: file_len });
        };
        if file_len != expected_len {
            return Err(DataError::Truncated { path: path.to_path_buf(), tokens, expected_len, actual_len: file_len });
        }
        Ok(ShardHeader {
            version,
            vocab_size: u32_at(12),
            tokens,
            eot_id: u32_at(24),
            tokenizer_sha256: h[32..64].try_into().unwrap(),
        })
    }

    /// Reads and checks the header of the shard at `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let mut f = File::open(path).with_context(|| format!("opening shard {}", path.display()))?;
        let len = f.metadata()?.len();
        let mut h = vec![0u8; HEADER_LEN.min(len) as usize];
        f.read_exact(&mut h)?;
        Ok(Self::parse(path, &h, len)?)
    }
}

/// Writes one shard whose token count is known up front, hashing the bytes as they go out
/// (so shards can be written in parallel and never re-read).
pub struct ShardWriter {
    path: PathBuf,
    out: BufWriter<File>,
    hasher: Sha256,
    header: ShardHeader,
    written: u64,
    buf: Vec<u8>,
}

impl ShardWriter {
    pub fn create(path: &Path, header: ShardHeader) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = ShardWriter {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 22, file),
            hasher: Sha256::new(),
            header,
            written: 0,
            buf: Vec::new(),
        };
        let h = w.header.to_bytes();
        w.out.write_all(&h)?;
        w.hasher.update(h);
        Ok(w)
    }

    /// Appends tokens given as u16 values.
    pub fn write(&mut self, tokens: &[u16]) -> Result<()> {
        self.buf.clear();
        self.buf.reserve(tokens.len() * 2);
        for &t in tokens {
            self.buf.extend_from_slice(&t.to_le_bytes());
        }
        self.flush_buf(tokens.len())
    }

    /// Appends one byte token per byte (the `bytes` tokenizer, no intermediate ids).
    pub fn write_bytes_as_tokens(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.clear();
        self.buf.reserve(bytes.len() * 2);
        for &b in bytes {
            self.buf.extend_from_slice(&[b, 0]);
        }
        self.flush_buf(bytes.len())
    }

    fn flush_buf(&mut self, tokens: usize) -> Result<()> {
        self.out.write_all(&self.buf)?;
        self.hasher.update(&self.buf);
        self.written += tokens as u64;
        Ok(())
    }

    /// Flushes, syncs to disk (a manifest written after it never names a shard the disk lacks)
    /// and returns the SHA-256 of the whole file.
    pub fn finish(mut self) -> Result<[u8; 32]> {
        anyhow::ensure!(
            self.written == self.header.tokens,
            "{}: wrote {} tokens, header says {}",
            self.path.display(),
            self.written,
            self.header.tokens
        );
        self.out.flush().with_context(|| format!("writing {}", self.path.display()))?;
        self.out.get_ref().sync_all().with_context(|| format!("syncing {}", self.path.display()))?;
        Ok(self.hasher.finalize().into())
    }
}

/// SHA-256 of a file's bytes.
pub fn sha256_file(path: &Path) -> Result<[u8; 32]> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// Reads every token of a shard (after checking its header).
pub fn read_tokens(path: &Path) -> Result<(ShardHeader, Vec<u16>)> {
    let header = ShardHeader::read(path)?;
    let bytes = std::fs::read(path)?;
    let tokens = bytes[HEADER_LEN as usize..].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    Ok((header, tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_is_64_bytes() {
        let h = ShardHeader { version: VERSION, vocab_size: 12288, tokens: 3, eot_id: 0, tokenizer_sha256: [7; 32] };
        let bytes = h.to_bytes();
        assert_eq!(&bytes[..8], b"ALPHATOK");
        let parsed = ShardHeader::parse(Path::new("x"), &bytes, HEADER_LEN + 6).unwrap();
        assert_eq!(parsed, h);
        assert!(matches!(ShardHeader::parse(Path::new("x"), &bytes, HEADER_LEN + 4), Err(DataError::Truncated { .. })));
    }

    #[test]
    fn a_token_count_that_overflows_the_length_is_refused() {
        // 2^63 + 3 tokens: doubled with wrapping arithmetic this is 6 bytes, the file's length.
        let h = ShardHeader {
            version: VERSION,
            vocab_size: 256,
            tokens: (1 << 63) + 3,
            eot_id: 3,
            tokenizer_sha256: [0; 32],
        };
        let err = ShardHeader::parse(Path::new("x.tok"), &h.to_bytes(), HEADER_LEN + 6).unwrap_err();
        assert!(matches!(err, DataError::ImpossibleTokenCount { tokens, .. } if tokens == (1 << 63) + 3), "{err}");
        assert!(err.to_string().contains("x.tok"), "{err}");
        let max = ShardHeader { tokens: u64::MAX, ..h };
        assert!(ShardHeader::parse(Path::new("x.tok"), &max.to_bytes(), HEADER_LEN).is_err());
    }
}
