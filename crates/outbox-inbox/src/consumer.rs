//! The Kafka side: a consumer group member that hands each message to the
//! [`Inbox`] and commits offsets only behind settled messages.
//!
//! Invariants:
//! - Auto-commit and the automatic offset store are off. A message is
//!   *settled* when it was processed, found duplicate, skipped or parked in
//!   the dead-letter topic (and the broker acked the parked copy); only then
//!   does the [`OffsetLedger`] move past it. Offsets are committed every
//!   `commit_interval`, on revocation and on shutdown. A crash repeats at
//!   most the unsettled and uncommitted messages, which the inbox recognises.
//! - Per partition, messages are settled in offset order: each partition has
//!   a lane (a queue of received messages) and only its head is worked on.
//!   A failing head keeps its lane (and its offset) where it is; the
//!   partition is paused so the lane stays small, and other partitions go
//!   on. The head is retried after a backoff; after `retry.max_attempts`
//!   failures that concern the event (handler errors, refused inbox rows),
//!   or at once when the handler rejects it, it is parked with the error in
//!   a header and the lane moves on. Database outages and unknown commit
//!   outcomes are retried without counting: they say nothing about the event.
//! - One message is worked on at a time. Between messages the consumer is
//!   polled, which serves rebalances: a revoked partition's settled offsets
//!   are committed synchronously before it goes, and its lane is dropped
//!   (its unsettled messages are redelivered to the next owner) before any
//!   message received after the revocation is placed, so a partition
//!   assigned again starts from a fresh lane at its committed offset.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::TopicPartitionList;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::event::{InboxEvent, MessageLocation};
use crate::inbox::{Handler, Inbox, InboxOutcome, ProcessError};
use crate::ledger::{OffsetLedger, Partition};
use crate::{InboxConfig, InboxError};

/// Header of a parked message: why it was parked.
pub const HEADER_ERROR: &str = "inbox_error";
/// Header of a parked message: how many failed attempts concerned the event.
pub const HEADER_ATTEMPTS: &str = "inbox_attempts";
/// Header of a parked message: the consumer that parked it.
pub const HEADER_CONSUMER: &str = "inbox_consumer";
/// Header of a parked message: where it was read (`topic/partition@offset`).
pub const HEADER_SOURCE: &str = "inbox_source";

/// What happened to one attempt at one message, for metrics, alerts and
/// tests (see [`InboxConsumer::with_receipts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    /// Where the message is.
    pub location: MessageLocation,
    /// The event id, when the message could be decoded.
    pub event_id: Option<String>,
    /// Which try this was for this message (1 for the first delivery).
    pub attempt: u32,
    /// How the attempt ended.
    pub status: ReceiptStatus,
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ReceiptStatus {
    /// Final: the offset may move past the message.
    Settled(InboxOutcome),
    /// Not settled; the message is tried again after `retry_in`.
    Failed {
        /// What went wrong.
        error: String,
        /// Whether it counted towards parking (event-related) or was an outage.
        counted: bool,
        /// Backoff before the next attempt.
        retry_in: Duration,
    },
    /// Final: the message was parked in the dead-letter topic.
    Parked {
        /// The error sent along in [`HEADER_ERROR`].
        error: String,
    },
}

/// State shared with librdkafka's callbacks (which run inside `recv`, on
/// the consumer's own task, between two messages).
#[derive(Default)]
struct GroupState {
    ledger: Mutex<OffsetLedger>,
    /// Partitions revoked since the loop last looked; their lanes go.
    revoked: Mutex<Vec<Partition>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data stays consistent across a panic elsewhere (each
    // update is a single call), so a poisoned lock is still usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// librdkafka callbacks: logging, rebalances, commit results.
struct GroupContext {
    state: Arc<GroupState>,
}

impl ClientContext for GroupContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        outbox_sink::log_librdkafka(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, "kafka client error: {reason}");
    }
}

fn partitions_of(list: &TopicPartitionList) -> Vec<Partition> {
    list.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let partitions = partitions_of(list);
            let released = lock(&self.state.ledger).release(&partitions);
            if let Some(offsets) = released {
                match consumer.commit(&offsets, CommitMode::Sync) {
                    Ok(()) => tracing::info!(?partitions, "revoked: settled offsets committed"),
                    // The next owner repeats what this commit would have
                    // covered; the inbox skips those as duplicates.
                    Err(error) => {
                        tracing::warn!(%error, ?partitions, "revoked: committing settled offsets failed")
                    }
                }
            }
            lock(&self.state.revoked).extend(partitions);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                // A partition this member paused before it was revoked would
                // stay paused when it comes back.
                if let Err(error) = consumer.resume(list) {
                    tracing::warn!(%error, "resuming newly assigned partitions failed");
                }
                tracing::info!(partitions = ?partitions_of(list), "partitions assigned");
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(error) => tracing::warn!(%error, "rebalance failed"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(error) = result {
            tracing::warn!(%error, "committing offsets failed; they are sent again with the next commit");
            lock(&self.state.ledger).mark_dirty(offsets);
        }
    }
}

