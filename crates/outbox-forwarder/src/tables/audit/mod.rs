//! `[audit]`: the continuous proof, inside `run`, that every committed
//! outbox row is in Kafka.
//!
//! A reader of its own ([`tail`]) follows the topics as they are written,
//! each message read once, and keeps a mark of the row each names (table
//! and event id). Every interval a pass waits until the reader has read
//! each topic to the end it has now, takes the marks, and then selects the
//! rows created since the last pass (and a settle delay before it, for
//! transactions that committed late): a row whose message was read is
//! proven; one not yet is awaited ([`book`]), and proven by the marks of a
//! later pass. An awaited row created more than the settle delay ago is
//! named in the log and counted unproven, and looked for once by its id
//! over a wider window (as `verify` does); it stays awaited, so a message
//! for it read later (`backfill`) proves it. Nothing is fixed silently
//! (`verify` and `backfill` are what an operator runs).
//!
//! The order is what makes a pass right: a message is produced after its
//! row's commit, so every message taken belongs to a row the selection
//! that follows can see. The marks no row claims are kept for one more
//! pass (a commit the selection could not see yet, a replica behind), then
//! dropped: they belong to no row this auditor will select.
//!
//! A pass reads the table through a connection of its own, kept across
//! passes; when the table or the topics cannot be read, the pass fails,
//! says so, and the next one tries again: forwarding is never held up.
//! Rows created before the first pass's period are not audited (`verify
//! --since` covers any period).

mod book;
mod tail;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_core::DefiniteError;
use outbox_sink::TopicTemplate;

use self::book::{Book, Mark, Marks, Selected};
use self::tail::Tail;
use super::verify::{self, RowId, Selection, VerifyOptions};
use super::window::Reading;
use crate::config::{AuditSection, ForwarderConfig};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// Unproven rows looked for by id over a wider window in one pass, at
/// most (the oldest).
const RECHECKED: usize = 1_000;

/// Rows named one by one in a pass's log, at most; the rest are counted.
const NAMED: usize = 20;

/// How far before the oldest awaited row's time the reader starts a topic
/// it begins to follow: the clocks of the database's and the producer's
/// hosts. A row whose message lies further back is found by the look by
/// id, with the table tools' wider margin.
const MARGIN: Duration = Duration::from_secs(60);

/// How long a pass waits for the reader to reach the topics' ends.
const CATCH_UP: Duration = Duration::from_secs(30);

/// Runs a pass every `[audit] interval_seconds` until `shutdown`.
pub async fn audit(config: ForwarderConfig, metrics: Arc<Metrics>, mut shutdown: Shutdown) {
    let section = config.audit.clone();
    let interval = Duration::from_secs(section.interval_seconds);
    let mut audit = Audit::new(&config);
    metrics.audit.started(outbox_core::epoch_ms() / 1000);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.requested() => return,
        }
        let started = Instant::now();
        tokio::select! {
            pass = audit.pass(&config, &section) => match pass {
                Ok(pass) => {
                    let (unproven, oldest) = audit.book.unproven();
                    metrics.audit.pass(
                        pass.proven,
                        unproven,
                        oldest,
                        section.settle_seconds,
                        pass.read,
                        pass.until_epoch,
                    );
                    let took_ms = started.elapsed().as_millis() as u64;
                    tracing::info!(proven = pass.proven, unproven, read = pass.read, took_ms, "audit: {} rows proven in Kafka, {unproven} not proven", pass.proven);
                }
                Err(e) => {
                    metrics.audit.failed();
                    tracing::warn!(error = %e, "audit: the pass could not read the outbox tables or the topics; the next one tries again");
                }
            },
            _ = shutdown.requested() => return,
        }
    }
}

/// What the passes carry from one to the next.
struct Audit {
    /// Where the last pass's selection ended (the server's time, as text).
    since: Option<String>,
    book: Book,
    marks: Marks,
    /// The reader, once started, and the topics it follows.
    tail: Option<Tail>,
    followed: BTreeSet<String>,
    /// Marks the last pass took and no row claimed, or a failed pass took:
    /// the next pass matches them with its rows, then drops them.
    carried: HashSet<Mark>,
    /// Rows proven by a pass that then failed: counted by the next.
    proven_meanwhile: book::Outcome,
    source: Source,
}

/// What one pass did.
struct Pass {
    /// Rows newly proven (this period's and earlier awaited ones).
    proven: u64,
    read: u64,
    until_epoch: u64,
}

