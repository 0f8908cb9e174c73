//! MySQL 8.3+ tagged GTIDs in the binlog: a GTID_TAGGED_LOG_EVENT (type 42)
//! names its transaction `uuid:tag:gno`, and that transaction must reach the
//! tracked GTID state with its tag, like an untagged GTID_EVENT's does.
//!
//! No recorded binlog with tagged GTIDs is at hand (`shared/fixtures` has
//! none), so the event is built byte by byte from MySQL's format: the body is
//! a `mysql::serialization` message (`libs/mysql/serialization/readme.md`),
//! fields as `Gtid_event::define_fields` lists them
//! (`libs/mysql/binlog/event/control_events.h`), read by
//! `Gtid_event::read_gtid_tagged_log_event` (`control_events.cpp`).

use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::events::{Event, FormatDescriptionEvent};
use outbox_core::{DefiniteError, GtidState, MySqlGtidSet, SourceTransaction};
use outbox_source::{
    ColumnMapping, DecodeConfig, EventIdFormat, OutboxTables, TransactionAssembler,
};

const GTID_TAGGED_LOG_EVENT: u8 = 42;
const XID_EVENT: u8 = 16;

/// The body of a GTID_TAGGED_LOG_EVENT for `3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_a:300`.
///
/// Variable-length integers (varlen): little endian, 1 to 9 bytes; the
/// number of trailing 1 bits of the first byte + 1 is the byte count, the
/// value follows the 0 bit that ends them (`v << n | (1 << (n - 1)) - 1`;
/// 0xff then 8 raw bytes for values of 57+ bits). Signed fields are
/// zig-zag encoded first (`x >= 0` → `x << 1`, `x < 0` → `(-(x + 1)) << 1 | 1`).
///
/// Message: `<format version> <message size> <last non-ignorable field id>
/// { <field id> <field data> }`, all varlen; the size counts the whole
/// message from the version on; the last non-ignorable field id is the id of
/// the last non-ignorable field encoded, plus 1.
fn tagged_gtid_body() -> Vec<u8> {
    let body = vec![
        0x02, // serialization format version 1 (varlen: 1 << 1)
        0x74, // message size 58 (varlen: 58 << 1), this whole vector
        0x14, // last non-ignorable field id 9, + 1 = 10 (varlen: 10 << 1)
        0x00, 0x02, // field 0 gtid_flags (u8): 1, FLAG_MAY_HAVE_SBR
        // field 1 uuid: 16 bytes, each a varlen; bytes >= 128 take two
        // (`b << 2 | 0b01`, little endian).
        0x02, //
        0x7c, // 0x3e
        0x22, // 0x11
        0xe9, 0x03, // 0xfa
        0x8e, // 0x47
        0xe2, // 0x71
        0x29, 0x03, // 0xca
        0x22, // 0x11
        0x85, 0x03, // 0xe1
        0x79, 0x02, // 0x9e
        0x66, // 0x33
        0x21, 0x03, // 0xc8
        0x14, // 0x0a
        0xa5, 0x02, // 0xa9
        0x84, // 0x42
        0x55, 0x02, // 0x95
        0xc4, // 0x62
        0x04, 0x61, 0x09, // field 2 gno (i64): 300, zig-zag 600, 2 bytes: 600 << 2 | 0b01
        0x06, 0x0a, b't', b'a', b'g', b'_', b'a', // field 3 tag: length 5, then the bytes
        0x08, 0x14, // field 4 last_committed (i64): 5, zig-zag 10
        0x0a, 0x18, // field 5 sequence_number (i64): 6, zig-zag 12
        // field 6 immediate_commit_timestamp (u64): 1_700_000_000_000_000 µs,
        // 51 bits: 8 bytes, v << 8 | 0x7f
        0x0c, 0x7f, 0x00, 0x40, 0x1e, 0x18, 0x24, 0x0a, 0x06,
        // field 7 original_commit_timestamp: left out, equal to field 6
        0x10, 0xc8, // field 8 transaction_length (u64): 100
        0x12, 0x83, 0xd0,
        0x09, // field 9 immediate_server_version (u32): 80400, 80400 << 3 | 0b011
              // fields 10 original_server_version (equal to 9) and
              // 11 commit_group_ticket (unset) left out
    ];
    assert_eq!(body.len(), 58, "the message size byte says 58");
    body
}

