use super::*;
use outbox_core::{BinlogPosition, Delivered, PartitionBy};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use std::sync::atomic::Ordering;
use std::time::Instant;

fn event(id: &str, row_index: u32) -> OutboxEvent {
    OutboxEvent {
        event_id: id.into(),
        event_type: Some("ORDER_ACCEPTED".into()),
        aggregate_type: Some("order".into()),
        aggregate_id: Some("42".into()),
        event_version: None,
        key: None,
        payload: Some(b"{\"n\":1}".to_vec()),
        committed_at_ms: 0,
        shape: Default::default(),
        origin: RowOrigin {
            schema: "shop".into(),
            table: "outbox_event".into(),
            event_position: BinlogPosition::new("bin.000003", 4096),
            row_index,
        },
    }
}

fn sink(cluster: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>) -> KafkaSink {
    sink_with(cluster, &[])
}

fn sink_with(
    cluster: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
    properties: &[(&str, &str)],
) -> KafkaSink {
    cluster.create_topic("orders", 1, 1).unwrap();
    let mut config = config_for(cluster, "orders");
    config.properties = properties
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    KafkaSink::new(&config, Arc::default()).unwrap()
}

/// A sink's configuration for `cluster`: `topic`, dead letters to `dlq`.
fn config_for(
    cluster: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
    topic: &str,
) -> KafkaConfig {
    KafkaConfig {
        brokers: cluster.bootstrap_servers(),
        topic: topic.into(),
        dead_letter_topic: "dlq".into(),
        reserved_topics: Vec::new(),
        allowed_topics: Vec::new(),
        signing: None,
        topic_creation: None,
        properties: Default::default(),
        auth: Default::default(),
        partitioner: Default::default(),
        coordinate_headers: Default::default(),
    }
}

/// How long the message sent under `tag` (with `send_now` after it, or
/// not) takes to be acked.
async fn ack_time(sink: &KafkaSink, tag: u64, kick: bool) -> Duration {
    let started = Instant::now();
    sink.send(&event(&format!("e-{tag}"), 0), tag)
        .await
        .unwrap();
    if kick {
        sink.send_now();
    }
    acks_until(sink, |a| a.tags.contains(&tag)).await;
    started.elapsed()
}

#[tokio::test]
async fn send_now_does_not_wait_out_the_linger() {
    let cluster = MockCluster::new(1).unwrap();
    let linger = Duration::from_millis(1500);
    let sink = sink_with(&cluster, &[("linger.ms", "1500")]);
    // The producer id first, so that only the linger is timed below.
    ack_time(&sink, 1, true).await;
    // Unkicked, a lone message waits out the linger...
    let held = ack_time(&sink, 2, false).await;
    assert!(held >= linger - Duration::from_millis(100), "{held:?}");
    // ...kicked, it does not (a kick is best effort: the median of three).
    let mut kicked = Vec::new();
    for tag in 3..6 {
        kicked.push(ack_time(&sink, tag, true).await);
    }
    kicked.sort();
    assert!(kicked[1] < linger / 2, "{kicked:?}");
}

/// The topics `cluster` has, as a consumer (which never asks for one to
/// be created) sees them.
fn topics_of(cluster: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>) -> Vec<String> {
    use rdkafka::consumer::Consumer;
    let client: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .create()
        .unwrap();
    client
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap()
        .topics()
        .iter()
        .map(|t| t.name().to_owned())
        .collect()
}

/// Defect: the producer asked the broker to create a missing topic on
/// produce (librdkafka's producer default), so rows could create topics
/// where the broker allows it, with the broker's defaults. It asks only
/// when `allow.auto.create.topics` is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_is_created_on_produce_only_when_configured() {
    let cluster = MockCluster::new(1).unwrap();
    let mut config = config_for(&cluster, "{aggregate_type}");
    let sink = KafkaSink::new(&config, Arc::default()).unwrap();
    let mut routed = event("a", 0);
    routed.aggregate_type = Some("never.created".into());
    sink.send(&routed, 1).await.unwrap();
    sink.send_now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!topics_of(&cluster).contains(&"never.created".to_string()));

    config
        .properties
        .insert("allow.auto.create.topics".into(), "true".into());
    let sink = KafkaSink::new(&config, Arc::default()).unwrap();
    routed.aggregate_type = Some("created.on.produce".into());
    sink.send(&routed, 2).await.unwrap();
    sink.send_now();
    acks_until(&sink, |a| a.tags.contains(&2)).await;
    assert!(topics_of(&cluster).contains(&"created.on.produce".to_string()));
}

