//! The outbox table as the second source of truth, end to end on MariaDB
//! and the real broker: a purged gap repaired from the table, a backfill
//! beside a running forwarder (and its kill -9), the backfill's rate
//! limit, and retention that deletes only what Kafka holds.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::forwarder::{output_text, reported};
use harness::http::{http_get, sample, with_metrics};
use harness::workload::*;
use harness::{free_port, unique, Broker, DbServer, Flavor, TIMEOUT};
use mysql_async::prelude::Queryable;
use mysql_async::Conn;

/// The ids of `schema`'s outbox rows still in the table among `ids`.
async fn still_in_table(conn: &mut Conn, ids: &HashSet<String>) -> usize {
    let present: Vec<String> = conn
        .query("SELECT event_id FROM outbox_event")
        .await
        .unwrap();
    present.iter().filter(|id| ids.contains(*id)).count()
}

// The repair on both flavors: MySQL names the purged gap by GTID set
// (`gtid_purged`), MariaDB by its domain's oldest binlog.
harness::on_both_flavors!(a_purged_gap_is_repaired_from_the_table_with_nothing_repeated);

async fn a_purged_gap_is_repaired_from_the_table_with_nothing_repeated(flavor: Flavor) {
    let db = DbServer::start(flavor, &[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&db, broker, 3, |c| c).await;
    let mut c = s.conn(&db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut c, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());
    let before = s.setup.checkpoint().unwrap();
    assert!(
        before.committed_at.is_some(),
        "the checkpoint records its commit time"
    );

    // 5 000 orders while the forwarder is down, then their binlog is purged.
    let mut gap = Vec::new();
    for _ in 0..5_000 {
        gap.extend(write_order(&mut c, 1, false).await);
    }
    let oldest = purge_all_but_the_newest_binlog(&db, &mut c).await;
    // One more order, in the binlog that is left: both the repair's window
    // and the stream hold it.
    let after_purge = write_order(&mut c, 1, false).await;

    let mut refused = s.setup.spawn(&[]);
    assert!(!refused.wait_exit(TIMEOUT).await.success());
    let log = refused.log();
    assert!(
        log.contains("repair-gap"),
        "the refusal names the repair:\n{log}"
    );

    let repair = s.setup.command(&["repair-gap"]);
    let out = output_text(&repair);
    assert!(repair.status.success(), "{out}");
    assert_eq!(reported(&out, "missing from Kafka"), 5_001, "{out}");
    assert_eq!(reported(&out, "published"), 5_001, "{out}");
    assert!(
        out.contains(&format!("checkpoint moved to {oldest}:4")),
        "{out}"
    );
    assert!(!out.contains("unproven"), "{out}");

    // The stream resumes in the oldest binlog: the row the repair already
    // published is skipped by its event id, the next 1 000 are published.
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut next = Vec::new();
    for _ in 0..100 {
        next.extend(write_order(&mut c, 10, true).await);
    }
    let all: HashSet<String> = ids(&written)
        .into_iter()
        .chain(ids(&gap))
        .chain(ids(&after_purge))
        .chain(ids(&next))
        .collect();
    let records = broker.consume_covering(&s.topic, &all, TIMEOUT, SETTLE);
    assert_eq!(assert_each_once(&records, &all), 10 + 5_000 + 1 + 1_000);
    assert!(forwarder.terminate().success());
    let log = forwarder.log();
    // The row the repair published and the stream met: skipped by its id.
    assert!(log.contains("backfilled=5001"), "{log}");
    let skipped: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("already in Kafka: not published again"))
        .collect();
    assert_eq!(skipped.len(), 1, "{log}");
    assert!(skipped[0].contains("skipped=1"), "{log}");

    let verify = s.setup.command(&["verify"]);
    let out = output_text(&verify);
    assert!(verify.status.success(), "{out}");
    assert!(out.contains("missing 0, duplicated ids 0"), "{out}");
}

harness::on_both_flavors!(a_gap_the_table_cannot_prove_leaves_the_checkpoint_unless_accepted);

