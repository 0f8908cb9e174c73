//! `backfill`: publishing outbox rows from their table rather than the
//! binlog, for events the binlog can no longer give (a purged gap, see
//! [`super::repair`]) or a consumer that must rebuild.
//!
//! The table is read in chunks in primary key order ([`PrimaryKey`]), at most
//! `max_rows_per_second`, on the server a fresh start would pick. Each
//! row goes through the same decoding, router, headers and producer as
//! `run`'s ([`outbox_source::TableDecoder`], [`KafkaSink::send_backfill`]),
//! and carries the [`Backfilled`] headers: a binlog position (and GTID
//! state) read after its chunk, so after its insert. A forwarder that reads
//! the message back after a crash skips the row's insert by event id
//! rather than publishing it again, and keeps reading from before the
//! message until its checkpoint passes that position (the pipeline's `replay`).
//!
//! By default only the rows `verify`'s comparison finds missing from
//! Kafka are published; `--all` publishes every selected row.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_core::sql::Qualified;
use outbox_core::Acks;
use outbox_core::{DefiniteError, ForwarderError, GtidState};
use outbox_sink::{Backfilled, BrokerHealth, KafkaSink};
use outbox_source::server::{self, ServerInfo};
use outbox_source::{TableColumn, TableDecoder};

use super::meter::Meter;
use super::verify::{self, RowId, Selection, VerifyOptions};
use crate::config::ForwarderConfig;

use super::key::PrimaryKey;
use super::pace::Pace;

/// What to publish and how fast.
#[derive(Debug, Clone)]
pub struct BackfillOptions {
    pub selection: Selection,
    /// Every selected row, not only those missing from Kafka.
    pub all: bool,
    /// Rows read from the tables per second, at most (`None`: no limit).
    pub max_rows_per_second: Option<u32>,
    /// Rows per query.
    pub chunk: usize,
    /// Under `mysql.publish_after_replicas`: how long a chunk waits for
    /// enough replicas to have applied its rows.
    pub replica_wait: Duration,
    /// The command, in the `backfill` header.
    pub by: &'static str,
    /// How the comparison reads Kafka.
    pub kafka: super::window::Reading,
}

/// What a backfill did.
#[derive(Debug, Default)]
pub struct BackfillReport {
    /// Selected rows found missing from Kafka (`None` under `--all`).
    pub missing: Option<usize>,
    /// Messages the comparison read from Kafka.
    pub kafka_read: u64,
    pub rows_read: u64,
    pub published: u64,
    /// Rows that cannot become a message: table, row and why.
    pub bad_rows: Vec<String>,
    /// Ids found missing that were no longer in the table when read.
    pub gone: Vec<String>,
    /// Per topic and partition, the lowest offset a backfilled message
    /// was stored at.
    pub first_offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    pub took: Duration,
}

impl std::fmt::Display for BackfillReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(missing) = self.missing {
            write!(
                f,
                "missing from Kafka {missing}, Kafka messages read {}, ",
                self.kafka_read
            )?;
        }
        write!(
            f,
            "rows read {}, published {}, bad rows {}, gone from the table {}, in {:.1} s",
            self.rows_read,
            self.published,
            self.bad_rows.len(),
            self.gone.len(),
            self.took.as_secs_f64()
        )
    }
}

/// Publishes the rows `options` selects (see the module docs).
pub async fn backfill(
    config: &ForwarderConfig,
    options: &BackfillOptions,
) -> Result<BackfillReport, DefiniteError> {
    let started = Instant::now();
    let mut report = BackfillReport::default();
    let wanted = if options.all {
        None
    } else {
        let verified = verify::verify(
            config,
            &VerifyOptions {
                selection: options.selection.clone(),
                kafka: options.kafka,
                ..Default::default()
            },
        )
        .await?;
        report.missing = Some(verified.missing.len());
        report.kafka_read = verified.kafka_records as u64;
        tracing::info!(
            rows = verified.outbox_rows,
            missing = verified.missing.len(),
            "{}: compared the selected rows with Kafka",
            options.by
        );
        if verified.missing.is_empty() {
            report.took = started.elapsed();
            return Ok(report);
        }
        Some(verified.missing.into_iter().collect::<HashSet<RowId>>())
    };
    let (mut conn, info, source) = verify::source_connection(config).await?;
    let mut sink = KafkaSink::new(&config.kafka_config(), Arc::new(BrokerHealth::default()))?;
    sink.set_server(info.identity.key());
    let mut run = Run {
        config,
        options,
        info: &info,
        source,
        sink,
        wanted,
        pace: Pace::new(options.max_rows_per_second),
        meter: Meter::new(options.by, "rows", None),
        report,
        acks: Acks::default(),
    };
    let tables = verify::outbox_tables(&mut conn, config).await?;
    let mut total = 0;
    for (schema, table) in &tables {
        total += run.count(&mut conn, schema, table).await?;
    }
    run.meter = Meter::new(options.by, "rows", Some(total));
    for (schema, table) in &tables {
        run.table(&mut conn, schema, table).await?;
    }
    let _ = conn.disconnect().await;
    run.confirm().await?;
    run.report.took = started.elapsed();
    if let Some(wanted) = run.wanted.take() {
        // Found missing, then not found in the table: deleted meanwhile.
        let mut gone: Vec<RowId> = wanted.into_iter().collect();
        gone.sort();
        run.report.gone = gone.iter().map(ToString::to_string).collect();
    }
    run.meter.done(run.report.rows_read, run.report.published);
    Ok(run.report)
}

