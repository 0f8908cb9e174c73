//! One event, one MySQL transaction: the inbox row and the handler's side
//! effects commit together or not at all.
//!
//! ```text
//! BEGIN
//!   INSERT consumed_event (consumer_name, event_id)
//!   ├── ok ──────────────► handler(tx, event)
//!   │                      ├── Ok  → COMMIT → Processed      (ack)
//!   │                      │         └── COMMIT fails → CommitUnknown (no ack)
//!   │                      └── Err → ROLLBACK (inbox row too) → Handler error
//!   ├── 1062 on uq_consumed_event_identity → ROLLBACK → Duplicate (ack)
//!   └── anything else → ROLLBACK → Claim / Database error (no ack)
//! ```
//!
//! A batch ([`Inbox::process_batch`]) does the same for several events of a
//! partition in one transaction: one multi-row INSERT of their inbox rows
//! (and, if the server refuses it, one INSERT per event in the same
//! transaction, to learn exactly which are duplicates), the handler for the
//! new ones, one COMMIT. A handler error rolls the batch back and the
//! events before the failing one are run again without it; nothing of a
//! batch is ever committed in part.
//!
//! Invariants:
//! - "Already processed" is concluded from exactly one thing: MySQL error
//!   1062 whose message names the key `uq_consumed_event_identity`. Another
//!   unique key, a foreign key, a truncated value or an unknown error is a
//!   failure. Nothing is concluded from a SELECT made before the insert: two
//!   consumers racing on one event are serialised by the unique key (the
//!   second insert waits for the first transaction and then fails with 1062).
//! - A failed COMMIT has an unknown outcome (the server may have committed
//!   before the connection dropped), so it is reported as
//!   [`ProcessError::CommitUnknown`] and never acknowledged; processing the
//!   message again resolves it: the insert either succeeds (it had not
//!   committed) or hits the key (it had).
//! - Every transaction starts by making its session strict
//!   ([`STRICT_SESSION`]), so an over-long event id fails instead of being
//!   truncated into another event's identity, whatever the server's own
//!   `sql_mode` and whatever ran on the connection before.
//!
//! [`handler`] is what a consumer plugs in; [`outcome`] what a claim and a
//! handler's errors mean.

use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Pool, Transaction, TxOpts};
use tracing::Instrument;

use crate::config::MysqlSection;
use crate::event::InboxEvent;
use crate::metrics::InboxMetrics;

mod handler;
mod outcome;

pub use handler::{handle_one_by_one, BatchFailure, Disposition, Handler, HandlerError};
use outcome::refused_claim;
pub use outcome::{
    is_inbox_duplicate, is_outage, InboxOutcome, ProcessError, INBOX_IDENTITY_KEY,
    OUTAGE_SERVER_ERRORS,
};

/// The inbox of one consumer: processes events in their own transactions.
#[derive(Clone)]
pub struct Inbox {
    pool: Pool,
    consumer_name: String,
    metrics: Arc<InboxMetrics>,
}

/// Makes the session strict, so an over-long event id is an error rather
/// than a truncation that could collide with another id. Every inbox
/// transaction runs it first: whatever ran on the connection before (a
/// handler's `SET SESSION`, or the pool's reset back to the server's own
/// mode) cannot make a claim lax.
pub const STRICT_SESSION: &str =
    "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')";

/// The claim of events: one inbox row each, `(?, ?)` per event after it.
const CLAIM: &str = "INSERT INTO consumed_event (consumer_name, event_id) VALUES";

impl Inbox {
    /// Claims `event_id` for this consumer in `tx`: fails on a duplicate
    /// (the event was processed) or a row the table refuses.
    async fn claim(
        &self,
        tx: &mut mysql_async::Transaction<'_>,
        event_id: &str,
    ) -> Result<(), mysql_async::Error> {
        tx.exec_drop(format!("{CLAIM} (?, ?)"), (&self.consumer_name, event_id))
            .await
    }

