//! What the delivery reports leave for the pipeline: the acks (tags,
//! placements, per-topic counts, the first failure) and whether the
//! brokers are reachable.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use outbox_core::{Acks, Delivered, Placement};
use rdkafka::message::{BorrowedMessage, Message};

/// Records the ack of `message`, handed over under `tag`, in `acks`.
pub(super) fn record(acks: &mut Acks, tag: u64, message: &BorrowedMessage<'_>) {
    let bytes = message.payload_len();
    let topic = acks.add_delivered(message.topic(), Delivered { messages: 1, bytes });
    acks.tags.push(tag);
    acks.acked_at.push(Instant::now());
    // SAFETY: the message is librdkafka's, valid for the whole callback.
    let micros = unsafe { rdkafka::bindings::rd_kafka_message_latency(message.ptr()) };
    if let Ok(micros) = u64::try_from(micros) {
        acks.in_producer.push(Duration::from_micros(micros));
    }
    let (partition, offset) = (message.partition(), message.offset());
    acks.placements.push(Placement {
        topic,
        partition,
        offset,
    });
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
