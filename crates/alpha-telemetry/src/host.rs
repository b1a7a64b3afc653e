//! The host and this process, from `/proc`. Each field is `None` where `/proc` does not answer
//! (not Linux, or a restricted container), so the sampler never fails on the host side.

use crate::HostSample;

/// Reads `/proc`, remembering the last CPU reading to turn CPU seconds into a percentage.
pub struct HostProbe {
    ticks_per_s: f64,
    last_cpu: Option<(f64, f64)>,
}

impl Default for HostProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl HostProbe {
    pub fn new() -> HostProbe {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        HostProbe { ticks_per_s: if ticks > 0 { ticks as f64 } else { 100.0 }, last_cpu: None }
    }

    /// Samples at Unix time `t` (used for the CPU percentage's interval).
    pub fn sample(&mut self, t: f64) -> HostSample {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let mut s =
            HostSample { load1: read("/proc/loadavg").as_deref().and_then(parse_load1), ..HostSample::default() };
        if let Some(m) = read("/proc/meminfo") {
            s.mem_available_mib = meminfo_kib(&m, "MemAvailable:").map(|k| k / 1024.0);
            s.mem_total_mib = meminfo_kib(&m, "MemTotal:").map(|k| k / 1024.0);
        }
        s.rss_mib = read("/proc/self/status").as_deref().and_then(|st| meminfo_kib(st, "VmRSS:")).map(|k| k / 1024.0);
        s.cpu_s = read("/proc/self/stat").as_deref().and_then(parse_cpu_ticks).map(|ticks| ticks / self.ticks_per_s);
        if let Some(cpu) = s.cpu_s {
            if let Some((t0, c0)) = self.last_cpu {
                if t > t0 {
                    s.cpu_pct = Some(100.0 * (cpu - c0).max(0.0) / (t - t0));
                }
            }
            self.last_cpu = Some((t, cpu));
        }
        s
    }
}

fn parse_load1(loadavg: &str) -> Option<f64> {
    loadavg.split_whitespace().next()?.parse().ok()
}

/// A "Key:   123 kB" line of /proc/meminfo or /proc/self/status, in KiB.
fn meminfo_kib(text: &str, key: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// utime + stime from /proc/self/stat, in clock ticks. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last ')'.
fn parse_cpu_ticks(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime field 15.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_formats() {
        assert_eq!(parse_load1("1.52 0.80 0.41 2/345 6789\n"), Some(1.52));
        let mem = "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   20480000 kB\n";
        assert_eq!(meminfo_kib(mem, "MemAvailable:"), Some(20480000.0));
        assert_eq!(meminfo_kib(mem, "Nope:"), None);
        let stat = "42 (we ird) name) R 1 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(parse_cpu_ticks(stat), Some(300.0));
    }

    #[test]
    fn cpu_percentage_tracks_busy_work() {
        let mut p = HostProbe::new();
        let t0 = crate::unix_now();
        assert_eq!(p.sample(t0).cpu_pct, None, "no interval yet");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed().as_millis() < 300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let pct = p.sample(crate::unix_now()).cpu_pct.unwrap();
        // A spinning thread is near 100% of a core on an idle machine, but a 2-core machine
        // busy with builds gave it 10% (measured): the probe must see the work, not its share.
        assert!(pct > 1.0 && pct < 250.0, "{pct}");
    }
}
