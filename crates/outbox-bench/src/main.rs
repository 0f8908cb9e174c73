//! `outbox-bench`: throughput, latency and memory of the forwarder on this
//! machine, against a MariaDB and a broker it starts itself (loopback only),
//! in one run:
//!
//! 1. catch-up: N outbox events written while the forwarder is stopped, then
//!    the forwarder (release binary, its own process) started from the
//!    position before the load; events/s and MB/s until all are acked, and
//!    its peak RSS;
//! 2. the two ceilings of the same run: binlog read + decode of the same
//!    range with no Kafka, and raw idempotent produce of N messages of the
//!    same size to the same broker; ceilings and catch-up are measured in
//!    rounds (default 3, each a fresh topic and checkpoint) and the medians
//!    reported;
//! 3. the inbox: `notification-planner`'s consumer and handler, with their
//!    default settings, on the first events of the topic the forwarder
//!    filled: from start to the last inbox row committed, events/s and the
//!    MySQL transactions per event;
//! 4. restart after kill -9: the forwarder killed at 90 % of a catch-up of
//!    the backlog, restarted, then killed and restarted again once caught
//!    up (a full topic, an empty window): what each restart's tail scan read
//!    back and found, and how long it took;
//! 5. steady-state latency at fixed commit rates, in rounds: commit read →
//!    broker ack (the forwarder's histogram, with the part of it spent in
//!    the producer) and commit → readable by a consumer, next to the same
//!    round's floors: a plain producer with the forwarder's settings but
//!    `linger.ms=0` at the same rate (produce → ack, and produce → readable
//!    by the same consumer; with `--floor-under-load` while the writers
//!    commit at that rate too), and a binlog reader of the benchmark's own
//!    (commit → read and decoded);
//! 6. with `--replica-gate`, the same commit read → ack with
//!    `mysql.publish_after_replicas` off and at 1, side by side;
//! 7. with `--table-tools SIZES`, `repair-gap` and `prune` in front of
//!    topics with each size of history (and nothing else);
//! 8. with `--id-keys ROWS`, outbox inserts per second with UUIDv4 against
//!    UUIDv7 event ids as the table grows past the buffer pool (and nothing
//!    else);
//! 9. with `--audit-cost`, the forwarder streaming at `--rates` with
//!    `[audit]` off and on (and nothing else).
//!
//! Run: `cargo build --release -p outbox-forwarder -p outbox-bench &&
//! target/release/outbox-bench` (see `--help`).

use clap::Parser;
use harness::{unique, Broker, DbServer, Flavor, ForwarderSetup};
use mysql_async::prelude::Queryable;
use outbox_forwarder::ForwarderConfig;

mod args;
mod audit_cost;
mod backlog;
mod catch_up;
mod ceilings;
mod cpu;
mod crash;
mod id_keys;
mod inbox_run;
mod latency;
mod replica_gate;
mod report;
mod retention;
mod sampling;
mod table_tools;
use args::Args;
use audit_cost::*;
use backlog::*;
use catch_up::*;
use crash::*;
use id_keys::*;
use inbox_run::*;
use latency::*;
use replica_gate::*;
use report::*;
use retention::*;
use table_tools::*;

/// The forwarder's allocator, so that the ceilings run on it too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The benchmark's server of `flavor`, durable or not as `args` say; under
/// `--replica-gate` (MariaDB's) a replica of it; and the benchmark's schema.
async fn start_database(args: &Args, flavor: Flavor) -> (DbServer, Option<DbServer>, String) {
    let durable = ["--innodb-flush-log-at-trx-commit=1", "--sync-binlog=1"];
    let db = DbServer::start(
        flavor,
        if args.relaxed_durability {
            &[]
        } else {
            &durable
        },
    )
    .await;
    // Started before the schema exists, so that it replicates all of it.
    let replica = match args.replica_gate && flavor == Flavor::MariaDb {
        true => Some(db.start_replica().await),
        false => None,
    };
    let schema = unique("bench");
    let mut conn = db.create_schema(&schema).await;
    if args.extra_headers {
        conn.query_drop(EXTRA_HEADER_COLUMNS).await.unwrap();
    }
    drop(conn);
    (db, replica, schema)
}

