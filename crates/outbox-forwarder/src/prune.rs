//! `prune` and `[retention]`: deleting outbox rows older than a cut-off,
//! and only rows whose events are known to be in Kafka.
//!
//! The candidates are read in a consistent snapshot, then the server's
//! binlog position is read: every row the snapshot shows was committed
//! before that position. A row inserted by a transaction still open is not
//! in the snapshot, however old its creation time, so it is never a
//! candidate before it commits. The candidates are then proved published
//! one of two ways:
//!
//! - **by the checkpoint** (inside `run`): the forwarder's stored
//!   checkpoint on the same server has reached the position. While it has
//!   not (the broker is down, the forwarder lags), nothing is deleted;
//! - **by Kafka** (the one-shot command): `verify`'s comparison finds the
//!   candidate's event id in the topics. A broker that cannot be read
//!   deletes nothing.
//!
//! Deletes go by the table's cursor column (see [`crate::backfill`]), at
//! most `batch` rows a statement, `pause` apart.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};
use outbox_checkpoint::Checkpoint;
use outbox_core::DefiniteError;
use outbox_source::server;
use tokio::sync::watch;

use crate::backfill::cursor_column;
use crate::meter::Meter;
use crate::shutdown::Shutdown;
use crate::verify::{self, Selection, VerifyOptions};
use crate::{ForwarderConfig, RetentionSection};

/// Server error: a privilege on the table is missing.
const ER_TABLEACCESS_DENIED: u16 = 1142;

/// How rows are proved published.
pub enum Proof {
    /// The checkpoint this process stores, as it moves.
    Checkpoint(watch::Receiver<Option<Checkpoint>>),
    /// Their event ids are in Kafka.
    Kafka,
}

/// What to delete and how gently.
#[derive(Debug, Clone)]
pub struct PruneOptions {
    pub older_than: Duration,
    pub batch: usize,
    pub pause: Duration,
    pub time_column: String,
    /// Candidates read per snapshot.
    pub round: usize,
}

impl From<&RetentionSection> for PruneOptions {
    fn from(section: &RetentionSection) -> Self {
        Self {
            older_than: Duration::from_secs(section.older_than_seconds),
            batch: section.batch,
            pause: Duration::from_millis(section.pause_ms),
            time_column: section.time_column.clone(),
            round: section.batch * 50,
        }
    }
}

/// What a prune did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Rows older than the cut-off seen in the snapshots.
    pub candidates: u64,
    pub deleted: u64,
    /// Candidates not proved published (kept).
    pub kept: u64,
}

impl std::fmt::Display for PruneReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rows older than the cut-off {}, deleted {}, kept (not proved in Kafka) {}",
            self.candidates, self.deleted, self.kept
        )
    }
}

/// One pass over every outbox table.
pub async fn prune(
    config: &ForwarderConfig,
    options: &PruneOptions,
    proof: &mut Proof,
) -> Result<PruneReport, DefiniteError> {
    config.may_prune()?;
    let (mut conn, info, _) = verify::source_connection(config).await?;
    let cutoff: Option<String> = conn
        .exec_first(
            "SELECT CAST(NOW(6) - INTERVAL ? SECOND AS CHAR)",
            (options.older_than.as_secs(),),
        )
        .await
        .map_err(verify::reading_tables)?;
    let cutoff = cutoff.unwrap_or_default();
    let mut report = PruneReport::default();
    let mut meter = Meter::new("prune", "rows", None);
    for (schema, table) in verify::outbox_tables(&mut conn, config).await? {
        let cursor =
            cursor_column(&mut conn, &schema, &table, &config.outbox.columns.event_id).await?;
        let target = Target {
            schema: &schema,
            table: &table,
            cursor: &cursor,
            cutoff: &cutoff,
        };
        let mut after: Option<Value> = None;
        loop {
            let (candidates, position) = target
                .candidates(&mut conn, config, options, after.as_ref())
                .await?;
            let Some((last, _)) = candidates.last() else {
                break;
            };
            after = Some(last.clone());
            report.candidates += candidates.len() as u64;
            let proved = proved(config, proof, &info, &position, &candidates).await?;
            report.kept += (candidates.len() - proved.len()) as u64;
            for batch in proved.chunks(options.batch) {
                report.deleted += target.delete(&mut conn, batch).await?;
                meter.tick(report.candidates, report.deleted);
                tokio::time::sleep(options.pause).await;
            }
            if candidates.len() < options.round {
                break;
            }
        }
    }
    let _ = conn.disconnect().await;
    meter.done(report.candidates, report.deleted);
    Ok(report)
}

/// One outbox table and the cut-off.
struct Target<'a> {
    schema: &'a str,
    table: &'a str,
    cursor: &'a str,
    cutoff: &'a str,
}

