//! Kafka equals the surviving database: `mysql.publish_after_replicas`.
//!
//! With asynchronous replication a primary that crashes takes its last
//! transactions with it. Servers in GTID replication (each replica
//! with `log_slave_updates`), the forwarder pointed at all of them: without
//! the option, the events of transactions the promoted replica never
//! received stay in Kafka (phantoms) and the forwarder cannot resume on it;
//! with it, nothing is published before a replica has it, and the new
//! primary is followed without a person.

use std::collections::HashSet;
use std::time::Duration;

use mysql_async::prelude::Queryable;

use harness::forwarder::{check_line, output_text};
use harness::http::{sample, try_http_get, wait_for_status};
use harness::workload::*;
use harness::{
    free_port, Broker, DbServer, Flavor, ForwarderSetup, ForwarderToml, Record, TIMEOUT,
};

/// `mysql.url` listing `servers` in order.
fn pointed_at(config: ForwarderToml, servers: &[&DbServer]) -> ForwarderToml {
    config.urls(servers.iter().map(|s| s.forwarder_url()).collect())
}

/// A MariaDB primary and its replica, and a scenario on the primary that
/// publishes what the replica has applied (`publish_after_replicas = 1`).
async fn gated_pair() -> (DbServer, DbServer, Scenario) {
    let primary = DbServer::start(Flavor::MariaDb, &[]).await;
    let replica = primary.start_replica().await;
    let s = Scenario::new(&primary, Broker::shared().await, 1, |c| {
        pointed_at(c, &[&primary, &replica]).mysql("publish_after_replicas", "1")
    })
    .await;
    (primary, replica, s)
}

/// Commits `n` orders with one event each on `db`.
async fn orders(s: &Scenario, db: &DbServer, n: usize) -> Vec<Written> {
    let mut conn = s.conn(db).await;
    let mut written = Vec::with_capacity(n);
    for _ in 0..n {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    written
}

/// The records whose key is not an outbox row of `rows`: events of
/// transactions the surviving database does not have.
fn phantoms<'a>(records: &'a [Record], rows: &HashSet<String>) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|r| !rows.contains(r.key_str()))
        .collect()
}

// The option's proof and its fault on both flavors: what a replica has
// applied is a MariaDB position or a MySQL GTID set (three MySQL servers in
// a chain for the second).
harness::on_both_flavors!(
    without_the_option_a_failover_leaves_phantoms_in_kafka_and_the_forwarder_stuck,
    with_the_option_what_a_failover_loses_never_reaches_kafka_and_the_new_primary_is_followed,
);

