//! The forwarding loop: binlog → Kafka → checkpoint.
//!
//! A *session* is one binlog dump connection and one producer. A reader task
//! assembles committed transactions and hands them over a small bounded
//! channel; this loop sends their events, counts acks in the
//! [`AckWatermark`], and every `flush_interval` writes the watermark to the
//! checkpoint store. Nothing else writes the checkpoint.
//!
//! Backpressure: when `max_in_flight` messages are unacked the loop stops
//! taking transactions, the channel fills, and the reader stops reading.
//!
//! Failures end the session. Either way the loop first waits (bounded) for
//! the acks already under way, so the checkpoint gets as far as the broker
//! really got, then writes it. A transient failure starts a new session from
//! that watermark after a backoff; a definite one stops the forwarder. A
//! shutdown request does the same as a definite error, but exits cleanly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use mysql_async::Opts;
use outbox_checkpoint::{Checkpoint, CheckpointStore, Tails};
use outbox_core::{
    BadRowPolicy, BinlogPosition, DefiniteError, ForwarderError, GtidState, SourceIdentity,
    SourceTransaction,
};
use outbox_sink::tail::Coordinates;
use outbox_sink::{dead_letter_for_event, Acks, BrokerHealth, KafkaSink};
use outbox_source::{server, BinlogSource};
use tokio::sync::{mpsc, watch};

use crate::check::{self, Status};
use crate::checkpoints::{CheckpointShare, CheckpointWriter};
use crate::config::{ForwarderConfig, StartPosition};
use crate::ha::Leadership;
use crate::http::{self, Health};
use crate::linger::AdaptiveLinger;
use crate::metrics::Metrics;
use crate::progress::{AckWatermark, TransactionSeq};
use crate::replay::{Replay, Resumption};
use crate::resume::{self, Via};

/// Choices the operator makes on the command line rather than in the file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Resume a checkpoint written against a server with another identity.
    pub accept_new_source: bool,
}

/// Batches the reader may assemble ahead of the publisher.
const READ_AHEAD_BATCHES: usize = 4;
/// A batch closes at this many transactions or this many outbox bytes, or
/// when the binlog has nothing more ready. Handing over batches instead of
/// single transactions keeps the reader and the publisher from waking each
/// other for every row; the read-ahead memory stays under
/// `READ_AHEAD_BATCHES` × `BATCH_BYTES` (plus one transaction).
const BATCH_TRANSACTIONS: usize = 1024;
const BATCH_BYTES: usize = 4 << 20;

/// Runs until `shutdown` turns true (Ok) or a definite error (Err).
pub async fn run(
    config: ForwarderConfig,
    options: RunOptions,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), DefiniteError> {
    let store = CheckpointStore::open(&config.checkpoint.path)?;
    let candidates = resume::candidates(&config)?;
    let broker = Arc::new(BrokerHealth::default());
    // Created before the preflight: the broker takes a while to hand an
    // idempotent producer its id, and that wait overlaps the checks.
    let sink = KafkaSink::new(&config.kafka_config(), broker.clone())?;
    refuse_failed_preflight(&config, &store, &options).await?;
    let metrics = Arc::new(Metrics::default());
    let _listener = match config.metrics.listen {
        Some(listen) => Some(
            http::bind(
                listen,
                Health {
                    metrics: metrics.clone(),
                    broker: broker.clone(),
                    max_lag: Duration::from_secs(config.metrics.ready_max_lag_seconds),
                },
            )
            .await?,
        ),
        None => None,
    };
    let leadership = config
        .ha
        .as_ref()
        .map(|ha| Leadership::new(Duration::from_millis(ha.lease_ms)));
    let mut writer = CheckpointWriter::new(store, metrics.clone());
    if let (Some(ha), Some(leadership)) = (&config.ha, &leadership) {
        let share = CheckpointShare::new(&config.kafka_config(), ha, metrics.clone())?;
        writer = writer.in_group(share, leadership.clone(), &ha.instance);
    }
    let mut forwarder = Forwarder {
        decode: config.decode_config()?,
        writer: Arc::new(writer),
        candidates,
        current: 0,
        config,
        identity: None,
        replay: None,
        gtid: None,
        leadership,
        accept_new_source: options.accept_new_source,
        held_off: false,
        metrics,
        broker,
        sink: Some(sink),
    };
    match forwarder.config.ha.clone() {
        None => forwarder.serve(&mut shutdown).await.map(|_| ()),
        Some(ha) => forwarder.serve_in_group(ha, &mut shutdown).await,
    }
}

