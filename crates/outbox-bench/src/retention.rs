//! `[retention]` inside `run`, on a primary written continuously, in front
//! of topics holding each of `--retention` messages stamped 12 hours before
//! the rows: what each pass reads of Kafka and takes, the rows left, and
//! the forwarder's CPU beside the same run without `[retention]`; then one
//! `prune` of the rows older than 20 s, proved by Kafka. The rows' time
//! column is a TIMESTAMP (the migration's) and then a DATETIME, which
//! reads the same only in one zone: the window then reaches 26 hours
//! further back, over the history, and `[retention]` proves nothing from
//! the first 26 hours of its line.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::workload::{steady_load, Scenario};
use harness::{Broker, DbServer};
use mysql_async::prelude::Queryable;

use crate::args::Args;
use crate::cpu::cpu_seconds;

/// How long each run writes.
const RUN: Duration = Duration::from_secs(60);

/// `[retention]` as the runs configure it: rows older than 20 s, a pass
/// every 10 s.
const SECTION: &str =
    "[retention]\nolder_than_seconds = 20\ninterval_seconds = 10\nclock_margin_seconds = 0";

/// One run: the transactions written, the rows left, the forwarder's CPU
/// and each retention pass's (deleted, Kafka messages read, ms).
struct RetentionRun {
    history: usize,
    column: &'static str,
    retention: bool,
    written: usize,
    left: u64,
    cpu: f64,
    passes: Vec<(u64, u64, u64)>,
    /// One `prune` after the run: messages read, and its time.
    prune: (u64, Duration),
}

/// A number after `key=` in a log line.
fn field(line: &str, key: &str) -> Option<u64> {
    let rest = line.split_once(&format!("{key}="))?.1;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The passes a forwarder's log reports: (deleted, messages read, ms).
fn passes(log: &str) -> Vec<(u64, u64, u64)> {
    log.lines()
        .filter(|l| l.contains("retention: rows older than the cut-off"))
        .map(|l| {
            let read = l
                .split_once("Kafka messages read ")
                .and_then(|(_, r)| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            (
                field(l, "deleted").unwrap_or(0),
                read,
                field(l, "took_ms").unwrap_or(0),
            )
        })
        .collect()
}

async fn one_run(
    db: &DbServer,
    broker: &Broker,
    partitions: u32,
    (history, column, retention): (usize, &'static str, bool),
) -> RetentionRun {
    let s = Scenario::new(db, broker, partitions, |c| match retention {
        true => c.section(SECTION),
        false => c,
    })
    .await;
    s.grant_delete(db).await;
    let mut c = s.conn(db).await;
    c.query_drop(format!(
        "ALTER TABLE outbox_event MODIFY created_at {column} NOT NULL \
         DEFAULT CURRENT_TIMESTAMP(6)"
    ))
    .await
    .unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    broker.fill(
        &s.topic,
        partitions as i32,
        history,
        now_ms - 12 * 3_600_000,
    );
    let mut forwarder = s.setup.spawn_streaming().await;
    let pid = forwarder.pid().expect("running");
    let cpu_before = cpu_seconds(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let load = steady_load(s.conn(db).await, stop.clone());
    tokio::time::sleep(RUN).await;
    stop.store(true, Ordering::Relaxed);
    let written = load.await.unwrap().len();
    let cpu = cpu_seconds(pid) - cpu_before;
    let left: u64 = c
        .query_first("SELECT COUNT(*) FROM outbox_event")
        .await
        .unwrap()
        .unwrap();
    let passes = passes(&forwarder.log());
    let log = forwarder.log();
    assert!(
        !retention || log.contains("retention: rows older than the cut-off"),
        "no retention pass logged:\n{log}"
    );
    assert!(forwarder.terminate().success(), "{log}");
    let started = Instant::now();
    let pruned = s
        .setup
        .command(&["prune", "--older-than", "20s", "--pause", "0ms"]);
    let took = started.elapsed();
    let out = harness::forwarder::output_text(&pruned);
    assert!(pruned.status.success(), "{out}");
    let prune = (
        harness::forwarder::reported(&out, "Kafka messages read"),
        took,
    );
    RetentionRun {
        history,
        column,
        retention,
        written,
        left,
        cpu,
        passes,
        prune,
    }
}

/// `--retention`: each history size, each time column, with and without
/// `[retention]`, then the table.
pub async fn retention(args: &Args, db: &DbServer, broker: &Broker) {
    let mut runs = Vec::new();
    for &history in &args.retention {
        for column in ["TIMESTAMP(6)", "DATETIME(6)"] {
            for on in [false, true] {
                eprintln!("retention {on}: {history} messages of history, created_at {column}");
                let run = one_run(db, broker, args.partitions, (history, column, on)).await;
                runs.push(run);
            }
        }
    }
    println!(
        "\n[retention] (rows older than 20 s, a pass every 10 s) for {} s on a primary \
         written continuously; each topic ({} partitions) first holds the history, stamped \
         12 hours before the rows",
        RUN.as_secs(),
        args.partitions
    );
    println!(
        "{:>9} {:>13} {:>9} {:>8} {:>6} {:>9} {:>7} {:>10} {:>9} {:>11} {:>9}",
        "history",
        "created_at",
        "retention",
        "written",
        "left",
        "fwd CPU",
        "passes",
        "read/pass",
        "ms/pass",
        "prune read",
        "prune"
    );
    for run in &runs {
        let n = run.passes.len().max(1) as u64;
        let read: u64 = run.passes.iter().map(|p| p.1).sum();
        let ms: u64 = run.passes.iter().map(|p| p.2).sum();
        println!(
            "{:>9} {:>13} {:>9} {:>8} {:>6} {:>8.1}s {:>7} {:>10} {:>9} {:>11} {:>8.1}s",
            run.history,
            run.column,
            if run.retention { "on" } else { "off" },
            run.written,
            run.left,
            run.cpu,
            run.passes.len(),
            read / n,
            ms / n,
            run.prune.0,
            run.prune.1.as_secs_f64()
        );
    }
}
