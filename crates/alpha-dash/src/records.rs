//! The run records as the dashboard reads them, and a JSON Lines reader that follows a file
//! while the trainer appends to it.
//!
//! Field types mirror the trainer's contract (`run.json`, `points.jsonl`, `lineage.jsonl`,
//! `invocations.jsonl`, `profile.jsonl`); every field but the identifying one has a default,
//! so a record written by an older or newer trainer still shows what it has.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use alpha_records::{Invocation, LineageRow, Point, ProfileRow, RunInfo};

/// How much of a JSON Lines file was usable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FileHealth {
    /// Rows parsed.
    pub rows: usize,
    /// Complete lines that did not parse (garbled or truncated mid-file): skipped, never fatal.
    pub skipped: usize,
    /// The file ends in an unterminated line: a write in progress, or a writer that died.
    pub partial_tail: bool,
}

/// A JSON Lines file read incrementally: each refresh parses only the bytes appended since
/// the last one, and starts over if the file shrank (rewritten or replaced).
pub struct Jsonl<T> {
    path: PathBuf,
    offset: u64,
    rows: Vec<T>,
    skipped: usize,
    partial_tail: bool,
    /// 1-based line numbers of the first few skipped lines, for the message.
    first_bad: Vec<u64>,
    lines: u64,
}

impl<T: DeserializeOwned> Jsonl<T> {
    pub fn new(path: PathBuf) -> Self {
        Jsonl { path, offset: 0, rows: Vec::new(), skipped: 0, partial_tail: false, first_bad: vec![], lines: 0 }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn rows(&self) -> &[T] {
        &self.rows
    }

    pub fn health(&self) -> FileHealth {
        FileHealth { rows: self.rows.len(), skipped: self.skipped, partial_tail: self.partial_tail }
    }

    pub fn first_bad_lines(&self) -> &[u64] {
        &self.first_bad
    }

    fn reset(&mut self) {
        *self = Jsonl::new(std::mem::take(&mut self.path));
    }

    /// Reads what was appended since the last call. A missing file is an empty one.
    pub fn refresh(&mut self) -> std::io::Result<()> {
        let len = match std::fs::metadata(&self.path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.reset();
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if len < self.offset {
            self.reset();
        }
        if len == self.offset {
            return Ok(());
        }
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::with_capacity((len - self.offset) as usize);
        file.take(len - self.offset).read_to_end(&mut buf)?;
        // Only complete lines are consumed; an unterminated tail is read again next time.
        let complete = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if complete > 0 {
            for line in buf[..complete - 1].split(|&b| b == b'\n') {
                self.parse_line(line);
            }
        }
        self.offset += complete as u64;
        self.partial_tail = buf[complete..].iter().any(|b| !b.is_ascii_whitespace());
        Ok(())
    }

    fn parse_line(&mut self, line: &[u8]) {
        self.lines += 1;
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            return;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(row) => self.rows.push(row),
            Err(_) => {
                self.skipped += 1;
                if self.first_bad.len() < 5 {
                    self.first_bad.push(self.lines);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn follows_appends_and_waits_for_a_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("points.jsonl");
        let mut j = Jsonl::<Point>::new(path.clone());
        j.refresh().unwrap();
        assert_eq!(j.health(), FileHealth::default(), "a missing file is empty");

        append(&path, "{\"step\":1,\"loss\":5.5}\n{\"step\":2,\"lo");
        j.refresh().unwrap();
        assert_eq!(j.health(), FileHealth { rows: 1, skipped: 0, partial_tail: true });

        append(&path, "ss\":5.25,\"unseen\":true}\n");
        j.refresh().unwrap();
        assert_eq!(j.health(), FileHealth { rows: 2, skipped: 0, partial_tail: false });
        assert_eq!(j.rows()[1].loss, Some(5.25));
        assert!(j.rows()[1].unseen);
    }

    #[test]
    fn garbled_lines_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lineage.jsonl");
        append(&path, "{\"step\":20,\"sha256\":\"ab\"}\n{\"step\":40,\"sha\n\n[1,2]\n{\"step\":60}\n");
        let mut j = Jsonl::<LineageRow>::new(path);
        j.refresh().unwrap();
        assert_eq!(j.health(), FileHealth { rows: 2, skipped: 2, partial_tail: false });
        assert_eq!(j.first_bad_lines(), [2, 4]);
        assert_eq!(j.rows().iter().map(|r| r.step).collect::<Vec<_>>(), [20, 60]);
    }

    #[test]
    fn a_rewritten_file_is_read_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        append(&path, "{\"step\":1}\n{\"step\":2}\n");
        let mut j = Jsonl::<Point>::new(path.clone());
        j.refresh().unwrap();
        assert_eq!(j.rows().len(), 2);
        std::fs::write(&path, "{\"step\":7}\n").unwrap();
        j.refresh().unwrap();
        assert_eq!(j.rows().iter().map(|p| p.step).collect::<Vec<_>>(), [7]);
        std::fs::remove_file(&path).unwrap();
        j.refresh().unwrap();
        assert!(j.rows().is_empty());
    }
}
