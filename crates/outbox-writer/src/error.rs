//! What can go wrong, each saying what, for which event, and what to do.

/// The outbox table cannot be named from the configuration given.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error(
        "the configuration names {count} outbox tables ({tables}); name the one to write \
         with OutboxTable::from_forwarder_config_for"
    )]
    WhichTable { count: usize, tables: String },
    #[error("outbox table {0:?} is not in [outbox] tables of the configuration")]
    NotConfigured(String),
    #[error("outbox table {0:?}: write `table` or `schema.table`")]
    TableName(String),
}

/// Why an event was not appended. The transaction stays the caller's:
/// nothing here commits or rolls it back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The payload could not be serialized.
    #[error("event {event_type} of {aggregate_type} {aggregate_id}: the payload cannot be serialized as JSON: {source}")]
    Serialize {
        event_type: String,
        aggregate_type: String,
        aggregate_id: String,
        source: serde_json::Error,
    },
    /// A value is longer than its column holds (or than the server takes in
    /// one statement): the server would refuse it or, outside strict mode,
    /// cut it short.
    #[error(
        "event {event_id}: {what} is {length} {unit}, more than the {limit} {unit} {holder} \
         holds; store less (a reference to the data rather than the data) or widen it"
    )]
    TooLong {
        event_id: String,
        what: String,
        length: u64,
        limit: u64,
        unit: &'static str,
        holder: String,
    },
    /// A number outside what its integer column holds: the server would
    /// refuse it or, outside strict mode, store the column's limit instead.
    #[error(
        "event {event_id}: `{column}` is {value}, outside the {min}..={max} the column of \
         {table} holds; give it a type that holds it (BIGINT, signed for a negative \
         version) or keep the version within it"
    )]
    OutOfRange {
        event_id: String,
        column: String,
        value: i64,
        min: i128,
        max: i128,
        table: String,
    },
    /// A value holds a character its column's character set cannot store
    /// (past U+FFFF in utf8mb3 or ucs2): the server would refuse it or, outside
    /// strict mode, store `?` in its place.
    #[error(
        "event {event_id}: `{column}` of {table} is {charset}, which cannot store a character \
         past U+FFFF (an emoji, say); convert the column to utf8mb4"
    )]
    Unstorable {
        event_id: String,
        column: String,
        table: String,
        charset: String,
    },
    /// An event with this id is already in the table (or twice in one
    /// append). The statement failed; the transaction is still open.
    #[error(
        "event {event_id}: an event with this id is already in {table}; give each event \
         its own id (the default, a UUIDv7, is unique)"
    )]
    DuplicateEventId { event_id: String, table: String },
    /// A given id the forwarder would take for a bad row.
    #[error(
        "event id {event_id:?} is not a UUID, and [outbox] event_id_format = \"uuid\" makes \
         the forwarder refuse it; give a UUID or set event_id_format = \"any\" on both sides"
    )]
    NotAUuid { event_id: String },
    /// A given id that is empty.
    #[error("an event id must not be empty")]
    EmptyEventId,
    /// A value the forwarder would refuse as a bad row (which stops its
    /// stream under the default `bad_row_policy`), or one the server would
    /// convert to another value.
    #[error("event {event_id}: `{column}` of {table}: {reason}; the event is not appended")]
    Refused {
        event_id: String,
        column: String,
        table: String,
        reason: String,
    },
    /// The table is not there, or lacks a column the writer needs.
    #[error("{0}")]
    Table(String),
    /// The server refused the statement for another reason.
    #[error("appending event {event_id} to {table}: {source}")]
    Database {
        event_id: String,
        table: String,
        source: mysql_async::Error,
    },
    /// The forwarder had not published the transaction when the wait ran
    /// out (see [`crate::wait_published`]).
    #[error(
        "transaction {gtid} was not yet published after {waited:?}: {why}; the event is \
         committed and the forwarder publishes it once it can (its /readyz and metrics say \
         why it cannot)"
    )]
    NotPublished {
        gtid: String,
        waited: std::time::Duration,
        why: String,
    },
    /// The session's GTID could not be read.
    #[error("reading the committed transaction's GTID: {0}")]
    Gtid(mysql_async::Error),
    /// The session committed no transaction with a GTID.
    #[error(
        "the session has no committed transaction with a GTID (the server logs no GTIDs, or \
         nothing was committed): a wait for publication needs one"
    )]
    NoGtid,
    /// Reading the table's columns failed.
    #[error("reading the columns of {table}: {source}")]
    Inspect {
        table: String,
        source: mysql_async::Error,
    },
}
