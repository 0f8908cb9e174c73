//! Steady-state latency: commits at a fixed rate, when they are read,
//! acked and readable, beside the broker's own floor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::{unique, Broker, DbServer};
use mysql_async::prelude::Queryable;
use outbox_forwarder::ForwarderConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext};

use crate::args::Args;
use crate::backlog::{order_transaction, payload};
use crate::catch_up::{streaming_forwarder, OtherBuild, Running};
use crate::ceilings::bench_source;
use crate::sampling::{delays, histogram_quantile, percentile, scrape};

/// A consumer thread recording when each key becomes readable.
pub(crate) fn record_arrivals(
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
pub(crate) async fn commit_at_rate(
    db: &DbServer,
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
                    conn.query_drop(order_transaction("c", &id, order, size))
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
pub(crate) struct LatencyContext(Arc<Mutex<Vec<Duration>>>);

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
pub(crate) struct Floor {
    /// Raw produce → ack, sorted.
    pub(crate) acks: Vec<Duration>,
    /// Produce → readable by the benchmark's consumer, sorted.
    pub(crate) hops: Vec<Duration>,
}

/// The floor of both latencies at `rate` messages/s: a producer with the
/// forwarder's settings (`forwarder`, idempotent, acks=all, lz4) but
/// `linger.ms=0`, so that nothing waits for company, sending messages of the
/// forwarder's size in the same 10 ms slices as the committing writers; its
/// acks timed on librdkafka's delivery thread, its messages timed again by a
/// consumer with the latency runs' settings.
pub(crate) async fn broker_floor(
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
pub(crate) async fn record_binlog_reads(
    db: &DbServer,
    schema: &str,
    mut stop: outbox_forwarder::shutdown::Shutdown,
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
                _ = stop.requested() => break,
            }
        }
        source.close().await;
        seen
    })
}