/// `--mysql`: the catch-up rounds on a MySQL server of their own, from the
/// same backlog, and their medians beside MariaDB's (`mariadb`).
async fn mysql_catch_up(args: &Args, broker: &Broker, mariadb: &[Round]) {
    let n = args.events;
    eprintln!("starting MySQL ({})", args.durability());
    let (db, _, schema) = start_database(args, Flavor::MySql).await;
    eprintln!("writing {n} transactions on MySQL");
    let from = db.position().await;
    let wrote = write_backlog(&db, &schema, n, args.payload_bytes).await;
    let setup = ForwarderSetup::new(&bench_config(args, &db, broker, &schema, "t", &from));
    let config = ForwarderConfig::load(&setup.config_path).unwrap();
    let (rounds, mut running) = catch_up_rounds(args, &db, broker, &schema, &from, &config).await;
    assert!(running.forwarder.terminate().success());
    println!("\nMySQL 9.7: {}", args.durability());
    print_catch_up(args, n, wrote, &rounds);
    let catch_up = |rounds: &[Round]| median(rounds, &|r| r.catch_up.rate).0;
    let cpu = |rounds: &[Round]| median(rounds, &|r| r.catch_up.cpu.us_per_event).0;
    println!(
        "\nforwarder catch-up, MySQL / MariaDB (medians, rounds one after the other): {:.3}; \
         CPU {:.1} against {:.1} µs/event",
        catch_up(&rounds) / catch_up(mariadb),
        cpu(&rounds),
        cpu(mariadb)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    outbox_forwarder::memory::no_transparent_huge_pages();
    let args = Args::parse();
    if args.id_keys.is_some() {
        let flavor = if args.mysql {
            Flavor::MySql
        } else {
            Flavor::MariaDb
        };
        id_keys(&args, flavor).await;
        return;
    }
    // The release forwarder lives beside this binary.
    let exe = std::env::current_exe().unwrap();
    let forwarder_bin = exe.with_file_name("outbox-forwarder");
    assert!(
        forwarder_bin.exists(),
        "build it first: cargo build --release -p outbox-forwarder"
    );
    std::env::set_var("OUTBOX_FORWARDER_BIN", &forwarder_bin);

    eprintln!("starting MariaDB ({}) and the broker", args.durability());
    let (db, replica, schema) = start_database(&args, Flavor::MariaDb).await;
    println!("\nMariaDB: {}", args.durability());
    let broker = Broker::start(false).await;
    if !args.table_tools.is_empty() {
        table_tools(&args, &db, &broker).await;
        return;
    }
    if !args.retention.is_empty() {
        retention(&args, &db, &broker).await;
        return;
    }
    if args.audit_cost {
        audit_cost(&args, &db, &broker, &schema).await;
        return;
    }
    let n = args.events;

    eprintln!("writing {n} transactions");
    let from = db.position().await;
    let wrote = write_backlog(&db, &schema, n, args.payload_bytes).await;
    // Read as the forwarder reads it: ceiling (b) produces with its settings.
    let setup = ForwarderSetup::new(&bench_config(&args, &db, &broker, &schema, "t", &from));
    let config = ForwarderConfig::load(&setup.config_path).unwrap();

    let (rounds, running) = catch_up_rounds(&args, &db, &broker, &schema, &from, &config).await;
    let Running {
        mut forwarder,
        _setup,
        topic,
        metrics_port: _,
    } = running;
    print_catch_up(&args, n, wrote, &rounds);
    if args.mysql {
        mysql_catch_up(&args, &broker, &rounds).await;
    }
    let inbox_events = args.inbox_events.min(n);
    if inbox_events > 0 {
        let catch_up = median(&rounds, &|r| r.catch_up.rate).0;
        inbox_runs(&args, &db, &broker, &schema, &topic, inbox_events, catch_up).await;
    }

    if !args.skip_crash {
        print_restarts(&args, &db, &broker, &schema, &from).await;
    }

    // Done with the catch-up's forwarder: it would forward the latency runs'
    // events too.
    assert!(forwarder.terminate().success());
    if !args.skip_latency {
        steady_state_latency(&args, &db, &broker, &schema, &config).await;
    }
    if let Some(replica) = &replica {
        replica_gate_latency(&args, &db, replica, &broker, &schema).await;
    }
}