    /// A transaction in a strict session (see [`STRICT_SESSION`]).
    async fn begin(&self) -> Result<Transaction<'static>, mysql_async::Error> {
        let mut tx = self.pool.start_transaction(TxOpts::default()).await?;
        tx.query_drop(STRICT_SESSION).await?;
        Ok(tx)
    }

    /// The inbox of `consumer_name` in the database behind `pool` (built
    /// with [`Inbox::pool_options`] for the pool settings of
    /// [`MysqlSection`]).
    pub fn new(pool: Pool, consumer_name: impl Into<String>) -> Self {
        let consumer_name = consumer_name.into();
        Inbox {
            pool,
            metrics: Arc::new(InboxMetrics::new(consumer_name.clone())),
            consumer_name,
        }
    }

    /// The pool's driver options for `mysql` ([`MysqlSection::pool_options`]).
    pub fn pool_options(mysql: &MysqlSection) -> Result<mysql_async::Opts, String> {
        mysql.pool_options()
    }

    /// Closes the pool's connections, waiting for connections in use to come
    /// back; for a clean shutdown.
    pub async fn disconnect(self) {
        if let Err(error) = self.pool.disconnect().await {
            tracing::warn!(%error, "closing the database pool failed");
        }
    }

    /// The consumer name inbox rows are written under.
    pub fn consumer_name(&self) -> &str {
        &self.consumer_name
    }

    /// What this inbox measures: the events it settled and the time from
    /// their commit to the handler's.
    pub fn metrics(&self) -> Arc<InboxMetrics> {
        self.metrics.clone()
    }

    /// Counts `outcomes` of `events`, just committed.
    fn settled(&self, events: &[InboxEvent], outcomes: &[InboxOutcome]) {
        let now_ms = outbox_core::epoch_ms();
        for (event, outcome) in events.iter().zip(outcomes) {
            match outcome {
                InboxOutcome::Processed => {
                    let trace = event.trace_context();
                    let trace_id = trace.as_ref().map(|t| t.trace_id());
                    self.metrics
                        .processed(event.committed_at_ms(), trace_id, now_ms);
                }
                InboxOutcome::Duplicate => self.metrics.duplicate(),
                InboxOutcome::Skipped => {}
            }
        }
    }

    /// Runs `handler` for `event` in one transaction with the inbox row; see
    /// the module docs for every outcome.
    pub async fn process<H: Handler>(
        &self,
        handler: &H,
        event: &InboxEvent,
    ) -> Result<InboxOutcome, ProcessError> {
        if !handler.accepts(event) {
            return Ok(InboxOutcome::Skipped);
        }
        let event_id = &event.event_id;
        let unavailable = |error| ProcessError::Database {
            event_id: event_id.clone(),
            error,
        };
        let mut tx = self.begin().await.map_err(unavailable)?;
        let claim = self.claim(&mut tx, event_id).await;
        if let Err(error) = claim {
            rollback(tx, event_id).await;
            let refused = refused_claim(error, event_id);
            if let Ok(duplicate) = &refused {
                self.settled(std::slice::from_ref(event), std::slice::from_ref(duplicate));
            }
            return refused;
        }
        if let Err(error) = handler
            .handle(&mut tx, event)
            .instrument(event.span())
            .await
        {
            rollback(tx, event_id).await;
            return Err(ProcessError::Handler {
                event_id: event_id.clone(),
                error,
            });
        }
        tx.commit()
            .await
            .map_err(|error| ProcessError::CommitUnknown {
                event_id: event_id.clone(),
                error,
            })?;
        self.settled(std::slice::from_ref(event), &[InboxOutcome::Processed]);
        Ok(InboxOutcome::Processed)
    }

    /// Runs `handler` for `events` (of one partition, in order) in as few
    /// transactions as it can, each with the inbox rows of its events; see
    /// the module docs. The result settles a prefix of `events` and, if the
    /// batch stopped before its end, holds the failed attempt of the event
    /// right after that prefix, exactly as [`Inbox::process`] would have
    /// failed for it.
    pub async fn process_batch<H: Handler>(
        &self,
        handler: &H,
        events: &[InboxEvent],
    ) -> BatchResult {
        let mut end = events.len();
        let mut stopped = None;
        let mut one_by_one = false;
        loop {
            if end == 0 {
                return BatchResult {
                    outcomes: Vec::new(),
                    stopped,
                };
            }
            match self.try_batch(handler, &events[..end], one_by_one).await {
                BatchTry::Committed {
                    outcomes,
                    claim_refused,
                } => {
                    return BatchResult {
                        outcomes,
                        stopped: claim_refused.or(stopped),
                    }
                }
                BatchTry::Shorter {
                    end: shorter,
                    failed,
                } => {
                    end = shorter;
                    stopped = Some(failed);
                }
                BatchTry::Unattributed => one_by_one = true,
                BatchTry::Nothing(error) => {
                    return BatchResult {
                        outcomes: Vec::new(),
                        stopped: Some(error),
                    }
                }
            }
        }
    }

    /// Claims the inbox rows of the `accepted` events in one statement; if
    /// the server refuses it (a duplicate, or a row it rejects), one
    /// statement per event, each undone alone by the server when it fails,
    /// to learn exactly which. Duplicates are marked in `outcomes`. Returns
    /// where the batch ends (before a claim refused for another reason)
    /// and that refusal; an error when the database is unavailable.
    async fn claim_batch(
        &self,
        tx: &mut Transaction<'_>,
        batch: &[InboxEvent],
        accepted: &[usize],
        outcomes: &mut [InboxOutcome],
    ) -> Result<(usize, Option<ProcessError>), mysql_async::Error> {
        let rows = vec!["(?, ?)"; accepted.len()].join(", ");
        let params: Vec<mysql_async::Value> = accepted
            .iter()
            .flat_map(|&i| [self.consumer_name.as_str(), batch[i].event_id.as_str()])
            .map(mysql_async::Value::from)
            .collect();
        match tx.exec_drop(format!("{CLAIM} {rows}"), params).await {
            Ok(()) => return Ok((batch.len(), None)),
            Err(error) if is_outage(&error) || !matches!(error, mysql_async::Error::Server(_)) => {
                return Err(error)
            }
            Err(_) => {}
        }
        for &i in accepted {
            let event_id = &batch[i].event_id;
            let Err(error) = self.claim(tx, event_id).await else {
                continue;
            };
            match refused_claim(error, event_id) {
                Ok(duplicate) => outcomes[i] = duplicate,
                Err(ProcessError::Database { error, .. }) => return Err(error),
                Err(refused) => return Ok((i, Some(refused))),
            }
        }
        Ok((batch.len(), None))
    }

    /// One transaction for `batch`; see [`BatchTry`].
    async fn try_batch<H: Handler>(
        &self,
        handler: &H,
        batch: &[InboxEvent],
        one_by_one: bool,
    ) -> BatchTry {
        let mut outcomes: Vec<InboxOutcome> = batch
            .iter()
            .map(|event| {
                if handler.accepts(event) {
                    InboxOutcome::Processed
                } else {
                    InboxOutcome::Skipped
                }
            })
            .collect();
        let accepted: Vec<usize> = (0..batch.len())
            .filter(|&i| outcomes[i] == InboxOutcome::Processed)
            .collect();
        if accepted.is_empty() {
            return BatchTry::Committed {
                outcomes,
                claim_refused: None,
            };
        }
        // A failure of the whole transaction is reported as the head's
        // attempt, as for a single event.
        let head = &batch[0].event_id;
        let unavailable = |error| {
            BatchTry::Nothing(ProcessError::Database {
                event_id: head.clone(),
                error,
            })
        };
        let mut tx = match self.begin().await {
            Ok(tx) => tx,
            Err(error) => return unavailable(error),
        };

        let (end, claim_refused) = match self
            .claim_batch(&mut tx, batch, &accepted, &mut outcomes)
            .await
        {
            Ok(claimed) => claimed,
            Err(error) => {
                rollback(tx, head).await;
                return unavailable(error);
            }
        };
        outcomes.truncate(end);

        if let Err(next) = apply_new(handler, &mut tx, &batch[..end], &outcomes, one_by_one).await {
            rollback(tx, head).await;
            return next;
        }
        if let Err(error) = tx.commit().await {
            return BatchTry::Nothing(ProcessError::CommitUnknown {
                event_id: head.clone(),
                error,
            });
        }
        self.settled(batch, &outcomes);
        BatchTry::Committed {
            outcomes,
            claim_refused,
        }
    }
}

