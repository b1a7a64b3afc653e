//! Run directories: a directory belongs to one run, and one process writes it at a time.
//!
//! **Lock.** A `train` process holds an exclusive advisory lock (`flock`) on `run.lock` in the
//! directory for its whole life and writes its pid and host into it, so a second process is
//! refused with a message naming the holder. The kernel drops the lock when the process ends,
//! however it ends (`kill -9` included), so a crash never leaves a stale lock; the file itself
//! stays, since removing it would race with a process that has just opened it.
//!
//! **Ownership.** A directory that holds a run (`run.json`, records or checkpoints) takes only
//! an invocation that continues that run's lineage: `--resume` from one of its checkpoints
//! (named in its `lineage.jsonl`, or lying in its `checkpoints/` folder). A fresh start, or a
//! resume from another run's checkpoint, must pick another directory.
//!
//! **Branches.** Resuming from a checkpoint that is not the tip of its line — a later
//! checkpoint descends from it in the lineage, or a later checkpoint file lies in its folder —
//! starts branch N (the next unused number), whose checkpoints go to `checkpoints/branch-N/`
//! under the same `step-NNNNNN.safetensors` names; the main line is branch 0 in `checkpoints/`.
//! A folder rather than a name suffix because then no file of the old line is ever a write
//! target (a branch's folder is new when the branch starts), a branch's checkpoints list
//! together, and a checkpoint's step is read from its name the same way in every line. The
//! lineage, points and invocation rows carry the branch, and points rows the invocation, so the
//! dashboard can tell a branch's curve from the line it left. Resuming from the tip continues
//! its line in its folder.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use alpha_records::{jsonl, LineageRow};
use anyhow::{bail, Context, Result};

use crate::checkpoint::Checkpoint;

/// The lock file's name.
pub const LOCK_FILE: &str = "run.lock";

/// The exclusive lock on a run directory, held until dropped (or the process ends).
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Take the directory's lock (creating the directory), or say who holds it.
    pub fn acquire(dir: &Path) -> Result<RunLock> {
        fs::create_dir_all(dir).with_context(|| format!("creating run directory {}", dir.display()))?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; it blocks nothing (LOCK_NB).
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(err).with_context(|| format!("locking {}", path.display()));
            }
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() { "another process".to_string() } else { format!("process {holder}") };
            bail!(
                "run directory {} is in use: {who} is training into it (it holds {}); wait for it to finish, or pick another --run-dir",
                dir.display(),
                path.display()
            );
        }
        let me = format!("pid {} on {}\n", std::process::id(), alpha_records::liveness::hostname());
        file.set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(me.as_bytes()))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(RunLock { _file: file })
    }
}

/// The step of a checkpoint file named `step-NNNNNN.safetensors`.
fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix("step-")?.strip_suffix(".safetensors")?.parse().ok()
}

/// The branch whose folder `folder` is: `checkpoints` is 0, `checkpoints/branch-N` is N.
fn branch_of_folder(run_dir: &Path, folder: &Path) -> Option<u64> {
    let checkpoints = run_dir.join("checkpoints");
    if folder == checkpoints {
        return Some(0);
    }
    if folder.parent() == Some(checkpoints.as_path()) {
        return folder.file_name()?.to_str()?.strip_prefix("branch-")?.parse().ok().filter(|&n| n > 0);
    }
    None
}

/// The folder of branch `branch`'s checkpoints, relative to the run directory.
pub fn branch_folder(branch: u64) -> PathBuf {
    let base = PathBuf::from("checkpoints");
    if branch == 0 {
        base
    } else {
        base.join(format!("branch-{branch}"))
    }
}

/// Checkpoint `step` of `branch`, relative to the run directory.
pub fn checkpoint_rel(branch: u64, step: u64) -> PathBuf {
    branch_folder(branch).join(format!("step-{step:06}.safetensors"))
}

