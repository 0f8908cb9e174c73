//! The rate limit of a table read: rows are read in chunks, each no
//! earlier than the rows before it allow.

use std::time::{Duration, Instant};

/// At most `rate` rows per second since the start.
#[derive(Debug)]
pub struct Pace {
    rate: Option<u32>,
    started: Instant,
}

impl Pace {
    pub fn new(rate: Option<u32>) -> Self {
        Self {
            rate: rate.filter(|&r| r > 0),
            started: Instant::now(),
        }
    }

    /// Rows per query: under a limit, a fifth of a second's worth at most,
    /// so the rate holds within a chunk's share over a short read too.
    pub fn chunk(&self, chunk: usize) -> usize {
        match self.rate {
            Some(rate) => chunk.min((rate as usize / 5).max(1)),
            None => chunk,
        }
        .max(1)
    }

    /// How long to wait before reading on, `done` rows read so far.
    pub fn delay(&self, done: u64) -> Duration {
        let Some(rate) = self.rate else {
            return Duration::ZERO;
        };
        let due = Duration::from_secs_f64(done as f64 / f64::from(rate));
        due.saturating_sub(self.started.elapsed())
    }

    /// Waits until the rows after `done` may be read.
    pub async fn wait(&self, done: u64) {
        let delay = self.delay(done);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_due_at_the_rate_from_the_start() {
        let pace = Pace::new(Some(1000));
        assert_eq!(pace.chunk(500), 200);
        assert_eq!(pace.chunk(50), 50);
        assert!(pace.delay(0).is_zero());
        let delay = pace.delay(2000);
        assert!(
            delay <= Duration::from_secs(2) && delay > Duration::from_millis(1900),
            "{delay:?}"
        );
        let unlimited = Pace::new(None);
        assert_eq!(unlimited.chunk(500), 500);
        assert!(unlimited.delay(1_000_000).is_zero());
        assert_eq!(Pace::new(Some(1)).chunk(500), 1);
    }
}
