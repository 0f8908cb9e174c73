//! Bad input: rows that cannot become messages (under both policies),
//! DDL, compressed events, inserts logged as statements.

use super::*;

/// Runs `setup_sql`, writes good events, one bad row via `bad_sql`, then a
/// good one; the forwarder must stop with `expected` in its message, after
/// publishing the first batch and before the checkpoint passes the bad row.
pub(super) async fn bad_row_stops_the_forwarder(
    edit: impl Fn(ForwarderToml) -> ForwarderToml,
    setup_sql: &str,
    bad_sql: &str,
    expected: &str,
) {
    // A server of its own, so no other transaction lands between the good
    // rows and the bad one and the checkpoint's bound is exact.
    let db = &DbServer::start(Flavor::MariaDb, &[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, edit).await;
    let mut c = s.conn(db).await;
    if !setup_sql.is_empty() {
        c.query_drop(setup_sql).await.unwrap();
    }
    let mut forwarder = s.setup.spawn_streaming().await;

    let mut before = Vec::new();
    for _ in 0..3 {
        before.extend(write_order(&mut c, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&before), TIMEOUT, Duration::ZERO);
    let before_bad = db.position().await;
    // The good rows are acked; let a checkpoint write cover them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.query_drop(bad_sql).await.unwrap();
    let after = write_order(&mut c, 1, false).await;

    let status = forwarder.wait_exit(TIMEOUT).await;
    assert!(!status.success(), "a bad row stops the forwarder");
    let log = forwarder.log();
    assert!(log.contains(expected), "expected {expected:?} in:\n{log}");
    assert!(
        log.contains(&format!("{}.", s.schema)),
        "names the table:\n{log}"
    );
    assert!(
        log.contains(&before_bad.file),
        "names the binlog position:\n{log}"
    );
    let checkpoint = s.setup.checkpoint().unwrap().position;
    assert_eq!(
        checkpoint, before_bad,
        "the checkpoint covers the good rows and stops before the bad one"
    );
    let records = broker.consume(&s.topic, 3, TIMEOUT, SETTLE);
    assert!(
        !by_key(&records).contains_key(&after[0].id),
        "nothing after the bad row was published"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_row_event_id_not_a_uuid_stops_before_the_checkpoint_passes_it() {
    bad_row_stops_the_forwarder(
        |c| c,
        "",
        "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('not-a-uuid', 'order', '1', 'X', '{}')",
        "is not a UUID",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_of_an_outbox_row_under_on_update_fail_stops_before_the_checkpoint_passes_it() {
    bad_row_stops_the_forwarder(
        |c| c.outbox("on_update", "\"fail\""),
        "",
        "UPDATE outbox_event SET event_version = 2 ORDER BY created_at LIMIT 1",
        "UPDATE of outbox rows of",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_of_an_outbox_row_under_on_delete_fail_stops_before_the_checkpoint_passes_it() {
    bad_row_stops_the_forwarder(
        |c| c.outbox("on_delete", "\"fail\""),
        "",
        "DELETE FROM outbox_event ORDER BY created_at LIMIT 1",
        "DELETE of outbox rows of",
    )
    .await;
}

/// Logged as a statement, the UPDATE's rows cannot be read, but naming an
/// outbox table is enough for `fail` to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_update_logged_as_a_statement_under_on_update_fail_stops_the_forwarder() {
    bad_row_stops_the_forwarder(
        |c| c.outbox("on_update", "\"fail\""),
        "",
        "SET SESSION binlog_format = 'STATEMENT'; \
         UPDATE outbox_event SET event_version = 2 WHERE event_version = 1 LIMIT 1; \
         SET SESSION binlog_format = 'ROW'",
        "UPDATE of outbox rows of",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_row_payload_not_json_stops_before_the_checkpoint_passes_it() {
    // MariaDB checks JSON columns; a TEXT payload column does not.
    let id = uuid::Uuid::new_v4();
    bad_row_stops_the_forwarder(
        |c| c,
        "ALTER TABLE outbox_event MODIFY payload TEXT NOT NULL",
        &format!(
            "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('{id}', 'order', '1', 'X', '{{not json')"
        ),
        "payload is not valid JSON",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_row_over_the_maximum_message_size_stops_before_the_checkpoint_passes_it() {
    let id = uuid::Uuid::new_v4();
    let big = "y".repeat(64 * 1024);
    bad_row_stops_the_forwarder(
        |c| c.property("message.max.bytes", "32768"),
        "",
        &format!(
            "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('{id}', 'order', '1', 'X', '{{\"b\":\"{big}\"}}')"
        ),
        "Kafka refused the message",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_on_the_outbox_table_while_running_keeps_mapping_by_name() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    let mut c = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;

    let mut written = write_order(&mut c, 2, true).await;
    // Columns move: a new first column shifts every position.
    c.query_drop("ALTER TABLE outbox_event ADD COLUMN trace_id VARCHAR(64) NULL FIRST")
        .await
        .unwrap();
    written.extend(write_order(&mut c, 2, true).await);
    c.query_drop(
        "ALTER TABLE outbox_event MODIFY COLUMN aggregate_id VARCHAR(255) NOT NULL AFTER payload",
    )
    .await
    .unwrap();
    written.extend(write_order(&mut c, 2, false).await);

    let records = broker.consume(&s.topic, 6, TIMEOUT, SETTLE);
    assert_eq!(records.len(), 6);
    let keyed = by_key(&records);
    for w in &written {
        let record = keyed[&w.id][0];
        assert_eq!(record.payload, w.payload.as_bytes());
        assert_eq!(record.headers["aggregate_id"], w.aggregate_id);
        assert_eq!(record.headers["event_version"], "1");
    }
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_compressed_binlog_events_stop_with_a_clear_error() {
    let db = DbServer::start(Flavor::MariaDb, &["--log-bin-compress-min-len=10"]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&db, broker, 2, |c| c).await;
    let mut c = s.conn(&db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    // Turned on while the forwarder runs (the start-up check refuses it).
    c.query_drop("SET GLOBAL log_bin_compress = ON")
        .await
        .unwrap();
    let start = db.position().await;
    write_order(&mut c, 1, false).await;

    assert!(!forwarder.wait_exit(TIMEOUT).await.success());
    let log = forwarder.log();
    assert!(log.contains("log_bin_compress"), "{log}");
    assert!(log.contains("MARIADB_COMPRESSED_EVENT"), "{log}");
    let checkpoint = s.setup.checkpoint().unwrap().position;
    assert!(
        checkpoint.compare(&start).unwrap().is_le(),
        "no row was skipped past"
    );

    // A restart refuses at the preflight and names the setting.
    let mut restarted = s.setup.spawn(&[]);
    assert!(!restarted.wait_exit(TIMEOUT).await.success());
    assert!(
        restarted.log().contains("FAIL  log_bin_compress"),
        "{}",
        restarted.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rows_under_the_dead_letter_policy_are_parked_with_their_error_and_the_rest_flows() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let dead_letter_topic = unique("dlq");
    broker.create_topic(&dead_letter_topic, 1);
    let s = Scenario::new(db, broker, 2, |c| {
        c.outbox("bad_row_policy", "\"dead_letter\"")
            .kafka("dead_letter_topic", &format!("{dead_letter_topic:?}"))
            .property("message.max.bytes", "32768")
    })
    .await;
    let mut c = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;

    let mut good = write_order(&mut c, 2, true).await;
    c.query_drop(
        "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('not-a-uuid', 'order', '7', 'X', '{\"n\":1}')",
    )
    .await
    .unwrap();
    let too_large = Written::new("8", &format!(r#"{{"b":"{}"}}"#, "z".repeat(64 * 1024)));
    insert_events(&mut c, std::slice::from_ref(&too_large), false).await;
    good.extend(write_order(&mut c, 2, true).await);
    let written_up_to = db.position().await;

    let records = broker.consume(&s.topic, 4, TIMEOUT, SETTLE);
    assert_eq!(
        by_key(&records).keys().cloned().collect::<HashSet<_>>(),
        ids(&good)
    );
    let parked = broker.consume(&dead_letter_topic, 2, TIMEOUT, SETTLE);
    assert_eq!(parked.len(), 2, "both bad rows are parked, once each");
    let uuid_row = parked
        .iter()
        .find(|r| r.key_str() == "not-a-uuid")
        .expect("the non-UUID row");
    assert!(
        uuid_row.headers["error"].contains("is not a UUID"),
        "{:?}",
        uuid_row.headers
    );
    assert_eq!(
        uuid_row.headers["source_table"],
        format!("{}.outbox_event", s.schema)
    );
    let row: serde_json::Value = serde_json::from_slice(&uuid_row.payload).unwrap();
    assert_eq!(row["aggregate_id"], "7");
    assert_eq!(row["payload"], r#"{"n":1}"#);
    let large_row = parked
        .iter()
        .find(|r| r.key_str() == too_large.id)
        .expect("the oversized row");
    assert!(
        large_row.headers["error"].contains("Kafka refused the message"),
        "{:?}",
        large_row.headers
    );

    assert!(
        forwarder.terminate().success(),
        "the forwarder kept running:\n{}",
        forwarder.log()
    );
    let checkpoint = s.setup.checkpoint().unwrap().position;
    assert!(
        checkpoint.compare(&written_up_to).unwrap().is_ge(),
        "the checkpoint moved past the parked rows"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_insert_logged_as_a_statement_behind_a_comment_stops_the_forwarder() {
    bad_row_stops_the_forwarder(
        |c| c,
        "",
        "SET SESSION binlog_format = 'STATEMENT'; \
         /* app=checkout */ INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, \
         event_type, event_version, payload) VALUES ('0b5e3c86-6b4c-4c56-9a55-3a1d2f0c9e01', \
         'order', '9', 'ORDER_ACCEPTED', 1, '{}'); SET SESSION binlog_format = 'ROW'",
        "was logged as a statement",
    )
    .await;
}