impl Audit {
    fn new(config: &ForwarderConfig) -> Self {
        let marks = Marks::default();
        Self {
            since: None,
            book: Book::new(marks.clone()),
            marks,
            tail: None,
            followed: BTreeSet::new(),
            carried: HashSet::new(),
            proven_meanwhile: book::Outcome::default(),
            source: Source::new(config),
        }
    }

    async fn pass(
        &mut self,
        config: &ForwarderConfig,
        section: &AuditSection,
    ) -> Result<Pass, DefiniteError> {
        let settle = section.settle_seconds as i64;
        // The server's time before the messages are read to the topics'
        // ends: a row named unproven had its settle delay before it.
        let read_s = self.source.now_s(config).await?;
        let taken = self.take(config, section).await?;
        let mut fresh = taken.marks;
        let selected = match self
            .source
            .select(config, section, self.since.as_deref())
            .await
        {
            Ok(selected) => selected,
            Err(e) => {
                self.carry(fresh);
                return Err(e);
            }
        };
        self.book.begin();
        let mut outcome = std::mem::take(&mut self.proven_meanwhile);
        outcome.add(self.book.messages(&mut fresh));
        outcome.add(self.book.messages(&mut self.carried));
        outcome.add(self.book.rows(selected.rows, &mut fresh, &mut self.carried));
        // The marks no row claimed: a row the selection could not see yet
        // (a commit not yet visible, a replica behind) is selected by the
        // next pass, which matches them too; then they are dropped.
        self.carried = fresh;
        if self.book.untracked > 0 {
            tracing::warn!(rows = self.book.untracked, "audit: {} outbox rows were not tracked, {} awaiting their message already (the forwarder far behind, or the topics unreadable); `outbox-forwarder verify --since ... --statement` proves them", self.book.untracked, book::AWAITED_AT_MOST);
            self.book.untracked = 0;
        }
        self.follow_new_topics(config, section).await;
        let named = self.book.settled(read_s, settle, &taken.topics);
        name(&named, section.settle_seconds);
        match look_again(config, section, &named).await {
            Ok(found) => outcome.add(self.book.found(&found)),
            Err(e) => {
                tracing::warn!(error = %e, "audit: the rows not proven could not be looked for by id; the reader goes on looking for them")
            }
        }
        for id in &outcome.found_after_all {
            tracing::info!(table = %id.table, event_id = %id.event_id, "audit: outbox row found in Kafka after all");
        }
        self.book.forget_before(selected.now_s - settle - 1);
        self.since = Some(selected.now);
        Ok(Pass {
            proven: outcome.proven,
            read: taken.read,
            until_epoch: (selected.now_s - settle).max(0) as u64,
        })
    }

    /// What the reader read, once it has read every followed topic to the
    /// end it has now (started first, or again after its thread ended).
    async fn take(
        &mut self,
        config: &ForwarderConfig,
        section: &AuditSection,
    ) -> Result<tail::Taken, DefiniteError> {
        let topics = |e: String| DefiniteError::Config(format!("reading the topics: {e}"));
        if self.tail.as_ref().is_none_or(Tail::stopped) {
            self.followed.clear();
            self.tail = None;
            let tail = Tail::start(
                &config.kafka_config(),
                section.max_messages_per_second,
                self.marks.clone(),
            );
            self.tail = Some(tail.map_err(topics)?);
        }
        let Some(tail) = &self.tail else {
            unreachable!("started above")
        };
        let taken = tail.catch_up(CATCH_UP).await.map_err(topics)?;
        verify::passed_over(taken.tableless, taken.unsigned);
        if taken.dropped > 0 {
            tracing::warn!(messages = taken.dropped, "audit: the marks of {} messages were not kept ({} waited already, the passes failing or the reader paced below the topics' rate): rows they stand for may be named unproven, and are then looked for by id", taken.dropped, tail::MARKS_AT_MOST);
        }
        Ok(taken)
    }

