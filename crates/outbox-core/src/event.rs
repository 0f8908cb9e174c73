use std::sync::Arc;

use crate::position::BinlogPosition;

/// Where a row was found in the binlog, carried into message headers and error
/// messages so that an operator can find the row with `mysqlbinlog`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowOrigin {
    /// Schema of the outbox table (shared by all rows of the table).
    pub schema: Arc<str>,
    /// Name of the outbox table.
    pub table: Arc<str>,
    /// Start of the rows event that carried the row.
    pub event_position: BinlogPosition,
    /// Index of the row within that rows event (a multi-row INSERT yields many).
    pub row_index: u32,
}

impl RowOrigin {
    /// `schema.table`, as errors and the `source_table` header name it.
    pub fn qualified_table(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    pub fn coordinate(&self) -> RowCoordinate {
        RowCoordinate {
            event_position: self.event_position.clone(),
            row_index: self.row_index,
        }
    }
}

/// Which row of one server's binlog a message carries: the position and
/// row its `binlog` header (or `binlog_position` and `binlog_row`) say. Two messages with the
/// same coordinate carry the same row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RowCoordinate {
    pub event_position: BinlogPosition,
    pub row_index: u32,
}

impl std::fmt::Display for RowCoordinate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} row {}", self.event_position, self.row_index)
    }
}

/// A message's place in its transaction, named by the transaction's GTID
/// (text) and the message's index in it (events, then dead letters), as
/// its `binlog` header (or `binlog_gtid` and `binlog_gtid_index`) says. Unlike a
/// [`RowCoordinate`] it is the same on every server that logged the
/// transaction (a replica with `log_slave_updates`, a promoted one), so
/// what Kafka holds can still be told after a failover.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GtidSlot {
    pub gtid: String,
    pub index: u32,
}

/// One row inserted into an outbox table, with its columns picked by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    /// Stable identity of the event; the Kafka key by default, and what inbox
    /// consumers deduplicate on.
    pub event_id: String,
    pub event_type: Option<String>,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub event_version: Option<String>,
    /// Value of the key column when it is not `event_id`.
    pub key: Option<Vec<u8>>,
    /// The payload column's bytes as stored (JSON or other text, or bytes,
    /// as `payload_format` says); `None` publishes a tombstone.
    pub payload: Option<Vec<u8>>,
    /// When the row's transaction committed, milliseconds since the epoch:
    /// on MySQL its `original_commit_timestamp` (the first server to commit
    /// it, to the microsecond), on MariaDB its commit event's second; 0
    /// until the decoder reads the commit, and for a row read from its
    /// table. Published in the `binlog` header (or as `binlog_commit_ms`).
    pub committed_at_ms: u64,
    /// How the row asks to be shaped beyond the fixed headers: extra
    /// headers, a partition, a record timestamp, a topic; `None` when it
    /// asks for nothing (kept out of line: most rows ask for nothing, and
    /// events are moved often).
    pub shape: Option<Box<MessageShape>>,
    pub origin: RowOrigin,
}

/// What the optional columns of a row say about its message
/// (`[outbox.headers]`, trace context, `partition_column`,
/// `timestamp_column`, `topic_column`); all empty by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageShape {
    /// Header name and the column's value as text (bytes as stored), in
    /// configuration order; a NULL column leaves its header out.
    pub headers: Vec<(std::sync::Arc<str>, Vec<u8>)>,
    /// Where the message goes among the topic's partitions.
    pub partition: Option<PartitionBy>,
    /// The record's timestamp, milliseconds since the epoch.
    pub timestamp_ms: Option<i64>,
    /// The row's own topic, which replaces the topic template.
    pub topic: Option<String>,
}

/// The shape of a row that asks for nothing.
static NO_SHAPE: MessageShape = MessageShape {
    headers: Vec::new(),
    partition: None,
    timestamp_ms: None,
    topic: None,
};

impl MessageShape {
    /// It asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
            && self.partition.is_none()
            && self.timestamp_ms.is_none()
            && self.topic.is_none()
    }

    fn buffered_len(&self) -> usize {
        let headers: usize = self.headers.iter().map(|(_, v)| v.len()).sum();
        let partition = match &self.partition {
            Some(PartitionBy::Hash(bytes)) => bytes.len(),
            _ => 0,
        };
        headers + partition + self.topic.as_ref().map_or(0, String::len)
    }
}

/// A partition column's value: an integer column names the partition, any
/// other value is hashed as a key would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionBy {
    Number(i64),
    Hash(Vec<u8>),
}

