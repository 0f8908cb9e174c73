//! The writer on real servers (MariaDB and Oracle MySQL, as child
//! processes; `<test>::mariadb`, `<test>::mysql`): what a rollback and a
//! commit leave, what the forwarder makes of a commit (the real `tansu`
//! broker, the forwarder as its own process, one configuration file for
//! both sides), the order of the ids, and what each refusal leaves of the
//! caller's transaction.

use std::collections::HashSet;

use harness::server::migration_statements;
use harness::workload::{by_key, forwarder_config, server_id, SETTLE};
use harness::{on_both_flavors, unique, Broker, DbServer, Flavor, ForwarderSetup, TIMEOUT};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Transaction, Value};
use outbox_writer::{
    ColumnMapping, NewEvent, Outbox, OutboxTable, PayloadFormat, TraceContext, WriteError,
};
use serde_json::json;

on_both_flavors!(
    a_rollback_leaves_no_event_and_a_commit_reaches_kafka_through_one_configuration,
    ids_are_time_ordered_and_given_ids_and_versions_are_kept,
    a_duplicate_id_is_named_and_the_transaction_stays_the_callers,
    a_value_too_long_for_its_column_is_refused_before_the_server_cuts_it,
    a_table_without_a_needed_column_is_refused_at_open,
    a_key_column_of_its_own_is_required_of_every_event,
    a_further_column_an_event_leaves_unset_takes_its_default_in_a_batch,
    the_writer_refuses_each_row_the_forwarder_would_refuse,
    a_service_waits_until_its_committed_event_is_published,
    the_migrations_run_twice_and_the_trace_columns_go_at_the_end,
);

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// Places an order with its events in one transaction, committed or not.
async fn place(conn: &mut Conn, outbox: &Outbox, events: &[NewEvent], commit: bool) {
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    tx.exec_drop(
        "INSERT INTO orders (customer, amount_cents, status) VALUES (?, ?, 'ACCEPTED')",
        ("ada", 4200),
    )
    .await
    .unwrap();
    outbox.append_all(&mut tx, events).await.unwrap();
    if commit {
        tx.commit().await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
}

fn order_event(order: u64) -> NewEvent {
    NewEvent::new(
        "order",
        order.to_string(),
        "ORDER_ACCEPTED",
        &json!({"order_id": order, "customer": "ada", "note": "naïve café ☕"}),
    )
    .unwrap()
}

/// The writer of `table` in `conn`'s database.
async fn open(conn: &mut Conn, table: &str) -> Outbox {
    OutboxTable::new(table).unwrap().open(conn).await.unwrap()
}

/// The writer of `table`, whose payloads are text (`payload_format = "text"`).
async fn open_text(conn: &mut Conn, table: &str) -> Outbox {
    let columns = ColumnMapping {
        payload_format: PayloadFormat::Text,
        ..ColumnMapping::default()
    };
    let table = OutboxTable::new(table).unwrap().columns(columns);
    table.open(conn).await.unwrap()
}

/// Why `outbox` refuses `event` in `tx`.
async fn refusal(outbox: &Outbox, tx: &mut Transaction<'_>, event: &NewEvent) -> String {
    outbox.append(tx, event).await.unwrap_err().to_string()
}

async fn count(conn: &mut Conn, sql: &str) -> u64 {
    conn.query_first(sql).await.unwrap().unwrap()
}

async fn a_rollback_leaves_no_event_and_a_commit_reaches_kafka_through_one_configuration(
    flavor: Flavor,
) {
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 3);
    let mut conn = db.create_schema(&schema).await;
    // The team's own column names, known to both sides from one file.
    conn.query_drop(
        "ALTER TABLE outbox_event RENAME COLUMN event_id TO id, \
         RENAME COLUMN payload TO body, RENAME COLUMN traceparent TO trace_parent",
    )
    .await
    .unwrap();
    let config = forwarder_config(db, broker, &schema, &topic, server_id()).section(
        "[outbox.columns]\nevent_id = \"id\"\npayload = \"body\"\ntraceparent = \"trace_parent\"\n",
    );
    let setup = ForwarderSetup::new(&config);
    let outbox = OutboxTable::from_forwarder_config_file(&setup.config_path)
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap();
    assert!(outbox.carries_trace_context());
    let mut forwarder = setup.spawn_streaming().await;

    let rolled_back = vec![order_event(1), order_event(1)];
    place(&mut conn, &outbox, &rolled_back, false).await;
    assert_eq!(
        count(&mut conn, "SELECT COUNT(*) FROM outbox_event").await,
        0
    );
    assert_eq!(count(&mut conn, "SELECT COUNT(*) FROM orders").await, 0);

    let trace = TraceContext::parse(PARENT, Some("rojo=00f067aa0ba902b7")).unwrap();
    let committed = [
        order_event(2).version(3).trace_context(trace.clone()),
        order_event(2)
            .trace_context(trace.clone())
            .version(4)
            .without_trace_context(),
        // A given UUIDv4: `event_id_format = "uuid"` takes any version.
        order_event(3).event_id(uuid::Uuid::new_v4().to_string()),
    ];
    place(&mut conn, &outbox, &committed[..2], true).await;
    place(&mut conn, &outbox, &committed[2..], true).await;

    let records = broker.consume(&topic, committed.len(), TIMEOUT, SETTLE);
    forwarder.terminate();
    let keyed = by_key(&records);
    assert_eq!(records.len(), committed.len(), "each committed event once");
    let ids: HashSet<&str> = committed.iter().map(NewEvent::id).collect();
    assert_eq!(
        keyed.keys().map(String::as_str).collect::<HashSet<_>>(),
        ids
    );
    for gone in &rolled_back {
        assert!(
            !keyed.contains_key(gone.id()),
            "{} was rolled back",
            gone.id()
        );
    }
    let first = keyed[committed[0].id()][0];
    assert_eq!(first.headers["event_version"], "3");
    assert_eq!(first.headers["event_type"], "ORDER_ACCEPTED");
    assert_eq!(first.headers["aggregate_id"], "2");
    assert_eq!(first.headers["traceparent"], PARENT);
    assert_eq!(first.headers["tracestate"], "rojo=00f067aa0ba902b7");
    let payload: serde_json::Value = serde_json::from_slice(&first.payload).unwrap();
    assert_eq!(payload["note"], "naïve café ☕");
    let second = keyed[committed[1].id()][0];
    assert_eq!(second.headers["event_version"], "4");
    assert!(
        !second.headers.contains_key("traceparent"),
        "{:?}",
        second.headers
    );
}