    /// Keeps the marks of a pass that failed for the next, up to
    /// [`tail::MARKS_AT_MOST`] with those kept already. Beyond it they
    /// prove the rows awaited already and are dropped; the rows created
    /// before a minute from now (the hosts' clocks) may have lost their
    /// message's mark, so they are not audited, and it says so.
    fn carry(&mut self, mut fresh: HashSet<Mark>) {
        if self.carried.len() + fresh.len() <= tail::MARKS_AT_MOST {
            self.carried.extend(fresh);
            return;
        }
        let proven = self.book.messages(&mut fresh);
        self.proven_meanwhile.add(proven);
        let proven = self.book.messages(&mut self.carried);
        self.proven_meanwhile.add(proven);
        self.carried.clear();
        let floor_s = (outbox_core::epoch_ms() / 1000) as i64 + MARGIN.as_secs() as i64;
        let dropped = self.book.unaudited_before(floor_s);
        self.since = None;
        tracing::warn!(marks = fresh.len(), rows_awaited = dropped, floor_s, "audit: the passes keep failing and the messages read meanwhile are too many to keep: rows created before {floor_s} s since the epoch (a minute from now) are not audited, {dropped} of them awaited (`outbox-forwarder verify --since ... --statement` covers them)");
    }

    /// Has the reader follow the topics of awaited rows it does not
    /// follow yet, from the oldest of those rows' time less the margin.
    async fn follow_new_topics(&mut self, config: &ForwarderConfig, section: &AuditSection) {
        let awaited = self.book.topics();
        let new: Vec<(&str, i64)> = awaited
            .into_iter()
            .filter(|(topic, _)| !self.followed.contains(*topic))
            .collect();
        let Some(oldest) = new.iter().map(|(_, oldest)| *oldest).min() else {
            return;
        };
        let topics: BTreeSet<String> = new.iter().map(|(t, _)| t.to_string()).collect();
        let start = match self.source.window_start(config, section, oldest).await {
            Ok(start) => start,
            Err(e) => {
                tracing::warn!(error = %e, "audit: where to start reading the topics could not be found; the next pass tries again");
                return;
            }
        };
        let Some(tail) = &self.tail else { return };
        match tail.follow(topics.clone(), start).await {
            Ok(()) => self.followed.extend(topics),
            Err(e) => {
                tracing::warn!(error = %e, "audit: the topics could not be followed; the next pass tries again")
            }
        }
    }
}

/// Names the rows found unproven (at most [`NAMED`] by name).
fn name(rows: &[RowId], settle: u64) {
    for row in rows.iter().take(NAMED) {
        tracing::warn!(table = %row.table, event_id = %row.event_id, "audit: outbox row committed more than {settle} s ago is not in Kafka; `outbox-forwarder verify --event-id {}` shows it, `backfill` publishes it", row.event_id);
    }
    if rows.len() > NAMED {
        tracing::warn!(rows = rows.len(), "audit: {} more outbox rows committed more than {settle} s ago are not in Kafka (`outbox-forwarder verify --since ... --statement` lists them)", rows.len() - NAMED);
    }
}

/// Looks for the rows just named unproven (the oldest [`RECHECKED`]) by
/// id, over the table tools' wider window: those found there.
async fn look_again(
    config: &ForwarderConfig,
    section: &AuditSection,
    named: &[RowId],
) -> Result<Vec<RowId>, DefiniteError> {
    if named.is_empty() {
        return Ok(Vec::new());
    }
    let ids = &named[..named.len().min(RECHECKED)];
    let options = VerifyOptions {
        selection: Selection {
            since: None,
            until: None,
            time_column: section.time_column.clone(),
            event_ids: ids.iter().map(|id| id.event_id.clone()).collect(),
        },
        kafka: Reading {
            max_messages_per_second: section.max_messages_per_second,
            ids_only: true,
            ..Reading::default()
        },
        ..VerifyOptions::default()
    };
    let report = verify::verify(config, &options).await?;
    // In Kafka by table and id; a row deleted since stays unproven unless
    // its message is there.
    Ok(ids
        .iter()
        .filter(|id| report.published.holds(&id.table, &id.event_id))
        .cloned()
        .collect())
}

fn no_time() -> DefiniteError {
    DefiniteError::Config("reading the outbox tables: the server did not tell its time".into())
}

/// The outbox tables, read through a connection kept across passes.
struct Source {
    conn: Option<(Conn, Vec<(String, String)>)>,
    template: Result<TopicTemplate, String>,
}

/// The rows one pass selected, and the server's time it selected them at.
struct Rows {
    rows: Vec<Selected>,
    /// `NOW(6)` as text, and as seconds since the epoch.
    now: String,
    now_s: i64,
}

