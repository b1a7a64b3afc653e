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

pub use alpha_records::{HealthRow, Invocation, LineageRow, Point, ProfileRow, RunInfo};

/// How much of a JSON Lines file was usable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FileHealth {
    /// Rows parsed.
    pub rows: usize,
    /// Complete lines that did not parse (garbled or truncated mid-file): skipped, never fatal.
    pub skipped: usize,
    /// The file ends in an unterminated line: a write in progress, or a writer that died.
    pub partial_tail: bool,
    /// More was appended than one refresh reads ([`MAX_READ_BYTES`]): the next one goes on.
    pub behind: bool,
}

/// The longest line kept while its end is awaited. A row is a few hundred bytes; a longer
/// unterminated tail is not a row being written, so it is dropped as it is read and counted as
/// one skipped line once it ends, never held or read again.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The most one refresh reads of one file, so that no request waits on a huge file: a file
/// larger than this is taken in over several refreshes (its health says `behind` meanwhile).
pub const MAX_READ_BYTES: u64 = 16 << 20;

/// Which file a path named when it was last read: a different one (the path replaced by a
/// rename) is read from its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    #[cfg(unix)]
    dev: u64,
    #[cfg(unix)]
    ino: u64,
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> FileId {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            FileId { dev: meta.dev(), ino: meta.ino() }
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            FileId {}
        }
    }
}

/// A JSON Lines file read incrementally: each refresh reads only the bytes appended since the
/// last one (at most [`MAX_READ_BYTES`]), keeps an unterminated tail (up to [`MAX_LINE_BYTES`])
/// until its newline comes, and starts over if the file shrank or was replaced.
pub struct Jsonl<T> {
    path: PathBuf,
    /// When set, the file is read only if its real path (links followed) lies inside this
    /// folder, which must be canonical.
    root: Option<PathBuf>,
    file: Option<FileId>,
    /// Bytes of the file consumed: complete lines, and the tail held in `pending`.
    read_to: u64,
    /// The unterminated line read so far.
    pending: Vec<u8>,
    /// The unterminated line outgrew [`MAX_LINE_BYTES`]: the rest of it is dropped as it comes.
    discarding: bool,
    rows: Vec<T>,
    skipped: usize,
    behind: bool,
    /// 1-based line numbers of the first few skipped lines, for the message.
    first_bad: Vec<u64>,
    lines: u64,
    /// Bytes read from disk since the reader was made, over every refresh.
    bytes_read: u64,
    /// Why the file is not read (it leads outside the runs folder), if so.
    problem: Option<String>,
}

impl<T: DeserializeOwned> Jsonl<T> {
    pub fn new(path: PathBuf) -> Self {
        Jsonl {
            path,
            root: None,
            file: None,
            read_to: 0,
            pending: Vec::new(),
            discarding: false,
            rows: Vec::new(),
            skipped: 0,
            behind: false,
            first_bad: vec![],
            lines: 0,
            bytes_read: 0,
            problem: None,
        }
    }

