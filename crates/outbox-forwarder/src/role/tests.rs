//! The model's counterexamples, replayed through the role loop with an
//! in-memory log and lock. Each test names the defect flag of
//! `group/protocol.pml` (`scripts/check-model.sh`) whose behaviour makes it
//! fail; the steps are the counterexample's, the assertion the property it
//! breaks (P1..P5 in the model's header).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_checkpoint::CheckpointStore;

use super::{Begun, Role};
use crate::checkpoints::CheckpointWriter;
use crate::config::HaSection;
use crate::group::memory::{checkpoint, LockServer, MemoryLock, MemoryLog};
use crate::group::{share_expiry, GroupLock, Kind, Leadership, Pinged, Turn};
use crate::metrics::Metrics;

/// The lease of these tests: the hold-off is 150 ms, the fence half of it.
const LEASE_MS: u64 = 200;
const LEASE: Duration = Duration::from_millis(LEASE_MS);

fn ha(instance: &str) -> HaSection {
    HaSection {
        group: "g".into(),
        lease_ms: LEASE_MS,
        checkpoint_topic: "memory".into(),
        instance: instance.into(),
        lock_suffix: None,
    }
}

/// The log of a group of these tests: records queued by an instance expire
/// as the share producer's do.
fn log() -> Arc<MemoryLog> {
    MemoryLog::new(share_expiry(&ha("any")))
}

/// One instance: its role loop, its store, its session on the lock's
/// server.
struct Instance {
    role: Role,
    session: Option<MemoryLock>,
    _dir: tempfile::TempDir,
}

impl Instance {
    fn new(name: &str, log: &Arc<MemoryLog>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(Metrics::default());
        let leadership = Leadership::new(LEASE);
        let store = CheckpointStore::open(dir.path()).unwrap();
        let writer = CheckpointWriter::new(store, metrics.clone()).in_group(
            log.clone(),
            leadership.clone(),
            name,
        );
        Self {
            role: Role {
                log: log.clone(),
                writer: Arc::new(writer),
                leadership,
                metrics,
                ha: ha(name),
                start_group: Arc::default(),
                store_check: None,
            },
            session: None,
            _dir: dir,
        }
    }

    fn lock(&self) -> GroupLock<'_> {
        GroupLock::new(&self.role.ha, &self.role.leadership, &self.role.metrics)
    }

    /// Asks for the lock on a new session: true if it is now ours.
    async fn take_lock(&mut self, server: &LockServer) -> bool {
        let mut session = server.session();
        let taken = self.lock().ask_once(&mut session, &mut false).await == Some(Ok(()));
        self.session = Some(session);
        taken
    }

    /// The term's steps before its first message, with the lock keeper
    /// taking a turn every quarter lease meanwhile (the first a quarter
    /// lease after they start) until its lock is lost or given back;
    /// within `within`, else `None`.
    async fn begin(&mut self, within: Duration) -> Option<Begun> {
        let (_trigger, mut shutdown) = crate::shutdown::channel();
        let lock = GroupLock::new(&self.role.ha, &self.role.leadership, &self.role.metrics);
        let session = self.session.as_mut().expect("asked for the lock");
        let keeper = async {
            loop {
                tokio::time::sleep(LEASE / 4).await;
                if lock.keep_once(session).await != Turn::Ours {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            begun = tokio::time::timeout(within, self.role.begin_term(&mut shutdown)) => begun.ok(),
            _ = keeper => unreachable!("the keeper pings until its lock is lost, then waits"),
        }
    }

    fn stored(&self) -> Option<u64> {
        self.role.writer.load().unwrap().map(|c| c.position.pos)
    }

    fn may_publish(&self) -> bool {
        self.role.leadership.may_publish()
    }
}

/// The path the model's TERM_UNACKED finds: a term whose mark does not
/// land within its wait (a slow broker) never publishes, and a later
/// holder after the same hand-over is then rightly the first (P1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_whose_mark_does_not_land_never_publishes() {
    let (log, server) = (log(), LockServer::default());
    log.land(Kind::HandOver, "x", &checkpoint(100).rewritten_now());
    let (mut z, mut y) = (Instance::new("z", &log), Instance::new("y", &log));
    assert!(z.take_lock(&server).await);
    log.pause(true);
    let begun = z.begin(LEASE * 2).await;
    assert_ne!(
        begun,
        Some(Begun::Publish),
        "a term the log does not know of publishes nothing"
    );
    assert!(
        log.records().iter().all(|r| r.by != "z"),
        "the fault happened: z's mark never landed"
    );
    // z's lock connection is cut; y takes the lock within a lease of the
    // hand-over, finds no mark after it, and skips the hold-off: z never
    // published, so y is alone.
    server.cut(z.session.as_ref().unwrap());
    log.pause(false);
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Publish));
    assert_eq!(y.stored(), Some(100));
}

