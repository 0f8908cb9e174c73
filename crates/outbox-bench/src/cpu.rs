//! CPU and memory: of a process (from /proc) and of the machine.

use std::time::Instant;

pub(crate) fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// CPU time (user + system, all threads) the process has used so far.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |t| {
        t.iter().filter_map(|v| v.parse::<f64>().ok()).sum()
    });
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Busy time of the whole machine so far, in seconds summed over its cores
/// (user, nice, system, irq, softirq and steal of `/proc/stat`).
pub(crate) fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let busy: f64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum();
    busy / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The CPUs `/proc/stat`'s first line adds up (its `cpuN` lines), which is
/// what [`machine_busy_seconds`] divides among.
pub(crate) fn machine_cores() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let n = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    n.max(1) as f64
}

/// CPU spent from a start mark: by one process and by the whole machine.
pub(crate) struct CpuMark {
    pub(crate) pid: u32,
    pub(crate) process: f64,
    pub(crate) machine: f64,
    pub(crate) at: Instant,
}

/// What a phase cost: CPU µs per event of the measured process, and the
/// machine's busy cores over the phase (2.0 = both cores all the time).
#[derive(Clone, Copy)]
pub(crate) struct CpuUse {
    pub(crate) us_per_event: f64,
    pub(crate) process_cores: f64,
    pub(crate) machine_cores: f64,
}

impl CpuMark {
    pub(crate) fn start(pid: u32) -> Self {
        Self {
            pid,
            process: cpu_seconds(pid),
            machine: machine_busy_seconds(),
            at: Instant::now(),
        }
    }

    pub(crate) fn spent(&self, events: usize) -> CpuUse {
        let wall = self.at.elapsed().as_secs_f64();
        let process = cpu_seconds(self.pid) - self.process;
        CpuUse {
            us_per_event: process * 1e6 / events as f64,
            process_cores: process / wall,
            machine_cores: (machine_busy_seconds() - self.machine) / wall,
        }
    }
}
