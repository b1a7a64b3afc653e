//! The GPU through NVML. `nvml-wrapper` dlopens libnvidia-ml, so the failure to find a driver
//! is an ordinary error here, turned into a host-only run by the sampler.

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, PerformanceState, TemperatureSensor};
use nvml_wrapper::Nvml;

use crate::GpuSample;

/// One NVML device, with the energy bookkeeping that turns its counter into "since start".
pub struct GpuProbe {
    nvml: Nvml,
    index: u32,
    name: Option<String>,
    /// NVML's total-energy counter (mJ) when the probe opened; `None` if the card has none.
    energy_start_mj: Option<u64>,
    /// Power integrated over samples, for cards without the counter.
    integrated_j: f64,
    last_power: Option<(f64, f64)>,
}

impl GpuProbe {
    /// Loads NVML and opens device `index`; the error says which step failed.
    pub fn open(index: u32) -> Result<GpuProbe, String> {
        let nvml = Nvml::init().map_err(|e| format!("NVML did not load ({e})"))?;
        let count = nvml.device_count().map_err(|e| format!("NVML device count failed ({e})"))?;
        if index >= count {
            return Err(format!("NVML sees {count} GPU(s), none with index {index}"));
        }
        let device = nvml.device_by_index(index).map_err(|e| format!("NVML could not open GPU {index} ({e})"))?;
        let name = device.name().ok();
        let energy_start_mj = device.total_energy_consumption().ok();
        Ok(GpuProbe { nvml, index, name, energy_start_mj, integrated_j: 0.0, last_power: None })
    }

    /// The card's name as NVML gives it ("NVIDIA H200"), where it answers.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// "0 (NVIDIA H200)", for the note.
    pub fn describe(&self) -> String {
        match &self.name {
            Some(n) => format!("{} ({n})", self.index),
            None => self.index.to_string(),
        }
    }

    /// Joules since open from NVML's counter, or `None` where the card has none.
    pub fn energy_counter_j(&mut self) -> Option<f64> {
        let start = self.energy_start_mj?;
        let now = self.nvml.device_by_index(self.index).ok()?.total_energy_consumption().ok()?;
        Some(now.saturating_sub(start) as f64 / 1000.0)
    }

    /// Reads every field the card answers; the rest stay `None`.
    pub fn sample(&mut self, t: f64) -> GpuSample {
        let mut s = GpuSample { index: self.index, name: self.name.clone(), ..GpuSample::default() };
        let Ok(d) = self.nvml.device_by_index(self.index) else {
            return s;
        };
        const MIB: f64 = 1024.0 * 1024.0;
        if let Ok(u) = d.utilization_rates() {
            s.util_pct = Some(u.gpu as f64);
            s.mem_util_pct = Some(u.memory as f64);
        }
        if let Ok(m) = d.memory_info() {
            s.mem_used_mib = Some(m.used as f64 / MIB);
            s.mem_free_mib = Some(m.free as f64 / MIB);
            s.mem_total_mib = Some(m.total as f64 / MIB);
        }
        s.power_w = d.power_usage().ok().map(|mw| mw as f64 / 1000.0);
        s.power_limit_w = d.enforced_power_limit().ok().map(|mw| mw as f64 / 1000.0);
        s.temp_c = d.temperature(TemperatureSensor::Gpu).ok().map(f64::from);
        s.sm_clock_mhz = d.clock_info(Clock::SM).ok().map(f64::from);
        s.mem_clock_mhz = d.clock_info(Clock::Memory).ok().map(f64::from);
        s.graphics_clock_mhz = d.clock_info(Clock::Graphics).ok().map(f64::from);
        s.pstate = d.performance_state().ok().and_then(pstate_number);
        if let Ok(r) = d.current_throttle_reasons() {
            s.clock_event_mask = Some(r.bits());
            s.clock_events = clock_event_names(r);
        }
        // NVML reports KB/s over a 20 ms window.
        s.pcie_tx_mbps = d.pcie_throughput(PcieUtilCounter::Send).ok().map(|k| k as f64 / 1000.0);
        s.pcie_rx_mbps = d.pcie_throughput(PcieUtilCounter::Receive).ok().map(|k| k as f64 / 1000.0);
        s.fan_pct = d.fan_speed(0).ok().map(f64::from);
        let counter = self
            .energy_start_mj
            .and_then(|start| d.total_energy_consumption().ok().map(|now| now.saturating_sub(start)));
        if let Some(p) = s.power_w {
            if let Some((t0, p0)) = self.last_power {
                self.integrated_j += 0.5 * (p + p0) * (t - t0).max(0.0);
            }
            self.last_power = Some((t, p));
        }
        s.energy_j = match counter {
            Some(mj) => Some(mj as f64 / 1000.0),
            None if self.last_power.is_some() => Some(self.integrated_j),
            None => None,
        };
        s
    }
}

/// P0..P15 as a number; NVML's "unknown" as `None`.
fn pstate_number(p: PerformanceState) -> Option<u32> {
    use PerformanceState::*;
    let n = match p {
        Zero => 0,
        One => 1,
        Two => 2,
        Three => 3,
        Four => 4,
        Five => 5,
        Six => 6,
        Seven => 7,
        Eight => 8,
        Nine => 9,
        Ten => 10,
        Eleven => 11,
        Twelve => 12,
        Thirteen => 13,
        Fourteen => 14,
        Fifteen => 15,
        Unknown => return None,
    };
    Some(n)
}

/// The active clock-event reasons, by the names nvidia-smi uses.
pub(crate) fn clock_event_names(r: ThrottleReasons) -> Vec<String> {
    let table = [
        (ThrottleReasons::GPU_IDLE, "gpu_idle"),
        (ThrottleReasons::APPLICATIONS_CLOCKS_SETTING, "applications_clocks_setting"),
        (ThrottleReasons::SW_POWER_CAP, "sw_power_cap"),
        (ThrottleReasons::HW_SLOWDOWN, "hw_slowdown"),
        (ThrottleReasons::SYNC_BOOST, "sync_boost"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
        (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"),
        (ThrottleReasons::DISPLAY_CLOCK_SETTING, "display_clock_setting"),
    ];
    table.iter().filter(|(bit, _)| r.contains(*bit)).map(|(_, n)| n.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_event_names_follow_the_mask() {
        let r = ThrottleReasons::SW_POWER_CAP | ThrottleReasons::HW_THERMAL_SLOWDOWN;
        assert_eq!(clock_event_names(r), ["sw_power_cap", "hw_thermal_slowdown"]);
        assert!(clock_event_names(ThrottleReasons::NONE).is_empty());
    }

    #[test]
    fn pstates_are_numbers() {
        assert_eq!(pstate_number(PerformanceState::Zero), Some(0));
        assert_eq!(pstate_number(PerformanceState::Eight), Some(8));
        assert_eq!(pstate_number(PerformanceState::Unknown), None);
    }
}
