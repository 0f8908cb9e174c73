//! Active/standby: two forwarder processes of one `[ha]` group, each with
//! its own checkpoint store, against the shared MariaDB and broker.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::workload::*;
use harness::{
    unique, Broker, DbServer, Flavor, ForwarderProcess, ForwarderSetup, Record, TIMEOUT,
};

const LEASE_MS: u64 = 4000;

/// Two instances, A and B, of one group publishing the scenario's outbox.
struct Group {
    s: Scenario,
    b: ForwarderSetup,
    /// B's metrics listener (and barrier).
    b_metrics: u16,
    broker: &'static Broker,
}

/// A steady load: one order with one event every 3 ms until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    writer: tokio::task::JoinHandle<Vec<Written>>,
}

impl Load {
    /// Stops the writer; returns what it committed.
    async fn stop(self) -> Vec<Written> {
        self.stop.store(true, Ordering::Relaxed);
        self.writer.await.unwrap()
    }
}

impl Group {
    async fn new(db: &DbServer, broker: &Broker) -> Group {
        let group = unique("group");
        let shared = unique("checkpoints");
        broker.create_topic(&shared, 1);
        let ha = |instance: &str| {
            format!(
                "\n[ha]\ngroup = \"{group}\"\nlease_ms = {LEASE_MS}\ncheckpoint_topic = \"{shared}\"\ninstance = \"{instance}\"\n"
            )
        };
        let s = Scenario::new(db, broker, 2, |c| c + &ha("A")).await;
        let b_metrics = harness::free_port();
        let body = harness::http::with_metrics(
            forwarder_config(db, broker, &s.schema, &s.topic, server_id()) + &ha("B"),
            b_metrics,
        );
        Group {
            b: ForwarderSetup::new(&body),
            b_metrics,
            s,
            broker: Broker::shared().await,
        }
    }

    /// A group on the shared server of `flavor`, A active and B standing
    /// by, under a steady load.
    async fn under_load(flavor: Flavor) -> (Group, ForwarderProcess, ForwarderProcess, Load) {
        let db = DbServer::shared(flavor).await;
        let g = Group::new(db, Broker::shared().await).await;
        let (a, b) = g.start().await;
        let stop = Arc::new(AtomicBool::new(false));
        let writer = steady_load(g.s.conn(db).await, stop.clone());
        (g, a, b, Load { stop, writer })
    }

    /// A started first (active), then B (standby).
    async fn start(&self) -> (ForwarderProcess, ForwarderProcess) {
        let mut a = self.s.setup.spawn(&["--start-group"]);
        a.wait_for_log("became the active instance", TIMEOUT).await;
        a.wait_for_log("binlog stream started", TIMEOUT).await;
        let mut b = self.b.spawn(&[]);
        b.wait_for_log("standby: another instance holds the group's lock", TIMEOUT)
            .await;
        (a, b)
    }
}

/// Every written event is in the topic; returns the records.
fn all_arrived(broker: &Broker, topic: &str, written: &[Written]) -> Vec<Record> {
    let records = broker.consume_covering(topic, &ids(written), TIMEOUT, SETTLE);
    let keys: HashSet<String> = records.iter().map(|r| r.key_str().to_owned()).collect();
    assert_eq!(keys, ids(written), "every event, nothing else");
    records
}

// On both flavors: the group's lock is the server's named lock
// (`GET_LOCK`, freed when its session ends), and MySQL's is its own code.
harness::on_both_flavors!(the_standby_takes_over_within_seconds_of_the_active_one_being_killed);