impl Source {
    fn new(config: &ForwarderConfig) -> Self {
        Self {
            conn: None,
            template: config.kafka.topic.parse().map_err(|e| format!("{e}")),
        }
    }

    /// The connection and the outbox tables, connecting when there is
    /// none.
    async fn conn(
        &mut self,
        config: &ForwarderConfig,
    ) -> Result<&mut (Conn, Vec<(String, String)>), DefiniteError> {
        if self.conn.is_none() {
            let (mut conn, _, _) = verify::source_connection(config).await?;
            let tables = verify::outbox_tables(&mut conn, config).await?;
            self.conn = Some((conn, tables));
        }
        match &mut self.conn {
            Some(conn) => Ok(conn),
            None => unreachable!("connected above"),
        }
    }

    /// The server's time, in seconds since the epoch.
    async fn now_s(&mut self, config: &ForwarderConfig) -> Result<i64, DefiniteError> {
        let (conn, _) = self.conn(config).await?;
        let now = conn
            .query_first("SELECT CAST(FLOOR(UNIX_TIMESTAMP(NOW(6))) AS SIGNED)")
            .await
            .map_err(verify::reading_tables)
            .and_then(|now: Option<i64>| now.ok_or_else(no_time));
        self.kept(now)
    }

    /// `result`; the connection is dropped when it is an error, and the
    /// next pass connects again.
    fn kept<T>(&mut self, result: Result<T, DefiniteError>) -> Result<T, DefiniteError> {
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    /// The rows created from `settle_seconds` before the last selection's
    /// end (an interval and the settle delay back for the first) to now.
    /// A failed query drops the connection: the next pass connects again.
    async fn select(
        &mut self,
        config: &ForwarderConfig,
        section: &AuditSection,
        last: Option<&str>,
    ) -> Result<Rows, DefiniteError> {
        let selected = self.select_on(config, section, last).await;
        self.kept(selected)
    }

    async fn select_on(
        &mut self,
        config: &ForwarderConfig,
        section: &AuditSection,
        last: Option<&str>,
    ) -> Result<Rows, DefiniteError> {
        let decode = config.decode_config()?;
        let template = self.template.clone().map_err(DefiniteError::Config)?;
        let (conn, tables) = self.conn(config).await?;
        let settle = section.settle_seconds;
        let back = match last {
            Some(_) => settle,
            None => settle + section.interval_seconds,
        };
        let now: Option<(String, i64, String)> = conn
            .exec_first(
                "SELECT CAST(NOW(6) AS CHAR), CAST(FLOOR(UNIX_TIMESTAMP(NOW(6))) AS SIGNED), \
                 CAST(CAST(COALESCE(?, NOW(6)) AS DATETIME(6)) - INTERVAL ? SECOND AS CHAR)",
                (last, back),
            )
            .await
            .map_err(verify::reading_tables)?;
        let Some((now, now_s, since)) = now else {
            return Err(no_time());
        };
        let selection = Selection {
            since: Some(since),
            until: Some(now.clone()),
            time_column: section.time_column.clone(),
            event_ids: Vec::new(),
        };
        // A fixed topic needs no routing columns: the ids and times come
        // from the time column's index alone.
        let wanted = verify::Wanted {
            routing: template.literal_prefix().1 || decode.columns.topic_column.is_some(),
            created: true,
        };
        let mut rows = Vec::new();
        for (schema, table) in tables.iter() {
            let found =
                verify::table_rows(conn, &decode.columns, (schema, table), &selection, wanted)
                    .await
                    .map_err(verify::reading_tables)?;
            rows.extend(found.into_iter().map(|row| Selected {
                topic: template.route(&row.event).ok(),
                created_s: row.created_s.unwrap_or(now_s),
                id: row.id,
            }));
        }
        Ok(Rows { rows, now, now_s })
    }

    /// Where a reader of the rows created from `oldest_s` on starts (see
    /// [`verify::window_start`]).
    async fn window_start(
        &mut self,
        config: &ForwarderConfig,
        section: &AuditSection,
        oldest_s: i64,
    ) -> Result<super::window::Start, DefiniteError> {
        let (conn, tables) = self.conn(config).await?;
        let since = verify::datetime(conn, oldest_s).await?;
        let selection = Selection {
            since: Some(since),
            until: None,
            time_column: section.time_column.clone(),
            event_ids: Vec::new(),
        };
        let tables = tables.clone();
        verify::window_start(conn, config, &tables, &selection, MARGIN).await
    }
}