/// Steady-state latency at each of `--rates`, in rounds, printed as a
/// table of medians with the verdicts against the floors.
pub(crate) async fn steady_state_latency(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    config: &ForwarderConfig,
) {
    println!(
        "\n## Steady-state latency ({} rounds of {} s per rate, each after a 3 s warm-up; \
         ms, medians over the rounds)\n",
        args.latency_rounds, args.latency_seconds
    );
    println!("| rate (events/s) | commit read → ack p50 (histogram) | p99 | max | of which in the producer p50 | p99 | raw produce → ack p50 | p99 | max | commit → consumer p50 | p99 | max | floor hop p50 | p99 | max | commit → binlog read p50 | p99 | max |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut verdicts = Vec::new();
    // This build, and the --compare-with build in turn with it (which goes
    // first alternates by round).
    let builds: Vec<Option<&std::path::Path>> = std::iter::once(None)
        .chain(args.compare_with.as_deref().map(Some))
        .collect();
    for &r in &args.rates {
        let mut rounds: Vec<Vec<LatencyRound>> = vec![Vec::new(); builds.len()];
        let mut missing = vec![0; builds.len()];
        for round in 1..=args.latency_rounds {
            for turn in 0..builds.len() {
                let b = (turn + round as usize) % builds.len();
                let _other = builds[b].map(OtherBuild::use_binary);
                let (figures, not_seen) = latency_round(args, db, broker, schema, config, r).await;
                missing[b] += not_seen;
                let label = builds[b].map_or("this build".into(), |p| p.display().to_string());
                eprintln!("{r}/s, round {round}, {label}: {figures}");
                rounds[b].push(figures);
            }
        }
        for (b, (rounds, missing)) in rounds.iter().zip(missing).enumerate() {
            let label = if b == 0 {
                String::new()
            } else {
                " (the --compare-with build)".into()
            };
            verdicts.push(latency_row(r, &label, rounds, missing));
        }
    }
    println!();
    for verdict in verdicts {
        println!("{verdict}");
    }
}

/// Prints the table row of `rounds` at rate `r` (of the build `label`
/// names), and returns its verdict line.
fn latency_row(r: u32, label: &str, rounds: &[LatencyRound], missing: usize) -> String {
    let m = LatencyRound::median(rounds);
    // The histogram's maximum is the bound of its bucket.
    let cells: Vec<String> = std::iter::once(format!("{:.1}", m.ack[0]))
        .chain([format!("{:.1}", m.ack[1]), format!("≤{:.1}", m.ack[2])])
        .chain(
            m.in_producer
                .iter()
                .chain(&m.raw)
                .chain(&m.consumer)
                .chain(&m.floor_hop)
                .chain(&m.binlog_read)
                .map(|v| format!("{v:.1}")),
        )
        .collect();
    println!("| {r}{label} | {} |", cells.join(" | "));
    if missing > 0 {
        println!("  ({missing} committed events not seen by the consumer within the windows)");
    }
    format!(
        "- {r} events/s{label}: commit read → ack p99 {:.1} ms, {:+.1} ms from the raw produce \
             → ack p99 (in the producer: p99 {:.1} ms; the forwarder's own share {:.1} ms); \
             commit → consumer p99 {:.1} ms, {:+.1} ms from the floor hop p99",
        m.ack[1],
        m.ack[1] - m.raw[1],
        m.in_producer[1],
        m.ack[1] - m.in_producer[1],
        m.consumer[1],
        m.consumer[1] - m.floor_hop[1]
    )
}

/// One round at `rate` events/s on a freshly started forwarder: its
/// figures, and how many committed events the consumer did not see.
async fn latency_round(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    config: &ForwarderConfig,
    r: u32,
) -> (LatencyRound, usize) {
    let Running {
        mut forwarder,
        _setup,
        topic,
        metrics_port: port,
    } = streaming_forwarder(args, db, broker, schema).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let arrivals = record_arrivals(broker, &topic, stop.clone());
    let (stop_reading, stopped) = outbox_forwarder::shutdown::channel();
    let reads = record_binlog_reads(db, schema, stopped).await;
    commit_at_rate(db, schema, r, 3, args.payload_bytes).await;
    let before = scrape(port).unwrap();
    let committed = commit_at_rate(db, schema, r, args.latency_seconds, args.payload_bytes).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = scrape(port).unwrap();
    assert!(forwarder.terminate().success());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let arrived = arrivals.join().unwrap();
    stop_reading.request();
    let read = delays(&committed, &reads.await.unwrap());
    let visible = delays(&committed, &arrived);
    let missing = committed.len() - visible.len();
    let ack = |q| histogram_quantile(&before.buckets, &after.buckets, q) * 1000.0;
    let in_producer = |q| histogram_quantile(&before.producer, &after.producer, q) * 1000.0;
    let floor = if args.floor_under_load {
        // Its warm-up and drain included.
        let load = commit_at_rate(db, schema, r, args.latency_seconds + 5, args.payload_bytes);
        tokio::join!(broker_floor(config, broker, r, args), load).0
    } else {
        broker_floor(config, broker, r, args).await
    };
    let spread = |sorted: &[Duration]| {
        [0.5, 0.99, 1.0].map(|q| percentile(sorted, q).as_secs_f64() * 1000.0)
    };
    let figures = LatencyRound {
        ack: [ack(0.5), ack(0.99), ack(1.0)],
        in_producer: [in_producer(0.5), in_producer(0.99)],
        raw: spread(&floor.acks),
        consumer: spread(&visible),
        floor_hop: spread(&floor.hops),
        binlog_read: spread(&read),
    };
    (figures, missing)
}

/// One latency round's figures, ms: p50, p99 and (where measured) max.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LatencyRound {
    /// Commit read → ack, from the forwarder's histogram.
    ack: [f64; 3],
    /// Of which in the producer (p50, p99).
    in_producer: [f64; 2],
    /// The floor: a plain producer's produce → ack.
    raw: [f64; 3],
    /// Commit → readable by a consumer.
    consumer: [f64; 3],
    /// The floor: produce → readable by a consumer.
    floor_hop: [f64; 3],
    /// Commit → read and decoded by the benchmark's own binlog reader.
    binlog_read: [f64; 3],
}

impl LatencyRound {
    /// Each figure's median over `rounds` (not empty).
    fn median(rounds: &[LatencyRound]) -> LatencyRound {
        let median = |figure: &dyn Fn(&LatencyRound) -> f64| {
            let mut values: Vec<f64> = rounds.iter().map(figure).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let three = |f: fn(&LatencyRound) -> &[f64; 3]| {
            [0, 1, 2].map(|i| median(&|r: &LatencyRound| f(r)[i]))
        };
        LatencyRound {
            ack: three(|r| &r.ack),
            in_producer: [0, 1].map(|i| median(&|r: &LatencyRound| r.in_producer[i])),
            raw: three(|r| &r.raw),
            consumer: three(|r| &r.consumer),
            floor_hop: three(|r| &r.floor_hop),
            binlog_read: three(|r| &r.binlog_read),
        }
    }
}

impl std::fmt::Display for LatencyRound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a50, a99, _] = self.ack;
        let [p50, p99] = self.in_producer;
        let [r50, r99, _] = self.raw;
        let [v50, v99, _] = self.consumer;
        let [h50, h99, _] = self.floor_hop;
        let [b50, b99, _] = self.binlog_read;
        write!(
            f,
            "ack p50/p99 {a50:.1}/{a99:.1} (producer {p50:.1}/{p99:.1}), raw {r50:.1}/{r99:.1}, \
             consumer {v50:.1}/{v99:.1}, floor hop {h50:.1}/{h99:.1}, binlog {b50:.1}/{b99:.1}"
        )
    }
}
