//! The control plane across failures: which instance of an `[ha]` group
//! publishes, on which server, from which checkpoint. Real processes: the
//! broker, MariaDB servers (two in GTID replication where a database fails
//! over), forwarder instances each with its own checkpoint store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::inbox::{produce, OutgoingRecord};
use harness::workload::*;
use harness::{unique, Broker, ForwarderProcess, ForwarderSetup, MariaDb, Record, TIMEOUT};
use mysql_async::prelude::Queryable;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

const LEASE_MS: u64 = 4000;

/// The `[ha]` section of `instance` in `group`, sharing on `topic`.
fn ha(group: &str, topic: &str, instance: &str) -> String {
    format!(
        "\n[ha]\ngroup = \"{group}\"\nlease_ms = {LEASE_MS}\ncheckpoint_topic = \"{topic}\"\ninstance = \"{instance}\"\n"
    )
}

/// A group's name and checkpoint topic (created, one partition).
struct GroupNames {
    group: String,
    topic: String,
}

impl GroupNames {
    fn new(broker: &Broker) -> Self {
        let names = GroupNames {
            group: unique("group"),
            topic: unique("checkpoints"),
        };
        broker.create_topic(&names.topic, 1);
        names
    }

    fn ha(&self, instance: &str) -> String {
        ha(&self.group, &self.topic, instance)
    }
}

/// One more instance of the scenario's group: same servers, schema and
/// topic, its own replica id and checkpoint store.
fn instance(
    servers: &[&MariaDb],
    broker: &Broker,
    s: &Scenario,
    names: &GroupNames,
    name: &str,
) -> ForwarderSetup {
    ForwarderSetup::new(
        &(forwarder_config_at(servers, broker, &s.schema, &s.topic, server_id()) + &names.ha(name)),
    )
}

/// How many lines of `process`'s log contain `needle`.
fn log_count(process: &ForwarderProcess, needle: &str) -> usize {
    process.log().lines().filter(|l| l.contains(needle)).count()
}

