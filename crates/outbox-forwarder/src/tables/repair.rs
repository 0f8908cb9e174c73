//! `repair-gap`: when the binlog after the checkpoint was purged while the
//! forwarder was down, the events of the lost files are published from the
//! outbox table and the checkpoint moves to the oldest binlog still there.
//!
//! The lost files' transactions were committed between the checkpoint's
//! newest commit ([`Checkpoint::committed_at`]) and the start of the oldest
//! binlog the server still has (its FORMAT_DESCRIPTION event). Rows whose
//! creation time lies in that window, widened by `margin` either side for
//! long transactions and clocks, are compared with Kafka and the missing
//! ones backfilled ([`super::backfill`]): rows of the window that are
//! still in the binlog (the margin) and missing are backfilled too, and
//! `run` skips their inserts by event id when it reads the topics back.
//!
//! The new checkpoint records, per partition, the lower of the old
//! checkpoint's offset and the first backfilled message, so that the
//! read-back sees both what an earlier run published after the old
//! checkpoint and what the repair published.
//!
//! What the table cannot prove is said, and stops the checkpoint from
//! moving unless the operator accepts it: a window with no rows at all
//! (the application deletes its outbox rows, or they were pruned) and a
//! table whose oldest row is younger than the window's start.

use std::collections::BTreeMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use outbox_checkpoint::{Checkpoint, Tails};
use outbox_core::sql::{Ident, Qualified};
use outbox_core::{BinlogPosition, DefiniteError, GtidState};
use outbox_sink::{BrokerHealth, KafkaSink};
use outbox_source::server;

use super::backfill::{self, BackfillOptions, BackfillReport};
use super::verify::{self, Selection};
use crate::checkpoints::CheckpointWriter;
use crate::config::ForwarderConfig;
use crate::resume::{self, definite};

/// How to repair.
#[derive(Debug, Clone)]
pub struct RepairOptions {
    /// How far the window is widened on either side.
    pub margin: Duration,
    /// The window's start, when the checkpoint does not record its commit
    /// time (a DATETIME literal).
    pub since: Option<String>,
    pub time_column: String,
    pub max_rows_per_second: Option<u32>,
    pub chunk: usize,
    /// How long a chunk waits for `publish_after_replicas` replicas.
    pub replica_wait: std::time::Duration,
    /// Move the checkpoint even where the table cannot prove the gap whole.
    pub accept_unproven: bool,
    /// Only say what would be done.
    pub dry_run: bool,
    /// How the comparison reads Kafka.
    pub kafka: super::window::Reading,
}

/// What a repair found and did.
#[derive(Debug, Default)]
pub struct RepairReport {
    /// The window, as DATETIME literals of the server.
    pub since: String,
    pub until: String,
    pub oldest_binlog: String,
    pub backfill: Option<BackfillReport>,
    /// What the table cannot prove.
    pub unproven: Vec<String>,
    /// The checkpoint moved to the oldest binlog.
    pub moved_to: Option<Checkpoint>,
}

/// Repairs the gap after the stored checkpoint (see the module docs).
pub async fn repair_gap(
    config: &ForwarderConfig,
    options: &RepairOptions,
) -> Result<RepairReport, DefiniteError> {
    let store = crate::checkpoints::open_store(config).map_err(|e| {
        DefiniteError::Config(format!("{e} (stop the forwarder before repairing its gap)"))
    })?;
    let stored = store.load()?.ok_or_else(|| {
        DefiniteError::Config("no checkpoint is stored: there is no gap to repair".into())
    })?;
    let (mut conn, info, opts) = gap_of(config, &stored).await?;
    let window = Window::of(config, options, &stored, &mut conn, &opts).await?;
    let mut report = RepairReport {
        unproven: unproven(&mut conn, config, &options.time_column, &window).await?,
        since: window.since.clone(),
        until: window.until.clone(),
        oldest_binlog: window.oldest.file.clone(),
        ..Default::default()
    };
    if options.dry_run {
        return Ok(report);
    }
    let backfilled = backfill::backfill(
        config,
        &BackfillOptions {
            selection: Selection {
                since: Some(report.since.clone()),
                until: Some(report.until.clone()),
                time_column: options.time_column.clone(),
                event_ids: Vec::new(),
            },
            all: false,
            max_rows_per_second: options.max_rows_per_second,
            chunk: options.chunk,
            replica_wait: options.replica_wait,
            by: "repair-gap",
            kafka: options.kafka,
        },
    )
    .await?;
    report.unproven.extend(
        backfilled
            .gone
            .iter()
            .map(|id| format!("event {id} was missing from Kafka and is no longer in the table")),
    );
    let failed = !backfilled.bad_rows.is_empty();
    let first_offsets = backfilled.first_offsets.clone();
    report.backfill = Some(backfilled);
    if failed || (!report.unproven.is_empty() && !options.accept_unproven) {
        return Ok(report);
    }
    let tails = tails_after(config, stored.tails.as_ref(), &first_offsets).await?;
    let gtid = gtid_at_oldest(&mut conn, info.flavor, &window.oldest).await?;
    let now = server::now_ms(&mut conn).await.map_err(definite)?;
    let _ = conn.disconnect().await;
    // A new line of streaming: the gap's rows are in Kafka now, but not
    // under this line's checkpoints.
    let checkpoint = Checkpoint::with_tails(window.oldest, info.identity.clone(), Some(tails))
        .with_gtid(gtid)
        .committed_at(window.oldest_started)
        // The file it names began then: a reset of the binary logs before
        // the first ack is told from it.
        .file_created_at(window.oldest_started)
        .streaming_since(Some(now));
    CheckpointWriter::for_operator(config, store)?.set_by_operator(&checkpoint)?;
    report.moved_to = Some(checkpoint);
    Ok(report)
}