/// One event: the 19-byte v4 header, then `body` (checksums off).
fn event(event_type: u8, log_pos: u32, body: &[u8]) -> Event {
    let size = 19 + body.len() as u32;
    let mut bytes = Vec::with_capacity(size as usize);
    bytes.extend_from_slice(&1_700_000_000u32.to_le_bytes()); // timestamp
    bytes.push(event_type);
    bytes.extend_from_slice(&1u32.to_le_bytes()); // server_id
    bytes.extend_from_slice(&size.to_le_bytes());
    bytes.extend_from_slice(&log_pos.to_le_bytes()); // end of the event
    bytes.extend_from_slice(&0u16.to_le_bytes()); // flags
    bytes.extend_from_slice(body);
    let fde = FormatDescriptionEvent::new(BinlogVersion::Version4);
    Event::read(&fde, bytes.as_slice()).unwrap()
}

fn assembler() -> TransactionAssembler {
    let config = DecodeConfig {
        columns: ColumnMapping::default(),
        event_id_format: EventIdFormat::Any,
        max_transaction_bytes: 1 << 20,
        ..DecodeConfig::new(OutboxTables::new(vec!["app.outbox".parse().unwrap()]))
    };
    TransactionAssembler::new(config, "binlog.000001")
}

/// Feeds a tagged GTID event with `body`, then an XID.
fn transaction_after(body: &[u8]) -> Result<Option<SourceTransaction>, DefiniteError> {
    let mut assembler = assembler();
    let gtid_end = 200 + 19 + body.len() as u32;
    assert_eq!(
        assembler.handle(&event(GTID_TAGGED_LOG_EVENT, gtid_end, body))?,
        None
    );
    assembler.handle(&event(XID_EVENT, gtid_end + 27, &7u64.to_le_bytes()))
}

#[test]
fn a_tagged_gtid_event_names_its_transaction_with_the_tag() {
    let transaction = transaction_after(&tagged_gtid_body())
        .unwrap()
        .expect("the XID ends a transaction");
    let gtid = transaction
        .gtid
        .expect("the transaction carries the GTID of its GTID_TAGGED_LOG_EVENT");
    let mut state = GtidState::MySql(MySqlGtidSet::default());
    state.apply(&gtid);
    assert_eq!(
        state.to_string(),
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_a:300"
    );
    assert_eq!(transaction.end.pos, 200 + 19 + 58 + 27);
}

#[test]
fn an_undecodable_tagged_gtid_event_is_a_definite_error() {
    let mut unknown_version = tagged_gtid_body();
    unknown_version[0] = 0x04; // serialization format version 2
    let truncated = tagged_gtid_body()[..30].to_vec();
    let mut unknown_field = tagged_gtid_body();
    unknown_field[2] = 0x1a; // last non-ignorable field id 12, + 1 = 13
    unknown_field.extend_from_slice(&[0x18, 0x02]); // field 12 = 1
    unknown_field[1] = 0x78; // message size 60
    for body in [unknown_version, truncated, unknown_field] {
        match transaction_after(&body) {
            Err(DefiniteError::UnsupportedEvent {
                position,
                event_type,
                reason,
            }) => {
                assert_eq!(event_type, "GTID_TAGGED_LOG_EVENT", "{reason}");
                assert_eq!(position.pos, 200, "{reason}");
                assert!(!reason.is_empty());
            }
            other => panic!("{body:02x?}: expected a definite error, got {other:?}"),
        }
    }
}
