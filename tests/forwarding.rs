//! End to end on real servers: MariaDB or MySQL → outbox-forwarder (its own
//! process) → tansu, read back with a real consumer. The main path runs on
//! both flavors (`<test>::mariadb`, `<test>::mysql`); what only MySQL has
//! (compressed transaction payloads, tagged GTIDs, file:pos with
//! `server_uuid` when GTIDs are off) is in `mysql_only`.

use std::collections::HashSet;
use std::time::Duration;

use harness::workload::*;
use harness::{on_both_flavors, unique, Broker, DbServer, Flavor, ForwarderSetup, TIMEOUT};
use mysql_async::prelude::Queryable;

#[path = "forwarding/compression.rs"]
mod compression;
#[path = "forwarding/mysql_only.rs"]
mod mysql_only;

on_both_flavors!(
    events_of_many_kinds_of_transaction_arrive_exactly_once_with_payload_and_headers,
    restart_delivers_events_written_while_stopped_and_resends_nothing,
    binlog_rotation_mid_stream_loses_nothing,
    checkpoint_never_moves_past_messages_the_broker_has_not_acked,
    on_a_quiet_outbox_the_checkpoint_still_moves_past_other_transactions,
);

async fn events_of_many_kinds_of_transaction_arrive_exactly_once_with_payload_and_headers(
    flavor: Flavor,
) {
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let other_schema = unique("archive");
    let topic_prefix = unique("t");
    broker.create_topic(&format!("{topic_prefix}.order"), 3);
    let mut conn = db.create_schema(&schema).await;
    let mut other = db.create_schema(&other_schema).await;

    let port = harness::free_port();
    let setup = ForwarderSetup::new(&harness::http::with_metrics(
        forwarder_config(
            db,
            broker,
            &schema,
            &format!("{topic_prefix}.{{aggregate_type}}"),
            server_id(),
        ),
        port,
    ));
    let mut forwarder = setup.spawn_streaming().await;

    let first_write_ms = server_ms(&mut conn).await;
    let mut written = Vec::new();
    for _ in 0..20 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 3, true).await);
    }
    for _ in 0..2 {
        written.extend(write_order(&mut conn, 4, false).await);
    }

    // Rolled back: must produce nothing.
    let rolled_back = {
        let mut tx = conn.start_transaction(Default::default()).await.unwrap();
        let events = vec![Written::new("rb", "{}"), Written::new("rb", "{}")];
        insert_events(&mut tx, &events, false).await;
        tx.rollback().await.unwrap();
        events
    };
    // A same-named table in a schema that is not configured: skipped.
    let elsewhere: Vec<Written> = (0..3).map(|_| Written::new("x", "{}")).collect();
    insert_events(&mut other, &elsewhere, true).await;
    // Business writes without events, an UPDATE of an outbox row, and an
    // insert deleted again in its own transaction (the "keep it empty" style).
    for _ in 0..3 {
        conn.query_drop(
            "INSERT INTO orders (customer, amount_cents, status) VALUES ('n', 1, 'NEW')",
        )
        .await
        .unwrap();
    }
    conn.query_drop(format!(
        "UPDATE outbox_event SET event_version = 2 WHERE event_id = '{}'",
        written[0].id
    ))
    .await
    .unwrap();
    {
        let mut tx = conn.start_transaction(Default::default()).await.unwrap();
        let event = Written::new("del", r#"{"kept":false}"#);
        insert_events(&mut tx, std::slice::from_ref(&event), false).await;
        tx.query_drop(format!(
            "DELETE FROM outbox_event WHERE event_id = '{}'",
            event.id
        ))
        .await
        .unwrap();
        tx.commit().await.unwrap();
        written.push(event);
    }
    // A 1 MiB payload and utf8mb4 text.
    let big = Written::new("big", &format!(r#"{{"blob":"{}"}}"#, "x".repeat(1 << 20)));
    insert_events(&mut conn, std::slice::from_ref(&big), false).await;
    written.push(big);
    let text = Written::new(
        "订单-🚀",
        r#"{"note":"naïve café ☕ 你好 🎉","quote":"it's"}"#,
    );
    insert_events(&mut conn, std::slice::from_ref(&text), false).await;
    written.push(text);

    let written_up_to = db.position().await;
    let expected = 20 + 5 * 3 + 2 * 4 + 1 + 1 + 1;
    assert_eq!(written.len(), expected);
    let records = broker.consume(&format!("{topic_prefix}.order"), expected, TIMEOUT, SETTLE);
    let keyed = by_key(&records);

    assert_eq!(
        records.len(),
        expected,
        "exactly once: no duplicates, nothing missing"
    );
    assert_eq!(keyed.keys().cloned().collect::<HashSet<_>>(), ids(&written));
    for skipped in rolled_back.iter().chain(&elsewhere) {
        assert!(
            !keyed.contains_key(&skipped.id),
            "{} must not be published",
            skipped.id
        );
    }
    for w in &written {
        let record = keyed[&w.id][0];
        assert_same_payload(flavor, &record.payload, &w.payload, &w.id);
        assert_eq!(record.headers["event_id"], w.id);
        assert_eq!(record.headers["event_type"], "ORDER_ACCEPTED");
        assert_eq!(record.headers["aggregate_type"], "order");
        assert_eq!(record.headers["aggregate_id"], w.aggregate_id);
        assert_eq!(record.headers["event_version"], "1");
        assert!(
            record.coordinates().position.starts_with("binlog."),
            "{:?}",
            record.headers
        );
    }
    // Each message carries its transaction's commit time: to the
    // millisecond on MySQL, the second on MariaDB.
    let last_write_ms = server_ms(&mut conn).await;
    let commits: Vec<u64> = records
        .iter()
        .map(|r| r.coordinates().commit_ms.expect("a commit time"))
        .collect();
    for &ms in &commits {
        assert!(
            (first_write_ms / 1000 * 1000..=last_write_ms).contains(&ms),
            "{ms} not in {first_write_ms}..={last_write_ms}"
        );
    }
    let whole_seconds = commits.iter().filter(|&&ms| ms % 1000 == 0).count();
    match flavor {
        Flavor::MariaDb => assert_eq!(whole_seconds, commits.len()),
        Flavor::MySql => assert!(whole_seconds < commits.len() / 2, "{commits:?}"),
    }
    // And the forwarder counts each from there to its ack (the delivery
    // report may come a moment after the message is readable).
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let (_, body) = harness::http::http_get(port, "/metrics");
        let counted = harness::http::sample(&body, "outbox_forwarder_commit_to_ack_seconds_count");
        if counted == expected as f64 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{counted} of {expected}:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let status = forwarder.terminate();
    assert!(
        status.success(),
        "clean shutdown exits 0: {status}\n{}",
        forwarder.log()
    );
    // Everything was acked, so the final checkpoint covers every write.
    assert_covers(&setup.checkpoint().unwrap().position, &written_up_to);
}

/// The server's clock, in milliseconds since the epoch: commit times are
/// its own.
async fn server_ms(conn: &mut mysql_async::Conn) -> u64 {
    conn.query_first("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS UNSIGNED)")
        .await
        .expect("the server answers")
        .expect("one row")
}

async fn restart_delivers_events_written_while_stopped_and_resends_nothing(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    let mut conn = s.conn(db).await;
    let Scenario { topic, setup, .. } = s;

    let mut forwarder = setup.spawn_streaming().await;
    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    assert_eq!(
        broker.consume(&topic, 10, TIMEOUT, Duration::ZERO).len(),
        10
    );
    assert!(forwarder.terminate().success());

    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let mut forwarder = setup.spawn(&[]);
    forwarder
        .wait_for_log("resuming from the stored checkpoint", TIMEOUT)
        .await;
    let records = broker.consume(&topic, 20, TIMEOUT, SETTLE);
    assert_eq!(
        records.len(),
        20,
        "the 10 events of the first run are not sent again"
    );
    assert_eq!(
        by_key(&records).keys().cloned().collect::<HashSet<_>>(),
        ids(&written)
    );
    assert!(forwarder.terminate().success());
}

async fn binlog_rotation_mid_stream_loses_nothing(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let mut conn = s.conn(db).await;
    let Scenario { topic, setup, .. } = s;
    let mut forwarder = setup.spawn_streaming().await;

    let first_file = db.position().await.file;
    let mut written = Vec::new();
    for round in 0..3 {
        conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
        for _ in 0..10 {
            written.extend(write_order(&mut conn, 1, round % 2 == 0).await);
        }
    }
    let written_up_to = db.position().await;
    let records = broker.consume(&topic, 30, TIMEOUT, SETTLE);
    assert_eq!(records.len(), 30);
    assert_eq!(
        by_key(&records).keys().cloned().collect::<HashSet<_>>(),
        ids(&written)
    );
    // One partition: the binlog order is the topic order.
    let order: Vec<&str> = records.iter().map(|r| r.key_str()).collect();
    let expected: Vec<&str> = written.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(order, expected);

    assert!(forwarder.terminate().success());
    let checkpoint = setup.checkpoint().unwrap().position;
    assert_ne!(
        checkpoint.file, first_file,
        "the checkpoint followed the rotation"
    );
    assert_covers(&checkpoint, &written_up_to);
}

async fn checkpoint_never_moves_past_messages_the_broker_has_not_acked(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    // A broker of its own: this test freezes it.
    let broker = Broker::start(false).await;
    let s = Scenario::new(db, &broker, 1, |c| c).await;
    let mut conn = s.conn(db).await;
    let Scenario { topic, setup, .. } = s;
    let mut forwarder = setup.spawn_streaming().await;

    let mut written = Vec::new();
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    assert_eq!(broker.consume(&topic, 5, TIMEOUT, Duration::ZERO).len(), 5);
    let before_unacked = db.position().await;

    // The broker stops answering; the forwarder reads and sends batch B,
    // and no ack comes back.
    broker.freeze(true);
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let read_b = transactions_read(&forwarder.log())
            .iter()
            .any(|(end, events)| *events > 0 && end.compare(&before_unacked).unwrap().is_gt());
        if read_b {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the forwarder never read batch B:\n{}",
            forwarder.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Many flush intervals (100 ms) pass with B read but unacked.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    forwarder.kill9();
    broker.freeze(false);

    let checkpoint = setup
        .checkpoint()
        .expect("a checkpoint was written")
        .position;
    assert!(
        checkpoint.compare(&before_unacked).unwrap().is_le(),
        "checkpoint {checkpoint} moved past {before_unacked} although batch B was never acked"
    );

    // After a restart every event is there; B at least once.
    let mut forwarder = setup.spawn(&[]);
    forwarder
        .wait_for_log("resuming from the stored checkpoint", TIMEOUT)
        .await;
    let records = broker.consume(&topic, 10, TIMEOUT, SETTLE);
    let keyed = by_key(&records);
    assert_eq!(keyed.keys().cloned().collect::<HashSet<_>>(), ids(&written));
    assert!(forwarder.terminate().success());
}

async fn on_a_quiet_outbox_the_checkpoint_still_moves_past_other_transactions(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let started_at = db.position().await;

    // Business writes only: no outbox row at all.
    for _ in 0..20 {
        conn.query_drop(
            "INSERT INTO orders (customer, amount_cents, status) VALUES ('q', 1, 'NEW')",
        )
        .await
        .unwrap();
    }
    let written_up_to = db.position().await;
    assert!(written_up_to.compare(&started_at).unwrap().is_gt());

    // While running, a periodic checkpoint write reaches past them.
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let log = forwarder.log();
        let reached = checkpoints_written(&log)
            .iter()
            .any(|p| p.compare(&written_up_to).unwrap().is_ge());
        if reached {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the checkpoint never passed {written_up_to}:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        broker
            .consume(&s.topic, 0, Duration::from_secs(5), SETTLE)
            .len(),
        0,
        "nothing was published"
    );
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_case_insensitive_server_a_table_configured_in_another_case_is_forwarded() {
    // lower_case_table_names=1: the server stores (and its binlog carries)
    // `outbox_event`, whatever case the configuration and the DDL use.
    let db = &DbServer::start(Flavor::MariaDb, &["--lower-case-table-names=1"]).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let s = Scenario::with_schema(db, broker, 1, &schema, |c| {
        c.tables(vec![format!("{}.Outbox_Event", schema.to_uppercase())])
    })
    .await;
    let check = s.setup.command(&["check"]);
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("PASS  outbox {}.outbox_event", s.schema)),
        "{stdout}"
    );

    let mut forwarder = s.setup.spawn_streaming().await;
    let mut conn = s.conn(db).await;
    let mut written = Vec::new();
    for _ in 0..3 {
        written.extend(write_order(&mut conn, 2, true).await);
    }
    let records = broker.consume(&s.topic, 6, TIMEOUT, SETTLE);
    let keyed = by_key(&records);
    assert_eq!(records.len(), 6);
    assert_eq!(keyed.keys().cloned().collect::<HashSet<_>>(), ids(&written));
    assert!(records
        .iter()
        .all(|r| r.headers["source_table"] == format!("{}.outbox_event", s.schema)));
    assert!(forwarder.terminate().success());
}

/// Acked messages of `topic` the forwarder's metrics on `port` count.
fn forwarded(port: u16, topic: &str) -> f64 {
    let (_, body) = harness::http::http_get(port, "/metrics");
    let series = format!("outbox_forwarder_events_forwarded_total{{topic=\"{topic}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0.0, |v| v.parse().unwrap())
}

async fn wait_forwarded(port: u16, topic: &str, messages: f64) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while forwarded(port, topic) < messages {
        assert!(std::time::Instant::now() < deadline, "{messages} not acked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caught_up_forwarder_sends_at_once_whatever_linger_ms() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let linger = Duration::from_secs(3);
    let mut took = Vec::new();
    for adaptive in [true, false] {
        let port = harness::free_port();
        let s = Scenario::new(db, broker, 1, |c| {
            let c = c
                .kafka("adaptive_linger", &adaptive.to_string())
                .property("linger.ms", &linger.as_millis().to_string());
            harness::http::with_metrics(c, port)
        })
        .await;
        let mut conn = s.conn(db).await;
        let mut forwarder = s.setup.spawn_streaming().await;
        // The first message also waits for the producer id: not timed.
        write_order(&mut conn, 1, false).await;
        wait_forwarded(port, &s.topic, 1.0).await;
        // A kick is best effort: the median of three lone events, one at a
        // time (one is enough to see the linger held).
        let mut times = Vec::new();
        for n in 0..if adaptive { 3 } else { 1 } {
            let committed = std::time::Instant::now();
            write_order(&mut conn, 1, false).await;
            wait_forwarded(port, &s.topic, f64::from(n + 2)).await;
            times.push(committed.elapsed());
        }
        times.sort();
        took.push(times[times.len() / 2]);
        assert!(forwarder.terminate().success());
    }
    // Without the adaptive linger the lone event waits linger.ms out: the
    // linger was in force...
    assert!(took[1] >= linger - Duration::from_millis(100), "{took:?}");
    // ...and with it, a caught-up forwarder did not wait for it.
    assert!(took[0] < linger / 3, "{took:?}");
}