impl OutboxEvent {
    /// Bytes this event holds in memory, for the per-transaction buffer bound.
    pub fn buffered_len(&self) -> usize {
        let text = |v: &Option<String>| v.as_ref().map_or(0, String::len);
        self.event_id.len()
            + self.payload.as_ref().map_or(0, Vec::len)
            + self.shape().buffered_len()
            + self.key.as_ref().map_or(0, Vec::len)
            + text(&self.event_type)
            + text(&self.aggregate_type)
            + text(&self.aggregate_id)
            + text(&self.event_version)
    }

    /// How the row asks its message to be shaped.
    pub fn shape(&self) -> &MessageShape {
        self.shape.as_deref().unwrap_or(&NO_SHAPE)
    }

    /// [`OutboxEvent::shape`], to change.
    pub fn shape_mut(&mut self) -> &mut MessageShape {
        self.shape.get_or_insert_with(Default::default)
    }

    /// The Kafka message key.
    pub fn key_bytes(&self) -> &[u8] {
        self.key.as_deref().unwrap_or(self.event_id.as_bytes())
    }
}

/// What happens to an outbox row that cannot be turned into a message
/// (`fail` or `dead_letter` in a configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRowPolicy {
    /// Stop before the checkpoint passes the row, and say where it is.
    Fail,
    /// Publish the raw row to the dead-letter topic with the error, then go on.
    DeadLetter,
}

/// What an UPDATE or DELETE of an outbox row means (`on_update`,
/// `on_delete`): outbox rows are events, written once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangePolicy {
    /// Not an event; nothing is said (a cleanup that deletes the row in the
    /// inserting transaction, a retention job).
    #[default]
    Ignore,
    /// Not an event; a warning names the row and the change is counted.
    Warn,
    /// Stop before the checkpoint passes the change, and say where it is.
    Fail,
}

/// An outbox row that could not become a message, kept whole for the
/// dead-letter topic so that nothing is dropped without a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub origin: RowOrigin,
    /// The row's event id when it could be read.
    pub event_id: Option<String>,
    /// Why the row was refused.
    pub reason: String,
    /// The row as a JSON object of column name to value.
    pub row: Vec<u8>,
}

impl DeadLetter {
    /// Longest column text kept in a dead letter. The row must still fit in
    /// a Kafka message when its payload was refused for being too large.
    pub const MAX_COLUMN_TEXT: usize = 4096;

    /// `text`, cut to [`Self::MAX_COLUMN_TEXT`] bytes (on a character
    /// boundary) with a note of the full length.
    pub fn clip(text: &str) -> String {
        if text.len() <= Self::MAX_COLUMN_TEXT {
            return text.to_owned();
        }
        let mut end = Self::MAX_COLUMN_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…[cut from {} bytes]", &text[..end], text.len())
    }
}

/// A committed transaction as the source hands it downstream: its outbox
/// events (possibly none) and the position right after its commit.
///
/// Transactions that touched no outbox table still flow through with no
/// events, so that progress moves on a server whose outbox is quiet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTransaction {
    pub events: Vec<OutboxEvent>,
    /// Rows refused under [`BadRowPolicy::DeadLetter`].
    pub dead_letters: Vec<DeadLetter>,
    /// Where the next transaction starts; the checkpoint after this one.
    pub end: BinlogPosition,
    /// When the primary committed it, seconds since the epoch (0 if unknown).
    pub commit_timestamp: u32,
    /// When it committed, milliseconds since the epoch, as
    /// [`OutboxEvent::committed_at_ms`] (here too for a transaction
    /// without events; 0 if unknown).
    pub committed_at_ms: u64,
    /// When the binlog file `end` lies in was created (its
    /// FORMAT_DESCRIPTION event's time), seconds since the epoch; 0 if
    /// unknown. What tells a file from a later one of the same name.
    pub file_created_at: u32,
    /// Its global transaction id, when the server logs GTIDs.
    pub gtid: Option<crate::gtid::Gtid>,
    /// Outbox rows it updated or deleted under [`ChangePolicy::Warn`].
    pub changed_rows: u32,
}

impl SourceTransaction {
    /// A boundary without outbox rows.
    pub fn empty(end: BinlogPosition, commit_timestamp: u32) -> Self {
        Self {
            events: Vec::new(),
            dead_letters: Vec::new(),
            end,
            commit_timestamp,
            committed_at_ms: u64::from(commit_timestamp) * 1000,
            file_created_at: 0,
            gtid: None,
            changed_rows: 0,
        }
    }

    /// Messages this transaction publishes.
    pub fn message_count(&self) -> usize {
        self.events.len() + self.dead_letters.len()
    }
}
