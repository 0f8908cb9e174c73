//! The group's lock on the primary and the lease that fences publishing
//! (see the [module doc](super)).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use outbox_checkpoint::CheckpointStore;
use outbox_core::epoch_ms;
use outbox_source::server::Role;
use tokio::sync::watch;

use crate::config::HaSection;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

#[derive(Debug)]
struct Lease {
    active: bool,
    /// When this term's lock was taken.
    taken_at: Instant,
    confirmed_at: Instant,
    /// When the lock was taken, plus the hold-off (see [`Leadership::publish_from`]).
    publish_from: Instant,
    /// Until when this instance neither holds nor asks for the lock (see
    /// [`Leadership::step_aside`]).
    aside_until: Instant,
}

/// Whether this instance is the active one, as far as the lease goes.
#[derive(Debug, Clone)]
pub struct Leadership {
    lease: Duration,
    state: Arc<Mutex<Lease>>,
    changes: watch::Sender<bool>,
    /// When (epoch ms) the last shared record of the group was a hand-over
    /// by an instance that stopped cleanly; 0 if it was not.
    handed_over_at_ms: Arc<AtomicU64>,
}

impl Leadership {
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            state: Arc::new(Mutex::new(Lease {
                active: false,
                taken_at: Instant::now(),
                confirmed_at: Instant::now(),
                publish_from: Instant::now(),
                aside_until: Instant::now(),
            })),
            changes: watch::channel(false).0,
            handed_over_at_ms: Arc::default(),
        }
    }

    /// When a new holder may start publishing. The server also frees the
    /// lock at once when the old holder's connection is cut while it lives
    /// (a `KILL`, a proxy reset): that holder stops only at its next failed
    /// ping or when its lease goes stale, so a new holder waits three
    /// quarters of a lease after taking the lock, unless the group's last
    /// shared record is a clean hand-over less than a lease old.
    pub fn publish_from(&self) -> Instant {
        self.state.lock().expect("not poisoned").publish_from
    }

    /// Holds the lock and may hand messages to the producer: the lock was
    /// confirmed less than half a lease ago.
    pub fn may_publish(&self) -> bool {
        let lease = self.state.lock().expect("not poisoned");
        lease.active && lease.confirmed_at.elapsed() < self.lease / 2
    }

    pub fn is_active(&self) -> bool {
        self.state.lock().expect("not poisoned").active
    }

    /// Holds the lock, confirmed by a query asked after `at`.
    pub fn confirmed_after(&self, at: Instant) -> bool {
        let lease = self.state.lock().expect("not poisoned");
        lease.active && lease.confirmed_at > at
    }

    /// What the group's newest shared record was: a clean hand-over
    /// shared at this time (epoch ms), or not.
    pub fn note_newest_record(&self, handed_over_at_ms: Option<u64>) {
        self.handed_over_at_ms
            .store(handed_over_at_ms.unwrap_or(0), Ordering::Relaxed);
        // Holding the lock: the hold-off follows the record just read, not
        // what the standby's follower had seen when the lock was taken.
        let mut lease = self.state.lock().expect("not poisoned");
        if lease.active {
            lease.publish_from = lease.taken_at + self.hold_off();
        }
    }

    /// No wait after a clean hand-over less than a lease old; else three
    /// quarters of a lease.
    fn hold_off(&self) -> Duration {
        let handed_over = self.handed_over_at_ms.load(Ordering::Relaxed);
        let clean = handed_over > 0
            && epoch_ms().saturating_sub(handed_over) < self.lease.as_millis() as u64;
        if clean {
            Duration::ZERO
        } else {
            self.lease * 3 / 4
        }
    }

    /// Gives the lock back and does not ask for it again for `pause`: a
    /// holder that cannot start the group (nothing to resume from) lets an
    /// instance that can take it.
    pub fn step_aside(&self, pause: Duration) {
        self.state.lock().expect("not poisoned").aside_until = Instant::now() + pause;
    }

    pub(crate) fn stepping_aside(&self) -> bool {
        Instant::now() < self.state.lock().expect("not poisoned").aside_until
    }

    /// Resolves on every change of the role.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.changes.subscribe()
    }

    pub(crate) fn confirm(&self, at: Instant) {
        let mut lease = self.state.lock().expect("not poisoned");
        lease.confirmed_at = at;
        if !lease.active {
            lease.taken_at = at;
            lease.publish_from = at + self.hold_off();
            lease.active = true;
            self.changes.send_replace(true);
        }
    }

    pub(crate) fn demote(&self) {
        let mut lease = self.state.lock().expect("not poisoned");
        if lease.active {
            lease.active = false;
            self.changes.send_replace(false);
        }
    }
}