/// What [`Inbox::process_batch`] settled, and where it stopped.
#[derive(Debug)]
pub struct BatchResult {
    /// The outcomes of the batch's first events, in order: these are final.
    pub outcomes: Vec<InboxOutcome>,
    /// The failed attempt of the event right after them, when the batch
    /// stopped there (nothing of it was committed).
    pub stopped: Option<ProcessError>,
}

/// How one transaction of a batch ended.
enum BatchTry {
    /// Committed: the outcomes of a prefix; a refused inbox row (not a
    /// duplicate) ended the prefix, and is the next event's failed attempt.
    Committed {
        outcomes: Vec<InboxOutcome>,
        claim_refused: Option<ProcessError>,
    },
    /// Rolled back: the handler failed for the event at `end`; the events
    /// before it are tried again without it.
    Shorter { end: usize, failed: ProcessError },
    /// Rolled back: the handler failed without saying for which event; the
    /// batch is tried again one event at a time to find it.
    Unattributed,
    /// Rolled back, or the commit's outcome is unknown: nothing settled; the
    /// head's attempt failed with this.
    Nothing(ProcessError),
}

/// Runs the handler on the events of `batch` claimed as new (in the
/// transaction of their claims); on failure, the try that comes next.
async fn apply_new<H: Handler>(
    handler: &H,
    tx: &mut Transaction<'_>,
    batch: &[InboxEvent],
    outcomes: &[InboxOutcome],
    one_by_one: bool,
) -> Result<(), BatchTry> {
    let new: Vec<usize> = (0..batch.len())
        .filter(|&i| outcomes[i] == InboxOutcome::Processed)
        .collect();
    if new.is_empty() {
        return Ok(());
    }
    let new_events: Vec<&InboxEvent> = new.iter().map(|&i| &batch[i]).collect();
    let handled = if one_by_one {
        handle_one_by_one(handler, tx, &new_events).await
    } else {
        handler.handle_batch(tx, &new_events).await
    };
    let Err(failure) = handled else {
        return Ok(());
    };
    Err(match failure.index.and_then(|j| new.get(j).copied()) {
        Some(i) => BatchTry::Shorter {
            end: i,
            failed: ProcessError::Handler {
                event_id: batch[i].event_id.clone(),
                error: failure.error,
            },
        },
        None => BatchTry::Unattributed,
    })
}

/// Rolls back; a failed rollback is only logged, because the server rolls
/// back the transaction of a connection that drops anyway.
async fn rollback(tx: Transaction<'_>, event_id: &str) {
    if let Err(error) = tx.rollback().await {
        tracing::warn!(event_id, %error, "rollback failed; the server discards the transaction with the connection");
    }
}
