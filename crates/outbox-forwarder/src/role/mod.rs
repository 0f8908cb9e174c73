//! One instance's role in an active/standby group (see [`crate::group`]):
//! the protocol `group/protocol.pml` models and spin checks, step for
//! step, over the group's log and the lock's keeper.
//!
//! A standby follows the group's shared checkpoints into its store until it
//! holds the group's lock (the lock keeper, [`crate::group::hold_lock`], moves
//! [`Leadership`]). It then establishes where the group stopped, from the
//! group's log ([`GroupLog`]), before anything else: the newest record of
//! the group is adopted if newer than its own; a group with no record
//! starts from the holder's own checkpoint, or at `checkpoint.start` on an
//! instance run with `--start-group` (recorded on the log before
//! publishing, see [`CheckpointWriter::write_first`]), and a holder with
//! neither gives the lock back for a while instead (the group may have run
//! before, or a forwarder been turned into it); a group whose newest record
//! cannot be read is not resumed from `checkpoint.start`: the holder keeps
//! the lock, publishes nothing and says why until an operator sets the
//! group's checkpoint; one that cannot read the log at all gives the lock
//! back after two leases, for an instance that may. The holder then
//! records its term on the log, acknowledged (a term the log does not know
//! of publishes nothing, see [`CheckpointWriter::record_term`]), holds off
//! unless its mark directly follows a clean hand-over, reads the group's
//! newest record again, and waits for a confirmation of the lock asked
//! after its mark. Only then may it publish ([`Role::next_term`]); the
//! pipeline serves until demoted, and asks again.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_checkpoint::Checkpoint;

use crate::checkpoints::CheckpointWriter;
use crate::config::HaSection;
use crate::group::{read_newest, GroupCheckpoint, GroupLog, Leadership, LogError};
use crate::metrics::{GroupState, Metrics};
use crate::shutdown::Shutdown;

/// How long establishing the group's checkpoint may take before it is
/// tried again (it reads only the log's tail).
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(10);

/// How a term that took the lock went.
#[derive(Debug, PartialEq, Eq)]
pub enum Begun {
    /// Recorded, held off, caught up and confirmed: it may publish.
    Publish,
    /// It may not (the lock lost, the mark not acknowledged, stepped
    /// aside): stand by again.
    Again,
    Shutdown,
}

/// Whether this instance's own checkpoint may start a group whose log
/// has no record: `Err(why)` when the servers cannot resume it (written
/// against another server set, or older than the binlog they still hold).
pub type StoreCheck = Arc<
    dyn Fn(Checkpoint) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync,
>;

/// One instance's role loop (see the module doc).
pub struct Role {
    pub(crate) log: Arc<dyn GroupLog>,
    pub(crate) writer: Arc<CheckpointWriter>,
    pub(crate) leadership: Leadership,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) ha: HaSection,
    /// `--start-group`: may start a group with no record at
    /// `checkpoint.start`; spent once the group has a record (a recreated
    /// topic is not a new group).
    pub(crate) start_group: Arc<AtomicBool>,
    /// Vets this instance's own checkpoint before it starts a group
    /// (`None`: taken as it is).
    pub(crate) store_check: Option<StoreCheck>,
}

impl Role {
    /// Stands by until this instance holds the lock and may publish in a
    /// new term (true), or shutdown (false).
    pub async fn next_term(&self, shutdown: &mut Shutdown) -> bool {
        loop {
            self.metrics.set_active(false);
            if !self.stand_by(shutdown).await {
                return false;
            }
            match self.begin_term(shutdown).await {
                Begun::Publish => return true,
                Begun::Again => continue,
                Begun::Shutdown => return false,
            }
        }
    }

    /// Holding the lock: the term's steps before its first message.
    pub async fn begin_term(&self, shutdown: &mut Shutdown) -> Begun {
        let Some(recorded) = self.establish(shutdown).await else {
            return if shutdown.is_requested() {
                Begun::Shutdown
            } else {
                Begun::Again
            };
        };
        // The hold-off after taking the lock (see Leadership::publish_from),
        // as the group's newest record just read decides it.
        let mut role = self.leadership.subscribe();
        tokio::select! {
            _ = tokio::time::sleep_until(self.leadership.publish_from().into()) => {}
            _ = role.wait_for(|active| !*active) => return Begun::Again,
            _ = shutdown.requested() => return Begun::Shutdown,
        }
        if !self.catch_up_after_hold_off().await {
            return Begun::Again;
        }
        // The lock confirmed after the term's record landed: a holder
        // whose connection was cut meanwhile never publishes.
        if !confirmed_after(&self.leadership, recorded, shutdown).await {
            return Begun::Again;
        }
        Begun::Publish
    }

