//! A partition's lane: the messages received and not yet settled, in
//! offset order, and when its front is ready.

use super::*;

/// The received, unsettled messages of one partition, oldest first.
#[derive(Default)]
pub(super) struct Lane {
    pub(super) waiting: VecDeque<OwnedMessage>,
    /// Failed attempts of the head that concerned the event.
    pub(super) failures: u32,
    /// Failed attempts of the head that were outages (not counted).
    pub(super) outages: u32,
    /// When the head may be tried again; `None`: now.
    pub(super) retry_at: Option<Instant>,
    /// The offset after the newest message queued; an older arrival is a
    /// message already queued (fetched again after pause/resume).
    pub(super) next_offset: i64,
    /// Whether this member paused the partition.
    pub(super) paused: bool,
    /// Since when the lane has not been empty: its batch may wait from then
    /// on for more events, up to `inbox.max_batch_wait_ms`.
    pub(super) filling_since: Option<Instant>,
}

impl Lane {
    /// Whether the message at `offset` was queued already (an older
    /// arrival is one fetched again after pause/resume).
    pub(super) fn has_queued(&self, offset: i64) -> bool {
        offset < self.next_offset
    }

    /// Queues a message newer than every queued one; an empty lane starts
    /// filling its batch at `now`.
    pub(super) fn queue(&mut self, message: OwnedMessage, now: Instant) {
        self.next_offset = message.offset() + 1;
        if self.waiting.is_empty() {
            self.filling_since = Some(now);
        }
        self.waiting.push_back(message);
    }

    /// Whether the lane's head (or batch) may be worked on at `now`.
    pub(super) fn ready(&self, now: Instant, batch: &BatchLimits) -> bool {
        !self.waiting.is_empty()
            && self.retry_at.is_none_or(|t| t <= now)
            && self.batch_due(batch).is_none_or(|t| t <= now)
    }

    /// When a lane that may take more events into its batch stops waiting
    /// for them; `None` when it does not wait.
    pub(super) fn batch_due(&self, batch: &BatchLimits) -> Option<Instant> {
        if batch.wait.is_zero()
            || self.failures + self.outages > 0
            || self.waiting.len() >= batch.max
        {
            return None;
        }
        self.filling_since.map(|since| since + batch.wait)
    }

    /// The head is retried alone: batches are for events not tried yet.
    pub(super) fn batches(&self) -> bool {
        self.failures + self.outages == 0
    }
}

/// How many events one transaction takes, and how long a partition waits
/// to fill it.
pub(super) struct BatchLimits {
    pub(super) max: usize,
    pub(super) wait: Duration,
}

/// How an attempt left the head of a lane.
pub(super) enum Step {
    /// Final; the lane moves on.
    Settled,
    /// Try the head again later.
    Retry { counted: bool, error: String },
}

#[cfg(test)]
mod tests {
    use rdkafka::message::Timestamp;

    use super::*;

    fn message(offset: i64) -> OwnedMessage {
        OwnedMessage::new(
            Some(b"{}".to_vec()),
            Some(b"key".to_vec()),
            "orders".into(),
            Timestamp::NotAvailable,
            0,
            offset,
            None,
        )
    }

    fn limits(max: usize, wait_ms: u64) -> BatchLimits {
        BatchLimits {
            max,
            wait: Duration::from_millis(wait_ms),
        }
    }

    #[test]
    fn an_empty_lane_is_never_ready() {
        let lane = Lane::default();
        assert!(!lane.ready(Instant::now(), &limits(10, 0)));
        assert_eq!(lane.batch_due(&limits(10, 5)), None);
    }

    #[test]
    fn without_a_batch_wait_a_queued_message_is_ready_at_once() {
        let mut lane = Lane::default();
        let now = Instant::now();
        lane.queue(message(7), now);
        assert!(lane.ready(now, &limits(10, 0)));
        assert!(lane.batches());
    }

    #[test]
    fn a_batch_waits_from_its_first_message_until_the_wait_is_over_or_it_is_full() {
        let mut lane = Lane::default();
        let t0 = Instant::now();
        let batch = limits(3, 20);
        lane.queue(message(0), t0);
        lane.queue(message(1), t0 + Duration::from_millis(15));
        // Measured from the first message, not the newest.
        assert_eq!(lane.batch_due(&batch), Some(t0 + Duration::from_millis(20)));
        assert!(!lane.ready(t0 + Duration::from_millis(19), &batch));
        assert!(lane.ready(t0 + Duration::from_millis(20), &batch));
        // Full: no reason to wait.
        lane.queue(message(2), t0 + Duration::from_millis(16));
        assert_eq!(lane.batch_due(&batch), None);
        assert!(lane.ready(t0 + Duration::from_millis(16), &batch));
    }

    #[test]
    fn a_message_fetched_again_is_recognised_as_queued() {
        let mut lane = Lane::default();
        let now = Instant::now();
        assert!(!lane.has_queued(0));
        lane.queue(message(4), now);
        lane.queue(message(5), now);
        assert!(lane.has_queued(4));
        assert!(lane.has_queued(5));
        assert!(!lane.has_queued(6));
        assert_eq!(lane.waiting.len(), 2);
    }

    #[test]
    fn a_head_that_failed_waits_for_its_retry_alone_and_not_for_a_batch() {
        let mut lane = Lane::default();
        let t0 = Instant::now();
        let batch = limits(10, 50);
        lane.queue(message(0), t0);
        lane.failures = 1;
        lane.retry_at = Some(t0 + Duration::from_millis(100));
        assert!(!lane.batches(), "a failed head is retried alone");
        assert_eq!(lane.batch_due(&batch), None);
        assert!(!lane.ready(t0 + Duration::from_millis(99), &batch));
        assert!(lane.ready(t0 + Duration::from_millis(100), &batch));
        // An outage is not counted against the event, but also retried alone.
        lane.failures = 0;
        lane.outages = 1;
        assert!(!lane.batches());
    }
}