/// A standby's answer from the lock's server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// The lock is now this session's.
    Ours,
    /// Another session holds it.
    Held,
    /// The server takes no writes: the lock is not taken there.
    ReadOnly,
}

/// A holder's ping, answered by the lock's server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinged {
    /// Still this session's, on a server that takes writes.
    Ours,
    /// Still this session's, but the server stopped taking writes.
    ReadOnly,
    /// Not this session's any more.
    Lost,
}

/// The session of another account that holds the lock, as the server
/// shows it: its connection id, user and host where visible, and this
/// session's own user.
pub struct Holder {
    pub connection: u64,
    pub user: Option<String>,
    pub host: Option<String>,
    pub me: String,
}

/// One session on the lock's server: the seam the lock keeper works
/// through. [`MysqlLock`] is a MySQL or MariaDB connection; in tests, an
/// in-memory server stands for it. Each call is one query; the keeper
/// bounds how long it may take.
pub trait LockSession: Send {
    /// Takes the lock if it is free and the server takes writes.
    fn ask(&mut self) -> impl Future<Output = Result<Asked, String>> + Send;
    /// Whether the lock is still this session's, and the server writable.
    fn ping(&mut self) -> impl Future<Output = Result<Pinged, String>> + Send;
    /// Who holds the lock, if anyone.
    fn holder(&mut self) -> impl Future<Output = Option<Holder>> + Send;
    /// Frees the lock (if held) and ends the session.
    fn release(self) -> impl Future<Output = ()> + Send;
    /// Ends the session, lock or not.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// The group's lock on a MySQL or MariaDB connection.
pub struct MysqlLock {
    conn: Conn,
    name: String,
}

impl LockSession for MysqlLock {
    async fn ask(&mut self) -> Result<Asked, String> {
        let asked = self
            .conn
            .exec_first::<Option<i64>, _, _>(
                "SELECT IF(@@global.read_only, -1, GET_LOCK(?, 0))",
                (self.name.as_str(),),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(match asked {
            Some(Some(1)) => Asked::Ours,
            Some(Some(-1)) => Asked::ReadOnly,
            _ => Asked::Held,
        })
    }

    async fn ping(&mut self) -> Result<Pinged, String> {
        let pinged = self
            .conn
            .exec_first::<(Option<i64>, i64), _, _>(
                "SELECT IS_USED_LOCK(?) = CONNECTION_ID(), @@global.read_only",
                (self.name.as_str(),),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(match pinged {
            Some((Some(1), 0)) => Pinged::Ours,
            Some((Some(1), _)) => Pinged::ReadOnly,
            _ => Pinged::Lost,
        })
    }

    async fn holder(&mut self) -> Option<Holder> {
        // The holder read once; the processlist names the user a session
        // signed in as, as USER() does (up to its last '@').
        let asked = self
            .conn
            .exec_first::<(Option<u64>, Option<String>, Option<String>, String), _, _>(
                "SELECT l.id, p.USER, p.HOST, \
                        LEFT(USER(), CHAR_LENGTH(USER()) - LOCATE('@', REVERSE(USER()))) \
                 FROM (SELECT IS_USED_LOCK(?) AS id) AS l \
                 LEFT JOIN information_schema.PROCESSLIST AS p ON p.ID = l.id",
                (self.name.as_str(),),
            )
            .await;
        let Ok(Some((Some(connection), user, host, me))) = asked else {
            return None;
        };
        Some(Holder {
            connection,
            user,
            host,
            me,
        })
    }

    async fn release(mut self) {
        let _ = self
            .conn
            .exec_drop("SELECT RELEASE_LOCK(?)", (self.name.as_str(),))
            .await;
        let _ = self.conn.disconnect().await;
    }

    async fn close(self) {
        let _ = self.conn.disconnect().await;
    }
}

/// Takes and holds the group's lock until `release` turns true (then frees
/// it at once). The lock lives where the writes are: on the writable
/// candidate that serves the group's checkpoint (as [`crate::resume`]
/// decides it, so every instance of the group picks the same server), and
/// a holder whose server stops taking writes (a switchover) steps down and
/// takes it again on the new primary.
pub async fn hold_lock(
    candidates: Vec<Opts>,
    store: CheckpointStore,
    config: HaSection,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    mut release: Shutdown,
) {
    let lock = GroupLock::new(&config, &leadership, &metrics);
    loop {
        if release.is_requested() {
            return;
        }
        let Some(mut conn) = lock_server(&candidates, &store, lock.bounded).await else {
            pause().await;
            continue;
        };
        if conn
            .query_drop(format!("SET SESSION wait_timeout = {}", lock.wait_timeout))
            .await
            .is_err()
        {
            pause().await;
            continue;
        }
        let session = MysqlLock {
            conn,
            name: lock.name.clone(),
        };
        let session = match lock.wait_until_ours(session, &mut release).await {
            Standby::Ours(session) => session,
            Standby::AnotherServer => continue,
            Standby::Released => return,
        };
        if lock.keep(session, &mut release).await == Kept::Released {
            return;
        }
    }
}

fn pause() -> tokio::time::Sleep {
    tokio::time::sleep(Duration::from_millis(500))
}

/// The group's lock on one server's session, as one instance holds it.
pub(crate) struct GroupLock<'a> {
    name: String,
    config: &'a HaSection,
    leadership: &'a Leadership,
    /// Where a holder of another account is shown.
    metrics: &'a Metrics,
    lease: Duration,
    /// The session's `wait_timeout`, in seconds.
    wait_timeout: u64,
    ping_every: Duration,
    /// How long a query on the lock's server may take.
    bounded: Duration,
}

/// How a standby's wait for the lock ended.
pub(crate) enum Standby<S> {
    /// The lock is ours, on this session.
    Ours(S),
    /// The server stopped taking writes, or stopped answering: look for
    /// the writable candidate again.
    AnotherServer,
    Released,
}

/// What one turn of a holder's keeper found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// The lock confirmed.
    Ours,
    /// The role loop steps aside: demoted, the lock to be given back.
    StepAside,
    /// Demoted: the server takes no writes; the lock to be given back.
    ReadOnly,
    /// Demoted: the lock is lost.
    Lost,
}

/// How an active instance's hold of the lock ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Kept {
    Released,
    /// Demoted (the lock lost, or its server read-only): look for the
    /// writable candidate again.
    SteppedDown,
}

