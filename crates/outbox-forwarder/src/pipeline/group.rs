//! One instance of an active/standby group: its role loop.
//!
//! A standby follows the group's shared checkpoints into its store until it
//! holds the group's lock ([`crate::group`]). It then establishes where the
//! group stopped, from the tail of the group's topic, before anything else:
//! the newest record of the group is adopted if newer than its own; a group
//! with no record starts from the holder's own checkpoint, or at
//! `checkpoint.start` on an instance run with `--start-group` (recorded on
//! the topic before publishing, see [`CheckpointWriter::write_first`]), and
//! a holder with neither gives the lock back for a while instead (the
//! group may have run before, or a forwarder been turned into it); a group
//! whose newest record cannot be read is not resumed from
//! `checkpoint.start`: the holder keeps the lock, publishes nothing and
//! says why until an operator sets the group's checkpoint; one that cannot
//! read the topic at all gives the lock back after two leases, for an
//! instance that may. The holder then records its term on the group's
//! topic, acknowledged (a term the topic does not know of publishes
//! nothing, see [`CheckpointWriter::record_term`]), holds off unless its
//! mark directly follows a clean hand-over, reads the group's newest
//! record again, and waits for a confirmation of the lock asked after its
//! mark. It serves until demoted (and stands by again) or shut down (and,
//! if it published in this term, hands over). This is the protocol
//! `group/protocol.pml` models and spin checks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::DefiniteError;
use outbox_sink::KafkaConfig;

use super::{Forwarder, Stopped};
use crate::checkpoints::CheckpointWriter;
use crate::config::HaSection;
use crate::group::{self, GroupCheckpoint, Leadership};
use crate::metrics::{GroupState, Metrics};
use crate::shutdown::Shutdown;

/// How long establishing the group's checkpoint may take before it is
/// tried again (it reads only the topic's tail).
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(10);