/// TERM_UNACKED's second half: a holder whose lock connection is cut
/// right after its mark lands (a `KILL`, a proxy reset) learns it at its
/// next ping, and publishes nothing before (P1, P5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_after_its_mark_publishes_nothing() {
    let (log, server) = (log(), LockServer::default());
    // After a clean hand-over: no hold-off to learn it in.
    log.land(Kind::HandOver, "x", &checkpoint(100).rewritten_now());
    let mut z = Instance::new("z", &log);
    assert!(z.take_lock(&server).await);
    // The session is cut from inside the log, right as the mark lands.
    let (cutter, to_cut) = (server.clone(), z.session.as_ref().unwrap().id());
    log.after_mark(move || cutter.cut_id(to_cut));
    let begun = z.begin(LEASE * 2).await;
    assert!(
        !server.held_by(z.session.as_ref().unwrap()),
        "the fault happened: the lock was freed while z held it"
    );
    assert_eq!(begun, Some(Begun::Again), "z learnt it at its next ping");
    assert!(!z.may_publish());
}

/// HANDOVER_ANY: after a hand-over, only the first holder skips the
/// hold-off. Z took the lock first and publishes at once; its lock
/// connection is cut; Y takes the lock within a lease of the hand-over,
/// finds Z's mark after it and holds off until Z's fence is closed (P1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_holder_after_a_hand_over_skips_the_hold_off() {
    let (log, server) = (log(), LockServer::default());
    log.land(Kind::HandOver, "x", &checkpoint(100).rewritten_now());
    let (mut z, mut y) = (Instance::new("z", &log), Instance::new("y", &log));
    assert!(z.take_lock(&server).await);
    let started = Instant::now();
    assert_eq!(z.begin(LEASE).await, Some(Begun::Publish));
    assert!(
        started.elapsed() < LEASE / 2,
        "the first holder does not hold off"
    );
    assert!(z.may_publish());
    server.cut(z.session.as_ref().unwrap());
    assert!(y.take_lock(&server).await);
    assert!(
        z.may_publish(),
        "the fault happened: z's fence is still open"
    );
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Publish));
    assert!(
        !z.may_publish(),
        "y publishes only once z's fence, unconfirmed since the cut, is closed"
    );
}

/// READ_BEFORE_HOLDOFF: the previous holder shares until its fence
/// closes, after the new holder's first read: the new holder resumes from
/// the group's newest record as it stands when the hold-off ends (P3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_record_is_read_again_when_the_hold_off_ends() {
    let (log, server) = (log(), LockServer::default());
    log.land(Kind::Checkpoint, "x", &checkpoint(100));
    // x, its connection cut, still shares once after y's first read.
    log.land_after_read(1, Kind::Checkpoint, "x", &checkpoint(200));
    let mut y = Instance::new("y", &log);
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Publish));
    assert_eq!(
        log.checkpoints(),
        [100, 200],
        "the fault happened: x's share landed late"
    );
    assert_eq!(
        y.stored(),
        Some(200),
        "y resumes from the group's newest record"
    );
}

