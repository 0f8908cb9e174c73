//! Outages: the broker down, MySQL's connection killed and the server
//! restarted, a slow link, a restart that moves the checkpoint.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_for_a_while_holds_the_checkpoint_and_delivers_everything_after() {
    // A server of its own: on the shared one, other tests' transactions
    // (which touch no outbox table of this forwarder) may legitimately move
    // the checkpoint past `before_outage` before the first event written
    // during the outage holds it.
    let db = &DbServer::start(Flavor::MariaDb, &[]).await;
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
    let mut db = DbServer::start(Flavor::MariaDb, &[]).await;
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
async fn a_huge_row_over_a_slow_link_arrives_without_the_session_restarting() {
    // A server of its own: every binlog byte crosses the slow link.
    let db = &DbServer::start(Flavor::MariaDb, &[]).await;
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
    let mut db = DbServer::start(Flavor::MariaDb, &[]).await;
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

/// A small file system of its own (tmpfs) mounted at `dir`, unmounted
/// when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &std::path::Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mounting a tmpfs at {}", dir.display());
        SmallDisk(dir.to_owned())
    }

    /// Writes a file until the file system refuses: its error.
    fn fill(&self) -> std::io::Error {
        use std::io::Write;
        let mut filler = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0xa5u8; 64 << 10];
        loop {
            if let Err(e) = filler.write_all(&block).and_then(|()| filler.sync_all()) {
                return e;
            }
        }
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Why a forwarder refused to start on a full disk: it names the store
/// and the fix, and does not call the store damaged.
async fn refused_for_a_full_disk(setup: &harness::ForwarderSetup) {
    let mut refused = setup.spawn(&[]);
    let status = refused.wait_exit(TIMEOUT).await;
    let log = refused.log();
    assert!(!status.success(), "{log}");
    let store = setup.checkpoint_path().display().to_string();
    assert!(
        log.contains(&format!("the checkpoint store {store} (")) && log.contains("os error 28"),
        "{log}"
    );
    assert!(
        log.contains("its file system is full: free space there"),
        "{log}"
    );
    assert!(!log.contains("is damaged"), "{log}");
}

/// The checkpoint store's file system full: a forwarder is refused at
/// start, naming the store and the fix (not "damaged", which would send
/// the operator to move it aside); one running goes on publishing while
/// its store takes writes, and stops naming it when it no longer does;
/// nothing is read as empty. Once space is freed a restart resumes from
/// the last checkpoint, finds what was published since in the topics, and
/// every event is in Kafka once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_the_checkpoint_store_loses_nothing_and_says_where() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    let disk = SmallDisk::mount(&s.setup.checkpoint_path(), "4m");
    let full = disk.fill();
    assert_eq!(full.raw_os_error(), Some(28), "the disk is full: {full}");
    refused_for_a_full_disk(&s.setup).await;
    disk.free();

    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Full while it runs: what is written meanwhile still reaches Kafka.
    let full = disk.fill();
    assert_eq!(full.raw_os_error(), Some(28), "the disk is full: {full}");
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    let stopped = forwarder.terminate();
    let log = forwarder.log();
    assert!(
        stopped.success() || log.contains("its file system is full"),
        "{log}"
    );
    refused_for_a_full_disk(&s.setup).await;

    // Space again: from the last checkpoint, nothing lost, nothing twice.
    disk.free();
    let mut forwarder = s.setup.spawn_streaming().await;
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    // Each id once, and no record besides.
    assert_eq!(assert_each_once(&records, &ids(&written)), written.len());
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}
