//! GPU and host telemetry for a training run, written to `runs/<name>/telemetry.jsonl`.
//!
//! A [`Sampler`] runs a background thread that appends one JSON line per period (a second
//! by default) until it is stopped or dropped. The GPU is read through NVML, which
//! `nvml-wrapper` loads at run time: a machine without the NVIDIA driver still trains, and the
//! sampler then records the host alone and says so in the first row's `note`.
//!
//! # `telemetry.jsonl`
//!
//! One [`Sample`] per line:
//!
//! ```json
//! {"t": 1760000000.25,
//!  "gpu": {"index": 0, "name": "NVIDIA H200", "util_pct": 97.0, "mem_util_pct": 41.0,
//!          "mem_used_mib": 20480.0, "mem_free_mib": 122000.0, "mem_total_mib": 143771.0,
//!          "power_w": 512.3, "power_limit_w": 700.0, "energy_j": 10234.5,
//!          "temp_c": 54.0, "sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0,
//!          "graphics_clock_mhz": 1980.0, "pstate": 0, "clock_event_mask": 4,
//!          "clock_events": ["sw_power_cap"], "pcie_tx_mbps": 0.3, "pcie_rx_mbps": 2.1,
//!          "fan_pct": null},
//!  "host": {"load1": 1.52, "mem_available_mib": 20011.0, "mem_total_mib": 24000.0,
//!           "rss_mib": 812.4, "cpu_s": 35.2, "cpu_pct": 99.1},
//!  "note": null}
//! ```
//!
//! - `t`: Unix seconds. Every measured field is `null` when the device or OS does not answer
//!   it, so one missing counter never hides the others.
//! - `gpu`: `null` when NVML could not be loaded or has no device; the first row's `note` then
//!   says why. `energy_j` is joules since the sampler started: NVML's total-energy counter where
//!   the card has one (Volta and newer), otherwise power integrated over the samples.
//!   `pcie_*_mbps` are NVML's 20 ms throughput windows in MB/s. `clock_events` names the active
//!   clock-event ("throttle") reasons; `clock_event_mask` is NVML's raw bit mask.
//! - `host`: 1-minute load average and memory from `/proc`; `rss_mib`, `cpu_s` (user + system
//!   CPU seconds) and `cpu_pct` (CPU over the last period, percent of one core) are the sampling
//!   process's own — the trainer's, since the trainer starts the sampler.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::{Deserialize, Serialize};

mod gpu;
mod host;

pub use gpu::GpuProbe;
pub use host::HostProbe;

/// The file name a sampler writes inside its run directory.
pub const TELEMETRY_FILE: &str = "telemetry.jsonl";

/// One line of `telemetry.jsonl`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sample {
    /// Unix seconds.
    pub t: f64,
    pub gpu: Option<GpuSample>,
    pub host: HostSample,
    /// Set on the first row (why there is no GPU, or which GPU is sampled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One GPU's state at one instant; see the crate docs for units.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSample {
    pub index: u32,
    pub name: Option<String>,
    pub util_pct: Option<f64>,
    pub mem_util_pct: Option<f64>,
    pub mem_used_mib: Option<f64>,
    pub mem_free_mib: Option<f64>,
    pub mem_total_mib: Option<f64>,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub energy_j: Option<f64>,
    pub temp_c: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub mem_clock_mhz: Option<f64>,
    pub graphics_clock_mhz: Option<f64>,
    pub pstate: Option<u32>,
    pub clock_event_mask: Option<u64>,
    pub clock_events: Vec<String>,
    pub pcie_tx_mbps: Option<f64>,
    pub pcie_rx_mbps: Option<f64>,
    pub fan_pct: Option<f64>,
}

/// The host and the sampling process at one instant; see the crate docs for units.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostSample {
    pub load1: Option<f64>,
    pub mem_available_mib: Option<f64>,
    pub mem_total_mib: Option<f64>,
    pub rss_mib: Option<f64>,
    pub cpu_s: Option<f64>,
    pub cpu_pct: Option<f64>,
}

/// How a [`Sampler`] runs.
#[derive(Clone, Debug)]
pub struct SamplerOptions {
    /// Time between samples.
    pub period: Duration,
    /// Whether to try NVML at all (tests and CPU runs on GPU machines can turn it off).
    pub gpu: bool,
    /// NVML's device index (NVML orders by PCI bus; set `CUDA_DEVICE_ORDER=PCI_BUS_ID` so CUDA's
    /// ordinals agree).
    pub gpu_index: u32,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions { period: Duration::from_secs(1), gpu: true, gpu_index: 0 }
    }
}

