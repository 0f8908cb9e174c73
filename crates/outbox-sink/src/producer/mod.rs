//! The idempotent producer and the meaning of its outcomes.
//!
//! `send` hands a record, tagged with a number, to librdkafka; the broker's
//! answers are collected by tag and taken by the pipeline in batches
//! ([`Acks`]). `QueueFull` is backpressure: wait and offer the same record
//! again. Delivery errors are sorted into the two kinds: a message the broker
//! will never take (too large, invalid or forbidden topic) is definite;
//! anything else is transient and the pipeline resends from its acked
//! watermark.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{DeadLetter, DefiniteError, ForwarderError, OutboxEvent, PartitionBy, RowOrigin};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

mod acks;
mod partitions;

use crate::allowed::{AllowedTopics, GROUP_TOPIC_PREFIX};
use crate::config::KafkaConfig;
use crate::encoder::bad_route;
use crate::encoder::{Backfilled, MessageHeaders, TopicTemplate};
use crate::kick::Kicker;
use crate::partitioner::{partition_for, Partitioner};
use acks::AckInbox;
pub use acks::BrokerHealth;
use outbox_core::headers::{BinlogCoordinates, EVENT_ID, HEADER_PUBLISHED_BY, HEADER_SOURCE_TABLE};
use outbox_core::Acks;
use partitions::PartitionCounts;

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

/// Routes librdkafka's own reports into `tracing` and [`BrokerHealth`], and
/// its delivery reports into the [`AckInbox`].
pub struct SinkContext {
    health: Arc<BrokerHealth>,
    inbox: Arc<AckInbox>,
    auth: outbox_kafka::ClientAuth,
}

impl ClientContext for SinkContext {
    outbox_kafka::oauth_from!(auth);

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        outbox_kafka::log_librdkafka(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.health.mark_down();
        let refused = error
            .rdkafka_error_code()
            .and_then(|code| outbox_kafka::refusal_fix(code, reason));
        match refused {
            Some(fix) => tracing::error!(%error, "kafka refused the connection: {reason}; {fix}"),
            None => tracing::warn!(%error, "kafka client error: {reason}"),
        }
    }
}

impl ProducerContext for SinkContext {
    /// The tag given to [`KafkaSink::send`]; a number, so nothing is
    /// allocated per message.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, tag: usize) {
        {
            let mut acks = self.inbox.acks.lock().expect("not poisoned");
            match result {
                Ok(message) => {
                    self.health.mark_up();
                    acks::record(&mut acks, tag as u64, message);
                }
                Err((error, message)) => {
                    if acks.failed.is_none() {
                        acks.failed = Some(answer_error(error, message));
                    }
                }
            }
            self.inbox.outstanding.fetch_sub(1, Ordering::AcqRel);
        }
        self.inbox.ready.notify_one();
    }
}

/// The forwarder's producer with its topic routing.
pub struct KafkaSink {
    /// Started by the first [`KafkaSink::send_now`]; `None` if it could not
    /// be. Declared first, so that it stops before the producer is dropped.
    kicker: std::sync::OnceLock<Option<Kicker>>,
    producer: Arc<ThreadedProducer<SinkContext>>,
    topics: TopicTemplate,
    dead_letter_topic: String,
    health: Arc<BrokerHealth>,
    inbox: Arc<AckInbox>,
    /// The server every message's coordinates name.
    server: String,
    /// How a message carries its coordinates.
    message_headers: MessageHeaders,
    /// The `published_by` header, in an active/standby group.
    instance: Option<String>,
    /// In an active/standby group: whether this instance may still hand
    /// messages to the producer, asked right before each hand-over.
    fence: Option<Fence>,
    /// Partition counts, for rows placed by `partition_column`.
    partitions: PartitionCounts,
    /// How a `partition_column` value is hashed: as the producer hashes keys.
    partitioner: Partitioner,
    /// Topics no row may be routed to (see [`KafkaConfig::reserved_topics`]).
    reserved_topics: Vec<String>,
    /// Topics rows may be routed to.
    allowed: AllowedTopics,
    /// Signs every message, when `kafka.signing_key` is set.
    signing: Option<outbox_kafka::Signing>,
    /// `[kafka.topics]`: creates a missing topic before its first message,
    /// with the configuration it is created through.
    creation: Option<(crate::topics::Creation, KafkaConfig)>,
}

/// Tells whether messages may be handed to the producer now.
pub type Fence = Arc<dyn Fn() -> bool + Send + Sync>;

/// The message of a send the fence stopped.
pub const FENCED: &str = "the group's lease is not fresh: not publishing";

