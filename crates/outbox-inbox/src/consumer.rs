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
//!   a lane (a queue of received messages) and only its front is worked on:
//!   a batch of the messages waiting there (up to `inbox.max_batch`, in one
//!   transaction; [`Inbox::process_batch`] settles a prefix of it), or the
//!   head alone once it has failed.
//!   A failing head keeps its lane (and its offset) where it is; the
//!   partition is paused so the lane stays small, and other partitions go
//!   on. The head is retried after a backoff; after `retry.max_attempts`
//!   failures that concern the event (handler errors, refused inbox rows),
//!   or at once when the handler rejects it, it is parked with the error in
//!   a header and the lane moves on. Database outages and unknown commit
//!   outcomes are retried without counting: they say nothing about the event.
//! - The partitions whose lanes are ready are worked on concurrently (a
//!   batch each, on connections of their own); between rounds the consumer
//!   is polled (what it has ready, up to a batch per partition), which
//!   serves rebalances: a revoked partition's settled offsets
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
    /// How many messages the attempt's transaction settled together (1
    /// for a failed attempt or an event processed alone).
    pub batch: usize,
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
    /// Since when the lane has not been empty: its batch may wait from then
    /// on for more events, up to `inbox.max_batch_wait_ms`.
    filling_since: Option<Instant>,
}

impl Lane {
    fn ready(&self, now: Instant, batch: &BatchLimits) -> bool {
        !self.waiting.is_empty()
            && self.retry_at.is_none_or(|t| t <= now)
            && self.batch_due(batch).is_none_or(|t| t <= now)
    }

    /// When a lane that may take more events into its batch stops waiting
    /// for them; `None` when it does not wait.
    fn batch_due(&self, batch: &BatchLimits) -> Option<Instant> {
        if batch.wait.is_zero()
            || self.failures + self.outages > 0
            || self.waiting.len() >= batch.max
        {
            return None;
        }
        self.filling_since.map(|since| since + batch.wait)
    }

    /// The head is retried alone: batches are for events not tried yet.
    fn batches(&self) -> bool {
        self.failures + self.outages == 0
    }
}

/// How many events one transaction takes, and how long a partition waits
/// to fill it.
struct BatchLimits {
    max: usize,
    wait: Duration,
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
        let batch = BatchLimits {
            max: self.config.inbox.max_batch,
            wait: self.config.max_batch_wait(),
        };
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
            if lanes.values().any(|lane| lane.ready(now, &batch)) {
                // Take what the consumer has ready without waiting (up to a
                // batch per partition), so rebalances and group liveness
                // are served between batches even when there is a backlog,
                // and a lane's batch holds what has arrived.
                for _ in 0..batch.max * lanes.len().max(1) {
                    tokio::select! {
                        biased;
                        received = self.consumer.recv() => self.receive(received, &mut lanes),
                        _ = std::future::ready(()) => break,
                    }
                }
                self.drop_revoked(&mut lanes);
                // The ready partitions are worked on concurrently, each on
                // its own connection and in its own order. Rebalances are
                // served only inside `recv`, so no lane changes meanwhile.
                let now = Instant::now();
                let ready: Vec<Partition> = lanes
                    .iter()
                    .filter(|(_, lane)| lane.ready(now, &batch))
                    .map(|(partition, _)| partition.clone())
                    .collect();
                let mut working: Vec<(Partition, Lane)> = ready
                    .into_iter()
                    .filter_map(|partition| lanes.remove_entry(&partition))
                    .collect();
                futures_util::future::join_all(
                    working
                        .iter_mut()
                        .map(|(partition, lane)| self.work_on(&handler, partition, lane)),
                )
                .await;
                lanes.extend(working);
                continue;
            }
            let next_retry = lanes
                .values()
                .filter(|lane| !lane.waiting.is_empty())
                .filter_map(|lane| lane.retry_at.or(lane.batch_due(&batch)))
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
        if lane.waiting.is_empty() {
            lane.filling_since = Some(Instant::now());
        }
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

    /// One attempt at the head of `partition`'s lane: a batch of the events
    /// waiting there when the head has not failed before, the head alone
    /// otherwise.
    async fn work_on<H: Handler>(&self, handler: &H, partition: &Partition, lane: &mut Lane) {
        if lane.batches() && self.work_on_batch(handler, partition, lane).await {
            return;
        }
        let Some(message) = lane.waiting.front() else {
            return;
        };
        let attempt = lane.failures + lane.outages + 1;
        let step = self.attempt(handler, message, lane.failures, attempt).await;
        self.conclude(partition, lane, step, attempt);
    }

