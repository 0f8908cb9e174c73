//! `mysql.publish_after_replicas = N`: a transaction is handed to the
//! producer only once N replicas among the candidates of `mysql.url` have
//! applied it, so that Kafka never holds the event of a transaction a
//! failover to one of them would lose (a *phantom*: with asynchronous
//! replication a primary that crashes takes its last transactions with it,
//! and the promoted replica never had them).
//!
//! Transactions are numbered in the order they are read. Every candidate
//! but the server streamed from is asked, on a connection of its own, to
//! wait for the oldest transaction it has not confirmed
//! (`MASTER_GTID_WAIT` on MariaDB, `WAIT_FOR_EXECUTED_GTID_SET` on MySQL,
//! at most [`WAIT`] per query); when the wait returns, its applied position
//! (`gtid_slave_pos`, `gtid_executed`) confirms every transaction it covers,
//! in order, so a replica that applies steadily confirms as it goes rather
//! than once it reaches the newest. The gate releases up to the N-th
//! highest number confirmed. A server that is not a replica never confirms
//! anything (its replication position does not move), and one that does
//! not answer counts for nothing: while fewer than N replicas keep up, the
//! forwarder holds, says so, and exports how long it has held and how far
//! each replica is behind.
//!
//! The checkpoint is unchanged by this: it still moves only after the
//! broker's ack, of transactions that passed the gate.
//!
//! One file per concern: this one holds the gate (what is wanted, what is
//! confirmed, what may be released); [`replica`] the task that follows one
//! replica; [`position`] whether a replica's position has applied a
//! transaction; [`wait`] the one-shot commands' wait.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::Opts;
use outbox_core::{Gtid, GtidState};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;

mod position;
mod replica;
mod wait;

use position::{applied, read_here, Position};
use replica::Replica;
pub use wait::wait_until_applied;

/// How long one wait query may block on a replica: the answer is then
/// "not yet", and the newest transaction is asked for again.
const WAIT: Duration = Duration::from_secs(1);

/// A replica that does not answer is tried again after this.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// How often a hold is logged while it lasts.
const LOG_HOLD_EVERY: Duration = Duration::from_secs(10);

/// The newest transaction read: its number and the GTID state after it
/// (of the transactions read this session).
#[derive(Debug, Clone, Default)]
struct Wanted {
    number: u64,
    state: Option<GtidState>,
}

/// The gate of one session (see the module doc).
pub struct ReplicaGate {
    need: usize,
    /// The number of the newest transaction read with a GTID.
    read: u64,
    /// The GTID state after every transaction read since the session began.
    state: Option<GtidState>,
    wanted: watch::Sender<Wanted>,
    released: watch::Receiver<u64>,
    confirmed: Arc<Confirmed>,
    tasks: Vec<JoinHandle<()>>,
    metrics: Arc<Metrics>,
    /// Since when the front transaction waits for the gate.
    held_since: Option<Instant>,
    last_hold_log: Option<Instant>,
}

/// What the replica tasks share: each one's highest confirmed number, and
/// the transactions read and not yet released, by number.
struct Confirmed {
    need: usize,
    by_replica: Mutex<Vec<u64>>,
    released: watch::Sender<u64>,
    unreleased: Mutex<VecDeque<(u64, Gtid)>>,
}

impl Confirmed {
    fn confirm(&self, replica: usize, number: u64) {
        let mut by_replica = self.by_replica.lock().expect("not poisoned");
        by_replica[replica] = by_replica[replica].max(number);
        let mut highest = by_replica.clone();
        highest.sort_unstable_by(|a, b| b.cmp(a));
        let released = highest.get(self.need - 1).copied().unwrap_or(0);
        self.released.send_if_modified(|current| {
            let moved = released > *current;
            if moved {
                *current = released;
            }
            moved
        });
    }
}