impl KafkaSink {
    /// A producer reporting its broker connectivity to `health`.
    pub fn new(config: &KafkaConfig, health: Arc<BrokerHealth>) -> Result<Self, DefiniteError> {
        let topics = config.topic.parse()?;
        let allowed = AllowedTopics::new(&config.allowed_topics, &topics)?;
        let inbox = Arc::new(AckInbox::default());
        let producer = outbox_kafka::producer(
            &config.client_config()?,
            &config.auth,
            "the Kafka producer",
            |auth| SinkContext {
                health: health.clone(),
                inbox: inbox.clone(),
                auth,
            },
        )
        .map_err(DefiniteError::Config)?;
        Ok(Self {
            kicker: std::sync::OnceLock::new(),
            producer: Arc::new(producer),
            topics,
            dead_letter_topic: config.dead_letter_topic.clone(),
            health,
            inbox,
            server: String::new(),
            message_headers: MessageHeaders {
                coordinates: config.coordinate_headers,
            },
            instance: None,
            fence: None,
            partitions: PartitionCounts::default(),
            partitioner: config.partitioner,
            reserved_topics: config.reserved_topics.clone(),
            allowed,
            signing: config.signing.clone(),
            creation: config
                .topic_creation
                .clone()
                .map(|spec| (crate::topics::Creation::new(spec), config.clone())),
        })
    }

    /// Names this instance in every message (`published_by`).
    pub fn set_instance(&mut self, instance: String) {
        self.instance = Some(instance);
    }

    /// Asks `fence` right before every hand-over to the producer (also
    /// between the retries of a full queue, which may last a minute): once
    /// it says no, nothing more is handed over and the send fails with
    /// [`FENCED`].
    pub fn set_fence(&mut self, fence: Fence) {
        self.fence = Some(fence);
    }

    /// `headers` of a message to `topic` with `key` and `payload`, with the
    /// signature and the instance's name, where set.
    fn headers(
        &self,
        headers: rdkafka::message::OwnedHeaders,
        topic: &str,
        key: &[u8],
        payload: Option<&[u8]>,
    ) -> rdkafka::message::OwnedHeaders {
        let headers = match &self.signing {
            Some(signing) => {
                let signature = signing.sign(topic, Some(key), payload, &headers);
                headers.insert(rdkafka::message::Header {
                    key: outbox_core::headers::HEADER_SIGNATURE,
                    value: Some(signature.as_str()),
                })
            }
            None => headers,
        };
        match &self.instance {
            Some(instance) => headers.insert(rdkafka::message::Header {
                key: HEADER_PUBLISHED_BY,
                value: Some(instance.as_str()),
            }),
            None => headers,
        }
    }

    /// Names the server whose binlog the messages' coordinates are in
    /// ([`outbox_core::SourceIdentity::key`]).
    pub fn set_server(&mut self, server: String) {
        self.server = server;
    }

    /// Hands `event` to the producer; its ack (or failure) will be in
    /// [`KafkaSink::take_acks`] under `tag`. Routing errors (e.g. a NULL
    /// `aggregate_type` under a templated topic) and messages librdkafka
    /// refuses outright (too large) are definite and returned at once.
    pub async fn send(&self, event: &OutboxEvent, tag: u64) -> Result<(), ForwarderError> {
        self.send_to(&self.topic_for(event)?, event, tag, None)
            .await
    }

    /// The topic `event` goes to: one of `kafka.allowed_topics`, and never
    /// the dead-letter topic, an `[ha]` group's checkpoint topic or one
    /// beginning with `_` (Kafka's, the schema registry's, Connect's),
    /// whatever the row says.
    pub fn topic_for(&self, event: &OutboxEvent) -> Result<String, DefiniteError> {
        let topic = self.topics.route(event)?;
        if topic.starts_with('_')
            || topic.starts_with(GROUP_TOPIC_PREFIX)
            || topic == self.dead_letter_topic
            || self.reserved_topics.contains(&topic)
        {
            return Err(bad_route(
                event,
                format!(
                    "the row routes to topic {topic}, which is a system topic (a name beginning \
                     with '_'), the dead-letter topic or an [ha] group's checkpoint topic"
                ),
            ));
        }
        if !self.allowed.permits(&topic) {
            return Err(bad_route(
                event,
                format!(
                    "the row routes to topic {topic}, which kafka.allowed_topics ({}) does not \
                     list; add it there if rows may write it",
                    self.allowed
                ),
            ));
        }
        Ok(topic)
    }

    pub fn dead_letter_topic(&self) -> &str {
        &self.dead_letter_topic
    }

