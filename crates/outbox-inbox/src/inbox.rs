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
//! - Sessions run with strict SQL mode, so an over-long event id fails
//!   instead of being truncated into another event's identity.

use std::future::Future;

use mysql_async::prelude::Queryable;
use mysql_async::{Pool, ServerError, Transaction, TxOpts};

use crate::event::InboxEvent;

/// The named unique key of `consumed_event`; a duplicate on it, and only on
/// it, means the event was already processed by this consumer.
pub const INBOX_IDENTITY_KEY: &str = "uq_consumed_event_identity";

/// MySQL/MariaDB `ER_DUP_ENTRY`.
const ER_DUP_ENTRY: u16 = 1062;

/// What a handler does with one event, inside the inbox transaction.
///
/// The handler writes its side effects with `tx`; it must not commit or roll
/// back (the inbox does), and it should only touch the database through `tx`:
/// anything else (an HTTP call, another connection) is outside the
/// transaction and may happen twice.
pub trait Handler: Send + Sync {
    /// Whether this handler wants `event` at all. Events it does not want are
    /// acknowledged without a transaction and without an inbox row.
    fn accepts(&self, event: &InboxEvent) -> bool {
        let _ = event;
        true
    }

    /// Applies `event`. An error rolls back the whole transaction, the inbox
    /// row included, so the event can be processed again later.
    fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// Applies `events` (of one partition, in order, none seen before) in
    /// one transaction, for handlers that write a batch at once (one
    /// multi-row statement). The default calls [`Handler::handle`] for each.
    /// An error rolls back the whole batch; it names the event that failed
    /// when it can ([`BatchFailure::index`]), otherwise the events are
    /// handled again one by one to find it. Either way every other event of
    /// the batch is applied once.
    fn handle_batch(
        &self,
        tx: &mut Transaction<'_>,
        events: &[&InboxEvent],
    ) -> impl Future<Output = Result<(), BatchFailure>> + Send {
        handle_one_by_one(self, tx, events)
    }
}

/// Why a batch failed: a handler error, and which event of the batch it
/// is about when the handler knows.
#[derive(Debug)]
pub struct BatchFailure {
    /// The failing event's index in the batch; `None` when the handler
    /// cannot tell (a multi-row statement failed).
    pub index: Option<usize>,
    /// The error, as [`Handler::handle`] would have returned it for that event.
    pub error: HandlerError,
}

impl From<HandlerError> for BatchFailure {
    fn from(error: HandlerError) -> Self {
        BatchFailure { index: None, error }
    }
}

impl From<mysql_async::Error> for BatchFailure {
    fn from(error: mysql_async::Error) -> Self {
        HandlerError::from(error).into()
    }
}

/// [`Handler::handle`] for each of `events`, stopping at the first failure
/// and naming it.
pub async fn handle_one_by_one<H: Handler + ?Sized>(
    handler: &H,
    tx: &mut Transaction<'_>,
    events: &[&InboxEvent],
) -> Result<(), BatchFailure> {
    for (index, event) in events.iter().enumerate() {
        handler
            .handle(tx, event)
            .await
            .map_err(|error| BatchFailure {
                index: Some(index),
                error,
            })?;
    }
    Ok(())
}

/// What the consumer should do after a handler failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Try again after a backoff (e.g. a version gap: the predecessor may
    /// still arrive); parked after the configured number of attempts.
    Retry,
    /// Something the handler depends on is away (the database during a
    /// switchover, a lock wait, a deadlock): try again after a backoff
    /// without counting the attempt, since it says nothing about the event.
    Unavailable,
    /// Retrying cannot help (e.g. a stale version, a malformed payload):
    /// park the message in the dead-letter topic now.
    Reject,
}

/// A handler's failure and what to do about it.
#[derive(Debug)]
pub struct HandlerError {
    /// Retry later or park now.
    pub disposition: Disposition,
    /// What went wrong, for the log and the dead-letter header.
    pub cause: Box<dyn std::error::Error + Send + Sync>,
}

impl HandlerError {
    /// A failure worth retrying.
    pub fn retry(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        HandlerError {
            disposition: Disposition::Retry,
            cause: cause.into(),
        }
    }

    /// An outage of something the handler depends on: retried without
    /// counting towards parking.
    pub fn unavailable(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        HandlerError {
            disposition: Disposition::Unavailable,
            cause: cause.into(),
        }
    }

    /// A failure that retrying cannot fix.
    pub fn reject(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        HandlerError {
            disposition: Disposition::Reject,
            cause: cause.into(),
        }
    }
}

impl std::fmt::Display for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.cause.fmt(f)
    }
}

