//! The names of the headers the forwarder writes: one home for every
//! component that writes, reads or reserves them (the encoder, the
//! producer, the read-back of the topic tails, `verify`, the inbox, and the
//! configuration, which refuses `[outbox.headers]` entries that would take
//! one of them: the read-back after a crash relies on them).

/// The row's event id (also the default message key).
pub const EVENT_ID: &str = "event_id";
pub const EVENT_TYPE: &str = "event_type";
pub const AGGREGATE_TYPE: &str = "aggregate_type";
pub const AGGREGATE_ID: &str = "aggregate_id";
pub const EVENT_VERSION: &str = "event_version";
/// The W3C trace context, from the `traceparent` / `tracestate` columns.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";
/// Header with the binlog position (`file:pos`) of the rows event that carried the row.
pub const HEADER_BINLOG_POSITION: &str = "binlog_position";
/// Header with the row's index within that rows event.
pub const HEADER_BINLOG_ROW: &str = "binlog_row";
/// Header of a dead letter: why the row was refused.
pub const HEADER_ERROR: &str = "error";
/// Header naming the server whose binlog the coordinates are in
/// ([`crate::SourceIdentity::key`]).
pub const HEADER_BINLOG_SERVER: &str = "binlog_server";
/// Header with `schema.table` of the outbox row.
pub const HEADER_SOURCE_TABLE: &str = "source_table";
/// Header with the GTID of the row's transaction, when the server logs GTIDs.
pub const HEADER_BINLOG_GTID: &str = "binlog_gtid";
/// Header with the transaction's commit time, milliseconds since the epoch
/// (`OutboxEvent::committed_at_ms`): what a consumer measures its
/// commit-to-handled latency from.
pub const HEADER_COMMIT_MS: &str = "binlog_commit_ms";
/// Header with the message's index in that transaction (events, then dead
/// letters): with the GTID, the same on every server of the topology.
pub const HEADER_BINLOG_GTID_INDEX: &str = "binlog_gtid_index";
/// Header of a message published from the outbox table rather than the
/// binlog: the command that published it (`backfill`, `repair-gap`).
pub const HEADER_BACKFILL: &str = "backfill";
/// Header of a backfilled message: a binlog position of `binlog_server`
/// after the row's insert (read after the row was).
pub const HEADER_BACKFILL_BEFORE: &str = "backfill_before";
/// Header of a backfilled message: the server's GTID state there, as JSON
/// (`{"mariadb":"0-1-42"}`), when it logs GTIDs.
pub const HEADER_BACKFILL_BEFORE_GTID: &str = "backfill_before_gtid";
/// Header naming the instance of an active/standby group that published
/// the message.
pub const HEADER_PUBLISHED_BY: &str = "published_by";

/// Header with the message's signature, when `kafka.signing_key` is set:
/// hex HMAC-SHA256 over the message (see `outbox_kafka::Signing`).
pub const HEADER_SIGNATURE: &str = "outbox_signature";

/// Every header the forwarder sets itself: no column may fill one.
pub const RESERVED: [&str; 20] = [
    EVENT_ID,
    EVENT_TYPE,
    AGGREGATE_TYPE,
    AGGREGATE_ID,
    EVENT_VERSION,
    TRACEPARENT,
    TRACESTATE,
    HEADER_SOURCE_TABLE,
    HEADER_BINLOG_POSITION,
    HEADER_BINLOG_ROW,
    HEADER_BINLOG_SERVER,
    HEADER_BINLOG_GTID,
    HEADER_BINLOG_GTID_INDEX,
    HEADER_COMMIT_MS,
    HEADER_ERROR,
    HEADER_BACKFILL,
    HEADER_BACKFILL_BEFORE,
    HEADER_BACKFILL_BEFORE_GTID,
    HEADER_PUBLISHED_BY,
    HEADER_SIGNATURE,
];

/// Whether `name` is one of [`RESERVED`], in any case (brokers and
/// consumers compare header names as bytes, people read them in any case).
pub fn is_reserved(name: &str) -> bool {
    RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name))
}
