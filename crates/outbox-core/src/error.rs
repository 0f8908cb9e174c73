use crate::position::{BinlogPosition, SourceIdentity};

/// A problem that retrying cannot fix. The forwarder stops, exits non-zero and
/// prints this message: what happened, where, and what the operator can do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefiniteError {
    #[error(
        "binlog position {position} is no longer on the server{oldest}: {server_message}. \
         Events committed after the checkpoint are no longer in the binlog. \
         `outbox-forwarder repair-gap --config FILE` publishes the ones the outbox table still \
         holds and moves the checkpoint to the oldest binlog (`verify` shows what is missing \
         first)",
        oldest = .oldest.as_ref().map(|f| format!(" (oldest binlog the server still has: {f})")).unwrap_or_default()
    )]
    BinlogNotAvailable {
        position: BinlogPosition,
        oldest: Option<String>,
        server_message: String,
    },

    #[error(
        "the binlog was reset, or the server restored: {server}'s file {file} was created at \
         {created}, and the checkpoint {position} was written in a file of that name created \
         at {expected} (seconds since the epoch). Resuming would read other events at that \
         position. The checkpoint is unchanged. Events committed after it and before the \
         reset are in no binlog now: `outbox-forwarder verify --since ...` shows the outbox \
         rows missing from Kafka and `backfill` publishes them; then `outbox-forwarder \
         checkpoint set FILE:POS` where streaming resumes ({file}:4 for every event since \
         the reset)",
        file = .position.file
    )]
    BinlogReset {
        position: BinlogPosition,
        server: Box<SourceIdentity>,
        expected: u32,
        created: u32,
    },

    #[error(
        "the primary refused or stopped the binlog dump at {position}: {server_message}. \
         If it names a duplicate server_id or server_uuid, give this forwarder a mysql.server_id \
         no other replica uses; if a binlog file is missing, see `outbox-forwarder checkpoint set`"
    )]
    DumpRefused {
        position: BinlogPosition,
        server_message: String,
    },

    #[error(
        "server setting {setting} is {actual:?}, the forwarder needs {expected:?}: set \
         `{setting}={expected}` in the server configuration (my.cnf) and restart it, or \
         `SET GLOBAL {setting}='{expected}'` where the server allows it"
    )]
    InvalidSystemSetting {
        setting: String,
        expected: String,
        actual: String,
    },

    #[error(
        "the stored checkpoint {position} was written against another server ({stored}), \
         this server is {actual}. Resuming would read the wrong binlog. If this server \
         really is the same primary (e.g. restored or renamed), run with --accept-new-source; \
         otherwise run `outbox-forwarder checkpoint reset` and choose a start position"
    )]
    CheckpointFromOtherServer {
        position: BinlogPosition,
        stored: Box<SourceIdentity>,
        actual: Box<SourceIdentity>,
    },

    #[error(
        "cannot resume the checkpoint {position} (GTID {gtid}, written against {stored}) on \
         {server}: {reason}. The checkpoint is unchanged. Point the forwarder at a server \
         that has every transaction the checkpoint covers; if this server is the primary now, \
         events the old primary committed and never replicated are lost from the database \
         itself (and may already be in Kafka): decide what to republish, then \
         `outbox-forwarder checkpoint set`. If this server really holds the checkpoint's \
         binlog (restored, renamed), --accept-new-source resumes its file:pos instead"
    )]
    GtidNotServed {
        position: BinlogPosition,
        gtid: String,
        stored: Box<SourceIdentity>,
        server: Box<SourceIdentity>,
        reason: String,
    },

    #[error(
        "cannot decode outbox row {table} at binlog {position} (row {row_index}{event_id}): {reason}. \
         The checkpoint stays before this transaction. Fix the row's producer, then either \
         move the checkpoint past it with `outbox-forwarder checkpoint set` after publishing it \
         by hand, or set [outbox] bad_row_policy = \"dead_letter\"",
        event_id = .event_id.as_ref().map(|id| format!(", event_id {id}")).unwrap_or_default()
    )]
    BadRow {
        table: String,
        position: BinlogPosition,
        row_index: u32,
        event_id: Option<String>,
        reason: String,
    },

    #[error(
        "{change} of outbox rows of {table} at binlog {position} (first row{event_id}), and \
         [outbox] {setting} = \"fail\": outbox rows are events, written once. Nothing after \
         it was published and the checkpoint stays before this transaction. Find what changes \
         outbox rows; to go on past it, set {setting} = \"warn\" or \"ignore\"",
        event_id = .event_id.as_ref().map(|id| format!(", event_id {id}")).unwrap_or_default()
    )]
    OutboxRowChanged {
        /// `UPDATE` or `DELETE`.
        change: &'static str,
        /// `on_update` or `on_delete`.
        setting: &'static str,
        table: String,
        /// The rows event.
        position: BinlogPosition,
        /// The first changed row's event id, when it could be read.
        event_id: Option<String>,
    },

    #[error(
        "cannot read binlog event {event_type} at {position}: {reason}. Nothing after it \
         was published and the checkpoint stays before it"
    )]
    UnsupportedEvent {
        position: BinlogPosition,
        event_type: String,
        reason: String,
    },

    #[error(
        "transaction starting at {start} buffers more than {limit_bytes} bytes of outbox \
         events (outbox.max_transaction_bytes); raise the limit or split the transaction"
    )]
    TransactionTooLarge {
        start: BinlogPosition,
        limit_bytes: usize,
    },

    #[error("Kafka refused the forwarder: {0}; check the ACLs of the producer's principal")]
    Publish(String),

    #[error("checkpoint store: {0}")]
    Checkpoint(String),

    #[error("configuration: {0}")]
    Config(String),
}

/// Every error of the pipeline is one of two kinds, and the kind decides what
/// happens next.
#[derive(Debug, thiserror::Error)]
pub enum ForwarderError {
    /// Connection lost, broker unavailable, timeout: retry with backoff from
    /// the acked watermark; the checkpoint stays.
    #[error("{0}")]
    Transient(String),
    /// Stop and tell the operator.
    #[error(transparent)]
    Definite(#[from] DefiniteError),
}

impl ForwarderError {
    pub fn transient(msg: impl std::fmt::Display) -> Self {
        Self::Transient(msg.to_string())
    }
}
