//! The idempotent producer and the meaning of its outcomes.
//!
//! `send` hands a record to librdkafka and returns a future that resolves
//! when the broker has acked it (or refused it). `QueueFull` is backpressure:
//! wait and offer the same record again. Delivery errors are sorted into the
//! two kinds: a message the broker will never take (too large, invalid or
//! forbidden topic) is definite; anything else is transient and the pipeline
//! resends from its acked watermark.

use std::future::Future;
use std::time::Duration;

use outbox_core::{DefiniteError, ForwarderError, OutboxEvent};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

use crate::{KafkaConfig, MessageHeaders, TopicTemplate};

/// The outcome of one message: `Ok` once the broker acked it.
pub type Ack = Result<(), ForwarderError>;

/// Broker answers that resending will not change.
const FATAL_CODES: [RDKafkaErrorCode; 6] = [
    RDKafkaErrorCode::MessageSizeTooLarge,
    RDKafkaErrorCode::InvalidTopic,
    RDKafkaErrorCode::TopicAuthorizationFailed,
    RDKafkaErrorCode::ClusterAuthorizationFailed,
    RDKafkaErrorCode::InvalidRecord,
    RDKafkaErrorCode::MessageSizeTooLarge,
];

/// Routes librdkafka's own reports into `tracing`.
pub struct SinkContext;

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(facility, "kafka: {message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(facility, "kafka: {message}"),
            _ => tracing::debug!(facility, "kafka: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, "kafka client error: {reason}");
    }
}

/// The forwarder's producer with its topic routing.
pub struct KafkaSink {
    producer: FutureProducer<SinkContext>,
    topics: TopicTemplate,
}

impl KafkaSink {
    pub fn new(config: &KafkaConfig) -> Result<Self, DefiniteError> {
        let topics = config.topic.parse()?;
        let producer = config
            .client_config()?
            .create_with_context(SinkContext)
            .map_err(|e| DefiniteError::Config(format!("cannot create the Kafka producer: {e}")))?;
        Ok(Self { producer, topics })
    }

    /// Hands `event` to the producer. The returned future resolves when the
    /// broker acked it. Routing errors (e.g. a NULL `aggregate_type` under a
    /// templated topic) are definite and returned before anything is sent.
    pub async fn send(
        &self,
        event: &OutboxEvent,
    ) -> Result<impl Future<Output = Ack> + Send + 'static, ForwarderError> {
        let topic = self.topics.render(event)?;
        let mut record = FutureRecord::to(&topic)
            .key(event.key_bytes())
            .payload(&event.payload)
            .headers(MessageHeaders::for_event(event));
        let delivery = loop {
            match self.producer.send_result(record) {
                Ok(delivery) => break delivery,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err((error, _)) => return Err(delivery_error(error, event)),
            }
        };
        let event_id = event.event_id.clone();
        let origin = event.origin.clone();
        Ok(async move {
            match delivery.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err((error, _message))) => Err(delivery_error_for(error, &event_id, &origin)),
                Err(_canceled) => Err(ForwarderError::transient(
                    "the producer was dropped before the ack",
                )),
            }
        })
    }

    /// Waits up to `timeout` for every queued message to be acked or failed.
    pub fn flush(&self, timeout: Duration) -> Result<(), ForwarderError> {
        self.producer
            .flush(timeout)
            .map_err(|e| ForwarderError::transient(format!("flushing the producer: {e}")))
    }

    /// Messages handed to librdkafka and not yet acked or failed.
    pub fn in_flight(&self) -> i32 {
        self.producer.in_flight_count()
    }
}

fn delivery_error(error: KafkaError, event: &OutboxEvent) -> ForwarderError {
    delivery_error_for(error, &event.event_id, &event.origin)
}

fn delivery_error_for(
    error: KafkaError,
    event_id: &str,
    origin: &outbox_core::RowOrigin,
) -> ForwarderError {
    match error.rdkafka_error_code() {
        Some(code) if FATAL_CODES.contains(&code) => DefiniteError::BadRow {
            table: format!("{}.{}", origin.schema, origin.table),
            position: origin.event_position.clone(),
            row_index: origin.row_index,
            event_id: Some(event_id.to_owned()),
            reason: format!("Kafka refused the message: {error}"),
        }
        .into(),
        _ => ForwarderError::transient(format!(
            "Kafka did not ack event {event_id} (binlog {}): {error}",
            origin.event_position
        )),
    }
}
