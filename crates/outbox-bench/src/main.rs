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
//!    (commit → read and decoded).
//!
//! Run: `cargo build --release -p outbox-forwarder -p outbox-bench &&
//! target/release/outbox-bench` (see `--help`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use harness::workload::{forwarder_config, server_id};
use harness::ForwarderToml;
use harness::{free_port, unique, Broker, ForwarderProcess, ForwarderSetup, MariaDb};
use mysql_async::prelude::Queryable;
use outbox_core::{BadRowPolicy, BinlogPosition, OutboxEvent, RowOrigin};
use outbox_forwarder::ForwarderConfig;
use outbox_sink::MessageHeaders;
use outbox_source::{
    server, BinlogSource, ColumnMapping, DecodeConfig, EventIdFormat, OutboxTables, StreamConfig,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::ClientConfig;
use rdkafka::ClientContext;

/// The forwarder's allocator, so that the ceilings run on it too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "Measures the forwarder's catch-up throughput, its ceilings, latency and memory")]
struct Args {
    /// Outbox events in the catch-up backlog (one order + one event per transaction).
    #[arg(long, default_value_t = 100_000)]
    events: usize,
    /// Approximate payload size in bytes.
    #[arg(long, default_value_t = 200)]
    payload_bytes: usize,
    /// Commit rates (events/s) of the latency runs.
    #[arg(long, value_delimiter = ',', default_value = "1000,5000")]
    rates: Vec<u32>,
    /// Measure the catch-up only.
    #[arg(long)]
    skip_latency: bool,
    /// Skip the restarts after kill -9.
    #[arg(long)]
    skip_crash: bool,
    /// Events the inbox run processes (at most `--events`); 0 skips it.
    #[arg(long, default_value_t = 20_000)]
    inbox_events: usize,
    /// Extra forwarder settings as TOML lines appended to its `[kafka]`
    /// section, e.g. `--kafka-setting 'max_in_flight = 20000'`, to compare
    /// settings in one environment.
    #[arg(long)]
    kafka_setting: Vec<String>,
    /// Extra librdkafka properties for the forwarder, `KEY=VALUE`.
    #[arg(long)]
    kafka_property: Vec<String>,
    /// Seconds measured per rate and round, after a warm-up; the forwarder
    /// and the broker's floor are measured in turn in each round.
    #[arg(long, default_value_t = 10)]
    latency_seconds: u64,
    /// Measure the broker's floor while the benchmark's writers commit at
    /// the same rate (the forwarder stopped), so that it shares the two
    /// cores with MariaDB as the forwarder's measurement does.
    #[arg(long)]
    floor_under_load: bool,
    /// Latency rounds per rate; the medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    latency_rounds: u64,
    /// Partitions of the benchmark topics.
    #[arg(long, default_value_t = 3)]
    partitions: u32,
    /// Catch-up rounds (ceilings and forwarder each time); the medians are
    /// reported, since one run on a shared 2-core machine varies by ±20%.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Another `outbox-forwarder` binary (say, the release build before a
    /// change): its catch-up is measured in the same rounds, in turn with
    /// this build's (which goes first alternates), and reported beside it.
    #[arg(long)]
    compare_with: Option<std::path::PathBuf>,
}

fn payload(order: usize, size: usize) -> String {
    let head =
        format!(r#"{{"order_id":{order},"customer":"c-{order}","amount_cents":4200,"pad":""#);
    let pad = size.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad))
}