async fn a_gap_the_table_cannot_prove_leaves_the_checkpoint_unless_accepted(flavor: Flavor) {
    let db = DbServer::start(flavor, &[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&db, broker, 1, |c| c).await;
    let mut c = s.conn(&db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = write_order(&mut c, 1, false).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());
    let before = s.setup.checkpoint().unwrap();

    // The application deletes its outbox rows in the inserting transaction:
    // the binlog had them, the table never shows them.
    for _ in 0..20 {
        let mut tx = c.start_transaction(Default::default()).await.unwrap();
        let events = [Written::new("1", "{}")];
        insert_events(&mut tx, &events, false).await;
        tx.query_drop(format!(
            "DELETE FROM outbox_event WHERE event_id = '{}'",
            events[0].id
        ))
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    purge_all_but_the_newest_binlog(&db, &mut c).await;

    let repair = s.setup.command(&["repair-gap"]);
    let out = output_text(&repair);
    assert!(!repair.status.success(), "{out}");
    assert!(out.contains("unproven: no outbox row was created"), "{out}");
    assert!(out.contains("--accept-unproven"), "{out}");
    assert_eq!(
        s.setup.checkpoint().unwrap(),
        before,
        "the checkpoint stays"
    );

    let accepted = s.setup.command(&["repair-gap", "--accept-unproven"]);
    let out = output_text(&accepted);
    assert!(accepted.status.success(), "{out}");
    assert_ne!(s.setup.checkpoint().unwrap().position, before.position);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_beside_a_forwarder_killed_midway_publishes_every_row_once() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    // A checkpoint every 10 s: the one before the kill is older than the
    // backfill's first messages, so the restart reads them back.
    let s = Scenario::new(db, broker, 2, |c| c.flush_interval_ms(10_000)).await;
    let mut c = s.conn(db).await;
    // Rows the binlog never carried, created long ago.
    let lost = insert_unlogged(&mut c, 3_000, "2020-01-01 00:00:00").await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = steady_load(s.conn(db).await, stop.clone());

    let config = s.setup.config_path.clone();
    let backfill = tokio::task::spawn_blocking(move || {
        std::process::Command::new(harness::forwarder::forwarder_binary())
            .args([
                "backfill",
                "--until",
                "2020-01-02 00:00:00",
                "--max-rows-per-second",
                "600",
            ])
            .arg("--config")
            .arg(config)
            .output()
            .unwrap()
    });
    // Once the backfill's first rows (it reads in event id order) are in
    // Kafka, the forwarder dies and comes back.
    let mut first: Vec<String> = ids(&lost).into_iter().collect();
    first.sort();
    first.truncate(100);
    broker.consume_covering(
        &s.topic,
        &first.into_iter().collect(),
        TIMEOUT,
        Duration::ZERO,
    );
    forwarder.kill9();
    let mut forwarder = s.setup.spawn_streaming().await;
    let done = backfill.await.unwrap();
    let out = output_text(&done);
    assert!(done.status.success(), "{out}");
    assert_eq!(reported(&out, "published"), 3_000, "{out}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let steady = load.await.unwrap();

    let all: HashSet<String> = ids(&lost).into_iter().chain(ids(&steady)).collect();
    let records = broker.consume_covering(&s.topic, &all, TIMEOUT, SETTLE);
    let log = forwarder.log();
    // The restarted forwarder trusted the tails it read back, and every
    // row is in Kafka once.
    assert!(
        !log.contains("every event after it is published again"),
        "{log}"
    );
    assert_eq!(assert_each_once(&records, &all), all.len());
    // The fault: those tails held backfilled messages after the checkpoint.
    let backfilled = resumed_field(&log, "backfilled=");
    assert!(
        backfilled > 0,
        "no backfilled message after the checkpoint:\n{log}"
    );
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_holds_its_rate_limit() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    let mut c = s.conn(db).await;
    let rows = insert_unlogged(&mut c, 20_000, "2020-01-01 00:00:00").await;
    let started = Instant::now();
    let backfill = s
        .setup
        .command(&["backfill", "--all", "--max-rows-per-second", "1000"]);
    let took = started.elapsed();
    let out = output_text(&backfill);
    assert!(backfill.status.success(), "{out}");
    assert_eq!(reported(&out, "rows read"), 20_000, "{out}");
    let rate = 20_000.0 / took.as_secs_f64();
    assert!(
        (900.0..=1_100.0).contains(&rate),
        "{rate:.0} rows/s:\n{out}"
    );
    let records = broker.consume_covering(&s.topic, &ids(&rows), TIMEOUT, Duration::ZERO);
    assert_each_once(&records, &ids(&rows));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_only_rows_under_the_checkpoint() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let mut broker = Broker::start(true).await;
    let port = free_port();
    let s = Scenario::new(db, &broker, 1, |c| {
        with_metrics(c, port).section(
            "[retention]\nolder_than_seconds = 1\ninterval_seconds = 1\nbatch = 50\npause_ms = 10\n\
             clock_margin_seconds = 0",
        )
    })
    .await;
    let check = s.setup.command(&["check"]);
    let out = output_text(&check);
    assert!(!check.status.success(), "{out}");
    assert!(
        out.contains("GRANT DELETE ON"),
        "check names the grant [retention] needs:\n{out}"
    );
    s.grant_delete(db).await;
    let mut c = s.conn(db).await;
    // Rows from before the first start (at `latest`): never published.
    let before_start = write_order(&mut c, 5, true).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let published = write_order(&mut c, 100, true).await;
    broker.consume_covering(&s.topic, &ids(&published), TIMEOUT, Duration::ZERO);
    wait_until_deleted(&mut c, &ids(&published)).await;

    // A transaction that stays open with a row (older than the cut-off by
    // the time it commits), then the broker stops.
    let mut late = s.conn(db).await;
    let mut tx = late.start_transaction(Default::default()).await.unwrap();
    let slow = [Written::new("slow", "{}")];
    tx.query_drop(format!(
        "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('{}', 'order', 'slow', 'X', '{{}}')",
        slow[0].id
    ))
    .await
    .unwrap();
    broker.stop();
    let unacked = write_order(&mut c, 100, true).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let waiting: HashSet<String> = ids(&unacked).into_iter().chain(ids(&slow)).collect();
    assert_eq!(
        still_in_table(&mut c, &waiting).await,
        101,
        "nothing unacked is deleted"
    );
    let (_, metrics) = http_get(port, "/metrics");
    assert!(
        sample(&metrics, "outbox_forwarder_retention_kept_rows") >= 1.0,
        "{metrics}"
    );

    // With the broker back, the rows reach Kafka and then go.
    broker.restart().await;
    let records = broker.consume_covering(&s.topic, &waiting, TIMEOUT, Duration::ZERO);
    assert_each_once(&records, &waiting);
    wait_until_deleted(&mut c, &waiting).await;
    // Counted when the pass that deleted them ends.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (_, metrics) = http_get(port, "/metrics");
        let deleted = sample(&metrics, "outbox_forwarder_retention_deleted_rows_total");
        if deleted >= 201.0 || Instant::now() > deadline {
            assert_eq!(deleted, 201.0);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        still_in_table(&mut c, &ids(&before_start)).await,
        5,
        "rows from before the line of streaming are not proved by it"
    );
    assert!(forwarder.terminate().success());
}

/// Defect: `[retention]` compared the checkpoint as it stood with a binlog
/// position read just after its snapshot. On a primary that is written
/// continuously the checkpoint always trails that position, so nothing was
/// deleted while the writes went on, and the table grew until they stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_up_with_a_primary_that_is_written_continuously() {
    const OLDER_THAN_S: u64 = 3;
    // The cut-off, a pass's interval, the checkpoint's flush and the wait
    // for it, and room for a loaded machine.
    const BOUND_S: u64 = OLDER_THAN_S + 12;
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| {
        // The default flush (1 s), as in production.
        c.flush_interval_ms(1_000).section(&format!(
            "[retention]\nolder_than_seconds = {OLDER_THAN_S}\ninterval_seconds = 2\n\
             clock_margin_seconds = 0"
        ))
    })
    .await;
    s.grant_delete(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = steady_load(s.conn(db).await, stop.clone());
    let mut c = s.conn(db).await;
    let started = Instant::now();
    // (seconds since the writes began, rows older than the bound)
    let mut stale = Vec::new();
    while started.elapsed() < Duration::from_secs(40) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let count: u64 = c
            .exec_first(
                "SELECT COUNT(*) FROM outbox_event WHERE created_at < NOW(6) - INTERVAL ? SECOND",
                (BOUND_S,),
            )
            .await
            .unwrap()
            .unwrap();
        stale.push((started.elapsed().as_secs(), count));
    }
    let left: u64 = c
        .query_first("SELECT COUNT(*) FROM outbox_event")
        .await
        .unwrap()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    let written = load.await.unwrap();
    let rate = written.len() as f64 / started.elapsed().as_secs_f64();
    println!(
        "{} written ({rate:.0}/s), {left} left in the table; older than {BOUND_S} s: {stale:?}",
        written.len()
    );
    assert!(rate >= 50.0, "a busy primary: {rate:.0} transactions/s");
    let late: Vec<_> = stale
        .iter()
        .filter(|(at, count)| *at > BOUND_S + 3 && *count > 0)
        .collect();
    assert!(
        late.is_empty(),
        "rows older than {BOUND_S} s stayed while the writes went on: {late:?}"
    );
    assert!(
        (left as usize) < written.len() / 2,
        "deleted while writing: {left} of {} left",
        written.len()
    );
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert_each_once(&records, &ids(&written));
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_the_old_rows_kafka_holds_and_keeps_the_others() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let mut c = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let published = write_order(&mut c, 30, true).await;
    broker.consume_covering(&s.topic, &ids(&published), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());
    // Published an hour ago, as far as the table says.
    c.query_drop("UPDATE outbox_event SET created_at = NOW(6) - INTERVAL 1 HOUR")
        .await
        .unwrap();
    let never = insert_unlogged(&mut c, 5, "2020-01-01 00:00:00").await;
    let young = write_order(&mut c, 3, true).await;
    // Another producer's record with an unpublished row's id, and no
    // `source_table` header: it proves nothing (the row stays).
    let foreign = harness::inbox::OutgoingRecord::event(&never[0].id, "X", "order", "1", 1, "{}");
    harness::inbox::produce(broker, &s.topic, 0, &[foreign]).await;

    let denied = s.setup.command(&["prune", "--older-than", "10m"]);
    let out = output_text(&denied);
    assert!(!denied.status.success(), "{out}");
    assert!(
        out.contains("needs `GRANT DELETE ON"),
        "says what to grant:\n{out}"
    );
    assert_eq!(still_in_table(&mut c, &ids(&published)).await, 30);
    s.grant_delete(db).await;
    let textfile = s.setup.dir.path().join("prune.prom");
    let textfile_arg = textfile.display().to_string();
    let prune = s.setup.command(&[
        "prune",
        "--older-than",
        "10m",
        "--batch",
        "7",
        "--textfile",
        &textfile_arg,
    ]);
    let out = output_text(&prune);
    assert!(prune.status.success(), "{out}");
    let metrics = std::fs::read_to_string(&textfile).unwrap();
    assert!(
        metrics.contains("\noutbox_forwarder_prune_deleted 30\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\noutbox_forwarder_prune_last_run_success 1\n"),
        "{metrics}"
    );
    assert_eq!(reported(&out, "deleted"), 30, "{out}");
    assert_eq!(reported(&out, "kept (not proved in Kafka)"), 5, "{out}");
    assert_eq!(still_in_table(&mut c, &ids(&published)).await, 0);
    assert_eq!(still_in_table(&mut c, &ids(&never)).await, 5);
    assert_eq!(still_in_table(&mut c, &ids(&young)).await, 3);
}

/// Defect: `verify`, `backfill` and `prune` read whole topics (under a
/// 60 s cap), so on a topic with a long history they read all of it, or
/// failed. They read the rows' window: from the oldest selected row's time,
/// less a margin, to the end, each partition's start found by the
/// messages' timestamps. tansu 0.6 serves a fetch from inside a record
/// batch with the next batch, so the read starts at the batch holding the
/// newest older message: up to one batch (100 here) early per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_tools_read_the_rows_window_of_a_topic_not_its_history() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    s.grant_delete(db).await;
    let mut c = s.conn(db).await;
    // Two days of history before any row: another producer's messages.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    const HISTORY: usize = 20_000;
    broker.fill(&s.topic, 2, HISTORY, now_ms - 2 * 86_400_000);
    let history = broker.consume(&s.topic, HISTORY, TIMEOUT, Duration::ZERO);
    assert_eq!(history.len(), HISTORY);
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = write_order(&mut c, 20, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());

    let verify = s.setup.command(&["verify"]);
    let out = output_text(&verify);
    assert!(verify.status.success(), "{out}");
    assert!(out.contains("missing 0"), "{out}");
    let early: u64 = 2 * 100;
    assert!(reported(&out, "Kafka messages read") <= 20 + early, "{out}");
    assert!(
        reported(&out, "before the rows' window") >= HISTORY as u64 - early,
        "{out}"
    );

    let backfill = s.setup.command(&["backfill"]);
    let out = output_text(&backfill);
    assert!(backfill.status.success(), "{out}");
    assert_eq!(reported(&out, "missing from Kafka"), 0, "{out}");
    assert!(reported(&out, "Kafka messages read") <= 20 + early, "{out}");

    // Half the rows an hour old: prune reads from an hour ago, once.
    c.query_drop("UPDATE outbox_event SET created_at = NOW(6) - INTERVAL 1 HOUR LIMIT 10")
        .await
        .unwrap();
    let prune = s
        .setup
        .command(&["prune", "--older-than", "10m", "--batch", "3"]);
    let out = output_text(&prune);
    assert!(prune.status.success(), "{out}");
    assert_eq!(reported(&out, "deleted"), 10, "{out}");
    assert!(reported(&out, "Kafka messages read") <= 20 + early, "{out}");
    assert_eq!(still_in_table(&mut c, &ids(&written)).await, 10);
}

