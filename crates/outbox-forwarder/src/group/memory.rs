//! In-memory stand-ins for the group's log and the lock's server: what the
//! role loop's unit tests replay the model's counterexamples through.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_checkpoint::Checkpoint;

use super::lease::{Asked, Holder, LockSession, Pinged};
use super::log::{Creating, GroupCheckpoint, GroupLog, Kind, LogError, Record};

/// A checkpoint at `pos` of a binlog file of one server: what the
/// group's tests share.
pub fn checkpoint(pos: u64) -> Checkpoint {
    let source = outbox_core::SourceIdentity {
        server_uuid: None,
        server_id: 1,
        host: "db1:3306".into(),
    };
    Checkpoint::new(outbox_core::BinlogPosition::new("bin.000001", pos), source)
}

/// A record on the in-memory log.
#[derive(Debug, Clone)]
pub struct Stored {
    pub kind: Kind,
    pub by: String,
    pub checkpoint: Checkpoint,
}

#[derive(Default)]
struct LogState {
    records: Vec<Stored>,
    /// Queued while the broker was paused, with when each expires.
    queued: Vec<(Stored, Instant)>,
    paused: bool,
    /// Instances whose records wait (a slow connection of theirs).
    slow: Vec<String>,
    missing: bool,
    unreadable: bool,
    /// Reads so far, and what happens after a given one.
    reads: usize,
    after_read: Vec<(usize, Stored)>,
    /// Runs once a term's mark has landed.
    after_mark: Option<Box<dyn FnOnce() + Send>>,
}

impl LogState {
    fn waits(&self, by: &str) -> bool {
        self.paused || self.missing || self.slow.iter().any(|s| s == by)
    }

    /// What was queued and may go through now lands, unless it expired
    /// (then it never does).
    fn deliver(&mut self) {
        let now = Instant::now();
        let queued = std::mem::take(&mut self.queued);
        for (record, expires) in queued {
            if now >= expires {
                continue;
            }
            if self.waits(&record.by) {
                self.queued.push((record, expires));
            } else {
                self.records.push(record);
            }
        }
    }
}

/// The group's log in memory: one partition, offsets from 0, a broker that
/// can be paused (appends then wait, and expire after `expiry`), a topic
/// that can be missing, unreadable, or recreated (offsets start again).
pub struct MemoryLog {
    state: Mutex<LogState>,
    expiry: Duration,
}

impl MemoryLog {
    /// A log whose queued records expire after `expiry` (as an instance's
    /// share producer's: [`super::share::expiry`]).
    pub fn new(expiry: Duration) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            expiry,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().expect("not poisoned")
    }

    /// The broker stops taking records (`true`) or takes them again, and
    /// then delivers what was queued and has not expired.
    pub fn pause(&self, paused: bool) {
        let mut state = self.state();
        state.paused = paused;
        state.deliver();
    }

    /// `by`'s records wait (`true`), or go through again, and then what it
    /// queued lands unless it expired.
    pub fn slow(&self, by: &str, slow: bool) {
        let mut state = self.state();
        state.slow.retain(|s| s != by);
        if slow {
            state.slow.push(by.into());
        }
        state.deliver();
    }

    pub fn set_missing(&self, missing: bool) {
        self.state().missing = missing;
    }

    pub fn set_unreadable(&self, unreadable: bool) {
        self.state().unreadable = unreadable;
    }

    /// The topic deleted and created again: its records gone, offsets
    /// from 0.
    pub fn recreate(&self) {
        let mut state = self.state();
        state.records.clear();
        state.queued.clear();
    }

    /// Appends a record of another instance, as if it had landed now.
    pub fn land(&self, kind: Kind, by: &str, checkpoint: &Checkpoint) -> i64 {
        let mut state = self.state();
        state.records.push(Stored {
            kind,
            by: by.into(),
            checkpoint: checkpoint.clone(),
        });
        state.records.len() as i64 - 1
    }

    /// After the `n`th read of the newest record (from 1), `record` lands:
    /// another instance's record between two steps of the one under test.
    pub fn land_after_read(&self, n: usize, kind: Kind, by: &str, checkpoint: &Checkpoint) {
        self.state().after_read.push((
            n,
            Stored {
                kind,
                by: by.into(),
                checkpoint: checkpoint.clone(),
            },
        ));
    }

    /// Once the next term's mark lands, `then` runs (a fault between the
    /// mark and the next step of its holder).
    pub fn after_mark(&self, then: impl FnOnce() + Send + 'static) {
        self.state().after_mark = Some(Box::new(then));
    }

    /// Every record, oldest first.
    pub fn records(&self) -> Vec<Stored> {
        self.state().records.clone()
    }

    /// The records of the group's checkpoint (marks passed over), as
    /// positions' files' offsets: what the group's checkpoint went
    /// through.
    pub fn checkpoints(&self) -> Vec<u64> {
        self.records()
            .iter()
            .filter(|r| r.kind != Kind::Term)
            .map(|r| r.checkpoint.position.pos)
            .collect()
    }

    fn stored(record: Record<'_>) -> Stored {
        Stored {
            kind: record.kind,
            by: record.by.into(),
            checkpoint: record.checkpoint.clone(),
        }
    }
}

impl GroupLog for MemoryLog {
    fn topic(&self) -> &str {
        "memory"
    }

