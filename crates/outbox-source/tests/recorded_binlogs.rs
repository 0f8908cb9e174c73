//! Decoding on binlog files recorded from real MySQL 8 and MariaDB servers
//! (`shared/fixtures/mysql-binlogs`, beside the repository).

use std::path::PathBuf;

use outbox_core::{BadRowPolicy, BinlogPosition, DefiniteError, SourceTransaction};
use outbox_source::{read_binlog_file, ColumnMapping, DecodeConfig, EventIdFormat, OutboxTables};

fn fixture(name: &str) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var("OUTBOX_BINLOG_FIXTURES")
            .map(PathBuf::from)
            .unwrap_or_default(),
        manifest.join("../../../shared/fixtures/mysql-binlogs"),
    ];
    let dir = candidates
        .iter()
        .find(|dir| dir.join(name).is_file())
        .unwrap_or_else(|| {
            panic!("fixture {name} not found in {candidates:?}; set OUTBOX_BINLOG_FIXTURES")
        });
    dir.join(name)
}

fn config(tables: &str, columns: ColumnMapping) -> DecodeConfig {
    DecodeConfig {
        columns,
        event_id_format: EventIdFormat::Any,
        max_transaction_bytes: 16 << 20,
        ..DecodeConfig::new(OutboxTables::new(
            tables.split(',').map(|t| t.parse().unwrap()).collect(),
        ))
    }
}

fn read(name: &str, config: DecodeConfig) -> Result<Vec<SourceTransaction>, DefiniteError> {
    read_binlog_file(&fixture(name), config)
}

fn event_ids(transactions: &[SourceTransaction]) -> Vec<&str> {
    transactions
        .iter()
        .flat_map(|tx| tx.events.iter().map(|e| e.event_id.as_str()))
        .collect()
}

/// `toddy_test.outbox(id, topic, event_type, event, created)`, mapped by name.
fn mariadb_outbox_columns() -> ColumnMapping {
    ColumnMapping {
        event_id: "id".into(),
        payload: "event".into(),
        ..Default::default()
    }
}