/// Waits until none of `ids` is in the table.
async fn wait_until_deleted(conn: &mut Conn, ids: &HashSet<String>) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = still_in_table(conn, ids).await;
        if left == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{left} rows never deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Defect: `prune` proved a row published by its event id alone. With ids
/// unique per table only (`event_id_format = "any"`, a sequence per
/// schema), it deleted `b.outbox_event` #17, never published, because
/// `a.outbox_event` #17 was in Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_proves_a_row_by_its_table_and_id_not_the_id_alone() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let other = unique("shop");
    db.create_schema(&other).await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let tables = vec![
        format!("{}.outbox_event", s.schema),
        format!("{other}.outbox_event"),
    ];
    s.setup.write(
        &forwarder_config(db, broker, &s.schema, &s.topic, server_id())
            .tables(tables)
            .outbox("event_id_format", "\"any\"")
            .to_string(),
    );
    let insert = "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, \
                  payload, created_at) VALUES ('17', 'order', '1', 'X', '{}', NOW(6) - INTERVAL 1 HOUR)";
    let mut c = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    c.query_drop(insert).await.unwrap();
    let records = broker.consume(&s.topic, 1, TIMEOUT, SETTLE);
    assert_eq!(records[0].key_str(), "17");
    assert!(forwarder.terminate().success());
    // The other schema's #17, never in the binlog, so never published.
    let mut o = db.root().await;
    o.query_drop(format!("USE `{other}`")).await.unwrap();
    o.query_drop("SET SESSION sql_log_bin = 0").await.unwrap();
    o.query_drop(insert).await.unwrap();
    let mut root = db.root().await;
    for schema in [&s.schema, &other] {
        root.query_drop(format!(
            "GRANT DELETE ON `{schema}`.outbox_event TO 'forwarder'@'%'"
        ))
        .await
        .unwrap();
    }

    let prune = s.setup.command(&["prune", "--older-than", "10m"]);
    let out = output_text(&prune);
    assert!(prune.status.success(), "{out}");
    assert_eq!(reported(&out, "deleted"), 1, "{out}");
    assert_eq!(reported(&out, "kept (not proved in Kafka)"), 1, "{out}");
    let count = "SELECT COUNT(*) FROM outbox_event";
    let left: Option<u64> = c.query_first(count).await.unwrap();
    assert_eq!(left, Some(0), "the published one");
    let left: Option<u64> = o.query_first(count).await.unwrap();
    assert_eq!(left, Some(1), "the other table's #17 stays");
    // verify says the same: the other table's row is missing, by table.
    let verify = s.setup.command(&["verify"]);
    let out = output_text(&verify);
    assert!(!verify.status.success(), "{out}");
    assert!(
        out.contains(&format!("missing: 17 ({other}.outbox_event)")),
        "{out}"
    );
}