/// ADOPT_BY_CLOCK: the group's records are ordered by the log, not by the
/// clocks that stamped them: an operator's `checkpoint set` written on a
/// host whose clock is behind is taken over a holder's own newer-stamped
/// checkpoint (P3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_orders_the_groups_records_not_the_clocks() {
    let (log, server) = (log(), LockServer::default());
    let mut y = Instance::new("y", &log);
    let mut ahead = checkpoint(300);
    ahead.written_at_ms += 3_600_000;
    y.role.writer.adopt(&ahead, 0).unwrap();
    log.land(Kind::Checkpoint, "y", &ahead);
    log.land(Kind::Checkpoint, "operator", &checkpoint(100));
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Publish));
    assert_eq!(
        y.stored(),
        Some(100),
        "the operator's record, newest by offset"
    );
}

/// LATEST_ON_EMPTY: a holder with no checkpoint of its own, in a group
/// with no record, does not start the group at `checkpoint.start`: it
/// gives the lock back (P4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_with_nothing_to_start_from_gives_the_lock_back() {
    let (log, server) = (log(), LockServer::default());
    let mut y = Instance::new("y", &log);
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Again));
    assert!(log.records().is_empty(), "no first start recorded");
    assert_eq!(y.stored(), None);
    assert!(y.role.leadership.stepping_aside(), "it gives the lock back");
    // With --start-group it starts the group (its first record is then
    // the session's, at checkpoint.start).
    let mut starter = Instance::new("s", &log);
    starter.role.start_group.store(true, Ordering::Relaxed);
    assert!(starter.take_lock(&LockServer::default()).await);
    assert_eq!(starter.begin(LEASE * 2).await, Some(Begun::Publish));
}

/// UNCLEAN_UNFENCED: an instance that wakes from a freeze with a stale
/// confirmation takes back its clean stop in its own store only: nothing
/// reaches the group's log before it knows it holds the lock (P5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_shares_nothing_when_it_takes_back_a_clean_stop() {
    let (log, server) = (log(), LockServer::default());
    let mut x = Instance::new("x", &log);
    assert!(x.take_lock(&server).await);
    std::thread::sleep(LEASE / 2 + Duration::from_millis(10));
    assert!(
        x.role.leadership.is_active() && !x.may_publish(),
        "the fault: a stale lease"
    );
    let mut clean = checkpoint(100);
    clean.clean = true;
    assert!(x.role.writer.unclean(&clean).is_err());
    assert!(log.records().is_empty(), "nothing shared");
}

/// SHARE_TIMEOUT: a share queued by an instance that then froze expires
/// within a quarter lease; it never lands after its successor's records,
/// which would move the group's checkpoint back (P3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_queued_before_a_freeze_never_lands_after_the_successor() {
    let (log, server) = (log(), LockServer::default());
    log.land(Kind::Checkpoint, "x", &checkpoint(100));
    let mut x = Instance::new("x", &log);
    assert!(x.take_lock(&server).await);
    // x's connection to the broker is slow, then x freezes.
    log.slow("x", true);
    x.role.writer.write(&checkpoint(120)).unwrap();
    server.cut(x.session.as_ref().unwrap());
    let mut y = Instance::new("y", &log);
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Publish));
    assert_eq!(y.stored(), Some(100));
    y.role.writer.write(&checkpoint(300)).unwrap();
    log.slow("x", false);
    assert_eq!(log.checkpoints(), [100, 300], "x's late share was dropped");
}

/// A recreated group topic (offsets start again) is followed: a record at
/// an offset at or below the one adopted last, but another record, is
/// the new topic's newest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_log_is_followed_without_a_restart() {
    let (log, server) = (log(), LockServer::default());
    for pos in [100, 200, 300] {
        log.land(Kind::Checkpoint, "x", &checkpoint(pos));
    }
    let mut y = Instance::new("y", &log);
    y.role.writer.adopt(&checkpoint(300), 2).unwrap();
    log.recreate();
    log.land(Kind::Checkpoint, "operator", &checkpoint(250));
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Publish));
    assert_eq!(y.stored(), Some(250), "the new topic's record, at offset 0");
}