impl<'a> GroupLock<'a> {
    pub(crate) fn new(
        config: &'a HaSection,
        leadership: &'a Leadership,
        metrics: &'a Metrics,
    ) -> Self {
        let lease = Duration::from_millis(config.lease_ms);
        Self {
            name: config.lock_name(),
            config,
            leadership,
            metrics,
            lease,
            // Whole seconds, rounded up: the server never frees it sooner.
            wait_timeout: config.lease_ms.div_ceil(1000).max(1),
            ping_every: (lease / 6).max(Duration::from_millis(200)),
            bounded: lease / 2,
        }
    }

    /// Standby: asks for the lock until it is ours, while the server takes
    /// writes.
    async fn wait_until_ours<S: LockSession>(
        &self,
        mut session: S,
        release: &mut Shutdown,
    ) -> Standby<S> {
        let mut logged = false;
        loop {
            while self.leadership.stepping_aside() {
                tokio::select! {
                    _ = pause() => {}
                    _ = release.requested() => return Standby::Released,
                }
            }
            match self.ask_once(&mut session, &mut logged).await {
                Some(Ok(())) => return Standby::Ours(session),
                Some(Err(())) => {
                    let _ = tokio::time::timeout(self.bounded, session.close()).await;
                    pause().await;
                    return Standby::AnotherServer;
                }
                None => {}
            }
            tokio::select! {
                _ = pause() => {}
                _ = release.requested() => return Standby::Released,
            }
        }
    }