/// Defect: `prune` took the server a fresh start would pick, the writable
/// candidate or else a replica; with the primary unreachable it deleted
/// on a replica (a user with the privilege to write there), which then
/// differed from its primary. It deletes on the writable primary only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_on_the_writable_primary_only() {
    let primary = DbServer::start(Flavor::MariaDb, &[]).await;
    let replica = primary.start_replica().await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&primary, broker, 1, |c| c).await;
    let mut c = s.conn(&primary).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let published = write_order(&mut c, 10, true).await;
    broker.consume_covering(&s.topic, &ids(&published), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());
    c.query_drop("UPDATE outbox_event SET created_at = NOW(6) - INTERVAL 1 HOUR")
        .await
        .unwrap();
    // The privilege to delete, even where the server is read-only.
    c.query_drop("GRANT DELETE, READ_ONLY ADMIN ON *.* TO 'forwarder'@'%'")
        .await
        .unwrap();
    replica
        .wait_for_gtid(&primary.gtid_binlog_pos().await, TIMEOUT)
        .await;
    // Only the replica is listed (the primary is unreachable, say).
    s.setup.write(
        &forwarder_config_at(&[&replica], broker, &s.schema, &s.topic, server_id()).to_string(),
    );
    let prune = s.setup.command(&["prune", "--older-than", "10m"]);
    let out = output_text(&prune);
    let mut r = s.conn(&replica).await;
    assert_eq!(
        still_in_table(&mut r, &ids(&published)).await,
        10,
        "nothing deleted on the replica:\n{out}"
    );
    assert!(!prune.status.success(), "{out}");
    assert!(out.contains("writable primary"), "{out}");
    assert_eq!(still_in_table(&mut c, &ids(&published)).await, 10);
}

