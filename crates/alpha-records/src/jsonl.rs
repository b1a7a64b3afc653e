//! JSON Lines as the run records use them: a row is its JSON and a newline, written in one
//! `write` on a file opened for appending, so rows from one writer never interleave and a crash
//! cuts at most the last line; a reader skips an unterminated or unparsable line instead of
//! failing, and a writer cuts such a tail off before it appends again, so the next row is not
//! glued onto it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The bytes of one row: its JSON and the newline that ends it.
pub fn line<T: Serialize>(row: &T) -> io::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(row)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Open `path` for appending (created if missing).
pub fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Append one row whole: one `write_all` of row and newline on an append-mode file.
pub fn append<T: Serialize>(file: &mut File, row: &T) -> io::Result<()> {
    file.write_all(&line(row)?)
}

/// Cut an unterminated last line (a row a crash left half written) off `path`, so that the
/// next row appended starts a line of its own. Returns the bytes removed. A missing file has
/// none. Only a run's single writer (holding the run directory's lock) may call it.
pub fn cut_torn_tail(path: &Path) -> io::Result<u64> {
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    // Walk back from the end a block at a time to the last newline.
    let mut end = len;
    let mut block = vec![0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let n = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block[..n])?;
        if let Some(i) = block[..n].iter().rposition(|&b| b == b'\n') {
            end = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        file.set_len(end)?;
        file.sync_all()?;
    }
    Ok(len - end)
}

/// Rows read from a JSON Lines file, and what was skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Rows<T> {
    pub rows: Vec<T>,
    /// 1-based numbers of complete lines that did not parse.
    pub skipped: Vec<u64>,
    /// The file ends in a line without its newline (a write cut short): not read.
    pub torn_tail: bool,
}

impl<T> Default for Rows<T> {
    fn default() -> Self {
        Rows { rows: Vec::new(), skipped: Vec::new(), torn_tail: false }
    }
}

/// Parse JSON Lines: complete lines that parse become rows; a line that does not parse is
/// skipped and counted; an unterminated last line is skipped and flagged.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Rows<T> {
    let mut out = Rows::default();
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    out.torn_tail = bytes[complete..].iter().any(|b| !b.is_ascii_whitespace());
    if complete == 0 {
        return out;
    }
    for (i, l) in bytes[..complete - 1].split(|&b| b == b'\n').enumerate() {
        if l.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        match serde_json::from_slice(l) {
            Ok(row) => out.rows.push(row),
            Err(_) => out.skipped.push(i as u64 + 1),
        }
    }
    out
}

/// Read a JSON Lines file as [`parse`] does; a missing file has no rows.
pub fn read<T: DeserializeOwned>(path: &Path) -> io::Result<Rows<T>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(parse(&bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Rows::default()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Point;

    fn point(step: u64) -> Point {
        Point { step, loss: Some(1.0 / step as f64), ..Default::default() }
    }

    #[test]
    fn a_torn_tail_is_skipped_and_flagged_not_an_error() {
        let dir = std::env::temp_dir().join(format!("alpha-records-jsonl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("points.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut f = open_append(&path).unwrap();
        for s in 1..=3 {
            append(&mut f, &point(s)).unwrap();
        }
        // A fourth row cut short, as a crash mid-write leaves it.
        let torn = line(&point(4)).unwrap();
        f.write_all(&torn[..torn.len() / 2]).unwrap();
        let rows: Rows<Point> = read(&path).unwrap();
        assert_eq!(rows.rows.iter().map(|p| p.step).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!(rows.torn_tail);
        assert!(rows.skipped.is_empty());

        // The writer cuts the tail before appending, so the next row stands on its own line.
        assert_eq!(cut_torn_tail(&path).unwrap(), (torn.len() / 2) as u64);
        let mut f = open_append(&path).unwrap();
        append(&mut f, &point(4)).unwrap();
        let rows: Rows<Point> = read(&path).unwrap();
        assert_eq!(rows.rows.iter().map(|p| p.step).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert!(!rows.torn_tail);
        assert_eq!(cut_torn_tail(&path).unwrap(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_garbled_line_is_counted_and_the_rest_read() {
        let text = b"{\"step\":1}\nnot json\n{\"step\":3}\n{\"step\":";
        let rows: Rows<Point> = parse(text);
        assert_eq!(rows.rows.iter().map(|p| p.step).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(rows.skipped, vec![2]);
        assert!(rows.torn_tail);
        // A row without the fields added later still reads, with their defaults.
        let old: Rows<Point> = parse(b"{\"step\":5,\"loss\":2.5}\n");
        assert_eq!(old.rows[0].invocation, None);
        assert_eq!(old.rows[0].branch, None);
    }

    #[test]
    fn one_row_is_one_write_of_row_and_newline() {
        let bytes = line(&point(9)).unwrap();
        assert_eq!(bytes.last(), Some(&b'\n'));
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1);
        let back: Point = serde_json::from_slice(&bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(back, point(9));
    }
}