/// Writes `n` transactions (an order and its outbox event) over `writers`
/// connections; returns the ids in commit order per writer.
async fn write_backlog(db: &MariaDb, schema: &str, n: usize, size: usize) -> Duration {
    const WRITERS: usize = 4;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut conn = db.root().await;
        conn.query_drop(format!("USE `{schema}`")).await.unwrap();
        let share = n / WRITERS + usize::from(w < n % WRITERS);
        tasks.push(tokio::spawn(async move {
            for i in 0..share {
                let order = w * 10_000_000 + i;
                let id = uuid::Uuid::new_v4();
                conn.query_drop(format!(
                    "START TRANSACTION; \
                     INSERT INTO orders (customer, amount_cents, status) VALUES ('c-{order}', 4200, 'ACCEPTED'); \
                     INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload) \
                     VALUES ('{id}', 'order', '{order}', 'ORDER_ACCEPTED', '{}'); COMMIT",
                    payload(order, size)
                ))
                .await
                .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    started.elapsed()
}

fn rate(events: usize, took: Duration) -> f64 {
    events as f64 / took.as_secs_f64()
}

/// The forwarder's binlog reader and decoder on `schema`'s outbox, from `from`.
async fn bench_source(db: &MariaDb, schema: &str, from: &BinlogPosition) -> BinlogSource {
    let opts = server::parse_url(&server::MysqlConnect::new(db.forwarder_url())).unwrap();
    let mut conn = server::connect(&opts).await.unwrap();
    let info = server::server_info(&mut conn).await.unwrap();
    let decode = DecodeConfig {
        tables: OutboxTables::new(vec![format!("{schema}.outbox_event").parse().unwrap()]),
        columns: ColumnMapping::default(),
        event_id_format: EventIdFormat::Uuid,
        max_transaction_bytes: 64 << 20,
        bad_rows: BadRowPolicy::Fail,
    };
    let stream = StreamConfig {
        server_id: server_id(),
        heartbeat: Duration::from_secs(5),
    };
    BinlogSource::start_on(conn, info, &stream, decode, from, None)
        .await
        .unwrap()
}

/// Ceiling (a): read and decode the backlog's binlog range, no Kafka.
async fn decode_ceiling(
    db: &MariaDb,
    schema: &str,
    from: &BinlogPosition,
    n: usize,
) -> (Duration, CpuUse) {
    let started = Instant::now();
    let cpu = CpuMark::start(std::process::id());
    let mut source = bench_source(db, schema, from).await;
    let mut seen = 0;
    while seen < n {
        seen += source.next_transaction().await.unwrap().events.len();
    }
    let took = started.elapsed();
    let cpu = cpu.spent(n);
    source.close().await;
    (took, cpu)
}

/// Acks counted by ceiling (b)'s producer, on librdkafka's delivery thread.
#[derive(Default)]
struct AckCount {
    acked: AtomicUsize,
    failed: AtomicUsize,
    landed: tokio::sync::Notify,
}

struct CountingContext(Arc<AckCount>);

impl ClientContext for CountingContext {}

impl ProducerContext for CountingContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.0.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.0.acked.fetch_add(1, Ordering::Release);
        self.0.landed.notify_one();
    }
}

impl AckCount {
    /// Waits until `acked` reports are in; the forwarder's settings let
    /// librdkafka wait for a broker forever, so this gives up after 2 min.
    async fn wait_for(&self, acked: usize) {
        let wait = async {
            while self.acked.load(Ordering::Acquire) < acked {
                self.landed.notified().await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(120), wait)
            .await
            .is_err()
        {
            panic!(
                "ceiling (b): {} of {acked} delivery reports after 2 min; is the broker up?",
                self.acked.load(Ordering::Acquire)
            );
        }
    }
}

/// Ceiling (b): idempotent produce of the forwarder's `n` messages, with its
/// producer settings and in-flight window (`forwarder`, its configuration in
/// this run). The rows are made before the clock starts; key, payload and
/// headers are sent as the sink sends them. Acks are counted on librdkafka's
/// delivery thread, so the ceiling is the producer's and the broker's, not
/// this program's.
async fn produce_ceiling(
    forwarder: &ForwarderConfig,
    schema: &str,
    topic: &str,
    n: usize,
    size: usize,
) -> (Duration, CpuUse) {
    let count = Arc::new(AckCount::default());
    let producer: ThreadedProducer<CountingContext> = forwarder
        .kafka_config()
        .client_config()
        .unwrap()
        .create_with_context(CountingContext(count.clone()))
        .unwrap();
    let send = |record: BaseRecord<'_, [u8], [u8]>| {
        let mut record = record;
        loop {
            match producer.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => panic!("produce: {e}"),
            }
        }
    };
    // The broker hands an idempotent producer its id after ~0.5 s.
    send(
        BaseRecord::to(topic)
            .key(b"warm-up".as_slice())
            .payload(b"{}".as_slice()),
    );
    count.wait_for(1).await;

    // The rows the forwarder would have decoded from the backlog.
    let table: Arc<str> = "outbox_event".into();
    let schema: Arc<str> = schema.into();
    let events: Vec<OutboxEvent> = (0..n)
        .map(|i| OutboxEvent {
            event_id: uuid::Uuid::new_v4().to_string(),
            event_type: Some("ORDER_ACCEPTED".into()),
            aggregate_type: Some("order".into()),
            aggregate_id: Some(i.to_string()),
            event_version: Some("1".into()),
            key: None,
            payload: payload(i, size).into_bytes(),
            timestamp: 0,
            origin: RowOrigin {
                schema: schema.clone(),
                table: table.clone(),
                event_position: BinlogPosition::new("mysql-bin.000001", 1_000_000 + i as u64 * 700),
                row_index: 0,
            },
        })
        .collect();
    let window = forwarder.kafka.max_in_flight;
    let started = Instant::now();
    let cpu = CpuMark::start(std::process::id());
    for (i, event) in events.iter().enumerate() {
        if i + 1 >= window {
            count.wait_for(i + 2 - window).await;
        }
        // The headers are built per message, as the forwarder builds them.
        send(
            BaseRecord::to(topic)
                .key(event.key_bytes())
                .payload(event.payload.as_slice())
                .headers(MessageHeaders::for_event(event, "bench", None)),
        );
    }
    count.wait_for(n + 1).await;
    let took = started.elapsed();
    let cpu = cpu.spent(n);
    assert_eq!(count.failed.load(Ordering::Relaxed), 0, "refused messages");
    (took, cpu)
}

/// Sum of `outbox_forwarder_events_forwarded_total` and the buckets of the
/// two latency histograms.
struct Scrape {
    forwarded: f64,
    /// Commit read → ack.
    buckets: Vec<(f64, f64)>,
    /// Handed to the producer → ack.
    producer: Vec<(f64, f64)>,
}

fn scrape(port: u16) -> Option<Scrape> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    let mut forwarded = 0.0;
    let mut buckets = Vec::new();
    let mut producer = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("outbox_forwarder_events_forwarded_total{") {
            forwarded += rest.rsplit(' ').next()?.parse::<f64>().ok()?;
            continue;
        }
        let (histogram, rest) = if let Some(rest) =
            line.strip_prefix("outbox_forwarder_ack_latency_seconds_bucket{le=\"")
        {
            (&mut buckets, rest)
        } else if let Some(rest) =
            line.strip_prefix("outbox_forwarder_producer_latency_seconds_bucket{le=\"")
        {
            (&mut producer, rest)
        } else {
            continue;
        };
        let (bound, count) = rest.split_once("\"} ")?;
        let bound = if bound == "+Inf" {
            f64::INFINITY
        } else {
            bound.parse().ok()?
        };
        histogram.push((bound, count.parse().ok()?));
    }
    Some(Scrape {
        forwarded,
        buckets,
        producer,
    })
}

