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
//!
//! Files: [`group`] (rebalances and commits), [`lane`] (a partition's
//! queue), [`attempt`] (working on a lane's front), [`park`] (failures and
//! the dead-letter topic).

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

use crate::config::InboxConfig;
use crate::error::InboxError;
use crate::event::{InboxEvent, MessageLocation};
use crate::inbox::{Handler, Inbox, InboxOutcome, ProcessError};
use crate::ledger::{OffsetLedger, Partition};

mod attempt;
mod group;
mod lane;
mod park;

use group::{lock, GroupContext, GroupState};
use lane::{BatchLimits, Lane, Step};

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

/// An inbox-deduplicating consumer group member.
pub struct InboxConsumer {
    config: InboxConfig,
    inbox: Inbox,
    consumer: StreamConsumer<GroupContext>,
    dead_letters: FutureProducer<outbox_kafka::ClientAuth>,
    state: Arc<GroupState>,
    receipts: Option<mpsc::UnboundedSender<Receipt>>,
    /// The forwarder's key, when messages must be signed with it.
    signing: Option<outbox_kafka::Signing>,
    /// What was settled since the last summary line.
    tally: Mutex<Tally>,
}

/// Stops the metrics listener when the run ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How often the events settled are summed up in the log at `info` (each
/// event is logged at `debug`: a line per event at `info` cost about a tenth
/// of the throughput in `outbox-bench`).
const SUMMARY_INTERVAL: Duration = Duration::from_secs(10);

/// Events settled since the last summary, by outcome.
#[derive(Default)]
struct Tally {
    processed: u64,
    duplicates: u64,
    skipped: u64,
    parked: u64,
}

impl InboxConsumer {
    /// A consumer for `config`; nothing connects until [`InboxConsumer::run`].
    pub fn new(config: InboxConfig) -> Result<Self, InboxError> {
        config.validate()?;
        let opts = Inbox::pool_options(&config.mysql).map_err(InboxError::Config)?;
        let inbox = Inbox::new(
            mysql_async::Pool::new(opts),
            config.inbox.consumer_name.clone(),
        );
        let state = Arc::new(GroupState::default());
        let auth = config.kafka.client_auth()?;
        let config_signing = config.kafka.signing()?;
        let consumer = config
            .consumer_config()
            .create_with_context(GroupContext {
                state: state.clone(),
                auth: auth.for_client(),
            })
            .map_err(|e| {
                InboxError::Kafka(format!(
                    "cannot create the consumer: {}",
                    outbox_kafka::shown(&e)
                ))
            })?;
        let dead_letters = outbox_kafka::producer(
            &config.producer_config(),
            &auth,
            "the dead-letter producer",
            |auth| auth,
        )
        .map_err(InboxError::Kafka)?;
        Ok(InboxConsumer {
            config,
            inbox,
            consumer,
            dead_letters,
            state,
            receipts: None,
            signing: config_signing,
            tally: Mutex::default(),
        })
    }

    /// `message` as an event, refused without a valid signature when a
    /// signing key is set.
    fn decode(&self, message: &OwnedMessage) -> Result<InboxEvent, crate::event::DecodeError> {
        if let Some(signing) = &self.signing {
            if !signing.verifies(message) {
                return Err(crate::event::DecodeError {
                    location: MessageLocation::of(message),
                    reason: format!(
                        "no valid {} header: not published by the forwarder (or signed with \
                         another key than kafka.signing_key)",
                        outbox_core::headers::HEADER_SIGNATURE
                    ),
                });
            }
        }
        InboxEvent::decode(message)
    }

    /// What the consumer measures (see [`crate::metrics`]); also served at
    /// `metrics.listen` while it runs.
    pub fn metrics(&self) -> Arc<crate::metrics::InboxMetrics> {
        self.inbox.metrics()
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
        let _listener = match self.config.metrics.listen {
            Some(listen) => Some(AbortOnDrop(
                crate::metrics::serve(listen, self.inbox.metrics()).await?,
            )),
            None => None,
        };
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
        let mut next_summary = Instant::now() + SUMMARY_INTERVAL;
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
            if now >= next_summary {
                self.log_summary();
                next_summary = now + SUMMARY_INTERVAL;
            }
            if lanes.values().any(|lane| lane.ready(now, &batch)) {
                self.work_on_ready(&handler, &mut lanes, &batch).await;
                continue;
            }
            let next_retry = next_wake(&lanes, &batch, next_commit.min(next_summary));
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
        self.log_summary();
        self.inbox.disconnect().await;
        tracing::info!("inbox consumer stopped");
        Ok(())
    }

    /// Takes what the consumer has ready without waiting (up to a batch
    /// per partition), so rebalances and group liveness are served between
    /// batches even when there is a backlog, and a lane's batch holds what
    /// has arrived; then works on the ready partitions concurrently, each
    /// on its own connection and in its own order. Rebalances are served
    /// only inside `recv`, so no lane changes meanwhile.
    async fn work_on_ready<H: Handler>(
        &self,
        handler: &H,
        lanes: &mut BTreeMap<Partition, Lane>,
        batch: &BatchLimits,
    ) {
        for _ in 0..batch.max * lanes.len().max(1) {
            tokio::select! {
                biased;
                received = self.consumer.recv() => self.receive(received, lanes),
                _ = std::future::ready(()) => break,
            }
        }
        self.drop_revoked(lanes);
        let now = Instant::now();
        let ready: Vec<Partition> = lanes
            .iter()
            .filter(|(_, lane)| lane.ready(now, batch))
            .map(|(partition, _)| partition.clone())
            .collect();
        let mut working: Vec<(Partition, Lane)> = ready
            .into_iter()
            .filter_map(|partition| lanes.remove_entry(&partition))
            .collect();
        futures_util::future::join_all(
            working
                .iter_mut()
                .map(|(partition, lane)| self.work_on(handler, partition, lane)),
        )
        .await;
        lanes.extend(working);
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
        if lane.has_queued(message.offset()) {
            tracing::debug!(offset = message.offset(), "message already queued; ignored");
            return;
        }
        lane.queue(message.detach(), Instant::now());
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

    /// One `info` line with the events settled since the last, if any.
    fn log_summary(&self) {
        let tally = std::mem::take(&mut *lock(&self.tally));
        if tally.processed + tally.duplicates + tally.skipped + tally.parked > 0 {
            tracing::info!(
                processed = tally.processed,
                duplicates = tally.duplicates,
                skipped = tally.skipped,
                parked = tally.parked,
                "events settled since the last summary"
            );
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
        .remove(outbox_core::headers::EVENT_ID)
        .or_else(|| {
            message
                .key()
                .and_then(|k| std::str::from_utf8(k).ok())
                .map(str::to_owned)
        })
}

/// When the consumer loop next has something to do without a message: a
/// lane's retry or batch falling due, or `timers` (the next commit or
/// summary) if sooner.
fn next_wake(lanes: &BTreeMap<Partition, Lane>, batch: &BatchLimits, timers: Instant) -> Instant {
    lanes
        .values()
        .filter(|lane| !lane.waiting.is_empty())
        .filter_map(|lane| lane.retry_at.or(lane.batch_due(batch)))
        .min()
        .unwrap_or(timers)
        .min(timers)
}
