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

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use outbox_core::{Gtid, GtidState, MariaDbGtidState};
use outbox_source::server;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;

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

/// One replica's task.
struct Replica {
    slot: usize,
    label: String,
    /// Its place in `mysql.url`, from 1.
    candidate: usize,
    opts: Opts,
    confirmed: Arc<Confirmed>,
    metrics: Arc<Metrics>,
}

impl Replica {
    async fn follow(self, mut wanted: watch::Receiver<Wanted>) {
        let mut confirmed = 0;
        let mut unreachable_logged = false;
        loop {
            let connected =
                tokio::time::timeout(crate::resume::PROBE_TIMEOUT, server::connect(&self.opts))
                    .await;
            let mut conn = match connected {
                Ok(Ok(conn)) => conn,
                other => {
                    if !unreachable_logged {
                        let why = match other {
                            Ok(Err(e)) => e.to_string(),
                            _ => "no answer".into(),
                        };
                        tracing::warn!(replica = %self.label, candidate = self.candidate, %why, "replica unreachable: it confirms nothing until it answers");
                        unreachable_logged = true;
                    }
                    let behind = wanted.borrow().number.saturating_sub(confirmed);
                    self.metrics.set_replica(&self.label, false, behind);
                    tokio::time::sleep(RECONNECT_AFTER).await;
                    continue;
                }
            };
            unreachable_logged = false;
            let filtered = match server::replication_filters(&mut conn).await {
                Ok(Some(filters)) if filters.is_empty() => None,
                Ok(Some(filters)) => Some(format!(
                    "the replica replicates with replication filters ({}): it confirms \
                     nothing (remove the filters, or the server from mysql.url)",
                    filters.join(", ")
                )),
                // It may have any.
                Ok(None) => Some(
                    "cannot read the replica's replication filters (grant SLAVE MONITOR and \
                     BINLOG MONITOR on MariaDB, REPLICATION CLIENT on MySQL): it confirms \
                     nothing"
                        .to_owned(),
                ),
                Err(e) => {
                    // Not read this time: asked again on a new connection.
                    tracing::debug!(replica = %self.label, error = %e, "reading the replica's filters failed");
                    let _ = conn.disconnect().await;
                    tokio::time::sleep(RECONNECT_AFTER).await;
                    continue;
                }
            };
            if let Some(why) = filtered {
                // Its position passes transactions whose rows it may have
                // dropped: it proves nothing, for as long as the gate.
                tracing::warn!(replica = %self.label, candidate = self.candidate, "{why}");
                let _ = conn.disconnect().await;
                self.metrics.set_replica(&self.label, false, 0);
                while wanted.changed().await.is_ok() {}
                return;
            }
            match self.wait_on(&mut conn, &mut wanted, &mut confirmed).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(replica = %self.label, candidate = self.candidate, error = %e, "lost the replica's connection");
                    let _ = tokio::time::timeout(WAIT, conn.disconnect()).await;
                    tokio::time::sleep(RECONNECT_AFTER).await;
                }
            }
        }
    }

    /// Asks the replica to wait (at most [`WAIT`]) until it reached
    /// `target`, and in the same round trip where it then stands: its
    /// applied position, `gtid_slave_pos` on MariaDB (what it replicated,
    /// not what it wrote) with `gtid_binlog_state` (the last GTID it logged
    /// of each server), `gtid_executed` on MySQL; and whether it takes
    /// writes (a primary, whose position proves nothing). Were the server
    /// to read the position before the wait ends, it would be older, never
    /// newer: it can only confirm less. Returns whether the wait reached
    /// `target`.
    async fn wait_for(
        &self,
        conn: &mut Conn,
        mysql: bool,
        target: &str,
    ) -> Result<(bool, Position, bool), String> {
        let query = if mysql {
            "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?), @@gtid_executed, '', @@global.read_only"
        } else {
            "SELECT MASTER_GTID_WAIT(?, ?), @@gtid_slave_pos, @@gtid_binlog_state, \
             @@global.read_only"
        };
        type Answer = (Option<i64>, Option<String>, Option<String>, i64);
        let asked = tokio::time::timeout(
            WAIT * 3,
            conn.exec_first::<Answer, _, _>(query, (target, WAIT.as_secs())),
        )
        .await;
        let (waited, text, logged, read_only) = match asked {
            Ok(Ok(Some(answer))) => answer,
            Ok(Ok(None)) => return Err(format!("{query} answered nothing")),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err(format!("{query} did not answer in {:?}", WAIT * 3)),
        };
        // 0: reached; -1 (MariaDB) or 1 (MySQL): not yet; NULL: refused.
        let Some(waited) = waited else {
            return Err(format!("{query} answered NULL for {target}"));
        };
        let text = text.unwrap_or_default().replace('\n', "");
        let parsed = if mysql {
            text.parse()
                .map(GtidState::MySql)
                .map_err(|e| e.to_string())
        } else {
            text.parse()
                .map(GtidState::MariaDb)
                .map_err(|e| e.to_string())
        };
        let position = Position {
            applied: parsed.map_err(|e| format!("{query}: {e}"))?,
            logged: logged
                .unwrap_or_default()
                .parse()
                .map_err(|e| format!("gtid_binlog_state: {e}"))?,
        };
        Ok((waited == 0, position, read_only == 0))
    }

    /// Asks the replica to wait for the oldest transaction it has not
    /// confirmed, and confirms what its position then covers; again and
    /// again, until the gate is gone.
    async fn wait_on(
        &self,
        conn: &mut Conn,
        wanted: &mut watch::Receiver<Wanted>,
        confirmed: &mut u64,
    ) -> Result<(), String> {
        let mut other_server_logged = false;
        let mut primary_logged = false;
        loop {
            let newest = wanted.borrow_and_update().clone();
            let behind = newest.number.saturating_sub(*confirmed);
            self.metrics.set_replica(&self.label, true, behind);
            if newest.number <= *confirmed {
                if wanted.changed().await.is_err() {
                    return Ok(());
                }
                continue;
            }
            let Some(state) = &newest.state else {
                continue;
            };
            let mysql = matches!(state, GtidState::MySql(_));
            // The next transaction to confirm (the oldest unreleased one);
            // none when all were released meanwhile: then the whole state.
            let next = self.confirmed.unreleased_after(*confirmed);
            let target = match &next {
                Some((_, gtid)) => gtid.to_string(),
                None => state.to_string(),
            };
            let (reached_target, position, writable) = self.wait_for(conn, mysql, &target).await?;
            if writable {
                // A primary: what it executed it may have written itself,
                // and its replication position does not follow the source.
                if !primary_logged {
                    tracing::warn!(replica = %self.label, candidate = self.candidate, "takes writes: a primary confirms nothing for mysql.publish_after_replicas");
                    primary_logged = true;
                }
                tokio::time::sleep(WAIT).await;
                continue;
            }
            primary_logged = false;
            let reached = match next {
                Some(_) => self.confirmed.covered_from(*confirmed, &position),
                None if position.applied.has_applied_all(state) => newest.number,
                None => *confirmed,
            };
            if reached > *confirmed {
                *confirmed = reached;
                self.confirmed.confirm(self.slot, reached);
            } else if reached_target {
                // The wait saw the numbers, but the position is not one
                // this session can place: asking again at once would spin.
                if !other_server_logged {
                    tracing::warn!(replica = %self.label, candidate = self.candidate, replica_position = %position.applied, wanted = %target, "the replica's position is a transaction not read here yet (or another server's history, after a failover): it counts once the forwarder reads it");
                    other_server_logged = true;
                }
                let _ = tokio::time::timeout(WAIT, wanted.changed()).await;
            }
        }
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

/// For each domain of a MariaDB position, the number under which this
/// session read the GTID the position ends at, if it did.
fn read_here(unreleased: &VecDeque<(u64, Gtid)>, position: &GtidState) -> Vec<(u32, u64)> {
    let GtidState::MariaDb(position) = position else {
        return Vec::new();
    };
    position
        .domains()
        .iter()
        .filter_map(|(&d, &(s, q))| {
            unreleased.iter().rev().find_map(|(n, gtid)| match gtid {
                Gtid::MariaDb {
                    domain,
                    server,
                    seq,
                } if (*domain, *server, *seq) == (d, s, q) => Some((d, *n)),
                _ => None,
            })
        })
        .collect()
}

/// Whether a replica at `position` has applied transaction `number`
/// (`gtid`): its applied position [`GtidState::has_applied`] it; or (MariaDB) it logged a
/// transaction of the same server at or past it (a server's transactions
/// keep their order everywhere); or its position in the domain is a
/// transaction this session read after it (`read_here`: the order of a
/// domain is the same on every server, whichever servers logged its
/// transactions, as after a failover, where the new primary's binlog holds
/// the old primary's transactions and then its own).
fn applied(position: &Position, gtid: &Gtid, number: u64, read_here: &[(u32, u64)]) -> bool {
    if position.applied.has_applied(gtid) {
        return true;
    }
    let Gtid::MariaDb {
        domain,
        server,
        seq,
    } = gtid
    else {
        return false;
    };
    position.logged.has_logged(*domain, *server, *seq)
        || read_here.iter().any(|(d, at)| d == domain && *at >= number)
}

/// Where a replica stands.
struct Position {
    applied: GtidState,
    /// MariaDB's `gtid_binlog_state`: per domain and server, the last
    /// sequence number the replica logged (with `log_slave_updates`, what
    /// it replicated too); empty on MySQL.
    logged: MariaDbGtidState,
}

/// For the one-shot commands that publish from the tables (`backfill`,
/// `repair-gap`): waits until `need` of the candidates other than `source`
/// have applied `state` (`MASTER_GTID_WAIT` / `WAIT_FOR_EXECUTED_GTID_SET`),
/// at most `timeout`; says how many had when they have not. A replica with
/// replication filters counts for nothing, as under `run`.
pub async fn wait_until_applied(
    candidates: &[Opts],
    source: usize,
    need: usize,
    state: &GtidState,
    timeout: Duration,
) -> Result<(), String> {
    let (function, target) = match state {
        GtidState::MariaDb(pos) => ("MASTER_GTID_WAIT", pos.to_string()),
        GtidState::MySql(set) => ("WAIT_FOR_EXECUTED_GTID_SET", set.to_string()),
    };
    let query = format!("SELECT {function}(?, ?)");
    let applied = |opts: Opts| {
        let (query, target) = (query.clone(), target.clone());
        async move {
            let mut conn = server::connect(&opts).await.ok()?;
            // Filtered, or filters it may not read: it proves nothing.
            let filtered = !matches!(
                server::replication_filters(&mut conn).await,
                Ok(Some(f)) if f.is_empty()
            );
            let waited: Option<Option<i64>> = match filtered {
                true => None,
                false => conn
                    .exec_first(query, (target, timeout.as_secs().max(1)))
                    .await
                    .ok(),
            };
            let _ = conn.disconnect().await;
            // 0: applied; -1 (MariaDB) or 1 (MySQL): not in time.
            (waited.flatten() == Some(0)).then_some(())
        }
    };
    let asked = candidates
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != source)
        .map(|(_, opts)| tokio::time::timeout(timeout + WAIT * 3, applied(opts.clone())));
    let have = futures_util::future::join_all(asked)
        .await
        .into_iter()
        .filter(|r| matches!(r, Ok(Some(()))))
        .count();
    if have >= need {
        Ok(())
    } else {
        Err(format!(
            "{have} of the other candidates applied {target} within {timeout:?} ({need} needed)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(text: &str) -> outbox_core::MariaDbGtidPos {
        text.parse().unwrap()
    }

    #[test]
    fn the_gate_releases_up_to_what_the_nth_replica_has() {
        let (released, watch) = watch::channel(0);
        let confirmed = Confirmed {
            need: 2,
            by_replica: Mutex::new(vec![0; 3]),
            released,
            unreleased: Mutex::default(),
        };
        confirmed.confirm(0, 10);
        assert_eq!(*watch.borrow(), 0, "one replica of the two needed");
        confirmed.confirm(2, 4);
        assert_eq!(*watch.borrow(), 4);
        confirmed.confirm(1, 12);
        assert_eq!(*watch.borrow(), 10);
        // An answer about an older transaction moves nothing back.
        confirmed.confirm(0, 3);
        assert_eq!(*watch.borrow(), 10);
    }

    fn gtid(text: &str) -> Gtid {
        let mut parts = text.split('-').map(|p| p.parse::<u64>().unwrap());
        let (domain, server, seq) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        Gtid::MariaDb {
            domain: domain as u32,
            server: server as u32,
            seq,
        }
    }

    #[test]
    fn a_replica_confirms_in_order_as_far_as_its_position_covers() {
        let (released, _watch) = watch::channel(0);
        let confirmed = Confirmed {
            need: 1,
            by_replica: Mutex::new(vec![0]),
            released,
            unreleased: Mutex::new(
                [(1, "0-1-11"), (2, "1-1-5"), (3, "0-1-12"), (4, "0-1-13")]
                    .into_iter()
                    .map(|(n, g)| (n, gtid(g)))
                    .collect(),
            ),
        };
        let at = |text: &str| Position {
            applied: GtidState::MariaDb(pos(text)),
            logged: MariaDbGtidState::default(),
        };
        assert_eq!(confirmed.unreleased_after(0).unwrap().0, 1);
        assert_eq!(confirmed.unreleased_after(2).unwrap().1, gtid("0-1-12"));
        // Domain 1 not applied yet: the walk stops before it, though
        // domain 0 is further on.
        assert_eq!(confirmed.covered_from(0, &at("0-1-13,1-1-4")), 1);
        assert_eq!(confirmed.covered_from(0, &at("0-1-12,1-1-5")), 3);
        assert_eq!(confirmed.covered_from(3, &at("0-1-13,1-1-5")), 4);
        // Another server's numbers confirm nothing.
        assert_eq!(confirmed.covered_from(0, &at("0-2-40,1-1-5")), 0);
        // Released without this replica: it goes on from the oldest
        // unreleased one.
        confirmed.unreleased.lock().unwrap().pop_front();
        confirmed.unreleased.lock().unwrap().pop_front();
        assert_eq!(confirmed.unreleased_after(0).unwrap().0, 3);
        assert_eq!(confirmed.covered_from(0, &at("0-1-13,1-1-5")), 4);
    }

    /// After a failover the new primary's binlog holds the old primary's
    /// last transactions, then its own; its replicas' positions are soon
    /// its own GTIDs, of which the sequence numbers say nothing.
    #[test]
    fn the_old_primarys_transactions_on_the_new_one_are_confirmed_by_its_replicas() {
        let (released, _watch) = watch::channel(0);
        let log = |entries: &[(u64, &str)]| -> VecDeque<(u64, Gtid)> {
            entries.iter().map(|(n, g)| (*n, gtid(g))).collect()
        };
        let confirmed = Confirmed {
            need: 1,
            by_replica: Mutex::new(vec![0]),
            released,
            unreleased: Mutex::new(log(&[(1, "0-1-481"), (2, "0-1-482"), (3, "0-2-483")])),
        };
        let position = |applied: &str, logged: &str| Position {
            applied: GtidState::MariaDb(pos(applied)),
            logged: logged.parse().unwrap(),
        };
        // Its position is a transaction read here: everything before it.
        assert_eq!(confirmed.covered_from(0, &position("0-2-483", "")), 3);
        // Not read yet, but it logged the old primary's up to 482 and its
        // new primary's up to 490.
        assert_eq!(
            confirmed.covered_from(0, &position("0-2-490", "0-1-482,0-2-490")),
            3
        );
        // A replica that never had the old primary's 481 (it followed the
        // new primary, which lacks it) confirms nothing: read from the old
        // primary, 481 would be a phantom.
        let confirmed = Confirmed {
            need: 1,
            by_replica: Mutex::new(vec![0]),
            released: watch::channel(0).0,
            unreleased: Mutex::new(log(&[(1, "0-1-481")])),
        };
        assert_eq!(
            confirmed.covered_from(0, &position("0-2-530", "0-1-480,0-2-530")),
            0
        );
    }

    #[test]
    fn a_mysql_replica_covers_what_its_executed_set_holds() {
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let executed = GtidState::MySql(format!("{uuid}:1-10").parse().unwrap());
        let at = |gno| Gtid::MySql {
            uuid: uuid.into(),
            tag: None,
            gno,
        };
        assert!(executed.has_applied(&at(10)));
        assert!(!executed.has_applied(&at(11)));
        let wanted = GtidState::MySql(format!("{uuid}:5-10").parse().unwrap());
        assert!(executed.has_applied_all(&wanted));
        let wanted = GtidState::MySql(format!("{uuid}:5-11").parse().unwrap());
        assert!(!executed.has_applied_all(&wanted));
    }
}
