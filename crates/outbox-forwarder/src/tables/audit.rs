//! `[audit]`: the continuous proof, inside `run`, that every committed
//! outbox row is in Kafka. Every interval a pass takes the rows created
//! since the last pass's end and more than the settle delay ago, reads the
//! window of the topics they need once (as `verify` does), and proves each
//! by its table and event id. A row it cannot find is named in the log,
//! counted, and looked for again at every pass until it is found; nothing
//! is fixed silently (`verify` and `backfill` are what an operator runs).
//!
//! A pass reads the table on the primary through a connection of its own
//! and the topics with a reader of its own, off the runtime's workers;
//! when either cannot be read, the pass fails, says so, and the next one
//! tries again: forwarding is never held up. Rows created before the
//! first pass's period are not audited (`verify --since` covers any
//! period).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use outbox_core::DefiniteError;

use super::verify::{self, RowId, Selection, VerifyOptions};
use super::window::Reading;
use crate::config::{AuditSection, ForwarderConfig};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// Unproven rows named and looked for again, at most; the oldest are kept.
const TRACKED: usize = 10_000;

/// Unproven rows looked for again by id in one pass, at most (the oldest).
const RECHECKED: usize = 1_000;

/// Runs a pass every `[audit] interval_seconds` until `shutdown`.
pub async fn audit(config: ForwarderConfig, metrics: Arc<Metrics>, mut shutdown: Shutdown) {
    let section = config.audit.clone();
    let interval = Duration::from_secs(section.interval_seconds);
    let mut audit = Audit::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.requested() => return,
        }
        let started = Instant::now();
        tokio::select! {
            pass = audit.pass(&config, &section) => match pass {
                Ok(pass) => {
                    metrics.audit.pass(
                        pass.proven,
                        audit.unproven.len() as u64,
                        audit.unproven.values().min().copied(),
                        section.settle_seconds,
                        pass.read,
                        pass.until_epoch,
                    );
                    let took_ms = started.elapsed().as_millis() as u64;
                    tracing::info!(proven = pass.proven, unproven = audit.unproven.len(), read = pass.read, took_ms, "audit: {} rows proven in Kafka, {} not proven", pass.proven, audit.unproven.len());
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
#[derive(Default)]
struct Audit {
    /// Where the last pass's period ended (the server's time, as text).
    since: Option<String>,
    /// Rows not found yet, and when a pass first missed each.
    unproven: BTreeMap<RowId, Instant>,
}

/// What one pass did.
struct Pass {
    /// Rows newly proven (this period's and earlier unproven ones).
    proven: u64,
    read: u64,
    until_epoch: u64,
}

impl Audit {
    async fn pass(
        &mut self,
        config: &ForwarderConfig,
        section: &AuditSection,
    ) -> Result<Pass, DefiniteError> {
        let (until, until_epoch, first) = period_end(config, section).await?;
        let since = self.since.clone().unwrap_or(first);
        let reading = Reading {
            max_messages_per_second: section.max_messages_per_second,
            ..Reading::default()
        };
        let options = VerifyOptions {
            selection: Selection {
                since: Some(since),
                until: Some(until.clone()),
                time_column: section.time_column.clone(),
                event_ids: Vec::new(),
            },
            kafka: reading,
            ..VerifyOptions::default()
        };
        let report = verify::verify(config, &options).await?;
        let mut proven = (report.outbox_rows - report.missing.len()) as u64;
        let mut read = report.kafka_records as u64;
        let (late, reread) = self.look_again(config, section, reading).await?;
        proven += late;
        read += reread;
        let now = Instant::now();
        for row in report.missing {
            tracing::warn!(table = %row.table, event_id = %row.event_id, "audit: outbox row committed more than {} s ago is not in Kafka; `outbox-forwarder verify --event-id {}` shows it, `backfill` publishes it", section.settle_seconds, row.event_id);
            if self.unproven.len() < TRACKED {
                self.unproven.entry(row).or_insert(now);
            }
        }
        self.since = Some(until);
        Ok(Pass {
            proven,
            read,
            until_epoch,
        })
    }

    /// Looks for the oldest rows earlier passes did not find: how many are
    /// found now (and no longer tracked), and the messages read.
    async fn look_again(
        &mut self,
        config: &ForwarderConfig,
        section: &AuditSection,
        kafka: Reading,
    ) -> Result<(u64, u64), DefiniteError> {
        let mut oldest: Vec<(&RowId, &Instant)> = self.unproven.iter().collect();
        oldest.sort_by_key(|(_, at)| **at);
        let ids: Vec<RowId> = oldest
            .into_iter()
            .take(RECHECKED)
            .map(|(id, _)| id.clone())
            .collect();
        if ids.is_empty() {
            return Ok((0, 0));
        }
        let options = VerifyOptions {
            selection: Selection {
                since: None,
                until: None,
                time_column: section.time_column.clone(),
                event_ids: ids.iter().map(|id| id.event_id.clone()).collect(),
            },
            kafka,
            ..VerifyOptions::default()
        };
        let report = verify::verify(config, &options).await?;
        let mut found = 0;
        for id in ids {
            if !report.missing.contains(&id) {
                self.unproven.remove(&id);
                tracing::info!(table = %id.table, event_id = %id.event_id, "audit: outbox row found in Kafka after all");
                found += 1;
            }
        }
        Ok((found, report.kafka_records as u64))
    }
}

/// The end of this pass's period (rows created before it, the settle delay
/// ago, as the server's time), that time since the epoch, and where a first
/// pass's period starts (an interval before it).
async fn period_end(
    config: &ForwarderConfig,
    section: &AuditSection,
) -> Result<(String, u64, String), DefiniteError> {
    let (mut conn, _, _) = verify::source_connection(config).await?;
    let row: Option<(String, i64, String)> = conn
        .exec_first(
            "SELECT CAST(NOW(6) - INTERVAL ? SECOND AS CHAR), \
             CAST(UNIX_TIMESTAMP(NOW(6) - INTERVAL ? SECOND) AS SIGNED), \
             CAST(NOW(6) - INTERVAL ? SECOND AS CHAR)",
            (
                section.settle_seconds,
                section.settle_seconds,
                section.settle_seconds + section.interval_seconds,
            ),
        )
        .await
        .map_err(verify::reading_tables)?;
    let _ = conn.disconnect().await;
    let (until, epoch, first) = row.unwrap_or_default();
    Ok((until, epoch.max(0) as u64, first))
}
