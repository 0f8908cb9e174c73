use crate::BinlogPosition;

/// Where a row was found in the binlog, carried into message headers and error
/// messages so that an operator can find the row with `mysqlbinlog`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowOrigin {
    /// Schema of the outbox table.
    pub schema: String,
    /// Name of the outbox table.
    pub table: String,
    /// Start of the rows event that carried the row.
    pub event_position: BinlogPosition,
    /// Index of the row within that rows event (a multi-row INSERT yields many).
    pub row_index: u32,
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
    /// The payload column's bytes as stored (JSON text).
    pub payload: Vec<u8>,
    /// Commit timestamp of the row event, seconds since the epoch.
    pub timestamp: u32,
    pub origin: RowOrigin,
}

impl OutboxEvent {
    /// Bytes this event holds in memory, for the per-transaction buffer bound.
    pub fn buffered_len(&self) -> usize {
        let text = |v: &Option<String>| v.as_ref().map_or(0, String::len);
        self.event_id.len()
            + self.payload.len()
            + self.key.as_ref().map_or(0, Vec::len)
            + text(&self.event_type)
            + text(&self.aggregate_type)
            + text(&self.aggregate_id)
            + text(&self.event_version)
    }

    /// The Kafka message key.
    pub fn key_bytes(&self) -> &[u8] {
        self.key.as_deref().unwrap_or(self.event_id.as_bytes())
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
    /// Where the next transaction starts; the checkpoint after this one.
    pub end: BinlogPosition,
}