/// Defect: `[retention]` proved rows published by the line of checkpoints
/// as a whole. A table added to `outbox.tables` after the line began had
/// its older rows (written while it was not listed, so never published)
/// deleted as if they were in Kafka. Each entry of `outbox.tables` now has
/// its own start in the checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_leaves_the_older_rows_of_a_table_added_later() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let added = unique("shop");
    db.create_schema(&added).await;
    let retention =
        "[retention]\nolder_than_seconds = 1\ninterval_seconds = 1\nclock_margin_seconds = 0";
    let s = Scenario::new(db, broker, 1, |c| c.section(retention)).await;
    s.grant_delete(db).await;
    let mut root = db.root().await;
    root.query_drop(format!(
        "GRANT DELETE ON `{added}`.outbox_event TO 'forwarder'@'%'"
    ))
    .await
    .unwrap();
    let mut c = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    // Rows of a table the forwarder does not list yet: skipped.
    let mut a = db.root().await;
    a.query_drop(format!("USE `{added}`")).await.unwrap();
    let unlisted = write_order(&mut a, 5, true).await;
    let published = write_order(&mut c, 5, true).await;
    broker.consume_covering(&s.topic, &ids(&published), TIMEOUT, Duration::ZERO);
    wait_until_deleted(&mut c, &ids(&published)).await;
    assert!(forwarder.terminate().success());

    // The table is added to the configuration.
    let tables = vec![
        format!("{}.outbox_event", s.schema),
        format!("{added}.outbox_event"),
    ];
    s.setup.write(
        &forwarder_config(db, broker, &s.schema, &s.topic, server_id())
            .tables(tables)
            .section(retention)
            .to_string(),
    );
    let mut forwarder = s.setup.spawn_streaming().await;
    let later = write_order(&mut a, 5, true).await;
    let more = write_order(&mut c, 5, true).await;
    let all_later: HashSet<String> = ids(&later).into_iter().chain(ids(&more)).collect();
    broker.consume_covering(&s.topic, &all_later, TIMEOUT, Duration::ZERO);
    // Passes ran (the listed table's rows go); the added table's rows
    // from before it was listed stay (and, for its first minute, so do its
    // new ones: the start is this host's clock, a minute ahead).
    wait_until_deleted(&mut c, &ids(&more)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        still_in_table(&mut a, &ids(&unlisted)).await,
        5,
        "never published, never deleted"
    );
    assert!(forwarder.terminate().success());
}