/// How [`Forwarder::serve`] stopped without an error.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stopped {
    Shutdown,
    /// The instance lost the group's lock.
    Demoted,
}

impl Forwarder {
    /// Streams from the stored checkpoint (or `checkpoint.start`) until
    /// shutdown, a definite error, or (in a group) demotion.
    pub(crate) async fn serve(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Stopped, DefiniteError> {
        let forwarder = self;
        let mut backoff = forwarder.initial_backoff();
        let mut position = loop {
            match forwarder.resolve_start().await {
                Ok(position) => break position,
                Err(ForwarderError::Definite(e)) => return Err(e),
                Err(ForwarderError::Transient(e)) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot reach MySQL to start");
                    if forwarder.pause(&mut backoff, shutdown).await {
                        return Ok(Stopped::Shutdown);
                    }
                }
            }
        };

        loop {
            let started_at = position.clone();
            let (end, watermark) = forwarder.session(position, shutdown).await;
            position = watermark;
            match end {
                SessionEnd::Shutdown => {
                    tracing::info!(checkpoint = %position, "stopped cleanly");
                    return Ok(Stopped::Shutdown);
                }
                SessionEnd::Demoted => {
                    tracing::warn!(checkpoint = %position, "stepping down: this instance no longer holds the group's lock, another one publishes now");
                    return Ok(Stopped::Demoted);
                }
                SessionEnd::Failed(ForwarderError::Definite(e)) => {
                    forwarder.metrics.error("definite");
                    tracing::error!(checkpoint = %position, "{e}");
                    return Err(e);
                }
                SessionEnd::Failed(ForwarderError::Transient(e)) => {
                    forwarder.metrics.error("transient");
                    forwarder.metrics.reconnect();
                    if position != started_at {
                        backoff = forwarder.initial_backoff();
                    }
                    tracing::warn!(error = %e, checkpoint = %position, retry_in = ?backoff, "session failed; resuming from the acked watermark");
                    if forwarder.pause(&mut backoff, shutdown).await {
                        return Ok(Stopped::Shutdown);
                    }
                }
            }
        }
    }
}

/// Runs the `check` preflight; a failed check is a definite error, except
/// an unreachable server, which the start-up retry loop waits for.
async fn refuse_failed_preflight(
    config: &ForwarderConfig,
    store: &CheckpointStore,
    options: &RunOptions,
) -> Result<(), DefiniteError> {
    // In a group, the own checkpoint is replaced by the group's before this
    // instance publishes (and decided on then).
    let checkpoint = match &config.ha {
        Some(_) => None,
        None => store.load()?,
    };
    let lines = check::preflight(config, checkpoint.as_ref(), options.accept_new_source).await;
    for line in &lines {
        match line.status {
            Status::Pass => tracing::debug!("preflight: {line}"),
            Status::Warn => tracing::warn!("preflight: {line}"),
            Status::Fail if line.unreachable => tracing::warn!("preflight: {line}"),
            Status::Fail => tracing::error!("preflight: {line}"),
        }
    }
    let failed: Vec<String> = lines
        .iter()
        .filter(|l| l.status == Status::Fail && !l.unreachable)
        .map(ToString::to_string)
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(DefiniteError::Config(format!(
            "the preflight check failed (run `outbox-forwarder check` for the full list):\n{}",
            failed.join("\n")
        )))
    }
}

enum SessionEnd {
    Shutdown,
    /// The instance lost the group's lock (or its lease ran out).
    Demoted,
    Failed(ForwarderError),
}

pub(crate) struct Forwarder {
    pub(crate) config: ForwarderConfig,
    decode: outbox_source::DecodeConfig,
    /// The only writer of checkpoints (see [`crate::checkpoints`]).
    pub(crate) writer: Arc<CheckpointWriter>,
    /// `mysql.url`: the servers to stream from, in order of preference, and
    /// the one used last (tried first by the next decision).
    pub(crate) candidates: Vec<Opts>,
    current: usize,
    /// The identity of the server the position belongs to; stored with
    /// every checkpoint.
    identity: Option<SourceIdentity>,
    /// The topic tails of this session, when `checkpoint.skip_published`.
    replay: Option<Replay>,
    /// The server's GTID state at the position the next session starts
    /// from, when it logs GTIDs: the session then streams by GTID.
    gtid: Option<GtidState>,
    /// In an `[ha]` group: this instance's lease.
    pub(crate) leadership: Option<Leadership>,
    /// `--accept-new-source`, until the first session started with it.
    accept_new_source: bool,
    /// In a group: this term's hold-off is over, so this instance may have
    /// published (and may hand over on a clean stop).
    pub(crate) held_off: bool,
    pub(crate) metrics: Arc<Metrics>,
    broker: Arc<BrokerHealth>,
    /// The producer, kept across sessions (its id is costly to obtain) and
    /// replaced only after it failed fatally.
    pub(crate) sink: Option<KafkaSink>,
}