/// One backfill under way.
struct Run<'a> {
    config: &'a ForwarderConfig,
    options: &'a BackfillOptions,
    info: &'a ServerInfo,
    /// The index in `mysql.url` of the server read.
    source: usize,
    sink: KafkaSink,
    /// Rows still to publish; `None`: every selected row.
    wanted: Option<HashSet<RowId>>,
    pace: Pace,
    meter: Meter,
    report: BackfillReport,
    acks: Acks,
}

impl Run<'_> {
    /// How many rows of `schema`.`table` the selection holds.
    async fn count(
        &self,
        conn: &mut Conn,
        schema: &str,
        table: &str,
    ) -> Result<u64, DefiniteError> {
        let event_id = &self.config.outbox.columns.event_id;
        let (conditions, params) = self.options.selection.conditions(event_id);
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE 1=1{conditions}",
            Qualified(schema, table)
        );
        let count: Option<u64> = conn
            .exec_first(sql, params)
            .await
            .map_err(verify::reading_tables)?;
        Ok(count.unwrap_or(0))
    }

    /// Reads and publishes the selected rows of one table, chunk by chunk.
    async fn table(
        &mut self,
        conn: &mut Conn,
        schema: &str,
        table: &str,
    ) -> Result<(), DefiniteError> {
        let columns = table_columns(conn, schema, table).await?;
        let decoder =
            TableDecoder::new(self.config.decode_config()?, schema, table, columns.clone())?;
        let key = PrimaryKey::of(conn, schema, table).await?;
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        let key_at = key.positions(&names)?;
        let event_id_at = names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(&self.config.outbox.columns.event_id));
        let (conditions, params) = self
            .options
            .selection
            .conditions(&self.config.outbox.columns.event_id);
        let select = decoder.select_list();
        let qualified = format!("{schema}.{table}");
        let mut after: Option<Vec<mysql_async::Value>> = None;
        loop {
            let limit = self.pace.chunk(self.options.chunk);
            self.pace.wait(self.report.rows_read).await;
            let mut sql = format!(
                "SELECT {select} FROM {} WHERE 1=1{conditions}",
                Qualified(schema, table)
            );
            let mut chunk_params = params.clone();
            if let Some(after) = &after {
                sql.push_str(&key.after());
                chunk_params.extend(after.iter().cloned());
            }
            sql.push_str(&format!(" ORDER BY {} LIMIT {limit}", key.list()));
            let rows: Vec<mysql_async::Row> = conn
                .exec(sql, chunk_params)
                .await
                .map_err(verify::reading_tables)?;
            if rows.is_empty() {
                return Ok(());
            }
            let mark = self.chunk_mark(conn).await?;
            let read = rows.len();
            for row in rows {
                let values = row.unwrap();
                after = Some(key_at.iter().map(|&i| values[i].clone()).collect());
                // Rows already in Kafka are not decoded at all.
                let id = event_id_at.and_then(|i| match &values[i] {
                    mysql_async::Value::Bytes(id) => std::str::from_utf8(id).ok(),
                    _ => None,
                });
                if let (Some(wanted), Some(id)) = (&self.wanted, id) {
                    if !wanted.contains(&RowId::new(qualified.as_str(), id)) {
                        continue;
                    }
                }
                self.row(&decoder, values, &mark).await?;
            }
            self.report.rows_read += read as u64;
            self.take_acks()?;
            self.meter
                .tick(self.report.rows_read, self.report.published);
            if read < limit {
                return Ok(());
            }
        }
    }

    /// The mark of a chunk just read: where the binlog is now, after the
    /// rows (each one's insert lies before it), once the replicas
    /// `mysql.publish_after_replicas` asks for have it.
    async fn chunk_mark(&self, conn: &mut Conn) -> Result<Backfilled, DefiniteError> {
        let (before, before_gtid) = server::current_position_and_gtid(conn, self.info.flavor)
            .await
            .map_err(crate::resume::definite)?;
        self.replicas_have(before_gtid.as_ref()).await?;
        Ok(Backfilled {
            by: self.options.by,
            server: self.info.identity.key(),
            before,
            before_gtid,
        })
    }

    /// Under `mysql.publish_after_replicas`: returns once enough replicas
    /// have applied `state` (the server's, read after a chunk's rows), so
    /// that no row reaches Kafka that a failover to a replica would lose.
    async fn replicas_have(&self, state: Option<&GtidState>) -> Result<(), DefiniteError> {
        let need = self.config.mysql.publish_after_replicas;
        if need == 0 {
            return Ok(());
        }
        let Some(state) = state else {
            return Err(DefiniteError::Config(format!(
                "mysql.publish_after_replicas = {need}, and {} logs no GTIDs: which rows the \
                 replicas have cannot be told; nothing more published",
                self.info.identity
            )));
        };
        let candidates = crate::resume::candidates(self.config)?;
        crate::replicas::wait_until_applied(
            &candidates,
            self.source,
            need,
            state,
            self.options.replica_wait,
        )
        .await
        .map_err(|why| {
            DefiniteError::Config(format!(
                "{}: mysql.publish_after_replicas = {need}, and {why}; nothing of this chunk \
                 was published (what was is listed above): run it again once the replicas \
                 have caught up",
                self.options.by
            ))
        })
    }

    /// Publishes one row, if it is wanted; a row that cannot become a
    /// message is reported, not published.
    async fn row(
        &mut self,
        decoder: &TableDecoder,
        values: Vec<mysql_async::Value>,
        mark: &Backfilled,
    ) -> Result<(), DefiniteError> {
        let event = match decoder.decode(values, &mark.before) {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(error = %e, "{}: a row that cannot become a message is left out", self.options.by);
                self.report.bad_rows.push(e.to_string());
                return Ok(());
            }
        };
        if let Some(wanted) = &mut self.wanted {
            let id = RowId::new(event.origin.qualified_table(), event.event_id.as_str());
            if !wanted.remove(&id) {
                return Ok(());
            }
        }
        match self.sink.send_backfill(&event, 0, mark).await {
            Ok(()) => {}
            Err(ForwarderError::Definite(e @ DefiniteError::BadRow { .. })) => {
                tracing::warn!(error = %e, "{}: a row that cannot become a message is left out", self.options.by);
                self.report.bad_rows.push(e.to_string());
                return Ok(());
            }
            Err(e) => return Err(not_confirmed(e)),
        }
        self.report.published += 1;
        Ok(())
    }

    /// Fails on the first message the broker did not take.
    fn take_acks(&mut self) -> Result<(), DefiniteError> {
        self.sink.take_acks(&mut self.acks);
        for placement in &self.acks.placements {
            let topic = &self.acks.per_topic[placement.topic].0;
            let first = self
                .report
                .first_offsets
                .entry(topic.clone())
                .or_default()
                .entry(placement.partition)
                .or_insert(placement.offset);
            *first = (*first).min(placement.offset);
        }
        let failed = self.acks.failed.take();
        self.acks.clear();
        failed.map_or(Ok(()), |e| Err(not_confirmed(e)))
    }

    /// Waits for the broker's answer to every message sent.
    async fn confirm(&mut self) -> Result<(), DefiniteError> {
        self.sink.send_now();
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.sink.outstanding() > 0 {
            if Instant::now() > deadline {
                return Err(DefiniteError::Config(format!(
                    "{} messages were not acknowledged within 120 s; run the command again \
                     (it publishes only what is still missing)",
                    self.sink.outstanding()
                )));
            }
            tokio::select! {
                _ = self.sink.acks_ready() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            self.take_acks()?;
        }
        self.take_acks()
    }
}

fn not_confirmed(e: ForwarderError) -> DefiniteError {
    DefiniteError::Config(format!(
        "publishing failed: {e}; what was acknowledged stays in Kafka, run the command again \
         to publish what is still missing"
    ))
}

/// The columns of `schema`.`table` in table order.
pub(crate) async fn table_columns(
    conn: &mut Conn,
    schema: &str,
    table: &str,
) -> Result<Vec<TableColumn>, DefiniteError> {
    let rows: Vec<(String, String, String)> = conn
        .exec(
            "SELECT column_name, data_type, column_type FROM information_schema.columns \
             WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
            (schema, table),
        )
        .await
        .map_err(verify::reading_tables)?;
    Ok(rows
        .into_iter()
        .map(|(name, data_type, column_type)| TableColumn {
            name,
            data_type,
            unsigned: column_type.to_ascii_lowercase().contains("unsigned"),
        })
        .collect())
}