    /// [`KafkaSink::send`] to `topic`, as [`KafkaSink::topic_for`] named
    /// it, with the event's place in its transaction by GTID (`slot`: the
    /// GTID's text and the index) when the server logs GTIDs.
    pub async fn send_to(
        &self,
        topic: &str,
        event: &OutboxEvent,
        tag: u64,
        slot: Option<(&str, u32)>,
    ) -> Result<(), ForwarderError> {
        self.ensure_topic(topic).await?;
        let headers = self.message_headers.for_event(event, &self.server, slot);
        self.send_with(topic, event, tag, headers).await
    }

    /// With `[kafka.topics]`: creates `topic` if it does not exist yet (the
    /// first time it is written to in this process).
    async fn ensure_topic(&self, topic: &str) -> Result<(), ForwarderError> {
        let Some((creation, kafka)) = &self.creation else {
            return Ok(());
        };
        if creation.exists(topic) {
            return Ok(());
        }
        match self.watermarks(topic).await {
            Ok(Some(_)) => {
                creation.note(topic);
                Ok(())
            }
            Ok(None) => creation.create(kafka, topic).await,
            Err(e) => Err(ForwarderError::transient(format!(
                "cannot look up topic {topic} before writing to it: {e}"
            ))),
        }
    }

    /// [`KafkaSink::send`] of a row read from its table rather than the
    /// binlog: the same message, with backfill headers instead of binlog
    /// coordinates.
    pub async fn send_backfill(
        &self,
        event: &OutboxEvent,
        tag: u64,
        mark: &Backfilled,
    ) -> Result<(), ForwarderError> {
        let topic = self.topic_for(event)?;
        self.ensure_topic(&topic).await?;
        let headers = MessageHeaders::for_backfill(event, mark);
        self.send_with(&topic, event, tag, headers).await
    }

    async fn send_with(
        &self,
        topic: &str,
        event: &OutboxEvent,
        tag: u64,
        headers: rdkafka::message::OwnedHeaders,
    ) -> Result<(), ForwarderError> {
        let mut record: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(topic, tag as usize)
                .key(event.key_bytes())
                .headers(self.headers(headers, topic, event.key_bytes(), event.payload.as_deref()));
        if let Some(payload) = &event.payload {
            record = record.payload(payload.as_slice());
        }
        if let Some(ms) = event.shape().timestamp_ms {
            record = record.timestamp(ms);
        }
        if let Some(by) = &event.shape().partition {
            record = record.partition(self.partition(topic, by, event).await?);
        }
        self.enqueue(record, &event.event_id, &event.origin).await
    }

    /// The partition `partition_column` asks for in `topic`; a number the
    /// topic lacks (after asking the brokers again) is a bad row, an unknown
    /// count a retry.
    async fn partition(
        &self,
        topic: &str,
        by: &PartitionBy,
        event: &OutboxEvent,
    ) -> Result<i32, ForwarderError> {
        let mut count = self
            .partitions
            .of(&self.producer, topic)
            .await
            .map_err(ForwarderError::transient)?;
        if partition_for(by, count, self.partitioner).is_err() {
            // Not refused on a count that may be stale.
            self.partitions.forget(topic);
            count = self
                .partitions
                .of(&self.producer, topic)
                .await
                .map_err(ForwarderError::transient)?;
        }
        partition_for(by, count, self.partitioner).map_err(|reason| bad_route(event, reason).into())
    }

    /// Publishes a refused row to the dead-letter topic, acked under `tag`
    /// (`slot` as for [`KafkaSink::send_to`]).
    pub async fn send_dead_letter(
        &self,
        dead: &DeadLetter,
        tag: u64,
        slot: Option<(&str, u32)>,
    ) -> Result<(), ForwarderError> {
        self.ensure_topic(&self.dead_letter_topic).await?;
        let key = dead
            .event_id
            .clone()
            .unwrap_or_else(|| format!("{}#{}", dead.origin.event_position, dead.origin.row_index));
        let record = BaseRecord::with_opaque_to(&self.dead_letter_topic, tag as usize)
            .key(key.as_bytes())
            .payload(dead.row.as_slice())
            .headers(
                self.headers(
                    self.message_headers
                        .for_dead_letter(dead, &self.server, slot),
                    &self.dead_letter_topic,
                    key.as_bytes(),
                    Some(dead.row.as_slice()),
                ),
            );
        self.enqueue(record, &key, &dead.origin).await
    }

