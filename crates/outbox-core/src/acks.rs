//! What a publisher reports back to the pipeline: the acks of the messages
//! handed to it (tags, placements, per-topic counts, the first failure),
//! taken in batches. The Kafka producer fills them from its delivery
//! reports; the pipeline's tests fill them by hand.

use std::time::{Duration, Instant};

use crate::error::ForwarderError;

/// Acked messages of one topic, for the forwarder's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub messages: u64,
    /// Payload bytes.
    pub bytes: usize,
}

/// What the broker answered since the pipeline last took the acks: the
/// delivery callbacks (on the producer's polling thread) add to it, the
/// pipeline takes it in batches, with no allocation or wake-up per message.
#[derive(Debug, Default)]
pub struct Acks {
    /// The tag the message was handed over with, once per acked message.
    pub tags: Vec<u64>,
    /// Where each message of `tags` (same index) was stored.
    pub placements: Vec<Placement>,
    /// When the ack of each message of `tags` (same index) reached the
    /// delivery callback: the broker's answer, not the pipeline's wake-up.
    pub acked_at: Vec<Instant>,
    /// How long each acked message was in the producer, from being handed
    /// to it to its delivery report: the linger, the request and the
    /// broker's answer, as librdkafka times them (one per message it timed,
    /// which is every produced message).
    pub in_producer: Vec<Duration>,
    /// Acked messages and payload bytes, per topic.
    pub per_topic: Vec<(String, Delivered)>,
    /// The first message the broker did not take: the session must end.
    pub failed: Option<ForwarderError>,
}

/// Where the broker stored an acked message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Index of its topic in [`Acks::per_topic`].
    pub topic: usize,
    pub partition: i32,
    pub offset: i64,
}

impl Acks {
    /// Empties it, keeping its allocations.
    pub fn clear(&mut self) {
        self.tags.clear();
        self.placements.clear();
        self.acked_at.clear();
        self.in_producer.clear();
        self.per_topic.clear();
        self.failed = None;
    }

    /// Counts `more` under `topic`; returns the topic's index.
    pub fn add_delivered(&mut self, topic: &str, more: Delivered) -> usize {
        // A handful of topics at most: a linear search beats hashing.
        match self.per_topic.iter_mut().position(|(t, _)| t == topic) {
            Some(index) => {
                let delivered = &mut self.per_topic[index].1;
                delivered.messages += more.messages;
                delivered.bytes += more.bytes;
                index
            }
            None => {
                self.per_topic.push((topic.to_owned(), more));
                self.per_topic.len() - 1
            }
        }
    }
}
