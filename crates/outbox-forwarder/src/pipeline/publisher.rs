//! What a session hands its messages to: the seam between the session loop
//! and the Kafka producer. It speaks the pipeline's own types (events,
//! [`Acks`], errors), none of Kafka's. [`KafkaSink`] is the one
//! implementation that runs; the loop's unit tests drive it with an in-memory fake instead
//! (`fake.rs`), which acks, refuses and fences as the test says.
//!
//! The contract the loop relies on: every message handed over is reported
//! once, as an ack or a failure, through [`Publisher::take_acks`], under
//! the tag it was given; [`Publisher::outstanding`] counts those not
//! reported yet.

use outbox_core::{Acks, DeadLetter, DefiniteError, ForwarderError, OutboxEvent};
use outbox_sink::KafkaSink;

/// The producer side of a session (see the module doc).
pub(crate) trait Publisher {
    /// The topic `event` goes to.
    fn topic_for(&self, event: &OutboxEvent) -> Result<String, DefiniteError>;
    /// Where rows refused under the dead-letter policy go.
    fn dead_letter_topic(&self) -> &str;
    /// Hands `event` over for `topic`, reported under `tag`; `slot` is its
    /// place in its transaction by GTID.
    async fn send_to(
        &self,
        topic: &str,
        event: &OutboxEvent,
        tag: u64,
        slot: Option<(&str, u32)>,
    ) -> Result<(), ForwarderError>;
    /// Hands a refused row over for the dead-letter topic.
    async fn send_dead_letter(
        &self,
        dead: &DeadLetter,
        tag: u64,
        slot: Option<(&str, u32)>,
    ) -> Result<(), ForwarderError>;
    /// Sends what is queued without waiting out the linger.
    fn send_now(&self);
    /// Resolves once reports have come in since the last `take_acks`.
    async fn acks_ready(&self);
    /// Messages handed over whose report has not come in.
    fn outstanding(&self) -> usize;
    /// Swaps the reports that came in with `into` (which should be empty).
    fn take_acks(&self, into: &mut Acks);
    /// Lets the brokers' health recover on a quiet outbox.
    fn probe_brokers(&self);
    /// Per partition of `topic`, its (low, high) watermarks; `None` if the
    /// topic does not exist; why not, when they could not be had.
    async fn watermarks(&self, topic: &str) -> Result<Option<Vec<(i64, i64)>>, String>;
}

impl Publisher for KafkaSink {
    fn topic_for(&self, event: &OutboxEvent) -> Result<String, DefiniteError> {
        KafkaSink::topic_for(self, event)
    }

    fn dead_letter_topic(&self) -> &str {
        KafkaSink::dead_letter_topic(self)
    }

    async fn send_to(
        &self,
        topic: &str,
        event: &OutboxEvent,
        tag: u64,
        slot: Option<(&str, u32)>,
    ) -> Result<(), ForwarderError> {
        KafkaSink::send_to(self, topic, event, tag, slot).await
    }

    async fn send_dead_letter(
        &self,
        dead: &DeadLetter,
        tag: u64,
        slot: Option<(&str, u32)>,
    ) -> Result<(), ForwarderError> {
        KafkaSink::send_dead_letter(self, dead, tag, slot).await
    }

    fn send_now(&self) {
        KafkaSink::send_now(self);
    }

    async fn acks_ready(&self) {
        KafkaSink::acks_ready(self).await;
    }

    fn outstanding(&self) -> usize {
        KafkaSink::outstanding(self)
    }

    fn take_acks(&self, into: &mut Acks) {
        KafkaSink::take_acks(self, into);
    }

    fn probe_brokers(&self) {
        KafkaSink::probe_brokers(self);
    }

    async fn watermarks(&self, topic: &str) -> Result<Option<Vec<(i64, i64)>>, String> {
        KafkaSink::watermarks(self, topic)
            .await
            .map_err(|e| outbox_kafka::shown(&e))
    }
}