async fn ids_are_time_ordered_and_given_ids_and_versions_are_kept(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let mut conn = db.create_schema(&unique("shop")).await;
    let outbox = open(&mut conn, "outbox_event").await;
    let mut written = Vec::new();
    for order in 0..40 {
        let events: Vec<NewEvent> = (0..1 + order % 3).map(|_| order_event(order)).collect();
        written.extend(events.iter().map(|e| e.id().to_owned()));
        place(&mut conn, &outbox, &events, true).await;
    }
    let stored: Vec<String> = conn
        .query("SELECT event_id FROM outbox_event ORDER BY event_id")
        .await
        .unwrap();
    assert_eq!(stored, written, "the index order is the order written");
    for id in &stored {
        assert_eq!(
            uuid::Uuid::try_parse(id).unwrap().get_version_num(),
            7,
            "{id}"
        );
    }

    // More events than one statement carries: all of them, in order.
    let many: Vec<NewEvent> = (0..1_234).map(|i| order_event(1_000 + i)).collect();
    place(&mut conn, &outbox, &many, true).await;
    written.extend(many.iter().map(|e| e.id().to_owned()));
    let stored: Vec<String> = conn
        .query("SELECT event_id FROM outbox_event ORDER BY event_id")
        .await
        .unwrap();
    assert!(
        stored == written,
        "{} rows stored, {} written, or not in the order written",
        stored.len(),
        written.len()
    );

    let given = uuid::Uuid::new_v4().to_string();
    place(
        &mut conn,
        &outbox,
        &[order_event(99).event_id(&given).version(7)],
        true,
    )
    .await;
    let version: Option<i64> = conn
        .exec_first(
            "SELECT event_version FROM outbox_event WHERE event_id = ?",
            (&given,),
        )
        .await
        .unwrap();
    assert_eq!(version, Some(7));

    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    let refused = outbox
        .append(&mut tx, &order_event(100).event_id("order-100"))
        .await
        .unwrap_err();
    assert!(matches!(refused, WriteError::NotAUuid { .. }), "{refused}");
    assert!(refused.to_string().contains("event_id_format"), "{refused}");
    tx.rollback().await.unwrap();
}

