//! kill -9 between the ack and the checkpoint, at random moments under
//! load and during a catch-up: nothing lost, nothing repeated.

use super::*;
use outbox_sink::CoordinateHeaders;

// The read-back and random kills under load on both flavors: what a crash
// leaves behind is read back from the binlog each server writes its own way
// (MySQL's GTID events, compressed or not, its server_uuid).
harness::on_both_flavors!(
    kill9_between_ack_and_checkpoint_finds_that_window_in_kafka_and_publishes_nothing_twice,
    kill9_at_random_moments_under_load_loses_nothing_and_repeats_nothing,
);

async fn kill9_between_ack_and_checkpoint_finds_that_window_in_kafka_and_publishes_nothing_twice(
    flavor: Flavor,
) {
    crash_between_ack_and_checkpoint(flavor, true, CoordinateHeaders::One).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_between_ack_and_checkpoint_without_the_read_back_publishes_that_window_again() {
    crash_between_ack_and_checkpoint(Flavor::MariaDb, false, CoordinateHeaders::One).await;
}

/// The window was published with the six separate coordinate headers (as
/// before the one `binlog` header); the restart writes the one header and
/// reads the window back in the old form: nothing is published twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_before_a_change_to_one_coordinate_header_publishes_nothing_twice() {
    crash_between_ack_and_checkpoint(Flavor::MariaDb, true, CoordinateHeaders::Separate).await;
}

/// 10 events acked, none checkpointed (their coordinates in the
/// `before_crash` form), kill -9, restart (with the one `binlog` header):
/// with `skip_published` the restart finds the 10 in the topic and
/// publishes none again; without it, each is published twice.
pub(super) async fn crash_between_ack_and_checkpoint(
    flavor: Flavor,
    skip_published: bool,
    before_crash: CoordinateHeaders,
) {
    let db = DbServer::shared(flavor).await;
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
    let form = match before_crash {
        CoordinateHeaders::One => "one",
        CoordinateHeaders::Separate => "separate",
    };
    let mut forwarder = s.setup.spawn_with_env(
        &[],
        &[("OUTBOX_FORWARDER__KAFKA__COORDINATE_HEADERS", form)],
    );
    forwarder
        .wait_for_log("binlog stream started", TIMEOUT)
        .await;
    let start = start_position(&mut forwarder).await;

    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let first = broker.consume(&s.topic, 10, TIMEOUT, Duration::ZERO);
    for record in &first {
        assert_eq!(
            (
                record.headers.contains_key("binlog"),
                record.headers.contains_key("binlog_position")
            ),
            (form == "one", form == "separate"),
            "written with {form} coordinate headers: {:?}",
            record.headers
        );
    }
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
        let position = record.binlog_position();
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
    // The restart writes the one header.
    for id in ids(&after) {
        assert!(keyed[&id][0].headers.contains_key("binlog"), "{id}");
    }
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
pub(super) async fn start_position(forwarder: &mut harness::ForwarderProcess) -> BinlogPosition {
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

async fn kill9_at_random_moments_under_load_loses_nothing_and_repeats_nothing(flavor: Flavor) {
    const MIN_TRANSACTIONS: usize = 1500;
    const KILLS: usize = 5;
    const MAX_IN_FLIGHT: usize = 500;
    let db = DbServer::shared(flavor).await;
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

    // At least KILLS; more while none has yet been seen to leave acked
    // events after its checkpoint (a kill right after a flush leaves none:
    // the fault must happen before the test can prove its recovery).
    const MAX_KILLS: usize = 4 * KILLS;
    let mut found_again = 0;
    let mut kills = 0;
    while kills < KILLS || (found_again == 0 && kills < MAX_KILLS) {
        kills += 1;
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
         published again (after {kills} kill -9)",
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

/// The proof of "no repeats": 10 kill -9 at random moments of a
/// 200 000-event catch-up (default in-flight window), then 10 under a
/// steady load; `verify` finds every event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill9_during_a_catch_up_and_a_steady_load_lose_nothing_and_repeat_nothing() {
    const BACKLOG: usize = 200_000;
    const KILLS_EACH: usize = 10;
    let db = DbServer::shared(Flavor::MariaDb).await;
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

/// A clean stop records that nothing after its checkpoint is in the
/// topics: the next start reads nothing back. That start takes the promise
/// back before it publishes: a kill -9 after it is followed by a read-back
/// that finds what the killed run published, and nothing is repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_spares_the_next_start_its_read_back_and_a_kill9_after_it_does_not() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    // One checkpoint write a minute: the kill below comes before one.
    let s = Scenario::new(db, broker, 2, |c| c.flush_interval_ms(60_000)).await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());
    assert!(
        forwarder.log().contains("clean stop"),
        "{}",
        forwarder.log()
    );
    assert!(s.setup.checkpoint().unwrap().clean);

    let mut forwarder = s.setup.spawn(&[]);
    forwarder.wait_for_log("after a clean stop", TIMEOUT).await;
    let mut after = Vec::new();
    for _ in 0..10 {
        after.extend(write_order(&mut conn, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&after), TIMEOUT, Duration::ZERO);
    let log = forwarder.log();
    assert!(
        !log.contains("will not be republished"),
        "no read-back:\n{log}"
    );
    forwarder.kill9();
    let stored = s.setup.checkpoint().unwrap();
    assert!(
        !stored.clean,
        "the promise was taken back before publishing"
    );

    // The fault: the killed run's 10 events are after the checkpoint.
    let mut forwarder = s.setup.spawn_streaming().await;
    forwarder
        .wait_for_log("will not be republished", TIMEOUT)
        .await;
    assert_eq!(
        already_published(&forwarder.log()),
        10,
        "{}",
        forwarder.log()
    );
    let all: HashSet<String> = ids(&written).into_iter().chain(ids(&after)).collect();
    let records = broker.consume_covering(&s.topic, &all, TIMEOUT, SETTLE);
    assert_eq!(assert_each_once(&records, &all), 20);
    assert!(forwarder.terminate().success());
}