impl ReplicaGate {
    /// Starts asking every candidate but `source` (the index streamed from)
    /// for the transactions this session reads. `need` is at least 1.
    pub fn start(need: usize, candidates: &[Opts], source: usize, metrics: Arc<Metrics>) -> Self {
        let (wanted, _) = watch::channel(Wanted::default());
        let (released_tx, released) = watch::channel(0);
        let replicas: Vec<(usize, &Opts)> = candidates
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != source)
            .collect();
        let confirmed = Arc::new(Confirmed {
            need,
            by_replica: Mutex::new(vec![0; replicas.len()]),
            released: released_tx,
            unreleased: Mutex::default(),
        });
        metrics.reset_replicas();
        let tasks = replicas
            .into_iter()
            .enumerate()
            .map(|(slot, (index, opts))| {
                let replica = Replica {
                    slot,
                    label: format!("{}:{}", opts.ip_or_hostname(), opts.tcp_port()),
                    candidate: index + 1,
                    opts: opts.clone(),
                    confirmed: confirmed.clone(),
                    metrics: metrics.clone(),
                };
                tokio::spawn(replica.follow(wanted.subscribe()))
            })
            .collect();
        Self {
            need,
            read: 0,
            state: None,
            wanted,
            released,
            confirmed,
            tasks,
            metrics,
            held_since: None,
            last_hold_log: None,
        }
    }

    /// Numbers a transaction read. One without a GTID (a boundary the
    /// stream made up, such as the start of a binlog file) is not a
    /// transaction a replica applies: it waits only for those before it.
    /// Transactions are read in order; the replicas are asked for the
    /// newest by [`ReplicaGate::ask`].
    pub fn number(&mut self, gtid: Option<&Gtid>) -> u64 {
        let Some(gtid) = gtid else {
            return self.read;
        };
        let state = self.state.get_or_insert_with(|| match gtid {
            Gtid::MariaDb { .. } => GtidState::MariaDb(Default::default()),
            Gtid::MySql { .. } => GtidState::MySql(Default::default()),
        });
        state.apply(gtid);
        self.read += 1;
        self.confirmed
            .unreleased
            .lock()
            .expect("not poisoned")
            .push_back((self.read, gtid.clone()));
        self.read
    }

    /// Asks the replicas for everything numbered so far.
    pub fn ask(&self) {
        let Some(state) = &self.state else { return };
        let released = *self.released.borrow();
        let mut unreleased = self.confirmed.unreleased.lock().expect("not poisoned");
        while unreleased.front().is_some_and(|(n, _)| *n <= released) {
            unreleased.pop_front();
        }
        drop(unreleased);
        let number = self.read;
        self.wanted.send_if_modified(|wanted| {
            let newer = number > wanted.number;
            if newer {
                *wanted = Wanted {
                    number,
                    state: Some(state.clone()),
                };
            }
            newer
        });
    }

    /// Whether transaction `number` may be handed to the producer.
    pub fn releases(&self, number: u64) -> bool {
        number <= *self.released.borrow()
    }

    /// What a replica's task does once it sees a transaction applied:
    /// `confirm(slot, number)`, for the session loop's tests.
    #[cfg(test)]
    pub(crate) fn confirmer(&self) -> impl Fn(usize, u64) {
        let confirmed = self.confirmed.clone();
        move |slot, number| confirmed.confirm(slot, number)
    }

    /// Wakes when more is released.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.released.clone()
    }

    /// Notes whether the front transaction is held (its number, and when
    /// it was read), for the metrics and the log: the hold counts from the
    /// front's reading, so a replica steadily behind shows as held that long.
    pub fn note_front(&mut self, held: Option<(u64, Instant)>) {
        let Some((number, read_at)) = held else {
            if let Some(since) = self.held_since.take() {
                self.metrics.set_held_since(None);
                if self.last_hold_log.take().is_some() {
                    tracing::info!(
                        held_ms = since.elapsed().as_millis() as u64,
                        "publishing again: enough replicas have the held transactions"
                    );
                }
            }
            return;
        };
        if self.held_since != Some(read_at) {
            self.held_since = Some(read_at);
            self.metrics.set_held_since(Some(read_at));
        }
        // A hold shorter than a replica's ordinary apply is not news.
        let due = self
            .last_hold_log
            .map_or(read_at.elapsed() >= WAIT, |t| t.elapsed() >= LOG_HOLD_EVERY);
        if due {
            self.last_hold_log = Some(Instant::now());
            tracing::warn!(
                held_s = read_at.elapsed().as_secs(),
                need = self.need,
                transaction = number,
                replicas = %self.metrics.describe_replicas(),
                "holding: fewer than mysql.publish_after_replicas replicas have applied \
                 the next transaction; nothing that a failover could lose is published"
            );
        }
    }
}

impl Drop for ReplicaGate {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.metrics.set_held_since(None);
    }
}

impl Confirmed {
    /// The first unreleased transaction after `number` (the oldest
    /// unreleased when those after `number` were released meanwhile).
    fn unreleased_after(&self, number: u64) -> Option<(u64, Gtid)> {
        let unreleased = self.unreleased.lock().expect("not poisoned");
        let front = unreleased.front()?.0;
        let index = (number + 1).saturating_sub(front) as usize;
        unreleased.get(index).cloned()
    }

    /// The highest number up to which every unreleased transaction after
    /// `number` is applied at `position` (see [`applied`]); `number` when
    /// the next one is not. Transactions already released (N other
    /// replicas have them) are not asked about again.
    fn covered_from(&self, number: u64, position: &Position) -> u64 {
        let unreleased = self.unreleased.lock().expect("not poisoned");
        let Some(front) = unreleased.front().map(|(n, _)| *n) else {
            return number;
        };
        let mut reached = number.max(front - 1);
        let read_here = read_here(&unreleased, &position.applied);
        for (n, gtid) in unreleased.iter().skip((reached + 1 - front) as usize) {
            if !applied(position, gtid, *n, &read_here) {
                break;
            }
            reached = *n;
        }
        reached
    }
}

#[cfg(test)]
mod tests;
