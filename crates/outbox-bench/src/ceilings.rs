//! The two ceilings of a catch-up: binlog read + decode with no Kafka,
//! and raw idempotent produce of the same messages.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::workload::server_id;
use harness::DbServer;
use outbox_core::{BinlogPosition, OutboxEvent, RowOrigin};
use outbox_forwarder::ForwarderConfig;
use outbox_sink::MessageHeaders;
use outbox_source::{
    server, BinlogSource, ColumnMapping, DecodeConfig, EventIdFormat, OutboxTables, StreamConfig,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use crate::backlog::payload;
use crate::cpu::{CpuMark, CpuUse};

/// The forwarder's binlog reader and decoder on `schema`'s outbox, from `from`.
pub(crate) async fn bench_source(
    db: &DbServer,
    schema: &str,
    from: &BinlogPosition,
) -> BinlogSource {
    let opts = server::parse_url(&server::MysqlConnect::new(db.forwarder_url())).unwrap();
    let mut conn = server::connect(&opts).await.unwrap();
    let info = server::server_info(&mut conn).await.unwrap();
    let decode = DecodeConfig {
        columns: ColumnMapping::default(),
        event_id_format: EventIdFormat::Uuid,
        max_transaction_bytes: 64 << 20,
        ..DecodeConfig::new(OutboxTables::new(vec![format!("{schema}.outbox_event")
            .parse()
            .unwrap()]))
    };
    let stream = StreamConfig {
        server_id: server_id(),
        heartbeat: Duration::from_secs(5),
    };
    BinlogSource::start_on(conn, info, &stream, decode, from, None, None)
        .await
        .unwrap()
}

/// Ceiling (a): read and decode the backlog's binlog range, no Kafka.
pub(crate) async fn decode_ceiling(
    db: &DbServer,
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
pub(crate) struct AckCount {
    pub(crate) acked: AtomicUsize,
    pub(crate) failed: AtomicUsize,
    pub(crate) landed: tokio::sync::Notify,
}

pub(crate) struct CountingContext(Arc<AckCount>);

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
pub(crate) async fn produce_ceiling(
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
            payload: Some(payload(i, size).into_bytes()),
            committed_at_ms: 1_765_000_000_000 + i as u64,
            shape: Default::default(),
            origin: RowOrigin {
                schema: schema.clone(),
                table: table.clone(),
                event_position: BinlogPosition::new("mysql-bin.000001", 1_000_000 + i as u64 * 700),
                row_index: 0,
            },
        })
        .collect();
    // And their transactions' GTIDs, as MariaDB logs them.
    let gtids: Vec<String> = (0..n).map(|i| format!("0-1-{}", i + 1)).collect();
    let headers = MessageHeaders {
        coordinates: forwarder.kafka.coordinate_headers,
    };
    let window = forwarder.kafka.max_in_flight;
    let started = Instant::now();
    let cpu = CpuMark::start(std::process::id());
    for (i, (event, gtid)) in events.iter().zip(&gtids).enumerate() {
        if i + 1 >= window {
            count.wait_for(i + 2 - window).await;
        }
        // The headers are built per message, as the forwarder builds them.
        send(
            BaseRecord::to(topic)
                .key(event.key_bytes())
                .payload(event.payload.as_deref().unwrap_or_default())
                .headers(headers.for_event(event, "1@127.0.0.1", Some((gtid, 0)))),
        );
    }
    count.wait_for(n + 1).await;
    let took = started.elapsed();
    let cpu = cpu.spent(n);
    assert_eq!(count.failed.load(Ordering::Relaxed), 0, "refused messages");
    (took, cpu)
}
