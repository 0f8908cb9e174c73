//! The producer of the group's topic, and the delivery reports of what it
//! shares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::DefiniteError;
use outbox_sink::KafkaConfig;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use crate::config::HaSection;
use crate::metrics::Metrics;

use super::log::{Kind, Record};
use super::ACK_WAIT;

/// Counts the delivery reports of shared checkpoints.
pub struct ShareReports {
    metrics: Arc<Metrics>,
    failures: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// The offset of the last record acknowledged.
    last_offset: Mutex<Option<i64>>,
    auth: outbox_kafka::ClientAuth,
}

impl ClientContext for ShareReports {
    outbox_kafka::oauth_from!(auth);

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        outbox_kafka::log_librdkafka(level, facility, message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        tracing::warn!(%error, "kafka client error (ha.checkpoint_topic): {reason}");
    }
}

impl ProducerContext for ShareReports {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(message) => {
                self.metrics.share_delivered(true);
                *self.last_offset.lock().expect("not poisoned") = Some(message.offset());
            }
            Err((e, _)) => {
                self.failures.fetch_add(1, Ordering::AcqRel);
                self.metrics.share_delivered(false);
                tracing::warn!(error = %e, "a checkpoint shared with the group was not acknowledged");
                *self.last_error.lock().expect("not poisoned") = Some(e.to_string());
            }
        }
    }
}

/// How long a record an instance queues may wait for the broker before it
/// is dropped: a quarter lease, as the data producer's messages.
pub(crate) fn expiry(config: &HaSection) -> Duration {
    Duration::from_millis((config.lease_ms / 4).max(1))
}

/// The producer of the group's topic.
pub struct CheckpointShare {
    producer: ThreadedProducer<ShareReports>,
    pub(crate) topic: String,
    group: String,
}

impl CheckpointShare {
    /// The producer of an instance of the group.
    pub fn new(
        kafka: &KafkaConfig,
        config: &HaSection,
        metrics: Arc<Metrics>,
    ) -> Result<Self, DefiniteError> {
        // As the data producer's (the fence, see `crate::group`): a record
        // queued by an instance that then froze expires before another
        // instance takes over, instead of landing after its records.
        Self::expiring_after(kafka, config, metrics, expiry(config))
    }

    /// The producer of an operator's command (`checkpoint set`,
    /// `repair-gap`), which holds no lease: a record may take as long as
    /// any that gates publishing (a first connection to a managed cluster
    /// can take seconds).
    pub fn for_operator(
        kafka: &KafkaConfig,
        config: &HaSection,
        metrics: Arc<Metrics>,
    ) -> Result<Self, DefiniteError> {
        Self::expiring_after(kafka, config, metrics, ACK_WAIT)
    }

    fn expiring_after(
        kafka: &KafkaConfig,
        config: &HaSection,
        metrics: Arc<Metrics>,
        expiry: Duration,
    ) -> Result<Self, DefiniteError> {
        let producer = outbox_kafka::producer(
            kafka
                .connection_config()
                .set("linger.ms", "0")
                .set("acks", "all")
                .set("message.timeout.ms", expiry.as_millis().to_string()),
            &kafka.auth,
            "the producer of ha.checkpoint_topic",
            |auth| ShareReports {
                metrics,
                failures: AtomicU64::new(0),
                last_error: Mutex::new(None),
                last_offset: Mutex::new(None),
                auth,
            },
        )
        .map_err(DefiniteError::Config)?;
        Ok(Self {
            producer,
            topic: config.checkpoint_topic.clone(),
            group: config.group.clone(),
        })
    }

    /// Waits until what was queued is delivered (or `timeout` passes).
    #[cfg(test)]
    pub(crate) fn flush(&self, timeout: Duration) -> rdkafka::error::KafkaResult<()> {
        self.producer.flush(timeout)
    }

    /// Queues `record` (a mark under the group's mark key, see
    /// [`super::TERM`]); its delivery report is counted.
    pub(crate) fn send(&self, record: Record<'_>) {
        let key = match record.kind {
            Kind::Term => super::mark_key(&self.group),
            _ => self.group.clone(),
        };
        let value = serde_json::to_vec(record.checkpoint).expect("a checkpoint serialises");
        let mut owned = OwnedHeaders::new();
        for (key, value) in record.headers() {
            owned = owned.insert(Header {
                key,
                value: Some(value),
            });
        }
        let message: BaseRecord<'_, str, [u8]> = BaseRecord::to(&self.topic)
            .key(key.as_str())
            .payload(value.as_slice())
            .headers(owned);
        if let Err((e, _)) = self.producer.send(message) {
            let context = self.producer.context();
            context.failures.fetch_add(1, Ordering::AcqRel);
            context.metrics.share_delivered(false);
            tracing::warn!(error = %e, topic = %self.topic, "cannot share the checkpoint");
        }
    }

    /// [`CheckpointShare::send`], then waits until the broker acknowledged
    /// it (and whatever was queued before it); returns its offset.
    pub(crate) fn send_acked(&self, record: Record<'_>) -> Result<i64, String> {
        let context = self.producer.context();
        let failed_before = context.failures.load(Ordering::Acquire);
        self.send(record);
        let flushed =
            tokio::task::block_in_place(|| self.producer.flush(ACK_WAIT + Duration::from_secs(1)));
        if context.failures.load(Ordering::Acquire) != failed_before {
            let why = context
                .last_error
                .lock()
                .expect("not poisoned")
                .clone()
                .unwrap_or_else(|| "the producer refused it".into());
            return Err(format!("{} did not take the record: {why}", self.topic));
        }
        flushed.map_err(|e| format!("{} did not acknowledge the record: {e}", self.topic))?;
        context
            .last_offset
            .lock()
            .expect("not poisoned")
            .ok_or_else(|| format!("{} did not say where it stored the record", self.topic))
    }
}
