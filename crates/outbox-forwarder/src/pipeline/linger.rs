//! The adaptive linger (`kafka.adaptive_linger`): when the messages of a
//! reader that has caught up with the binlog are sent without waiting out
//! `linger.ms`.
//!
//! During a catch-up, `linger.ms` fills produce requests. Once the reader
//! has caught up, a linger that gathers a message or two is mostly wait, so
//! the producer is told to send at once
//! ([`outbox_sink::KafkaSink::send_now`]), like Nagle's algorithm: one such
//! request is under way at a time (as far as a count of acks can tell: acks
//! of messages that went out with a linger count too), and the next is sent
//! when as many acks are in as messages were handed over before it,
//! carrying everything read meanwhile. While messages come faster than
//! [`BUSY`] per [`RATE_WINDOW`] (2 000 a second; a single transaction of
//! that many rows counts as such), nothing is sent early and `linger.ms`
//! batches them:
//! without that bound, at 5 000 events/s against tansu the smaller batches
//! cost more consumer-visible latency than they saved.
//!
//! It is off by default: in `outbox-bench` against tansu at 1 000 events/s
//! it took the ack p50 from about 5 to under 2 ms but left the p99 where it
//! was, and raised the consumer-visible p99 by about 4 ms
//! (docs/performance.md).

use std::time::{Duration, Instant};

/// The window over which the rate of handed-over messages is counted.
pub const RATE_WINDOW: Duration = Duration::from_millis(10);

/// Messages per [`RATE_WINDOW`] from which the producer counts as busy.
pub const BUSY: u64 = 20;

/// Counts messages handed over and acked in one session, and decides.
#[derive(Debug, Default)]
pub struct AdaptiveLinger {
    handed: u64,
    acked: u64,
    /// Messages handed over when the producer was last told to send.
    sent_through: u64,
    /// A caught-up reader's messages wait for the last send's acks.
    waiting: bool,
    /// Start of the current rate window, its count, and the count of the
    /// window before it (0 if it was further back).
    window: Option<Instant>,
    in_window: u64,
    in_previous_window: u64,
}

impl AdaptiveLinger {
    /// `messages` were handed to the producer at `now`.
    pub fn handed(&mut self, messages: usize, now: Instant) {
        self.handed += messages as u64;
        let elapsed = self
            .window
            .map(|start| now.saturating_duration_since(start));
        if elapsed.is_none_or(|e| e >= RATE_WINDOW) {
            self.in_previous_window = match elapsed {
                Some(e) if e < 2 * RATE_WINDOW => self.in_window,
                _ => 0,
            };
            self.window = Some(now);
            self.in_window = 0;
        }
        self.in_window += messages as u64;
    }

    /// The reader had nothing more and everything it read was handed over:
    /// whether to send now.
    pub fn caught_up(&mut self) -> bool {
        if self.handed == self.sent_through || self.busy() {
            self.waiting = false;
            return false;
        }
        if self.acked >= self.sent_through {
            return self.send();
        }
        self.waiting = true;
        false
    }

    /// `messages` acks came in: whether to send what waited for them.
    pub fn acked(&mut self, messages: usize) -> bool {
        self.acked += messages as u64;
        self.waiting && !self.busy() && self.acked >= self.sent_through && self.send()
    }

    fn busy(&self) -> bool {
        self.in_window.max(self.in_previous_window) >= BUSY
    }

    fn send(&mut self) -> bool {
        self.sent_through = self.handed;
        self.waiting = false;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_transaction_goes_at_once_the_next_ones_wait_for_its_ack() {
        let now = Instant::now();
        let mut linger = AdaptiveLinger::default();
        linger.handed(1, now);
        assert!(linger.caught_up(), "nothing under way: send");
        // Two more while the first is unacked: they wait, and batch.
        linger.handed(1, now);
        assert!(!linger.caught_up());
        linger.handed(2, now);
        assert!(!linger.caught_up());
        // The first's ack sends both waiting transactions, together.
        assert!(linger.acked(1));
        // Their acks, with nothing new read: nothing to send.
        assert!(!linger.acked(3));
        assert!(!linger.caught_up());
        linger.handed(1, now);
        assert!(linger.caught_up());
    }

    #[test]
    fn a_backlog_is_left_to_linger_ms() {
        let now = Instant::now();
        let mut linger = AdaptiveLinger::default();
        // Batches read while behind are handed over without `caught_up`:
        // acks alone never send them early.
        linger.handed(10_000, now);
        assert!(!linger.acked(5_000));
        assert!(!linger.acked(5_000));
        // Caught up, but 10 000 messages in the last window: busy.
        linger.handed(10, now + Duration::from_millis(1));
        assert!(!linger.caught_up());
        // Two windows later the rate is low again.
        linger.handed(1, now + 3 * RATE_WINDOW);
        assert!(linger.caught_up());
    }

    #[test]
    fn a_busy_producer_keeps_batching() {
        let start = Instant::now();
        let mut linger = AdaptiveLinger::default();
        // 1 000 a second: one message a millisecond, each caught up.
        let mut sent = 0;
        for ms in 0..100u64 {
            linger.handed(1, start + Duration::from_millis(ms));
            sent += usize::from(linger.caught_up());
            sent += usize::from(linger.acked(1));
        }
        assert_eq!(sent, 100, "each sent at once");
        // 5 000 a second: five a millisecond.
        let start = start + Duration::from_secs(1);
        let mut sent = 0;
        for ms in 0..100u64 {
            for _ in 0..5 {
                linger.handed(1, start + Duration::from_millis(ms));
                sent += usize::from(linger.caught_up());
                sent += usize::from(linger.acked(1));
            }
        }
        // Only until the first window's count shows the rate.
        assert!(sent <= BUSY as usize, "{sent}");
    }

    #[test]
    fn a_wait_that_a_burst_overtakes_is_left_to_linger_ms() {
        let now = Instant::now();
        let mut linger = AdaptiveLinger::default();
        linger.handed(1, now);
        assert!(linger.caught_up());
        linger.handed(1, now);
        assert!(!linger.caught_up(), "waits for the first's ack");
        // A burst arrives before that ack: the producer is busy now.
        linger.handed(BUSY as usize, now);
        assert!(!linger.acked(1));
    }

    #[test]
    fn acks_that_come_before_the_wait_do_not_send_twice() {
        let now = Instant::now();
        let mut linger = AdaptiveLinger::default();
        linger.handed(2, now);
        assert!(linger.caught_up());
        assert!(!linger.acked(1), "no one waits");
        linger.handed(1, now);
        assert!(!linger.caught_up(), "one of the sent is still unacked");
        assert!(linger.acked(1));
    }
}
