//! Reconciliation: compares the outbox rows in MySQL with what is in Kafka,
//! by `event_id`. Operators run it after an incident; the tests use it too.
//!
//! Missing ids (in MySQL, not in Kafka) are a problem. Duplicated ids are
//! the documented at-least-once window and are reported, not failed.
//! Unexpected ids (in Kafka, not in the selected rows) come from rows outside
//! the time range, rows deleted after publishing, or other producers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_core::sql::{Ident, Qualified};
use outbox_core::{BinlogPosition, DefiniteError, MessageShape, OutboxEvent, RowOrigin};
use outbox_sink::TopicTemplate;
use outbox_source::ColumnMapping;

use super::window::{self, Published, Start};
use crate::config::ForwarderConfig;

/// Which outbox rows a command looks at (`verify`, `backfill`, `prune`).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only rows with `time_column >= since` (a MySQL DATETIME literal).
    pub since: Option<String>,
    /// Only rows with `time_column < until`.
    pub until: Option<String>,
    pub time_column: String,
    /// Only these event ids (none: every id).
    pub event_ids: Vec<String>,
}

impl Selection {
    /// The `AND ...` conditions on a table's rows, with their parameters
    /// (`event_id` is the table's event id column).
    pub fn conditions(&self, event_id: &str) -> (String, Vec<mysql_async::Value>) {
        let mut sql = String::new();
        let mut params: Vec<mysql_async::Value> = Vec::new();
        for (bound, op) in [(&self.since, ">="), (&self.until, "<")] {
            let Some(bound) = bound else { continue };
            let column = Ident(&self.time_column);
            match super::ago(bound) {
                Some(seconds) => {
                    sql.push_str(&format!(" AND {column} {op} NOW(6) - INTERVAL ? SECOND"));
                    params.push(seconds.into());
                }
                None => {
                    sql.push_str(&format!(" AND {column} {op} ?"));
                    params.push(bound.as_str().into());
                }
            }
        }
        if !self.event_ids.is_empty() {
            let marks = vec!["?"; self.event_ids.len()].join(", ");
            sql.push_str(&format!(" AND {} IN ({marks})", Ident(event_id)));
            params.extend(self.event_ids.iter().map(|id| id.as_str().into()));
        }
        (sql, params)
    }
}

/// What to compare.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    pub selection: Selection,
    /// Topics to read; derived from `kafka.topic` and the rows when empty.
    pub topics: Vec<String>,
    pub print_records: bool,
    /// Keep re-reading Kafka up to this long while ids are missing.
    pub wait: Duration,
    /// The window of Kafka read (see [`super::window`]).
    pub kafka: window::Reading,
}

/// An outbox row as the table tools compare it: its table and event id.
/// Ids are unique per table only (`event_id_format = "any"` with a
/// sequence per schema), so a message stands for the row of the table
/// its `source_table` header names; one without it (another producer's)
/// for the id in any table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowId {
    /// `schema.table`.
    pub table: String,
    pub event_id: String,
}

impl RowId {
    pub fn new(table: impl Into<String>, event_id: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            event_id: event_id.into(),
        }
    }
}

impl std::fmt::Display for RowId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.event_id, self.table)
    }
}

/// The outcome, printed as one reconciliation line plus the lists.
#[derive(Debug, Default)]
pub struct Reconciliation {
    pub outbox_rows: usize,
    pub kafka_records: usize,
    pub distinct_ids: usize,
    pub missing: Vec<RowId>,
    /// id → how many times it is in Kafka (more than once).
    pub duplicated: BTreeMap<String, usize>,
    pub unexpected: Vec<String>,
    /// Messages of the partitions read that lie before the rows' window.
    pub before_window: u64,
    /// What made the read wider than the rows' window.
    pub widened: Vec<String>,
    /// Which rows the records read stand for.
    pub published: Published,
    /// Per outbox table (`schema.table`): its part of the comparison.
    pub tables: BTreeMap<String, TableStatement>,
}

/// One table's delivery statement for the rows selected.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TableStatement {
    /// Rows selected.
    pub written: usize,
    /// Of them, found in Kafka by table and event id.
    pub proven: usize,
    /// Records beyond the first of a selected row's event id.
    pub repeats: usize,
}

impl std::fmt::Display for TableStatement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "written {}, proven in Kafka {}, repeats {}, unproven {}",
            self.written,
            self.proven,
            self.repeats,
            self.written - self.proven
        )
    }
}