/// Waits until `done` holds for the acks taken so far.
async fn acks_until(sink: &KafkaSink, done: impl Fn(&Acks) -> bool) -> Acks {
    let mut all = Acks::default();
    let mut batch = Acks::default();
    tokio::time::timeout(Duration::from_secs(30), async {
        while !done(&all) {
            sink.acks_ready().await;
            sink.take_acks(&mut batch);
            all.tags.append(&mut batch.tags);
            all.placements.append(&mut batch.placements);
            all.acked_at.append(&mut batch.acked_at);
            all.in_producer.append(&mut batch.in_producer);
            for (topic, delivered) in batch.per_topic.drain(..) {
                all.add_delivered(&topic, delivered);
            }
            all.failed = all.failed.take().or(batch.failed.take());
        }
    })
    .await
    .expect("the broker answered");
    all
}

/// A send waiting on a full queue stops handing over once the fence
/// says no (a lease gone stale during the wait), instead of handing
/// the message over when the queue frees up.
#[tokio::test]
async fn a_send_waiting_on_a_full_queue_stops_at_the_fence() {
    let cluster = MockCluster::new(1).unwrap();
    let mut sink = sink_with(&cluster, &[("queue.buffering.max.messages", "1")]);
    let open = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let gate = open.clone();
    sink.set_fence(Arc::new(move || gate.load(Ordering::Relaxed)));
    // The broker down: the first message stays queued, the queue full.
    cluster.broker_down(1).unwrap();
    sink.send(&event("e1", 0), 1).await.unwrap();
    let closing = {
        let open = open.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            open.store(false, Ordering::Relaxed);
        })
    };
    let started = Instant::now();
    let sent = sink.send(&event("e2", 1), 2).await;
    closing.await.unwrap();
    let err = sent.expect_err("fenced");
    assert!(err.to_string().contains(FENCED), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(sink.outstanding(), 1, "only the first was handed over");
    // Closed: not even an empty queue takes a message.
    cluster.broker_up(1).unwrap();
    let err = sink.send(&event("e3", 2), 3).await.expect_err("fenced");
    assert!(err.to_string().contains(FENCED), "{err}");
}

#[tokio::test]
async fn acks_come_back_under_their_tags_with_counts_per_topic() {
    let cluster = MockCluster::new(1).unwrap();
    let sink = sink(&cluster);
    let sent = Instant::now();
    for (n, tag) in [(0, 7), (1, 7), (2, 8)] {
        sink.send(&event(&format!("e{n}"), n), tag).await.unwrap();
    }
    let acks = acks_until(&sink, |a| a.tags.len() == 3).await;
    let taken = Instant::now();
    assert_eq!(sink.outstanding(), 0);
    assert_eq!(acks.acked_at.len(), 3);
    assert!(acks.acked_at.iter().all(|&at| sent <= at && at <= taken));
    // librdkafka's own timing, from each send to its report.
    assert_eq!(acks.in_producer.len(), 3);
    assert!(
        acks.in_producer
            .iter()
            .all(|&d| d > Duration::ZERO && d <= taken - sent),
        "{:?}",
        acks.in_producer
    );
    let mut tags = acks.tags.clone();
    tags.sort();
    assert_eq!(tags, [7, 7, 8]);
    let payload = event("e", 0).payload.map_or(0, |p| p.len());
    assert_eq!(
        acks.per_topic,
        [(
            "orders".to_string(),
            Delivered {
                messages: 3,
                bytes: 3 * payload
            }
        )]
    );
    assert!(acks.failed.is_none());
}

#[tokio::test]
async fn a_message_the_broker_refuses_names_its_event_table_and_position() {
    let cluster = MockCluster::new(1).unwrap();
    let sink = sink(&cluster);
    // The broker's answer to the first produce request.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    sink.send(&event("e-refused", 5), 1).await.unwrap();
    let acks = acks_until(&sink, |a| a.failed.is_some()).await;
    assert!(acks.tags.is_empty(), "the refused message is not acked");
    // Its report is in: a drain waits for nothing more.
    assert_eq!(sink.outstanding(), 0);
    match acks.failed {
        Some(ForwarderError::Definite(DefiniteError::BadRow {
            table,
            position,
            row_index,
            event_id,
            reason,
        })) => {
            assert_eq!(table, "shop.outbox_event");
            assert_eq!(position, BinlogPosition::new("bin.000003", 4096));
            assert_eq!(row_index, 5);
            assert_eq!(event_id.as_deref(), Some("e-refused"));
            assert!(reason.contains("Kafka refused the message"), "{reason}");
        }
        other => panic!("expected a bad row, got {other:?}"),
    }
}

/// A row placed by `partition_column` lands where the producer's
/// partitioner puts a message keyed by the same value, under either
/// `kafka.partitioner`; an integer column names the partition, and one the
/// topic lacks is a bad row.
#[tokio::test]
async fn a_partition_column_places_rows_like_keys_and_numbers_name_partitions() {
    let mut placed_by = Vec::new();
    for partitioner in [Partitioner::Crc32, Partitioner::Murmur2] {
        placed_by.push(placed_like_keys(partitioner).await);
    }
    assert_ne!(
        placed_by[0], placed_by[1],
        "the two partitioners placed 20 values alike"
    );
}

