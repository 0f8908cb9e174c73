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
//! - **by Kafka** (`prune`, and `[retention]` too): `verify`'s comparison
//!   finds the candidate's message (its table and event id, signed where a
//!   key is set) in the topics. The window the rows older than the cut-off
//!   need is read once per pass ([`super::window`]), not the topics'
//!   history. A broker that cannot be read deletes nothing. Only this
//!   proves a row, not where it sits: a row that never reached the binlog
//!   (a `sql_log_bin=0` session, a binlog filter on the primary), or the
//!   older rows of a table the line of checkpoints did not stream then, is
//!   kept;
//! - **and by the checkpoint** (`[retention]`, inside `run`): the
//!   forwarder's stored checkpoint on the same server has also reached the
//!   position, waited for a few flushes (on a primary written continuously
//!   the checkpoint always trails the position just read). While it has
//!   not (the broker is down, the forwarder lags), nothing is deleted.
//!
//! `[retention]` only looks at rows created since the checkpoints' line of
//! streaming began ([`Checkpoint::streaming_since_ms`]): rows before it (a
//! first start at `latest`, a checkpoint moved by hand) were never
//! published by it. Deletes go by the primary key, at most `batch` rows a
//! statement, `pause` apart, only rows still older than the cut-off, and
//! only on the writable primary (a replica would then differ from it).

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};
use outbox_checkpoint::Checkpoint;
use outbox_core::sql::{Ident, Qualified};
use outbox_core::DefiniteError;
use outbox_source::server;
use tokio::sync::watch;

use super::key::PrimaryKey;
use super::meter::Meter;
use super::verify::{self, Selection, VerifyOptions};
use super::window::Published;
use crate::config::{ForwarderConfig, RetentionSection};
use crate::shutdown::Shutdown;

/// Candidates per snapshot at most: a snapshot is held open while its
/// candidates are read, and their keys are kept until deleted.
pub const MAX_ROUND: usize = 10_000;

/// Beyond two checkpoint flushes, how long a round waits for the
/// checkpoint to pass the position its snapshot was read at (the acks of
/// the transactions in between).
const CHECKPOINT_WAIT: Duration = Duration::from_secs(2);

/// Server error: a privilege on the table is missing.
const ER_TABLEACCESS_DENIED: u16 = 1142;

/// How rows are proved published.
pub enum Proof {
    /// Their messages are in Kafka, and the checkpoint this process
    /// stores, as it moves, has passed them.
    Checkpoint(watch::Receiver<Option<Checkpoint>>),
    /// Their messages are in Kafka.
    Kafka,
}

/// What to delete and how gently.
#[derive(Debug, Clone)]
pub struct PruneOptions {
    pub older_than: Duration,
    pub batch: usize,
    pub pause: Duration,
    pub time_column: String,
    /// Candidates per snapshot.
    pub round: usize,
    /// Proved by the checkpoint: how long after its line of streaming
    /// began rows are looked at (`retention.clock_margin_seconds`).
    pub floor_margin: Duration,
    /// Proved by Kafka: how the window is read.
    pub kafka: super::window::Reading,
}

impl PruneOptions {
    /// Rows older than `older_than`, `batch` (at least 1) a statement,
    /// `pause` apart; as many candidates per snapshot as 50 batches.
    pub fn new(older_than: Duration, batch: usize, pause: Duration, time_column: String) -> Self {
        let batch = batch.max(1);
        Self {
            older_than,
            batch,
            pause,
            time_column,
            round: (batch * 50).min(MAX_ROUND),
            floor_margin: Duration::ZERO,
            kafka: super::window::Reading::default(),
        }
    }
}

impl PruneOptions {
    fn floor_margin(mut self, margin: Duration) -> Self {
        self.floor_margin = margin;
        self
    }
}

impl From<&RetentionSection> for PruneOptions {
    fn from(section: &RetentionSection) -> Self {
        Self::new(
            Duration::from_secs(section.older_than_seconds),
            section.batch,
            Duration::from_millis(section.pause_ms),
            section.time_column.clone(),
        )
        .floor_margin(Duration::from_secs(section.clock_margin_seconds))
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
    /// Proved by Kafka: the messages read.
    pub kafka_read: Option<u64>,
}

impl std::fmt::Display for PruneReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rows older than the cut-off {}, deleted {}, kept (not proved in Kafka) {}",
            self.candidates, self.deleted, self.kept
        )?;
        if let Some(read) = self.kafka_read {
            write!(f, ", Kafka messages read {read}")?;
        }
        Ok(())
    }
}