/// Each table's statement: its rows, those `published` holds, and the
/// repeats `counts` (records per event id) show.
fn statements(
    rows: &[Row],
    published: &Published,
    counts: &HashMap<&str, usize>,
) -> BTreeMap<String, TableStatement> {
    let mut tables: BTreeMap<String, TableStatement> = BTreeMap::new();
    for row in rows {
        let table = tables.entry(row.id.table.clone()).or_default();
        table.written += 1;
        if published.holds(&row.id.table, &row.id.event_id) {
            table.proven += 1;
        }
        let records = counts.get(row.id.event_id.as_str()).copied().unwrap_or(0);
        table.repeats += records.saturating_sub(1);
    }
    tables
}

impl std::fmt::Display for Reconciliation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "outbox rows {}, Kafka records {}, distinct event ids {}, missing {}, duplicated ids {}, unexpected {}",
            self.outbox_rows,
            self.kafka_records,
            self.distinct_ids,
            self.missing.len(),
            self.duplicated.len(),
            self.unexpected.len()
        )?;
        write!(
            f,
            "; Kafka messages read {}, before the rows' window {}",
            self.kafka_records, self.before_window
        )
    }
}

/// A selected row: its table and id, as much of it as routes it to a
/// topic, and, where asked, its creation time (seconds since the epoch).
pub(super) struct Row {
    pub(super) id: RowId,
    pub(super) event: OutboxEvent,
    pub(super) created_s: Option<i64>,
}

/// Says which records read prove nothing, and why: `tableless` name no
/// table, `unsigned` lack a valid signature.
pub(super) fn passed_over(tableless: u64, unsigned: u64) {
    if tableless > 0 {
        tracing::warn!(
            records = tableless,
            "Kafka records without a source_table header were passed over: they prove no \
             row published (the forwarder and backfill name the table of every message; \
             another producer writes to the topics)"
        );
    }
    if unsigned > 0 {
        tracing::warn!(
            records = unsigned,
            "Kafka records without a valid outbox_signature were passed over: they prove \
             no row published (another principal writes to the topics, or another key \
             signed them)"
        );
    }
}

pub async fn verify(
    config: &ForwarderConfig,
    options: &VerifyOptions,
) -> Result<Reconciliation, DefiniteError> {
    let (rows, start) = outbox_rows(config, options).await?;
    let template: TopicTemplate = config.kafka.topic.parse()?;
    let topics: BTreeSet<String> = if options.topics.is_empty() {
        rows.iter()
            .filter_map(|r| template.route(&r.event).ok())
            .collect()
    } else {
        options.topics.iter().cloned().collect()
    };
    let expected: BTreeSet<&str> = rows.iter().map(|r| r.id.event_id.as_str()).collect();
    if rows.is_empty() && topics.is_empty() {
        // No rows, and no topic named: nothing to read.
        return Ok(Reconciliation::default());
    }

    let deadline = Instant::now() + options.wait;
    loop {
        let read =
            window::read_off_the_runtime(&config.kafka_config(), &topics, &start, &options.kafka)?;
        let mut widened = read.widened;
        if let Start::Whole(why) = &start {
            widened.insert(0, format!("every partition: {why}"));
        }
        for widened in &widened {
            tracing::warn!("Kafka read whole: {widened}");
        }
        let published = Published::of(&read.records);
        passed_over(published.tableless, published.unsigned);
        let mut missing: Vec<RowId> = rows
            .iter()
            .filter(|r| !published.holds(&r.id.table, &r.id.event_id))
            .map(|r| r.id.clone())
            .collect();
        missing.sort();
        if !missing.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        if options.print_records {
            for record in &read.records {
                println!("{record}");
            }
        }
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for record in &read.records {
            *counts.entry(record.event_id.as_str()).or_default() += 1;
        }
        return Ok(Reconciliation {
            outbox_rows: rows.len(),
            kafka_records: read.records.len(),
            distinct_ids: counts.len(),
            missing,
            duplicated: counts
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(id, n)| (id.to_string(), *n))
                .collect(),
            unexpected: counts
                .keys()
                .filter(|id| !expected.contains(*id))
                .map(|id| id.to_string())
                .collect(),
            before_window: read.before,
            widened,
            tables: statements(&rows, &published, &counts),
            published,
        });
    }
}