/// Samples GPU and host into `telemetry.jsonl` on a background thread until stopped or dropped.
pub struct Sampler {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<()>>,
    shared: Arc<Mutex<Shared>>,
    gpu_available: bool,
    note: Option<String>,
    path: PathBuf,
}

/// State the sampling thread shares with the owner.
#[derive(Default)]
struct Shared {
    samples: u64,
    energy_j: Option<f64>,
    probe: Option<GpuProbe>,
    write_error: Option<String>,
}

impl Sampler {
    /// Starts sampling every `period` into `run_dir/telemetry.jsonl` (appending, so a resumed
    /// run keeps its history). The first sample is written before this returns.
    pub fn start(run_dir: &Path, period: Duration) -> anyhow::Result<Sampler> {
        Self::start_with(run_dir, SamplerOptions { period, ..SamplerOptions::default() })
    }

    /// [`Sampler::start`] with every option.
    pub fn start_with(run_dir: &Path, options: SamplerOptions) -> anyhow::Result<Sampler> {
        std::fs::create_dir_all(run_dir).with_context(|| format!("creating run directory {}", run_dir.display()))?;
        let path = run_dir.join(TELEMETRY_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;

        let (probe, note) = if options.gpu {
            match GpuProbe::open(options.gpu_index) {
                Ok(p) => {
                    let note = format!("GPU {} sampled through NVML", p.describe());
                    (Some(p), note)
                }
                Err(why) => (None, format!("no GPU telemetry: {why}; recording the host only")),
            }
        } else {
            (None, "GPU sampling turned off; recording the host only".to_string())
        };
        let gpu_available = probe.is_some();
        let shared = Arc::new(Mutex::new(Shared { probe, ..Shared::default() }));
        let mut host = HostProbe::new();

        // The first row is written here, so even a run shorter than one period has one.
        let first = take_sample(&shared, &mut host, Some(note.clone()));
        write_sample(&mut file, &first).with_context(|| format!("writing {}", path.display()))?;
        shared.lock().unwrap().samples = 1;

        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let handle = {
            let stop = stop.clone();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("alpha-telemetry".into())
                .spawn(move || run_loop(file, options.period, stop, shared, host))
                .context("spawning the telemetry thread")?
        };
        Ok(Sampler { stop, handle: Some(handle), shared, gpu_available, note: Some(note), path })
    }

    /// Whether NVML answered for the chosen GPU; `false` means host-only rows.
    pub fn gpu_available(&self) -> bool {
        self.gpu_available
    }

    /// The note written on the first row: which GPU is sampled, or why none is.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows written so far.
    pub fn samples(&self) -> u64 {
        self.shared.lock().unwrap().samples
    }

    /// GPU energy in joules since the sampler started, read now (the NVML counter where the
    /// card has one, else the power integral so far); `None` without a GPU. The trainer divides
    /// it by the tokens trained for energy per token.
    pub fn energy_joules_since_start(&self) -> Option<f64> {
        let mut shared = self.shared.lock().unwrap();
        if let Some(j) = shared.probe.as_mut().and_then(|p| p.energy_counter_j()) {
            return Some(j);
        }
        shared.energy_j
    }

    /// Writes a last sample and stops the thread; later calls do nothing.
    pub fn stop(&mut self) {
        if let Some(handle) = self.handle.take() {
            let (lock, cvar) = &*self.stop;
            *lock.lock().unwrap() = true;
            cvar.notify_all();
            let _ = handle.join();
            if let Some(e) = self.shared.lock().unwrap().write_error.take() {
                eprintln!("alpha-telemetry: {e}");
            }
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run_loop(
    mut file: File,
    period: Duration,
    stop: Arc<(Mutex<bool>, Condvar)>,
    shared: Arc<Mutex<Shared>>,
    mut host: HostProbe,
) {
    let (lock, cvar) = &*stop;
    let mut next = Instant::now() + period;
    loop {
        // Wait until the next tick or a stop; a stop still writes one last row.
        let mut stopped = lock.lock().unwrap();
        while !*stopped {
            let now = Instant::now();
            if now >= next {
                break;
            }
            stopped = cvar.wait_timeout(stopped, next - now).unwrap().0;
        }
        let last = *stopped;
        drop(stopped);
        next += period;
        if next < Instant::now() {
            next = Instant::now() + period; // fell behind (suspended): skip, don't burst
        }
        let sample = take_sample(&shared, &mut host, None);
        let written = write_sample(&mut file, &sample);
        let mut s = shared.lock().unwrap();
        match written {
            Ok(()) => s.samples += 1,
            Err(e) => {
                if s.write_error.is_none() {
                    s.write_error = Some(format!("telemetry write failed: {e:#}"));
                }
            }
        }
        drop(s);
        if last {
            return;
        }
    }
}

fn take_sample(shared: &Mutex<Shared>, host: &mut HostProbe, note: Option<String>) -> Sample {
    let t = unix_now();
    let host = host.sample(t);
    let mut s = shared.lock().unwrap();
    let gpu = s.probe.as_mut().map(|p| p.sample(t));
    if let Some(g) = &gpu {
        s.energy_j = g.energy_j;
    }
    Sample { t, gpu, host, note }
}

/// One `write` call per line, so a reader racing the writer sees at most one partial line.
fn write_sample(file: &mut File, sample: &Sample) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(sample)?;
    line.push(b'\n');
    file.write_all(&line)?;
    Ok(())
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &Path) -> Vec<Sample> {
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    #[test]
    fn host_only_sampler_writes_rows_until_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let opts = SamplerOptions { period: Duration::from_millis(50), gpu: false, gpu_index: 0 };
        let mut s = Sampler::start_with(dir.path(), opts).unwrap();
        assert!(!s.gpu_available());
        assert!(s.note().unwrap().contains("host only"));
        std::thread::sleep(Duration::from_millis(280));
        s.stop();
        let n = s.samples();
        let rows = read(&dir.path().join(TELEMETRY_FILE));
        assert_eq!(rows.len() as u64, n);
        // 1 at start, ~5 ticks, 1 at stop; allow a slow, shared machine some slack.
        assert!(rows.len() >= 3 && rows.len() <= 9, "{} rows", rows.len());
        assert!(rows[0].note.as_deref().unwrap().contains("host only"));
        assert!(rows[1..].iter().all(|r| r.note.is_none() && r.gpu.is_none()));
        assert!(rows.windows(2).all(|w| w[1].t >= w[0].t));
        let h = &rows.last().unwrap().host;
        assert!(h.load1.unwrap() >= 0.0);
        assert!(h.mem_available_mib.unwrap() > 0.0);
        assert!(h.mem_total_mib.unwrap() >= h.mem_available_mib.unwrap());
        assert!(h.rss_mib.unwrap() > 0.5);
        assert!(h.cpu_s.unwrap() >= 0.0);
        assert!(h.cpu_pct.is_some());
        assert_eq!(s.energy_joules_since_start(), None);
        s.stop(); // idempotent
        assert_eq!(read(&dir.path().join(TELEMETRY_FILE)).len(), rows.len());
    }

    #[test]
    fn drop_stops_and_a_restart_appends() {
        let dir = tempfile::tempdir().unwrap();
        let opts = SamplerOptions { period: Duration::from_secs(3600), gpu: false, gpu_index: 0 };
        drop(Sampler::start_with(dir.path(), opts.clone()).unwrap());
        drop(Sampler::start_with(dir.path(), opts).unwrap());
        // Each sampler: its first row and its last row, nothing in between at an hour's period.
        let rows = read(&dir.path().join(TELEMETRY_FILE));
        assert_eq!(rows.len(), 4);
        assert_eq!(rows.iter().filter(|r| r.note.is_some()).count(), 2);
    }

    #[test]
    fn gpu_path_degrades_to_host_only_with_a_note() {
        // With a GPU this records it; without one (CI) it must still write host rows.
        let dir = tempfile::tempdir().unwrap();
        let mut s = Sampler::start(dir.path(), Duration::from_millis(100)).unwrap();
        s.stop();
        let rows = read(&dir.path().join(TELEMETRY_FILE));
        assert!(rows.len() >= 2);
        let note = rows[0].note.as_deref().unwrap();
        if s.gpu_available() {
            assert!(note.contains("NVML"), "{note}");
            assert!(rows.iter().all(|r| r.gpu.is_some()));
            assert!(s.energy_joules_since_start().is_some());
        } else {
            assert!(note.contains("no GPU telemetry"), "{note}");
            assert!(rows.iter().all(|r| r.gpu.is_none() && r.host.rss_mib.is_some()));
        }
    }

    #[test]
    fn unwritable_run_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        std::fs::write(&file, "x").unwrap();
        let err = Sampler::start(&file, Duration::from_secs(1)).err().unwrap();
        assert!(format!("{err:#}").contains("plain-file"), "{err:#}");
    }

    #[test]
    fn sample_rows_round_trip_and_tolerate_missing_fields() {
        let s: Sample = serde_json::from_str(r#"{"t": 5.0, "gpu": {"index": 1, "power_w": 300.5}}"#).unwrap();
        assert_eq!(s.gpu.as_ref().unwrap().power_w, Some(300.5));
        assert_eq!(s.host, HostSample::default());
        let back: Sample = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