/// Quantile `q` (0..1) of the latency recorded between two scrapes, by
/// linear interpolation inside the histogram bucket.
fn histogram_quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> f64 {
    let counts: Vec<(f64, f64)> = after
        .iter()
        .zip(before)
        .map(|((bound, a), (_, b))| (*bound, a - b))
        .collect();
    let total = counts.last().map_or(0.0, |(_, c)| *c);
    let target = q * total;
    let mut lower = (0.0, 0.0);
    for &(bound, count) in &counts {
        if count >= target {
            if bound.is_infinite() {
                return lower.0;
            }
            let share = if count > lower.1 {
                (target - lower.1) / (count - lower.1)
            } else {
                0.0
            };
            return lower.0 + (bound - lower.0) * share;
        }
        lower = (bound, count);
    }
    lower.0
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// CPU time (user + system, all threads) the process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |t| {
        t.iter().filter_map(|v| v.parse::<f64>().ok()).sum()
    });
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Busy time of the whole machine so far, in seconds summed over its cores
/// (user, nice, system, irq, softirq and steal of `/proc/stat`).
fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let busy: f64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum();
    busy / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The CPUs `/proc/stat`'s first line adds up (its `cpuN` lines), which is
/// what [`machine_busy_seconds`] divides among.
fn machine_cores() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let n = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    n.max(1) as f64
}

/// CPU spent from a start mark: by one process and by the whole machine.
struct CpuMark {
    pid: u32,
    process: f64,
    machine: f64,
    at: Instant,
}

/// What a phase cost: CPU µs per event of the measured process, and the
/// machine's busy cores over the phase (2.0 = both cores all the time).
#[derive(Clone, Copy)]
struct CpuUse {
    us_per_event: f64,
    process_cores: f64,
    machine_cores: f64,
}

impl CpuMark {
    fn start(pid: u32) -> Self {
        Self {
            pid,
            process: cpu_seconds(pid),
            machine: machine_busy_seconds(),
            at: Instant::now(),
        }
    }