/// The selected rows, and where the window of Kafka they need starts.
async fn outbox_rows(
    config: &ForwarderConfig,
    options: &VerifyOptions,
) -> Result<(Vec<Row>, Start), DefiniteError> {
    let mut conn = source_connection(config).await?.0;
    let decode = config.decode_config()?;
    let mut rows = Vec::new();
    let tables = outbox_tables(&mut conn, config).await?;
    let start = window_start(
        &mut conn,
        config,
        &tables,
        &options.selection,
        options.kafka.margin,
    )
    .await?;
    for (schema, table) in tables {
        let found = table_rows(
            &mut conn,
            &decode.columns,
            (&schema, &table),
            &options.selection,
            Wanted {
                routing: true,
                created: false,
            },
        )
        .await
        .map_err(reading_tables)?;
        rows.extend(found);
    }
    let _ = conn.disconnect().await;
    Ok((rows, start))
}

/// Where the window of Kafka the rows `selection` picks starts: the oldest
/// one's time less `margin` and the time zone's slack, or, under
/// `timestamp_column` (whose values stamp the messages), the oldest of
/// those if older (see [`super::window`]).
pub(crate) async fn window_start(
    conn: &mut Conn,
    config: &ForwarderConfig,
    tables: &[(String, String)],
    selection: &Selection,
    margin: Duration,
) -> Result<Start, DefiniteError> {
    let column = &selection.time_column;
    let stamps = config.outbox.columns.timestamp_column.as_deref();
    let mut oldest: Option<i64> = None;
    let mut rows_stamp = false;
    for (schema, table) in tables {
        let kind = column_type(conn, (schema, table, column)).await?;
        if !matches!(kind.as_deref(), Some("datetime" | "timestamp" | "date")) {
            return Ok(Start::Whole(format!(
                "{schema}.{table} has no time column `{column}` to bound the read by \
                 (give the rows' creation time column with --time-column)"
            )));
        }
        let (conditions, params) = selection.conditions(&config.outbox.columns.event_id);
        let seconds: Option<Option<i64>> = conn
            .exec_first(
                format!(
                    "SELECT CAST(FLOOR(UNIX_TIMESTAMP(MIN({}))) AS SIGNED) \
                     FROM {} WHERE 1=1{conditions}",
                    Ident(column),
                    Qualified(schema, table)
                ),
                params,
            )
            .await
            .map_err(reading_tables)?;
        let Some(seconds) = seconds.flatten() else {
            continue;
        };
        let slack = time_slack(conn, (schema, table, column)).await?;
        let mut at = (seconds - slack) * 1000;
        if let Some(stamps) = stamps {
            let place = (schema.as_str(), table.as_str(), stamps);
            if let Some(stamped) = oldest_stamp(conn, place, selection, config).await? {
                rows_stamp = true;
                at = at.min(stamped);
            }
        }
        oldest = Some(oldest.map_or(at, |o| o.min(at)));
    }
    Ok(match oldest {
        Some(ms) => Start::Since {
            ms: ms - margin.as_millis() as i64,
            margin_ms: margin.as_millis() as i64,
            rows_stamp,
        },
        None => Start::Whole("no rows are selected".into()),
    })
}

/// A column's data type, lowercase; `None` when the table lacks it.
async fn column_type(
    conn: &mut Conn,
    (schema, table, column): (&str, &str, &str),
) -> Result<Option<String>, DefiniteError> {
    conn.exec_first(
        "SELECT LOWER(data_type) FROM information_schema.columns \
         WHERE table_schema = ? AND table_name = ? AND column_name = ?",
        (schema, table, column),
    )
    .await
    .map_err(reading_tables)
}

/// The oldest time the selected rows' `timestamp_column` stamps their
/// messages with (ms since the epoch, less the zone's slack for a
/// DATETIME); `None` when the table lacks it or every value is NULL.
async fn oldest_stamp(
    conn: &mut Conn,
    (schema, table, column): (&str, &str, &str),
    selection: &Selection,
    config: &ForwarderConfig,
) -> Result<Option<i64>, DefiniteError> {
    let kind = column_type(conn, (schema, table, column)).await?;
    let (value, slack) = match kind.as_deref() {
        Some("bigint") => (format!("MIN({})", Ident(column)), None),
        Some("datetime" | "timestamp") => (
            format!(
                "CAST(FLOOR(UNIX_TIMESTAMP(MIN({}))) AS SIGNED) * 1000",
                Ident(column)
            ),
            Some(time_slack(conn, (schema, table, column)).await?),
        ),
        _ => return Ok(None),
    };
    let (conditions, params) = selection.conditions(&config.outbox.columns.event_id);
    let ms: Option<Option<i64>> = conn
        .exec_first(
            format!(
                "SELECT {value} FROM {} WHERE 1=1{conditions}",
                Qualified(schema, table)
            ),
            params,
        )
        .await
        .map_err(reading_tables)?;
    Ok(ms.flatten().map(|ms| ms - slack.unwrap_or(0) * 1000))
}