/// Errors of the database are retryable: a handler that uses `?` on a query
/// gets a retry. An outage ([`is_outage`]) is not counted; any other error
/// (a constraint, a bad value: something about the event) counts, so a
/// poison event ends in the dead-letter topic.
impl From<mysql_async::Error> for HandlerError {
    fn from(e: mysql_async::Error) -> Self {
        if is_outage(&e) {
            HandlerError::unavailable(e)
        } else {
            HandlerError::retry(e)
        }
    }
}

/// Server errors that say the database cannot take the write for a while,
/// whatever the event: it is read-only (a switchover or failover in
/// progress), a lock wait timed out, a deadlock chose this transaction, the
/// server is shutting down, or the session was killed or interrupted.
pub const OUTAGE_SERVER_ERRORS: [u16; 8] = [
    1290, // ER_OPTION_PREVENTS_STATEMENT: --read-only
    1836, // ER_READ_ONLY_MODE
    1205, // ER_LOCK_WAIT_TIMEOUT
    1213, // ER_LOCK_DEADLOCK
    1053, // ER_SERVER_SHUTDOWN
    1317, // ER_QUERY_INTERRUPTED
    1927, // ER_CONNECTION_KILLED (MariaDB)
    4031, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8)
];

/// Whether `error` is the database being away rather than anything about
/// the event: a lost or refused connection, or one of
/// [`OUTAGE_SERVER_ERRORS`].
pub fn is_outage(error: &mysql_async::Error) -> bool {
    match error {
        mysql_async::Error::Server(server) => OUTAGE_SERVER_ERRORS.contains(&server.code),
        mysql_async::Error::Io(_) => true,
        mysql_async::Error::Driver(driver) => matches!(
            driver,
            mysql_async::DriverError::ConnectionClosed
                | mysql_async::DriverError::PoolDisconnected
                | mysql_async::DriverError::PacketOutOfOrder
                | mysql_async::DriverError::UnexpectedPacket { .. }
        ),
        mysql_async::Error::Other(_) | mysql_async::Error::Url(_) => false,
    }
}

/// How one event ended, when it ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxOutcome {
    /// The handler ran and its transaction, with the inbox row, committed.
    Processed,
    /// The inbox already had this (consumer, event): a redelivery. Nothing ran.
    Duplicate,
    /// The handler does not take this kind of event; nothing was written.
    Skipped,
}

/// Why one event did not reach an [`InboxOutcome`]. In every case nothing
/// is acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The handler failed; its transaction, inbox row included, was rolled back.
    #[error("handler failed for event {event_id}: {error}")]
    Handler {
        /// The event.
        event_id: String,
        /// The handler's error and disposition.
        error: HandlerError,
    },

    /// The server refused the inbox row for a reason other than the inbox
    /// key (another key, a foreign key, a value too long...). Not a duplicate.
    #[error(
        "inserting the inbox row for event {event_id} failed with MySQL error {code} \
         ({message}); this is not the inbox key {INBOX_IDENTITY_KEY}, so the event is \
         not taken as processed: check the consumed_event table and the event id"
    )]
    Claim {
        /// The event.
        event_id: String,
        /// Server error code, e.g. 1406 (data too long).
        code: u16,
        /// The server's message.
        message: String,
    },

    /// The connection or the driver failed before COMMIT was sent, or the
    /// server refused the inbox row for a while ([`is_outage`]: read-only,
    /// a lock wait, a deadlock): nothing was committed. Retry when the
    /// database is back.
    #[error("database unavailable while processing event {event_id}: {error}")]
    Database {
        /// The event.
        event_id: String,
        /// The driver's error.
        error: mysql_async::Error,
    },

    /// COMMIT was sent and failed: the transaction may or may not have
    /// committed. Not acknowledged; the next attempt finds out through the
    /// inbox key.
    #[error(
        "commit outcome unknown for event {event_id}: {error}; the message is not \
         acknowledged and the next attempt resolves it through the inbox key"
    )]
    CommitUnknown {
        /// The event.
        event_id: String,
        /// The driver's error.
        error: mysql_async::Error,
    },
}

impl ProcessError {
    /// Whether retrying may help without the event changing; `false` for a
    /// handler's [`Disposition::Reject`].
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            ProcessError::Handler {
                error: HandlerError {
                    disposition: Disposition::Reject,
                    ..
                },
                ..
            }
        )
    }

    /// Whether the failure says something about the event (and so counts
    /// towards parking it), rather than about the database being away.
    pub fn counts_as_attempt(&self) -> bool {
        match self {
            ProcessError::Handler { error, .. } => error.disposition != Disposition::Unavailable,
            ProcessError::Claim { .. } => true,
            ProcessError::Database { .. } | ProcessError::CommitUnknown { .. } => false,
        }
    }
}

