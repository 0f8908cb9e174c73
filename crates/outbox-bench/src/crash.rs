//! Restarts after kill -9 and after a clean stop: what each restart's tail
//! scan read back, and how long a restart takes to publish again.

use std::time::{Duration, Instant};

use harness::workload::{insert_events, Written};
use harness::{free_port, unique, Broker, DbServer, ForwarderProcess, ForwarderSetup};
use mysql_async::prelude::Queryable;
use outbox_core::BinlogPosition;

use crate::args::Args;
use crate::catch_up::{bench_config, wait_for_log};
use crate::sampling::scrape;

/// What one restart's read-back of the topic tails did, from its log line.
pub(crate) struct Resumed {
    /// Messages read back, events found after the checkpoint, milliseconds.
    pub(crate) read: u64,
    pub(crate) found: u64,
    pub(crate) took_ms: u64,
}

pub(crate) async fn resumed(forwarder: &mut ForwarderProcess) -> Resumed {
    wait_for_log(forwarder, "will not be republished").await;
    let log = forwarder.log();
    let line = log
        .lines()
        .find(|l| l.contains("will not be republished"))
        .expect("the line waited for");
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    Resumed {
        read: field("scan_read="),
        found: field("already_published="),
        took_ms: field("scan_ms="),
    }
}

/// Waits until the acked count of a forwarder that is streaming (its
/// resume line logged) has not moved for 2 s; it may stay 0 when the
/// killed run had published everything.
pub(crate) async fn wait_until_idle(port: u16) -> f64 {
    let mut last = (-1.0, Instant::now());
    loop {
        let forwarded = scrape(port).map_or(-1.0, |s| s.forwarded);
        if forwarded != last.0 {
            last = (forwarded, Instant::now());
        } else if forwarded >= 0.0 && last.1.elapsed() > Duration::from_secs(2) {
            return forwarded;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long restarts took to publish an event written as they started:
/// after a kill -9 once caught up, and after a clean stop.
pub(crate) struct FirstPublish {
    pub(crate) after_kill9: Duration,
    pub(crate) after_clean_stop: Duration,
}

/// Spawns the forwarder and writes one outbox row at once; returns it with
/// the time from its spawn to that row's ack.
async fn restart_publishing_one(
    spawn: &dyn Fn() -> ForwarderProcess,
    port: u16,
    db: &DbServer,
    schema: &str,
) -> (ForwarderProcess, Duration) {
    let spawned = Instant::now();
    let forwarder = spawn();
    let mut conn = db.root().await;
    conn.query_drop(format!("USE `{schema}`")).await.unwrap();
    insert_events(&mut conn, &[Written::new("restart", "{}")], false).await;
    while scrape(port).map_or(0.0, |s| s.forwarded) < 1.0 {
        assert!(
            spawned.elapsed() < Duration::from_secs(120),
            "no ack after the restart"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (forwarder, spawned.elapsed())
}

/// The forwarder on the backlog into a fresh topic, killed (-9) once 90 %
/// is acked and restarted; then killed and restarted again once idle; then
/// stopped cleanly and restarted. Returns, per kill, the events in the
/// topic at the kill (as acked) and what the restart's scan did, and the
/// time to the first publish after the last two restarts.
pub(crate) async fn crash_restarts(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    from: &BinlogPosition,
) -> (Vec<(f64, Resumed)>, FirstPublish) {
    let n = args.events as f64;
    let topic = unique("crash");
    broker.create_topic(&topic, args.partitions);
    let port = free_port();
    let config =
        harness::http::with_metrics(bench_config(args, db, broker, schema, &topic, from), port);
    let setup = ForwarderSetup::new(&config);
    let spawn = || setup.spawn_with_env(&[], &[("RUST_LOG", "info")]);
    let mut forwarder = spawn();
    let acked = loop {
        let forwarded = scrape(port).map_or(0.0, |s| s.forwarded);
        if forwarded >= 0.9 * n {
            break forwarded;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    forwarder.kill9();
    let mut forwarder = spawn();
    let mid_catch_up = resumed(&mut forwarder).await;
    // Everything is in the topic once the restarted forwarder is idle.
    wait_until_idle(port).await;
    forwarder.kill9();
    let (mut forwarder, after_kill9) = restart_publishing_one(&spawn, port, db, schema).await;
    let caught_up = resumed(&mut forwarder).await;
    assert!(forwarder.terminate().success());
    let (mut forwarder, after_clean_stop) = restart_publishing_one(&spawn, port, db, schema).await;
    assert!(
        forwarder.log().contains("after a clean stop"),
        "{}",
        forwarder.log()
    );
    assert!(forwarder.terminate().success());
    let first = FirstPublish {
        after_kill9,
        after_clean_stop,
    };
    (vec![(acked, mid_catch_up), (n, caught_up)], first)
}

/// Runs the restarts after kill -9 and prints what each read back.
pub(crate) async fn print_restarts(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    from: &BinlogPosition,
) {
    eprintln!("restarts after kill -9");
    let (restarts, first) = crash_restarts(args, db, broker, schema, from).await;
    println!(
        "\n## Restart after kill -9 ({} partitions, default in-flight window)\n",
        args.partitions
    );
    println!("| kill -9 | events in the topic at the kill (acked) | messages read back | events found, not published again | tail scan (ms) |");
    println!("|---|---:|---:|---:|---:|");
    for ((acked, r), when) in restarts
        .iter()
        .zip(["at 90 % of the catch-up", "once caught up"])
    {
        println!(
            "| {when} | {acked:.0} | {} | {} | {} |",
            r.read, r.found, r.took_ms
        );
    }
    println!("\n| restart of a caught-up forwarder | process start → an event written at the start acked (ms) |");
    println!("|---|---:|");
    println!(
        "| after kill -9 (the tails read back) | {} |",
        first.after_kill9.as_millis()
    );
    println!(
        "| after a clean stop (no read-back) | {} |",
        first.after_clean_stop.as_millis()
    );
}
