//! Who resumes, from where, when the database fails over: the server that
//! serves the checkpoint is chosen over an old primary back and writable,
//! and a failover with a kill -9 of the active instance loses nothing.

use super::*;

/// Defect: every start walked `mysql.url` from its first entry, so an old
/// primary that came back writable after a failover was chosen, refused
/// (it lacks the new primary's transactions), and the new primary was
/// never tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_primary_back_and_writable_is_passed_over_for_the_one_that_serves_the_checkpoint() {
    let mut old_primary = DbServer::start(Flavor::MariaDb, &[]).await;
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
    let mut primary = DbServer::start(Flavor::MariaDb, &[]).await;
    let replica = primary.start_replica().await;
    let servers = [&primary, &replica];
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(&primary, broker, 2, |c| c).await;
    // A writes no periodic checkpoint, so everything it publishes is in
    // the tails of the one it writes before its first message (with the
    // topic's tails): its kill is certain to leave published messages
    // past its last checkpoint, whatever the timing.
    let a_setup = instance_with(&servers, broker, &s, &names, "A", |c| {
        c.flush_interval_ms(600_000)
    });
    let b_setup = instance(&servers, broker, &s, &names, "B");
    let mut a = a_setup.spawn(&["--start-group"]);
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
         {repeats} repeated, {} of A's found in the tails by B",
        rows.len(),
        records.len(),
        already_published(&b.log())
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
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let mut down = DbServer::start(Flavor::MariaDb, &[]).await;
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