async fn a_duplicate_id_is_named_and_the_transaction_stays_the_callers(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let mut conn = db.create_schema(&unique("shop")).await;
    let outbox = open(&mut conn, "outbox_event").await;
    let first = order_event(1);
    place(&mut conn, &outbox, std::slice::from_ref(&first), true).await;

    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    let again = order_event(2).event_id(first.id());
    let other = order_event(2);
    let err = outbox
        .append_all(&mut tx, &[other.clone(), again])
        .await
        .unwrap_err();
    match &err {
        WriteError::DuplicateEventId { event_id, .. } => assert_eq!(event_id, first.id()),
        other => panic!("expected a duplicate id, got {other}"),
    }
    assert!(err.to_string().contains(first.id()), "{err}");
    // Twice in one statement.
    let twice = order_event(4);
    let err = outbox
        .append_all(&mut tx, &[twice.clone(), twice.clone()])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WriteError::DuplicateEventId { event_id, .. } if event_id == twice.id()),
        "{err}"
    );
    // The failed statements left nothing, and the transaction goes on.
    let kept = order_event(3);
    outbox.append(&mut tx, &kept).await.unwrap();
    tx.commit().await.unwrap();
    let mut ids: Vec<String> = conn
        .query("SELECT event_id FROM outbox_event")
        .await
        .unwrap();
    ids.sort();
    let mut expected = vec![first.id().to_owned(), kept.id().to_owned()];
    expected.sort();
    assert_eq!(
        ids, expected,
        "the first event once, the later one, not the statement that failed"
    );
}