/// The received, unsettled messages of one partition, oldest first.
#[derive(Default)]
struct Lane {
    waiting: VecDeque<OwnedMessage>,
    /// Failed attempts of the head that concerned the event.
    failures: u32,
    /// Failed attempts of the head that were outages (not counted).
    outages: u32,
    /// When the head may be tried again; `None`: now.
    retry_at: Option<Instant>,
    /// The offset after the newest message queued; an older arrival is a
    /// message already queued (fetched again after pause/resume).
    next_offset: i64,
    /// Whether this member paused the partition.
    paused: bool,
}

impl Lane {
    fn ready(&self, now: Instant) -> bool {
        !self.waiting.is_empty() && self.retry_at.is_none_or(|t| t <= now)
    }
}

/// How an attempt left the head of a lane.
enum Step {
    /// Final; the lane moves on.
    Settled,
    /// Try the head again later.
    Retry { counted: bool, error: String },
}

/// An inbox-deduplicating consumer group member.
pub struct InboxConsumer {
    config: InboxConfig,
    inbox: Inbox,
    consumer: StreamConsumer<GroupContext>,
    dead_letters: FutureProducer,
    state: Arc<GroupState>,
    receipts: Option<mpsc::UnboundedSender<Receipt>>,
}

impl InboxConsumer {
    /// A consumer for `config`; nothing connects until [`InboxConsumer::run`].
    pub fn new(config: InboxConfig) -> Result<Self, InboxError> {
        config.validate()?;
        let opts = Inbox::pool_options(&config.mysql.url, config.mysql.max_connections)
            .map_err(InboxError::Config)?;
        let inbox = Inbox::new(
            mysql_async::Pool::new(opts),
            config.inbox.consumer_name.clone(),
        );
        let state = Arc::new(GroupState::default());
        let consumer = config
            .consumer_config()
            .create_with_context(GroupContext {
                state: state.clone(),
            })
            .map_err(|e| InboxError::Kafka(format!("cannot create the consumer: {e}")))?;
        let dead_letters = config.producer_config().create().map_err(|e| {
            InboxError::Kafka(format!("cannot create the dead-letter producer: {e}"))
        })?;
        Ok(InboxConsumer {
            config,
            inbox,
            consumer,
            dead_letters,
            state,
            receipts: None,
        })
    }

    /// Sends a [`Receipt`] for every attempt to `receipts` (a dropped
    /// receiver is ignored).
    pub fn with_receipts(mut self, receipts: mpsc::UnboundedSender<Receipt>) -> Self {
        self.receipts = Some(receipts);
        self
    }

