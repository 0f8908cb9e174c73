//! The idempotent producer and the meaning of its outcomes.
//!
//! `send` hands a record to librdkafka and returns a future that resolves
//! when the broker has acked it (or refused it). `QueueFull` is backpressure:
//! wait and offer the same record again. Delivery errors are sorted into the
//! two kinds: a message the broker will never take (too large, invalid or
//! forbidden topic) is definite; anything else is transient and the pipeline
//! resends from its acked watermark.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use std::time::{SystemTime, UNIX_EPOCH};

use outbox_core::{DeadLetter, DefiniteError, ForwarderError, OutboxEvent, RowOrigin};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};

use crate::{KafkaConfig, MessageHeaders, TopicTemplate};

/// What an acked message was, for the forwarder's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub topic: String,
    /// Payload bytes.
    pub bytes: usize,
}

/// The outcome of one message: `Ok` once the broker acked it.
pub type Ack = Result<Delivered, ForwarderError>;

/// Whether the producer can currently reach the brokers, as librdkafka
/// reports it: an error report marks it down, an ack marks it up. Shared by
/// every producer of the process, so readiness survives session restarts.
#[derive(Debug)]
pub struct BrokerHealth {
    /// Milliseconds since the epoch of the last error report not yet
    /// followed by an ack; 0 when healthy.
    down_since_ms: AtomicU64,
    /// A metadata probe is under way.
    probing: AtomicBool,
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

    fn mark_down(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(1)
            .max(1);
        let _ = self
            .down_since_ms
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn mark_up(&self) {
        self.down_since_ms.store(0, Ordering::Relaxed);
    }
}

/// Answers about one message that resending will not change.
const REFUSED_MESSAGE: [RDKafkaErrorCode; 3] = [
    RDKafkaErrorCode::MessageSizeTooLarge,
    RDKafkaErrorCode::InvalidTopic,
    RDKafkaErrorCode::InvalidRecord,
];

/// Answers about the forwarder itself: its principal may not write.
const REFUSED_CLIENT: [RDKafkaErrorCode; 2] = [
    RDKafkaErrorCode::TopicAuthorizationFailed,
    RDKafkaErrorCode::ClusterAuthorizationFailed,
];

/// How long a full producer queue may block one message before the session
/// is retried from the watermark.
const QUEUE_FULL_LIMIT: Duration = Duration::from_secs(60);

/// Writes one of librdkafka's own log lines to `tracing`, at the matching level.
pub fn log_librdkafka(level: RDKafkaLogLevel, facility: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => tracing::error!(facility, "kafka: {message}"),
        RDKafkaLogLevel::Warning => tracing::warn!(facility, "kafka: {message}"),
        _ => tracing::debug!(facility, "kafka: {message}"),
    }
}

/// Routes librdkafka's own reports into `tracing` and [`BrokerHealth`].
pub struct SinkContext {
    health: Arc<BrokerHealth>,
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        log_librdkafka(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.health.mark_down();
        let refused = error
            .rdkafka_error_code()
            .and_then(|code| crate::refusal_fix(code, reason));
        match refused {
            Some(fix) => tracing::error!(%error, "kafka refused the connection: {reason}; {fix}"),
            None => tracing::warn!(%error, "kafka client error: {reason}"),
        }
    }
}

/// A message handed to librdkafka; resolves with the broker's answer.
pub struct PendingAck {
    delivery: DeliveryFuture,
    topic: String,
    bytes: usize,
    health: Arc<BrokerHealth>,
    /// For the error message if the broker refuses it.
    event_id: String,
    origin: RowOrigin,
}

impl Future for PendingAck {
    type Output = Ack;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ack> {
        let outcome = std::task::ready!(Pin::new(&mut self.delivery).poll(cx));
        Poll::Ready(match outcome {
            Ok(Ok(_)) => {
                self.health.mark_up();
                Ok(Delivered {
                    topic: std::mem::take(&mut self.topic),
                    bytes: self.bytes,
                })
            }
            Ok(Err((error, _message))) => Err(delivery_error(error, &self.event_id, &self.origin)),
            Err(_canceled) => Err(ForwarderError::transient(
                "the producer was dropped before the ack",
            )),
        })
    }
}

/// The forwarder's producer with its topic routing.
pub struct KafkaSink {
    producer: FutureProducer<SinkContext>,
    topics: TopicTemplate,
    dead_letter_topic: String,
    health: Arc<BrokerHealth>,
}