#[test]
fn mariadb_v1_row_events_decode_by_column_name_and_end_at_the_xid() {
    let txs = read(
        "mariadb-bin.000001",
        config("toddy_test.outbox", mariadb_outbox_columns()),
    )
    .unwrap();
    let with_events: Vec<_> = txs.iter().filter(|tx| !tx.events.is_empty()).collect();
    assert_eq!(with_events.len(), 2);
    assert_eq!(event_ids(&txs), ["62", "63"]);

    let first = &with_events[0].events[0];
    assert_eq!(first.payload.as_deref(), Some(br#"{"foo":1}"#.as_slice()));
    assert_eq!(first.event_type.as_deref(), Some("2"));
    assert_eq!(
        (&*first.origin.schema, &*first.origin.table),
        ("toddy_test", "outbox")
    );
    assert_eq!(
        first.origin.event_position,
        BinlogPosition::new("mariadb-bin.000001", 612)
    );
    assert_eq!(
        with_events[0].end,
        BinlogPosition::new("mariadb-bin.000001", 702)
    );
    assert_eq!(
        with_events[1].end,
        BinlogPosition::new("mariadb-bin.000001", 1074)
    );
}

#[test]
fn same_named_table_in_an_unconfigured_schema_is_skipped_but_progress_still_moves() {
    let txs = read(
        "mariadb-bin.000001",
        config("shop.outbox", mariadb_outbox_columns()),
    )
    .unwrap();
    assert_eq!(event_ids(&txs), Vec::<&str>::new());
    assert_eq!(
        txs.last().unwrap().end,
        BinlogPosition::new("mariadb-bin.000001", 1074)
    );
}

#[test]
fn mysql8_compressed_transaction_rows_come_out_and_end_where_the_payload_event_ends() {
    // The fixture was recorded with binlog_row_metadata=MINIMAL: columns by position.
    let columns = ColumnMapping {
        event_id: "@1".into(),
        payload: "@1".into(),
        ..Default::default()
    };
    let txs = read(
        "transaction_compression.000001",
        config("test.tb1", columns),
    )
    .unwrap();
    assert_eq!(event_ids(&txs), ["1"]);
    assert_eq!(txs[0].events[0].payload.as_deref(), Some(b"1".as_slice()));
    assert_eq!(
        txs[0].end,
        BinlogPosition::new("transaction_compression.000001", 431)
    );
    // The closing ROTATE is a boundary in the next file.
    assert_eq!(
        txs.last().unwrap().end,
        BinlogPosition::new("binlog.000043", 4)
    );
}

#[test]
fn mysql8_binary_json_payload_is_forwarded_as_json_text() {
    let columns = ColumnMapping {
        event_id: "@1".into(),
        payload: "@2".into(),
        ..Default::default()
    };
    let txs = read("json.binlog.000001", config("mysql.t", columns)).unwrap();
    assert_eq!(event_ids(&txs), ["1", "2", "3", "4", "5", "6"]);
    let payloads: Vec<_> = txs
        .iter()
        .flat_map(|tx| &tx.events)
        .map(|e| String::from_utf8(e.payload.clone().unwrap()).unwrap())
        .collect();
    assert_eq!(
        payloads[0],
        r#"{"age":24,"data":"xxxxxxxxxx","name":"Joe"}"#
    );
    assert_eq!(
        payloads[5],
        r#"{"age":40,"data":"zzzzzzzzzz","name":"Pete"}"#
    );
    // Three rows of one multi-row insert share a rows event and a transaction.
    let multi = txs
        .iter()
        .find(|tx| tx.events.len() == 3)
        .expect("a 3-row transaction");
    let rows: Vec<u32> = multi.events.iter().map(|e| e.origin.row_index).collect();
    assert_eq!(rows, [0, 1, 2]);
}

#[test]
fn named_columns_without_full_row_metadata_are_a_clear_setting_error() {
    let err = read(
        "minimal_row_metadata.000001",
        config("noria.t1", ColumnMapping::default()),
    )
    .expect_err("MINIMAL metadata cannot map columns by name");
    let text = err.to_string();
    assert!(text.contains("binlog_row_metadata"), "{text}");
    assert!(text.contains("FULL"), "{text}");
}

#[test]
fn a_missing_mapped_column_names_the_table_position_and_columns() {
    let err = read(
        "mariadb-bin.000001",
        config("toddy_test.outbox", ColumnMapping::default()),
    )
    .expect_err("`event_id` does not exist in this table");
    let text = err.to_string();
    assert!(text.contains("toddy_test.outbox"), "{text}");
    assert!(text.contains("mariadb-bin.000001:"), "{text}");
    assert!(text.contains("no column `event_id`"), "{text}");
}

#[test]
fn non_uuid_event_ids_are_rejected_when_uuids_are_required() {
    let mut cfg = config("toddy_test.outbox", mariadb_outbox_columns());
    cfg.event_id_format = EventIdFormat::Uuid;
    let err = read("mariadb-bin.000001", cfg).expect_err("62 is not a UUID");
    assert!(
        matches!(err, DefiniteError::BadRow { ref position, .. } if position.pos == 612),
        "{err}"
    );
}

#[test]
fn transactions_without_outbox_rows_still_report_their_boundaries() {
    let txs = read(
        "binlog_transaction.000001",
        config("*.outbox_event", ColumnMapping::default()),
    )
    .unwrap();
    assert!(txs.iter().all(|tx| tx.events.is_empty()));
    let ends: Vec<String> = txs.iter().map(|tx| tx.end.to_string()).collect();
    let file = "binlog_transaction.000001";
    let expected: Vec<String> = [198, 299, 580, 680, 781, 1107, 1204, 1302, 1626]
        .iter()
        .map(|pos| format!("{file}:{pos}"))
        .chain(["master-bin.000002:4".to_string()])
        .collect();
    // Statements inside BEGIN..XID/COMMIT/ROLLBACK are not boundaries.
    assert_eq!(ends, expected);
}

#[test]
fn a_transaction_over_the_buffer_bound_is_a_clear_error() {
    let mut cfg = config(
        "mysql.t",
        ColumnMapping {
            event_id: "@1".into(),
            payload: "@2".into(),
            ..Default::default()
        },
    );
    cfg.max_transaction_bytes = 64;
    let err = read("json.binlog.000001", cfg).expect_err("a 3-row transaction exceeds 64 bytes");
    assert!(
        matches!(
            err,
            DefiniteError::TransactionTooLarge {
                limit_bytes: 64,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn under_the_dead_letter_policy_bad_rows_are_kept_whole_and_the_stream_goes_on() {
    let mut cfg = config("toddy_test.outbox", mariadb_outbox_columns());
    cfg.event_id_format = EventIdFormat::Uuid;
    cfg.bad_rows = BadRowPolicy::DeadLetter;
    let txs = read("mariadb-bin.000001", cfg).unwrap();
    assert_eq!(event_ids(&txs), Vec::<&str>::new());
    let dead: Vec<_> = txs.iter().flat_map(|tx| &tx.dead_letters).collect();
    assert_eq!(dead.len(), 2);
    assert!(
        dead[0].reason.contains("\"62\" is not a UUID"),
        "{}",
        dead[0].reason
    );
    assert_eq!(
        dead[0].origin.event_position,
        BinlogPosition::new("mariadb-bin.000001", 612)
    );
    let row: serde_json::Value = serde_json::from_slice(&dead[0].row).unwrap();
    assert_eq!(row["id"], 62);
    assert_eq!(row["event"], r#"{"foo":1}"#);
    // Both transactions still end where they did.
    let ends: Vec<u64> = txs
        .iter()
        .filter(|tx| tx.message_count() > 0)
        .map(|tx| tx.end.pos)
        .collect();
    assert_eq!(ends, [702, 1074]);
}

#[test]
fn a_key_column_that_also_fills_a_header_is_read_for_both() {
    let columns = ColumnMapping {
        key: Some("event_type".into()),
        ..mariadb_outbox_columns()
    };
    let txs = read("mariadb-bin.000001", config("toddy_test.outbox", columns)).unwrap();
    let first = &txs.iter().find(|tx| !tx.events.is_empty()).unwrap().events[0];
    assert_eq!(first.event_type.as_deref(), Some("2"));
    assert_eq!(first.key.as_deref(), Some(b"2".as_slice()));
    assert_eq!(first.key_bytes(), b"2");
    assert_eq!(first.event_id, "62");
    assert_eq!(first.payload.as_deref(), Some(br#"{"foo":1}"#.as_slice()));
}

/// The rows events inside one compressed transaction share the payload's
/// position; their rows are numbered on, so each row's coordinate (the
/// `binlog_position` and `binlog_row` headers) stays unique. Shown by
/// feeding the recorded payload's rows event twice, as a large INSERT that
/// MySQL splits into two rows events would arrive.
#[test]
fn rows_of_two_rows_events_in_one_compressed_transaction_have_distinct_coordinates() {
    use mysql_common::binlog::consts::{BinlogVersion, EventType};
    use mysql_common::binlog::events::TransactionPayloadEvent;
    use mysql_common::binlog::BinlogFile;
    use outbox_source::TransactionAssembler;

    let columns = ColumnMapping {
        event_id: "@1".into(),
        payload: "@1".into(),
        ..Default::default()
    };
    let name = "transaction_compression.000001";
    let reader = std::io::BufReader::new(std::fs::File::open(fixture(name)).unwrap());
    let mut binlog = BinlogFile::new(BinlogVersion::Version4, reader).unwrap();
    let mut assembler = TransactionAssembler::new(config("test.tb1", columns), name);
    let mut transactions = Vec::new();
    while let Some(event) = binlog.next() {
        let event = event.unwrap();
        transactions.extend(assembler.handle(&event).unwrap());
        if event.header().event_type_raw() != EventType::TRANSACTION_PAYLOAD_EVENT as u8 {
            continue;
        }
        let payload: TransactionPayloadEvent<'_> = event.read_event().unwrap();
        let mut inner = payload.decompressed().unwrap();
        while let Some(inner_event) = binlog.reader_mut().read_decompressed(&mut inner).unwrap() {
            let rows = inner_event.header().event_type_raw() == EventType::WRITE_ROWS_EVENT as u8;
            transactions.extend(assembler.handle(&inner_event).unwrap());
            if rows {
                transactions.extend(assembler.handle(&inner_event).unwrap());
            }
        }
    }
    let events: Vec<_> = transactions.iter().flat_map(|t| &t.events).collect();
    assert_eq!(events.len(), 2, "the rows event was fed twice");
    assert_eq!(
        events[0].origin.event_position,
        events[1].origin.event_position
    );
    assert_eq!(
        [events[0].origin.row_index, events[1].origin.row_index],
        [0, 1]
    );
}

/// Each transaction carries the GTID its GTID event named: MySQL 8's
/// `uuid:gno` and MariaDB's `domain-server-seq`, in binlog order.
#[test]
fn transactions_carry_the_gtid_of_their_gtid_event() {
    use outbox_core::Gtid;
    let any_table = || config("nothing.here", ColumnMapping::default());
    let mysql = read("binlog_transaction_with_GTID.000001", any_table()).unwrap();
    let gtids: Vec<(String, u64)> = mysql
        .iter()
        .filter_map(|t| match &t.gtid {
            Some(Gtid::MySql { uuid, gno, .. }) => Some((uuid.to_string(), *gno)),
            _ => None,
        })
        .collect();
    println!("mysql: {gtids:?}");
    assert!(!gtids.is_empty(), "the recorded MySQL 8 binlog has GTIDs");
    assert!(gtids
        .windows(2)
        .all(|w| w[0].0 == w[1].0 && w[0].1 < w[1].1));
    assert_eq!(gtids[0].0.len(), 36);

    let mariadb = read("mariadb-bin.000001", any_table()).unwrap();
    let gtids: Vec<(u32, u32, u64)> = mariadb
        .iter()
        .filter_map(|t| match &t.gtid {
            Some(Gtid::MariaDb {
                domain,
                server,
                seq,
            }) => Some((*domain, *server, *seq)),
            _ => None,
        })
        .collect();
    println!("mariadb: {gtids:?}");
    assert!(!gtids.is_empty(), "the recorded MariaDB binlog has GTIDs");
    assert!(gtids.windows(2).all(|w| w[0].2 < w[1].2));
}

#[test]
fn transactions_carry_the_creation_time_of_their_file() {
    for name in ["binlog_transaction.000001", "mariadb-bin.000001"] {
        // The FORMAT_DESCRIPTION event follows the 4-byte magic; its header
        // starts with its time.
        let bytes = std::fs::read(fixture(name)).unwrap();
        let created = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
        assert!(created > 0, "{name}");
        let txs = read(name, config("*.outbox_event", ColumnMapping::default())).unwrap();
        assert!(!txs.is_empty(), "{name}");
        for tx in &txs {
            // A rotation's boundary lies in the next file, whose own
            // FORMAT_DESCRIPTION is not read yet.
            let expected = if tx.end.file == name { created } else { 0 };
            assert_eq!(tx.file_created_at, expected, "{name}: {}", tx.end);
        }
    }
}

#[test]
fn transactions_and_their_events_carry_the_commit_time_to_the_millisecond_where_logged() {
    let columns = ColumnMapping {
        event_id: "@1".into(),
        payload: "@1".into(),
        ..Default::default()
    };
    // MySQL's GTID event carries the commit to the microsecond.
    let mysql = read(
        "transaction_compression.000001",
        config("test.tb1", columns),
    )
    .unwrap();
    let with_events: Vec<&SourceTransaction> =
        mysql.iter().filter(|t| !t.events.is_empty()).collect();
    assert!(!with_events.is_empty());
    for tx in &with_events {
        assert!(
            tx.committed_at_ms % 1000 != 0,
            "{}: {}",
            tx.end,
            tx.committed_at_ms
        );
        // The same moment as the events' own second, give or take one.
        assert!(
            tx.committed_at_ms / 1000 >= u64::from(tx.commit_timestamp) - 1
                && tx.committed_at_ms / 1000 <= u64::from(tx.commit_timestamp) + 1,
            "{}: {} against {}",
            tx.end,
            tx.committed_at_ms,
            tx.commit_timestamp
        );
        for event in &tx.events {
            assert_eq!(event.committed_at_ms, tx.committed_at_ms);
        }
    }
    // MariaDB logs the second only.
    let mariadb = read(
        "mariadb-bin.000001",
        config("toddy_test.outbox", mariadb_outbox_columns()),
    )
    .unwrap();
    assert!(mariadb.iter().any(|t| !t.events.is_empty()));
    for tx in &mariadb {
        assert_eq!(
            tx.committed_at_ms,
            u64::from(tx.commit_timestamp) * 1000,
            "{}",
            tx.end
        );
        for event in &tx.events {
            assert_eq!(event.committed_at_ms, tx.committed_at_ms);
        }
    }
}