/// The run directory a checkpoint lies in: the folder above `checkpoints/` (main line) or
/// above `checkpoints/branch-N/` (a branch); `None` for a checkpoint outside a run's folders.
pub fn run_dir_of(checkpoint: &Path) -> Option<PathBuf> {
    let folder = checkpoint.parent()?;
    let name = folder.file_name()?.to_str()?;
    let checkpoints = if name == "checkpoints" {
        folder
    } else {
        let n: u64 = name.strip_prefix("branch-")?.parse().ok()?;
        let up = folder.parent()?;
        (n > 0 && up.file_name()? == "checkpoints").then_some(up)?
    };
    Some(checkpoints.parent()?.to_path_buf())
}

/// The steps of the checkpoint files in a folder.
fn steps_in(folder: &Path) -> Vec<u64> {
    fs::read_dir(folder)
        .map(|rd| rd.filter_map(|e| e.ok()?.file_name().to_str().and_then(step_of)).collect())
        .unwrap_or_default()
}

/// Branch numbers whose folders exist.
fn branch_folders(run_dir: &Path) -> Vec<u64> {
    fs::read_dir(run_dir.join("checkpoints"))
        .map(|rd| {
            rd.filter_map(|e| {
                let e = e.ok()?;
                e.file_type().ok()?.is_dir().then_some(())?;
                branch_of_folder(run_dir, &e.path())
            })
            .collect()
        })
        .unwrap_or_default()
}

/// What of a run the directory holds, or `None` when it holds none.
pub fn holds_run(dir: &Path) -> Option<String> {
    let mut what: Vec<&str> =
        ["run.json", "points.jsonl", "lineage.jsonl"].into_iter().filter(|f| dir.join(f).exists()).collect();
    let checkpoints = !steps_in(&dir.join("checkpoints")).is_empty()
        || branch_folders(dir).iter().any(|&b| !steps_in(&dir.join(branch_folder(b))).is_empty());
    if checkpoints {
        what.push("checkpoints");
    }
    (!what.is_empty()).then(|| what.join(", "))
}

/// Where an invocation writes in a run directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// The branch its checkpoints go to (0: the main line).
    pub branch: u64,
    /// The resumed checkpoint's lineage row, when it lies in the directory's folders but its
    /// row is missing (a crash between writing it and its row): the run lists it again, so the
    /// lineage stays whole.
    pub unlisted: Option<LineageRow>,
}

/// Where an invocation writes into `dir`: branch 0 for a directory holding no run; for a
/// resume from one of its checkpoints, that checkpoint's branch when it is the tip of it, else
/// a new branch. Refuses a directory holding a run that the invocation does not continue.
pub fn place(dir: &Path, resume: Option<(&Path, &Checkpoint)>) -> Result<Placement> {
    let Some(held) = holds_run(dir) else { return Ok(Placement { branch: 0, unlisted: None }) };
    let Some((path, ckpt)) = resume else {
        bail!(
            "run directory {} holds another run ({held}); pick another --run-dir, or continue that run with --resume and one of its checkpoints",
            dir.display()
        );
    };
    let lineage: Vec<LineageRow> = jsonl::read(&dir.join("lineage.jsonl"))
        .with_context(|| format!("reading {}/lineage.jsonl", dir.display()))?
        .rows;
    let in_lineage = lineage.iter().find(|r| r.sha256 == ckpt.sha256).map(|r| r.branch.unwrap_or(0));
    // Where the file lies, relative to the run directory, when it lies in one of its folders.
    let in_folder = path.canonicalize().ok().zip(dir.canonicalize().ok()).and_then(|(p, d)| {
        let branch = branch_of_folder(&d, p.parent()?)?;
        Some((branch, p.strip_prefix(&d).ok()?.to_path_buf()))
    });
    let branch = match (in_lineage, &in_folder) {
        (Some(b), _) => b,
        (None, Some((b, _))) => *b,
        (None, None) => bail!(
            "run directory {} holds another run ({held}), and {} is not one of its checkpoints; pick another --run-dir to start a new run from it",
            dir.display(),
            path.display()
        ),
    };
    let unlisted = match (in_lineage, in_folder) {
        (None, Some((_, rel))) => Some(LineageRow {
            step: ckpt.meta.step,
            path: rel.display().to_string(),
            sha256: ckpt.sha256.clone(),
            parent: ckpt.meta.parent.clone(),
            branch: Some(branch),
            ..Default::default()
        }),
        _ => None,
    };
    let has_child = lineage.iter().any(|r| r.parent.as_deref() == Some(ckpt.sha256.as_str()));
    let later_file = steps_in(&dir.join(branch_folder(branch))).into_iter().any(|s| s > ckpt.meta.step);
    if !has_child && !later_file {
        return Ok(Placement { branch, unlisted });
    }
    let used = lineage.iter().filter_map(|r| r.branch).chain(branch_folders(dir)).max().unwrap_or(0);
    let branch = used.checked_add(1).context("no branch number is left in this run directory")?;
    Ok(Placement { branch, unlisted })
}

