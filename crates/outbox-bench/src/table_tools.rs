//! The table tools on topics with a long history: `repair-gap` and
//! `prune` on the same rows, in front of topics holding each of
//! `--table-tools` messages stamped two days before the rows. They read the
//! rows' window, so their time and the messages they read should not grow
//! with the history.

use std::time::{Duration, Instant};

use harness::forwarder::reported;
use harness::workload::{purge_all_but_the_newest_binlog, write_order, Scenario};
use harness::{Broker, DbServer};
use mysql_async::prelude::Queryable;

use crate::args::Args;

/// Rows streamed before the gap, and rows in the gap.
const ROWS: usize = 1_000;

/// One history size: what `repair-gap` and `prune` read and took.
struct ToolRun {
    history: usize,
    fill: Duration,
    /// One read of the whole history (what each comparison cost before
    /// the tools read the rows' window), which also proves it is there.
    whole: Duration,
    repair: (Duration, u64),
    prune: (Duration, u64),
}

/// Runs `args` of the forwarder's command line to success: its time and
/// output.
fn timed(scenario: &Scenario, args: &[&str]) -> (Duration, String) {
    let started = Instant::now();
    let output = scenario.setup.command(args);
    let took = started.elapsed();
    let text = harness::forwarder::output_text(&output);
    assert!(output.status.success(), "{args:?}: {text}");
    (took, text)
}

async fn one_size(db: &DbServer, broker: &Broker, partitions: u32, history: usize) -> ToolRun {
    let s = Scenario::new(db, broker, partitions, |c| c).await;
    s.grant_delete(db).await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let started = Instant::now();
    broker.fill(
        &s.topic,
        partitions as i32,
        history,
        now_ms - 2 * 86_400_000,
    );
    let fill = started.elapsed();
    let started = Instant::now();
    let read = broker.consume(&s.topic, history, Duration::from_secs(600), Duration::ZERO);
    assert_eq!(read.len(), history);
    drop(read);
    let whole = started.elapsed();

    let mut c = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    for _ in 0..ROWS / 10 {
        write_order(&mut c, 10, true).await;
    }
    // A clean stop drains what it has read; rows it has not read yet fall
    // into the gap (the repair publishes them too).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(forwarder.terminate().success());
    for _ in 0..ROWS / 10 {
        write_order(&mut c, 10, true).await;
    }
    purge_all_but_the_newest_binlog(db, &mut c).await;
    let (took, out) = timed(&s, &["repair-gap"]);
    assert!(reported(&out, "published") >= ROWS as u64, "{out}");
    let repair = (took, reported(&out, "Kafka messages read"));

    c.query_drop("UPDATE outbox_event SET created_at = NOW(6) - INTERVAL 1 HOUR")
        .await
        .unwrap();
    let (took, out) = timed(&s, &["prune", "--older-than", "10m", "--pause", "0ms"]);
    assert_eq!(reported(&out, "deleted"), 2 * ROWS as u64, "{out}");
    let prune = (took, reported(&out, "Kafka messages read"));
    ToolRun {
        history,
        fill,
        whole,
        repair,
        prune,
    }
}

/// `--table-tools`: each history size in turn, then the table.
pub async fn table_tools(args: &Args, db: &DbServer, broker: &Broker) {
    let mut runs = Vec::new();
    for &history in &args.table_tools {
        eprintln!("table tools: {history} messages of history");
        runs.push(one_size(db, broker, args.partitions, history).await);
    }
    println!(
        "\nTable tools: {ROWS} rows streamed and {ROWS} in a purged gap, then all {} an hour \
         old; each topic ({} partitions) first holds the history, stamped two days earlier",
        2 * ROWS,
        args.partitions
    );
    println!(
        "{:>12} {:>10} {:>11} {:>11} {:>8} {:>9} {:>8}",
        "history", "filled in", "whole read", "repair-gap", "read", "prune", "read"
    );
    for run in &runs {
        println!(
            "{:>12} {:>9.1}s {:>10.1}s {:>10.1}s {:>8} {:>8.1}s {:>8}",
            run.history,
            run.fill.as_secs_f64(),
            run.whole.as_secs_f64(),
            run.repair.0.as_secs_f64(),
            run.repair.1,
            run.prune.0.as_secs_f64(),
            run.prune.1
        );
    }
}
