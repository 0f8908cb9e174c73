//! What the delivery reports leave for the pipeline: the acks (tags,
//! placements, per-topic counts, the first failure) and whether the
//! brokers are reachable.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use outbox_core::ForwarderError;
use rdkafka::message::{BorrowedMessage, Message};

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
    /// The tag given to [`KafkaSink::send`], once per acked message.
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

    pub(super) fn add(&mut self, tag: u64, message: &BorrowedMessage<'_>) {
        let bytes = message.payload_len();
        let topic = self.add_delivered(message.topic(), Delivered { messages: 1, bytes });
        self.tags.push(tag);
        self.acked_at.push(Instant::now());
        // SAFETY: the message is librdkafka's, valid for the whole callback.
        let micros = unsafe { rdkafka::bindings::rd_kafka_message_latency(message.ptr()) };
        if let Ok(micros) = u64::try_from(micros) {
            self.in_producer.push(Duration::from_micros(micros));
        }
        let (partition, offset) = (message.partition(), message.offset());
        self.placements.push(Placement {
            topic,
            partition,
            offset,
        });
    }

    /// Counts `more` under `topic`; returns the topic's index.
    pub(super) fn add_delivered(&mut self, topic: &str, more: Delivered) -> usize {
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

/// Where the delivery callbacks leave [`Acks`] for the pipeline.
#[derive(Default)]
pub(super) struct AckInbox {
    pub(super) acks: Mutex<Acks>,
    pub(super) ready: tokio::sync::Notify,
    /// Messages handed to librdkafka whose report has not come in. It drops
    /// under the `acks` lock, after the report is recorded: at zero, every
    /// report is in `acks`.
    pub(super) outstanding: AtomicUsize,
}

/// Whether the producer can currently reach the brokers, as librdkafka
/// reports it: an error report marks it down, an ack marks it up. Shared by
/// every producer of the process, so readiness survives session restarts.
#[derive(Debug)]
pub struct BrokerHealth {
    /// Milliseconds since the epoch of the last error report not yet
    /// followed by an ack; 0 when healthy.
    down_since_ms: AtomicU64,
    /// A metadata probe is under way.
    pub(super) probing: AtomicBool,
}

impl Default for BrokerHealth {
    fn default() -> Self {
        Self {
            down_since_ms: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }
}

impl BrokerHealth {
    pub fn is_up(&self) -> bool {
        self.down_since_ms.load(Ordering::Relaxed) == 0
    }

    pub(super) fn mark_down(&self) {
        let now = outbox_core::epoch_ms().max(1);
        let _ = self
            .down_since_ms
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    pub(super) fn mark_up(&self) {
        // Called on every ack: read before writing the shared line.
        if !self.is_up() {
            self.down_since_ms.store(0, Ordering::Relaxed);
        }
    }
}
