//! One session: the select loop that hands transactions to the publisher
//! within the in-flight window, counts acks into the watermark and writes
//! it every flush interval; then the drain, so the last checkpoint gets as
//! far as the broker really got.
//!
//! A [`Session`] owns what lives as long as one binlog stream: its
//! publisher, its progress (the ack watermark and the resume value of the
//! last checkpoint written), what it need not publish again, and its flow.
//! What outlives it (the checkpoint writer, the metrics, the lease) it
//! takes from the forwarder as [`Lasting`]. It knows neither MySQL nor
//! Kafka: transactions come in on a channel ([`Feed`]) and messages go to
//! a [`Publisher`], so its unit tests (`tests.rs`) run without servers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_checkpoint::Checkpoint;
use outbox_core::Acks;
use outbox_core::{DefiniteError, ForwarderError, SourceTransaction};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::flow::{more_released, Flow};
use super::point::ResumePoint;
use super::publisher::Publisher;
use super::reader::ReadBatch;
use super::SessionEnd;
use crate::checkpoints::CheckpointWriter;
use crate::config::ForwarderConfig;
use crate::group::Leadership;
use crate::metrics::Metrics;
use crate::pipeline::linger::AdaptiveLinger;
use crate::pipeline::progress::AckWatermark;
use crate::pipeline::replay::Replay;
use crate::replicas::ReplicaGate;
use crate::shutdown::Shutdown;

/// Transactions handed over in one turn of the session's loop, before it
/// looks again at shutdown, the lease, acks and the flush tick. In a
/// catch-up a turn per transaction costs about as much as handing it over;
/// every transaction still passes the fence on its own.
const HAND_OVER_BURST: usize = 32;

/// What a session works with that outlives it, from the forwarder.
#[derive(Clone)]
pub(super) struct Lasting {
    /// The only writer of checkpoints (see [`crate::checkpoints`]).
    pub(super) writer: Arc<CheckpointWriter>,
    /// Told of every checkpoint written: what `[retention]` proves rows
    /// published by.
    pub(super) saved: watch::Sender<Option<Checkpoint>>,
    pub(super) metrics: Arc<Metrics>,
    /// In an `[ha]` group: this instance's lease, asked before every
    /// hand-over (the fence).
    pub(super) leadership: Option<Leadership>,
    pub(super) limits: Limits,
}

/// The settings the loop runs by.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// `kafka.max_in_flight`: unacked messages before the loop stops
    /// taking transactions.
    pub(super) max_in_flight: usize,
    /// `checkpoint.flush_interval_ms`.
    pub(super) flush_every: Duration,
    /// `kafka.drain_timeout_ms`: how long the drain waits for acks.
    pub(super) drain_timeout: Duration,
    /// `kafka.adaptive_linger`.
    pub(super) adaptive_linger: bool,
    /// `bad_rows = "dead_letter"`: a row Kafka refuses becomes a dead
    /// letter instead of stopping the forwarder.
    pub(super) dead_letter: bool,
}

impl Limits {
    pub(super) fn of(config: &ForwarderConfig, decode: &outbox_source::DecodeConfig) -> Self {
        Self {
            max_in_flight: config.kafka.max_in_flight,
            flush_every: Duration::from_millis(config.checkpoint.flush_interval_ms),
            drain_timeout: Duration::from_millis(config.kafka.drain_timeout_ms),
            adaptive_linger: config.kafka.adaptive_linger,
            dead_letter: decode.bad_rows == outbox_core::BadRowPolicy::DeadLetter,
        }
    }
}

/// What feeds a session's loop.
pub(super) struct Feed {
    /// The reader's batches of committed transactions, then its error.
    pub(super) transactions: mpsc::Receiver<Result<ReadBatch, ForwarderError>>,
    /// Turns true as soon as the reader fails (it may be blocked handing
    /// over a batch while the loop holds transactions for the replicas).
    pub(super) source_failed: watch::Receiver<bool>,
    /// Turns true when another candidate of `mysql.url` takes writes and
    /// the server streamed from does not.
    pub(super) source_moved: Option<Arc<AtomicBool>>,
    /// Under `mysql.publish_after_replicas`: what the replicas have applied.
    pub(super) gate: Option<ReplicaGate>,
    /// The tasks behind the feed (the reader, the source watch), stopped
    /// when the loop ends.
    pub(super) tasks: Vec<JoinHandle<()>>,
}