/// The server whose binlog after `stored` is purged, as the one resume
/// decision of `run` finds it: there is no gap where any candidate serves
/// the checkpoint (by GTID on a promoted replica, say), and none to repair
/// here where the refusal is of another kind. Returns a connection to it,
/// what it is, and how to connect to it again.
async fn gap_of(
    config: &ForwarderConfig,
    stored: &Checkpoint,
) -> Result<(Conn, server::ServerInfo, Opts), DefiniteError> {
    let candidates = resume::candidates(config)?;
    let n = candidates.len();
    let index = match resume::decide(&candidates, 0, Some(stored), false).await {
        Ok(decision) => {
            let _ = decision.conn.disconnect().await;
            return Err(DefiniteError::Config(format!(
                "there is no gap to repair: candidate {} of {n} ({}) serves the checkpoint {} \
                 {}; `run` resumes it there",
                decision.index + 1,
                decision.info.identity,
                stored.position,
                decision.via.map(|via| via.to_string()).unwrap_or_default(),
            )));
        }
        Err(resume::Refused {
            purged: Some(index),
            ..
        }) => index,
        Err(refused) => {
            return Err(DefiniteError::Config(format!(
                "repair-gap repairs a binlog purged after the checkpoint, and no candidate \
                 that would serve it has purged it; nothing done. Why no candidate serves \
                 the checkpoint: {}",
                refused.error
            )))
        }
    };
    let opts = candidates[index].clone();
    let mut conn = server::connect(&opts).await.map_err(definite)?;
    let info = server::server_info(&mut conn).await.map_err(definite)?;
    Ok((conn, info, opts))
}

/// The window the lost binlogs covered, as the server's DATETIME literals.
struct Window {
    /// Widened by the margin and the time zone's slack.
    since: String,
    until: String,
    /// Where the gap itself starts, at the latest (for what the table
    /// cannot prove).
    start: String,
    /// Where the gap's rows may read from, at the earliest: before
    /// `start` by the time zone's slack (a DATETIME reads in its writing
    /// session's zone).
    earliest: String,
    /// The start of the oldest binlog, and its time.
    oldest: BinlogPosition,
    oldest_started: u32,
}

impl Window {
    async fn of(
        config: &ForwarderConfig,
        options: &RepairOptions,
        stored: &Checkpoint,
        conn: &mut Conn,
        opts: &Opts,
    ) -> Result<Self, DefiniteError> {
        let oldest = server::first_position(conn).await.map_err(definite)?;
        let dump = server::connect(opts).await.map_err(definite)?;
        let oldest_started = server::file_started_at(dump, &oldest.file, config.tool_server_id())
            .await
            .map_err(definite)?;
        // A DATETIME reads in whatever zone its writing session had.
        let mut slack = 0;
        for (schema, table) in verify::outbox_tables(conn, config).await? {
            slack =
                slack.max(verify::time_slack(conn, (&schema, &table, &options.time_column)).await?);
        }
        let wide = options.margin.as_secs() as i64 + slack;
        let (since, start, earliest) = match (&options.since, stored.committed_at) {
            (Some(since), _) => (since.clone(), since.clone(), since.clone()),
            // Binlog times are whole seconds: the checkpoint's commit lies
            // before the next one.
            (None, Some(committed)) => (
                verify::datetime(conn, i64::from(committed) - wide).await?,
                verify::datetime(conn, i64::from(committed) + 1 + slack).await?,
                verify::datetime(conn, i64::from(committed) + 1 - slack).await?,
            ),
            (None, None) => {
                return Err(DefiniteError::Config(
                    "the checkpoint does not record when its newest transaction was committed \
                     (written by an older release or by `checkpoint set`): give --since, the \
                     creation time of the oldest row that may be missing"
                        .into(),
                ))
            }
        };
        let until = verify::datetime(conn, i64::from(oldest_started) + wide).await?;
        Ok(Self {
            since,
            until,
            start,
            earliest,
            oldest,
            oldest_started,
        })
    }
}