/// Whether `error` is the inbox key's duplicate: code 1062 and the key named
/// in the message is [`INBOX_IDENTITY_KEY`] (MariaDB writes `for key 'NAME'`,
/// MySQL 8 `for key 'table.NAME'`).
pub fn is_inbox_duplicate(error: &ServerError) -> bool {
    if error.code != ER_DUP_ENTRY {
        return false;
    }
    let Some((_, after)) = error.message.rsplit_once("for key '") else {
        return false;
    };
    let Some(key) = after.strip_suffix('\'') else {
        return false;
    };
    let name = key.rsplit_once('.').map_or(key, |(_, name)| name);
    name == INBOX_IDENTITY_KEY
}

/// The inbox of one consumer: processes events in their own transactions.
#[derive(Clone)]
pub struct Inbox {
    pool: Pool,
    consumer_name: String,
}

/// Makes every session strict, so an over-long event id is an error rather
/// than a truncation that could collide with another id.
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

    /// The inbox of `consumer_name` in the database behind `pool`. Build the
    /// pool with [`Inbox::pool_options`] so sessions are strict.
    pub fn new(pool: Pool, consumer_name: impl Into<String>) -> Self {
        Inbox {
            pool,
            consumer_name: consumer_name.into(),
        }
    }

    /// Connection options for `url` with the session setup the inbox needs.
    pub fn pool_options(url: &str, max_connections: usize) -> Result<mysql_async::Opts, String> {
        let opts = mysql_async::Opts::from_url(url)
            .map_err(|e| format!("mysql.url is not a MySQL URL: {e}"))?;
        let constraints = mysql_async::PoolConstraints::new(1, max_connections.max(1))
            .ok_or_else(|| "mysql.max_connections must be at least 1".to_owned())?;
        Ok(mysql_async::OptsBuilder::from_opts(opts)
            .init(vec![STRICT_SESSION])
            .pool_opts(mysql_async::PoolOpts::default().with_constraints(constraints))
            .into())
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
        let mut tx = self
            .pool
            .start_transaction(TxOpts::default())
            .await
            .map_err(unavailable)?;
        let claim = self.claim(&mut tx, event_id).await;
        if let Err(error) = claim {
            rollback(tx, event_id).await;
            return refused_claim(error, event_id);
        }
        if let Err(error) = handler.handle(&mut tx, event).await {
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
        let mut tx = match self.pool.start_transaction(TxOpts::default()).await {
            Ok(tx) => tx,
            Err(error) => return unavailable(error),
        };

        // The inbox rows: one statement; if the server refuses it (a
        // duplicate, or a row it rejects), one statement per event, each
        // undone alone by the server when it fails, to learn exactly which.
        let mut end = batch.len();
        let mut claim_refused = None;
        let rows = vec!["(?, ?)"; accepted.len()].join(", ");
        let params: Vec<mysql_async::Value> = accepted
            .iter()
            .flat_map(|&i| [self.consumer_name.as_str(), batch[i].event_id.as_str()])
            .map(mysql_async::Value::from)
            .collect();
        let all = tx.exec_drop(format!("{CLAIM} {rows}"), params).await;
        match all {
            Ok(()) => {}
            Err(error) if is_outage(&error) || !matches!(error, mysql_async::Error::Server(_)) => {
                rollback(tx, head).await;
                return unavailable(error);
            }
            Err(_) => {
                for &i in &accepted {
                    let event_id = &batch[i].event_id;
                    let claim = self.claim(&mut tx, event_id).await;
                    let Err(error) = claim else { continue };
                    match refused_claim(error, event_id) {
                        Ok(duplicate) => outcomes[i] = duplicate,
                        Err(ProcessError::Database { error, .. }) => {
                            rollback(tx, head).await;
                            return unavailable(error);
                        }
                        Err(refused) => {
                            end = i;
                            claim_refused = Some(refused);
                            break;
                        }
                    }
                }
            }
        }
        outcomes.truncate(end);

        let new: Vec<usize> = (0..end)
            .filter(|&i| outcomes[i] == InboxOutcome::Processed)
            .collect();
        let new_events: Vec<&InboxEvent> = new.iter().map(|&i| &batch[i]).collect();
        if !new_events.is_empty() {
            let handled = if one_by_one {
                handle_one_by_one(handler, &mut tx, &new_events).await
            } else {
                handler.handle_batch(&mut tx, &new_events).await
            };
            if let Err(failure) = handled {
                rollback(tx, head).await;
                return match failure.index.and_then(|j| new.get(j).copied()) {
                    Some(i) => BatchTry::Shorter {
                        end: i,
                        failed: ProcessError::Handler {
                            event_id: batch[i].event_id.clone(),
                            error: failure.error,
                        },
                    },
                    None => BatchTry::Unattributed,
                };
            }
        }
        if let Err(error) = tx.commit().await {
            return BatchTry::Nothing(ProcessError::CommitUnknown {
                event_id: head.clone(),
                error,
            });
        }
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

/// What a refused inbox row means: the inbox key's duplicate (already
/// processed), an outage, or a refusal that concerns the event.
fn refused_claim(error: mysql_async::Error, event_id: &str) -> Result<InboxOutcome, ProcessError> {
    match error {
        mysql_async::Error::Server(server) if is_inbox_duplicate(&server) => {
            Ok(InboxOutcome::Duplicate)
        }
        mysql_async::Error::Server(server) if !OUTAGE_SERVER_ERRORS.contains(&server.code) => {
            Err(ProcessError::Claim {
                event_id: event_id.to_owned(),
                code: server.code,
                message: server.message,
            })
        }
        error => Err(ProcessError::Database {
            event_id: event_id.to_owned(),
            error,
        }),
    }
}

/// Rolls back; a failed rollback is only logged, because the server rolls
/// back the transaction of a connection that drops anyway.
async fn rollback(tx: Transaction<'_>, event_id: &str) {
    if let Err(error) = tx.rollback().await {
        tracing::warn!(event_id, %error, "rollback failed; the server discards the transaction with the connection");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: u16, message: &str) -> ServerError {
        ServerError {
            code,
            message: message.into(),
            state: "23000".into(),
        }
    }

    #[test]
    fn only_a_1062_naming_the_inbox_key_is_a_duplicate() {
        assert!(is_inbox_duplicate(&server(
            1062,
            "Duplicate entry 'planner-e1' for key 'uq_consumed_event_identity'"
        )));
        assert!(is_inbox_duplicate(&server(
            1062,
            "Duplicate entry 'planner-e1' for key 'consumed_event.uq_consumed_event_identity'"
        )));
        for other in [
            server(
                1062,
                "Duplicate entry '7' for key 'uq_notification_job_order'",
            ),
            server(1062, "Duplicate entry '1' for key 'PRIMARY'"),
            // The key name inside the duplicated value must not fool it.
            server(
                1062,
                "Duplicate entry 'for key 'uq_consumed_event_identity'' for key 'uq_other'",
            ),
            server(
                1452,
                "Cannot add or update a child row: a foreign key constraint fails \
                 (uq_consumed_event_identity)",
            ),
            server(1406, "Data too long for column 'event_id' at row 1"),
            server(1062, "Duplicate entry without a key name"),
        ] {
            assert!(!is_inbox_duplicate(&other), "{}", other.message);
        }
    }

    #[test]
    fn handler_rejections_are_final_and_database_outages_do_not_count() {
        let rejected = ProcessError::Handler {
            event_id: "e".into(),
            error: HandlerError::reject("stale"),
        };
        assert!(!rejected.is_retryable() && rejected.counts_as_attempt());
        let retried = ProcessError::Handler {
            event_id: "e".into(),
            error: HandlerError::retry("gap"),
        };
        assert!(retried.is_retryable() && retried.counts_as_attempt());
        let unknown = ProcessError::CommitUnknown {
            event_id: "e".into(),
            error: mysql_async::Error::Other("connection reset".into()),
        };
        assert!(unknown.is_retryable() && !unknown.counts_as_attempt());
    }

    #[test]
    fn a_read_only_lock_wait_or_deadlock_inside_a_handler_does_not_count() {
        for code in [1290, 1836, 1205, 1213, 1053, 1317, 1927, 4031] {
            let failed = ProcessError::Handler {
                event_id: "e".into(),
                error: mysql_async::Error::Server(server(code, "the database is away")).into(),
            };
            assert!(
                failed.is_retryable() && !failed.counts_as_attempt(),
                "error {code}"
            );
        }
        let lost = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let failed = ProcessError::Handler {
            event_id: "e".into(),
            error: mysql_async::Error::Io(mysql_async::IoError::Io(lost)).into(),
        };
        assert!(failed.is_retryable() && !failed.counts_as_attempt());
        let closed = ProcessError::Handler {
            event_id: "e".into(),
            error: mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed).into(),
        };
        assert!(!closed.counts_as_attempt());
    }

    #[test]
    fn a_constraint_or_a_bad_value_inside_a_handler_still_counts() {
        for code in [1406, 1452, 1062, 1366, 1146] {
            let failed = ProcessError::Handler {
                event_id: "e".into(),
                error: mysql_async::Error::Server(server(code, "about the event")).into(),
            };
            assert!(
                failed.is_retryable() && failed.counts_as_attempt(),
                "error {code}"
            );
        }
        let unavailable = ProcessError::Handler {
            event_id: "e".into(),
            error: HandlerError::unavailable("the search cluster is down"),
        };
        assert!(unavailable.is_retryable() && !unavailable.counts_as_attempt());
    }
}
