//! One session: the select loop that hands transactions to the producer
//! within the in-flight window, counts acks into the watermark and writes
//! it every flush interval; then the drain, so the last checkpoint gets as
//! far as the broker really got.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_checkpoint::Checkpoint;
use outbox_core::{
    BinlogPosition, DefiniteError, ForwarderError, SourceIdentity, SourceTransaction,
};
use outbox_sink::{Acks, KafkaSink};
use outbox_source::BinlogSource;
use tokio::sync::{mpsc, watch};

use super::reader::{read_transactions, ReadBatch, READ_AHEAD_BATCHES};
use super::source::{Resume, Started};
use super::{Forwarder, SessionEnd};
use crate::ha::Leadership;
use crate::linger::AdaptiveLinger;
use crate::progress::AckWatermark;
use crate::replicas::ReplicaGate;
use crate::shutdown::Shutdown;

impl Forwarder {
    /// Counts the acks of `acks` (and empties it); returns the failure it
    /// reports, if any.
    pub(super) fn acked(
        &mut self,
        tracker: &mut AckWatermark,
        acks: &mut Acks,
    ) -> Option<ForwarderError> {
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

    pub(super) fn report_progress(&self, tracker: &AckWatermark) {
        self.metrics.progress(
            tracker.unacked_messages(),
            tracker.oldest_pending_read_at(),
            tracker.watermark_commit_timestamp(),
        );
    }

    /// Writes the watermark of `progress`, with the topic tails after it;
    /// `stopping` at a clean stop (every message sent acked), when the
    /// checkpoint says so if nothing read back is still ahead of it either.
    pub(super) fn save(
        &mut self,
        progress: &mut Progress,
        stopping: bool,
    ) -> Result<(), DefiniteError> {
        let tracker = &progress.tracker;
        let resume = &mut progress.resume;
        let position = tracker.watermark();
        let identity = match &progress.switched_from {
            Some((at, previous)) if at == position => previous.clone(),
            _ => resume.identity.clone(),
        };
        let tails = self.replay.as_mut().map(|replay| {
            replay.tails(position, tracker.gtid_state(), tracker.first_pending_seq())
        });
        // Known from the stream, else from the checkpoint it started at.
        let file_created = match (tracker.watermark_file_created_at(), &resume.file_created) {
            (0, Some((file, created))) if *file == position.file => *created,
            (read, _) => read,
        };
        let mut checkpoint = Checkpoint::with_tails(position.clone(), identity, tails)
            .with_gtid(tracker.gtid_state().cloned())
            .committed_at(tracker.watermark_commit_timestamp())
            .file_created_at(file_created)
            .streaming_since(resume.streaming_since)
            .tables_since(resume.tables_since.clone());
        // An instance whose lease lapsed promises nothing: another may
        // have published since.
        checkpoint.clean = stopping
            && tracker.unacked_messages() == 0
            && self.leadership.as_ref().is_none_or(|l| l.may_publish())
            && self
                .replay
                .as_ref()
                .is_some_and(crate::replay::Replay::holds_nothing_ahead);
        self.writer.write(&checkpoint)?;
        resume.file_created = checkpoint
            .file_created_at
            .map(|t| (position.file.clone(), t));
        resume.position = position.clone();
        resume.gtid = tracker.gtid_state().cloned();
        if checkpoint.clean {
            tracing::info!(checkpoint = %position, "clean stop: the next start need not read the topics back");
        }
        self.saved.send_replace(Some(checkpoint));
        tracing::debug!(checkpoint = %position, "checkpoint written");
        Ok(())
    }

    /// One session from `from`; returns how it ended and where the next
    /// one resumes: the acked watermark.
    pub(super) async fn session(
        &mut self,
        mut from: Resume,
        shutdown: &mut Shutdown,
    ) -> (SessionEnd, Resume) {
        let (sink, started) = match self.open(&mut from, shutdown).await {
            Ok(opened) => opened,
            Err(end) => return (end, from),
        };
        let mut progress = Progress {
            tracker: AckWatermark::with_gtid_state(from.position.clone(), from.gtid.clone()),
            acks: Acks::default(),
            resume: from,
            switched_from: started.switched_from,
        };
        let end = self
            .stream(&sink, started.source, &mut progress, shutdown)
            .await;
        self.drain(sink, progress, end).await
    }

    /// The session's producer (kept from the last session unless it failed
    /// fatally) and binlog stream, with the topic tails read back; `Err`
    /// with how the session ends if either cannot be had.
    async fn open(
        &mut self,
        from: &mut Resume,
        shutdown: &mut Shutdown,
    ) -> Result<(KafkaSink, Started), SessionEnd> {
        let mut sink = match self.sink.take().filter(|sink| !sink.is_fatal()) {
            Some(sink) => sink,
            None => KafkaSink::new(&self.config.kafka_config(), self.broker.clone())
                .map_err(|e| SessionEnd::Failed(e.into()))?,
        };
        let source = tokio::select! {
            source = self.start_stream(from) => source,
            _ = shutdown.requested() => Err(ForwarderError::transient("shutdown")),
        };
        sink.set_server(from.identity.key());
        if let Some(ha) = &self.config.ha {
            sink.set_instance(ha.instance.clone());
        }
        // The fence, asked right before each hand-over to the producer:
        // after every await of `publish` (a metadata lookup, a full queue).
        if let Some(leadership) = &self.leadership {
            let leadership = leadership.clone();
            sink.set_fence(Arc::new(move || leadership.may_publish()));
        }
        let source = match source {
            Ok(started) => match self
                .read_back_tails(&from.position, &from.identity, started.by_gtid.as_ref())
                .await
            {
                Ok(()) => Ok(started),
                Err(e) => {
                    started.source.close().await;
                    Err(e.into())
                }
            },
            Err(e) => Err(e),
        };
        match source {
            Ok(source) => Ok((sink, source)),
            Err(e) => {
                self.sink = Some(sink);
                Err(if shutdown.is_requested() {
                    SessionEnd::Shutdown
                } else {
                    SessionEnd::Failed(e)
                })
            }
        }
    }

    /// The select loop: until shutdown, demotion or a failure, takes the
    /// reader's batches, hands their transactions to the producer within
    /// the in-flight window, counts acks and writes the watermark every
    /// flush interval.
    async fn stream(
        &mut self,
        sink: &KafkaSink,
        source: BinlogSource,
        progress: &mut Progress,
        shutdown: &mut Shutdown,
    ) -> SessionEnd {
        let mut flow = match self.new_flow(&progress.resume) {
            Ok(flow) => flow,
            Err(end) => {
                source.close().await;
                return end;
            }
        };
        self.metrics.set_streaming(true);
        let source_watch = self.watch_source();
        let (transactions_tx, mut transactions) = mpsc::channel(READ_AHEAD_BATCHES);
        let (failed_tx, mut source_failed) = watch::channel(false);
        let reader = tokio::spawn(read_transactions(
            source,
            transactions_tx,
            self.metrics.clone(),
            failed_tx,
        ));
        let mut role = self.leadership.as_ref().map(Leadership::subscribe);
        let mut released = flow.gate.as_ref().map(ReplicaGate::subscribe);
        let max_in_flight = self.config.kafka.max_in_flight;
        // The first write comes one interval in, not at once.
        let flush_every = Duration::from_millis(self.config.checkpoint.flush_interval_ms);
        let mut flush =
            tokio::time::interval_at(tokio::time::Instant::now() + flush_every, flush_every);
        let moved = source_watch.as_ref().map(|(moved, _)| moved.clone());

        let end = loop {
            let ended = tokio::select! {
                biased;
                _ = shutdown.requested() => Some(SessionEnd::Shutdown),
                _ = demoted(role.as_mut()) => Some(SessionEnd::Demoted),
                // Every ack that is in, not one per wake-up.
                _ = sink.acks_ready(), if progress.tracker.unacked_messages() > 0 => {
                    self.on_acks(sink, progress, &mut flow)
                }
                // Before reading more: a busy backlog must not starve checkpoint writes.
                _ = flush.tick() => self.on_flush_tick(sink, progress, &mut flow, moved.as_deref()).await,
                _ = std::future::ready(()), if !flow.unpublished.is_empty() && progress.tracker.unacked_messages() < max_in_flight && flow.front_released() => {
                    self.publish_next(sink, progress, &mut flow, &transactions).await
                }
                received = transactions.recv(), if flow.takes_more() => flow.receive(received),
                // More released by the replicas: the front may go now.
                _ = more_released(released.as_mut()) => None,
                // The stream failed while transactions wait for the replicas:
                // they go unpublished, to be read again from the next server
                // (a replica's sequence numbers may soon be a new primary's).
                _ = source_failed.wait_for(|failed| *failed), if !flow.front_released() => {
                    Some(flow.drop_held(&mut transactions).await)
                }
            };
            if let Some(end) = ended {
                break end;
            }
            flow.note_hold();
        };
        reader.abort();
        if let Some((_, task)) = source_watch {
            task.abort();
        }
        self.metrics.set_streaming(false);
        end
    }

    /// The select loop's state for a new session, with the replica gate
    /// under `publish_after_replicas` (which needs a GTID state to start
    /// from).
    fn new_flow(&self, resume: &Resume) -> Result<Flow, SessionEnd> {
        let need = self.config.mysql.publish_after_replicas;
        if need > 0 && resume.gtid.is_none() {
            return Err(SessionEnd::Failed(
                DefiniteError::Config(
                    "mysql.publish_after_replicas needs the stream to start from a GTID state, to \
                     ask the replicas which transactions they have: a server that logs GTIDs \
                     (on MySQL: gtid_mode=ON), and on MySQL a checkpoint with a GTID state or \
                     checkpoint.start = \"latest\""
                        .into(),
                )
                .into(),
            ));
        }
        Ok(Flow {
            unpublished: VecDeque::new(),
            batch_read_at: Instant::now(),
            batch_caught_up: false,
            linger: self
                .config
                .kafka
                .adaptive_linger
                .then(AdaptiveLinger::default),
            forwarded: 0,
            last_report: Instant::now(),
            gate: (need > 0).then(|| {
                ReplicaGate::start(need, &self.candidates, self.current, self.metrics.clone())
            }),
            numbers: VecDeque::new(),
            held_bytes: 0,
        })
    }

    /// Acks are in: counts them into the watermark.
    fn on_acks(
        &mut self,
        sink: &KafkaSink,
        progress: &mut Progress,
        flow: &mut Flow,
    ) -> Option<SessionEnd> {
        sink.take_acks(&mut progress.acks);
        if flow
            .linger
            .as_mut()
            .is_some_and(|l| l.acked(progress.acks.tags.len()))
        {
            sink.send_now();
        }
        let failed = self.acked(&mut progress.tracker, &mut progress.acks);
        self.report_progress(&progress.tracker);
        failed.map(SessionEnd::Failed)
    }

    /// Every flush interval: follows a source that stopped taking writes,
    /// checks on the brokers, writes the checkpoint if it moved.
    async fn on_flush_tick(
        &mut self,
        sink: &KafkaSink,
        progress: &mut Progress,
        flow: &mut Flow,
        source_moved: Option<&AtomicBool>,
    ) -> Option<SessionEnd> {
        if source_moved.is_some_and(|moved| moved.load(Ordering::Relaxed)) {
            return Some(SessionEnd::Failed(ForwarderError::transient("another candidate of mysql.url takes writes and the server streamed from does not: following it")));
        }
        sink.probe_brokers();
        self.learn_partition_counts(sink).await;
        if let Err(e) = self.save_if_moved(progress) {
            return Some(SessionEnd::Failed(e.into()));
        }
        if flow.last_report.elapsed() >= Duration::from_secs(10) {
            tracing::info!(forwarded = flow.forwarded, in_flight = progress.tracker.unacked_messages(), checkpoint = %progress.resume.position, "progress");
            flow.last_report = Instant::now();
        }
        None
    }

    /// Room in the window: hands the next transaction over.
    async fn publish_next(
        &mut self,
        sink: &KafkaSink,
        progress: &mut Progress,
        flow: &mut Flow,
        transactions: &mpsc::Receiver<Result<ReadBatch, ForwarderError>>,
    ) -> Option<SessionEnd> {
        let transaction = flow.unpublished.pop_front().expect("not empty");
        // With a gate, batches are taken ahead: each transaction keeps the
        // read time of its own batch.
        let read_at = match flow.numbers.pop_front() {
            Some((_, read_at)) => {
                flow.held_bytes -= outbox_bytes(&transaction);
                read_at
            }
            None => flow.batch_read_at,
        };
        match self.hand_over(sink, transaction, read_at, progress).await {
            Ok(messages) => {
                flow.forwarded += messages as u64;
                if let Some(linger) = flow.linger.as_mut() {
                    linger.handed(messages, Instant::now());
                }
            }
            Err(end) => return Some(end),
        }
        if flow.unpublished.is_empty() {
            // Not when the reader has handed over more since.
            if flow.batch_caught_up
                && transactions.is_empty()
                && flow.linger.as_mut().is_some_and(AdaptiveLinger::caught_up)
            {
                sink.send_now();
            }
            self.report_progress(&progress.tracker);
        }
        None
    }

    /// Hands one transaction to the producer (but what Kafka already holds),
    /// under the fence; returns how many messages it sent, or how the
    /// session ends.
    async fn hand_over(
        &mut self,
        sink: &KafkaSink,
        transaction: SourceTransaction,
        read_at: Instant,
        progress: &mut Progress,
    ) -> Result<usize, SessionEnd> {
        let tracker = &mut progress.tracker;
        // The fence: nothing more is handed to the producer once the lease
        // is not fresh.
        if self.leadership.as_ref().is_some_and(|l| !l.may_publish()) {
            return Err(SessionEnd::Demoted);
        }
        tracing::debug!(end = %transaction.end, events = transaction.message_count(), "transaction read");
        if transaction.end.file != self.read_file {
            self.read_file.clone_from(&transaction.end.file);
            self.metrics.on_call.set_read_file(&self.read_file);
        }
        let gtid = transaction.gtid.as_ref().map(ToString::to_string);
        let published = self
            .replay
            .as_mut()
            .and_then(|r| r.published_in(&transaction, gtid.as_deref()));
        let repeats = published
            .as_ref()
            .map_or(0, |p| p.iter().filter(|&&p| p).count());
        let messages = transaction.message_count() - repeats;
        if repeats > 0 {
            tracing::debug!(end = %transaction.end, skipped = repeats, "already in Kafka: not published again");
            self.metrics.replay_skipped(repeats as u64);
        }
        let seq = tracker.push_committed(
            transaction.end.clone(),
            (transaction.commit_timestamp, transaction.file_created_at),
            messages,
            read_at,
        );
        if let Some(gtid) = &transaction.gtid {
            tracker.push_gtid(seq, gtid.clone());
        }
        let sent = self
            .publish(
                sink,
                &transaction,
                gtid.as_deref(),
                seq,
                published.as_deref(),
                progress,
            )
            .await;
        match sent {
            Ok(()) => Ok(messages),
            Err(_) if self.leadership.as_ref().is_some_and(|l| !l.may_publish()) => {
                Err(SessionEnd::Demoted)
            }
            Err(e) => Err(SessionEnd::Failed(e)),
        }
    }

    /// Writes the watermark if it moved since the last write.
    fn save_if_moved(&mut self, progress: &mut Progress) -> Result<(), DefiniteError> {
        if progress.tracker.watermark() != &progress.resume.position {
            self.save(progress, false)?;
        }
        Ok(())
    }

    /// Lets the acks already under way land (bounded), so the checkpoint
    /// reflects them, writes it, and keeps the producer for the next
    /// session if nothing is left in it; returns how the session ended and
    /// where the next one resumes.
    async fn drain(
        &mut self,
        sink: KafkaSink,
        mut progress: Progress,
        mut end: SessionEnd,
    ) -> (SessionEnd, Resume) {
        let drain = Duration::from_millis(self.config.kafka.drain_timeout_ms);
        // Until every message sent has its report: a failed or unsent
        // message keeps its transaction under the watermark for good.
        let drained = tokio::time::timeout(drain, async {
            loop {
                let all_in = sink.outstanding() == 0;
                sink.take_acks(&mut progress.acks);
                if let Some(e) = self.acked(&mut progress.tracker, &mut progress.acks) {
                    return Err(e);
                }
                if all_in {
                    return Ok(());
                }
                sink.acks_ready().await;
            }
        })
        .await;
        let tracker = &progress.tracker;
        self.report_progress(tracker);
        let stopping = matches!(end, SessionEnd::Shutdown) && matches!(drained, Ok(Ok(())));
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
        if *tracker.watermark() != progress.resume.position || stopping {
            if let Err(e) = self.save(&mut progress, stopping) {
                // The resume value is as of the last checkpoint written.
                return (SessionEnd::Failed(e.into()), progress.resume);
            }
        }
        // Nothing new acked: the GTID state counted is where the next
        // session starts all the same.
        progress.resume.gtid = progress.tracker.gtid_state().cloned();
        (end, progress.resume)
    }
}

/// What a session has counted: the ack watermark, the acks taken and not
/// yet counted, and the checkpoint last written.
pub(super) struct Progress {
    pub(super) tracker: AckWatermark,
    acks: Acks,
    /// As of the last checkpoint written (at the session's start, where it
    /// started from): its position is the watermark last written.
    resume: Resume,
    /// On another server than the checkpoint's: the position the session
    /// started at and the previous server, which a checkpoint still there
    /// names.
    switched_from: Option<(BinlogPosition, SourceIdentity)>,
}

/// What a session's select loop carries from one wake-up to the next.
struct Flow {
    /// Transactions of a received batch not yet published: the window is
    /// checked before each one, not once per batch.
    unpublished: VecDeque<SourceTransaction>,
    batch_read_at: Instant,
    /// The batch being published was all the binlog had: under the
    /// adaptive linger, once it is handed over the producer may be told
    /// to send without waiting out its linger.
    batch_caught_up: bool,
    linger: Option<AdaptiveLinger>,
    forwarded: u64,
    last_report: Instant,
    /// Under `mysql.publish_after_replicas`: what the replicas have applied.
    gate: Option<ReplicaGate>,
    /// With a gate: the number of each unpublished transaction, and when
    /// it was read.
    numbers: VecDeque<(u64, Instant)>,
    /// With a gate: the outbox bytes of the unpublished transactions.
    held_bytes: usize,
}

impl Flow {
    /// A batch from the reader, or how the session ends without one.
    fn receive(
        &mut self,
        received: Option<Result<ReadBatch, ForwarderError>>,
    ) -> Option<SessionEnd> {
        match received {
            Some(Ok(batch)) => {
                if let Some(gate) = &mut self.gate {
                    for transaction in &batch.transactions {
                        let number = gate.number(transaction.gtid.as_ref());
                        self.numbers.push_back((number, batch.read_at));
                        self.held_bytes += outbox_bytes(transaction);
                    }
                    gate.ask();
                }
                self.batch_read_at = batch.read_at;
                self.batch_caught_up = batch.caught_up;
                self.unpublished.extend(batch.transactions);
                None
            }
            Some(Err(e)) => Some(SessionEnd::Failed(e)),
            None => Some(SessionEnd::Failed(ForwarderError::transient(
                "the binlog reader stopped",
            ))),
        }
    }
}

impl Flow {
    /// Whether to take the reader's next batch: once the last one is
    /// published; with a replica gate, also while transactions wait for the
    /// replicas (up to [`HOLD_AHEAD_BYTES`]), so that the replicas are asked
    /// for the newest transaction as soon as it is read rather than one
    /// batch after another.
    fn takes_more(&self) -> bool {
        self.unpublished.is_empty()
            || (self.gate.is_some()
                && self.held_bytes < HOLD_AHEAD_BYTES
                && self.unpublished.len() < HOLD_AHEAD_TRANSACTIONS)
    }