/// How a session ended, and what it hands back.
pub(super) struct Ended<P> {
    pub(super) end: SessionEnd,
    /// Where the next session resumes: as of the last checkpoint written.
    pub(super) resume: ResumePoint,
    /// The publisher, when nothing is left in it: one with messages still
    /// queued would deliver them after the next session sent them again
    /// from the watermark, out of order (dropping it purges its queue).
    pub(super) publisher: Option<P>,
}

/// One session (see the module doc).
pub(super) struct Session<P> {
    publisher: P,
    lasting: Lasting,
    progress: Progress,
    /// The topic tails read back, when `checkpoint.skip_published`: what
    /// is already in Kafka and is not published again.
    pub(super) replay: Option<Replay>,
    /// The binlog file the last transaction read ended in.
    read_file: String,
    /// The GTID of the transaction being handed over, as text (its
    /// messages' slot): one buffer for every transaction.
    gtid_text: String,
}

/// What a session has counted: the ack watermark, the acks taken and not
/// yet counted, and the resume value of the last checkpoint written.
struct Progress {
    tracker: AckWatermark,
    acks: Acks,
    /// As of the last checkpoint written (at the session's start, where it
    /// started from): its position is the watermark last written.
    resume: ResumePoint,
}

impl<P: Publisher> Session<P> {
    /// A session that publishes through `publisher` from `from`.
    pub(super) fn new(
        publisher: P,
        lasting: Lasting,
        from: ResumePoint,
        replay: Option<Replay>,
    ) -> Self {
        Self {
            publisher,
            lasting,
            progress: Progress {
                tracker: AckWatermark::with_gtid_state(from.position().clone(), from.gtid.clone()),
                acks: Acks::default(),
                resume: from,
            },
            replay,
            read_file: String::new(),
            gtid_text: String::new(),
        }
    }

    /// Runs the loop on `feed` until shutdown, demotion or a failure, then
    /// drains.
    pub(super) async fn run(mut self, feed: Feed, shutdown: &mut Shutdown) -> Ended<P> {
        let Feed {
            mut transactions,
            mut source_failed,
            source_moved,
            gate,
            tasks,
        } = feed;
        let mut flow = Flow::new(gate, self.lasting.limits.adaptive_linger);
        self.lasting.metrics.set_streaming(true);
        let end = self
            .stream(
                &mut flow,
                &mut transactions,
                &mut source_failed,
                source_moved.as_deref(),
                shutdown,
            )
            .await;
        for task in tasks {
            task.abort();
        }
        drop(flow);
        self.lasting.metrics.set_streaming(false);
        self.drain(end).await
    }

