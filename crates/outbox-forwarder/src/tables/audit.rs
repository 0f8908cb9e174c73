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

use std::collections::{BTreeMap, HashSet};
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

/// Rows named one by one in a pass's log, at most; the rest are counted.
const NAMED: usize = 20;

/// How far before a row's time a pass reads the topics: the clocks of the
/// database's and the producer's hosts. A row whose message lies further
/// back is found by the next pass's look by id, with the table tools'
/// wider margin.
const MARGIN: Duration = Duration::from_secs(60);

/// How long after the period's end a pass reads: a row published later
/// (the forwarder behind) is found by the next passes' look by id.
const PUBLISHED_WITHIN: Duration = Duration::from_secs(3_600);

/// Runs a pass every `[audit] interval_seconds` until `shutdown`.
pub async fn audit(config: ForwarderConfig, metrics: Arc<Metrics>, mut shutdown: Shutdown) {
    let section = config.audit.clone();
    let interval = Duration::from_secs(section.interval_seconds);
    let mut audit = Audit::default();
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
    /// Rows the last pass proved: the next one reads its period again
    /// from `settle_seconds` back (a transaction that committed late), and
    /// does not count them twice.
    recent: HashSet<RowId>,
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
        let (until, until_epoch, since) = period(config, section, self.since.as_deref()).await?;
        let reading = Reading {
            margin: MARGIN,
            max_messages_per_second: section.max_messages_per_second,
            until_ms: Some((until_epoch * 1000 + PUBLISHED_WITHIN.as_millis() as u64) as i64),
            ids_only: true,
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
        let missing: HashSet<&RowId> = report.missing.iter().collect();
        let proven_now: HashSet<RowId> = report
            .selected
            .iter()
            .filter(|id| !missing.contains(id))
            .cloned()
            .collect();
        let mut proven = newly_proven(&proven_now, &mut self.unproven, &self.recent);
        let mut read = report.kafka_records as u64;
        let wider = Reading {
            margin: super::window::DEFAULT_MARGIN,
            until_ms: None,
            ..reading
        };
        match self.look_again(config, section, wider).await {
            Ok((late, reread)) => {
                proven += late;
                read += reread;
            }
            Err(e) => {
                tracing::warn!(error = %e, "audit: the rows not proven yet could not be looked for again; the next pass tries again")
            }
        }
        self.note_missing(report.missing, section.settle_seconds);
        self.recent = proven_now;
        self.since = Some(until);
        Ok(Pass {
            proven,
            read,
            until_epoch,
        })
    }

    /// Keeps the rows a pass did not find, naming the new ones (at most
    /// [`NAMED`] by name).
    fn note_missing(&mut self, missing: Vec<RowId>, settle: u64) {
        let now = Instant::now();
        let mut new = 0;
        for row in missing {
            if self.unproven.contains_key(&row) {
                continue;
            }
            new += 1;
            if new <= NAMED {
                tracing::warn!(table = %row.table, event_id = %row.event_id, "audit: outbox row committed more than {settle} s ago is not in Kafka; `outbox-forwarder verify --event-id {}` shows it, `backfill` publishes it", row.event_id);
            }
            if self.unproven.len() < TRACKED {
                self.unproven.insert(row, now);
            }
        }
        if new > NAMED {
            tracing::warn!(rows = new, "audit: {} more outbox rows committed more than {settle} s ago are not in Kafka (`outbox-forwarder verify --since ... --statement` lists them)", new - NAMED);
        }
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
            // In Kafka by table and id; a row deleted since stays unproven
            // unless its message is there.
            if report.published.holds(&id.table, &id.event_id) {
                self.unproven.remove(&id);
                tracing::info!(table = %id.table, event_id = %id.event_id, "audit: outbox row found in Kafka after all");
                found += 1;
            }
        }
        Ok((found, report.kafka_records as u64))
    }
}

/// How many of the rows a pass proved count as newly proven: each row
/// once. A row an earlier pass missed and this one found leaves
/// `unproven` (and counts); one the last pass proved (`recent`, read again
/// in the overlap) does not count again.
fn newly_proven(
    proven_now: &HashSet<RowId>,
    unproven: &mut BTreeMap<RowId, Instant>,
    recent: &HashSet<RowId>,
) -> u64 {
    let mut proven = 0;
    for id in proven_now {
        if unproven.remove(id).is_some() {
            tracing::info!(table = %id.table, event_id = %id.event_id, "audit: outbox row found in Kafka after all");
            proven += 1;
        } else if !recent.contains(id) {
            proven += 1;
        }
    }
    proven
}

/// This pass's period: its end (rows created before it, the settle delay
/// ago, as the server's time), that time since the epoch, and its start
/// (`settle_seconds` before the last period's end, for transactions that
/// committed late; an interval before the end for the first pass).
async fn period(
    config: &ForwarderConfig,
    section: &AuditSection,
    last: Option<&str>,
) -> Result<(String, u64, String), DefiniteError> {
    let (mut conn, _, _) = verify::source_connection(config).await?;
    let settle = section.settle_seconds;
    let row: Option<(String, i64, String)> = match last {
        Some(last) => {
            conn.exec_first(
                "SELECT CAST(NOW(6) - INTERVAL ? SECOND AS CHAR), \
                 CAST(UNIX_TIMESTAMP(NOW(6) - INTERVAL ? SECOND) AS SIGNED), \
                 CAST(CAST(? AS DATETIME(6)) - INTERVAL ? SECOND AS CHAR)",
                (settle, settle, last, settle),
            )
            .await
        }
        None => {
            conn.exec_first(
                "SELECT CAST(NOW(6) - INTERVAL ? SECOND AS CHAR), \
                 CAST(UNIX_TIMESTAMP(NOW(6) - INTERVAL ? SECOND) AS SIGNED), \
                 CAST(NOW(6) - INTERVAL ? SECOND AS CHAR)",
                (settle, settle, settle + section.interval_seconds),
            )
            .await
        }
    }
    .map_err(verify::reading_tables)?;
    let _ = conn.disconnect().await;
    let (until, epoch, since) = row.unwrap_or_default();
    Ok((until, epoch.max(0) as u64, since))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_proven_in_the_overlap_or_after_a_miss_counts_once() {
        let id = |n: &str| RowId::new("shop.outbox_event", n);
        let recent: HashSet<RowId> = [id("a")].into();
        let mut unproven: BTreeMap<RowId, Instant> =
            [(id("b"), Instant::now()), (id("d"), Instant::now())].into();
        let now: HashSet<RowId> = [id("a"), id("b"), id("c")].into();
        // a: the last pass's; b: missed before, found now; c: new.
        assert_eq!(newly_proven(&now, &mut unproven, &recent), 2);
        assert_eq!(unproven.keys().collect::<Vec<_>>(), vec![&id("d")]);
        // The next pass reads a, b and c again in its overlap: none counts.
        assert_eq!(newly_proven(&now, &mut unproven, &now), 0);
    }
}