/// The server's time `older_than` ago, as text: rows created before it
/// may go.
async fn cutoff(conn: &mut Conn, older_than: Duration) -> Result<String, DefiniteError> {
    let cutoff: Option<String> = conn
        .exec_first(
            "SELECT CAST(NOW(6) - INTERVAL ? SECOND AS CHAR)",
            (older_than.as_secs(),),
        )
        .await
        .map_err(verify::reading_tables)?;
    Ok(cutoff.unwrap_or_default())
}

/// The `DATETIME` under which a column's rows are older than the line's
/// start `since_ms` (plus `margin`): a row from before the line, written by
/// a session whose zone runs ahead, looks younger than it is, so the
/// column's `slack` is added.
async fn floor_after(
    conn: &mut Conn,
    since_ms: u64,
    slack: i64,
    margin: Duration,
) -> Result<String, DefiniteError> {
    let margin = margin.as_millis() as u64;
    verify::datetime_ms(conn, since_ms + slack as u64 * 1000 + margin).await
}

/// One pass over every outbox table.
pub async fn prune(
    config: &ForwarderConfig,
    options: &PruneOptions,
    proof: &mut Proof,
) -> Result<PruneReport, DefiniteError> {
    config.may_prune()?;
    let what = match proof {
        Proof::Checkpoint(_) => "[retention]",
        Proof::Kafka => "prune",
    };
    let (mut conn, info) = verify::primary_connection(config, what).await?;
    let cutoff = cutoff(&mut conn, options.older_than).await?;
    let mut report = PruneReport::default();
    let tables = tables_and_floors(&mut conn, config, options, proof).await?;
    let reading = reading(&mut conn, options, proof, &tables).await?;
    // Read once, when the first candidates need it (under the checkpoint,
    // for `[retention]`: nothing is, while the broker is down).
    let mut in_kafka: Option<Option<Published>> = None;
    let mut meter = Meter::new("prune", "rows", None);
    for Streamed {
        schema,
        table,
        floor,
        ..
    } in &tables
    {
        let target = Target {
            schema,
            table,
            key: PrimaryKey::of(&mut conn, schema, table).await?,
            time_column: &options.time_column,
            cutoff: &cutoff,
            floor: floor.as_deref(),
        };
        let mut after: Option<Vec<Value>> = None;
        loop {
            let (candidates, position) = target
                .candidates(&mut conn, config, options.round, after.as_deref())
                .await?;
            let Some((last, _)) = candidates.last() else {
                break;
            };
            after = Some(last.clone());
            report.candidates += candidates.len() as u64;
            let qualified = format!("{schema}.{table}");
            let proved = if under_checkpoint(config, proof, &info, &position).await {
                if in_kafka.is_none() {
                    let read = published(config, &reading, proof, &cutoff, &tables).await?;
                    report.kafka_read = read.as_ref().map(|(_, read)| *read);
                    in_kafka = Some(read.map(|(published, _)| published));
                }
                let published = in_kafka.as_ref().and_then(Option::as_ref);
                candidates
                    .iter()
                    .filter(|(_, id)| published.is_some_and(|p| p.holds(&qualified, id)))
                    .map(|(key, _)| key.clone())
                    .collect()
            } else {
                Vec::new()
            };
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

/// How long after the cut-off `[retention]` looks for the messages of the
/// rows older than it: a row published later than that (the forwarder
/// down or behind for longer) is kept, and `prune`, which reads to the
/// topics' ends, proves it.
pub const PUBLISHED_WITHIN: Duration = Duration::from_secs(3600);

/// How `[retention]`'s pass reads Kafka: its window ends an hour
/// ([`PUBLISHED_WITHIN`]) after the cut-off, plus the margin and a
/// DATETIME's zone slack, so that a pass reads about its interval's
/// messages, not every message since the cut-off. `prune` reads to the
/// topics' ends.
async fn reading(
    conn: &mut Conn,
    options: &PruneOptions,
    proof: &Proof,
    tables: &[Streamed],
) -> Result<PruneOptions, DefiniteError> {
    let mut reading = options.clone();
    if let Proof::Checkpoint(_) = proof {
        let slack = tables.iter().map(|t| t.slack).max().unwrap_or(0);
        let now = server::now_ms(conn)
            .await
            .map_err(crate::resume::definite)?;
        let until = now.saturating_sub(options.older_than.as_millis() as u64)
            + (PUBLISHED_WITHIN + options.kafka.margin).as_millis() as u64
            + slack as u64 * 1000;
        reading.kafka.until_ms = Some(until as i64);
    }
    Ok(reading)
}

/// An outbox table a pass looks at.
struct Streamed {
    schema: String,
    table: String,
    /// Proved by the checkpoint too: the oldest creation time its line of
    /// streaming covers.
    floor: Option<String>,
    /// Proved by the checkpoint too: its time column's zone slack (see
    /// [`verify::time_slack`]), asked once a pass.
    slack: i64,
}

/// Each outbox table, and (proved by the checkpoint too) the oldest
/// creation time its line of streaming covers; a table the line does not
/// stream is left out.
async fn tables_and_floors(
    conn: &mut Conn,
    config: &ForwarderConfig,
    options: &PruneOptions,
    proof: &Proof,
) -> Result<Vec<Streamed>, DefiniteError> {
    let patterns = config.decode_config()?.tables;
    let mut tables = Vec::new();
    for (schema, table) in verify::outbox_tables(conn, config).await? {
        let (floor, slack) = match proof {
            Proof::Checkpoint(saved) => {
                let since = table_since(saved.borrow().as_ref(), &patterns, &schema, &table);
                // Nothing stored yet, or the table is not streamed by the
                // line: nothing is proved.
                let Some(since) = since else { continue };
                let column = (
                    schema.as_str(),
                    table.as_str(),
                    options.time_column.as_str(),
                );
                let slack = verify::time_slack(conn, column).await?;
                let floor = floor_after(conn, since, slack, options.floor_margin).await?;
                (Some(floor), slack)
            }
            Proof::Kafka => (None, 0),
        };
        tables.push(Streamed {
            schema,
            table,
            floor,
            slack,
        });
    }
    Ok(tables)
}

/// What Kafka holds of the rows older than `cutoff`, and the messages
/// read. `prune` fails where the topics cannot be read; `[retention]`
/// proves nothing then (`None`), and tries again at its next pass.
async fn published(
    config: &ForwarderConfig,
    reading: &PruneOptions,
    proof: &Proof,
    cutoff: &str,
    tables: &[Streamed],
) -> Result<Option<(Published, u64)>, DefiniteError> {
    match proof {
        Proof::Kafka => Ok(Some(in_kafka(config, reading, cutoff, None).await?)),
        Proof::Checkpoint(_) if tables.is_empty() => Ok(None),
        Proof::Checkpoint(_) => {
            // The rows' window from the oldest floor: rows before a line
            // were never its to publish, and are not looked at.
            let since = tables.iter().filter_map(|t| t.floor.clone()).min();
            match in_kafka(config, reading, cutoff, since).await {
                Ok(published) => Ok(Some(published)),
                Err(e) => {
                    tracing::warn!(error = %e, "retention: the topics cannot be read: no row is proved in Kafka, nothing is deleted this pass");
                    Ok(None)
                }
            }
        }
    }
}

/// The messages in Kafka of the rows older than `cutoff` (and not older
/// than `since`), read once for the pass, and how many messages were read.
async fn in_kafka(
    config: &ForwarderConfig,
    options: &PruneOptions,
    cutoff: &str,
    since: Option<String>,
) -> Result<(Published, u64), DefiniteError> {
    let verified = verify::verify(
        config,
        &VerifyOptions {
            selection: Selection {
                since,
                until: Some(cutoff.to_owned()),
                time_column: options.time_column.clone(),
                ..Default::default()
            },
            kafka: options.kafka,
            ..Default::default()
        },
    )
    .await?;
    Ok((verified.published, verified.kafka_records as u64))
}

/// Since when the line of checkpoints `saved` is in has streamed the rows
/// of `schema`.`table`: the earliest start among the `[outbox] tables`
/// entries that name it (see [`Checkpoint::tables_since_ms`]); the line's
/// start for a checkpoint that records none.
fn table_since(
    saved: Option<&Checkpoint>,
    tables: &outbox_source::OutboxTables,
    schema: &str,
    table: &str,
) -> Option<u64> {
    let saved = saved?;
    let line = saved.streaming_since_ms?;
    if saved.tables_since_ms.is_empty() {
        return Some(line);
    }
    let case = outbox_source::TableNameCase::Insensitive;
    tables
        .patterns()
        .iter()
        .filter(|p| p.matches(schema, table, case))
        .filter_map(|p| saved.tables_since_ms.get(&p.to_string()))
        .copied()
        .min()
        .map(|since| since.max(line))
}

/// One outbox table, the cut-off, and (proved by the checkpoint) the
/// oldest creation time the checkpoints' line of streaming covers.
struct Target<'a> {
    schema: &'a str,
    table: &'a str,
    key: PrimaryKey,
    time_column: &'a str,
    cutoff: &'a str,
    floor: Option<&'a str>,
}

/// A row's primary key and its event id.
type Candidate = (Vec<Value>, String);

impl Target<'_> {
    /// Up to `round` rows older than the cut-off after the key `after`, read
    /// in one snapshot, and a binlog position every one of them was
    /// committed before.
    async fn candidates(
        &self,
        conn: &mut Conn,
        config: &ForwarderConfig,
        round: usize,
        after: Option<&[Value]>,
    ) -> Result<(Vec<Candidate>, outbox_core::BinlogPosition), DefiniteError> {
        let time = Ident(self.time_column);
        let mut sql = format!(
            "SELECT {}, CAST({} AS CHAR) FROM {} WHERE {time} < ?",
            self.key.list(),
            Ident(&config.outbox.columns.event_id),
            Qualified(self.schema, self.table),
        );
        let mut params: Vec<Value> = vec![self.cutoff.into()];
        if let Some(floor) = self.floor {
            sql.push_str(&format!(" AND {time} >= ?"));
            params.push(floor.into());
        }
        if let Some(after) = after {
            sql.push_str(&self.key.after());
            params.extend(after.iter().cloned());
        }
        sql.push_str(&format!(" ORDER BY {} LIMIT {round}", self.key.list()));
        conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            .await
            .map_err(verify::reading_tables)?;
        let rows: Vec<mysql_async::Row> = conn
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
        let keys = self.key.len();
        let candidates = rows
            .into_iter()
            .map(|row| {
                let mut values = row.unwrap();
                let id = match values.pop() {
                    Some(Value::Bytes(id)) => String::from_utf8_lossy(&id).into_owned(),
                    _ => String::new(),
                };
                values.truncate(keys);
                (values, id)
            })
            .collect();
        Ok((candidates, position))
    }

    /// Deletes the rows of `batch` (primary keys), where still older than
    /// the cut-off.
    async fn delete(&self, conn: &mut Conn, batch: &[Vec<Value>]) -> Result<u64, DefiniteError> {
        let sql = format!(
            "DELETE FROM {} WHERE {} AND {} < ?",
            Qualified(self.schema, self.table),
            self.key.any_of(batch.len()),
            Ident(self.time_column)
        );
        let mut params: Vec<Value> = batch.iter().flatten().cloned().collect();
        params.push(self.cutoff.into());
        conn.exec_drop(sql, params).await.map_err(|e| {
            let (schema, table) = (self.schema, self.table);
            let grant = match &e {
                mysql_async::Error::Server(server) if server.code == ER_TABLEACCESS_DENIED => {
                    format!(
                        " (deleting outbox rows needs `GRANT DELETE ON {} TO` the forwarder's \
                         user)",
                        Qualified(schema, table)
                    )
                }
                _ => String::new(),
            };
            DefiniteError::Config(format!("deleting from {schema}.{table}: {e}{grant}"))
        })?;
        Ok(conn.affected_rows())
    }
}

/// Proved by the checkpoint too (`[retention]`): whether the checkpoint
/// this process stores on the same server has reached `position`, waited
/// for a few flushes (on a primary written continuously it trails the
/// position read a moment ago). Always, proved by Kafka alone.
async fn under_checkpoint(
    config: &ForwarderConfig,
    proof: &mut Proof,
    info: &server::ServerInfo,
    position: &outbox_core::BinlogPosition,
) -> bool {
    let Proof::Checkpoint(saved) = proof else {
        return true;
    };
    let under = |stored: &Option<Checkpoint>| {
        stored.as_ref().is_some_and(|checkpoint| {
            checkpoint.source.is_same_server(&info.identity)
                && position
                    .compare(&checkpoint.position)
                    .is_some_and(|o| o.is_le())
        })
    };
    let flush = Duration::from_millis(config.checkpoint.flush_interval_ms);
    let wait = flush * 2 + CHECKPOINT_WAIT;
    matches!(
        tokio::time::timeout(wait, saved.wait_for(under)).await,
        Ok(Ok(_))
    )
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
                    let took_ms = started.elapsed().as_millis() as u64;
                    tracing::info!(deleted = report.deleted, kept = report.kept, took_ms, "retention: {report}");
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
