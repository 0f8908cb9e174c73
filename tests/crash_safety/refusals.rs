//! What the forwarder refuses at start: a purged checkpoint binlog, a
//! checkpoint of another server, a second forwarder on one store.

use super::*;

// A purge on both flavors: MySQL (GTIDs on) answers the dump request from
// its `gtid_purged`, MariaDB from its binlog files.
harness::on_both_flavors!(purged_checkpoint_binlog_fails_start_clearly_and_leaves_the_checkpoint);

async fn purged_checkpoint_binlog_fails_start_clearly_and_leaves_the_checkpoint(flavor: Flavor) {
    let db = DbServer::start(flavor, &[]).await;
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
    let newest = purge_all_but_the_newest_binlog(&db, &mut c).await;
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
    // MariaDB names the files that are left; MySQL, resuming by GTID, the
    // transactions its purge took.
    let what_is_gone = match flavor {
        Flavor::MariaDb => format!("oldest binlog the server still has: {newest}"),
        Flavor::MySql => {
            let purged: String = c
                .query_first("SELECT @@global.gtid_purged")
                .await
                .unwrap()
                .unwrap();
            let purged: outbox_core::MySqlGtidSet = purged.replace('\n', "").parse().unwrap();
            let Some(outbox_core::GtidState::MySql(covered)) = &checkpoint.gtid else {
                panic!("a MySQL GTID set in the checkpoint: {:?}", checkpoint.gtid);
            };
            format!(
                "the server has purged transactions after the checkpoint: {} \
                 (gtid_purged is {purged})",
                purged.minus(covered)
            )
        }
    };
    assert!(log.contains(&what_is_gone), "{what_is_gone}:\n{log}");
    assert!(log.contains("repair-gap"), "says what to do:\n{log}");
    assert_eq!(
        s.setup.checkpoint().unwrap(),
        checkpoint,
        "checkpoint untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_from_another_server_is_refused_unless_overridden() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    // Not of the shared server's topology: its own server id, so its GTIDs
    // are another history.
    let other = DbServer::start(Flavor::MariaDb, &["--server-id=5"]).await;
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
    let db = DbServer::shared(Flavor::MariaDb).await;
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