    fn spent(&self, events: usize) -> CpuUse {
        let wall = self.at.elapsed().as_secs_f64();
        let process = cpu_seconds(self.pid) - self.process;
        CpuUse {
            us_per_event: process * 1e6 / events as f64,
            process_cores: process / wall,
            machine_cores: (machine_busy_seconds() - self.machine) / wall,
        }
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// A consumer thread recording when each key becomes readable.
fn record_arrivals(
    broker: &Broker,
    topic: &str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<HashMap<String, Instant>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", unique("bench"))
        .set("auto.offset.reset", "latest")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    std::thread::spawn(move || {
        let mut seen = HashMap::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Some(Ok(message)) = consumer.poll(Duration::from_millis(20)) {
                let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
                seen.insert(key, Instant::now());
            }
        }
        seen
    })
}

/// Commits `rate` events/s for `seconds` (in 10 ms slices over 4
/// connections); returns each event id with the instant its COMMIT returned.
async fn commit_at_rate(
    db: &MariaDb,
    schema: &str,
    rate: u32,
    seconds: u64,
    size: usize,
) -> Vec<(String, Instant)> {
    const WRITERS: u32 = 4;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut conn = db.root().await;
        conn.query_drop(format!("USE `{schema}`")).await.unwrap();
        // This writer's share of the rate, spread over 10 ms slices without
        // losing the remainder of the division.
        let share = u64::from(rate / WRITERS + u32::from(w < rate % WRITERS));
        tasks.push(tokio::spawn(async move {
            let mut committed = Vec::new();
            let mut slices = tokio::time::interval(Duration::from_millis(10));
            for slice in 0..seconds * 100 {
                slices.tick().await;
                let per_slice = (slice + 1) * share / 100 - slice * share / 100;
                for i in 0..per_slice {
                    let order = (w as usize) * 10_000_000 + (slice as usize) * 1000 + i as usize;
                    let id = uuid::Uuid::new_v4().to_string();
                    conn.query_drop(format!(
                        "START TRANSACTION; \
                         INSERT INTO orders (customer, amount_cents, status) VALUES ('c', 4200, 'ACCEPTED'); \
                         INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload) \
                         VALUES ('{id}', 'order', '{order}', 'ORDER_ACCEPTED', '{}'); COMMIT",
                        payload(order, size)
                    ))
                    .await
                    .unwrap();
                    committed.push((id, Instant::now()));
                }
            }
            committed
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

/// Produce → ack latencies recorded on librdkafka's delivery thread, from
/// the instant each message was handed to the producer (its opaque).
struct LatencyContext(Arc<Mutex<Vec<Duration>>>);

impl ClientContext for LatencyContext {}

impl ProducerContext for LatencyContext {
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Instant>) {
        if result.is_ok() {
            self.0.lock().unwrap().push(sent.elapsed());
        }
    }
}

/// What the broker alone takes at a rate, measured on the same messages.
struct Floor {
    /// Raw produce → ack, sorted.
    acks: Vec<Duration>,
    /// Produce → readable by the benchmark's consumer, sorted.
    hops: Vec<Duration>,
}

/// The floor of both latencies at `rate` messages/s: a producer with the
/// forwarder's settings (`forwarder`, idempotent, acks=all, lz4) but
/// `linger.ms=0`, so that nothing waits for company, sending messages of the
/// forwarder's size in the same 10 ms slices as the committing writers; its
/// acks timed on librdkafka's delivery thread, its messages timed again by a
/// consumer with the latency runs' settings.
async fn broker_floor(
    forwarder: &ForwarderConfig,
    broker: &Broker,
    rate: u32,
    args: &Args,
) -> Floor {
    let (seconds, size) = (args.latency_seconds, args.payload_bytes);
    let topic = unique("floor");
    broker.create_topic(&topic, args.partitions);
    let acks = Arc::new(Mutex::new(Vec::new()));
    let producer: ThreadedProducer<LatencyContext> = forwarder
        .kafka_config()
        .client_config()
        .unwrap()
        .set("linger.ms", "0")
        .create_with_context(LatencyContext(acks.clone()))
        .unwrap();
    let send = |key: &str, body: &str| {
        producer
            .send(
                BaseRecord::with_opaque_to(&topic, Box::new(Instant::now()))
                    .key(key)
                    .payload(body),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    };
    // The producer-id wait, then a consumer that has joined.
    send("warm-up", "{}");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let arrivals = record_arrivals(broker, &topic, stop.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    acks.lock().unwrap().clear();
    let mut sent = Vec::new();
    let per_slice = (rate / 100).max(1);
    let mut slices = tokio::time::interval(Duration::from_millis(10));
    let body = payload(0, size);
    for _ in 0..seconds * 100 {
        slices.tick().await;
        for _ in 0..per_slice {
            let key = uuid::Uuid::new_v4().to_string();
            send(&key, &body);
            sent.push((key, Instant::now()));
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let arrived = arrivals.join().unwrap();
    let mut acks = std::mem::take(&mut *acks.lock().unwrap());
    acks.sort();
    Floor {
        acks,
        hops: delays(&sent, &arrived),
    }
}

/// A binlog reader of its own on `schema` from the server's current
/// position, recording when each outbox event (by id) is read and decoded,
/// until `stop`: the binlog's hop from commit to a reader.
async fn record_binlog_reads(
    db: &MariaDb,
    schema: &str,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<HashMap<String, Instant>> {
    let mut source = bench_source(db, schema, &db.position().await).await;
    tokio::spawn(async move {
        let mut seen = HashMap::new();
        loop {
            tokio::select! {
                transaction = source.next_transaction() => {
                    let at = Instant::now();
                    for event in transaction.unwrap().events {
                        seen.insert(event.event_id, at);
                    }
                }
                _ = stop.wait_for(|stop| *stop) => break,
            }
        }
        source.close().await;
        seen
    })
}

/// For each key of `sent` that `arrived`, the time between the two, sorted.
fn delays(sent: &[(String, Instant)], arrived: &HashMap<String, Instant>) -> Vec<Duration> {
    let mut delays: Vec<Duration> = sent
        .iter()
        .filter_map(|(key, at)| {
            arrived
                .get(key)
                .map(|seen| seen.saturating_duration_since(*at))
        })
        .collect();
    delays.sort();
    delays
}

/// One round of the catch-up measurement: the two ceilings and the
/// forwarder, one after the other, so that each ratio compares runs made
/// under the same conditions.
struct Round {
    decode: f64,
    produce: f64,
    /// This process's CPU while it read and decoded, and while it produced.
    decode_cpu: CpuUse,
    produce_cpu: CpuUse,
    catch_up: CatchUp,
    /// The `--compare-with` build's catch-up in the same round.
    compared: Option<CatchUp>,
}

struct CatchUp {
    /// Events/s from the start of the binlog stream to the last ack.
    rate: f64,
    /// Events/s from the first ack to the last.
    steady: f64,
    rss_mib: f64,
    /// The forwarder process's CPU.
    cpu: CpuUse,
}

/// A forwarder left running after its catch-up, for the latency runs.
struct Running {
    forwarder: ForwarderProcess,
    /// Holds its checkpoint and log while it runs.
    _setup: ForwarderSetup,
    topic: String,
    metrics_port: u16,
}

/// The forwarder's configuration for this run: from `from` into `topic`,
/// with the settings and properties given on the command line.
fn bench_config(
    args: &Args,
    db: &MariaDb,
    broker: &Broker,
    schema: &str,
    topic: &str,
    from: &BinlogPosition,
) -> ForwarderToml {
    let mut config = forwarder_config(db, broker, schema, topic, server_id())
        .start(from)
        .flush_interval_ms(1000)
        .without_property("message.max.bytes");
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
async fn streaming_forwarder(args: &Args, db: &MariaDb, broker: &Broker, schema: &str) -> Running {
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
/// until all `args.events` are acked; leaves it running.
async fn forwarder_catch_up(
    args: &Args,
    db: &MariaDb,
    broker: &Broker,
    schema: &str,
    topic: String,
    from: &BinlogPosition,
) -> (CatchUp, Running) {
    let n = args.events;
    let port = free_port();
    let config =
        harness::http::with_metrics(bench_config(args, db, broker, schema, &topic, from), port);
    let setup = ForwarderSetup::new(&config);
    // At the default log level, as deployed (the test harness asks for debug).
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
async fn compared_catch_up(
    args: &Args,
    db: &MariaDb,
    broker: &Broker,
    schema: &str,
    from: &BinlogPosition,
    binary: &std::path::Path,
) -> CatchUp {
    eprintln!("forwarder catch-up, {}", binary.display());
    let this = std::env::var_os("OUTBOX_FORWARDER_BIN").expect("set in main");
    std::env::set_var("OUTBOX_FORWARDER_BIN", binary);
    let topic = unique("orders");
    broker.create_topic(&topic, args.partitions);
    let (catch_up, mut running) = forwarder_catch_up(args, db, broker, schema, topic, from).await;
    std::env::set_var("OUTBOX_FORWARDER_BIN", this);
    assert!(running.forwarder.terminate().success());
    catch_up
}

/// What the inbox run measured.
struct InboxRun {
    /// From the consumer's start to the last inbox row committed.
    took: Duration,
    /// From the first inbox row seen to the last, and the rows in between
    /// (without joining the group and its first fetch).
    steady: (Duration, usize),
    /// COMMITs the server counted meanwhile (`Com_commit`).
    commits: u64,
}

async fn global_status(db: &MariaDb, name: &str) -> u64 {
    let mut conn = db.root().await;
    let row: Option<(String, String)> = conn
        .query_first(format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .await
        .unwrap();
    row.and_then(|(_, v)| v.parse().ok()).unwrap_or_default()
}

/// Runs `notification-planner`'s consumer (default settings, a fresh group)
/// on `topic` until `events` inbox rows are committed in `schema`.
async fn inbox_run(
    db: &MariaDb,
    broker: &Broker,
    schema: &str,
    topic: &str,
    events: usize,
) -> InboxRun {
    use outbox_inbox::planner::NotificationPlanner;
    use outbox_inbox::{InboxConfig, InboxConsumer};

    let dead_letter = unique("parked");
    broker.create_topic(&dead_letter, 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("planner.toml");
    std::fs::write(
        &path,
        format!(
            "[mysql]\nurl = \"mysql://root@127.0.0.1:{port}/{schema}\"\n\
             [kafka]\nbrokers = \"{brokers}\"\ngroup_id = \"{group}\"\ntopics = [\"{topic}\"]\n\
             dead_letter_topic = \"{dead_letter}\"\n\
             [inbox]\nconsumer_name = \"notification-planner\"\n",
            port = db.port,
            brokers = broker.bootstrap(),
            group = unique("planner"),
        ),
    )
    .unwrap();
    let config = InboxConfig::load(&path).unwrap();
    let pool =
        mysql_async::Pool::new(format!("mysql://root@127.0.0.1:{}/{schema}", db.port).as_str());
    let mut conn = pool.get_conn().await.unwrap();

    let commits_before = global_status(db, "Com_commit").await;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let consumer = InboxConsumer::new(config).unwrap();
    let started = Instant::now();
    let task = tokio::spawn(async move { consumer.run(NotificationPlanner, shutdown).await });
    let deadline = started + Duration::from_secs(3600);
    let mut first: Option<(Instant, u64)> = None;
    loop {
        let done: u64 = conn
            .query_first("SELECT COUNT(*) FROM consumed_event")
            .await
            .unwrap()
            .unwrap();
        if done > 0 && first.is_none() {
            first = Some((Instant::now(), done));
        }
        if done >= events as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "the inbox run took over an hour");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    let (first_at, first_done) = first.expect("rows were committed");
    let steady = (
        first_at.elapsed(),
        events.saturating_sub(first_done as usize),
    );
    let commits = global_status(db, "Com_commit").await - commits_before;
    let _ = stop.send(true);
    task.await.unwrap().unwrap();
    drop(conn);
    pool.disconnect().await.unwrap();
    InboxRun {
        took,
        steady,
        commits,
    }
}

/// What one restart's read-back of the topic tails did, from its log line.
struct Resumed {
    /// Messages read back, events found after the checkpoint, milliseconds.
    read: u64,
    found: u64,
    took_ms: u64,
}

async fn resumed(forwarder: &mut ForwarderProcess) -> Resumed {
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

/// Waits until the forwarder's acked count has not moved for 2 s.
async fn wait_until_idle(port: u16) -> f64 {
    let mut last = (-1.0, Instant::now());
    loop {
        let forwarded = scrape(port).map_or(0.0, |s| s.forwarded);
        if forwarded != last.0 {
            last = (forwarded, Instant::now());
        } else if forwarded > 0.0 && last.1.elapsed() > Duration::from_secs(2) {
            return forwarded;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The forwarder on the backlog into a fresh topic, killed (-9) once 90 %
/// is acked and restarted; then killed and restarted again once idle.
/// Returns, per restart, the events in the topic at the kill (as acked) and
/// what the restart's scan did.
async fn crash_restarts(
    args: &Args,
    db: &MariaDb,
    broker: &Broker,
    schema: &str,
    from: &BinlogPosition,
) -> Vec<(f64, Resumed)> {
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
    let mut forwarder = spawn();
    let caught_up = resumed(&mut forwarder).await;
    assert!(forwarder.terminate().success());
    vec![(acked, mid_catch_up), (n, caught_up)]
}

async fn wait_for_log(forwarder: &mut ForwarderProcess, needle: &str) -> Instant {
    forwarder
        .wait_for_log(needle, Duration::from_secs(120))
        .await;
    Instant::now()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    outbox_forwarder::memory::no_transparent_huge_pages();
    let args = Args::parse();
    // The release forwarder lives beside this binary.
    let exe = std::env::current_exe().unwrap();
    let forwarder_bin = exe.with_file_name("outbox-forwarder");
    assert!(
        forwarder_bin.exists(),
        "build it first: cargo build --release -p outbox-forwarder"
    );
    std::env::set_var("OUTBOX_FORWARDER_BIN", &forwarder_bin);

    eprintln!("starting MariaDB and the broker");
    let db = MariaDb::start(&[]).await;
    let broker = Broker::start(false).await;
    let schema = unique("bench");
    db.create_schema(&schema).await;
    let n = args.events;

    eprintln!("writing {n} transactions");
    let from = db.position().await;
    let wrote = write_backlog(&db, &schema, n, args.payload_bytes).await;
    let payload_mb = (n * args.payload_bytes) as f64 / 1e6;
    // Read as the forwarder reads it: ceiling (b) produces with its settings.
    let setup = ForwarderSetup::new(&bench_config(&args, &db, &broker, &schema, "t", &from));
    let config = ForwarderConfig::load(&setup.config_path).unwrap();

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
        let (decode, decode_cpu) = decode_ceiling(&db, &schema, &from, n).await;
        eprintln!("round {round}: ceiling (b), idempotent produce");
        let raw_topic = unique("raw");
        broker.create_topic(&raw_topic, args.partitions);
        let (produce, produce_cpu) =
            produce_ceiling(&config, &schema, &raw_topic, n, args.payload_bytes).await;
        // The --compare-with build first in every other round.
        let compared_first = round % 2 == 0;
        let mut compared = None;
        if let (Some(other), true) = (&args.compare_with, compared_first) {
            compared = Some(compared_catch_up(&args, &db, &broker, &schema, &from, other).await);
        }
        eprintln!("round {round}: forwarder catch-up");
        // A fresh topic and checkpoint: each round forwards the whole backlog.
        let topic = unique("orders");
        broker.create_topic(&topic, args.partitions);
        let (catch_up, now_running) =
            forwarder_catch_up(&args, &db, &broker, &schema, topic, &from).await;
        if let (Some(other), false) = (&args.compare_with, compared_first) {
            // This build's forwarder, caught up, idles meanwhile (heartbeats).
            compared = Some(compared_catch_up(&args, &db, &broker, &schema, &from, other).await);
        }
        rounds.push(Round {
            decode: rate(n, decode),
            produce: rate(n, produce),
            decode_cpu,
            produce_cpu,
            catch_up,
            compared,
        });
        running = Some(now_running);
    }
    let Running {
        mut forwarder,
        _setup,
        topic,
        metrics_port: _,
    } = running.expect("at least one round");

    let median = |f: &dyn Fn(&Round) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(f).collect();
        values.sort_by(f64::total_cmp);
        // The upper of the two middle values when the count is even.
        (
            values[values.len() / 2],
            values[0],
            values[values.len() - 1],
        )
    };
    let row = |name: &str, (mid, low, high): (f64, f64, f64)| {
        println!(
            "| {name} | {mid:.0} | {:.1} | {low:.0}–{high:.0} |",
            mid * args.payload_bytes as f64 / 1e6
        );
    };
    println!("\n## Catch-up ({n} events, ~{} B payload, {} partitions, 2 cores shared by MariaDB, broker and forwarder; median of {} rounds)\n", args.payload_bytes, args.partitions, rounds.len());
    println!("| measurement | events/s | MB/s (payload) | range over rounds |");
    println!("|---|---:|---:|---:|");
    println!(
        "| writing the backlog (4 connections) | {:.0} | {:.1} | |",
        rate(n, wrote),
        payload_mb / wrote.as_secs_f64(),
    );
    row(
        "ceiling (a): binlog read + decode, no Kafka",
        median(&|r| r.decode),
    );
    row(
        "ceiling (b): raw idempotent produce",
        median(&|r| r.produce),
    );
    row(
        "**forwarder catch-up** (stream start → all acked)",
        median(&|r| r.catch_up.rate),
    );
    row(
        "forwarder, first ack → all acked (without the producer-id wait)",
        median(&|r| r.catch_up.steady),
    );
    if rounds.iter().all(|r| r.compared.is_some()) {
        let compared = |r: &Round| r.compared.as_ref().expect("measured").rate;
        row(
            "forwarder catch-up, the --compare-with build",
            median(&compared),
        );
        println!(
            "\nthis build / the --compare-with build, catch-up in the same round: median {:.3} \
             (rounds: {})",
            median(&|r| r.catch_up.rate / compared(r)).0,
            rounds
                .iter()
                .map(|r| format!("{:.3}", r.catch_up.rate / compared(r)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let ratio = |r: &Round| r.catch_up.rate / r.decode.min(r.produce);
    println!(
        "\nforwarder / lower ceiling of the same round: median {:.2} (rounds: {}); \
         forwarder peak RSS during catch-up: {:.0} MiB",
        median(&ratio).0,
        rounds
            .iter()
            .map(|r| format!("{:.2}", ratio(r)))
            .collect::<Vec<_>>()
            .join(", "),
        median(&|r| r.catch_up.rss_mib).2,
    );
    let cores = machine_cores();
    println!("\n| CPU (medians) | µs/event, measured process | its cores | machine's busy cores (of {cores}) |");
    println!("|---|---:|---:|---:|");
    let cpu_row = |name: &str, cpu: &dyn Fn(&Round) -> CpuUse| {
        println!(
            "| {name} | {:.1} | {:.2} | {:.2} |",
            median(&|r| cpu(r).us_per_event).0,
            median(&|r| cpu(r).process_cores).0,
            median(&|r| cpu(r).machine_cores).0,
        );
    };
    cpu_row("ceiling (a): read + decode", &|r| r.decode_cpu);
    cpu_row("ceiling (b): produce", &|r| r.produce_cpu);
    cpu_row("forwarder catch-up", &|r| r.catch_up.cpu);
    if rounds.iter().all(|r| r.compared.is_some()) {
        cpu_row("forwarder catch-up, the --compare-with build", &|r| {
            r.compared.as_ref().expect("measured").cpu
        });
    }
    // The forwarder does the work of both ceilings at once on the same cores:
    // the machine's CPU per event of (a) (reader, decoder and the server's
    // dump thread) plus that of (b) (producer and broker) bounds it.
    let bound = |r: &Round| {
        cores / (r.decode_cpu.machine_cores / r.decode + r.produce_cpu.machine_cores / r.produce)
    };
    println!(
        "\nwhat {cores} cores allow for both ceilings' work at once (machine CPU per event \
         of (a) + (b)): median {:.0} events/s, {:.2} × the lower ceiling; the forwarder \
         reached {:.2} of that bound (medians over rounds)",
        median(&bound).0,
        median(&|r| bound(r) / r.decode.min(r.produce)).0,
        median(&|r| r.catch_up.rate / bound(r)).0,
    );

    let inbox_events = args.inbox_events.min(n);
    if inbox_events > 0 {
        eprintln!("inbox: notification-planner on {inbox_events} events");
        let run = inbox_run(&db, &broker, &schema, &topic, inbox_events).await;
        println!("\n## Inbox consumer (notification-planner, default settings, {inbox_events} events already in the topic, {} partitions)\n", args.partitions);
        println!("| measurement | events/s | MySQL transactions per event |");
        println!("|---|---:|---:|");
        println!(
            "| inbox: consumer start → last inbox row committed | {:.0} | {:.3} |",
            rate(inbox_events, run.took),
            run.commits as f64 / inbox_events as f64
        );
        println!(
            "| inbox: first inbox row → last (without the group join) | {:.0} | |",
            rate(run.steady.1, run.steady.0)
        );
        println!(
            "| forwarder catch-up of the same run (median) | {:.0} | |",
            median(&|r| r.catch_up.rate).0
        );
    }

    if !args.skip_crash {
        eprintln!("restarts after kill -9");
        let restarts = crash_restarts(&args, &db, &broker, &schema, &from).await;
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
    }

    // Done with the catch-up's forwarder: it would forward the latency runs'
    // events too.
    assert!(forwarder.terminate().success());
    if args.skip_latency {
        return;
    }
    println!(
        "\n## Steady-state latency ({} rounds of {} s per rate, each after a 3 s warm-up; \
         ms, medians over the rounds)\n",
        args.latency_rounds, args.latency_seconds
    );
    println!("| rate (events/s) | commit read → ack p50 (histogram) | p99 | max | of which in the producer p50 | p99 | raw produce → ack p50 | p99 | max | commit → consumer p50 | p99 | max | floor hop p50 | p99 | max | commit → binlog read p50 | p99 | max |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut verdicts = Vec::new();
    for &r in &args.rates {
        let mut rounds: Vec<[f64; 17]> = Vec::new();
        let mut missing = 0;
        for round in 1..=args.latency_rounds {
            let Running {
                mut forwarder,
                _setup,
                topic,
                metrics_port: port,
            } = streaming_forwarder(&args, &db, &broker, &schema).await;
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let arrivals = record_arrivals(&broker, &topic, stop.clone());
            let (stop_reading, stopped) = tokio::sync::watch::channel(false);
            let reads = record_binlog_reads(&db, &schema, stopped).await;
            commit_at_rate(&db, &schema, r, 3, args.payload_bytes).await;
            let before = scrape(port).unwrap();
            let committed =
                commit_at_rate(&db, &schema, r, args.latency_seconds, args.payload_bytes).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let after = scrape(port).unwrap();
            assert!(forwarder.terminate().success());
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let arrived = arrivals.join().unwrap();
            stop_reading.send(true).unwrap();
            let read = delays(&committed, &reads.await.unwrap());
            let visible = delays(&committed, &arrived);
            missing += committed.len() - visible.len();
            let ack = |q| histogram_quantile(&before.buckets, &after.buckets, q) * 1000.0;
            let in_producer = |q| histogram_quantile(&before.producer, &after.producer, q) * 1000.0;
            let floor = if args.floor_under_load {
                // Its warm-up and drain included.
                let load = commit_at_rate(
                    &db,
                    &schema,
                    r,
                    args.latency_seconds + 5,
                    args.payload_bytes,
                );
                tokio::join!(broker_floor(&config, &broker, r, &args), load).0
            } else {
                broker_floor(&config, &broker, r, &args).await
            };
            let spread = |sorted: &[Duration]| {
                [0.5, 0.99, 1.0].map(|q| percentile(sorted, q).as_secs_f64() * 1000.0)
            };
            let [a50, a99, amax] = [ack(0.5), ack(0.99), ack(1.0)];
            let [p50, p99] = [in_producer(0.5), in_producer(0.99)];
            let [r50, r99, rmax] = spread(&floor.acks);
            let [v50, v99, vmax] = spread(&visible);
            let [h50, h99, hmax] = spread(&floor.hops);
            let [b50, b99, bmax] = spread(&read);
            eprintln!(
                "{r}/s, round {round}: ack p50/p99 {a50:.1}/{a99:.1} (producer {p50:.1}/{p99:.1}), \
                 raw {r50:.1}/{r99:.1}, \
                 consumer {v50:.1}/{v99:.1}, floor hop {h50:.1}/{h99:.1}, binlog {b50:.1}/{b99:.1}"
            );
            rounds.push([
                a50, a99, amax, p50, p99, r50, r99, rmax, v50, v99, vmax, h50, h99, hmax, b50, b99,
                bmax,
            ]);
        }
        let median = |i: usize| {
            let mut values: Vec<f64> = rounds.iter().map(|round| round[i]).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let m: Vec<f64> = (0..17).map(median).collect();
        let cells: Vec<String> = m
            .iter()
            .enumerate()
            // The histogram's maximum is the bound of its bucket.
            .map(|(i, v)| {
                if i == 2 {
                    format!("≤{v:.1}")
                } else {
                    format!("{v:.1}")
                }
            })
            .collect();
        println!("| {r} | {} |", cells.join(" | "));
        if missing > 0 {
            println!("  ({missing} committed events not seen by the consumer within the windows)");
        }
        verdicts.push(format!(
            "- {r} events/s: commit read → ack p99 {:.1} ms, {:+.1} ms from the raw produce → ack \
             p99 (in the producer: p99 {:.1} ms); commit → consumer p99 {:.1} ms, {:+.1} ms \
             from the floor hop p99",
            m[1],
            m[1] - m[6],
            m[4],
            m[9],
            m[9] - m[12]
        ));
    }
    println!();
    for verdict in verdicts {
        println!("{verdict}");
    }
}