impl Forwarder {
    fn initial_backoff(&self) -> Duration {
        Duration::from_millis(self.config.retry.initial_backoff_ms)
    }

    /// Sleeps for `backoff` (doubling it for next time); true if shutdown came first.
    async fn pause(&self, backoff: &mut Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
        let wait = *backoff;
        *backoff = (*backoff * 2).min(Duration::from_millis(self.config.retry.max_backoff_ms));
        tokio::select! {
            _ = tokio::time::sleep(wait) => false,
            _ = shutdown.wait_for(|stop| *stop) => true,
        }
    }

    /// Where the stream starts: the stored checkpoint (whose server the
    /// session start decides), or `checkpoint.start` on the server
    /// [`resume::decide`] picks, which is then written at once (in a group,
    /// recorded as the group's first start), so a restart before the first
    /// ack does not move `latest` forward.
    async fn resolve_start(&mut self) -> Result<BinlogPosition, ForwarderError> {
        if let Some(checkpoint) = self.writer.load()? {
            tracing::info!(checkpoint = %checkpoint.position, gtid = %checkpoint.gtid.as_ref().map(ToString::to_string).unwrap_or_default(), "resuming from the stored checkpoint");
            self.identity = Some(checkpoint.source);
            self.gtid = checkpoint.gtid;
            return Ok(checkpoint.position);
        }
        let decision = resume::decide(&self.candidates, self.current, None, false).await?;
        let resume::Decision {
            index,
            mut conn,
            info,
            ..
        } = decision;
        let (position, gtid) = match self.config.start_position()? {
            StartPosition::Latest => {
                server::current_position_and_gtid(&mut conn, info.flavor).await?
            }
            StartPosition::Earliest => {
                let position = server::first_position(&mut conn).await?;
                let gtid = server::gtid_state_at(&mut conn, info.flavor, &position).await?;
                (position, gtid)
            }
            StartPosition::At(position) => {
                server::ensure_available(&mut conn, &position).await?;
                let gtid = server::gtid_state_at(&mut conn, info.flavor, &position).await?;
                (position, gtid)
            }
        };
        let _ = conn.disconnect().await;
        // Nothing published yet: every topic is recorded as it is first
        // written to.
        let checkpoint =
            Checkpoint::with_tails(position.clone(), info.identity.clone(), Some(Tails::new()))
                .with_gtid(gtid.clone());
        self.writer.write_first(&checkpoint).map_err(|e| {
            ForwarderError::transient(format!("cannot record the group's first start: {e}"))
        })?;
        tracing::info!(start = %position, "no stored checkpoint; starting at checkpoint.start");
        self.current = index;
        self.identity = Some(info.identity);
        self.gtid = gtid;
        // Written against the server it starts on: nothing to override.
        self.accept_new_source = false;
        Ok(position)
    }