/// Defect: for a DATETIME time column, `[retention]` allowed only for the
/// distance between its own session's zone and UTC. A row written before
/// the line of checkpoints began, by an application session whose zone
/// runs ahead (here by seconds; `+14:00` is as legal), looked younger than
/// the line's start, and was deleted though never published. A DATETIME
/// now leaves the line's first 26 hours (the widest two zones apart) to
/// `prune`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_leaves_a_datetime_row_from_before_the_line_whatever_its_zone() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| {
        c.section(
            "[retention]\nolder_than_seconds = 1\ninterval_seconds = 1\nclock_margin_seconds = 0",
        )
    })
    .await;
    s.grant_delete(db).await;
    let mut c = s.conn(db).await;
    c.query_drop(
        "ALTER TABLE outbox_event MODIFY created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
    )
    .await
    .unwrap();
    // Before the first start (at `latest`): never published; its time
    // written 4 s ahead, as by a session whose zone is ahead.
    let before = Written::new("zone", "{}");
    c.query_drop(format!(
        "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, \
         created_at) VALUES ('{}', 'order', 'zone', 'X', '{{}}', NOW(6) + INTERVAL 4 SECOND)",
        before.id
    ))
    .await
    .unwrap();
    let mut forwarder = s.setup.spawn_streaming().await;
    let published = write_order(&mut c, 3, true).await;
    broker.consume_covering(&s.topic, &ids(&published), TIMEOUT, Duration::ZERO);
    // Its time is past the line's start and older than the cut-off now,
    // and passes run.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        still_in_table(&mut c, &ids(&[before])).await,
        1,
        "never published, never deleted"
    );
    assert!(forwarder.terminate().success());
}

/// Defect: the table tools took any message naming a row's (table, event
/// id) for that row's, so a principal that may write the outbox topic
/// could make `verify` call an unpublished row present and `prune` delete
/// it. With `kafka.signing_key`, the forwarder signs every message and
/// only messages it signed prove a row: the forged one is passed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_signing_key_a_forged_message_proves_no_row_and_the_forwarders_own_do() {
    use harness::inbox::{produce, OutgoingRecord};
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("signing-key");
    std::fs::write(&key_file, format!("{}\n", uuid::Uuid::new_v4().simple())).unwrap();
    let signed = |c: harness::ForwarderToml| {
        c.kafka(
            "signing_key_file",
            &format!("{:?}", key_file.display().to_string()),
        )
    };
    let s = Scenario::new(db, broker, 1, signed).await;
    s.grant_delete(db).await;
    let mut c = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let published = write_order(&mut c, 3, true).await;
    let records = broker.consume_covering(&s.topic, &ids(&published), TIMEOUT, Duration::ZERO);
    for record in &records {
        let signature = &record.headers["outbox_signature"];
        assert_eq!(signature.len(), 64, "{signature}");
    }
    assert!(forwarder.terminate().success(), "{}", forwarder.log());

    // A row never in the binlog (so never published), and a message
    // naming it, table and all, from another producer.
    let hour_ago: Option<String> = c
        .query_first("SELECT DATE_FORMAT(NOW(6) - INTERVAL 1 HOUR, '%Y-%m-%d %H:%i:%s.%f')")
        .await
        .unwrap();
    let never = insert_unlogged(&mut c, 1, &hour_ago.unwrap()).await;
    let mut forged = OutgoingRecord::event(&never[0].id, "ORDER_ACCEPTED", "order", "1", 1, "{}");
    forged
        .headers
        .push(("source_table".into(), format!("{}.outbox_event", s.schema)));
    forged
        .headers
        .push(("outbox_signature".into(), "00".repeat(32)));
    produce(broker, &s.topic, 0, &[forged]).await;
    c.query_drop("UPDATE outbox_event SET created_at = NOW(6) - INTERVAL 1 HOUR")
        .await
        .unwrap();

    // Without the key, the forged message passes for the row's.
    let unsigned = forwarder_config(db, broker, &s.schema, &s.topic, server_id());
    s.setup.write(&unsigned.clone().to_string());
    let verify = s.setup.command(&["verify"]);
    let out = output_text(&verify);
    assert!(
        out.contains("missing 0"),
        "the forgery is taken without a key:\n{out}"
    );

    // With it, the row is missing, and prune keeps it.
    s.setup.write(&signed(unsigned).to_string());
    let verify = s.setup.command(&["verify"]);
    let out = output_text(&verify);
    assert!(!verify.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "missing: {} ({}.outbox_event)",
            never[0].id, s.schema
        )),
        "{out}"
    );
    let prune = s.setup.command(&["prune", "--older-than", "10m"]);
    let out = output_text(&prune);
    assert!(prune.status.success(), "{out}");
    assert_eq!(reported(&out, "deleted"), 3, "{out}");
    assert_eq!(reported(&out, "kept (not proved in Kafka)"), 1, "{out}");
    assert_eq!(still_in_table(&mut c, &ids(&never)).await, 1);
}

