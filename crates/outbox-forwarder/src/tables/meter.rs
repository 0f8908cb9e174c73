//! Progress of a long command (`backfill`, `repair-gap`, `prune`,
//! `verify`): a line that rewrites itself on a terminal every second, one
//! log line every ten seconds otherwise.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Meter {
    what: &'static str,
    /// What is counted: `rows`, `records`.
    unit: &'static str,
    /// Rows to read in all, when known.
    total: Option<u64>,
    started: Instant,
    last: Instant,
    terminal: bool,
}

impl Meter {
    pub fn new(what: &'static str, unit: &'static str, total: Option<u64>) -> Self {
        let now = Instant::now();
        Self {
            what,
            unit,
            total,
            started: now,
            last: now,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// `read` rows read and `done` of them published (or deleted) so far:
    /// shown if it is time to.
    pub fn tick(&mut self, read: u64, done: u64) {
        let every = if self.terminal {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(10)
        };
        if self.last.elapsed() >= every {
            self.last = Instant::now();
            self.show(read, done, false);
        }
    }

    /// The last line.
    pub fn done(&mut self, read: u64, done: u64) {
        self.show(read, done, true);
    }

    fn show(&self, read: u64, done: u64, last: bool) {
        let line = self.line(read, done, self.started.elapsed());
        if self.terminal {
            let end = if last { "\n" } else { "" };
            let _ = write!(std::io::stderr(), "\r\x1b[2K{line}{end}");
        } else {
            tracing::info!("{line}");
        }
    }

    fn line(&self, read: u64, done: u64, elapsed: Duration) -> String {
        let rate = read as f64 / elapsed.as_secs_f64().max(0.001);
        let (what, unit) = (self.what, self.unit);
        let mut line = match self.total {
            Some(total) => {
                format!("{what}: read {read} of {total} {unit}, {done} done, {rate:.0} {unit}/s")
            }
            None => format!("{what}: read {read} {unit}, {done} done, {rate:.0} {unit}/s"),
        };
        if let Some(total) = self.total.filter(|&t| t > read && rate > 0.0) {
            let left = (total - read) as f64 / rate;
            line.push_str(&format!(", about {left:.0} s left"));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_gives_the_rate_and_the_time_left() {
        let meter = Meter::new("backfill", "rows", Some(20_000));
        assert_eq!(
            meter.line(5_000, 4_000, Duration::from_secs(5)),
            "backfill: read 5000 of 20000 rows, 4000 done, 1000 rows/s, about 15 s left"
        );
        let open = Meter::new("prune", "rows", None);
        assert_eq!(
            open.line(300, 300, Duration::from_secs(3)),
            "prune: read 300 rows, 300 done, 100 rows/s"
        );
    }
}