/// The GTID state at the start of the oldest binlog: MariaDB's
/// `BINLOG_GTID_POS` of it; on MySQL `gtid_purged`, every transaction of
/// the files before it.
async fn gtid_at_oldest(
    conn: &mut Conn,
    flavor: server::Flavor,
    oldest: &BinlogPosition,
) -> Result<Option<GtidState>, DefiniteError> {
    if let Some(gtid) = server::gtid_state_at(conn, flavor, oldest)
        .await
        .map_err(definite)?
    {
        return Ok(Some(gtid));
    }
    if flavor != server::Flavor::MySql
        || !server::setting_is(
            server::variable(conn, "gtid_mode")
                .await
                .map_err(definite)?
                .as_deref(),
            "ON",
        )
    {
        return Ok(None);
    }
    let purged = server::variable(conn, "gtid_purged")
        .await
        .map_err(definite)?
        .unwrap_or_default();
    purged
        .parse::<outbox_core::MySqlGtidSet>()
        .map(|set| Some(GtidState::MySql(set)))
        .map_err(|e| DefiniteError::Config(format!("gtid_purged does not parse: {e}")))
}

/// What the outbox tables cannot prove of the gap from `start` to `until`.
async fn unproven(
    conn: &mut Conn,
    config: &ForwarderConfig,
    time_column: &str,
    window: &Window,
) -> Result<Vec<String>, DefiniteError> {
    let (start, until) = (window.start.as_str(), window.until.as_str());
    let earliest = window.earliest.as_str();
    let mut unproven = Vec::new();
    let mut rows_in_window = 0u64;
    for (schema, table) in verify::outbox_tables(conn, config).await? {
        let sql = format!(
            "SELECT (SELECT COUNT(*) FROM {table} WHERE {time} >= ? AND {time} < ?), \
                    (SELECT CAST(MIN({time}) AS CHAR) FROM {table})",
            table = Qualified(&schema, &table),
            time = Ident(time_column),
        );
        let (count, oldest): (u64, Option<String>) = conn
            .exec_first(sql, (earliest, until))
            .await
            .map_err(verify::reading_tables)?
            .unwrap_or((0, None));
        rows_in_window += count;
        if let Some(oldest) = oldest.filter(|oldest| oldest.as_str() > start) {
            unproven.push(format!(
                "{schema}.{table} holds no row created between the gap's start ({start}) and \
                 {oldest}, its oldest: rows created then, if any, were deleted (a retention job \
                 shorter than the gap?) and cannot be repaired"
            ));
        }
    }
    if rows_in_window == 0 {
        unproven.push(format!(
            "no outbox row was created between {earliest} and {until}: if the application deletes \
             its outbox rows in the transaction that inserts them, or they were pruned, the gap's \
             events cannot be read from the table"
        ));
    }
    Ok(unproven)
}

/// The tails of the new checkpoint: per partition the lowest of the old
/// checkpoint's offset and the first backfilled message; the topics
/// neither names start where they end now.
async fn tails_after(
    config: &ForwarderConfig,
    old: Option<&Tails>,
    backfilled: &BTreeMap<String, BTreeMap<i32, i64>>,
) -> Result<Tails, DefiniteError> {
    let mut tails = old.cloned().unwrap_or_default();
    if backfilled.is_empty() {
        return Ok(tails);
    }
    let sink = KafkaSink::new(
        &config.kafka_config(),
        std::sync::Arc::new(BrokerHealth::default()),
    )?;
    for (topic, firsts) in backfilled {
        let marks = sink
            .watermarks(topic)
            .await
            .map_err(|e| DefiniteError::Config(format!("reading the partitions of {topic}: {e}")))?
            .unwrap_or_default();
        let recorded = tails.get(topic).cloned();
        // `[]`: every partition from its start already.
        if recorded.as_ref().is_some_and(Vec::is_empty) {
            continue;
        }
        let read_from = marks
            .iter()
            .enumerate()
            .map(|(p, &(_, high))| {
                let old = recorded.as_ref().and_then(|r| r.get(p).copied());
                let first = firsts.get(&(p as i32)).copied();
                [old, first, Some(high)]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(high)
            })
            .collect();
        tails.insert(topic.clone(), read_from);
    }
    Ok(tails)
}
