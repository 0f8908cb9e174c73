//! What `mysql.publish_after_replicas` costs: commit read → ack with the
//! option off and on, side by side, the forwarder pointed at the primary
//! and a replica of it (loopback replication) in both, which goes first
//! alternating between rounds.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{free_port, unique, Broker, DbServer, ForwarderSetup};
use mysql_async::prelude::Queryable;

use crate::args::Args;
use crate::catch_up::{bench_config, wait_for_log};
use crate::latency::commit_at_rate;
use crate::sampling::{histogram_quantile, percentile, scrape};

/// How long the replica takes to apply what the primary has committed,
/// sampled every 10 ms until `stop`: the floor under the gate's hold.
async fn replica_apply_lag(
    db: &DbServer,
    replica: &DbServer,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Duration>> {
    let (mut primary, mut replica) = (db.root().await, replica.root().await);
    tokio::spawn(async move {
        let mut lags = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let asked = Instant::now();
            let position: String = primary
                .query_first("SELECT @@gtid_binlog_pos")
                .await
                .unwrap()
                .unwrap();
            let waited: Option<i64> = replica
                .exec_first("SELECT MASTER_GTID_WAIT(?, 5)", (position,))
                .await
                .unwrap();
            assert_eq!(waited, Some(0), "the replica applies within 5 s");
            lags.push(asked.elapsed());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        lags.sort();
        lags
    })
}

/// One forwarder run at `rate` events/s, in ms: (ack p50, ack p99) and
/// the replica's apply lag (p50, p99) meanwhile.
async fn ack_latency(
    args: &Args,
    db: &DbServer,
    replica: &DbServer,
    broker: &Broker,
    schema: &str,
    rate: u32,
    need: usize,
) -> [f64; 4] {
    let topic = unique("gate");
    broker.create_topic(&topic, args.partitions);
    let port = free_port();
    let from = db.position().await;
    let config = harness::http::with_metrics(
        bench_config(args, db, broker, schema, &topic, &from)
            .urls(vec![db.forwarder_url(), replica.forwarder_url()])
            .mysql("publish_after_replicas", &need.to_string()),
        port,
    );
    let setup = ForwarderSetup::new(&config);
    let mut forwarder = setup.spawn_with_env(&[], &[("RUST_LOG", "info")]);
    wait_for_log(&mut forwarder, "binlog stream started").await;
    commit_at_rate(db, schema, rate, 3, args.payload_bytes).await;
    let before = scrape(port).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lag = replica_apply_lag(db, replica, stop.clone()).await;
    commit_at_rate(db, schema, rate, args.latency_seconds, args.payload_bytes).await;
    stop.store(true, Ordering::Relaxed);
    let lag = lag.await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = scrape(port).unwrap();
    assert!(forwarder.terminate().success());
    assert!(
        after.forwarded > before.forwarded,
        "nothing acked with publish_after_replicas = {need}: is the replica replicating?"
    );
    let ms = |q| histogram_quantile(&before.buckets, &after.buckets, q) * 1000.0;
    let apply = |q| percentile(&lag, q).as_secs_f64() * 1000.0;
    [ms(0.5), ms(0.99), apply(0.5), apply(0.99)]
}

/// Prints the table of the option's cost (see the module doc).
pub(crate) async fn replica_gate_latency(
    args: &Args,
    db: &DbServer,
    replica: &DbServer,
    broker: &Broker,
    schema: &str,
) {
    println!(
        "\n## Waiting for replicas (`publish_after_replicas`, one replica on loopback; {} rounds \
         of {} s per rate, each after a 3 s warm-up; ms, medians over the rounds)\n",
        args.latency_rounds, args.latency_seconds
    );
    println!("| rate (events/s) | off: ack p50 | p99 | on (= 1): ack p50 | p99 | added p50 | added p99 | replica apply p50 | p99 |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &rate in &args.rates {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for round in 0..args.latency_rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for need in order {
                let measured = ack_latency(args, db, replica, broker, schema, rate, need).await;
                eprintln!(
                    "{rate}/s, round {}, publish_after_replicas = {need}: ack p50/p99 {:.1}/{:.1}, \
                     replica apply {:.1}/{:.1}",
                    round + 1,
                    measured[0],
                    measured[1],
                    measured[2],
                    measured[3]
                );
                if need == 0 { &mut off } else { &mut on }.push(measured);
            }
        }
        let mid = |runs: &[[f64; 4]], k: usize| {
            let mut values: Vec<f64> = runs.iter().map(|r| r[k]).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let (off50, off99) = (mid(&off, 0), mid(&off, 1));
        let (on50, on99) = (mid(&on, 0), mid(&on, 1));
        let both: Vec<[f64; 4]> = off.iter().chain(&on).copied().collect();
        println!(
            "| {rate} | {off50:.1} | {off99:.1} | {on50:.1} | {on99:.1} | {:+.1} | {:+.1} | {:.1} | {:.1} |",
            on50 - off50,
            on99 - off99,
            mid(&both, 2),
            mid(&both, 3)
        );
    }
}