pub(crate) fn reading_tables(e: mysql_async::Error) -> DefiniteError {
    DefiniteError::Config(format!("reading the outbox tables: {e}"))
}

/// A connection to the server a fresh start would pick (the writable
/// candidate, else a replica that relays it), what it is, and its index
/// in `mysql.url`.
pub(crate) async fn source_connection(
    config: &ForwarderConfig,
) -> Result<(Conn, outbox_source::server::ServerInfo, usize), DefiniteError> {
    let decision = decide(config).await?;
    if decision.role != outbox_source::server::Role::Writable {
        tracing::warn!(
            candidate = decision.index + 1,
            "no candidate of mysql.url takes writes: reading the outbox tables on a replica, \
             which may lag its primary"
        );
    }
    Ok((decision.conn, decision.info, decision.index))
}

/// [`source_connection`] for a command that deletes (`prune`,
/// `[retention]`): the writable primary only, never a replica, which would
/// then differ from its primary.
pub(crate) async fn primary_connection(
    config: &ForwarderConfig,
    what: &str,
) -> Result<(Conn, outbox_source::server::ServerInfo), DefiniteError> {
    let decision = decide(config).await?;
    if decision.role != outbox_source::server::Role::Writable {
        let _ = decision.conn.disconnect().await;
        return Err(DefiniteError::Config(format!(
            "{what} deletes on the writable primary only, and no candidate of mysql.url takes \
             writes now (candidate {} is a replica): nothing deleted; run it again when the \
             primary is back",
            decision.index + 1
        )));
    }
    Ok((decision.conn, decision.info))
}

async fn decide(config: &ForwarderConfig) -> Result<crate::resume::Decision, DefiniteError> {
    let candidates = crate::resume::candidates(config)?;
    crate::resume::decide(&candidates, 0, None, false)
        .await
        .map_err(|r| crate::resume::definite(r.error))
}

/// `seconds` since the epoch as the server's DATETIME literal, in its
/// session time zone (as `DEFAULT CURRENT_TIMESTAMP` writes them).
pub(crate) async fn datetime(conn: &mut Conn, seconds: i64) -> Result<String, DefiniteError> {
    server_time(conn, seconds.max(1).to_string()).await
}

/// `ms` since the epoch as the server's DATETIME literal with its
/// milliseconds, in its session time zone.
pub(crate) async fn datetime_ms(conn: &mut Conn, ms: u64) -> Result<String, DefiniteError> {
    server_time(conn, format!("{}.{:03}", ms / 1000, ms % 1000)).await
}

/// `seconds` since the epoch (a decimal, with as many fraction digits as
/// the literal should have) as the server's DATETIME literal.
async fn server_time(conn: &mut Conn, seconds: String) -> Result<String, DefiniteError> {
    let digits = seconds
        .split_once('.')
        .map_or(0, |(_, fraction)| fraction.len());
    let text: Option<String> = conn
        .exec_first(
            format!("SELECT CAST(FROM_UNIXTIME(CAST(? AS DECIMAL(16,{digits}))) AS CHAR)"),
            (&seconds,),
        )
        .await
        .map_err(reading_tables)?;
    text.ok_or_else(|| DefiniteError::Config(format!("the server cannot show time {seconds} s")))
}

/// The widest distance between two session time zones (`-12:00` to
/// `+14:00`), in seconds.
const ANY_TWO_ZONES: i64 = 26 * 3600;