    /// Decides the server and the way to resume `from` (see
    /// [`crate::resume`]) and starts the binlog stream on the connection
    /// the decision used; returns it with the GTID state it was requested
    /// after, if it was requested by GTID.
    async fn start_stream(
        &mut self,
        from: &BinlogPosition,
    ) -> Result<(BinlogSource, Option<GtidState>), ForwarderError> {
        let previous = self
            .identity
            .clone()
            .expect("identity is known once started");
        let point = Checkpoint::new(from.clone(), previous.clone()).with_gtid(self.gtid.clone());
        let decision = resume::decide(
            &self.candidates,
            self.current,
            Some(&point),
            self.accept_new_source,
        )
        .await?;
        let resume::Decision {
            index,
            mut conn,
            info,
            via,
            ..
        } = decision;
        if index != self.current {
            tracing::warn!(
                candidate = index + 1,
                of = self.candidates.len(),
                "streaming from another candidate of mysql.url"
            );
            self.current = index;
        }
        let other_server = !previous.is_same_server(&info.identity);
        let by_gtid = match via.expect("decided for a checkpoint") {
            Via::Gtid(state) => {
                if other_server {
                    tracing::warn!(stored = %previous, actual = %info.identity, gtid = %state, "the checkpoint was written against another server; this one has every transaction it covers, so it is followed by GTID");
                }
                Some(state)
            }
            Via::FilePos { overridden } => {
                self.gtid = if overridden {
                    tracing::warn!(stored = %previous, actual = %info.identity, "resuming a checkpoint of another server identity as asked (--accept-new-source)");
                    server::gtid_state_at(&mut conn, info.flavor, from).await?
                } else if self.gtid.is_some() {
                    // Resumed by file:pos (GTIDs off now): the state would
                    // go stale as the position moves on.
                    None
                } else {
                    // No GTID state (an older release's checkpoint): the
                    // server tells it for its own position.
                    server::gtid_state_at(&mut conn, info.flavor, from).await?
                };
                None
            }
        };
        let identity = info.identity.clone();
        let source = BinlogSource::start_on(
            conn,
            info,
            &self.config.stream_config(),
            self.decode.clone(),
            from,
            by_gtid.as_ref(),
        )
        .await?;
        if let (Some(state), true) = (&by_gtid, other_server) {
            tracing::warn!(position = %from, gtid = %state, server = %identity, previous = %previous, "binlog stream started on another server of the topology, by GTID: following it");
        }
        // --accept-new-source was for this start only.
        self.accept_new_source = false;
        // Followed onto another server: checkpoints are its now, and so
        // are the coordinates of what this session publishes.
        self.identity = Some(identity);
        Ok((source, by_gtid))
    }

    /// Counts the acks of `acks` (and empties it); returns the failure it
    /// reports, if any.
    fn acked(&mut self, tracker: &mut AckWatermark, acks: &mut Acks) -> Option<ForwarderError> {
        // Every tag is counted, whether or not it came with its instant.
        let now = Instant::now();
        let latencies: Vec<Duration> = acks
            .tags
            .iter()
            .enumerate()
            .map(|(i, &seq)| {
                let read_at = tracker.ack(seq);
                let at = acks.acked_at.get(i).unwrap_or(&now);
                at.saturating_duration_since(read_at)
            })
            .collect();
        self.metrics.ack_latencies(&latencies);
        self.metrics.producer_latencies(&acks.in_producer);
        for (topic, delivered) in &acks.per_topic {
            self.metrics
                .acked(topic, delivered.messages, delivered.bytes as u64);
        }
        if let Some(replay) = &mut self.replay {
            replay.acked(acks, tracker.first_pending_seq());
        }
        let failed = acks.failed.take();
        acks.clear();
        failed
    }

    fn report_progress(&self, tracker: &AckWatermark) {
        self.metrics.progress(
            tracker.unacked_messages(),
            tracker.oldest_pending_read_at(),
            tracker.watermark_commit_timestamp(),
        );
    }

    /// Writes the watermark of `tracker`, with the topic tails after it.
    fn save(&mut self, tracker: &AckWatermark) -> Result<(), DefiniteError> {
        let position = tracker.watermark();
        let identity = self
            .identity
            .clone()
            .expect("identity is known once started");
        let tails = self.replay.as_mut().map(|replay| {
            replay.tails(position, tracker.gtid_state(), tracker.first_pending_seq())
        });
        let checkpoint = Checkpoint::with_tails(position.clone(), identity, tails)
            .with_gtid(tracker.gtid_state().cloned());
        self.writer.write(&checkpoint)?;
        tracing::debug!(checkpoint = %position, "checkpoint written");
        Ok(())
    }