    /// One ask for the lock: `Some(Ok)` once it is ours (the lease
    /// confirmed as of the ask), `Some(Err)` when the server takes no
    /// writes or does not answer, `None` while another session holds it.
    pub(crate) async fn ask_once<S: LockSession>(
        &self,
        session: &mut S,
        logged: &mut bool,
    ) -> Option<Result<(), ()>> {
        let (group, instance) = (&self.config.group, &self.config.instance);
        let asked_at = Instant::now();
        match tokio::time::timeout(self.bounded, session.ask()).await {
            Ok(Ok(Asked::Ours)) => {
                self.metrics.set_lock_held_by_other_account(false);
                self.leadership.confirm(asked_at);
                tracing::info!(%group, %instance, "became the active instance of the group");
                Some(Ok(()))
            }
            Ok(Ok(Asked::ReadOnly)) => {
                tracing::info!(%group, "the server of the group's lock stopped taking writes: looking for the writable candidate");
                Some(Err(()))
            }
            Ok(Ok(Asked::Held)) => {
                if !*logged {
                    tracing::info!(%group, %instance, "standby: another instance holds the group's lock");
                    *logged = true;
                }
                self.judge_holder(session).await;
                None
            }
            _ => Some(Err(())),
        }
    }

    /// Whether the lock's holder signed in as another account than this
    /// instance: the group's instances share one, so such a holder is not
    /// one of them, and while it holds the lock no instance publishes. An
    /// account sees only its own sessions without PROCESS, so a holder it
    /// cannot see is another account's too. Shown in the metric and the
    /// log (once per holder).
    async fn judge_holder<S: LockSession>(&self, session: &mut S) {
        let Ok(Some(holder)) = tokio::time::timeout(self.bounded, session.holder()).await else {
            return;
        };
        let foreign = holder.user.as_deref() != Some(holder.me.as_str());
        let was = self.metrics.set_lock_held_by_other_account(foreign);
        if foreign && !was {
            let who = match (holder.user, holder.host) {
                (Some(user), Some(host)) => format!("account {user} from {host}"),
                _ => "an account this one cannot see (not the group's own)".into(),
            };
            let connection = holder.connection;
            tracing::warn!(
                group = %self.config.group,
                lock = %self.name,
                connection,
                "the group's lock is held by {who}, not by an instance of the group: no \
                 instance publishes while it holds it; end that session (KILL {connection}) and \
                 see docs/security.md on the lock's name"
            );
        }
    }

    /// Active: keeps confirming the lock and that its server takes writes;
    /// either failing demotes at once. A release hands the lock back.
    async fn keep<S: LockSession>(&self, mut session: S, release: &mut Shutdown) -> Kept {
        let (group, instance) = (&self.config.group, &self.config.instance);
        while self.leadership.is_active() {
            let handing_over = tokio::select! {
                _ = tokio::time::sleep(self.ping_every) => false,
                _ = release.requested() => true,
            };
            if handing_over {
                self.give_back(session).await;
                self.leadership.demote();
                tracing::info!(%group, "released the group's lock");
                return Kept::Released;
            }
            match self.keep_once(&mut session).await {
                Turn::Ours => {}
                Turn::Lost => break,
                Turn::StepAside => {
                    self.give_back(session).await;
                    tracing::info!(%group, %instance, "stepped aside: gave the group's lock back");
                    return Kept::SteppedDown;
                }
                Turn::ReadOnly => {
                    self.give_back(session).await;
                    return Kept::SteppedDown;
                }
            }
        }
        let _ = tokio::time::timeout(self.bounded, session.close()).await;
        Kept::SteppedDown
    }