    /// The select loop: takes the reader's batches, hands their
    /// transactions to the publisher within the in-flight window, counts
    /// acks and writes the watermark every flush interval.
    async fn stream(
        &mut self,
        flow: &mut Flow,
        transactions: &mut mpsc::Receiver<Result<ReadBatch, ForwarderError>>,
        source_failed: &mut watch::Receiver<bool>,
        source_moved: Option<&AtomicBool>,
        shutdown: &mut Shutdown,
    ) -> SessionEnd {
        let mut role = self.lasting.leadership.as_ref().map(Leadership::subscribe);
        let mut released = flow.gate.as_ref().map(|g| g.gate().subscribe());
        // The first write comes one interval in, not at once.
        let flush_every = self.lasting.limits.flush_every;
        let mut flush =
            tokio::time::interval_at(tokio::time::Instant::now() + flush_every, flush_every);
        loop {
            let ended = tokio::select! {
                biased;
                _ = shutdown.requested() => Some(SessionEnd::Shutdown),
                _ = demoted(role.as_mut()) => Some(SessionEnd::Demoted),
                // Every ack that is in, not one per wake-up.
                _ = self.publisher.acks_ready(), if self.progress.tracker.unacked_messages() > 0 => {
                    self.on_acks(flow)
                }
                // Before reading more: a busy backlog must not starve checkpoint writes.
                _ = flush.tick() => self.on_flush_tick(flow, source_moved).await,
                _ = std::future::ready(()), if self.may_hand_over(flow) => {
                    self.publish_next(flow, transactions, shutdown).await
                }
                received = transactions.recv(), if flow.takes_more() => flow.receive(received),
                // More released by the replicas: the front may go now.
                _ = more_released(released.as_mut()) => None,
                // The stream failed while transactions wait for the replicas:
                // they go unpublished, to be read again from the next server
                // (a replica's sequence numbers may soon be a new primary's).
                _ = source_failed.wait_for(|failed| *failed), if !flow.front_released() => {
                    Some(flow.drop_held(transactions).await)
                }
            };
            if let Some(end) = ended {
                return end;
            }
            flow.note_hold();
        }
    }

    /// Acks are in: counts them into the watermark.
    fn on_acks(&mut self, flow: &mut Flow) -> Option<SessionEnd> {
        self.publisher.take_acks(&mut self.progress.acks);
        if flow
            .linger
            .as_mut()
            .is_some_and(|l| l.acked(self.progress.acks.tags.len()))
        {
            self.publisher.send_now();
        }
        let failed = self.acked();
        self.report_progress();
        failed.map(SessionEnd::Failed)
    }

    /// Every flush interval: follows a source that stopped taking writes,
    /// checks on the brokers, writes the checkpoint if it moved.
    async fn on_flush_tick(
        &mut self,
        flow: &mut Flow,
        source_moved: Option<&AtomicBool>,
    ) -> Option<SessionEnd> {
        if source_moved.is_some_and(|moved| moved.load(Ordering::Relaxed)) {
            return Some(SessionEnd::Failed(ForwarderError::transient("another candidate of mysql.url takes writes and the server streamed from does not: following it")));
        }
        self.publisher.probe_brokers();
        self.learn_partition_counts().await;
        if let Err(e) = self.save_if_moved() {
            return Some(SessionEnd::Failed(e.into()));
        }
        if flow.last_report.elapsed() >= Duration::from_secs(10) {
            tracing::info!(forwarded = flow.forwarded, in_flight = self.progress.tracker.unacked_messages(), checkpoint = %self.progress.resume.position(), "progress");
            flow.last_report = Instant::now();
        }
        None
    }

    /// A transaction waits, the window has room and the replicas (if
    /// asked) have it.
    fn may_hand_over(&self, flow: &Flow) -> bool {
        !flow.unpublished.is_empty()
            && self.progress.tracker.unacked_messages() < self.lasting.limits.max_in_flight
            && flow.front_released()
    }

    /// Room in the window: hands the next transactions over, up to
    /// [`HAND_OVER_BURST`] of them while there is room and no shutdown is
    /// asked for.
    async fn publish_next(
        &mut self,
        flow: &mut Flow,
        transactions: &mpsc::Receiver<Result<ReadBatch, ForwarderError>>,
        shutdown: &Shutdown,
    ) -> Option<SessionEnd> {
        for _ in 0..HAND_OVER_BURST {
            let (transaction, read_at) = flow.take_front()?;
            match self.hand_over(transaction, read_at).await {
                Ok(messages) => {
                    flow.forwarded += messages as u64;
                    if let Some(linger) = flow.linger.as_mut() {
                        linger.handed(messages, Instant::now());
                    }
                }
                Err(end) => return Some(end),
            }
            if !self.may_hand_over(flow) || shutdown.is_requested() {
                break;
            }
        }
        if flow.unpublished.is_empty() {
            // Not when the reader has handed over more since.
            if flow.batch_caught_up
                && transactions.is_empty()
                && flow.linger.as_mut().is_some_and(AdaptiveLinger::caught_up)
            {
                self.publisher.send_now();
            }
            self.report_progress();
        }
        None
    }