    /// One session from `from`; returns how it ended and the acked watermark.
    async fn session(
        &mut self,
        from: BinlogPosition,
        shutdown: &mut watch::Receiver<bool>,
    ) -> (SessionEnd, BinlogPosition) {
        let mut sink = match self.sink.take().filter(|sink| !sink.is_fatal()) {
            Some(sink) => sink,
            None => match KafkaSink::new(&self.config.kafka_config(), self.broker.clone()) {
                Ok(sink) => sink,
                Err(e) => return (SessionEnd::Failed(e.into()), from),
            },
        };
        let source = tokio::select! {
            source = self.start_stream(&from) => source,
            _ = shutdown.wait_for(|stop| *stop) => Err(ForwarderError::transient("shutdown")),
        };
        if let Some(identity) = &self.identity {
            sink.set_server(identity.key());
        }
        if let Some(ha) = &self.config.ha {
            sink.set_instance(ha.instance.clone());
        }
        // The fence, asked right before each hand-over to the producer:
        // after every await of `publish` (a metadata lookup, a full queue).
        if let Some(leadership) = &self.leadership {
            let leadership = leadership.clone();
            sink.set_fence(Arc::new(move || leadership.may_publish()));
        }
        let mut role = self.leadership.as_ref().map(Leadership::subscribe);
        let source = match source {
            Ok((source, by_gtid)) => match self.read_back_tails(&from, by_gtid.as_ref()).await {
                Ok(()) => Ok(source),
                Err(e) => {
                    source.close().await;
                    Err(e.into())
                }
            },
            Err(e) => Err(e),
        };
        let source = match source {
            Ok(source) => source,
            Err(e) => {
                self.sink = Some(sink);
                let end = if *shutdown.borrow() {
                    SessionEnd::Shutdown
                } else {
                    SessionEnd::Failed(e)
                };
                return (end, from);
            }
        };
        self.metrics.set_streaming(true);
        let source_watch = self.watch_source();
        let (transactions_tx, mut transactions) = mpsc::channel(READ_AHEAD_BATCHES);
        let reader = tokio::spawn(read_transactions(
            source,
            transactions_tx,
            self.metrics.clone(),
        ));
        // Transactions of a received batch not yet published: the window is
        // checked before each one, not once per batch.
        let mut unpublished: std::collections::VecDeque<SourceTransaction> = Default::default();
        let mut batch_read_at = Instant::now();
        // The batch being published was all the binlog had: under the
        // adaptive linger, once it is handed over the producer may be told
        // to send without waiting out its linger.
        let mut batch_caught_up = false;
        let mut linger = self
            .config
            .kafka
            .adaptive_linger
            .then(AdaptiveLinger::default);

        let max_in_flight = self.config.kafka.max_in_flight;
        let mut tracker = AckWatermark::with_gtid_state(from.clone(), self.gtid.clone());
        let mut acks = Acks::default();
        let mut saved = from;
        // The first write comes one interval in, not at once.
        let flush_every = Duration::from_millis(self.config.checkpoint.flush_interval_ms);
        let mut flush =
            tokio::time::interval_at(tokio::time::Instant::now() + flush_every, flush_every);
        let mut forwarded: u64 = 0;
        let mut last_report = Instant::now();

        let end = loop {
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => break SessionEnd::Shutdown,
                _ = async {
                    match role.as_mut() {
                        Some(role) => drop(role.wait_for(|active| !*active).await),
                        None => std::future::pending().await,
                    }
                } => break SessionEnd::Demoted,
                // Every ack that is in, not one per wake-up.
                _ = sink.acks_ready(), if tracker.unacked_messages() > 0 => {
                    sink.take_acks(&mut acks);
                    if linger.as_mut().is_some_and(|l| l.acked(acks.tags.len())) {
                        sink.send_now();
                    }
                    let failed = self.acked(&mut tracker, &mut acks);
                    self.report_progress(&tracker);
                    if let Some(e) = failed {
                        break SessionEnd::Failed(e);
                    }
                }
                // Before reading more: a busy backlog must not starve checkpoint writes.
                _ = flush.tick() => {
                    if source_watch.as_ref().is_some_and(|(moved, _)| moved.load(Ordering::Relaxed)) {
                        break SessionEnd::Failed(ForwarderError::transient("the server streamed from no longer takes writes and another candidate of mysql.url does: following it"));
                    }
                    sink.probe_brokers();
                    self.learn_partition_counts(&sink).await;
                    if *tracker.watermark() != saved {
                        if let Err(e) = self.save(&tracker) {
                            break SessionEnd::Failed(e.into());
                        }
                        saved = tracker.watermark().clone();
                    }
                    if last_report.elapsed() >= Duration::from_secs(10) {
                        tracing::info!(forwarded, in_flight = tracker.unacked_messages(), checkpoint = %saved, "progress");
                        last_report = Instant::now();
                    }
                }
                _ = std::future::ready(()), if !unpublished.is_empty() && tracker.unacked_messages() < max_in_flight => {
                    // The fence: nothing more is handed to the producer
                    // once the lease is not fresh.
                    if self.leadership.as_ref().is_some_and(|l| !l.may_publish()) {
                        break SessionEnd::Demoted;
                    }
                    let transaction = unpublished.pop_front().expect("not empty");
                    tracing::debug!(end = %transaction.end, events = transaction.message_count(), "transaction read");
                    let gtid = transaction.gtid.as_ref().map(ToString::to_string);
                    let published = self.replay.as_mut().and_then(|r| r.published_in(&transaction, gtid.as_deref()));
                    let repeats = published.as_ref().map_or(0, |p| p.iter().filter(|&&p| p).count());
                    let messages = transaction.message_count() - repeats;
                    if repeats > 0 {
                        self.metrics.replay_skipped(repeats as u64);
                    }
                    let seq = tracker.push_committed(transaction.end.clone(), transaction.commit_timestamp, messages, batch_read_at);
                    if let Some(gtid) = &transaction.gtid {
                        tracker.push_gtid(seq, gtid.clone());
                    }
                    if let Err(e) = self.publish(&sink, &transaction, gtid.as_deref(), seq, published.as_deref(), &tracker).await {
                        if self.leadership.as_ref().is_some_and(|l| !l.may_publish()) {
                            break SessionEnd::Demoted;
                        }
                        break SessionEnd::Failed(e);
                    }
                    forwarded += messages as u64;
                    if let Some(linger) = linger.as_mut() {
                        linger.handed(messages, Instant::now());
                    }
                    if unpublished.is_empty() {
                        // Not when the reader has handed over more since.
                        if batch_caught_up && transactions.is_empty() && linger.as_mut().is_some_and(AdaptiveLinger::caught_up) {
                            sink.send_now();
                        }
                        self.report_progress(&tracker);
                    }
                }
                received = transactions.recv(), if unpublished.is_empty() => {
                    match received {
                        Some(Ok(batch)) => {
                            batch_read_at = batch.read_at;
                            batch_caught_up = batch.caught_up;
                            unpublished.extend(batch.transactions);
                        }
                        Some(Err(e)) => break SessionEnd::Failed(e),
                        None => break SessionEnd::Failed(ForwarderError::transient("the binlog reader stopped")),
                    }
                }
            }
        };
        reader.abort();
        if let Some((_, task)) = source_watch {
            task.abort();
        }
        self.metrics.set_streaming(false);

