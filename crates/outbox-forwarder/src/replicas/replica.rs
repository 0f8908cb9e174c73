//! One replica's task: it connects, asks the replica to wait for the
//! oldest transaction it has not confirmed, and confirms what its applied
//! position covers.

use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use outbox_core::GtidState;
use outbox_source::server;
use tokio::sync::watch;

use crate::metrics::Metrics;

use super::position::Position;
use super::{Confirmed, Wanted, RECONNECT_AFTER, WAIT};

/// One replica's task.
pub(super) struct Replica {
    pub(super) slot: usize,
    pub(super) label: String,
    /// Its place in `mysql.url`, from 1.
    pub(super) candidate: usize,
    pub(super) opts: Opts,
    pub(super) confirmed: Arc<Confirmed>,
    pub(super) metrics: Arc<Metrics>,
}

impl Replica {
    pub(super) async fn follow(self, mut wanted: watch::Receiver<Wanted>) {
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