/// Remove temporary files a crashed writer left in the run directory and its checkpoint
/// folders; returns what was removed.
pub fn sweep_tmp(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut folders = vec![dir.to_path_buf(), dir.join("checkpoints")];
    folders.extend(branch_folders(dir).into_iter().map(|b| dir.join(branch_folder(b))));
    let mut removed = vec![];
    for folder in folders {
        let Ok(entries) = fs::read_dir(&folder) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "tmp") && e.file_type().is_ok_and(|t| t.is_file()) {
                fs::remove_file(&p).with_context(|| format!("removing the leftover {}", p.display()))?;
                removed.push(p);
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = RunLock::acquire(dir.path()).unwrap();
        let e = RunLock::acquire(dir.path()).err().unwrap().to_string();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert!(e.contains("in use"), "{e}");
        drop(held);
        RunLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn branch_folders_and_steps_are_read_from_names() {
        assert_eq!(checkpoint_rel(0, 20), PathBuf::from("checkpoints/step-000020.safetensors"));
        assert_eq!(checkpoint_rel(3, 7), PathBuf::from("checkpoints/branch-3/step-000007.safetensors"));
        assert_eq!(step_of("step-000020.safetensors"), Some(20));
        assert_eq!(step_of("step-000020.safetensors.sha256"), None);
        let run = Path::new("/r");
        assert_eq!(branch_of_folder(run, Path::new("/r/checkpoints")), Some(0));
        assert_eq!(branch_of_folder(run, Path::new("/r/checkpoints/branch-2")), Some(2));
        assert_eq!(branch_of_folder(run, Path::new("/r/checkpoints/branch-0")), None);
        assert_eq!(branch_of_folder(run, Path::new("/elsewhere/checkpoints")), None);
        assert_eq!(run_dir_of(Path::new("runs/a/checkpoints/step-000002.safetensors")), Some(PathBuf::from("runs/a")));
        let in_branch = Path::new("runs/a/checkpoints/branch-2/step-000002.safetensors");
        assert_eq!(run_dir_of(in_branch), Some(PathBuf::from("runs/a")));
        assert_eq!(run_dir_of(Path::new("runs/a/step-000002.safetensors")), None);
        assert_eq!(run_dir_of(Path::new("runs/a/branch-2/step-000002.safetensors")), None);
    }

    #[test]
    fn leftover_temporary_files_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path().join("checkpoints/branch-1");
        fs::create_dir_all(&b).unwrap();
        for p in ["run.json.tmp", "checkpoints/step-000002.safetensors.tmp", "checkpoints/branch-1/x.tmp"] {
            fs::write(dir.path().join(p), b"half").unwrap();
        }
        fs::write(dir.path().join("checkpoints/step-000001.safetensors"), b"kept").unwrap();
        assert_eq!(sweep_tmp(dir.path()).unwrap().len(), 3);
        assert!(dir.path().join("checkpoints/step-000001.safetensors").exists());
        assert!(!dir.path().join("run.json.tmp").exists());
    }
}