        // Let the acks already under way land, so the checkpoint reflects them.
        let mut end = end;
        let drain = Duration::from_millis(self.config.kafka.drain_timeout_ms);
        // Until every message sent has its report: a failed or unsent
        // message keeps its transaction under the watermark for good.
        let drained = tokio::time::timeout(drain, async {
            loop {
                let all_in = sink.outstanding() == 0;
                sink.take_acks(&mut acks);
                if let Some(e) = self.acked(&mut tracker, &mut acks) {
                    return Err(e);
                }
                if all_in {
                    return Ok(());
                }
                sink.acks_ready().await;
            }
        })
        .await;
        self.report_progress(&tracker);
        match drained {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                if matches!(end, SessionEnd::Shutdown) {
                    end = SessionEnd::Failed(e);
                }
            }
            Err(_) => {
                tracing::warn!(unacked = tracker.unacked_messages(), timeout = ?drain, "acks still missing after the drain timeout; they will be sent again from the checkpoint")
            }
        }
        // A producer with messages still queued would deliver them after the
        // next session resent them from the watermark, out of order: keep
        // it only when nothing is left (dropping it purges its queue).
        if tracker.unacked_messages() == 0 {
            self.sink = Some(sink);
        }
        self.metrics.progress(0, None, 0);
        self.gtid = tracker.gtid_state().cloned();
        let watermark = tracker.watermark().clone();
        if watermark != saved {
            if let Err(e) = self.save(&tracker) {
                return (SessionEnd::Failed(e.into()), saved);
            }
        }
        (end, watermark)
    }
}

impl Forwarder {
    /// Hands every message of `transaction` (whose GTID is `gtid`) to the
    /// producer, tagged with `seq`, but those `published` marks as already
    /// in Kafka (events, then dead letters). Under the dead-letter policy a
    /// row Kafka refuses outright becomes a dead letter instead of stopping.
    async fn publish(
        &mut self,
        sink: &KafkaSink,
        transaction: &SourceTransaction,
        gtid: Option<&str>,
        seq: TransactionSeq,
        published: Option<&[bool]>,
        tracker: &AckWatermark,
    ) -> Result<(), ForwarderError> {
        let is_published = |i: usize| published.is_some_and(|p| p[i]);
        let slot = |i: usize| gtid.map(|g| (g, i as u32));
        for (i, event) in transaction.events.iter().enumerate() {
            if is_published(i) {
                continue;
            }
            let sent = match sink.topic_for(event) {
                Ok(topic) => {
                    self.track(sink, &topic, tracker).await?;
                    sink.send_to(&topic, event, seq, slot(i)).await
                }
                Err(e) => Err(e.into()),
            };
            match sent {
                Err(ForwarderError::Definite(DefiniteError::BadRow { reason, .. }))
                    if self.decode.bad_rows == BadRowPolicy::DeadLetter =>
                {
                    tracing::warn!(event_id = %event.event_id, position = %event.origin.event_position, %reason, "event goes to the dead-letter topic");
                    self.metrics.error("dead_letter");
                    self.track(sink, sink.dead_letter_topic(), tracker).await?;
                    sink.send_dead_letter(&dead_letter_for_event(event, reason), seq, slot(i))
                        .await?
                }
                other => other?,
            }
        }
        for (i, dead) in transaction.dead_letters.iter().enumerate() {
            if is_published(transaction.events.len() + i) {
                continue;
            }
            self.metrics.error("dead_letter");
            self.track(sink, sink.dead_letter_topic(), tracker).await?;
            let index = transaction.events.len() + i;
            sink.send_dead_letter(dead, seq, slot(index)).await?;
        }
        Ok(())
    }