impl KafkaSink {
    /// A producer reporting its broker connectivity to `health`.
    pub fn new(config: &KafkaConfig, health: Arc<BrokerHealth>) -> Result<Self, DefiniteError> {
        let topics = config.topic.parse()?;
        let producer = config
            .client_config()?
            .create_with_context(SinkContext {
                health: health.clone(),
            })
            .map_err(|e| DefiniteError::Config(format!("cannot create the Kafka producer: {e}")))?;
        Ok(Self {
            producer,
            topics,
            dead_letter_topic: config.dead_letter_topic.clone(),
            health,
        })
    }

    /// Hands `event` to the producer. The returned future resolves when the
    /// broker acked it. Routing errors (e.g. a NULL `aggregate_type` under a
    /// templated topic) are definite and returned before anything is sent.
    pub async fn send(&self, event: &OutboxEvent) -> Result<PendingAck, ForwarderError> {
        let topic = self.topics.render(event)?;
        let record = FutureRecord::to(&topic)
            .key(event.key_bytes())
            .payload(event.payload.as_slice())
            .headers(MessageHeaders::for_event(event));
        self.enqueue(record, &event.event_id, &event.origin).await
    }

    /// While the brokers are marked unreachable, asks them for metadata in
    /// the background and marks them reachable again when they answer, so
    /// readiness recovers on a quiet outbox too (acks would otherwise be the
    /// only sign of life).
    pub fn probe_brokers(&self) {
        if self.health.is_up() || self.health.probing.swap(true, Ordering::Relaxed) {
            return;
        }
        let producer = self.producer.clone();
        let health = self.health.clone();
        tokio::task::spawn_blocking(move || {
            if producer
                .client()
                .fetch_metadata(None, Duration::from_secs(2))
                .is_ok()
            {
                health.mark_up();
            }
            health.probing.store(false, Ordering::Relaxed);
        });
    }

    /// The idempotent producer hit a fatal error and cannot send any more.
    pub fn is_fatal(&self) -> bool {
        self.producer.client().fatal_error().is_some()
    }

    /// Publishes a refused row to the dead-letter topic; resolves on its ack.
    pub async fn send_dead_letter(&self, dead: &DeadLetter) -> Result<PendingAck, ForwarderError> {
        let key = dead
            .event_id
            .clone()
            .unwrap_or_else(|| format!("{}#{}", dead.origin.event_position, dead.origin.row_index));
        let record = FutureRecord::to(&self.dead_letter_topic)
            .key(key.as_bytes())
            .payload(dead.row.as_slice())
            .headers(MessageHeaders::for_dead_letter(dead));
        self.enqueue(record, &key, &dead.origin).await
    }

    /// Offers `record` until librdkafka takes it (`QueueFull` is backpressure).
    async fn enqueue(
        &self,
        mut record: FutureRecord<'_, [u8], [u8]>,
        event_id: &str,
        origin: &RowOrigin,
    ) -> Result<PendingAck, ForwarderError> {
        let topic = record.topic;
        let bytes = record.payload.map_or(0, <[u8]>::len);
        let mut waited = Duration::ZERO;
        let delivery = loop {
            match self.producer.send_result(record) {
                Ok(delivery) => break delivery,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    if waited >= QUEUE_FULL_LIMIT {
                        return Err(ForwarderError::transient(format!(
                            "the producer queue stayed full for {QUEUE_FULL_LIMIT:?}; is the broker reachable?"
                        )));
                    }
                    record = back;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    waited += Duration::from_millis(2);
                }
                Err((error, _)) => return Err(delivery_error(error, event_id, origin)),
            }
        };
        Ok(PendingAck {
            delivery,
            topic: topic.to_owned(),
            bytes,
            health: self.health.clone(),
            event_id: event_id.to_owned(),
            origin: origin.clone(),
        })
    }
}

fn delivery_error(error: KafkaError, event_id: &str, origin: &RowOrigin) -> ForwarderError {
    match error.rdkafka_error_code() {
        Some(code) if REFUSED_CLIENT.contains(&code) => {
            DefiniteError::Publish(error.to_string()).into()
        }
        Some(code) if REFUSED_MESSAGE.contains(&code) => DefiniteError::BadRow {
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