/// Defect: `[retention]` proved a row by the checkpoint's position alone.
/// A row that never reached the binlog (a `sql_log_bin=0` session; a
/// binlog filter on the primary does the same) is under the checkpoint by
/// its commit, and was deleted though never published; so were the older
/// rows of a table listed across an upgrade from a release whose
/// checkpoint records no per-table starts. A row is now deleted only once
/// its message is found in Kafka, as `prune` proves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_only_rows_it_finds_in_kafka() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| {
        c.section(
            "[retention]\nolder_than_seconds = 1\ninterval_seconds = 1\nclock_margin_seconds = 0",
        )
    })
    .await;
    s.grant_delete(db).await;
    let mut c = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let published = write_order(&mut c, 5, true).await;
    // Written now, by a session that does not log to the binlog (root may).
    let now: String = c
        .query_first("SELECT CAST(NOW(6) AS CHAR)")
        .await
        .unwrap()
        .unwrap();
    let mut root = db.root().await;
    root.query_drop(format!("USE `{}`", s.schema))
        .await
        .unwrap();
    let unlogged = insert_unlogged(&mut root, 3, &now).await;
    let after = write_order(&mut c, 5, true).await;
    let logged: HashSet<String> = ids(&published).into_iter().chain(ids(&after)).collect();
    broker.consume_covering(&s.topic, &logged, TIMEOUT, Duration::ZERO);
    wait_until_deleted(&mut c, &logged).await;
    // Passes went on past the unlogged rows' cut-off.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        still_in_table(&mut c, &ids(&unlogged)).await,
        3,
        "never published, never deleted"
    );
    assert!(forwarder.terminate().success());
}

/// Defect: `repair-gap` allowed a DATETIME time column only the distance
/// between its own session's zone and UTC. With the server in UTC and the
/// application's sessions at `+02:00`, the gap's rows read two hours later
/// than their commit, fell past the repair window's end and were never
/// selected; nothing was reported unproven, and the checkpoint moved past
/// the gap. The window now allows any two zones apart, as `[retention]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_gap_finds_a_datetime_gap_written_in_another_zone() {
    let db = DbServer::start(Flavor::MariaDb, &[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&db, broker, 1, |c| c).await;
    let mut c = s.conn(&db).await;
    c.query_drop(
        "ALTER TABLE outbox_event MODIFY created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
    )
    .await
    .unwrap();
    let utc: Option<i64> = c
        .query_first("SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())")
        .await
        .unwrap();
    assert_eq!(utc, Some(0), "the server's zone is UTC");
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = write_order(&mut c, 3, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());

    // The application writes at +02:00 while the forwarder is down; the
    // binlog of those rows is purged.
    let mut app = s.conn(&db).await;
    app.query_drop("SET time_zone = '+02:00'").await.unwrap();
    let mut gap = Vec::new();
    for _ in 0..20 {
        gap.extend(write_order(&mut app, 1, false).await);
    }
    // And one by a session in the server's zone: the window has a row, so
    // nothing looks unproven.
    gap.extend(write_order(&mut c, 1, false).await);
    let mut root = db.root().await;
    purge_all_but_the_newest_binlog(&db, &mut root).await;

    let repair = s.setup.command(&["repair-gap"]);
    let out = output_text(&repair);
    assert!(repair.status.success(), "{out}");
    assert_eq!(reported(&out, "missing from Kafka"), 21, "{out}");
    assert_eq!(reported(&out, "published"), 21, "{out}");
    let records = broker.consume_covering(&s.topic, &ids(&gap), TIMEOUT, Duration::ZERO);
    assert_each_once(&records, &ids(&gap));
}