    /// A reader of `path` that reads it only while its real path lies inside `root` (canonical).
    pub fn confined(path: PathBuf, root: PathBuf) -> Self {
        Jsonl { root: Some(root), ..Jsonl::new(path) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn rows(&self) -> &[T] {
        &self.rows
    }

    pub fn health(&self) -> FileHealth {
        FileHealth {
            rows: self.rows.len(),
            skipped: self.skipped,
            partial_tail: self.discarding || self.pending.iter().any(|b| !b.is_ascii_whitespace()),
            behind: self.behind,
        }
    }

    pub fn first_bad_lines(&self) -> &[u64] {
        &self.first_bad
    }

    /// Bytes read from disk so far, over every refresh.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Why the file is not read, if it is not (it leads outside the runs folder).
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    /// Forgets every row and starts again at the file's beginning.
    fn reset(&mut self) {
        let bytes_read = self.bytes_read;
        let problem = self.problem.take();
        *self = Jsonl { root: self.root.take(), ..Jsonl::new(std::mem::take(&mut self.path)) };
        self.bytes_read = bytes_read;
        self.problem = problem;
    }

    /// Reads what was appended since the last call. A missing file is an empty one; a file
    /// whose real path leads outside the root is not read (and [`Jsonl::problem`] says so).
    pub fn refresh(&mut self) -> std::io::Result<()> {
        let real = match &self.root {
            Some(root) => match crate::store::confine(root, &self.path) {
                Ok(p) => p,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.reset();
                    self.problem = None;
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    self.reset();
                    self.problem = Some(e.to_string());
                    return Ok(());
                }
                Err(e) => return Err(e),
            },
            None => self.path.clone(),
        };
        self.problem = None;
        let mut file = match File::open(&real) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.reset();
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        let id = FileId::of(&meta);
        let len = meta.len();
        if self.file != Some(id) || len < self.read_to {
            self.reset();
            self.file = Some(id);
        }
        self.behind = false;
        if len == self.read_to {
            return Ok(());
        }
        let want = (len - self.read_to).min(MAX_READ_BYTES);
        file.seek(SeekFrom::Start(self.read_to))?;
        let mut buf = Vec::with_capacity(want as usize);
        file.take(want).read_to_end(&mut buf)?;
        self.read_to += buf.len() as u64;
        self.bytes_read += buf.len() as u64;
        self.behind = self.read_to < len;
        self.take_in(&buf);
        Ok(())
    }

    /// Parses every line `bytes` completes; keeps (or drops, past [`MAX_LINE_BYTES`]) the rest.
    fn take_in(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = (&rest[..nl], &rest[nl + 1..]);
            if self.discarding {
                self.discarding = false;
                self.lines += 1;
                self.skip_line();
            } else if self.pending.is_empty() {
                self.parse_line(head);
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(head);
                self.parse_line(&line);
            }
            rest = tail;
        }
        if self.discarding {
            return;
        }
        if self.pending.len() + rest.len() > MAX_LINE_BYTES {
            self.pending = Vec::new();
            self.discarding = true;
        } else {
            self.pending.extend_from_slice(rest);
        }
    }

    fn skip_line(&mut self) {
        self.skipped += 1;
        if self.first_bad.len() < 5 {
            self.first_bad.push(self.lines);
        }
    }