    /// Before the first message to `topic`: records where its partitions
    /// end, and stores that, so a crash after the message leaves the
    /// topic's tail known.
    async fn track(
        &mut self,
        sink: &KafkaSink,
        topic: &str,
        tracker: &AckWatermark,
    ) -> Result<(), ForwarderError> {
        if self.replay.as_ref().is_none_or(|r| r.knows(topic)) {
            return Ok(());
        }
        let marks = sink.watermarks(topic).await.map_err(|e| {
            ForwarderError::transient(format!(
                "cannot look up the partitions of topic {topic} before writing to it: {e}"
            ))
        })?;
        tracing::info!(
            topic,
            partitions = marks.as_ref().map_or(0, Vec::len),
            "writing to a new topic; its tail is recorded from here"
        );
        if let Some(replay) = &mut self.replay {
            replay.register(topic, marks);
        }
        self.save(tracker)?;
        Ok(())
    }

    /// While streaming from candidate `current` of several: a check, every
    /// few seconds, that it is still the one to stream from. Turns true
    /// when it stopped taking writes and another candidate does (a
    /// switchover), so the session ends and the next one follows.
    fn watch_source(&self) -> Option<(Arc<AtomicBool>, tokio::task::JoinHandle<()>)> {
        if self.candidates.len() < 2 {
            return None;
        }
        let moved = Arc::new(AtomicBool::new(false));
        let (current, candidates, flag) = (self.current, self.candidates.clone(), moved.clone());
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(SOURCE_CHECK_EVERY).await;
                if candidate_role(&candidates[current]).await == Some(server::Role::Writable) {
                    continue;
                }
                for (i, opts) in candidates.iter().enumerate() {
                    if i != current && candidate_role(opts).await == Some(server::Role::Writable) {
                        flag.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            }
        });
        Some((moved, task))
    }

    /// Looks up the partition count of topics first written to before they
    /// existed, so their tails are recorded per partition.
    async fn learn_partition_counts(&mut self, sink: &KafkaSink) {
        let Some(replay) = &self.replay else {
            return;
        };
        for topic in replay.unknown_counts() {
            if let Ok(Some(marks)) = sink.watermarks(&topic).await {
                if let Some(replay) = &mut self.replay {
                    replay.set_partition_count(&topic, marks.len());
                }
            }
        }
    }

    /// Reads back the tails the stored checkpoint records, to resume at
    /// `from` (after the GTID state `by_gtid` when the stream was requested
    /// by GTID) without publishing again what Kafka already has.
    async fn read_back_tails(
        &mut self,
        from: &BinlogPosition,
        by_gtid: Option<&GtidState>,
    ) -> Result<(), DefiniteError> {
        if !self.config.checkpoint.skip_published {
            self.replay = None;
            return Ok(());
        }
        let stored = self.writer.load()?;
        // Resumed against another server as asked (--accept-new-source):
        // the coordinates in the topics are the old server's. Once a
        // checkpoint of this server is stored, its tails are this server's.
        let other_server = stored.as_ref().is_some_and(|c| {
            !self
                .identity
                .as_ref()
                .is_some_and(|i| i.is_same_server(&c.source))
        });
        // On another server of the topology, followed by GTID: the rows are
        // recognised by their GTID slots instead of their coordinates.
        let across = match (other_server, by_gtid) {
            (true, Some(state)) => Some(state.clone()),
            _ => None,
        };
        let mut scanned = (Duration::ZERO, 0);
        let (replay, resumption) = match stored.and_then(|c| c.tails) {
            _ if other_server && across.is_none() => Replay::at_least_once(
                Default::default(),
                vec!["the checkpoint was written against another server (--accept-new-source), whose binlog coordinates the topics hold".into()],
            ),
            None => Replay::at_least_once(
                Default::default(),
                vec!["the checkpoint records no topic tails (it was written by an older release or by `checkpoint set`)".into()],
            ),
            Some(tails) if tails.is_empty() => Replay::from_scan(from, Default::default()),
            Some(tails) => {
                let requests = Replay::requests(&tails);
                let kafka = self.config.kafka_config();
                let limit = self.config.kafka.max_in_flight.saturating_mul(10).max(1_000_000);
                let server = self.identity.as_ref().map(SourceIdentity::key).unwrap_or_default();
                let by_slot = across.is_some();
                let scan = tokio::task::spawn_blocking(move || {
                    let accepted = if by_slot {
                        Coordinates::ByGtid
                    } else {
                        Coordinates::OfServer(&server)
                    };
                    outbox_sink::tail::scan(&kafka, &requests, accepted, limit, TAIL_SCAN_TIMEOUT)
                })
                .await
                .expect("the tail scan does not panic");
                scanned = (scan.took, scan.messages_read);
                self.metrics.tails_read(scan.took);
                match &across {
                    Some(state) => Replay::from_scan_by_gtid(state, scan),
                    None => Replay::from_scan(from, scan),
                }
            }
        };
        if !resumption.fallback.is_empty() {
            self.metrics.replay_fallback();
        }
        let Resumption {
            already_published,
            fallback,
        } = resumption;
        if fallback.is_empty() {
            let (took, read) = scanned;
            tracing::info!(checkpoint = %from, already_published, scan_read = read, scan_ms = took.as_millis() as u64, "resuming at {from}; {already_published} events already in Kafka will not be republished");
        } else {
            tracing::warn!(checkpoint = %from, "resuming at {from}; every event after it is published again, as the topic tails cannot be trusted: {}", fallback.join("; "));
        }
        self.replay = Some(replay);
        Ok(())
    }
}

