//! Whether the process a record names is still running: `kill(pid, 0)` says whether the pid
//! exists, and on Linux `/proc/<pid>/stat` gives its start time (so a pid reused by another
//! process is not taken for the run's) and whether it is a zombie (ended, not yet reaped).

/// This host's name, as `run.json` records it.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The process's state letter and start time (clock ticks after boot) from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, field 2, is in parentheses and may hold spaces: fields after it are
    // counted from its closing parenthesis.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; field 22 (starttime) is fields[19].
    let state = fields.first()?.chars().next()?;
    let started = fields.get(19)?.parse().ok()?;
    Some((state, started))
}

/// The start time of process `pid` (clock ticks after boot), where `/proc` tells it.
pub fn process_start(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(_, s)| s)
}

/// Whether process `pid` — the one that started at `started`, when given — is running.
pub fn process_alive(pid: u32, started: Option<u64>) -> bool {
    let Ok(id) = libc::pid_t::try_from(pid) else { return false };
    if id <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; it only checks that the pid exists.
    let rc = unsafe { libc::kill(id, 0) };
    let exists = rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    match proc_stat(pid) {
        Some((state, _)) if state == 'Z' || state == 'X' => false,
        Some((_, s)) => started.is_none_or(|want| want == s),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_an_ended_one_is_not() {
        let me = std::process::id();
        assert!(process_alive(me, process_start(me)));
        // The same pid with another start time is another process.
        if let Some(s) = process_start(me) {
            assert!(!process_alive(me, Some(s + 1)));
        }
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid, None));
        assert!(!process_alive(0, None));
        assert!(!process_alive(u32::MAX, None));
    }

    #[test]
    fn a_stale_running_record_reads_as_interrupted() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let info = crate::RunInfo {
            state: "running".into(),
            steps_done: 20,
            pid: Some(pid),
            host: Some(hostname()),
            last_checkpoint: Some("checkpoints/step-000020.safetensors".into()),
            ..Default::default()
        };
        assert!(info.is_stale());
        let seen = info.clone().observed();
        assert_eq!(seen.state, crate::INTERRUPTED);
        assert!(seen.message.unwrap().contains("checkpoints/step-000020.safetensors"));
        // Still running, another host, or no pid: taken at its word.
        let me = std::process::id();
        let live = crate::RunInfo { pid: Some(me), pid_started: process_start(me), ..info.clone() };
        assert_eq!(live.observed().state, "running");
        let elsewhere = crate::RunInfo { host: Some(format!("{}-elsewhere", hostname())), ..info.clone() };
        assert_eq!(elsewhere.observed().state, "running");
        let old = crate::RunInfo { pid: None, ..info };
        assert_eq!(old.observed().state, "running");
    }
}