/// Waits until `needle` is in `count` lines of the log.
async fn wait_for_count(process: &ForwarderProcess, needle: &str, count: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while log_count(process, needle) < count {
        assert!(
            Instant::now() < deadline,
            "{count} lines with {needle:?} not seen in {timeout:?}:\n{}",
            process.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Commits one order with one event every 3 ms on `db` until `stop` or
/// the server goes away; returns what it committed.
fn steady_load(
    mut conn: mysql_async::Conn,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Written>> {
    tokio::spawn(async move {
        let mut written = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let Ok(mut tx) = conn.start_transaction(Default::default()).await else {
                break;
            };
            let event = Written::new("a", "{}");
            let insert = format!(
                "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, \
                 event_version, payload) VALUES ('{}', 'order', 'a', 'ORDER_ACCEPTED', 1, '{{}}')",
                event.id
            );
            if tx.query_drop(insert).await.is_err() || tx.commit().await.is_err() {
                break;
            }
            written.push(event);
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        written
    })
}

/// Defect: a holder that found nothing it could parse in the group's topic
/// started at `checkpoint.start` (`latest`), and every event committed
/// since the group's last checkpoint was lost without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_read_the_groups_checkpoint_waits_instead_of_starting_at_latest() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(db, broker, 1, |c| c + &names.ha("B")).await;
    let before = db.gtid_binlog_pos().await;
    // The group's record cannot be read (written by another release, or
    // damaged): where the group stopped is unknown.
    produce(
        broker,
        &names.topic,
        0,
        &[OutgoingRecord {
            key: names.group.clone(),
            headers: vec![],
            payload: r#"{"format":99,"resume_at":"elsewhere"}"#.into(),
        }],
    )
    .await;
    let mut conn = s.conn(db).await;
    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }

    let mut b = s.setup.spawn(&[]);
    b.wait_for_log("became the active instance", TIMEOUT).await;
    b.wait_for_log(
        "cannot establish the group's checkpoint",
        Duration::from_secs(20),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = b.log();
    assert!(!log.contains("binlog stream started"), "{log}");
    assert!(!log.contains("starting at checkpoint.start"), "{log}");

    // The operator says where the group resumes, from another instance's
    // configuration (B holds its own store): B follows it and nothing is lost.
    let c = instance(&[db], broker, &s, &names, "C");
    let set = c.command(&["checkpoint", "set", &before]);
    let text = harness::forwarder::output_text(&set);
    assert!(set.status.success(), "{text}");
    assert!(text.contains("shared with group"), "{text}");
    b.wait_for_log("binlog stream started", TIMEOUT).await;
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    assert_eq!(records.len(), written.len(), "the 10 events, once each");
    assert!(b.terminate().success());
}

/// The first start of a group is recorded on the group's topic before the
/// instance publishes, so a later instance knows the group has a history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_of_a_group_is_recorded_on_its_topic_before_publishing() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(db, broker, 1, |c| c + &names.ha("A")).await;
    let mut a = s.setup.spawn(&[]);
    a.wait_for_log("first start of the group", TIMEOUT).await;
    a.wait_for_log("binlog stream started", TIMEOUT).await;
    let records = broker.consume(&names.topic, 1, TIMEOUT, Duration::ZERO);
    assert_eq!(records[0].key_str(), names.group);
    assert_eq!(
        records[0]
            .headers
            .get("group_started_by")
            .map(String::as_str),
        Some("A"),
        "{:?}",
        records[0].headers
    );
    assert!(a.terminate().success());
}

/// Defect: the active instance confirmed its lock on the server it took it
/// on, and never asked whether that server still took writes. After a
/// switchover that left the old primary running as a replica, a new
/// instance took the lock on the new primary and both published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_switchover_the_active_instance_moves_its_lock_to_the_new_primary() {
    let old_primary = MariaDb::start(&[]).await;
    let new_primary = old_primary.start_replica().await;
    let servers = [&old_primary, &new_primary];
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(&old_primary, broker, 2, |c| c).await;
    let a_setup = instance(&servers, broker, &s, &names, "A");
    let mut a = a_setup.spawn(&[]);
    a.wait_for_log("binlog stream started", TIMEOUT).await;
    let mut conn = s.conn(&old_primary).await;
    let mut written = Vec::new();
    for _ in 0..20 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    drop(conn);

    // Switchover: the old primary stops taking writes and keeps running,
    // as the new primary's replica.
    old_primary
        .root()
        .await
        .query_drop("SET GLOBAL read_only = ON")
        .await
        .unwrap();
    new_primary
        .wait_for_gtid(&old_primary.gtid_binlog_pos().await, TIMEOUT)
        .await;
    new_primary.promote().await;
    old_primary.replicate_from(&new_primary).await;
    a.wait_for_log("stepping down", Duration::from_secs(10))
        .await;
    wait_for_count(&a, "became the active instance", 2, TIMEOUT).await;
    let mut conn = s.conn(&new_primary).await;
    for _ in 0..20 {
        written.extend(write_order(&mut conn, 1, false).await);
    }

    // A new instance (a restarted pod) finds the group's lock held.
    let b_setup = instance(&servers, broker, &s, &names, "B");
    let mut b = b_setup.spawn(&[]);
    b.wait_for_log("standby: another instance holds the group's lock", TIMEOUT)
        .await;
    for _ in 0..20 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    assert_eq!(records.len(), written.len(), "every event once");
    assert!(
        !b.log().contains("became the active instance"),
        "{}",
        b.log()
    );
    assert!(records.iter().all(|r| published_by(r) == "A"));
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

/// Defect: an instance stopped while it held off after taking the lock
/// shared a hand-over record, which let the next holder skip its hold-off
/// although the previous active instance might still publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_stopped_during_its_hold_off_hands_nothing_over() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(db, broker, 1, |c| c + &names.ha("A")).await;
    let b_setup = instance(&[db], broker, &s, &names, "B");
    let mut a = s.setup.spawn(&[]);
    a.wait_for_log("binlog stream started", TIMEOUT).await;
    let mut b = b_setup.spawn(&[]);
    b.wait_for_log("standby: another instance holds the group's lock", TIMEOUT)
        .await;
    // A publishes and shares its checkpoints, which B follows.
    let mut conn = s.conn(db).await;
    let mut written = Vec::new();
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    broker.consume(&names.topic, 1, TIMEOUT, Duration::ZERO);

    // A freezes: B takes the lock and holds off (three quarters of a lease),
    // and is stopped before it publishes.
    a.freeze(true);
    b.wait_for_log("became the active instance", TIMEOUT).await;
    assert!(b.terminate().success());
    let log = b.log();
    assert!(
        !log.contains("binlog stream started"),
        "B was stopped during its hold-off:\n{log}"
    );

    let shared = broker.consume(&names.topic, 1, TIMEOUT, SETTLE);
    let handed_over: Vec<&Record> = shared
        .iter()
        .filter(|r| r.headers.contains_key("handed_over_by"))
        .collect();
    assert!(
        handed_over.is_empty(),
        "hand-over records of an instance that never published: {:?}",
        handed_over.iter().map(|r| &r.headers).collect::<Vec<_>>()
    );
    a.freeze(false);
    drop(a);
}

/// Defect: catching up read the group's topic from its beginning under a
/// 10 s deadline; a long-lived group's topic (one record a second, the
/// active segment never compacted) could no longer be read in time, and
/// the holder kept the lock without ever publishing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_reads_a_checkpoint_topic_of_a_million_records_in_seconds() {
    const RECORDS: usize = 1_000_000;
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(db, broker, 1, |c| c + &names.ha("A")).await;
    let mut a = s.setup.spawn(&[]);
    a.wait_for_log("binlog stream started", TIMEOUT).await;
    let mut conn = s.conn(db).await;
    let mut written = Vec::new();
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(a.terminate().success());
    // A long history: the group's last record a million times over.
    let last = broker
        .consume(&names.topic, 1, TIMEOUT, SETTLE)
        .pop()
        .unwrap();
    let filled = Instant::now();
    fill_topic(broker, &names.topic, &names.group, &last.payload, RECORDS);
    println!("{RECORDS} records written in {:?}", filled.elapsed());
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }

    let b_setup = instance(&[db], broker, &s, &names, "B");
    let mut b = b_setup.spawn(&[]);
    b.wait_for_log("became the active instance", TIMEOUT).await;
    let active = Instant::now();
    b.wait_for_log(
        "caught up with the group's checkpoint",
        Duration::from_secs(30),
    )
    .await;
    let caught_up = active.elapsed();
    b.wait_for_log("binlog stream started", Duration::from_secs(30))
        .await;
    let took = active.elapsed();
    println!(
        "takeover over {RECORDS} shared records: caught up {caught_up:?} and streaming {took:?} \
         after taking the lock (the hold-off included)"
    );
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    assert_eq!(records.len(), written.len(), "every event once");
    assert!(b.terminate().success());
}