    /// One turn of the holder's keeper: steps aside (demoted; the caller
    /// gives the lock back) when the role loop asked it to, else pings.
    pub(crate) async fn keep_once<S: LockSession>(&self, session: &mut S) -> Turn {
        if self.leadership.stepping_aside() {
            self.leadership.demote();
            return Turn::StepAside;
        }
        match self.ping_once(session).await {
            Pinged::Ours => Turn::Ours,
            Pinged::ReadOnly => Turn::ReadOnly,
            Pinged::Lost => Turn::Lost,
        }
    }

    /// One ping of the lock: confirms the lease as of the ping, or demotes
    /// (the lock lost, the ping unanswered within a quarter lease, or its
    /// server read-only).
    pub(crate) async fn ping_once<S: LockSession>(&self, session: &mut S) -> Pinged {
        let (group, instance) = (&self.config.group, &self.config.instance);
        let asked_at = Instant::now();
        let ping = tokio::time::timeout(self.lease / 4, session.ping()).await;
        match ping {
            Ok(Ok(Pinged::Ours)) => {
                self.leadership.confirm(asked_at);
                Pinged::Ours
            }
            Ok(Ok(Pinged::ReadOnly)) => {
                self.leadership.demote();
                tracing::warn!(%group, %instance, "the server of the group's lock no longer takes writes (a switchover?): stepping down to take the lock on the writable candidate");
                Pinged::ReadOnly
            }
            other => {
                self.leadership.demote();
                tracing::warn!(%group, %instance, answer = ?other.map(|r| r.map_err(|e| e.to_string())), "lost the group's lock: stepping down");
                Pinged::Lost
            }
        }
    }

    /// Releases the lock and closes its session, within bounds.
    async fn give_back<S: LockSession>(&self, session: S) {
        let _ = tokio::time::timeout(self.bounded, session.release()).await;
    }
}

/// The server the group's lock is taken on: the writable candidate that
/// serves the group's checkpoint (this instance's store follows it), else
/// the writable one; `None` while no candidate takes writes, or two do.
async fn lock_server(
    candidates: &[Opts],
    store: &CheckpointStore,
    bounded: Duration,
) -> Option<Conn> {
    use crate::resume::{decide, PROBE_TIMEOUT};
    let checkpoint = store.load().ok().flatten();
    let budget = PROBE_TIMEOUT + bounded;
    let decided = tokio::time::timeout(budget, decide(candidates, 0, checkpoint.as_ref(), false));
    if let Some(conn) = writable(decided.await).await {
        return Some(conn);
    }
    // No writable server serves the checkpoint (a replica does, or none
    // does and the run will say why): the lock still goes to the writable
    // server, so that the group has one holder.
    let decided = tokio::time::timeout(budget, decide(candidates, 0, None, false));
    writable(decided.await).await
}

/// The decision's connection if it chose a writable server.
async fn writable(
    decided: Result<
        Result<crate::resume::Decision, crate::resume::Refused>,
        tokio::time::error::Elapsed,
    >,
) -> Option<Conn> {
    match decided {
        Ok(Ok(d)) if d.role == Role::Writable => Some(d.conn),
        Ok(Ok(d)) => {
            let _ = d.conn.disconnect().await;
            None
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fence's clock: a confirmed lease allows publishing for half a
    /// lease, then not, even while the lock is still believed held (a
    /// process that was stopped wakes up with a stale confirmation).
    #[test]
    fn publishing_stops_half_a_lease_after_the_last_confirmation() {
        let leadership = Leadership::new(Duration::from_millis(200));
        assert!(!leadership.may_publish(), "a standby never publishes");
        let mut role = leadership.subscribe();
        leadership.confirm(Instant::now());
        assert!(role.has_changed().unwrap() && *role.borrow_and_update());
        assert!(leadership.may_publish());
        std::thread::sleep(Duration::from_millis(120));
        assert!(leadership.is_active());
        assert!(!leadership.may_publish(), "the confirmation is stale");
        leadership.confirm(Instant::now());
        assert!(leadership.may_publish(), "a fresh ping renews it");
        leadership.demote();
        assert!(!leadership.may_publish());
        assert!(!*role.borrow_and_update());
    }
}