impl Forwarder {
    /// Serves as one instance of the `ha` group until shutdown or a
    /// definite error.
    pub(super) async fn serve_in_group(
        &mut self,
        ha: HaSection,
        shutdown: &mut Shutdown,
    ) -> Result<(), DefiniteError> {
        let leadership = self.leadership.clone().expect("an [ha] group has a lease");
        let (release, released) = crate::shutdown::channel();
        let lock = tokio::spawn(group::hold_lock(
            self.candidates.clone(),
            self.writer.store().clone(),
            ha.clone(),
            leadership.clone(),
            self.metrics.clone(),
            released,
        ));
        let kafka = self.config.kafka_config();
        let result = loop {
            self.metrics.set_active(false);
            let became_active = self.stand_by(&kafka, &ha, &leadership, shutdown).await;
            if !became_active {
                break Ok(());
            }
            let Some(recorded) = self
                .establish_group_checkpoint(&kafka, &ha, &leadership, shutdown)
                .await
            else {
                continue;
            };
            // The hold-off after taking the lock (see Leadership::publish_from),
            // as the group's newest record just read decides it.
            let mut role = leadership.subscribe();
            tokio::select! {
                _ = tokio::time::sleep_until(leadership.publish_from().into()) => {}
                _ = role.wait_for(|active| !*active) => continue,
                _ = shutdown.requested() => break Ok(()),
            }
            if !self.catch_up_after_hold_off(&kafka, &ha).await {
                continue;
            }
            // The lock confirmed after the term's record landed: a holder
            // whose connection was cut meanwhile never publishes.
            if !confirmed_after(&leadership, recorded, shutdown).await {
                continue;
            }
            self.held_off = true;
            self.metrics.set_active(true);
            match self.serve(shutdown).await {
                Ok(Stopped::Demoted) => {
                    // The producer may hold messages: it goes, unsent.
                    self.sink = None;
                    self.held_off = false;
                    continue;
                }
                Ok(Stopped::Shutdown) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        // Hand over: the last checkpoint is shared (as a hand-over, so the
        // next holder need not hold off), then the lock freed. Only after a
        // term that got past its hold-off: before it, the previous holder
        // may still be publishing, and the next one must hold off.
        // Nor with messages still unacked: the session keeps its producer
        // only when the drain left nothing in it.
        if self.held_off && self.sink.is_some() {
            self.writer.hand_over();
        }
        release.request();
        let _ = lock.await;
        result
    }

    /// Follows the group's checkpoints until this instance holds the lock
    /// (true) or shutdown (false).
    async fn stand_by(
        &self,
        kafka: &KafkaConfig,
        ha: &HaSection,
        leadership: &Leadership,
        shutdown: &mut Shutdown,
    ) -> bool {
        let stop = Arc::new(AtomicBool::new(false));
        let follower = {
            let (kafka, ha, writer, stop, leadership, metrics) = (
                kafka.clone(),
                ha.clone(),
                self.writer.clone(),
                stop.clone(),
                leadership.clone(),
                self.metrics.clone(),
            );
            tokio::task::spawn_blocking(move || {
                follow_group(&kafka, &ha, &writer, &leadership, &metrics, &stop)
            })
        };
        let mut role = leadership.subscribe();
        let became_active = tokio::select! {
            _ = role.wait_for(|active| *active) => true,
            _ = shutdown.requested() => false,
        };
        stop.store(true, Ordering::Relaxed);
        let _ = follower.await;
        became_active
    }

    /// Holding the lock: reads where the group stopped and records this
    /// term on the group's topic, acknowledged, until both are done (when
    /// the record was acknowledged) or the lock is lost or shutdown comes
    /// (`None`). A term whose record does not land publishes nothing: it
    /// tries again. Never falls back to `checkpoint.start` for a group
    /// that has a history.
    async fn establish_group_checkpoint(
        &self,
        kafka: &KafkaConfig,
        ha: &HaSection,
        leadership: &Leadership,
        shutdown: &mut Shutdown,
    ) -> Option<Instant> {
        let mut created = false;
        let since = Instant::now();
        while leadership.is_active() && !shutdown.is_requested() {
            let problem = match group::read_group(kafka, ha, CATCH_UP_DEADLINE).await {
                Ok(GroupCheckpoint::NeverStarted) => {
                    leadership.note_newest_record(None);
                    match self.start_group_here() {
                        // Its first record is the term's.
                        Ok(true) => {
                            self.metrics.set_group_state(GroupState::Started);
                            return Some(Instant::now());
                        }
                        Ok(false) => {
                            self.metrics.set_group_state(GroupState::NeverStarted);
                            self.refuse_first_start(ha, leadership, shutdown).await;
                            return None;
                        }
                        Err(e) => e,
                    }
                }
                Ok(GroupCheckpoint::Found {
                    checkpoint,
                    handed_over_at_ms,
                    offset,
                }) => match self.writer.adopt(&checkpoint, offset) {
                    Ok(adopted) => {
                        self.metrics.set_group_state(GroupState::Started);
                        let after = handed_over_at_ms.map(|_| offset);
                        match self.writer.record_term(&checkpoint, after) {
                            Ok(first) => {
                                let recorded = Instant::now();
                                if after.is_some() && !first {
                                    tracing::info!("another instance took the lock first after the hand-over: holding off");
                                }
                                leadership.note_newest_record(handed_over_at_ms.filter(|_| first));
                                // Not adopted: the record the follower stored last.
                                tracing::info!(checkpoint = %checkpoint.position, offset, adopted, "caught up with the group's checkpoint");
                                return Some(recorded);
                            }
                            Err(e) => format!(
                                "this term's record on the group's topic was not acknowledged ({e}): \
                                 nothing is published in a term the group's topic does not know of"
                            ),
                        }
                    }
                    Err(e) => e.to_string(),
                },
                Ok(GroupCheckpoint::Unreadable(why)) => {
                    self.metrics.set_group_state(GroupState::Unreadable);
                    self.metrics.error("group_checkpoint_unknown");
                    format!(
                        "{why}. No instance of the group publishes from checkpoint.start once the \
                         group has a history: set where it resumes with `outbox-forwarder \
                         checkpoint set` (with an instance's configuration), and this instance \
                         follows it"
                    )
                }
                Err(e) if !created && e.contains("does not exist") => {
                    created = true;
                    match group::ensure_topic(kafka, ha).await {
                        Ok(()) => continue,
                        Err(e) => e,
                    }
                }
                Err(e) if since.elapsed() >= unreadable_for(ha) => {
                    // Another instance may reach the topic (an ACL, DNS,
                    // a route on this host only).
                    self.metrics.error("group_checkpoint_unreachable");
                    let why = format!("cannot establish the group's checkpoint: {e}");
                    self.step_aside(&why, ha, leadership, shutdown).await;
                    return None;
                }
                Err(e) => e,
            };
            tracing::error!("holding the group's lock but not publishing: cannot establish the group's checkpoint: {problem}");
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                _ = shutdown.requested() => {}
            }
        }
        None
    }
}

impl Forwarder {
    /// The group has no record on its topic: this instance starts it from
    /// its own checkpoint (a forwarder turned into a group), recorded on
    /// the topic at once, or, with `--start-group`, at `checkpoint.start`.
    /// False if it has neither: the group may have run before (its topic
    /// recreated, or this instance new beside one that ran alone), and
    /// `checkpoint.start` would skip what was written since.
    fn start_group_here(&self) -> Result<bool, String> {
        match self.writer.load().map_err(|e| e.to_string())? {
            Some(own) => {
                self.writer.write_first(&own)?;
                Ok(true)
            }
            None => Ok(self.start_group),
        }
    }