/// Writes `count` copies of `payload` keyed by `key` to `topic`, fast.
fn fill_topic(broker: &Broker, topic: &str, key: &str, payload: &[u8], count: usize) {
    let producer: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "500000")
        .set("compression.type", "none")
        .create()
        .expect("producer");
    for _ in 0..count {
        let mut record: BaseRecord<'_, str, [u8]> = BaseRecord::to(topic).key(key).payload(payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(TIMEOUT).expect("every record acked");
}

/// Defect: every start walked `mysql.url` from its first entry, so an old
/// primary that came back writable after a failover was chosen, refused
/// (it lacks the new primary's transactions), and the new primary was
/// never tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_primary_back_and_writable_is_passed_over_for_the_one_that_serves_the_checkpoint() {
    let mut old_primary = MariaDb::start(&[]).await;
    let new_primary = old_primary.start_replica().await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&old_primary, broker, 1, |c| c).await;
    let setup = ForwarderSetup::new(&forwarder_config_at(
        &[&old_primary, &new_primary],
        broker,
        &s.schema,
        &s.topic,
        server_id(),
    ));
    let mut forwarder = setup.spawn_streaming().await;
    let mut conn = s.conn(&old_primary).await;
    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    drop(conn);
    new_primary
        .wait_for_gtid(&old_primary.gtid_binlog_pos().await, TIMEOUT)
        .await;
    old_primary.kill9();
    new_primary.promote().await;
    let mut conn = s.conn(&new_primary).await;
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());

    // The old primary comes back as it was: writable, without the new
    // primary's transactions.
    old_primary.restart().await;
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let mut forwarder = setup.spawn_streaming().await;
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    assert_eq!(records.len(), written.len(), "every event once");
    let log = forwarder.log();
    assert!(
        log.contains("lacks transactions the checkpoint covers"),
        "the passed-over candidate and why:\n{log}"
    );
    assert!(forwarder.terminate().success());
}