    fn parse_line(&mut self, line: &[u8]) {
        self.lines += 1;
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            return;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(row) => self.rows.push(row),
            // A writer that died between a row and its newline (as the trainer once wrote rows,
            // in two writes) glued the next row onto it: both are whole, so both are kept.
            Err(_) => {
                match serde_json::Deserializer::from_slice(line).into_iter::<T>().collect::<Result<Vec<T>, _>>() {
                    Ok(rows) if rows.len() > 1 => self.rows.extend(rows),
                    _ => self.skip_line(),
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
        assert_eq!(j.health(), FileHealth { rows: 1, skipped: 0, partial_tail: true, behind: false });

        append(&path, "ss\":5.25,\"unseen\":true}\n");
        j.refresh().unwrap();
        assert_eq!(j.health(), FileHealth { rows: 2, skipped: 0, partial_tail: false, behind: false });
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
        assert_eq!(j.health(), FileHealth { rows: 2, skipped: 2, partial_tail: false, behind: false });
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

    #[test]
    fn a_huge_unterminated_tail_is_read_once_and_not_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("points.jsonl");
        append(&path, "{\"step\":1}\n");
        let tail = "x".repeat(3 * MAX_LINE_BYTES);
        append(&path, &tail);
        let len = std::fs::metadata(&path).unwrap().len();
        let mut j = Jsonl::<Point>::new(path.clone());
        for _ in 0..5 {
            j.refresh().unwrap();
        }
        assert_eq!(j.bytes_read(), len, "each byte is read once, however often the file is polled");
        assert_eq!(j.health(), FileHealth { rows: 1, skipped: 0, partial_tail: true, behind: false });
        assert!(j.pending.capacity() <= MAX_LINE_BYTES, "the overlong tail is not held");

        // Its end makes it one skipped line; the rows after it are read.
        append(&path, "yy\n{\"step\":3}\n{\"step\":4");
        j.refresh().unwrap();
        assert_eq!(j.health(), FileHealth { rows: 2, skipped: 1, partial_tail: true, behind: false });
        assert_eq!(j.first_bad_lines(), [2]);
        append(&path, "}\n");
        j.refresh().unwrap();
        assert_eq!(j.rows().iter().map(|p| p.step).collect::<Vec<_>>(), [1, 3, 4]);
        assert!(!j.health().partial_tail);
        assert_eq!(j.bytes_read(), std::fs::metadata(&path).unwrap().len());
    }

    #[test]
    fn one_refresh_reads_a_bounded_amount() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("telemetry.jsonl");
        let row = format!("{{\"step\":7,\"loss\":1.5,\"pad\":\"{}\"}}\n", "p".repeat(1000));
        let rows = (MAX_READ_BYTES as usize * 5 / 2).div_ceil(row.len());
        append(&path, &row.repeat(rows));
        let mut j = Jsonl::<Point>::new(path);
        j.refresh().unwrap();
        assert_eq!(j.bytes_read(), MAX_READ_BYTES);
        assert!(j.health().behind);
        let mut refreshes = 1;
        while j.health().behind {
            j.refresh().unwrap();
            refreshes += 1;
        }
        assert_eq!(refreshes, 3);
        assert_eq!(j.health(), FileHealth { rows, skipped: 0, partial_tail: false, behind: false });
    }

    #[test]
    fn a_replaced_file_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lineage.jsonl");
        append(&path, "{\"step\":20}\n");
        let mut j = Jsonl::<LineageRow>::new(path.clone());
        j.refresh().unwrap();
        // Renamed over by a longer file: the offset of the old one means nothing in it.
        let other = dir.path().join("new.jsonl");
        append(&other, "{\"step\":40}\n{\"step\":60}\n");
        std::fs::rename(&other, &path).unwrap();
        j.refresh().unwrap();
        assert_eq!(j.rows().iter().map(|r| r.step).collect::<Vec<_>>(), [40, 60]);
    }

    #[test]
    fn a_confined_file_that_links_outside_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("runs");
        std::fs::create_dir_all(root.join("r")).unwrap();
        let secret = dir.path().join("secret.jsonl");
        append(&secret, "{\"step\":1}\n");
        let link = root.join("r/points.jsonl");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let mut j = Jsonl::<Point>::confined(link.clone(), root.canonicalize().unwrap());
        j.refresh().unwrap();
        assert!(j.rows().is_empty());
        assert_eq!(j.bytes_read(), 0);
        assert!(j.problem().unwrap().contains("outside the runs folder"), "{:?}", j.problem());
        // A link inside the root is followed.
        std::fs::remove_file(&link).unwrap();
        std::fs::copy(&secret, root.join("r/real.jsonl")).unwrap();
        std::os::unix::fs::symlink(root.join("r/real.jsonl"), &link).unwrap();
        j.refresh().unwrap();
        assert_eq!(j.rows().len(), 1);
        assert_eq!(j.problem(), None);
    }

    #[test]
    fn rows_glued_by_a_lost_newline_are_both_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lineage.jsonl");
        append(&path, "{\"step\":20,\"path\":\"a\"}{\"step\":40,\"path\":\"b\"}\n{\"step\":60}{\"ste\n{\"step\":80}\n");
        let mut j = Jsonl::<LineageRow>::new(path);
        j.refresh().unwrap();
        assert_eq!(j.rows().iter().map(|r| r.step).collect::<Vec<_>>(), [20, 40, 80]);
        assert_eq!(j.rows()[1].path, "b");
        assert_eq!(j.health().skipped, 1, "a glued line with a torn part is skipped whole");
        assert_eq!(j.first_bad_lines(), [2]);
    }
}