impl Target<'_> {
    /// Up to `round` rows older than the cut-off after `after`, as
    /// (cursor value, event id), read in one snapshot, and a binlog
    /// position every one of them was committed before.
    async fn candidates(
        &self,
        conn: &mut Conn,
        config: &ForwarderConfig,
        options: &PruneOptions,
        after: Option<&Value>,
    ) -> Result<(Vec<(Value, String)>, outbox_core::BinlogPosition), DefiniteError> {
        let (schema, table, cursor) = (self.schema, self.table, self.cursor);
        let event_id = &config.outbox.columns.event_id;
        let mut sql = format!(
            "SELECT `{cursor}`, CAST(`{event_id}` AS CHAR) FROM `{schema}`.`{table}` \
             WHERE `{}` < ?",
            options.time_column
        );
        let mut params: Vec<Value> = vec![self.cutoff.into()];
        if let Some(after) = after {
            sql.push_str(&format!(" AND `{cursor}` > ?"));
            params.push(after.clone());
        }
        sql.push_str(&format!(" ORDER BY `{cursor}` LIMIT {}", options.round));
        conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            .await
            .map_err(verify::reading_tables)?;
        let rows: Vec<(Value, String)> = conn
            .exec(sql, params)
            .await
            .map_err(verify::reading_tables)?;
        // Read after the snapshot: it shows nothing committed after this.
        let position = server::current_position(conn)
            .await
            .map_err(crate::resume::definite)?;
        conn.query_drop("COMMIT")
            .await
            .map_err(verify::reading_tables)?;
        Ok((rows, position))
    }

    /// Deletes `batch` (cursor values) where still older than the cut-off.
    async fn delete(&self, conn: &mut Conn, batch: &[Value]) -> Result<u64, DefiniteError> {
        let marks = vec!["?"; batch.len()].join(", ");
        let sql = format!(
            "DELETE FROM `{}`.`{}` WHERE `{}` IN ({marks})",
            self.schema, self.table, self.cursor
        );
        conn.exec_drop(sql, batch.to_vec()).await.map_err(|e| {
            let (schema, table) = (self.schema, self.table);
            let grant = match &e {
                mysql_async::Error::Server(server) if server.code == ER_TABLEACCESS_DENIED => {
                    format!(
                        " (deleting outbox rows needs `GRANT DELETE ON `{schema}`.`{table}` TO` \
                         the forwarder's user)"
                    )
                }
                _ => String::new(),
            };
            DefiniteError::Config(format!("deleting from {schema}.{table}: {e}{grant}"))
        })?;
        Ok(conn.affected_rows())
    }
}

/// The cursor values of the candidates proved published.
async fn proved(
    config: &ForwarderConfig,
    proof: &mut Proof,
    info: &server::ServerInfo,
    position: &outbox_core::BinlogPosition,
    candidates: &[(Value, String)],
) -> Result<Vec<Value>, DefiniteError> {
    match proof {
        Proof::Checkpoint(saved) => {
            let under = saved.borrow().as_ref().is_some_and(|checkpoint| {
                checkpoint.source.is_same_server(&info.identity)
                    && position
                        .compare(&checkpoint.position)
                        .is_some_and(|o| o.is_le())
            });
            if !under {
                return Ok(Vec::new());
            }
            Ok(candidates
                .iter()
                .map(|(cursor, _)| cursor.clone())
                .collect())
        }
        Proof::Kafka => {
            let ids: Vec<String> = candidates.iter().map(|(_, id)| id.clone()).collect();
            let verified = verify::verify(
                config,
                &VerifyOptions {
                    selection: Selection {
                        event_ids: ids,
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await?;
            let missing: HashSet<String> = verified.missing.into_iter().collect();
            Ok(candidates
                .iter()
                .filter(|(_, id)| !missing.contains(id))
                .map(|(cursor, _)| cursor.clone())
                .collect())
        }
    }
}

/// `[retention]` inside `run`: a prune every interval, proved by the
/// checkpoint this process stores, until `shutdown`. Failures are logged
/// and counted; the next interval tries again.
pub async fn retention(
    config: ForwarderConfig,
    section: RetentionSection,
    saved: watch::Receiver<Option<Checkpoint>>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    mut shutdown: Shutdown,
) {
    let options = PruneOptions::from(&section);
    let mut proof = Proof::Checkpoint(saved);
    let interval = Duration::from_secs(section.interval_seconds);
    loop {
        let started = Instant::now();
        tokio::select! {
            result = prune(&config, &options, &mut proof) => match result {
                Ok(report) => {
                    metrics.retention_pass(report.deleted, report.kept, true);
                    tracing::info!(deleted = report.deleted, kept = report.kept, "retention: {report}");
                }
                Err(e) => {
                    metrics.retention_pass(0, 0, false);
                    tracing::warn!(error = %e, "retention: the pass failed; the next one tries again");
                }
            },
            _ = shutdown.requested() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(interval.saturating_sub(started.elapsed())) => {}
            _ = shutdown.requested() => return,
        }
    }
}