/// How far a time read from `column` may be from the session's clock: 0
/// for a TIMESTAMP (stored as an instant, shown in the session's zone);
/// for a DATETIME, the distance between any two session zones the
/// application may have written it in (26 hours): what it reads depends on
/// the writing session's `time_zone`, which nothing records. Every window
/// by a DATETIME column (the tools' rows and Kafka windows, `repair-gap`'s
/// gap, `[retention]`'s floor) is that much wider; a TIMESTAMP column
/// costs nothing.
pub(crate) async fn time_slack(
    conn: &mut Conn,
    (schema, table, column): (&str, &str, &str),
) -> Result<i64, DefiniteError> {
    let datetime = ANY_TWO_ZONES;
    let slack: Option<i64> = conn
        .exec_first(
            format!(
                "SELECT IF(LOWER(data_type) = 'timestamp', 0, {datetime}) \
                 FROM information_schema.columns \
                 WHERE table_schema = ? AND table_name = ? AND column_name = ?"
            ),
            (schema, table, column),
        )
        .await
        .map_err(reading_tables)?;
    slack.ok_or_else(|| DefiniteError::Config(format!("{schema}.{table} has no column `{column}`")))
}

/// The outbox tables `[outbox] tables` names on the server, as
/// (schema, table).
pub(crate) async fn outbox_tables(
    conn: &mut Conn,
    config: &ForwarderConfig,
) -> Result<Vec<(String, String)>, DefiniteError> {
    let decode = config.decode_config()?;
    let mut tables = Vec::new();
    for pattern in decode.tables.patterns() {
        let schemas: Vec<String> = match &pattern.schema {
            Some(schema) => vec![schema.clone()],
            None => conn
                .exec(
                    "SELECT table_schema FROM information_schema.tables WHERE table_name = ?",
                    (pattern.table.as_str(),),
                )
                .await
                .map_err(reading_tables)?,
        };
        tables.extend(schemas.into_iter().map(|s| (s, pattern.table.clone())));
    }
    Ok(tables)
}

/// What [`table_rows`] reads of each row beside its event id.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wanted {
    /// The columns that route it to a topic (`verify` compares by topic;
    /// without them a fixed topic's rows are read from the time column's
    /// index alone).
    pub(super) routing: bool,
    /// Its `time_column`, as seconds since the epoch.
    pub(super) created: bool,
}

/// The rows of one outbox table in the window `selection` names, as much
/// of each as `wanted` (the columns the table lacks read as NULL).
pub(super) async fn table_rows(
    conn: &mut Conn,
    columns: &ColumnMapping,
    (schema, table): (&str, &str),
    selection: &Selection,
    wanted: Wanted,
) -> Result<Vec<Row>, mysql_async::Error> {
    let present: Vec<String> = conn
        .exec(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ?",
            (schema, table),
        )
        .await?;
    let has = |c: &str| present.iter().any(|p| p.eq_ignore_ascii_case(c));
    let optional = |c: &str| {
        if has(c) && wanted.routing {
            Ident(c).to_string()
        } else {
            "NULL".into()
        }
    };
    let topic = columns
        .topic_column
        .as_deref()
        .map_or("NULL".into(), optional);
    let created = match wanted.created {
        true => format!(
            "CAST(FLOOR(UNIX_TIMESTAMP({})) AS SIGNED)",
            Ident(&selection.time_column)
        ),
        false => "NULL".into(),
    };
    let (conditions, params) = selection.conditions(&columns.event_id);
    let sql = format!(
        "SELECT {}, {}, {}, {topic}, {created} FROM {} WHERE 1=1{conditions}",
        Ident(&columns.event_id),
        optional(&columns.aggregate_type),
        optional(&columns.event_type),
        Qualified(schema, table),
    );
    let found: Vec<Found> = conn.exec(sql, params).await?;
    Ok(found
        .into_iter()
        .map(|found| row_of((schema, table), found))
        .collect())
}

/// A row as [`table_rows`] selects it: event_id, aggregate_type,
/// event_type, the row's own topic, created.
type Found = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
);

/// The row of `schema.table` that `found` holds, as an event that routes
/// and names itself as the forwarder's would.
fn row_of((schema, table): (&str, &str), found: Found) -> Row {
    let (event_id, aggregate_type, event_type, topic, created_s) = found;
    let event = OutboxEvent {
        event_id: event_id.clone(),
        event_type,
        aggregate_type,
        aggregate_id: None,
        event_version: None,
        key: None,
        payload: None,
        committed_at_ms: 0,
        shape: topic.map(|topic| {
            Box::new(MessageShape {
                topic: Some(topic),
                ..Default::default()
            })
        }),
        origin: RowOrigin {
            schema: schema.into(),
            table: table.into(),
            event_position: BinlogPosition::new("", 0),
            row_index: 0,
        },
    };
    Row {
        id: RowId::new(format!("{schema}.{table}"), event_id),
        event,
        created_s,
    }
}