    /// Processes the lane's first events (up to `inbox.max_batch`, the
    /// decodable ones) in one transaction, settles those that reached an
    /// outcome and concludes the failed attempt of the event after them,
    /// if any. Returns false, having done nothing, when fewer than two
    /// events would make the batch.
    async fn work_on_batch<H: Handler>(
        &self,
        handler: &H,
        partition: &Partition,
        lane: &mut Lane,
    ) -> bool {
        let events: Vec<InboxEvent> = lane
            .waiting
            .iter()
            .take(self.config.inbox.max_batch)
            .map_while(|message| InboxEvent::decode(message).ok())
            .collect();
        if events.len() < 2 {
            return false;
        }
        let result = self.inbox.process_batch(handler, &events).await;
        let settled = result.outcomes.len();
        for (outcome, event) in result.outcomes.into_iter().zip(&events) {
            let message = lane
                .waiting
                .pop_front()
                .expect("a batch is taken from the lane");
            self.report_settled(&message, &event.event_id, outcome, 1, settled);
            lock(&self.state.ledger).settle(partition, message.offset());
        }
        if let Some(error) = result.stopped {
            let message = lane
                .waiting
                .front()
                .expect("the batch stopped at a waiting event");
            // A failure that concerns the event is its first attempt. An
            // outage, a deadlock between batches or an unknown commit says
            // nothing about it: the event is tried alone at once, as it
            // would have been without batching, and that attempt counts.
            let step = if error.counts_as_attempt() {
                self.failed(message, error, 0, 1).await
            } else {
                self.attempt(handler, message, 0, 1).await
            };
            self.conclude(partition, lane, step, 1);
        } else {
            self.settled_head(partition, lane);
        }
        true
    }

    /// Applies how an attempt at the lane's head ended.
    fn conclude(&self, partition: &Partition, lane: &mut Lane, step: Step, attempt: u32) {
        let Some(message) = lane.waiting.front() else {
            return;
        };
        let offset = message.offset();
        let location = MessageLocation::of(message);
        let event_id = event_id_of(message);
        match step {
            Step::Settled => {
                lane.waiting.pop_front();
                lane.failures = 0;
                lane.outages = 0;
                lane.retry_at = None;
                lock(&self.state.ledger).settle(partition, offset);
                self.settled_head(partition, lane);
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
                    batch: 1,
                    status: ReceiptStatus::Failed {
                        error,
                        counted,
                        retry_in,
                    },
                });
            }
        }
    }

    /// After the head (or a batch) settled: an emptied lane stops filling
    /// and, if this member paused it, the partition is resumed.
    fn settled_head(&self, partition: &Partition, lane: &mut Lane) {
        if lane.waiting.is_empty() {
            lane.filling_since = None;
            if lane.paused {
                self.pause(partition, false);
                lane.paused = false;
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
        let event = match InboxEvent::decode(message) {
            Ok(event) => event,
            Err(error) => {
                return self
                    .park(message, failures + 1, attempt, error.to_string())
                    .await
            }
        };
        match self.inbox.process(handler, &event).await {
            Ok(outcome) => {
                self.report_settled(message, &event.event_id, outcome, attempt, 1);
                Step::Settled
            }
            Err(error) => self.failed(message, error, failures, attempt).await,
        }
    }

    /// Logs and reports an attempt that reached `outcome`; `batch` events
    /// were settled by its transaction.
    fn report_settled(
        &self,
        message: &OwnedMessage,
        event_id: &str,
        outcome: InboxOutcome,
        attempt: u32,
        batch: usize,
    ) {
        let location = MessageLocation::of(message);
        match outcome {
            InboxOutcome::Processed => {
                tracing::info!(event_id = %event_id, %location, attempt, batch, "event processed")
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
            event_id: Some(event_id.to_owned()),
            attempt,
            batch,
            status: ReceiptStatus::Settled(outcome),
        });
    }

    /// What follows a failed attempt: park the message when the event
    /// cannot succeed or has failed `max_attempts` times, retry otherwise.
    async fn failed(
        &self,
        message: &OwnedMessage,
        error: ProcessError,
        failures: u32,
        attempt: u32,
    ) -> Step {
        let counted = error.counts_as_attempt();
        let failures = failures + u32::from(counted);
        if !error.is_retryable() || failures >= self.config.retry.max_attempts {
            return self
                .park(message, failures, attempt, error.to_string())
                .await;
        }
        if let ProcessError::CommitUnknown { event_id, .. } = &error {
            let location = MessageLocation::of(message);
            tracing::warn!(event_id = %event_id, %location, "commit outcome unknown; not acknowledged");
        }
        Step::Retry {
            counted,
            error: error.to_string(),
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
                    batch: 1,
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