    /// Hands one transaction to the publisher (but what Kafka already
    /// holds), under the fence; returns how many messages it sent, or how
    /// the session ends.
    async fn hand_over(
        &mut self,
        transaction: SourceTransaction,
        read_at: Instant,
    ) -> Result<usize, SessionEnd> {
        // The fence: nothing more is handed to the producer once the lease
        // is not fresh.
        if !self.may_publish() {
            return Err(SessionEnd::Demoted);
        }
        tracing::debug!(end = %transaction.end, events = transaction.message_count(), "transaction read");
        if transaction.end.file != self.read_file {
            self.read_file.clone_from(&transaction.end.file);
            self.lasting.metrics.on_call.set_read_file(&self.read_file);
        }
        let mut gtid_text = std::mem::take(&mut self.gtid_text);
        gtid_text.clear();
        let gtid = transaction.gtid.as_ref().map(|gtid| {
            use std::fmt::Write;
            write!(gtid_text, "{gtid}").expect("a GTID writes to a String");
            gtid_text.as_str()
        });
        let published = self
            .replay
            .as_mut()
            .and_then(|r| r.published_in(&transaction, gtid));
        let repeats = published
            .as_ref()
            .map_or(0, |p| p.iter().filter(|&&p| p).count());
        let messages = transaction.message_count() - repeats;
        if repeats > 0 {
            tracing::debug!(end = %transaction.end, skipped = repeats, "already in Kafka: not published again");
            self.lasting.metrics.replay_skipped(repeats as u64);
        }
        let tracker = &mut self.progress.tracker;
        let seq = tracker.push_committed(&transaction, messages, read_at);
        if let Some(gtid) = &transaction.gtid {
            tracker.push_gtid(seq, gtid.clone());
        }
        let sent = self
            .publish(&transaction, gtid, seq, published.as_deref())
            .await;
        self.gtid_text = gtid_text;
        match sent {
            Ok(()) => Ok(messages),
            Err(_) if !self.may_publish() => Err(SessionEnd::Demoted),
            Err(e) => Err(SessionEnd::Failed(e)),
        }
    }

    pub(super) fn publisher(&self) -> &P {
        &self.publisher
    }

    pub(super) fn lasting(&self) -> &Lasting {
        &self.lasting
    }

    /// Outside a group always; in one, while the lease is fresh.
    fn may_publish(&self) -> bool {
        self.lasting
            .leadership
            .as_ref()
            .is_none_or(Leadership::may_publish)
    }

    /// Counts the acks taken (and empties them); returns the failure they
    /// report, if any.
    fn acked(&mut self) -> Option<ForwarderError> {
        let Progress { tracker, acks, .. } = &mut self.progress;
        // Every tag is counted, whether or not it came with its instant.
        let now = Instant::now();
        let wall_ms = outbox_core::epoch_ms();
        let mut since_commit = Vec::new();
        let latencies: Vec<Duration> = acks
            .tags
            .iter()
            .enumerate()
            .map(|(i, &seq)| {
                let (read_at, committed_at_ms) = tracker.ack(seq);
                let at = acks.acked_at.get(i).unwrap_or(&now);
                if committed_at_ms > 0 {
                    let acked_ms = wall_ms
                        .saturating_sub(now.saturating_duration_since(*at).as_millis() as u64);
                    since_commit.push(Duration::from_millis(
                        acked_ms.saturating_sub(committed_at_ms),
                    ));
                }
                at.saturating_duration_since(read_at)
            })
            .collect();
        let metrics = &self.lasting.metrics;
        metrics.ack_latencies(&latencies);
        metrics.commit_latencies(&since_commit);
        metrics.producer_latencies(&acks.in_producer);
        for (topic, delivered) in &acks.per_topic {
            metrics.acked(topic, delivered.messages, delivered.bytes as u64);
        }
        if let Some(replay) = &mut self.replay {
            replay.acked(acks, tracker.first_pending_seq());
        }
        let failed = acks.failed.take();
        acks.clear();
        failed
    }

