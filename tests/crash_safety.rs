//! Crashes, outages and bad input, with real processes and real servers.
//! Each fault test first shows the fault really happened (a repeat really
//! delivered, a connection really killed, a process really gone), then checks
//! that nothing was lost.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use harness::workload::*;
use harness::{replaced, unique, Broker, ForwarderToml, MariaDb, TIMEOUT};
use mysql_async::prelude::Queryable;
use outbox_core::BinlogPosition;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_between_ack_and_checkpoint_finds_that_window_in_kafka_and_publishes_nothing_twice() {
    crash_between_ack_and_checkpoint(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_between_ack_and_checkpoint_without_the_read_back_publishes_that_window_again() {
    crash_between_ack_and_checkpoint(false).await;
}

/// 10 events acked, none checkpointed, kill -9, restart: with
/// `skip_published` the restart finds the 10 in the topic and publishes
/// none again; without it, each is published twice.
async fn crash_between_ack_and_checkpoint(skip_published: bool) {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    // The checkpoint is written only once a minute: every ack of this test
    // falls in the window between ack and checkpoint.
    let port = harness::free_port();
    let s = Scenario::new(db, broker, 2, |c| {
        harness::http::with_metrics(
            c.flush_interval_ms(60_000)
                .checkpoint("skip_published", &skip_published.to_string()),
            port,
        )
    })
    .await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let start = start_position(&mut forwarder).await;

    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let first = broker.consume(&s.topic, 10, TIMEOUT, Duration::ZERO);
    assert_eq!(
        first.len(),
        10,
        "all 10 acked and readable before the crash"
    );
    forwarder.kill9();
    // The only checkpoint write came before the first message to the topic
    // (to record the topic): the 10 are all after it.
    let stored = s.setup.checkpoint().unwrap().position;
    for record in &first {
        let position: BinlogPosition = record.headers["binlog_position"].parse().unwrap();
        assert!(
            position.compare(&stored).unwrap().is_gt(),
            "{position} is under the checkpoint {stored}"
        );
    }

    let mut forwarder = s.setup.spawn(&[]);
    forwarder
        .wait_for_log("resuming from the stored checkpoint", TIMEOUT)
        .await;
    let copies = if skip_published { 1 } else { 2 };
    if skip_published {
        forwarder
            .wait_for_log(
                "10 events already in Kafka will not be republished",
                TIMEOUT,
            )
            .await;
    }
    // The events after the checkpoint were really replayed: one more,
    // written after the restart, arrives after them.
    let after = write_order(&mut conn, 1, false).await;
    written.extend(after.iter().cloned());
    let records = broker.consume_covering(&s.topic, &ids(&after), TIMEOUT, SETTLE);
    let keyed = by_key(&records);
    assert_eq!(
        keyed.keys().cloned().collect::<HashSet<_>>(),
        ids(&written),
        "nothing missing"
    );
    assert_eq!(
        records.len(),
        10 * copies + 1,
        "each event of the window {copies} time(s)"
    );
    let metrics = harness::http::wait_for_status(port, "/metrics", 200, TIMEOUT).await;
    assert_eq!(
        harness::http::sample(&metrics, "outbox_forwarder_replay_skipped_total"),
        if skip_published { 10.0 } else { 0.0 }
    );
    assert!(forwarder.terminate().success());
    let checkpoint = s.setup.checkpoint().unwrap();
    assert!(
        checkpoint.position.compare(&start).unwrap().is_gt(),
        "the replay moved the checkpoint past the window"
    );
    assert_eq!(
        checkpoint.tails.is_some(),
        skip_published,
        "tails are recorded only with skip_published"
    );

    // The reconciliation tool tells the same story.
    let verify = s.setup.command(&["verify"]);
    let report = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "nothing missing:\n{report}");
    let expected = if skip_published {
        "reconciliation: outbox rows 11, Kafka records 11, distinct event ids 11, missing 0, duplicated ids 0, unexpected 0"
    } else {
        "reconciliation: outbox rows 11, Kafka records 21, distinct event ids 11, missing 0, duplicated ids 10, unexpected 0"
    };
    assert!(report.contains(expected), "{report}");
}

/// The checkpoint stored at start (the forwarder stores its start position
/// at once). Read from the log, as the running forwarder locks the store.
async fn start_position(forwarder: &mut harness::ForwarderProcess) -> BinlogPosition {
    forwarder
        .wait_for_log("starting at checkpoint.start", TIMEOUT)
        .await;
    let log = forwarder.log();
    let line = log
        .lines()
        .find(|l| l.contains("starting at checkpoint.start"))
        .unwrap();
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("start="))
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_at_random_moments_under_load_loses_nothing_and_repeats_nothing() {
    const MIN_TRANSACTIONS: usize = 1500;
    const KILLS: usize = 5;
    const MAX_IN_FLIGHT: usize = 500;
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| {
        c.kafka("max_in_flight", &MAX_IN_FLIGHT.to_string())
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;

    // The writer commits until every kill is done (and at least
    // MIN_TRANSACTIONS); one transaction in ten is rolled back.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let mut conn = s.conn(db).await;
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut committed, mut rolled_back) = (Vec::new(), Vec::new());
            let mut i = 0;
            while i < MIN_TRANSACTIONS || !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if i % 10 == 9 {
                    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
                    let events = vec![Written::new("rb", "{}")];
                    insert_events(&mut tx, &events, false).await;
                    tx.rollback().await.unwrap();
                    rolled_back.extend(events);
                } else {
                    committed.extend(write_order(&mut conn, 1 + i % 3, i % 2 == 0).await);
                }
                i += 1;
            }
            (committed, rolled_back)
        })
    };

    let mut found_again = 0;
    for _ in 0..KILLS {
        let pause = 200 + (uuid::Uuid::new_v4().as_u128() % 800) as u64;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        assert!(
            !writer.is_finished(),
            "the writer is still committing at the kill"
        );
        forwarder.kill9();
        found_again += already_published(&forwarder.log());
        forwarder = s.setup.spawn(&[]);
        forwarder
            .wait_for_log("binlog stream started", TIMEOUT)
            .await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (committed, rolled_back) = writer.await.unwrap();
    assert!(
        committed.len() >= 2000,
        "thousands of events: {}",
        committed.len()
    );

    let records =
        broker.consume_covering(&s.topic, &ids(&committed), Duration::from_secs(180), SETTLE);
    found_again += already_published(&forwarder.log());
    let keyed = by_key(&records);
    let mut conn = s.conn(db).await;
    let outbox: u64 = conn
        .query_first("SELECT COUNT(*) FROM outbox_event")
        .await
        .unwrap()
        .unwrap();
    println!(
        "reconciliation: outbox rows {outbox}, Kafka records {}, distinct event ids {}; \
         {found_again} events after the crashes' checkpoints were found in Kafka and not \
         published again (after {KILLS} kill -9)",
        records.len(),
        keyed.len()
    );

    assert_eq!(outbox as usize, committed.len());
    assert_eq!(
        keyed.keys().cloned().collect::<HashSet<_>>(),
        ids(&committed),
        "every committed event, nothing else"
    );
    for event in &rolled_back {
        assert!(
            !keyed.contains_key(&event.id),
            "rolled back {} was published",
            event.id
        );
    }
    // The crashes did leave acked events after their checkpoints (those
    // that used to be published again), and none was repeated.
    assert!(
        found_again > 0,
        "no crash left an event after its checkpoint: the test proves nothing"
    );
    let repeated: Vec<&str> = keyed
        .iter()
        .filter(|(_, copies)| copies.len() > 1)
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(
        records.len(),
        keyed.len(),
        "{} events repeated, e.g. {:?}",
        repeated.len(),
        &repeated[..repeated.len().min(5)]
    );
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_for_a_while_holds_the_checkpoint_and_delivers_everything_after() {
    // A server of its own: on the shared one, other tests' transactions
    // (which touch no outbox table of this forwarder) may legitimately move
    // the checkpoint past `before_outage` before the first event written
    // during the outage holds it.
    let db = &MariaDb::start(&[]).await;
    let mut broker = Broker::start(true).await;
    let s = Scenario::new(db, &broker, 2, |c| c).await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;

    let mut written = Vec::new();
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    assert_eq!(
        broker.consume(&s.topic, 5, TIMEOUT, Duration::ZERO).len(),
        5
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before_outage = db.position().await;

    broker.stop();
    let mut during = Vec::new();
    for _ in 0..10 {
        during.extend(write_order(&mut conn, 1, false).await);
    }
    let log_at_outage = forwarder.log().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = forwarder.log();
    let outage_log = &log[log_at_outage..];
    assert!(
        outage_log.contains("kafka"),
        "the broker outage is reported:\n{outage_log}"
    );
    for checkpoint in checkpoints_written(outage_log) {
        assert!(
            checkpoint.compare(&before_outage).unwrap().is_le(),
            "checkpoint {checkpoint} written past {before_outage} while the broker was down"
        );
    }

    broker.restart().await;
    written.extend(during);
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    assert_eq!(
        by_key(&records).keys().cloned().collect::<HashSet<_>>(),
        ids(&written)
    );
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_connection_killed_and_server_restarted_resume_from_the_acked_watermark() {
    let mut db = MariaDb::start(&[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&db, broker, 2, |c| c).await;
    let mut forwarder = s.setup.spawn_streaming().await;

    let mut written = Vec::new();
    let mut c = s.conn(&db).await;
    for _ in 0..5 {
        written.extend(write_order(&mut c, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);

    assert_eq!(
        db.kill_dump_threads().await,
        1,
        "the forwarder's dump thread was killed"
    );
    for _ in 0..5 {
        written.extend(write_order(&mut c, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(
        forwarder.log().contains("session failed"),
        "the lost connection was noticed"
    );

    drop(c);
    db.restart().await;
    let mut c = s.conn(&db).await;
    for _ in 0..5 {
        written.extend(write_order(&mut c, 1, false).await);
    }
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    assert_eq!(
        by_key(&records).keys().cloned().collect::<HashSet<_>>(),
        ids(&written)
    );
    let sessions = forwarder.log().matches("binlog stream started").count();
    assert!(
        sessions >= 3,
        "reconnected after the kill and after the restart ({sessions} sessions)"
    );
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purged_checkpoint_binlog_fails_start_clearly_and_leaves_the_checkpoint() {
    let db = MariaDb::start(&[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&db, broker, 2, |c| c).await;
    let mut c = s.conn(&db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = write_order(&mut c, 1, false).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());
    let checkpoint = s.setup.checkpoint().unwrap();

    // An event after the checkpoint, in a file about to be purged: it is
    // gone from the server's binlog before the forwarder read it. (Files
    // holding nothing after the checkpoint may go: the GTID resume starts
    // in the files that are left.)
    write_order(&mut c, 1, false).await;
    c.query_drop("FLUSH BINARY LOGS").await.unwrap();
    c.query_drop("FLUSH BINARY LOGS").await.unwrap();
    write_order(&mut c, 1, false).await;
    let newest = db.position().await.file;
    // MariaDB keeps a file until InnoDB no longer needs it for recovery, so
    // the purge may have to be repeated.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        c.query_drop(format!("PURGE BINARY LOGS TO '{newest}'"))
            .await
            .unwrap();
        let (oldest, _size): (String, u64) =
            c.query_first("SHOW BINARY LOGS").await.unwrap().unwrap();
        if oldest == newest {
            break;
        }
        assert!(Instant::now() < deadline, "{oldest} was never purged");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_ne!(
        checkpoint.position.file, newest,
        "the checkpoint's file is really gone"
    );

    let mut forwarder = s.setup.spawn(&[]);
    let status = forwarder.wait_exit(TIMEOUT).await;
    assert!(!status.success());
    let log = forwarder.log();
    assert!(
        log.contains(&checkpoint.position.to_string()),
        "names the position:\n{log}"
    );
    assert!(
        log.contains(&format!("oldest binlog the server still has: {newest}")),
        "{log}"
    );
    assert!(log.contains("checkpoint set"), "says what to do:\n{log}");
    assert_eq!(
        s.setup.checkpoint().unwrap(),
        checkpoint,
        "checkpoint untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_from_another_server_is_refused_unless_overridden() {
    let db = MariaDb::shared().await;
    // Not of the shared server's topology: its own server id, so its GTIDs
    // are another history.
    let other = MariaDb::start(&["--server-id=5"]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    assert!(forwarder.terminate().success());
    let checkpoint = s.setup.checkpoint().unwrap();

    // The other server has the same schema: only its identity differs.
    other.create_schema(&s.schema).await;
    let config = std::fs::read_to_string(&s.setup.config_path).unwrap();
    s.setup.write(&replaced(
        &config,
        &db.forwarder_url(),
        &other.forwarder_url(),
    ));
    let mut refused = s.setup.spawn(&[]);
    assert!(!refused.wait_exit(TIMEOUT).await.success());
    let log = refused.log();
    assert!(log.contains("written against"), "{log}");
    assert!(
        log.contains("--accept-new-source"),
        "says how to override:\n{log}"
    );
    assert_eq!(s.setup.checkpoint().unwrap(), checkpoint);

    let mut overridden = s.setup.spawn(&["--accept-new-source"]);
    overridden
        .wait_for_log("resuming a checkpoint of another server identity", TIMEOUT)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_forwarder_on_the_same_checkpoint_path_fails_fast() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    let mut first = s.setup.spawn_streaming().await;
    let started = Instant::now();
    let mut second = s.setup.spawn(&[]);
    assert!(!second.wait_exit(Duration::from_secs(10)).await.success());
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        second.log().contains("in use by another process"),
        "{}",
        second.log()
    );
    assert!(first.terminate().success(), "the first one is unaffected");
}

/// Runs `setup_sql`, writes good events, one bad row via `bad_sql`, then a
/// good one; the forwarder must stop with `expected` in its message, after
/// publishing the first batch and before the checkpoint passes the bad row.
async fn bad_row_stops_the_forwarder(
    edit: impl Fn(ForwarderToml) -> ForwarderToml,
    setup_sql: &str,
    bad_sql: &str,
    expected: &str,
) {
    // A server of its own, so no other transaction lands between the good
    // rows and the bad one and the checkpoint's bound is exact.
    let db = &MariaDb::start(&[]).await;
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
    let db = MariaDb::shared().await;
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
    let db = MariaDb::start(&["--log-bin-compress-min-len=10"]).await;
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
    let db = MariaDb::shared().await;
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
async fn a_huge_row_over_a_slow_link_arrives_without_the_session_restarting() {
    // A server of its own: every binlog byte crosses the slow link.
    let db = &MariaDb::start(&[]).await;
    let broker = Broker::shared().await;
    // 200 KB/s: a 1.5 MB row takes about 8 s to arrive, twice the idle
    // timeout (3 heartbeats of 1 s + 1 s).
    let link = harness::slow_link::SlowLink::start(db.port, 200_000);
    // Over TCP only: the driver would otherwise move to the server's Unix
    // socket, around the link.
    let s = Scenario::new(db, broker, 1, |c| {
        c.urls(vec![
            replaced(
                &db.forwarder_url(),
                &format!("127.0.0.1:{}", db.port),
                &format!("127.0.0.1:{}", link.port),
            ) + "?prefer_socket=false",
        ])
    })
    .await;
    let idle_timeout = Duration::from_secs(4);
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut c = s.conn(db).await;
    let huge = Written::new("1", &format!(r#"{{"blob":"{}"}}"#, "x".repeat(1_500_000)));
    let started = Instant::now();
    insert_events(&mut c, std::slice::from_ref(&huge), false).await;
    let records = broker.consume(&s.topic, 1, TIMEOUT, SETTLE);
    let took = started.elapsed();

    assert!(
        took > idle_timeout,
        "the row really took longer than the idle timeout to arrive: {took:?}"
    );
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key_str(), huge.id);
    assert_eq!(records[0].payload.len(), huge.payload.len());
    let log = forwarder.log();
    assert!(
        !log.contains("looks dead"),
        "the session was restarted while the row arrived:\n{log}"
    );
    assert_eq!(log.matches("binlog stream started").count(), 1, "{log}");
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_moves_the_checkpoint_into_the_new_binlog_so_purging_the_old_one_is_safe()
{
    // A server of its own, restarted by the test.
    let mut db = MariaDb::start(&[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&db, broker, 1, |c| c).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut c = s.conn(&db).await;
    let before = write_order(&mut c, 1, false).await;
    broker.consume_covering(&s.topic, &ids(&before), TIMEOUT, Duration::ZERO);
    drop(c);
    let old_file = db.position().await.file;

    // A restart closes the old file with a STOP event, not a ROTATE; the
    // server writes nothing to the new one while idle.
    db.restart().await;
    let new_file = db.position().await.file;
    assert_ne!(new_file, old_file, "the restart opened a new binlog file");
    let deadline = Instant::now() + TIMEOUT;
    while !checkpoints_written(&forwarder.log())
        .iter()
        .any(|p| p.file == new_file)
    {
        assert!(
            Instant::now() < deadline,
            "no checkpoint in {new_file} within {TIMEOUT:?} after the restart:\n{}",
            forwarder.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(forwarder.terminate().success());
    let checkpoint = s.setup.checkpoint().unwrap().position;
    assert_eq!(checkpoint, BinlogPosition::new(new_file.clone(), 4));

    // Expiry purges the old file; the next start resumes in the new one.
    let mut root = db.root().await;
    root.query_drop(format!("PURGE BINARY LOGS TO '{new_file}'"))
        .await
        .unwrap();
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut c = s.conn(&db).await;
    let after = write_order(&mut c, 1, false).await;
    let records = broker.consume(&s.topic, 2, TIMEOUT, SETTLE);
    let keyed = by_key(&records);
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(keyed.contains_key(&before[0].id) && keyed.contains_key(&after[0].id));
    assert!(forwarder.terminate().success());
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

/// The issue's proof of "no repeats": 10 kill -9 at random moments of a
/// 200 000-event catch-up (default in-flight window), then 10 under a
/// steady load; `verify` finds every event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill9_during_a_catch_up_and_a_steady_load_lose_nothing_and_repeat_nothing() {
    const BACKLOG: usize = 200_000;
    const KILLS_EACH: usize = 10;
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 3, |c| c).await;
    let mut conn = s.conn(db).await;
    // The checkpoint is stored before the backlog is written.
    let mut forwarder = s.setup.spawn_streaming().await;
    assert!(forwarder.terminate().success());
    let mut written = Vec::with_capacity(BACKLOG);
    for _ in 0..BACKLOG / 500 {
        let events: Vec<Written> = (0..500)
            .map(|i| Written::new(&i.to_string(), "{}"))
            .collect();
        let mut tx = conn.start_transaction(Default::default()).await.unwrap();
        insert_events(&mut tx, &events, true).await;
        tx.commit().await.unwrap();
        written.extend(events);
    }
    let backlog_end = db.position().await;

    // Each kill comes at a random moment of a process's streaming (kills
    // during start-up, before anything is published, would prove nothing).
    // The catch-up runs at tens of thousands of events a second even in a
    // debug build: its kills come within a quarter of a second.
    let random_pause =
        |most: u128| Duration::from_millis(20 + (uuid::Uuid::new_v4().as_u128() % most) as u64);
    let mut found_again = 0;
    let mut kills_in_catch_up = 0;
    forwarder = s.setup.spawn(&[]);
    while kills_in_catch_up < KILLS_EACH {
        forwarder
            .wait_for_log("binlog stream started", TIMEOUT)
            .await;
        tokio::time::sleep(random_pause(230)).await;
        forwarder.kill9();
        found_again += already_published(&forwarder.log());
        let checkpoint = s.setup.checkpoint().expect("a checkpoint").position;
        assert!(
            checkpoint.compare(&backlog_end).unwrap().is_lt(),
            "kill {} came after the catch-up ended (checkpoint {checkpoint}, backlog to \
             {backlog_end}): raise BACKLOG",
            kills_in_catch_up + 1
        );
        kills_in_catch_up += 1;
        forwarder = s.setup.spawn(&[]);
    }

    // A steady load: one small transaction every 2 ms, 10 more kills.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let mut conn = s.conn(db).await;
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut committed = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                committed.extend(write_order(&mut conn, 2, true).await);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            committed
        })
    };
    for _ in 0..KILLS_EACH {
        forwarder
            .wait_for_log("binlog stream started", TIMEOUT)
            .await;
        tokio::time::sleep(random_pause(1000)).await;
        forwarder.kill9();
        found_again += already_published(&forwarder.log());
        forwarder = s.setup.spawn(&[]);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let steady = writer.await.unwrap();
    assert!(
        steady.len() > 1000,
        "a steady load: {} events",
        steady.len()
    );
    written.extend(steady);

    broker.consume_covering(
        &s.topic,
        &ids(&written),
        Duration::from_secs(300),
        Duration::ZERO,
    );
    found_again += already_published(&forwarder.log());
    assert!(forwarder.terminate().success());
    let verify = s.setup.command(&["verify"]);
    let report = String::from_utf8_lossy(&verify.stdout);
    println!("{report}; {found_again} events found in Kafka after the crashes' checkpoints");
    assert!(verify.status.success(), "nothing missing:\n{report}");
    let n = written.len();
    assert!(
        report.contains(&format!(
            "reconciliation: outbox rows {n}, Kafka records {n}, distinct event ids {n}, missing 0, duplicated ids 0, unexpected 0"
        )),
        "{report}"
    );
    assert!(
        found_again > 0,
        "no crash left an event after its checkpoint: the test proves nothing"
    );
}

/// What the restart of [`untrusted_tails_after_a_crash_publish_the_window_again`] meets.
enum Tamper {
    /// Another producer writes a message without coordinates to the topic.
    ForeignMessage,
    /// Another forwarder writes a row of another server's binlog, whose
    /// coordinates could equal this server's.
    OtherServer,
    /// The topic's partition count differs from what the checkpoint
    /// recorded. (tansu 0.6 cannot add partitions, so the recorded count is
    /// changed instead: what the forwarder sees is the same.)
    PartitionCount,
    /// A partition ends before the offset the checkpoint recorded, as when
    /// a topic is deleted and created again (the recorded offset is moved
    /// past the end instead).
    ShorterPartition,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_shorter_than_recorded_falls_back_to_publishing_the_window_again() {
    untrusted_tails_after_a_crash_publish_the_window_again(
        Tamper::ShorterPartition,
        "ends before offset 1000, which the checkpoint recorded",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_message_in_the_topic_falls_back_to_publishing_the_window_again() {
    untrusted_tails_after_a_crash_publish_the_window_again(
        Tamper::ForeignMessage,
        "has no binlog_position/binlog_row headers: another producer writes to the topic",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_servers_row_in_the_topic_falls_back_to_publishing_the_window_again() {
    untrusted_tails_after_a_crash_publish_the_window_again(
        Tamper::OtherServer,
        "carries a row of binlog_server 7@elsewhere:3306 instead of",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_partition_count_falls_back_to_publishing_the_window_again() {
    untrusted_tails_after_a_crash_publish_the_window_again(
        Tamper::PartitionCount,
        "has 2 partitions, the checkpoint recorded 3",
    )
    .await;
}

/// 10 events acked and not checkpointed, kill -9, `tamper`, restart: the
/// tails cannot be trusted, so the restart says why (`warning`), counts a
/// fallback, and publishes the 10 again; nothing is lost.
async fn untrusted_tails_after_a_crash_publish_the_window_again(tamper: Tamper, warning: &str) {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let port = harness::free_port();
    let s = Scenario::new(db, broker, 2, |c| {
        harness::http::with_metrics(c.flush_interval_ms(60_000), port)
    })
    .await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    assert_eq!(
        broker.consume(&s.topic, 10, TIMEOUT, Duration::ZERO).len(),
        10
    );
    forwarder.kill9();
    let mut extra = 0;
    match tamper {
        Tamper::ForeignMessage | Tamper::OtherServer => {
            let headers = if matches!(tamper, Tamper::OtherServer) {
                [
                    ("binlog_position", "binlog.000001:4000"),
                    ("binlog_row", "0"),
                    ("binlog_server", "7@elsewhere:3306"),
                ]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
            } else {
                Vec::new()
            };
            let foreign = harness::inbox::OutgoingRecord {
                key: "not-an-outbox-event".into(),
                headers,
                payload: "{}".into(),
            };
            for partition in 0..2 {
                harness::inbox::produce(
                    broker,
                    &s.topic,
                    partition,
                    std::slice::from_ref(&foreign),
                )
                .await;
                extra += 1;
            }
        }
        Tamper::PartitionCount | Tamper::ShorterPartition => {
            let store =
                outbox_checkpoint::CheckpointStore::open(&s.setup.checkpoint_path()).unwrap();
            let mut checkpoint = store.load().unwrap().unwrap();
            let tails = checkpoint.tails.as_mut().expect("tails recorded");
            let read_from = tails.get_mut(&s.topic).expect("the topic's tail");
            if matches!(tamper, Tamper::PartitionCount) {
                read_from.push(0);
            } else {
                read_from[0] = 1000;
            }
            store.save(&checkpoint).unwrap();
        }
    }

    let mut forwarder = s.setup.spawn(&[]);
    forwarder.wait_for_log(warning, TIMEOUT).await;
    let log = forwarder.log();
    assert!(
        log.contains(
            "every event after it is published again, as the topic tails cannot be trusted"
        ),
        "{log}"
    );
    let metrics = harness::http::wait_for_status(port, "/metrics", 200, TIMEOUT).await;
    assert_eq!(
        harness::http::sample(&metrics, "outbox_forwarder_replay_fallbacks_total"),
        1.0
    );
    let after = write_order(&mut conn, 1, false).await;
    written.extend(after.iter().cloned());
    let records = broker.consume_covering(&s.topic, &ids(&after), TIMEOUT, SETTLE);
    let keyed = by_key(&records);
    let ours: HashSet<String> = keyed
        .keys()
        .filter(|k| *k != "not-an-outbox-event")
        .cloned()
        .collect();
    assert_eq!(ours, ids(&written), "nothing missing");
    assert_eq!(
        records.len(),
        10 * 2 + 1 + extra,
        "the window was published again"
    );
    let metrics = harness::http::wait_for_status(port, "/metrics", 200, TIMEOUT).await;
    assert_eq!(
        harness::http::sample(&metrics, "outbox_forwarder_replay_skipped_total"),
        0.0
    );
    assert!(forwarder.terminate().success());
}
