//! Who may publish: the lock follows the writable server, an instance
//! stopped during its hold-off hands nothing over, and two writable
//! candidates are refused until one is left.

use super::*;

/// Defect: the active instance confirmed its lock on the server it took it
/// on, and never asked whether that server still took writes. After a
/// switchover that left the old primary running as a replica, a new
/// instance took the lock on the new primary and both published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_switchover_the_active_instance_moves_its_lock_to_the_new_primary() {
    let old_primary = DbServer::start(Flavor::MariaDb, &[]).await;
    let new_primary = old_primary.start_replica().await;
    let servers = [&old_primary, &new_primary];
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(&old_primary, broker, 2, |c| c).await;
    let a_setup = instance(&servers, broker, &s, &names, "A");
    let mut a = a_setup.spawn(&["--start-group"]);
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
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let names = GroupNames::new(broker);
    let s = Scenario::new(db, broker, 1, |c| c + &names.ha("A")).await;
    let b_setup = instance(&[db], broker, &s, &names, "B");
    let mut a = s.setup.spawn(&["--start-group"]);
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

/// Two candidates that both take writes and both hold the checkpoint's
/// transactions (a former primary left writable): which one the
/// application writes to cannot be told, so the forwarder waits and says
/// so rather than stream from (or take the group's lock on) a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writable_candidates_that_both_serve_are_refused_until_one_is_left() {
    let primary = DbServer::start(Flavor::MariaDb, &[]).await;
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

/// Defect: a holder that could not read the group's topic (an ACL, DNS on
/// its host, a broker it cannot reach) kept the lock for ever, retrying
/// every 2 s, and no instance that might read it could take over. It now
/// gives the lock back after failing for two leases (10 s at least).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_read_the_groups_topic_gives_the_lock_back() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::start(false).await;
    let names = GroupNames::new(&broker);
    let s = Scenario::new(db, &broker, 1, |c| c + &names.ha("A")).await;
    let b_setup = instance(&[db], &broker, &s, &names, "B");
    let c_setup = instance(&[db], &broker, &s, &names, "C");
    let mut a = s.setup.spawn(&["--start-group"]);
    a.wait_for_log("binlog stream started", TIMEOUT).await;
    let mut conn = s.conn(db).await;
    let mut written = Vec::new();
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    let mut b = b_setup.spawn(&[]);
    b.wait_for_log("standby: another instance holds the group's lock", TIMEOUT)
        .await;
    // A dies and the broker stops answering: B takes the lock and cannot
    // read where the group stopped.
    broker.freeze(true);
    a.kill9();
    b.wait_for_log("became the active instance", TIMEOUT).await;
    b.wait_for_log("cannot establish the group's checkpoint", TIMEOUT)
        .await;
    let mut c = c_setup.spawn(&[]);
    c.wait_for_log("standby: another instance holds the group's lock", TIMEOUT)
        .await;
    b.wait_for_log("stepped aside", Duration::from_secs(40))
        .await;
    c.wait_for_log("became the active instance", Duration::from_secs(20))
        .await;
    // The broker back: the group resumes where it stopped, nothing lost.
    broker.freeze(false);
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    let keys: std::collections::HashSet<&str> = records.iter().map(|r| r.key_str()).collect();
    assert_eq!(keys.len(), written.len(), "every event");
    assert!(b.terminate().success());
    assert!(c.terminate().success());
}
