//! The forwarder's catch-up of the backlog, in rounds, and the
//! configuration it runs with.

use std::time::{Duration, Instant};

use harness::workload::{forwarder_config, server_id};
use harness::{
    free_port, unique, Broker, DbServer, ForwarderProcess, ForwarderSetup, ForwarderToml,
};
use outbox_core::BinlogPosition;
use outbox_forwarder::ForwarderConfig;

use crate::args::Args;
use crate::backlog::rate;
use crate::ceilings::{decode_ceiling, produce_ceiling};
use crate::cpu::{peak_rss_mib, CpuMark, CpuUse};
use crate::sampling::scrape;

/// One round of the catch-up measurement: the two ceilings and the
/// forwarder, one after the other, so that each ratio compares runs made
/// under the same conditions.
pub(crate) struct Round {
    pub(crate) decode: f64,
    pub(crate) produce: f64,
    /// This process's CPU while it read and decoded, and while it produced.
    pub(crate) decode_cpu: CpuUse,
    pub(crate) produce_cpu: CpuUse,
    pub(crate) catch_up: CatchUp,
    /// The `--compare-with` build's catch-up in the same round.
    pub(crate) compared: Option<CatchUp>,
    /// Under `--extra-headers`, this build's catch-up with three more
    /// headers from columns, in the same round.
    pub(crate) headers: Option<CatchUp>,
    /// Under `--codecs`, this build's catch-up with each codec, in order.
    pub(crate) codecs: Vec<CatchUp>,
}

/// `--extra-headers`: three more columns on every outbox row, filled by
/// their defaults (the row image carries them like any value).
pub(crate) const EXTRA_HEADER_COLUMNS: &str = "ALTER TABLE outbox_event \
    ADD COLUMN h_tenant VARCHAR(64) NOT NULL DEFAULT 'tenant-0042', \
    ADD COLUMN h_region VARCHAR(16) NOT NULL DEFAULT 'eu-west-1', \
    ADD COLUMN h_trace VARCHAR(55) NOT NULL \
        DEFAULT '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'";

/// The configuration that maps the [`EXTRA_HEADER_COLUMNS`] to headers.
fn with_extra_headers(config: ForwarderToml) -> ForwarderToml {
    config
        .section("[outbox.headers]\ntenant = \"h_tenant\"\nregion = \"h_region\"")
        .section("[outbox.columns]\ntraceparent = \"h_trace\"")
}

pub(crate) struct CatchUp {
    /// Events/s from the start of the binlog stream to the last ack.
    pub(crate) rate: f64,
    /// Events/s from the first ack to the last.
    pub(crate) steady: f64,
    pub(crate) rss_mib: f64,
    /// Milliseconds from the process's start to its binlog stream's.
    pub(crate) startup_ms: f64,
    /// The forwarder process's CPU.
    pub(crate) cpu: CpuUse,
}

/// A forwarder left running after its catch-up, for the latency runs.
pub(crate) struct Running {
    pub(crate) forwarder: ForwarderProcess,
    /// Holds its checkpoint and log while it runs.
    pub(crate) _setup: ForwarderSetup,
    pub(crate) topic: String,
    pub(crate) metrics_port: u16,
}

/// The forwarder's configuration for this run: from `from` into `topic`,
/// with the settings and properties given on the command line.
pub(crate) fn bench_config(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    topic: &str,
    from: &BinlogPosition,
) -> ForwarderToml {
    // The auditor's reads are not part of what the rounds compare.
    let off = "[audit]\nenabled = false";
    bench_config_audited(args, db, broker, schema, topic, from, off)
}

/// [`bench_config`] with `audit` as its `[audit]` section.
pub(crate) fn bench_config_audited(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    topic: &str,
    from: &BinlogPosition,
    audit: &str,
) -> ForwarderToml {
    let mut config = forwarder_config(db, broker, schema, topic, server_id())
        .start(from)
        .flush_interval_ms(1000)
        .without_property("message.max.bytes")
        .section(audit);
    for setting in &args.kafka_setting {
        let (key, value) = setting
            .split_once('=')
            .expect("--kafka-setting is `key = value`");
        config = config.kafka(key.trim(), value.trim());
    }
    for property in &args.kafka_property {
        let (key, value) = property
            .split_once('=')
            .expect("--kafka-property is KEY=VALUE");
        config = config.property(key, value);
    }
    config
}