/// The fault the option exists for, as the forwarder behaves without it:
/// the proof that the scenario of the next test really loses transactions.
async fn without_the_option_a_failover_leaves_phantoms_in_kafka_and_the_forwarder_stuck(
    flavor: Flavor,
) {
    let mut primary = DbServer::start(flavor, &[]).await;
    let replica = primary.start_replica().await;
    let broker = Broker::shared().await;
    let s = Scenario::new(&primary, broker, 1, |c| {
        pointed_at(c, &[&primary, &replica])
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;

    replica.receive_from_primary(false).await;
    let lost = orders(&s, &primary, 500).await;
    // All 500 are published while the replica has none of them.
    broker.consume_covering(&s.topic, &ids(&lost), TIMEOUT, Duration::ZERO);
    primary.kill9();
    replica.receive_from_primary(true).await;
    replica.promote().await;
    let after = orders(&s, &replica, 500).await;

    forwarder
        .wait_for_log(
            "the server lacks transactions the checkpoint covers",
            Duration::from_secs(60),
        )
        .await;
    let rows = event_ids_in(&replica, &s.schema).await;
    assert!(
        ids(&lost).is_disjoint(&rows),
        "the promoted replica never received the lost orders"
    );
    let records = broker.consume(&s.topic, lost.len(), TIMEOUT, SETTLE);
    let phantom = phantoms(&records, &rows);
    println!(
        "without the option: {} phantoms in Kafka, {} of the new primary's {} events published",
        phantom.len(),
        records.len() - phantom.len(),
        after.len()
    );
    assert_eq!(phantom.len(), lost.len(), "every lost order is a phantom");
    assert_eq!(
        records.len(),
        phantom.len(),
        "none of the new primary's orders reached Kafka"
    );
    assert!(forwarder.terminate().success());
}

/// A chain: the primary, a replica of it, and a replica of that replica.
/// The first replica stops receiving, the primary takes 500 orders and is
/// killed, the first replica is promoted (its own replica follows it) and
/// takes 500 more.
async fn with_the_option_what_a_failover_loses_never_reaches_kafka_and_the_new_primary_is_followed(
    flavor: Flavor,
) {
    let mut primary = DbServer::start(flavor, &[]).await;
    let replica = primary.start_replica_with_id(2).await;
    let its_replica = replica.start_replica_with_id(3).await;
    let broker = Broker::shared().await;
    let port = free_port();
    let s = Scenario::new(&primary, broker, 1, |c| {
        pointed_at(c, &[&primary, &replica, &its_replica])
            .mysql("publish_after_replicas", "1")
            .section(&format!(
                "[metrics]\nlisten = \"127.0.0.1:{port}\"\nready_max_lag_seconds = 2\n"
            ))
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;

    // In sync: published as they come.
    let before = orders(&s, &primary, 20).await;
    broker.consume_covering(&s.topic, &ids(&before), TIMEOUT, Duration::ZERO);

    replica.receive_from_primary(false).await;
    let lost = orders(&s, &primary, 500).await;
    forwarder
        .wait_for_log("holding: fewer than mysql.publish_after_replicas", TIMEOUT)
        .await;
    let why = wait_for_status(port, "/readyz", 503, TIMEOUT).await;
    assert!(why.contains("holding for"), "{why}");
    let (_, metrics) = try_http_get(port, "/metrics").unwrap();
    assert!(sample(&metrics, "outbox_forwarder_publish_held_seconds") >= 2.0);
    let replica_label = format!("replica=\"127.0.0.1:{}\"", replica.port);
    assert!(
        sample(
            &metrics,
            &format!("outbox_forwarder_replica_behind_transactions{{{replica_label}}}")
        ) >= 1.0,
        "{metrics}"
    );
    // Nothing of the 500 while no replica has them.
    let records = broker.consume(&s.topic, before.len(), TIMEOUT, SETTLE);
    assert_eq!(
        records.len(),
        before.len(),
        "none of the held orders published"
    );

    primary.kill9();
    replica.receive_from_primary(true).await;
    replica.promote().await;
    let after = orders(&s, &replica, 500).await;

    let rows = event_ids_in(&replica, &s.schema).await;
    assert!(ids(&lost).is_disjoint(&rows), "the lost orders are lost");
    assert!(ids(&after).is_subset(&rows));
    let records = broker.consume_covering(&s.topic, &rows, Duration::from_secs(120), SETTLE);
    let keyed = by_key(&records);
    let phantom = phantoms(&records, &rows);
    println!(
        "with the option: {} rows on the new primary, {} records, {} phantoms, {} repeated",
        rows.len(),
        records.len(),
        phantom.len(),
        records.len() - keyed.len()
    );
    assert!(phantom.is_empty(), "{} phantoms", phantom.len());
    assert_eq!(records.len(), keyed.len(), "each event once");
    assert!(
        forwarder
            .log()
            .contains("binlog stream started on another server of the topology, by GTID"),
        "the forwarder followed the new primary by itself:\n{}",
        forwarder.log()
    );
    wait_for_status(port, "/readyz", 200, TIMEOUT).await;
    assert!(forwarder.terminate().success());
}

/// The sequence number of domain 0 in a MariaDB GTID position.
fn seq_of(position: &str) -> u64 {
    position
        .split(',')
        .find_map(|gtid| gtid.strip_prefix("0-"))
        .and_then(|rest| rest.split('-').nth(1))
        .map_or(0, |seq| seq.parse().unwrap())
}

/// Three servers, the primary killed with kill -9 under a steady load five
/// times, its last transactions kept from the replicas (their I/O threads
/// stopped a moment before): each time the replica that received the most is promoted, the
/// other follows it, and the killed one is rebuilt as a replica of it (the
/// transactions only it had are gone). The primary moves back and forth
/// among the three; the forwarder is never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_primaries_killed_under_load_leave_kafka_equal_to_the_surviving_database() {
    let first = DbServer::start(Flavor::MariaDb, &[]).await;
    let second = first.start_replica_with_id(2).await;
    let third = first.start_replica_with_id(3).await;
    let mut servers = [first, second, third];
    let broker = Broker::shared().await;
    let s = Scenario::new(&servers[0], broker, 2, |c| {
        pointed_at(c, &[&servers[0], &servers[1], &servers[2]]).mysql("publish_after_replicas", "1")
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;

    let mut primary = 0;
    let mut committed = Vec::new();
    let mut history = Vec::new();
    for round in 1..=5 {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = steady_load(s.conn(&servers[primary]).await, stop.clone());
        tokio::time::sleep(Duration::from_millis(1200)).await;
        // The last transactions reach no replica: the crash takes them.
        for i in (0..3).filter(|&i| i != primary) {
            servers[i].receive_from_primary(false).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        servers[primary].kill9();
        let written = load.await.unwrap();
        assert!(
            written.len() > 50,
            "round {round}: a load ran ({})",
            written.len()
        );
        committed.extend(written);

        // The replica that received the most becomes the primary.
        let replicas: Vec<usize> = (0..3).filter(|&i| i != primary).collect();
        let mut reached = Vec::new();
        for &i in &replicas {
            reached.push((seq_of(&servers[i].settled_gtid_slave_pos().await), i));
        }
        reached.sort();
        let (next, other) = (reached[1].1, reached[0].1);
        servers[next].promote().await;
        servers[other].follow(&servers[next]).await;
        let killed = primary;
        let (promoted, killed_server) = if next < killed {
            let (low, high) = servers.split_at_mut(killed);
            (&low[next], &mut high[0])
        } else {
            let (low, high) = servers.split_at_mut(next);
            (&high[0], &mut low[killed])
        };
        killed_server
            .rebuild_as_replica_of(promoted, &s.schema)
            .await;
        history.push(format!("{} → {}", killed + 1, next + 1));
        primary = next;
    }
    // The last primary takes a few more, so every server has had a turn.
    let tail = orders(&s, &servers[primary], 20).await;

    let rows = event_ids_in(&servers[primary], &s.schema).await;
    assert!(ids(&tail).is_subset(&rows));
    let records = broker.consume_covering(&s.topic, &rows, Duration::from_secs(180), SETTLE);
    let keyed = by_key(&records);
    let phantom = phantoms(&records, &rows);
    let lost = ids(&committed).difference(&rows).count();
    println!(
        "failovers {}: {} orders committed, {lost} lost with the killed primaries, {} rows \
         survived, {} records, {} phantoms, {} repeated",
        history.join(", "),
        committed.len(),
        rows.len(),
        records.len(),
        phantom.len(),
        records.len() - keyed.len()
    );
    assert!(
        lost >= 5,
        "every crash took transactions with it ({lost} lost)"
    );
    assert!(phantom.is_empty(), "{} phantoms", phantom.len());
    assert_eq!(records.len(), keyed.len(), "each event once");
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_each_replica_and_whether_enough_of_them_replicate() {
    let (primary, replica, s) = gated_pair().await;
    let broker = Broker::shared().await;
    // The status of replication is read with SLAVE MONITOR.
    use mysql_async::prelude::Queryable;
    replica
        .root()
        .await
        .query_drop("GRANT SLAVE MONITOR ON *.* TO 'forwarder'@'%'")
        .await
        .unwrap();
    orders(&s, &primary, 3).await;
    replica
        .wait_for_gtid(&primary.gtid_binlog_pos().await, TIMEOUT)
        .await;

    let check = s.setup.command(&["check"]);
    let text = output_text(&check);
    assert!(check.status.success(), "{text}");
    let line = check_line(&text, "replica");
    assert!(line.starts_with("PASS"), "{line}");
    assert!(
        line.contains("candidate 2 of 2: read-only, replicating, applied 0-1-"),
        "{line}"
    );
    assert!(line.contains("0 s behind"), "{line}");
    assert!(check_line(&text, "publish_after_replicas").starts_with("PASS"));

    // A replica that stopped replicating would hold every transaction.
    replica.receive_from_primary(false).await;
    let text = output_text(&s.setup.command(&["check"]));
    let line = check_line(&text, "replica");
    assert!(
        line.starts_with("WARN") && line.contains("not replicating"),
        "{line}"
    );
    let line = check_line(&text, "publish_after_replicas");
    assert!(
        line.starts_with("WARN") && line.contains("1 needed; 0 of the other candidates replicate"),
        "{line}"
    );

    // More replicas than the candidates can provide: refused at once.
    let two = ForwarderSetup::new(
        &pointed_at(
            forwarder_config(&primary, broker, &s.schema, &s.topic, server_id()),
            &[&primary, &replica],
        )
        .mysql("publish_after_replicas", "2"),
    );
    let check = two.command(&["check"]);
    let text = output_text(&check);
    assert!(!check.status.success(), "{text}");
    assert!(
        text.contains("mysql.publish_after_replicas = 2 needs at least 3 candidates in mysql.url"),
        "{text}"
    );
}

/// Defect: a replica whose replication filters drop the outbox rows still
/// moves its GTID position past their transactions. It counted for
/// `publish_after_replicas` (and could be chosen as the source): events
/// reached Kafka that the replica, promoted, would not have. Such a
/// replica now confirms nothing and is not streamed from, and `check`
/// names its filters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_filters_the_outbox_rows_confirms_nothing() {
    let (primary, replica, s) = gated_pair().await;
    let broker = Broker::shared().await;
    // Reading a replica's filters takes SLAVE MONITOR on MariaDB.
    primary
        .root()
        .await
        .query_drop("GRANT SLAVE MONITOR ON *.* TO 'forwarder'@'%'")
        .await
        .unwrap();
    replica
        .wait_for_gtid(&primary.gtid_binlog_pos().await, TIMEOUT)
        .await;
    let mut root = replica.root().await;
    for statement in [
        "STOP SLAVE".to_string(),
        format!(
            "SET GLOBAL replicate_wild_ignore_table = '{}.outbox_event'",
            s.schema
        ),
        "START SLAVE".to_string(),
    ] {
        root.query_drop(statement).await.unwrap();
    }
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = orders(&s, &primary, 5).await;
    replica
        .wait_for_gtid(&primary.gtid_binlog_pos().await, TIMEOUT)
        .await;
    let rows_on_replica: Option<u64> = root
        .query_first(format!("SELECT COUNT(*) FROM `{}`.outbox_event", s.schema))
        .await
        .unwrap();
    assert_eq!(rows_on_replica, Some(0), "the replica has none of the rows");
    let records = broker.consume(&s.topic, 0, TIMEOUT, Duration::from_secs(5));
    assert!(
        records.is_empty(),
        "{} of {} events the replica lacks reached Kafka",
        records.len(),
        written.len()
    );
    forwarder
        .wait_for_log("holding: fewer than mysql.publish_after_replicas", TIMEOUT)
        .await;
    assert!(
        forwarder.log().contains("replication filters"),
        "{}",
        forwarder.log()
    );
    assert!(forwarder.terminate().success());
    let check = s.setup.command(&["check"]);
    let text = output_text(&check);
    assert!(text.contains("Replicate_Wild_Ignore_Table"), "{text}");
}

/// Defect: only six `Replicate_*` columns of the first channel were read:
/// a MariaDB replica that ignores a GTID domain (or a server id, or, on
/// MySQL, rewrites the schema) still counted for `publish_after_replicas`;
/// one whose filters its account could not read counted as unfiltered.
/// Both now confirm nothing, and the run holds, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_a_domain_filter_or_unreadable_filters_confirms_nothing() {
    let (primary, replica, s) = gated_pair().await;
    let broker = Broker::shared().await;
    replica
        .wait_for_gtid(&primary.gtid_binlog_pos().await, TIMEOUT)
        .await;
    let mut root = replica.root().await;
    for statement in [
        "STOP SLAVE",
        "CHANGE MASTER TO IGNORE_DOMAIN_IDS = (7)",
        "START SLAVE",
    ] {
        root.query_drop(statement).await.unwrap();
    }
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = orders(&s, &primary, 3).await;
    replica
        .wait_for_gtid(&primary.gtid_binlog_pos().await, TIMEOUT)
        .await;
    forwarder
        .wait_for_log("holding: fewer than mysql.publish_after_replicas", TIMEOUT)
        .await;
    assert!(
        forwarder.log().contains("Replicate_Ignore_Domain_Ids=7"),
        "{}",
        forwarder.log()
    );
    assert!(
        broker
            .consume(&s.topic, 0, TIMEOUT, Duration::from_secs(2))
            .is_empty(),
        "nothing published on its word"
    );
    assert!(forwarder.terminate().success());

    // No filter, but none it may read either.
    for statement in [
        "STOP SLAVE",
        "CHANGE MASTER TO IGNORE_DOMAIN_IDS = ()",
        "START SLAVE",
    ] {
        root.query_drop(statement).await.unwrap();
    }
    root.query_drop("REVOKE SLAVE MONITOR ON *.* FROM 'forwarder'@'%'")
        .await
        .unwrap();
    let mut forwarder = s.setup.spawn_streaming().await;
    forwarder
        .wait_for_log("cannot read the replica's replication filters", TIMEOUT)
        .await;
    assert!(
        broker
            .consume(&s.topic, 0, TIMEOUT, Duration::from_secs(2))
            .is_empty(),
        "{} events published on the word of a replica whose filters are unknown",
        written.len()
    );
    assert!(forwarder.terminate().success());
}

/// Defect: `backfill` (and `repair-gap`, which backfills) published rows
/// at once whatever `publish_after_replicas` said: a row the replicas did
/// not have yet reached Kafka, a phantom once a replica was promoted in
/// its place. Each chunk now waits until enough replicas have applied
/// the rows it read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_publishes_only_what_enough_replicas_have() {
    let (primary, replica, s) = gated_pair().await;
    let broker = Broker::shared().await;
    // The replica stops applying: the next rows are on the primary only.
    let mut root = replica.root().await;
    root.query_drop("STOP SLAVE SQL_THREAD").await.unwrap();
    let written = orders(&s, &primary, 5).await;

    let held = s
        .setup
        .command(&["backfill", "--all", "--replica-wait", "3s"]);
    let text = output_text(&held);
    let records = broker.consume(&s.topic, 0, TIMEOUT, Duration::from_secs(3));
    assert!(
        records.is_empty(),
        "{} of {} rows no replica has reached Kafka:\n{text}",
        records.len(),
        written.len()
    );
    assert!(!held.status.success(), "{text}");
    assert!(text.contains("publish_after_replicas"), "{text}");

    // Once the replica has them, they go.
    root.query_drop("START SLAVE SQL_THREAD").await.unwrap();
    let done = s.setup.command(&["backfill", "--all"]);
    let text = output_text(&done);
    assert!(done.status.success(), "{text}");
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    assert_eq!(records.len(), written.len(), "{text}");
}