/// `[audit]` proves, while the forwarder runs, that the committed rows are
/// in Kafka, and names those it cannot find: rows written with the binlog
/// off (never streamed) are counted unproven and named in the log, looked
/// for again at every pass, and proven once `backfill` publishes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auditor_proves_committed_rows_and_names_the_ones_kafka_lacks() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let port = free_port();
    let s = Scenario::new(db, broker, 1, |c| {
        with_metrics(c, port).section("[audit]\ninterval_seconds = 2\nsettle_seconds = 1")
    })
    .await;
    let mut c = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = write_order(&mut c, 20, true).await;
    let now: String = c
        .query_first("SELECT CAST(NOW(6) AS CHAR)")
        .await
        .unwrap()
        .unwrap();
    let never = insert_unlogged(&mut c, 3, &now).await;
    let metrics = |name: &str| sample(&http_get(port, "/metrics").1, name);
    let deadline = Instant::now() + TIMEOUT;
    while metrics("outbox_forwarder_audit_proven_rows_total") < written.len() as f64
        || metrics("outbox_forwarder_audit_unproven_rows") < 3.0
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            http_get(port, "/metrics").1
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(metrics("outbox_forwarder_audit_unproven_rows"), 3.0);
    assert!(metrics("outbox_forwarder_audit_oldest_unproven_seconds") >= 1.0);
    let log = forwarder.log();
    for row in &never {
        assert!(
            log.contains(&format!("event_id={}", row.id)) && log.contains("is not in Kafka"),
            "{} named:\n{log}",
            row.id
        );
    }

    // The same as a statement of the last hour, per table.
    let statement = |c: &str| format!("{}.outbox_event: {c}", s.schema);
    let verify = s.setup.command(&["verify", "--since", "1h", "--statement"]);
    let out = output_text(&verify);
    assert!(!verify.status.success(), "{out}");
    assert!(
        out.contains("delivery statement, rows created from 1h ago to now"),
        "{out}"
    );
    let unproven = "written 23, proven in Kafka 20, repeats 0, unproven 3";
    assert!(out.contains(&statement(unproven)), "{out}");

    let backfill = s.setup.command(&["backfill"]);
    let out = output_text(&backfill);
    assert!(backfill.status.success(), "{out}");
    let verify = s.setup.command(&["verify", "--since", "1h", "--statement"]);
    let out = output_text(&verify);
    assert!(verify.status.success(), "{out}");
    let proven = "written 23, proven in Kafka 23, repeats 0, unproven 0";
    assert!(out.contains(&statement(proven)), "{out}");
    while metrics("outbox_forwarder_audit_unproven_rows") > 0.0 {
        assert!(
            Instant::now() < deadline,
            "{}",
            http_get(port, "/metrics").1
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(metrics("outbox_forwarder_audit_proven_rows_total") >= (written.len() + 3) as f64);
    assert_eq!(metrics("outbox_forwarder_audit_failures_total"), 0.0);
    assert!(forwarder
        .log()
        .contains("audit: outbox row found in Kafka after all"));
    assert!(forwarder.terminate().success());
}

/// A healthy run of 100 000 events with a kill -9 in the middle: the
/// auditor of each process proves what it covers and names nothing (no
/// row unproven, no pass failed, no "is not in Kafka" in either log), each
/// process counts a row at most once, and the delivery statement of the whole period proves
/// every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_run_through_a_kill_is_proven_and_the_auditor_names_nothing() {
    const TRANSACTIONS: usize = 5_000;
    const EVENTS_EACH: usize = 20;
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let port = free_port();
    let s = Scenario::new(db, broker, 3, |c| {
        // Settled well past an ack's time on a loaded machine (a row
        // looked for before its ack would be named).
        with_metrics(c, port).section("[audit]\ninterval_seconds = 2\nsettle_seconds = 8")
    })
    .await;
    let mut c = s.conn(db).await;
    let metrics = |name: &str| sample(&http_get(port, "/metrics").1, name);
    let mut written = Vec::new();
    let mut first = s.setup.spawn_streaming().await;
    for _ in 0..TRANSACTIONS / 2 {
        written.extend(write_order(&mut c, EVENTS_EACH, true).await);
    }
    // Let a pass or two prove some of the first half, then kill.
    let deadline = Instant::now() + TIMEOUT;
    while metrics("outbox_forwarder_audit_proven_rows_total") == 0.0 {
        assert!(Instant::now() < deadline, "{}", first.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let proven_before = metrics("outbox_forwarder_audit_proven_rows_total");
    first.kill9();
    assert!(
        harness::http::try_http_get(port, "/metrics").is_err(),
        "the first forwarder is gone"
    );
    let mut second = s.setup.spawn_streaming().await;
    for _ in 0..TRANSACTIONS / 2 {
        written.extend(write_order(&mut c, EVENTS_EACH, true).await);
    }
    assert_eq!(written.len(), TRANSACTIONS * EVENTS_EACH);
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert_each_once(&records, &ids(&written));
    // Passes past the last commit: settle 8 s, every 2 s.
    let passes = |log: String| log.matches("rows proven in Kafka").count();
    let so_far = passes(second.log());
    let deadline = Instant::now() + TIMEOUT;
    while passes(second.log()) < so_far + 6 {
        assert!(Instant::now() < deadline, "{}", second.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let proven_after = metrics("outbox_forwarder_audit_proven_rows_total");
    assert_eq!(metrics("outbox_forwarder_audit_unproven_rows"), 0.0);
    assert_eq!(metrics("outbox_forwarder_audit_failures_total"), 0.0);
    for (name, log) in [("first", first.log()), ("second", second.log())] {
        assert!(!log.contains("is not in Kafka"), "{name}:\n{log}");
    }
    // Each process counts a row at most once (the first saw only the
    // first half); a restarted auditor starts with nothing proven and may
    // prove again what the first did; together they cover every row.
    let n = written.len() as f64;
    assert!(
        proven_before <= n / 2.0 && proven_after <= n && proven_before + proven_after >= n,
        "{proven_before} + {proven_after} of {n}"
    );
    let verify = s.setup.command(&["verify", "--since", "1h", "--statement"]);
    let out = output_text(&verify);
    assert!(verify.status.success(), "{out}");
    let n = written.len();
    let statement = format!(
        "{}.outbox_event: written {n}, proven in Kafka {n}, repeats 0, unproven 0",
        s.schema
    );
    assert!(out.contains(&statement), "{out}");
    assert!(second.terminate().success());
}