async fn a_value_too_long_for_its_column_is_refused_before_the_server_cuts_it(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let mut conn = db.create_schema(&unique("shop")).await;
    // Outside strict mode the server would store the first 100 characters
    // and warn; the writer must refuse either way.
    conn.query_drop("SET SESSION sql_mode = ''").await.unwrap();
    conn.query_drop(
        "CREATE TABLE small_outbox (event_id CHAR(36) NOT NULL PRIMARY KEY, \
         aggregate_type VARCHAR(32) NOT NULL, aggregate_id VARCHAR(8) NOT NULL, \
         event_type VARCHAR(32) NOT NULL, event_version TINYINT UNSIGNED NOT NULL, \
         payload VARCHAR(100) NOT NULL) DEFAULT CHARSET = utf8mb4",
    )
    .await
    .unwrap();
    let outbox = open_text(&mut conn, "small_outbox").await;
    assert!(!outbox.carries_trace_context());
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    // 100 characters in 300 bytes fit; 101 do not.
    let fits = NewEvent::with_bytes("order", "1", "NOTE", "☕".repeat(100).into_bytes());
    let big = NewEvent::with_bytes("order", "1", "NOTE", "☕".repeat(101).into_bytes());
    let err = outbox.append(&mut tx, &big).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            WriteError::TooLong {
                length: 101,
                limit: 100,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains(big.id()) && text.contains("`payload`") && text.contains("characters"),
        "{text}"
    );
    let long_id = NewEvent::with_bytes("order", "123456789", "NOTE", b"{}".to_vec());
    let err = refusal(&outbox, &mut tx, &long_id).await;
    assert!(err.contains("`aggregate_id` is 9 characters"), "{err}");
    // Outside strict mode the server would store 255 and 0.
    for version in [256, -1] {
        let past = NewEvent::with_bytes("order", "1", "NOTE", b"{}".to_vec()).version(version);
        let err = refusal(&outbox, &mut tx, &past).await;
        assert!(
            err.contains(&format!(
                "`event_version` is {version}, outside the 0..=255"
            )),
            "{err}"
        );
    }
    let fits = fits.version(255);
    outbox.append(&mut tx, &fits).await.unwrap();
    tx.commit().await.unwrap();
    let stored: Vec<(String, u64, u8)> = conn
        .query("SELECT event_id, CHAR_LENGTH(payload), event_version FROM small_outbox")
        .await
        .unwrap();
    assert_eq!(stored, vec![(fits.id().to_owned(), 100, 255)]);

    // A TEXT column holds 65 535 bytes, however many characters they are.
    conn.query_drop("CREATE TABLE text_outbox LIKE small_outbox")
        .await
        .unwrap();
    conn.query_drop("ALTER TABLE text_outbox MODIFY payload TEXT NOT NULL")
        .await
        .unwrap();
    let outbox = open_text(&mut conn, "text_outbox").await;
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    let wide = NewEvent::with_bytes("order", "1", "NOTE", "☕".repeat(22_000).into_bytes());
    let err = outbox.append(&mut tx, &wide).await.unwrap_err();
    assert!(
        matches!(
            err,
            WriteError::TooLong {
                length: 66_000,
                limit: 65_535,
                unit: "bytes",
                ..
            }
        ),
        "{err}"
    );
    let fits = NewEvent::with_bytes("order", "1", "NOTE", "☕".repeat(21_000).into_bytes());
    outbox.append(&mut tx, &fits).await.unwrap();
    tx.commit().await.unwrap();
    let stored: Vec<u64> = conn
        .query("SELECT LENGTH(payload) FROM text_outbox")
        .await
        .unwrap();
    assert_eq!(stored, vec![63_000]);

    // A TINYTEXT holds 255 bytes of its own character set: in latin1 an
    // `é` is one byte (two in UTF-8); utf8mb3 cannot store an emoji.
    conn.query_drop("CREATE TABLE latin1_outbox LIKE small_outbox")
        .await
        .unwrap();
    conn.query_drop(
        "ALTER TABLE latin1_outbox MODIFY payload TINYTEXT CHARACTER SET latin1 NOT NULL, \
         MODIFY event_type VARCHAR(32) CHARACTER SET utf8mb3 NOT NULL",
    )
    .await
    .unwrap();
    let outbox = open_text(&mut conn, "latin1_outbox").await;
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    let wide = NewEvent::with_bytes("order", "1", "NOTE", "é".repeat(256).into_bytes());
    let err = outbox.append(&mut tx, &wide).await.unwrap_err();
    assert!(
        matches!(
            err,
            WriteError::TooLong {
                length: 256,
                limit: 255,
                unit: "bytes",
                ..
            }
        ),
        "{err}"
    );
    let emoji = NewEvent::with_bytes("order", "1", "NOTE 😀", b"{}".to_vec());
    let err = refusal(&outbox, &mut tx, &emoji).await;
    assert!(
        err.contains("`event_type`") && err.contains("utf8mb3") && err.contains("utf8mb4"),
        "{err}"
    );
    // As text, latin1 stores `é` as a byte that is not UTF-8, which the
    // forwarder refuses; as bytes, it is published as stored.
    let fits = NewEvent::with_bytes("order", "1", "NOTE ☕", "é".repeat(255).into_bytes());
    let err = refusal(&outbox, &mut tx, &fits).await;
    assert!(
        err.contains("`payload`") && err.contains("latin1 stores this text as bytes"),
        "{err}"
    );
    let columns = ColumnMapping {
        payload_format: PayloadFormat::Bytes,
        ..ColumnMapping::default()
    };
    let outbox = OutboxTable::new("latin1_outbox")
        .unwrap()
        .columns(columns)
        .open(&mut tx)
        .await
        .unwrap();
    outbox.append(&mut tx, &fits).await.unwrap();
    tx.commit().await.unwrap();
    let stored: Vec<(u64, u64, String)> = conn
        .query("SELECT LENGTH(payload), CHAR_LENGTH(payload), event_type FROM latin1_outbox")
        .await
        .unwrap();
    assert_eq!(stored, vec![(255, 255, "NOTE ☕".to_owned())]);
}