    /// Consumes until `shutdown` turns true (or its sender is dropped), then
    /// commits the settled offsets and returns. The message being processed
    /// when shutdown is asked for is finished first; one waiting for a retry
    /// is left unsettled (and redelivered later).
    pub async fn run<H: Handler>(
        self,
        handler: H,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), InboxError> {
        let topics: Vec<&str> = self
            .config
            .kafka
            .topics
            .iter()
            .map(String::as_str)
            .collect();
        self.consumer
            .subscribe(&topics)
            .map_err(|e| InboxError::Kafka(format!("cannot subscribe to {topics:?}: {e}")))?;
        tracing::info!(
            consumer = self.inbox.consumer_name(),
            group = %self.config.kafka.group_id,
            ?topics,
            "inbox consumer started"
        );
        let mut lanes: BTreeMap<Partition, Lane> = BTreeMap::new();
        let interval = self.config.commit_interval();
        let mut next_commit = Instant::now() + interval;
        loop {
            self.drop_revoked(&mut lanes);
            if *shutdown.borrow() {
                break;
            }
            let now = Instant::now();
            if now >= next_commit {
                self.commit_pending();
                next_commit = now + interval;
            }
            let ready = lanes
                .iter()
                .find(|(_, lane)| lane.ready(now))
                .map(|(partition, _)| partition.clone());
            if let Some(partition) = ready {
                // Poll once without waiting, so rebalances and group liveness
                // are served between messages even when there is a backlog.
                tokio::select! {
                    biased;
                    received = self.consumer.recv() => self.receive(received, &mut lanes),
                    _ = std::future::ready(()) => {}
                }
                self.drop_revoked(&mut lanes);
                if lanes.contains_key(&partition) {
                    self.work_on(&handler, &partition, &mut lanes).await;
                }
                continue;
            }
            let next_retry = lanes
                .values()
                .filter(|lane| !lane.waiting.is_empty())
                .filter_map(|lane| lane.retry_at)
                .min()
                .unwrap_or(next_commit)
                .min(next_commit);
            tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        tracing::info!("shutdown sender dropped: stopping");
                        break;
                    }
                }
                received = self.consumer.recv() => self.receive(received, &mut lanes),
                _ = tokio::time::sleep_until(next_retry) => {}
            }
        }
        self.commit_all();
        self.inbox.disconnect().await;
        tracing::info!("inbox consumer stopped");
        Ok(())
    }

    fn receive(
        &self,
        received: KafkaResult<BorrowedMessage<'_>>,
        lanes: &mut BTreeMap<Partition, Lane>,
    ) {
        let message = match received {
            Ok(message) => message,
            Err(error) => {
                // librdkafka reconnects by itself; nothing is settled meanwhile.
                tracing::warn!(%error, "kafka consumer error");
                return;
            }
        };
        // librdkafka runs the rebalance callbacks inside `recv`: a revoke,
        // a re-assignment of the same partition and its first fetched
        // message can all come from one call. The revoked lanes go before
        // the message is placed, or it would join (or be dropped as older
        // than) a lane of the previous assignment that is about to go.
        self.drop_revoked(lanes);
        let partition = (message.topic().to_owned(), message.partition());
        let lane = lanes.entry(partition).or_default();
        if message.offset() < lane.next_offset {
            tracing::debug!(offset = message.offset(), "message already queued; ignored");
            return;
        }
        lane.next_offset = message.offset() + 1;
        lane.waiting.push_back(message.detach());
    }

    fn drop_revoked(&self, lanes: &mut BTreeMap<Partition, Lane>) {
        let revoked = std::mem::take(&mut *lock(&self.state.revoked));
        for partition in revoked {
            if let Some(lane) = lanes.remove(&partition) {
                if !lane.waiting.is_empty() {
                    tracing::info!(
                        topic = %partition.0,
                        partition = partition.1,
                        unsettled = lane.waiting.len(),
                        "partition revoked; its unsettled messages go to the next owner"
                    );
                }
            }
        }
    }

    /// One attempt at the head of `partition`'s lane.
    async fn work_on<H: Handler>(
        &self,
        handler: &H,
        partition: &Partition,
        lanes: &mut BTreeMap<Partition, Lane>,
    ) {
        let Some(lane) = lanes.get_mut(partition) else {
            return;
        };
        let Some(message) = lane.waiting.front() else {
            return;
        };
        let offset = message.offset();
        let attempt = lane.failures + lane.outages + 1;
        let step = self.attempt(handler, message, lane.failures, attempt).await;
        let location = MessageLocation::of(message);
        let event_id = event_id_of(message);
        match step {
            Step::Settled => {
                lane.waiting.pop_front();
                lane.failures = 0;
                lane.outages = 0;
                lane.retry_at = None;
                lock(&self.state.ledger).settle(partition, offset);
                if lane.paused && lane.waiting.is_empty() {
                    self.pause(partition, false);
                    lane.paused = false;
                }
            }
            Step::Retry { counted, error } => {
                if counted {
                    lane.failures += 1;
                } else {
                    lane.outages += 1;
                }
                let retry_in = self.config.backoff(lane.failures + lane.outages);
                lane.retry_at = Some(Instant::now() + retry_in);
                if !lane.paused {
                    self.pause(partition, true);
                    lane.paused = true;
                }
                tracing::warn!(
                    %location,
                    attempt,
                    counted,
                    retry_in_ms = retry_in.as_millis() as u64,
                    %error,
                    "attempt failed; the partition waits for this message"
                );
                self.report(Receipt {
                    location,
                    event_id,
                    attempt,
                    status: ReceiptStatus::Failed {
                        error,
                        counted,
                        retry_in,
                    },
                });
            }
        }
    }

    /// Decodes, processes and, when that is final, reports. Parks when the
    /// event cannot succeed or has failed `max_attempts` times.
    async fn attempt<H: Handler>(
        &self,
        handler: &H,
        message: &OwnedMessage,
        failures: u32,
        attempt: u32,
    ) -> Step {
        let location = MessageLocation::of(message);
        let event = match InboxEvent::decode(message) {
            Ok(event) => event,
            Err(error) => {
                return self
                    .park(message, failures + 1, attempt, error.to_string())
                    .await
            }
        };
        let event_id = &event.event_id;
        match self.inbox.process(handler, &event).await {
            Ok(outcome) => {
                match outcome {
                    InboxOutcome::Processed => {
                        tracing::info!(event_id = %event_id, %location, attempt, "event processed")
                    }
                    InboxOutcome::Duplicate => tracing::info!(
                        event_id = %event_id,
                        %location,
                        "duplicate event skipped: already in the inbox"
                    ),
                    InboxOutcome::Skipped => {
                        tracing::debug!(event_id = %event_id, %location, "event not handled here")
                    }
                }
                self.report(Receipt {
                    location,
                    event_id: Some(event_id.clone()),
                    attempt,
                    status: ReceiptStatus::Settled(outcome),
                });
                Step::Settled
            }
            Err(error) => {
                let counted = error.counts_as_attempt();
                let failures = failures + u32::from(counted);
                if !error.is_retryable() || failures >= self.config.retry.max_attempts {
                    return self
                        .park(message, failures, attempt, error.to_string())
                        .await;
                }
                if let ProcessError::CommitUnknown { .. } = error {
                    tracing::warn!(event_id = %event_id, %location, "commit outcome unknown; not acknowledged");
                }
                Step::Retry {
                    counted,
                    error: error.to_string(),
                }
            }
        }
    }

    /// Sends `message` to the dead-letter topic with `error` and waits for
    /// the broker's ack; settled only then.
    async fn park(
        &self,
        message: &OwnedMessage,
        failures: u32,
        attempt: u32,
        error: String,
    ) -> Step {
        let location = MessageLocation::of(message);
        let mut headers = OwnedHeaders::new();
        if let Some(original) = message.headers() {
            for header in original.iter() {
                headers = headers.insert(header);
            }
        }
        let failures_text = failures.to_string();
        let location_text = location.to_string();
        for (key, value) in [
            (HEADER_ERROR, error.as_str()),
            (HEADER_ATTEMPTS, failures_text.as_str()),
            (HEADER_CONSUMER, self.inbox.consumer_name()),
            (HEADER_SOURCE, location_text.as_str()),
        ] {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&self.config.kafka.dead_letter_topic).headers(headers);
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = message.payload() {
            record = record.payload(payload);
        }
        match self.dead_letters.send(record, Duration::ZERO).await {
            Ok(_) => {
                tracing::error!(
                    %location,
                    topic = %self.config.kafka.dead_letter_topic,
                    failures,
                    %error,
                    "event parked in the dead-letter topic"
                );
                self.report(Receipt {
                    location,
                    event_id: event_id_of(message),
                    attempt,
                    status: ReceiptStatus::Parked { error },
                });
                Step::Settled
            }
            // Not settled: the message stays at the head and is tried again.
            Err((kafka, _)) => Step::Retry {
                counted: false,
                error: format!(
                    "parking failed ({kafka}) after: {error}; check that topic {} exists and \
                     accepts writes",
                    self.config.kafka.dead_letter_topic
                ),
            },
        }
    }

    fn pause(&self, partition: &Partition, pause: bool) {
        let mut list = TopicPartitionList::new();
        list.add_partition(&partition.0, partition.1);
        let result = if pause {
            self.consumer.pause(&list)
        } else {
            self.consumer.resume(&list)
        };
        // Pausing only bounds memory; order does not depend on it.
        if let Err(error) = result {
            tracing::warn!(%error, topic = %partition.0, partition = partition.1, pause, "pause/resume failed");
        }
    }

    fn commit_pending(&self) {
        let pending = lock(&self.state.ledger).take_pending();
        if let Some(offsets) = pending {
            if let Err(error) = self.consumer.commit(&offsets, CommitMode::Async) {
                tracing::warn!(%error, "could not send the offset commit; it is sent again later");
                lock(&self.state.ledger).mark_dirty(&offsets);
            }
        }
    }

    fn commit_all(&self) {
        let all = lock(&self.state.ledger).all();
        if let Some(offsets) = all {
            match self.consumer.commit(&offsets, CommitMode::Sync) {
                Ok(()) => tracing::info!("settled offsets committed"),
                Err(error) => tracing::warn!(
                    %error,
                    "final offset commit failed; messages after the last commit will be \
                     redelivered and skipped as duplicates"
                ),
            }
        }
    }

    fn report(&self, receipt: Receipt) {
        if let Some(receipts) = &self.receipts {
            let _ = receipts.send(receipt);
        }
    }
}

fn event_id_of(message: &OwnedMessage) -> Option<String> {
    crate::event::header_map(message)
        .remove("event_id")
        .or_else(|| {
            message
                .key()
                .and_then(|k| std::str::from_utf8(k).ok())
                .map(str::to_owned)
        })
}