    /// The stream failed while transactions wait for the replicas: they go
    /// unpublished, to be read again from the next server (a replica's
    /// sequence numbers may soon be a new primary's), and the session ends
    /// with the reader's own error, which follows its last batch.
    async fn drop_held(
        &mut self,
        transactions: &mut mpsc::Receiver<Result<ReadBatch, ForwarderError>>,
    ) -> SessionEnd {
        let mut dropped = self.unpublished.len();
        self.unpublished.clear();
        self.numbers.clear();
        self.held_bytes = 0;
        let error = loop {
            match transactions.recv().await {
                Some(Ok(batch)) => dropped += batch.transactions.len(),
                Some(Err(e)) => break e,
                None => break ForwarderError::transient("the binlog reader stopped"),
            }
        };
        tracing::warn!(
            dropped,
            "the binlog stream failed while transactions waited for mysql.publish_after_replicas: \
             none of them was published; they are read again where the next session starts"
        );
        SessionEnd::Failed(error)
    }

    /// Whether the front transaction has passed the replica gate (always,
    /// without one).
    fn front_released(&self) -> bool {
        match (&self.gate, self.numbers.front()) {
            (Some(gate), Some(&(number, _))) => gate.releases(number),
            _ => true,
        }
    }

    /// Tells the gate whether the front transaction waits for it.
    fn note_hold(&mut self) {
        if let Some(gate) = &mut self.gate {
            let held = self
                .numbers
                .front()
                .copied()
                .filter(|&(number, _)| !gate.releases(number));
            gate.note_front(held);
        }
    }
}

/// How many outbox bytes, and transactions (most touch no outbox table),
/// may wait for the replicas before the reader is left to wait too.
const HOLD_AHEAD_BYTES: usize = 16 << 20;
const HOLD_AHEAD_TRANSACTIONS: usize = 65_536;

/// The outbox bytes a transaction holds in memory.
fn outbox_bytes(transaction: &SourceTransaction) -> usize {
    transaction
        .events
        .iter()
        .map(|e| e.buffered_len())
        .sum::<usize>()
        + transaction
            .dead_letters
            .iter()
            .map(|d| d.row.len())
            .sum::<usize>()
}

/// Completes when the replica gate releases more; never without a gate.
async fn more_released(released: Option<&mut watch::Receiver<u64>>) {
    match released {
        Some(released) => {
            if released.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Completes when this instance loses the group's lock; never outside a
/// group.
async fn demoted(role: Option<&mut watch::Receiver<bool>>) {
    match role {
        Some(role) => drop(role.wait_for(|active| !*active).await),
        None => std::future::pending().await,
    }
}