    /// Follows the group's checkpoints until this instance holds the lock
    /// (true) or shutdown (false).
    async fn stand_by(&self, shutdown: &mut Shutdown) -> bool {
        let stop = Arc::new(AtomicBool::new(false));
        let follower = {
            let (log, writer, stop, leadership, metrics, start_group) = (
                self.log.clone(),
                self.writer.clone(),
                stop.clone(),
                self.leadership.clone(),
                self.metrics.clone(),
                self.start_group.clone(),
            );
            tokio::task::spawn_blocking(move || {
                follow_group(&*log, &writer, &leadership, &metrics, &stop, &start_group)
            })
        };
        let mut role = self.leadership.subscribe();
        let became_active = tokio::select! {
            _ = role.wait_for(|active| *active) => true,
            _ = shutdown.requested() => false,
        };
        stop.store(true, Ordering::Relaxed);
        let _ = follower.await;
        became_active
    }

    /// Holding the lock: reads where the group stopped and records this
    /// term on the log, acknowledged, until both are done (when the record
    /// was acknowledged) or the lock is lost or shutdown comes (`None`). A
    /// term whose record does not land publishes nothing: it tries again.
    /// Never falls back to `checkpoint.start` for a group that has a
    /// history.
    pub(crate) async fn establish(&self, shutdown: &mut Shutdown) -> Option<Instant> {
        let (ha, leadership) = (&self.ha, &self.leadership);
        let mut created = false;
        let since = Instant::now();
        while leadership.is_active() && !shutdown.is_requested() {
            let problem = match read_newest(&self.log, CATCH_UP_DEADLINE).await {
                Ok(GroupCheckpoint::NeverStarted) => {
                    leadership.note_newest_record(None);
                    match self.start_group_here().await {
                        // Its first record is the term's.
                        Ok(Start::Started) => {
                            self.metrics.set_group_state(GroupState::Started);
                            return Some(Instant::now());
                        }
                        Ok(refused) => {
                            self.metrics.set_group_state(GroupState::NeverStarted);
                            self.refuse_first_start(refused, shutdown).await;
                            return None;
                        }
                        Err(e) => e,
                    }
                }
                Ok(GroupCheckpoint::Found {
                    checkpoint,
                    handed_over_at_ms,
                    offset,
                }) => match self.record_term_after(&checkpoint, handed_over_at_ms, offset) {
                    Ok(recorded) => return Some(recorded),
                    Err(e) => e,
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
                Err(LogError::Missing(_)) if !created => {
                    created = true;
                    match self.log.create().await {
                        Ok(()) => continue,
                        Err(e) => e,
                    }
                }
                Err(e) if since.elapsed() >= unreadable_for(ha) => {
                    // Another instance may reach the log (an ACL, DNS,
                    // a route on this host only).
                    self.metrics.error("group_checkpoint_unreachable");
                    let why = format!("cannot establish the group's checkpoint: {e}");
                    self.step_aside(&why, shutdown).await;
                    return None;
                }
                Err(e) => e.to_string(),
            };
            tracing::error!("holding the group's lock but not publishing: cannot establish the group's checkpoint: {problem}");
            tokio::select! {
                _ = tokio::time::sleep(retry_after(ha)) => {}
                _ = shutdown.requested() => {}
            }
        }
        None
    }

    /// The group's newest record found (at `offset`; a clean hand-over
    /// shared at `handed_over_at_ms`): adopted, and this term recorded
    /// after it, acknowledged. When the mark landed, or why not.
    fn record_term_after(
        &self,
        checkpoint: &Checkpoint,
        handed_over_at_ms: Option<u64>,
        offset: i64,
    ) -> Result<Instant, String> {
        let adopted = self
            .writer
            .adopt(checkpoint, offset)
            .map_err(|e| e.to_string())?;
        self.start_group.store(false, Ordering::Relaxed);
        self.metrics.set_group_state(GroupState::Started);
        let after = handed_over_at_ms.map(|_| offset);
        let first = self.writer.record_term(checkpoint, after).map_err(|e| {
            format!(
                "this term's record on the group's topic was not acknowledged ({e}): nothing \
                 is published in a term the group's topic does not know of"
            )
        })?;
        let recorded = Instant::now();
        if after.is_some() && !first {
            tracing::info!("another instance took the lock first after the hand-over: holding off");
        }
        self.leadership
            .note_newest_record(handed_over_at_ms.filter(|_| first));
        // Not adopted: the record the follower stored last.
        tracing::info!(checkpoint = %checkpoint.position, offset, adopted, "caught up with the group's checkpoint");
        Ok(recorded)
    }

    /// The group has no record on its log: this instance starts it from
    /// its own checkpoint (a forwarder turned into a group), recorded on
    /// the log at once, once the servers can resume it; or, with
    /// `--start-group`, at `checkpoint.start`. Not if it has neither: the
    /// group may have run before (its topic recreated, or this instance new
    /// beside one that ran alone), and `checkpoint.start` would skip what
    /// was written since.
    async fn start_group_here(&self) -> Result<Start, String> {
        let own = match self.writer.load() {
            Ok(own) => own,
            // A damaged store: another instance may start the group.
            Err(e) => return Ok(Start::StoreRefused(e.to_string())),
        };
        match own {
            Some(own) => {
                if let Some(check) = &self.store_check {
                    if let Err(why) = check(own.clone()).await {
                        return Ok(Start::StoreRefused(format!(
                            "its checkpoint ({}, written against {}) cannot start the group: {why}",
                            own.position, own.source
                        )));
                    }
                }
                self.writer.write_first(&own)?;
                Ok(Start::Started)
            }
            None if self.start_group.load(Ordering::Relaxed) => Ok(Start::Started),
            None => Ok(Start::NothingToStartFrom),
        }
    }

    /// After the hold-off: the group's newest record again, adopted if
    /// it follows the one read when the lock was taken. The previous
    /// holder may have shared until its fence closed, after that read;
    /// resuming from the older record would move the group's checkpoint
    /// back. False if the log cannot be read now (the role loop then
    /// establishes the group's checkpoint again).
    pub(crate) async fn catch_up_after_hold_off(&self) -> bool {
        match read_newest(&self.log, CATCH_UP_DEADLINE).await {
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

    /// The group has no record and this instance nothing it may start it
    /// from: it steps aside, saying what starts a group.
    async fn refuse_first_start(&self, refused: Start, shutdown: &mut Shutdown) {
        self.metrics.error("group_never_started");
        let topic = self.log.topic();
        let why = match refused {
            Start::StoreRefused(why) => format!(
                "the group has no record on {topic} and {why}. Set where the group starts with \
                 `outbox-forwarder group start --at POS` (or `checkpoint set`) with an \
                 instance's configuration"
            ),
            _ => format!(
                "the group has no record on {topic} and this instance has no checkpoint of its \
                 own: it does not start the group at checkpoint.start, which would skip every \
                 event written since the group (or a forwarder turned into it) last published. \
                 To start a new group, run `outbox-forwarder group start` once (or one instance \
                 once with --start-group), or set where the group starts with \
                 `outbox-forwarder checkpoint set`"
            ),
        };
        self.step_aside(&why, shutdown).await;
    }

    /// Gives the lock back for two leases, so that an instance that can
    /// establish the group's checkpoint (one with a checkpoint of its own,
    /// one that reaches the log) takes it, and says `why`; returns once
    /// demoted (or at shutdown).
    async fn step_aside(&self, why: &str, shutdown: &mut Shutdown) {
        let pause = Duration::from_millis(self.ha.lease_ms * 2);
        tracing::error!(group = %self.ha.group, "{why}. Giving the lock back for {pause:?} so that another instance of the group may take it");
        self.leadership.step_aside(pause);
        let mut role = self.leadership.subscribe();
        tokio::select! {
            _ = role.wait_for(|active| !*active) => {}
            _ = shutdown.requested() => {}
        }
    }
}

/// How a holder finds a group with no record.
#[derive(Debug)]
enum Start {
    /// It started the group (or will, at `checkpoint.start`).
    Started,
    /// It has no checkpoint of its own and no `--start-group`.
    NothingToStartFrom,
    /// Its own checkpoint cannot be resumed by the servers: why.
    StoreRefused(String),
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

/// How long a holder may fail to read the group's log before it gives the
/// lock back: two leases, 10 s at least (a read may take that long).
fn unreadable_for(ha: &HaSection) -> Duration {
    Duration::from_millis(ha.lease_ms * 2).max(CATCH_UP_DEADLINE)
}

/// How long a holder that cannot establish the group's checkpoint waits
/// before it tries again: 2 s, or a lease if shorter.
fn retry_after(ha: &HaSection) -> Duration {
    Duration::from_millis(ha.lease_ms).min(Duration::from_secs(2))
}

/// A standby's follower: every second, the group's newest record into the
/// store (if newer than its own). Blocking, until `stop`.
fn follow_group(
    log: &dyn GroupLog,
    writer: &CheckpointWriter,
    leadership: &Leadership,
    metrics: &Metrics,
    stop: &AtomicBool,
    start_group: &AtomicBool,
) {
    let mut warned = false;
    while !stop.load(Ordering::Relaxed) {
        match log.newest(Instant::now() + CATCH_UP_DEADLINE) {
            Ok(GroupCheckpoint::Found {
                checkpoint,
                handed_over_at_ms,
                offset,
            }) => {
                metrics.set_group_state(GroupState::Started);
                start_group.store(false, Ordering::Relaxed);
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
                // The first holder creates the log: until then the group
                // has no record.
                if matches!(e, LogError::Missing(_)) {
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

#[cfg(test)]
mod tests;