async fn a_table_without_a_needed_column_is_refused_at_open(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let mut conn = db.create_schema(&unique("shop")).await;
    conn.query_drop("ALTER TABLE outbox_event DROP COLUMN aggregate_id")
        .await
        .unwrap();
    let err = OutboxTable::new("outbox_event")
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no column `aggregate_id`") && err.contains("[outbox.columns] aggregate_id"),
        "{err}"
    );
    let err = OutboxTable::new("no_such_table")
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not exist"), "{err}");
}

/// A Kafka key column of the team's own must be set on every event, and
/// a further column lands where it is named.
async fn a_key_column_of_its_own_is_required_of_every_event(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let mut conn = db.create_schema(&unique("shop")).await;
    conn.query_drop("ALTER TABLE outbox_event ADD COLUMN tenant VARCHAR(8) NULL")
        .await
        .unwrap();
    let config = "[outbox]\ntables = [\"*.outbox_event\"]\n[outbox.columns]\nkey = \"tenant\"\n";
    let outbox = OutboxTable::from_forwarder_config(config)
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap();
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    let err = refusal(&outbox, &mut tx, &order_event(1)).await;
    assert!(err.contains("[outbox.columns] key names `tenant`"), "{err}");
    let err = refusal(
        &outbox,
        &mut tx,
        &order_event(1).column("Tenant", "far-too-long"),
    )
    .await;
    assert!(err.contains("`tenant` is 12 characters"), "{err}");
    let err = refusal(&outbox, &mut tx, &order_event(1).column("payload", "x")).await;
    assert!(err.contains("holds the event's payload"), "{err}");
    let event = order_event(1)
        .column("tenant", "a")
        .column("TENANT", "acme");
    outbox.append(&mut tx, &event).await.unwrap();
    tx.commit().await.unwrap();
    let tenant: Option<String> = conn
        .query_first("SELECT tenant FROM outbox_event")
        .await
        .unwrap();
    assert_eq!(tenant.as_deref(), Some("acme"), "the last value set holds");

    let config = "[outbox.columns]\ntopic_column = \"route\"\n";
    let err = OutboxTable::from_forwarder_config(config)
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no column `route`, which [outbox.columns] topic_column names"),
        "{err}"
    );
}

/// In one `append_all`, an event that does not set a further column another
/// event sets gets the column's default, as it would appended alone: not
/// NULL, which would route it to the topic template or fail a NOT NULL
/// column.
async fn a_further_column_an_event_leaves_unset_takes_its_default_in_a_batch(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let mut conn = db.create_schema(&unique("shop")).await;
    conn.query_drop(
        "ALTER TABLE outbox_event ADD COLUMN route VARCHAR(64) NOT NULL DEFAULT 'orders', \
         ADD COLUMN tenant VARCHAR(8) NULL DEFAULT 'shared'",
    )
    .await
    .unwrap();
    let config = "[outbox.columns]\ntopic_column = \"route\"\n";
    let outbox = OutboxTable::from_forwarder_config(config)
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap();
    let routed = order_event(1)
        .column("route", "payments")
        .column("tenant", "acme");
    let plain = order_event(2);
    let tenant_only = order_event(3).column("tenant", "beta");
    place(
        &mut conn,
        &outbox,
        &[routed.clone(), plain.clone(), tenant_only.clone()],
        true,
    )
    .await;
    let alone = order_event(4);
    place(&mut conn, &outbox, std::slice::from_ref(&alone), true).await;
    let stored: Vec<(String, String, Option<String>)> = conn
        .query("SELECT event_id, route, tenant FROM outbox_event")
        .await
        .unwrap();
    let row = |event: &NewEvent| {
        stored
            .iter()
            .find(|(id, _, _)| id == event.id())
            .map(|(_, route, tenant)| (route.as_str(), tenant.as_deref()))
            .unwrap_or_else(|| panic!("{} not stored: {stored:?}", event.id()))
    };
    assert_eq!(stored.len(), 4, "{stored:?}");
    assert_eq!(row(&routed), ("payments", Some("acme")));
    assert_eq!(row(&plain), ("orders", Some("shared")));
    assert_eq!(row(&tenant_only), ("orders", Some("beta")));
    assert_eq!(row(&alone), ("orders", Some("shared")));
}