/// A forwarder from the server's current position into a fresh topic,
/// streaming, for one latency round. The floor's topic is fresh in each
/// round too: tansu's in-memory storage lists every batch of a partition on
/// each fetch, so a topic holding more batches is slower to read, and the
/// two must hold as few.
pub(crate) async fn streaming_forwarder(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
) -> Running {
    let topic = unique("latency");
    broker.create_topic(&topic, args.partitions);
    let port = free_port();
    let from = db.position().await;
    let config =
        harness::http::with_metrics(bench_config(args, db, broker, schema, &topic, &from), port);
    let setup = ForwarderSetup::new(&config);
    let mut forwarder = setup.spawn_with_env(&[], &[("RUST_LOG", "info")]);
    wait_for_log(&mut forwarder, "binlog stream started").await;
    Running {
        forwarder,
        _setup: setup,
        topic,
        metrics_port: port,
    }
}

/// Starts the forwarder on the backlog from `from` into `topic` and times it
/// until all `args.events` are acked; leaves it running. With `headers`,
/// the `--extra-headers` columns become headers.
pub(crate) async fn forwarder_catch_up(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    (topic, headers, codec): (String, bool, Option<&str>),
    from: &BinlogPosition,
) -> (CatchUp, Running) {
    let n = args.events;
    let port = free_port();
    let mut config = bench_config(args, db, broker, schema, &topic, from);
    if headers {
        config = with_extra_headers(config);
    }
    if let Some(codec) = codec {
        config = config.property("compression.type", codec);
    }
    let config = harness::http::with_metrics(config, port);
    let setup = ForwarderSetup::new(&config);
    // At the default log level, as deployed (the test harness asks for debug).
    let spawned = Instant::now();
    let mut forwarder = setup.spawn_with_env(&[], &[("RUST_LOG", "info")]);
    let stream_started = wait_for_log(&mut forwarder, "binlog stream started").await;
    let pid = forwarder.pid().unwrap();
    let cpu = CpuMark::start(pid);
    let mut first_ack: Option<(Instant, f64)> = None;
    loop {
        let forwarded = scrape(port).map_or(0.0, |s| s.forwarded);
        if forwarded > 0.0 && first_ack.is_none() {
            first_ack = Some((Instant::now(), forwarded));
        }
        if forwarded >= n as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = stream_started.elapsed();
    let cpu = cpu.spent(n);
    let (first_at, first_count) = first_ack.expect("acks arrived");
    let catch_up = CatchUp {
        rate: rate(n, took),
        steady: rate(n - first_count as usize, first_at.elapsed()),
        rss_mib: peak_rss_mib(pid),
        startup_ms: (stream_started - spawned).as_secs_f64() * 1000.0,
        cpu,
    };
    let running = Running {
        forwarder,
        _setup: setup,
        topic,
        metrics_port: port,
    };
    (catch_up, running)
}

/// The catch-up of the forwarder binary at `binary`, on a fresh topic;
/// stopped afterwards.
pub(crate) async fn compared_catch_up(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    from: &BinlogPosition,
    binary: &std::path::Path,
) -> CatchUp {
    eprintln!("forwarder catch-up, {}", binary.display());
    let _other = OtherBuild::use_binary(binary);
    let topic = unique("orders");
    broker.create_topic(&topic, args.partitions);
    let (catch_up, mut running) =
        forwarder_catch_up(args, db, broker, schema, (topic, false, None), from).await;
    assert!(running.forwarder.terminate().success());
    catch_up
}

/// While it lives, the forwarders the benchmark starts are another build's
/// (`--compare-with`); this build's again once it is dropped.
pub(crate) struct OtherBuild(std::ffi::OsString);

impl OtherBuild {
    pub(crate) fn use_binary(binary: &std::path::Path) -> Self {
        let this = std::env::var_os("OUTBOX_FORWARDER_BIN").expect("set in main");
        std::env::set_var("OUTBOX_FORWARDER_BIN", binary);
        Self(this)
    }
}

impl Drop for OtherBuild {
    fn drop(&mut self) {
        std::env::set_var("OUTBOX_FORWARDER_BIN", &self.0);
    }
}

/// This build's catch-up with the `--extra-headers` columns as headers, on
/// a fresh topic; stopped afterwards.
async fn headers_catch_up(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    from: &BinlogPosition,
) -> CatchUp {
    eprintln!("forwarder catch-up with three extra headers");
    let topic = unique("orders");
    broker.create_topic(&topic, args.partitions);
    let (catch_up, mut running) =
        forwarder_catch_up(args, db, broker, schema, (topic, true, None), from).await;
    assert!(running.forwarder.terminate().success());
    catch_up
}

/// This build's catch-up with each `--codecs` value, each on a fresh
/// topic; stopped afterwards.
async fn codec_catch_ups(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    from: &BinlogPosition,
) -> Vec<CatchUp> {
    let mut measured = Vec::new();
    for codec in &args.codecs {
        eprintln!("forwarder catch-up with compression.type = {codec}");
        let topic = unique("orders");
        broker.create_topic(&topic, args.partitions);
        let (catch_up, mut running) =
            forwarder_catch_up(args, db, broker, schema, (topic, false, Some(codec)), from).await;
        assert!(running.forwarder.terminate().success());
        measured.push(catch_up);
    }
    measured
}

pub(crate) async fn wait_for_log(forwarder: &mut ForwarderProcess, needle: &str) -> Instant {
    forwarder
        .wait_for_log(needle, Duration::from_secs(120))
        .await;
    Instant::now()
}

/// The catch-up rounds: per round the two ceilings and the forwarder's
/// catch-up (and the `--compare-with` build's), each on a fresh topic;
/// the last round's forwarder is left running.
pub(crate) async fn catch_up_rounds(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    from: &BinlogPosition,
    config: &ForwarderConfig,
) -> (Vec<Round>, Running) {
    let n = args.events;
    let mut rounds: Vec<Round> = Vec::new();
    let mut running: Option<Running> = None;
    for round in 1..=args.rounds {
        // Only the last round's forwarder stays, for the latency runs.
        if let Some(mut previous) = running.take() {
            let stopped = previous.forwarder.terminate();
            assert!(
                stopped.success(),
                "{stopped}:\n{}",
                previous.forwarder.log()
            );
        }
        eprintln!("round {round}: ceiling (a), binlog read + decode");
        let (decode, decode_cpu) = decode_ceiling(db, schema, from, n).await;
        eprintln!("round {round}: ceiling (b), idempotent produce");
        let raw_topic = unique("raw");
        broker.create_topic(&raw_topic, args.partitions);
        let (produce, produce_cpu) =
            produce_ceiling(config, schema, &raw_topic, n, args.payload_bytes).await;
        // The --compare-with build first in every other round.
        let compared_first = round % 2 == 0;
        let mut compared = None;
        let mut headers = None;
        let mut codecs = Vec::new();
        if compared_first {
            codecs = codec_catch_ups(args, db, broker, schema, from).await;
            if let Some(other) = &args.compare_with {
                compared = Some(compared_catch_up(args, db, broker, schema, from, other).await);
            }
            if args.extra_headers {
                headers = Some(headers_catch_up(args, db, broker, schema, from).await);
            }
        }
        eprintln!("round {round}: forwarder catch-up");
        // A fresh topic and checkpoint: each round forwards the whole backlog.
        let topic = unique("orders");
        broker.create_topic(&topic, args.partitions);
        let (catch_up, now_running) =
            forwarder_catch_up(args, db, broker, schema, (topic, false, None), from).await;
        if !compared_first {
            codecs = codec_catch_ups(args, db, broker, schema, from).await;
            // This build's forwarder, caught up, idles meanwhile (heartbeats).
            if let Some(other) = &args.compare_with {
                compared = Some(compared_catch_up(args, db, broker, schema, from, other).await);
            }
            if args.extra_headers {
                headers = Some(headers_catch_up(args, db, broker, schema, from).await);
            }
        }
        rounds.push(Round {
            decode: rate(n, decode),
            produce: rate(n, produce),
            decode_cpu,
            produce_cpu,
            catch_up,
            compared,
            headers,
            codecs,
        });
        running = Some(now_running);
    }
    (rounds, running.expect("at least one round"))
}