/// A database failover under load and a kill -9 of the active instance:
/// the standby takes over on the promoted replica, every row the new
/// primary holds reaches Kafka, and none twice: the tails A's checkpoint
/// recorded are read back by GTID on a server whose binlog coordinates are
/// all different.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_failover_and_a_kill_9_of_the_active_instance_lose_nothing() {
    let mut primary = MariaDb::start(&[]).await;
    let replica = primary.start_replica().await;
    let servers = [&primary, &replica];
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(&primary, broker, 2, |c| c).await;
    let a_setup = instance(&servers, broker, &s, &names, "A");
    let b_setup = instance(&servers, broker, &s, &names, "B");
    let mut a = a_setup.spawn(&[]);
    a.wait_for_log("binlog stream started", TIMEOUT).await;
    let mut b = b_setup.spawn(&[]);
    b.wait_for_log("standby: another instance holds the group's lock", TIMEOUT)
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = steady_load(s.conn(&primary).await, stop.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // A dies with messages acked after its last shared checkpoint, then
    // the primary.
    a.kill9();
    primary.kill9();
    let on_primary = load.await.unwrap();
    assert!(on_primary.len() > 100, "a load ran: {}", on_primary.len());
    replica.promote().await;
    let load = steady_load(s.conn(&replica).await, stop.clone());
    b.wait_for_log("became the active instance", TIMEOUT).await;
    b.wait_for_log("binlog stream started", TIMEOUT).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let on_replica = load.await.unwrap();
    assert!(!on_replica.is_empty());

    let rows = event_ids_in(&replica, &s.schema).await;
    let records = broker.consume_covering(&s.topic, &rows, Duration::from_secs(120), SETTLE);
    let keyed = by_key(&records);
    let missing = rows.iter().filter(|id| !keyed.contains_key(*id)).count();
    let repeats = records.len() - keyed.len();
    println!(
        "database failover + kill -9: {} rows on the new primary, {} records, {missing} missing, \
         {repeats} repeated",
        rows.len(),
        records.len()
    );
    assert_eq!(missing, 0);
    assert!(
        b.log()
            .contains("binlog stream started on another server of the topology, by GTID"),
        "B resumed A's checkpoint on the promoted replica:\n{}",
        b.log()
    );
    // Read back by GTID slot on the new server: what A published after its
    // last shared checkpoint is recognised, not published again.
    assert!(
        already_published(&b.log()) > 0,
        "B found A's last messages in the tails:\n{}",
        b.log()
    );
    assert_eq!(repeats, 0, "nothing published twice");
    assert!(records.iter().any(|r| published_by(r) == "A"));
    assert_one_after_the_other(&records, "A", "B");
    assert!(b.terminate().success());
}

/// `check` with two candidates of which the first is down looks at the
/// second rather than failing on the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_with_the_first_candidate_down_reports_the_second() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let mut down = MariaDb::start(&[]).await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let setup = ForwarderSetup::new(&forwarder_config_at(
        &[&down, db],
        broker,
        &s.schema,
        &s.topic,
        server_id(),
    ));
    down.stop();
    let check = setup.command(&["check"]);
    let text = harness::forwarder::output_text(&check);
    assert!(check.status.success(), "{text}");
    let candidates: Vec<&str> = text.lines().filter(|l| l.contains("candidate")).collect();
    assert!(
        candidates
            .iter()
            .any(|l| l.contains("1 of 2") && l.contains("unreachable")),
        "{text}"
    );
    assert!(
        candidates
            .iter()
            .any(|l| l.contains("2 of 2") && l.contains("writable")),
        "{text}"
    );
    let source = harness::forwarder::check_line(&text, "source");
    assert!(
        source.starts_with("PASS") && source.contains("candidate 2"),
        "{source}"
    );
}

/// A group whose topic does not exist yet: the first holder creates it
/// (one partition, compacted) instead of waiting for an operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_group_topic_is_created_with_one_partition() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (group, topic) = (unique("group"), unique("checkpoints"));
    let s = Scenario::new(db, broker, 1, |c| c + &ha(&group, &topic, "A")).await;
    let mut a = s.setup.spawn(&[]);
    a.wait_for_log("binlog stream started", TIMEOUT).await;
    let log = a.log();
    assert!(log.contains("created ha.checkpoint_topic"), "{log}");
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .unwrap();
    let metadata =
        rdkafka::consumer::Consumer::fetch_metadata(&consumer, Some(&topic), TIMEOUT).unwrap();
    assert_eq!(metadata.topics()[0].partitions().len(), 1);
    let records = broker.consume(&topic, 1, TIMEOUT, Duration::ZERO);
    assert_eq!(
        records[0]
            .headers
            .get("group_started_by")
            .map(String::as_str),
        Some("A")
    );
    assert!(a.terminate().success());
}