    /// Sends what the producer holds now rather than after `linger.ms`
    /// (for a forwarder that has caught up: nothing more is coming to batch
    /// with). Returns at once.
    pub fn send_now(&self) {
        let kicker = self.kicker.get_or_init(|| {
            Kicker::start(Arc::downgrade(&self.producer))
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "cannot start the producer's kick thread; linger.ms applies to every message")
                })
                .ok()
        });
        if let Some(kicker) = kicker {
            kicker.kick();
        }
    }

    /// Resolves once acks have come in since the last [`KafkaSink::take_acks`]
    /// (possibly none, if they were taken meanwhile).
    pub async fn acks_ready(&self) {
        self.inbox.ready.notified().await
    }

    /// Messages sent whose ack or failure has not come in yet. Once it is
    /// zero, the next [`KafkaSink::take_acks`] holds every report.
    pub fn outstanding(&self) -> usize {
        self.inbox.outstanding.load(Ordering::Acquire)
    }

    /// Swaps the acks that came in with `into` (which should be empty).
    pub fn take_acks(&self, into: &mut Acks) {
        std::mem::swap(&mut *self.inbox.acks.lock().expect("not poisoned"), into);
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

    /// Per partition of `topic`, its (low, high) watermarks, `None` if the
    /// topic does not exist.
    pub async fn watermarks(&self, topic: &str) -> Result<Option<Vec<(i64, i64)>>, KafkaError> {
        let producer = self.producer.clone();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || outbox_kafka::watermarks(producer.client(), &topic))
            .await
            .expect("the watermark request does not panic")
    }

    /// The idempotent producer hit a fatal error and cannot send any more.
    pub fn is_fatal(&self) -> bool {
        self.producer.client().fatal_error().is_some()
    }

    /// Offers `record` until librdkafka takes it (`QueueFull` is backpressure).
    async fn enqueue(
        &self,
        mut record: BaseRecord<'_, [u8], [u8], usize>,
        event_id: &str,
        origin: &RowOrigin,
    ) -> Result<(), ForwarderError> {
        let mut waited = Duration::ZERO;
        loop {
            if self
                .fence
                .as_ref()
                .is_some_and(|may_publish| !may_publish())
            {
                return Err(ForwarderError::transient(FENCED));
            }
            // Counted before the send: the report may come in before `send`
            // returns.
            self.inbox.outstanding.fetch_add(1, Ordering::AcqRel);
            let sent = self.producer.send(record);
            if sent.is_err() {
                self.inbox.outstanding.fetch_sub(1, Ordering::AcqRel);
            }
            match sent {
                Ok(()) => return Ok(()),
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
                Err((error, _)) => {
                    return Err(delivery_error(
                        error,
                        event_id,
                        &origin.event_position.to_string(),
                        origin.row_index,
                        &origin.qualified_table(),
                    ))
                }
            }
        }
    }
}

/// The error for a message the broker answered with a failure, from what
/// the message itself carries: its `event_id`, `source_table` and binlog
/// coordinates are in its headers.
fn answer_error(error: &KafkaError, message: &BorrowedMessage<'_>) -> ForwarderError {
    let value = |name: &str| {
        message
            .headers()
            .and_then(|headers| headers.iter().find(|h| h.key == name).and_then(|h| h.value))
    };
    let text = |name: &str| value(name).map(|v| String::from_utf8_lossy(v).into_owned());
    let event_id = text(EVENT_ID)
        .or_else(|| {
            message
                .key()
                .map(|k| String::from_utf8_lossy(k).into_owned())
        })
        .unwrap_or_default();
    let coordinates = BinlogCoordinates::read(|name| {
        message
            .headers()
            .and_then(|headers| crate::tail::header_text(headers, name))
    });
    delivery_error(
        error.clone(),
        &event_id,
        coordinates.map(|c| c.position).unwrap_or_default(),
        coordinates.map(|c| c.row).unwrap_or_default(),
        &text(HEADER_SOURCE_TABLE).unwrap_or_default(),
    )
}

fn delivery_error(
    error: KafkaError,
    event_id: &str,
    position: &str,
    row_index: u32,
    table: &str,
) -> ForwarderError {
    match error.rdkafka_error_code() {
        Some(code) if REFUSED_CLIENT.contains(&code) => {
            DefiniteError::Publish(error.to_string()).into()
        }
        Some(code) if REFUSED_MESSAGE.contains(&code) => match position.parse() {
            Ok(position) => DefiniteError::BadRow {
                table: table.to_owned(),
                position,
                row_index,
                event_id: Some(event_id.to_owned()),
                reason: format!("Kafka refused the message: {error}"),
            }
            .into(),
            Err(_) => DefiniteError::Publish(format!(
                "Kafka refused the message of event {event_id}: {error}"
            ))
            .into(),
        },
        _ => ForwarderError::transient(format!(
            "Kafka did not ack event {event_id} (binlog {position}): {error}"
        )),
    }
}

#[cfg(test)]
mod tests;
