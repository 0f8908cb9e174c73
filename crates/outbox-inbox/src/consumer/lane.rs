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
