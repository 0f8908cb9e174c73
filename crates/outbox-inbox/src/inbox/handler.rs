//! What a consumer plugs in: the handler run in the inbox's transaction,
//! and what its errors mean for the event.

use std::future::Future;

use mysql_async::Transaction;
use tracing::Instrument;

use crate::event::InboxEvent;

use super::is_outage;

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
            .instrument(event.span())
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