/// A missing log is created (a typed error, not a message's wording), and
/// the holder goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_log_is_created() {
    let (log, server) = (log(), LockServer::default());
    log.set_missing(true);
    let mut y = Instance::new("y", &log);
    y.role.start_group.store(true, Ordering::Relaxed);
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Publish));
}

/// A holder that cannot read the log gives the lock back after two leases
/// (10 s at least), publishing nothing meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_read_the_log_publishes_nothing() {
    let (log, server) = (log(), LockServer::default());
    log.land(Kind::Checkpoint, "x", &checkpoint(100));
    log.set_unreadable(true);
    let mut y = Instance::new("y", &log);
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 3).await, None, "still establishing");
    assert_eq!(y.stored(), None);
    assert!(log.records().iter().all(|r| r.by != "y"), "no mark either");
}

/// A holder whose server stops taking writes (a switchover that leaves
/// the old primary running) steps down at its next ping, and no standby
/// takes the lock there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_a_server_turned_read_only_steps_down() {
    let (log, server) = (log(), LockServer::default());
    log.land(Kind::Checkpoint, "x", &checkpoint(100));
    let (mut x, mut y) = (Instance::new("x", &log), Instance::new("y", &log));
    assert!(x.take_lock(&server).await);
    server.set_read_only(true);
    let mut session = x.session.take().unwrap();
    let pinged = x.lock().ping_once(&mut session).await;
    assert_eq!(pinged, Pinged::ReadOnly);
    assert!(!x.role.leadership.is_active() && !x.may_publish());
    assert!(
        !y.take_lock(&server).await,
        "never taken on a read-only server"
    );
}

/// `--start-group` starts a group with no record, once: after the group
/// has a record, a recreated topic is not a new group, and the flag does
/// not start it at `checkpoint.start` again (P4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_group_is_spent_once_the_group_has_a_record() {
    let (log, server) = (log(), LockServer::default());
    log.land(Kind::FirstStart, "group start", &checkpoint(100));
    let mut y = Instance::new("y", &log);
    y.role.start_group.store(true, Ordering::Relaxed);
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Publish));
    // The store is lost (a new volume) and the topic recreated.
    let mut fresh = Instance::new("y", &log);
    fresh.role.start_group = y.role.start_group.clone();
    log.recreate();
    server.cut(y.session.as_ref().unwrap());
    assert!(fresh.take_lock(&server).await);
    assert!(!fresh.role.start_group.load(Ordering::Relaxed), "spent");
    assert_eq!(fresh.begin(LEASE * 2).await, Some(Begun::Again));
    assert!(
        log.records().is_empty(),
        "no first start at checkpoint.start"
    );
}

/// A holder whose own checkpoint the servers cannot resume (another
/// server set's, or older than the binlog they hold) does not start a
/// group with it: it gives the lock back, saying how to set the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_the_servers_cannot_resume_does_not_start_the_group() {
    let (log, server) = (log(), LockServer::default());
    let mut y = Instance::new("y", &log);
    y.role.writer.write(&checkpoint(100)).unwrap();
    y.role.store_check = Some(Arc::new(|_| {
        Box::pin(async { Err("the binlog after it is purged".to_owned()) })
    }));
    assert!(y.take_lock(&server).await);
    assert_eq!(y.begin(LEASE * 2).await, Some(Begun::Again));
    assert!(log.records().is_empty(), "no first start from it");
    assert!(y.role.leadership.stepping_aside());
    // A store they can resume starts it.
    let mut z = Instance::new("z", &log);
    z.role.writer.write(&checkpoint(100)).unwrap();
    z.role.store_check = Some(Arc::new(|_| Box::pin(async { Ok(()) })));
    assert!(z.take_lock(&LockServer::default()).await);
    assert_eq!(z.begin(LEASE * 2).await, Some(Begun::Publish));
    assert_eq!(log.records()[0].kind, Kind::FirstStart);
}
