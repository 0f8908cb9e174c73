//! What a claim and a handler's errors mean: a duplicate (only MySQL 1062
//! naming the inbox key), an outage, a refusal.

use mysql_async::ServerError;

use super::{Disposition, HandlerError};

/// The named unique key of `consumed_event`; a duplicate on it, and only on
/// it, means the event was already processed by this consumer.
pub const INBOX_IDENTITY_KEY: &str = "uq_consumed_event_identity";

/// MySQL/MariaDB `ER_DUP_ENTRY`.
const ER_DUP_ENTRY: u16 = 1062;

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

/// What a refused inbox row means: the inbox key's duplicate (already
/// processed), an outage, or a refusal that concerns the event.
pub(super) fn refused_claim(
    error: mysql_async::Error,
    event_id: &str,
) -> Result<InboxOutcome, ProcessError> {
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