/// The partitions of 20 values, keyed and placed by `partition_column`
/// under `partitioner`, after checking that both agree with it.
async fn placed_like_keys(partitioner: Partitioner) -> Vec<i32> {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("placed", 6, 1).unwrap();
    let mut config = config_for(&cluster, "placed");
    config.partitioner = partitioner;
    let sink = KafkaSink::new(&config, Arc::default()).unwrap();
    let values: Vec<String> = (0..20).map(|i| format!("tenant-{i}")).collect();
    for (i, value) in values.iter().enumerate() {
        let mut keyed = event(&format!("k-{i}"), 0);
        keyed.key = Some(value.clone().into_bytes());
        sink.send(&keyed, 2 * i as u64).await.unwrap();
        let mut placed = event(&format!("p-{i}"), 0);
        placed.shape_mut().partition = Some(PartitionBy::Hash(value.clone().into_bytes()));
        sink.send(&placed, 2 * i as u64 + 1).await.unwrap();
    }
    let mut numbered = event("n", 0);
    numbered.shape_mut().partition = Some(PartitionBy::Number(4));
    sink.send(&numbered, 100).await.unwrap();
    let acks = acks_until(&sink, |a| a.tags.len() == 41).await;
    let partition = |tag: u64| {
        let at = acks.tags.iter().position(|&t| t == tag).unwrap();
        acks.placements[at].partition
    };
    let mut used = std::collections::BTreeSet::new();
    let mut placed = Vec::new();
    for i in 0..values.len() as u64 {
        let value = &values[i as usize];
        assert_eq!(partition(2 * i + 1), partition(2 * i), "{value}");
        assert_eq!(
            partition(2 * i),
            partitioner.partition(value.as_bytes(), 6),
            "{partitioner:?} {value}"
        );
        used.insert(partition(2 * i));
        placed.push(partition(2 * i));
    }
    assert!(used.len() > 2, "20 values hashed into partitions {used:?}");
    assert_eq!(partition(100), 4);

    numbered.shape_mut().partition = Some(PartitionBy::Number(6));
    let refused = sink.send(&numbered, 101).await.unwrap_err().to_string();
    assert!(
        refused.contains("partitions 0 to 5") && refused.contains("bin.000003:4096"),
        "{refused}"
    );
    placed
}

/// No row reaches the dead-letter topic, a reserved one (an `[ha]` group's
/// checkpoint topic, its own or another group's), one beginning with `_`,
/// or one `kafka.allowed_topics` does not list, by its topic column or by
/// the template; any other topic it names is its topic.
#[tokio::test]
async fn a_row_cannot_route_itself_to_the_dead_letter_reserved_or_internal_topics() {
    let cluster = MockCluster::new(1).unwrap();
    let mut config = config_for(&cluster, "{aggregate_type}");
    config.reserved_topics = vec!["outbox.forwarder.checkpoints".into()];
    let sink = KafkaSink::new(&config, Arc::default()).unwrap();
    for refused in [
        "dlq",
        "outbox.forwarder.checkpoints",
        "__consumer_offsets",
        // Another group's checkpoint topic, the schema registry's.
        "outbox.forwarder.checkpoints.payments",
        "_schemas",
    ] {
        let mut routed = event("r", 0);
        routed.shape_mut().topic = Some(refused.into());
        let err = sink.topic_for(&routed).unwrap_err().to_string();
        assert!(err.contains(refused) && err.contains("event_id r"), "{err}");
        let mut templated = event("t", 0);
        templated.aggregate_type = Some(refused.into());
        assert!(
            sink.topic_for(&templated).is_err(),
            "{refused} by the template"
        );
    }
    let mut routed = event("r", 0);
    routed.shape_mut().topic = Some("invoices".into());
    assert_eq!(sink.topic_for(&routed).unwrap(), "invoices");
    assert_eq!(sink.topic_for(&event("t", 0)).unwrap(), "order");

    // With kafka.allowed_topics, only what it lists.
    config.allowed_topics = vec!["order".into(), "invoices.*".into()];
    let sink = KafkaSink::new(&config, Arc::default()).unwrap();
    assert_eq!(sink.topic_for(&event("t", 0)).unwrap(), "order");
    routed.shape_mut().topic = Some("invoices.eu".into());
    assert_eq!(sink.topic_for(&routed).unwrap(), "invoices.eu");
    routed.shape_mut().topic = Some("payments".into());
    let err = sink.topic_for(&routed).unwrap_err().to_string();
    assert!(
        err.contains("kafka.allowed_topics (order, invoices.*)"),
        "{err}"
    );
}