/// How often a session streaming from one of several candidates checks that
/// it is still the writable one.
const SOURCE_CHECK_EVERY: Duration = Duration::from_secs(3);

/// The role of the server at `opts`, `None` if it does not answer.
async fn candidate_role(opts: &Opts) -> Option<server::Role> {
    let mut conn = server::connect(opts).await.ok()?;
    let role = server::role(&mut conn).await.ok();
    let _ = conn.disconnect().await;
    role
}

/// How long reading back the topic tails may take before the forwarder
/// gives up on it and publishes everything after the checkpoint again.
const TAIL_SCAN_TIMEOUT: Duration = Duration::from_secs(60);

/// Transactions the reader hands over together.
struct ReadBatch {
    /// When the first of them was read.
    read_at: Instant,
    transactions: Vec<SourceTransaction>,
    /// The binlog had nothing more ready after them.
    caught_up: bool,
}

/// The reader task: hands over batches of transactions until the first
/// error, which it hands over too (after the transactions read before it).
/// It tells `metrics` whether it has read all the binlog there is, for the
/// lag.
async fn read_transactions(
    mut source: BinlogSource,
    out: mpsc::Sender<Result<ReadBatch, ForwarderError>>,
    metrics: Arc<Metrics>,
) {
    loop {
        // Wait for one transaction, then take what is ready without waiting.
        // Dropping a pending read loses nothing: the stream and the
        // transaction being assembled live in `source`.
        let mut next = Some(source.next_transaction().await);
        let read_at = Instant::now();
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut failure = None;
        let mut caught_up = false;
        while let Some(result) = next {
            match result {
                Ok(transaction) => {
                    bytes += transaction
                        .events
                        .iter()
                        .map(|e| e.buffered_len())
                        .sum::<usize>();
                    batch.push(transaction);
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
            if batch.len() >= BATCH_TRANSACTIONS || bytes >= BATCH_BYTES {
                break;
            }
            next = source.next_transaction().now_or_never();
            caught_up = next.is_none();
        }
        metrics.set_caught_up(caught_up);
        let batch = ReadBatch {
            read_at,
            transactions: batch,
            caught_up,
        };
        if !batch.transactions.is_empty() && out.send(Ok(batch)).await.is_err() {
            break;
        }
        if let Some(e) = failure {
            let _ = out.send(Err(e)).await;
            break;
        }
    }
    source.close().await;
}