    /// After the hold-off: the group's newest record again, adopted if
    /// it follows the one read when the lock was taken. The previous
    /// holder may have shared until its fence closed, after that read;
    /// resuming from the older record would move the group's checkpoint
    /// back. False if the topic cannot be read now (the role loop then
    /// establishes the group's checkpoint again).
    async fn catch_up_after_hold_off(&self, kafka: &KafkaConfig, ha: &HaSection) -> bool {
        match group::read_group(kafka, ha, CATCH_UP_DEADLINE).await {
            Ok(GroupCheckpoint::Found {
                checkpoint, offset, ..
            }) => match self.writer.adopt(&checkpoint, offset) {
                Ok(true) => {
                    tracing::info!(checkpoint = %checkpoint.position, offset, "the previous holder shared a newer checkpoint during the hold-off: resuming from it");
                    true
                }
                Ok(false) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot store the group's newest checkpoint");
                    false
                }
            },
            Ok(GroupCheckpoint::NeverStarted) => true,
            Ok(GroupCheckpoint::Unreadable(why)) => {
                tracing::warn!("after the hold-off: {why}");
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "after the hold-off: cannot read the group's topic");
                false
            }
        }
    }

    /// The group has no record and this instance nothing to start it
    /// from: it steps aside, saying what starts a group.
    async fn refuse_first_start(
        &self,
        ha: &HaSection,
        leadership: &Leadership,
        shutdown: &mut Shutdown,
    ) {
        self.metrics.error("group_never_started");
        let why = format!(
            "the group has no record on {} and this instance has no checkpoint of its own: it \
             does not start the group at checkpoint.start, which would skip every event written \
             since the group (or a forwarder turned into it) last published. To start a new \
             group, run one instance once with --start-group, or set where the group starts \
             with `outbox-forwarder checkpoint set`",
            ha.checkpoint_topic
        );
        self.step_aside(&why, ha, leadership, shutdown).await;
    }

    /// Gives the lock back for two leases, so that an instance that can
    /// establish the group's checkpoint (one with a checkpoint of its own,
    /// one that reaches the topic) takes it, and says `why`; returns once
    /// demoted (or at shutdown).
    async fn step_aside(
        &self,
        why: &str,
        ha: &HaSection,
        leadership: &Leadership,
        shutdown: &mut Shutdown,
    ) {
        let pause = Duration::from_millis(ha.lease_ms * 2);
        tracing::error!(group = %ha.group, "{why}. Giving the lock back for {pause:?} so that another instance of the group may take it");
        leadership.step_aside(pause);
        let mut role = leadership.subscribe();
        tokio::select! {
            _ = role.wait_for(|active| !*active) => {}
            _ = shutdown.requested() => {}
        }
    }
}

/// Waits until the lock is confirmed by a ping asked after `recorded` (the
/// group lock's keeper pings several times per lease): true, or false once
/// the lock is lost or shutdown comes.
async fn confirmed_after(
    leadership: &Leadership,
    recorded: Instant,
    shutdown: &mut Shutdown,
) -> bool {
    while !leadership.confirmed_after(recorded) {
        if !leadership.is_active() || shutdown.is_requested() {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = shutdown.requested() => return false,
        }
    }
    true
}

/// How long a holder may fail to read the group's topic before it gives
/// the lock back: two leases, 10 s at least (a read may take that long).
fn unreadable_for(ha: &HaSection) -> Duration {
    Duration::from_millis(ha.lease_ms * 2).max(CATCH_UP_DEADLINE)
}

/// A standby's follower: every second, the group's newest record into the
/// store (if newer than its own), on one consumer for as long as it
/// follows. Blocking, until `stop`.
fn follow_group(
    kafka: &KafkaConfig,
    ha: &HaSection,
    writer: &CheckpointWriter,
    leadership: &Leadership,
    metrics: &Metrics,
    stop: &AtomicBool,
) {
    let mut warned = false;
    let mut reader: Option<group::GroupReader> = None;
    while !stop.load(Ordering::Relaxed) {
        let read = match &reader {
            Some(reader) => reader.newest(Instant::now() + CATCH_UP_DEADLINE),
            None => group::GroupReader::new(kafka, ha).and_then(|created| {
                reader
                    .insert(created)
                    .newest(Instant::now() + CATCH_UP_DEADLINE)
            }),
        };
        match read {
            Ok(GroupCheckpoint::Found {
                checkpoint,
                handed_over_at_ms,
                offset,
            }) => {
                metrics.set_group_state(GroupState::Started);
                leadership.note_newest_record(handed_over_at_ms);
                if let Err(e) = writer.adopt(&checkpoint, offset) {
                    tracing::warn!(error = %e, "standby: cannot store the group's checkpoint");
                }
            }
            Ok(GroupCheckpoint::NeverStarted) => {
                metrics.set_group_state(GroupState::NeverStarted);
                leadership.note_newest_record(None);
            }
            Ok(GroupCheckpoint::Unreadable(why)) => {
                metrics.set_group_state(GroupState::Unreadable);
                leadership.note_newest_record(None);
                if !warned {
                    tracing::warn!("standby: {why}");
                    warned = true;
                }
            }
            Err(e) => {
                // The first holder creates the topic: until then the
                // group has no record.
                if e.contains("does not exist") {
                    metrics.set_group_state(GroupState::NeverStarted);
                }
                if !warned {
                    tracing::warn!("standby: {e}");
                    warned = true;
                }
            }
        }
        for _ in 0..10 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