    fn report_progress(&self) {
        let tracker = &self.progress.tracker;
        self.lasting.metrics.progress(
            tracker.unacked_messages(),
            tracker.oldest_pending_read_at(),
            tracker.watermark_commit_timestamp(),
        );
    }

    /// Writes the watermark, with the topic tails after it; `stopping` at
    /// a clean stop (every message sent acked), when the checkpoint says so
    /// if nothing read back is still ahead of it either.
    pub(super) fn save(&mut self, stopping: bool) -> Result<(), DefiniteError> {
        let Progress {
            tracker, resume, ..
        } = &mut self.progress;
        let position = tracker.watermark();
        let tails = self.replay.as_mut().map(|replay| {
            replay.tails(position, tracker.gtid_state(), tracker.first_pending_seq())
        });
        let mut checkpoint = resume.watermark(
            position,
            tracker.gtid_state().cloned(),
            tails,
            tracker.watermark_commit_timestamp(),
            tracker.watermark_file_created_at(),
        );
        // An instance whose lease lapsed promises nothing: another may
        // have published since.
        let lease_fresh = self
            .lasting
            .leadership
            .as_ref()
            .is_none_or(Leadership::may_publish);
        checkpoint.clean = stopping
            && tracker.unacked_messages() == 0
            && lease_fresh
            && self
                .replay
                .as_ref()
                .is_some_and(Replay::holds_nothing_ahead);
        self.lasting.writer.write(&checkpoint)?;
        resume.stored(&checkpoint);
        if checkpoint.clean {
            tracing::info!(checkpoint = %position, "clean stop: the next start need not read the topics back");
        }
        tracing::debug!(checkpoint = %position, "checkpoint written");
        self.lasting.saved.send_replace(Some(checkpoint));
        Ok(())
    }

    /// Writes the watermark if it moved since the last write.
    fn save_if_moved(&mut self) -> Result<(), DefiniteError> {
        if self.progress.tracker.watermark() != self.progress.resume.position() {
            self.save(false)?;
        }
        Ok(())
    }

    /// Lets the acks already under way land (bounded), so the checkpoint
    /// reflects them, writes it, and hands the publisher back if nothing
    /// is left in it.
    async fn drain(mut self, mut end: SessionEnd) -> Ended<P> {
        let drain = self.lasting.limits.drain_timeout;
        // Until every message sent has its report: a failed or unsent
        // message keeps its transaction under the watermark for good.
        let drained = tokio::time::timeout(drain, async {
            loop {
                let all_in = self.publisher.outstanding() == 0;
                self.publisher.take_acks(&mut self.progress.acks);
                if let Some(e) = self.acked() {
                    return Err(e);
                }
                if all_in {
                    return Ok(());
                }
                self.publisher.acks_ready().await;
            }
        })
        .await;
        self.report_progress();
        let stopping = matches!(end, SessionEnd::Shutdown) && matches!(drained, Ok(Ok(())));
        match drained {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                if matches!(end, SessionEnd::Shutdown) {
                    end = SessionEnd::Failed(e);
                }
            }
            Err(_) => {
                tracing::warn!(unacked = self.progress.tracker.unacked_messages(), timeout = ?drain, "acks still missing after the drain timeout; they will be sent again from the checkpoint")
            }
        }
        self.lasting.metrics.progress(0, None, 0);
        if self.progress.tracker.watermark() != self.progress.resume.position() || stopping {
            if let Err(e) = self.save(stopping) {
                end = SessionEnd::Failed(e.into());
            }
        }
        let Self {
            publisher,
            progress,
            ..
        } = self;
        let mut resume = progress.resume;
        if progress.tracker.watermark() == resume.position() {
            // Nothing acked since: the GTID state counted is where the
            // next session starts all the same.
            resume.gtid = progress.tracker.gtid_state().cloned();
        }
        Ended {
            end,
            resume,
            publisher: (progress.tracker.unacked_messages() == 0).then_some(publisher),
        }
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