    fn newest(&self, _deadline: Instant) -> Result<GroupCheckpoint, LogError> {
        let mut state = self.state();
        if state.missing {
            return Err(LogError::Missing("memory".into()));
        }
        if state.unreadable {
            return Err(LogError::Failed("the log cannot be read".into()));
        }
        state.reads += 1;
        let newest = state
            .records
            .iter()
            .enumerate()
            .rev()
            .find(|(_, r)| r.kind != Kind::Term)
            .map(|(offset, r)| GroupCheckpoint::Found {
                checkpoint: Box::new(r.checkpoint.clone()),
                handed_over_at_ms: (r.kind == Kind::HandOver).then_some(r.checkpoint.written_at_ms),
                offset: offset as i64,
            })
            .unwrap_or(GroupCheckpoint::NeverStarted);
        let reads = state.reads;
        let landing: Vec<Stored> = state
            .after_read
            .iter()
            .filter(|(n, _)| *n == reads)
            .map(|(_, r)| r.clone())
            .collect();
        state.records.extend(landing);
        Ok(newest)
    }

    fn append(&self, record: Record<'_>) {
        let mut state = self.state();
        let stored = Self::stored(record);
        if state.waits(&stored.by) {
            let expires = Instant::now() + self.expiry;
            state.queued.push((stored, expires));
        } else {
            state.records.push(stored);
        }
    }

    fn append_acked(&self, record: Record<'_>) -> Result<i64, String> {
        let mut state = self.state();
        if state.paused || state.slow.iter().any(|s| s == record.by) {
            return Err("the broker did not acknowledge the record in time".into());
        }
        if state.missing {
            return Err("the topic does not exist".into());
        }
        state.records.push(Self::stored(record));
        if record.kind == Kind::Term {
            if let Some(then) = state.after_mark.take() {
                then();
            }
        }
        Ok(state.records.len() as i64 - 1)
    }

    fn any_between(&self, from: i64, to: i64, _deadline: Instant) -> Result<bool, String> {
        let state = self.state();
        Ok(from.max(0) < to.min(state.records.len() as i64))
    }

    fn create(&self) -> Creating<'_> {
        self.state().missing = false;
        Box::pin(async { Ok(()) })
    }

    fn settle(&self, _timeout: Duration) {
        self.state().deliver();
    }
}

#[derive(Default)]
struct ServerState {
    owner: Option<u64>,
    next: u64,
    cut: Vec<u64>,
    read_only: bool,
}

/// The lock's server in memory: one named lock, sessions that can be cut.
#[derive(Clone, Default)]
pub struct LockServer {
    state: Arc<Mutex<ServerState>>,
}

impl LockServer {
    /// A new session (a connection) on it.
    pub fn session(&self) -> MemoryLock {
        let mut state = self.state.lock().expect("not poisoned");
        state.next += 1;
        MemoryLock {
            server: self.clone(),
            id: state.next,
        }
    }

    /// The session is cut (a `KILL`, a proxy reset): the server frees its
    /// lock at once, and its next query fails.
    pub fn cut(&self, session: &MemoryLock) {
        self.cut_id(session.id);
    }

    /// [`LockServer::cut`] by the session's id.
    pub fn cut_id(&self, id: u64) {
        let mut state = self.state.lock().expect("not poisoned");
        state.cut.push(id);
        if state.owner == Some(id) {
            state.owner = None;
        }
    }

    pub fn set_read_only(&self, read_only: bool) {
        self.state.lock().expect("not poisoned").read_only = read_only;
    }

    /// Whether `session` holds the lock, as the server knows it.
    pub fn held_by(&self, session: &MemoryLock) -> bool {
        self.state.lock().expect("not poisoned").owner == Some(session.id)
    }
}

/// A session on a [`LockServer`].
pub struct MemoryLock {
    server: LockServer,
    id: u64,
}

impl MemoryLock {
    pub fn id(&self) -> u64 {
        self.id
    }

    fn with<T>(&self, f: impl FnOnce(&mut ServerState) -> Result<T, String>) -> Result<T, String> {
        let mut state = self.server.state.lock().expect("not poisoned");
        if state.cut.contains(&self.id) {
            return Err("the connection was cut".into());
        }
        f(&mut state)
    }

    fn end(&self) {
        let mut state = self.server.state.lock().expect("not poisoned");
        if state.owner == Some(self.id) {
            state.owner = None;
        }
    }
}

impl LockSession for MemoryLock {
    async fn ask(&mut self) -> Result<Asked, String> {
        let id = self.id;
        self.with(|s| {
            Ok(match s.owner {
                _ if s.read_only => Asked::ReadOnly,
                None => {
                    s.owner = Some(id);
                    Asked::Ours
                }
                Some(owner) if owner == id => Asked::Ours,
                Some(_) => Asked::Held,
            })
        })
    }

    async fn ping(&mut self) -> Result<Pinged, String> {
        let id = self.id;
        self.with(|s| {
            Ok(match s.owner {
                Some(owner) if owner == id && s.read_only => Pinged::ReadOnly,
                Some(owner) if owner == id => Pinged::Ours,
                _ => Pinged::Lost,
            })
        })
    }

    async fn holder(&mut self) -> Option<Holder> {
        None
    }

    async fn release(self) {
        self.end();
    }

    async fn close(self) {
        self.end();
    }
}