/// What the writer sends the forwarder publishes: each value the
/// forwarder's row rules refuse as a bad row (which stops the stream under
/// the default `bad_row_policy`) is refused before it is sent, with the
/// column and the reason, and the transaction stays open for good events.
/// The payload is text here, which the server takes whatever it holds.
async fn the_writer_refuses_each_row_the_forwarder_would_refuse(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let mut conn = db.create_schema(&unique("shop")).await;
    conn.query_drop(
        "ALTER TABLE outbox_event ADD COLUMN part INT NULL, ADD COLUMN at_ms BIGINT NULL, \
         ADD COLUMN at DATETIME NULL, ADD COLUMN route VARCHAR(255) NULL, \
         ADD COLUMN tenant_no BIGINT NULL, MODIFY payload LONGTEXT NOT NULL",
    )
    .await
    .unwrap();
    let open = |time: &str| {
        format!(
            "[outbox.columns]\npartition_column = \"part\"\ntimestamp_column = \"{time}\"\n\
             topic_column = \"route\"\n"
        )
    };
    let millis = OutboxTable::from_forwarder_config(&open("at_ms"))
        .unwrap()
        .partition_count(4)
        .open(&mut conn)
        .await
        .unwrap();
    let datetime = OutboxTable::from_forwarder_config(&open("at"))
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap();
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    let refused = [
        (
            &millis,
            NewEvent::with_bytes("order", "1", "T", b"not json".to_vec()),
            "`payload`",
            "payload is not valid JSON",
        ),
        (
            &millis,
            order_event(1).column("at_ms", 1_764_675_005i64),
            "`at_ms`",
            "looks like seconds",
        ),
        (
            &millis,
            order_event(1).column("at_ms", -5i64),
            "`at_ms`",
            "before 1970",
        ),
        (
            &datetime,
            order_event(1).column("at", "1969-12-31 23:00:00"),
            "`at`",
            "before 1970",
        ),
        (
            &millis,
            order_event(1).column("part", 4),
            "`part`",
            "the topic has partitions 0 to 3",
        ),
        (
            &datetime,
            order_event(1).column("part", -1),
            "`part`",
            "not a partition number",
        ),
        (
            &millis,
            order_event(1).column("part", "2x"),
            "`part`",
            "the integer column was given the text \"2x\"",
        ),
        (
            &millis,
            order_event(1).column("route", "orders/eu"),
            "`route`",
            "is not a topic name",
        ),
        (
            &millis,
            order_event(1).column("tenant_no", " 17"),
            "`tenant_no`",
            "the integer column was given the text",
        ),
    ];
    for (outbox, event, column, reason) in &refused {
        let err = outbox.append(&mut tx, event).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, WriteError::Refused { .. }), "{text}");
        assert!(
            text.contains(column) && text.contains(reason) && text.contains(event.id()),
            "{column} {reason}: {text}"
        );
    }
    let good = [
        order_event(2)
            .column("at_ms", 1_764_675_005_250i64)
            .column("part", 3)
            .column("route", "orders.eu")
            .column("tenant_no", "17"),
        order_event(3)
            .column("part", "0")
            .column("at_ms", Value::NULL),
    ];
    millis.append_all(&mut tx, &good).await.unwrap();
    let dated = order_event(4).column("at", "2026-12-06 08:00:00");
    datetime.append(&mut tx, &dated).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        count(&mut conn, "SELECT COUNT(*) FROM outbox_event").await,
        3
    );
}

