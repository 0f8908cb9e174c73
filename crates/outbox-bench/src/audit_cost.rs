//! What `[audit]` costs: the forwarder streaming at each of `--rates` with
//! the auditor off and on, in turn (which goes first alternates between
//! rounds): its CPU, what it forwarded, the rows the auditor proved, and
//! the primary's reads per second (`Handler_read_*`, SELECTs) meanwhile.
//! The auditor runs every 10 s with a 5 s settle delay instead of its
//! default minute and minute, so that a run holds several passes: each
//! pass has a fixed part (connections, the window's search), so this is
//! an upper bound of the default's cost.

use std::time::{Duration, Instant};

use harness::{free_port, unique, Broker, DbServer, ForwarderSetup};
use mysql_async::prelude::Queryable;

use crate::args::Args;
use crate::catch_up::{bench_config_audited, wait_for_log};
use crate::cpu::cpu_seconds;
use crate::latency::commit_at_rate;

/// Seconds measured per run, after a 3 s warm-up.
const RUN_SECONDS: u64 = 40;

/// One run's measures.
#[derive(Clone, Copy)]
struct Measured {
    /// Forwarder CPU, in % of one core.
    cpu_percent: f64,
    /// Events acked per second.
    forwarded: f64,
    /// Rows the auditor proved per second.
    proven: f64,
    /// The primary's row reads (its `Handler_read_*` counters) and
    /// SELECTs per second.
    rows_read: f64,
    selects: f64,
}

/// The sum of the server's `SHOW GLOBAL STATUS` counters named like
/// `pattern` (one of ours).
async fn global_status(db: &DbServer, pattern: &'static str) -> f64 {
    let mut conn = db.root().await;
    let rows: Vec<(String, String)> = conn
        .query(format!("SHOW GLOBAL STATUS LIKE '{pattern}'"))
        .await
        .unwrap();
    rows.iter().map(|(_, v)| v.parse().unwrap_or(0.0)).sum()
}

fn series(port: u16, name: &str) -> f64 {
    let (_, body) = harness::http::http_get(port, "/metrics");
    body.lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn run(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    rate: u32,
    audit: bool,
) -> Measured {
    // The run before wrote its rows to another topic: let them fall out of
    // the auditor's first look back (its interval and settle delay, less
    // the first pass's wait), so that it is not asked to find them here.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let topic = unique("audit");
    broker.create_topic(&topic, args.partitions);
    let port = free_port();
    let from = db.position().await;
    let audit_section = match audit {
        true => "[audit]\nenabled = true\ninterval_seconds = 10\nsettle_seconds = 5",
        false => "[audit]\nenabled = false",
    };
    let config = harness::http::with_metrics(
        bench_config_audited(args, db, broker, schema, &topic, &from, audit_section),
        port,
    );
    let setup = ForwarderSetup::new(&config);
    let mut forwarder = setup.spawn_with_env(&[], &[("RUST_LOG", "info")]);
    wait_for_log(&mut forwarder, "binlog stream started").await;
    commit_at_rate(db, schema, rate, 3, args.payload_bytes).await;
    let pid = forwarder.pid().expect("the forwarder runs");
    let (cpu0, forwarded0, proven0) = (
        cpu_seconds(pid),
        series(port, "outbox_forwarder_events_forwarded_total"),
        series(port, "outbox_forwarder_audit_proven_rows_total"),
    );
    let (rows0, selects0) = (
        global_status(db, "Handler_read%").await,
        global_status(db, "Com_select").await,
    );
    let started = Instant::now();
    commit_at_rate(db, schema, rate, RUN_SECONDS, args.payload_bytes).await;
    let seconds = started.elapsed().as_secs_f64();
    let measured = Measured {
        cpu_percent: (cpu_seconds(pid) - cpu0) / seconds * 100.0,
        forwarded: (series(port, "outbox_forwarder_events_forwarded_total") - forwarded0) / seconds,
        proven: (series(port, "outbox_forwarder_audit_proven_rows_total") - proven0) / seconds,
        rows_read: (global_status(db, "Handler_read%").await - rows0) / seconds,
        selects: (global_status(db, "Com_select").await - selects0) / seconds,
    };
    assert!(forwarder.terminate().success());
    if audit {
        let log = forwarder.log();
        assert!(measured.proven > 0.0, "the auditor proved nothing:\n{log}");
        // A healthy run: a row named unproven is a false alarm.
        let named: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("is not in Kafka") || l.contains("audit: the pass could not"))
            .collect();
        assert!(
            named.is_empty(),
            "the auditor named rows or failed in a healthy run:\n{}",
            named.join("\n")
        );
    }
    measured
}

/// Prints the table of the auditor's cost (see the module doc).
pub(crate) async fn audit_cost(args: &Args, db: &DbServer, broker: &Broker, schema: &str) {
    println!(
        "\n## The auditor's cost (`[audit]` every 10 s, settle 5 s; {} rounds of {RUN_SECONDS} s \
         per rate and setting, after a 3 s warm-up; medians over the rounds)\n",
        args.latency_rounds
    );
    println!(
        "| rate (events/s) | audit | forwarded/s | proven/s | forwarder CPU (% of a core) | \
         CPU µs/event | primary row reads/s | SELECTs/s |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for &rate in &args.rates {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for round in 0..args.latency_rounds {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for audit in order {
                let m = run(args, db, broker, schema, rate, audit).await;
                eprintln!(
                    "{rate}/s, round {}, audit {audit}: {:.0} forwarded/s, {:.0} proven/s, CPU \
                     {:.1} %, {:.0} row reads/s, {:.1} SELECTs/s",
                    round + 1,
                    m.forwarded,
                    m.proven,
                    m.cpu_percent,
                    m.rows_read,
                    m.selects
                );
                if audit { &mut on } else { &mut off }.push(m);
            }
        }
        let mid = |runs: &[Measured], f: fn(&Measured) -> f64| {
            let mut values: Vec<f64> = runs.iter().map(f).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        for (name, runs) in [("off", &off), ("on", &on)] {
            let cpu = mid(runs, |m| m.cpu_percent);
            let forwarded = mid(runs, |m| m.forwarded);
            println!(
                "| {rate} | {name} | {forwarded:.0} | {:.0} | {cpu:.1} | {:.2} | {:.0} | {:.1} |",
                mid(runs, |m| m.proven),
                cpu / 100.0 / forwarded.max(1.0) * 1e6,
                mid(runs, |m| m.rows_read),
                mid(runs, |m| m.selects),
            );
        }
    }
}