/// Sharing was gated on the role, not on the fence: an instance that woke
/// from a freeze could share its stale checkpoint with a fresh timestamp
/// before its first failed ping, putting the group's topic back behind
/// what the new active instance had shared. The window is narrow (acks the
/// pipeline had not counted when the process froze) and this run does not
/// hit it reliably on the build before the fix; the unit test
/// `a_stale_lease_stores_the_checkpoint_but_shares_nothing` pins the gate.
/// This one holds the invariant end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_instance_that_wakes_never_moves_the_groups_checkpoint_back() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(db, broker, 2, |c| c + &names.ha("A")).await;
    let b_setup = instance(&[db], broker, &s, &names, "B");
    let mut a = s.setup.spawn(&[]);
    a.wait_for_log("binlog stream started", TIMEOUT).await;
    let mut b = b_setup.spawn(&[]);
    b.wait_for_log("standby: another instance holds the group's lock", TIMEOUT)
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = steady_load(s.conn(db).await, stop.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;

    a.freeze(true);
    b.wait_for_log("binlog stream started", TIMEOUT).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    a.freeze(false);
    a.wait_for_log("stepping down", TIMEOUT).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let written = load.await.unwrap();
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The group's records in offset order: the position never goes back.
    let shared = broker.consume(&names.topic, 1, TIMEOUT, SETTLE);
    let mut positions: Vec<(i64, outbox_core::BinlogPosition)> = shared
        .iter()
        .filter(|r| r.key_str() == names.group)
        .map(|r| {
            let c: outbox_checkpoint::Checkpoint = serde_json::from_slice(&r.payload).unwrap();
            (r.offset, c.position)
        })
        .collect();
    positions.sort_by_key(|(offset, _)| *offset);
    let back: Vec<String> = positions
        .windows(2)
        .filter(|w| w[1].1.compare(&w[0].1).is_some_and(|o| o.is_lt()))
        .map(|w| format!("offset {}: {} after {}", w[1].0, w[1].1, w[0].1))
        .collect();
    assert!(
        back.is_empty(),
        "the group's checkpoint went back: {back:?} (of {} records)",
        positions.len()
    );
    assert!(positions.len() > 10, "both shared: {}", positions.len());
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

/// Two candidates that both take writes and both hold the checkpoint's
/// transactions (a former primary left writable): which one the
/// application writes to cannot be told, so the forwarder waits and says
/// so rather than stream from (or take the group's lock on) a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writable_candidates_that_both_serve_are_refused_until_one_is_left() {
    let primary = MariaDb::start(&[]).await;
    let replica = primary.start_replica().await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&primary, broker, 1, |c| c).await;
    let setup = ForwarderSetup::new(&forwarder_config_at(
        &[&primary, &replica],
        broker,
        &s.schema,
        &s.topic,
        server_id(),
    ));
    let mut forwarder = setup.spawn_streaming().await;
    let mut conn = s.conn(&primary).await;
    let mut written = Vec::new();
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());
    replica
        .wait_for_gtid(&primary.gtid_binlog_pos().await, TIMEOUT)
        .await;
    replica.promote().await;

    let mut forwarder = setup.spawn(&[]);
    forwarder
        .wait_for_log("candidates of mysql.url take writes", TIMEOUT)
        .await;
    assert!(!forwarder.log().contains("binlog stream started"));
    // The former primary made read-only: the forwarder goes on, on the
    // new one, and repeats nothing.
    primary
        .root()
        .await
        .query_drop("SET GLOBAL read_only = ON")
        .await
        .unwrap();
    forwarder
        .wait_for_log("binlog stream started", TIMEOUT)
        .await;
    let mut conn = s.conn(&replica).await;
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    assert_eq!(records.len(), written.len(), "every event once");
    assert!(forwarder.terminate().success());
}