async fn the_standby_takes_over_within_seconds_of_the_active_one_being_killed(flavor: Flavor) {
    let (g, mut a, mut b, load) = Group::under_load(flavor).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    a.kill9();
    let killed = Instant::now();
    b.wait_for_log("became the active instance", Duration::from_secs(10))
        .await;
    b.wait_for_log("binlog stream started", Duration::from_secs(10))
        .await;
    let took = killed.elapsed();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let written = load.stop().await;

    let records = all_arrived(g.broker, &g.s.topic, &written);
    println!(
        "takeover after kill -9: streaming again in {took:?}; {} events, {} records",
        written.len(),
        records.len()
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(
        records.iter().any(|r| published_by(r) == "A")
            && records.iter().any(|r| published_by(r) == "B"),
        "both published, one after the other"
    );
    assert_eq!(records.len(), written.len(), "no repeats");
    assert!(b.terminate().success());
}

/// `GET /acked` on `port` for `gtid`, waiting up to 3 s: (status, body).
fn barrier(port: u16, gtid: &str) -> (u16, String) {
    harness::http::http_get(port, &format!("/acked?gtid={gtid}&wait_ms=3000"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_answers_the_barrier_from_the_groups_records() {
    use mysql_async::prelude::Queryable;
    let db = DbServer::shared(Flavor::MariaDb).await;
    let g = Group::new(db, Broker::shared().await).await;
    let (a, mut b) = g.start().await;
    let mut conn = g.s.conn(db).await;
    let written = write_order(&mut conn, 1, false).await;
    let gtid: String = conn
        .query_first("SELECT @@last_gtid")
        .await
        .unwrap()
        .unwrap();
    // A transaction the server has not committed yet: the wait runs out.
    let (domain_server, seq) = gtid.rsplit_once('-').unwrap();
    let later = format!("{domain_server}-{}", seq.parse::<u64>().unwrap() + 1000);
    let (status, body) = barrier(g.b_metrics, &later);
    assert_eq!(status, 504, "{body}");
    // The committed one: acked once the active instance's checkpoint past
    // it reached the group's topic and B adopted it.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (status, body) = barrier(g.b_metrics, &gtid);
        if status == 200 {
            assert_eq!(body, "acked\n");
            break;
        }
        assert_eq!(status, 504, "{body}");
        assert!(Instant::now() < deadline, "{gtid}: {body}\n{}", b.log());
    }
    // And the message is in Kafka.
    all_arrived(g.broker, &g.s.topic, &written);
    assert!(b.log().contains("standby"), "B stood by throughout");
    assert!(!b.log().contains("became the active instance"));
    assert!(b.terminate().success());
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_active_instance_publishes_nothing_after_the_takeover_and_steps_down() {
    let (g, mut a, mut b, load) = Group::under_load(Flavor::MariaDb).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    a.freeze(true);
    b.wait_for_log("became the active instance", TIMEOUT).await;
    b.wait_for_log("binlog stream started", TIMEOUT).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    a.freeze(false);
    a.wait_for_log("stepping down", TIMEOUT).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let written = load.stop().await;

    let records = all_arrived(g.broker, &g.s.topic, &written);
    // Per partition, in offset order: once B has published, A never again.
    let after_takeover = assert_one_after_the_other(&records, "A", "B");
    assert!(after_takeover > 0, "B published after the takeover");
    assert!(
        records.iter().any(|r| published_by(r) == "A"),
        "A published before the freeze"
    );
    println!(
        "freeze: {} events, {} records, {after_takeover} after the takeover, none of them A's",
        written.len(),
        records.len()
    );
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_both_instances_under_load_loses_nothing() {
    let (g, mut a, mut b, load) = Group::under_load(Flavor::MariaDb).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // A hands over to B and comes back as the standby; then B to A.
    let handed_over = Instant::now();
    assert!(a.terminate().success());
    b.wait_for_log("became the active instance", Duration::from_secs(10))
        .await;
    let first_handover = handed_over.elapsed();
    let mut a = g.s.setup.spawn(&[]);
    a.wait_for_log("standby: another instance holds the group's lock", TIMEOUT)
        .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(b.terminate().success());
    a.wait_for_log("became the active instance", Duration::from_secs(10))
        .await;
    let mut b = g.b.spawn(&[]);
    b.wait_for_log("standby: another instance holds the group's lock", TIMEOUT)
        .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let written = load.stop().await;

    let records = all_arrived(g.broker, &g.s.topic, &written);
    println!(
        "rolling restart: {} events, {} records; first handover in {first_handover:?}",
        written.len(),
        records.len()
    );
    assert_eq!(records.len(), written.len(), "no repeats");
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

harness::on_both_flavors!(
    a_lock_held_by_another_account_is_named_and_the_group_publishes_once_it_is_gone
);

/// Defect: the group's lock has a predictable name and GET_LOCK needs no
/// privilege: any account on the server could hold it and keep the group
/// from ever publishing, unseen. An instance that finds the lock held by a
/// session of another account names it in its log and its metric, and
/// takes over once that session ends.
async fn a_lock_held_by_another_account_is_named_and_the_group_publishes_once_it_is_gone(
    flavor: Flavor,
) {
    use harness::http::{http_get, sample, with_metrics};
    use mysql_async::prelude::Queryable;
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let group = unique("group");
    let shared = unique("checkpoints");
    broker.create_topic(&shared, 1);
    let port = harness::free_port();
    let s = Scenario::new(db, broker, 1, |c| {
        with_metrics(c, port)
            + &format!(
                "\n[ha]\ngroup = \"{group}\"\nlease_ms = {LEASE_MS}\ncheckpoint_topic = \"{shared}\"\ninstance = \"A\"\n"
            )
    })
    .await;
    let squatter = unique("sq");
    db.root()
        .await
        .query_drop(format!("CREATE USER '{squatter}'@'%' IDENTIFIED BY 'pw'"))
        .await
        .unwrap();
    let mut held =
        mysql_async::Conn::from_url(format!("mysql://{squatter}:pw@127.0.0.1:{}/", db.port))
            .await
            .unwrap();
    let taken: Option<i64> = held
        .exec_first(
            "SELECT GET_LOCK(?, 0)",
            (format!("outbox-forwarder/{group}"),),
        )
        .await
        .unwrap();
    assert_eq!(taken, Some(1), "the other account holds the group's lock");

    let mut a = s.setup.spawn(&["--start-group"]);
    a.wait_for_log("not by an instance of the group", TIMEOUT)
        .await;
    let metric = "outbox_forwarder_ha_lock_held_by_other_account";
    assert_eq!(sample(&http_get(port, "/metrics").1, metric), 1.0);
    assert!(
        !a.log().contains("became the active instance"),
        "{}",
        a.log()
    );

    held.disconnect().await.unwrap();
    a.wait_for_log("binlog stream started", TIMEOUT).await;
    assert_eq!(sample(&http_get(port, "/metrics").1, metric), 0.0);
    let mut conn = s.conn(db).await;
    let written = write_order(&mut conn, 2, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(a.terminate().success(), "{}", a.log());
}