/// A service that must know its event is in Kafka before it answers waits
/// on the forwarder (`committed_gtid`, then `wait_published` on its
/// `/acked`): the wait returns once the message can be read from Kafka;
/// with the broker stopped it runs out with an error that says so, and
/// returns once the broker is back; after a kill -9 the restarted
/// forwarder answers from its store. On a broker of its own, which the
/// test stops.
async fn a_service_waits_until_its_committed_event_is_published(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let mut broker = Broker::start(true).await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    let mut conn = db.create_schema(&schema).await;
    let port = harness::free_port();
    let listen = format!("127.0.0.1:{port}");
    let config = forwarder_config(db, &broker, &schema, &topic, server_id())
        .section(&format!("[metrics]\nlisten = \"{listen}\"\n"));
    let setup = ForwarderSetup::new(&config);
    let outbox = OutboxTable::from_forwarder_config_file(&setup.config_path)
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap();
    let mut forwarder = setup.spawn_streaming().await;
    let wait = std::time::Duration::from_secs(30);

    let first = order_event(1);
    place(&mut conn, &outbox, std::slice::from_ref(&first), true).await;
    let first_gtid = outbox_writer::committed_gtid(&mut conn).await.unwrap();
    outbox_writer::wait_published(&listen, &first_gtid, wait)
        .await
        .unwrap();
    // Published: in Kafka as soon as the wait returns.
    let records = broker.consume(&topic, 1, std::time::Duration::from_secs(5), SETTLE);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key_str(), first.id());

    // The broker stopped: the event is committed, the wait runs out.
    broker.stop();
    let second = order_event(2);
    place(&mut conn, &outbox, std::slice::from_ref(&second), true).await;
    let second_gtid = outbox_writer::committed_gtid(&mut conn).await.unwrap();
    let short = std::time::Duration::from_secs(3);
    let err = outbox_writer::wait_published(&listen, &second_gtid, short)
        .await
        .unwrap_err();
    assert!(matches!(err, WriteError::NotPublished { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&second_gtid) && text.contains("not yet acked"),
        "{text}"
    );
    broker.restart().await;
    outbox_writer::wait_published(&listen, &second_gtid, wait)
        .await
        .unwrap();
    let records = broker.consume(&topic, 2, TIMEOUT, SETTLE);
    assert_eq!(
        by_key(&records).keys().cloned().collect::<HashSet<_>>(),
        [first.id().to_owned(), second.id().to_owned()].into()
    );

    // Killed and restarted: the stored checkpoint answers at once.
    forwarder.kill9();
    let mut forwarder = setup.spawn_streaming().await;
    outbox_writer::wait_published(&listen, &second_gtid, wait)
        .await
        .unwrap();
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

/// `migrations/` applied a second time changes nothing (001-005 by `IF NOT
/// EXISTS`, 006 by asking the table) and adds a column found missing;
/// 006's columns are the table's last, where MySQL 8.0 adds columns
/// instantly rather than by copying it, and the session's
/// `lock_wait_timeout` is its own again after it.
async fn the_migrations_run_twice_and_the_trace_columns_go_at_the_end(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let mut conn = db.create_schema(&unique("shop")).await;
    let columns = "SELECT COLUMN_NAME FROM information_schema.COLUMNS \
                   WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_event' \
                   ORDER BY ORDINAL_POSITION";
    let once: Vec<String> = conn.query(columns).await.unwrap();
    assert_eq!(
        once[once.len() - 2..],
        ["traceparent".to_owned(), "tracestate".to_owned()],
        "{once:?}"
    );
    for statement in migration_statements() {
        conn.query_drop(&statement)
            .await
            .unwrap_or_else(|e| panic!("the second run of {statement}: {e}"));
    }
    let twice: Vec<String> = conn.query(columns).await.unwrap();
    assert_eq!(twice, once);

    conn.query_drop("ALTER TABLE outbox_event DROP COLUMN tracestate")
        .await
        .unwrap();
    for statement in migration_statements() {
        conn.query_drop(&statement).await.unwrap();
    }
    let mended: Vec<String> = conn.query(columns).await.unwrap();
    assert_eq!(mended, once, "tracestate added again, at the end");
    let (session, global): (u64, u64) = conn
        .query_first("SELECT @@SESSION.lock_wait_timeout, @@GLOBAL.lock_wait_timeout")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session, global);
}
