use super::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::HaSection;
use crate::group::memory::checkpoint;
use crate::group::{GroupCheckpoint, GroupLog, KafkaLog, Leadership};
use crate::metrics::Metrics;
use outbox_checkpoint::CheckpointStore;
use outbox_sink::KafkaConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

const TOPIC: &str = "checkpoints";

fn kafka(cluster: &MockCluster<'_, DefaultProducerContext>) -> KafkaConfig {
    KafkaConfig {
        brokers: cluster.bootstrap_servers(),
        topic: "orders".into(),
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

fn ha(instance: &str) -> HaSection {
    HaSection {
        group: "g".into(),
        // The least a configuration takes; the tests' leadership runs on
        // a shorter lease of its own.
        lease_ms: 2_000,
        checkpoint_topic: TOPIC.into(),
        instance: instance.into(),
        lock_suffix: None,
    }
}

/// A writer of group `g` as instance A, with its lease and metrics.
fn writer(
    cluster: &MockCluster<'_, DefaultProducerContext>,
    dir: &std::path::Path,
) -> (CheckpointWriter, Leadership, Arc<Metrics>) {
    instance_writer(cluster, dir, "A")
}

/// A writer of group `g` as `instance`, with its lease and metrics.
fn instance_writer(
    cluster: &MockCluster<'_, DefaultProducerContext>,
    dir: &std::path::Path,
    instance: &str,
) -> (CheckpointWriter, Leadership, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    let leadership = Leadership::new(Duration::from_millis(200));
    let log = KafkaLog::new(&kafka(cluster), &ha(instance), metrics.clone()).unwrap();
    let writer = CheckpointWriter::new(CheckpointStore::open(dir).unwrap(), metrics.clone())
        .in_group(Arc::new(log), leadership.clone(), instance);
    (writer, leadership, metrics)
}

/// Waits until every record `writer` shared is acknowledged.
fn flush_shares(writer: &CheckpointWriter) {
    let log = &writer.group.as_ref().unwrap().log;
    log.settle(Duration::from_secs(10));
}

fn records_in_topic(cluster: &MockCluster<'_, DefaultProducerContext>) -> i64 {
    let consumer: BaseConsumer = kafka(cluster).connection_config().create().unwrap();
    outbox_kafka::watermarks(consumer.client(), TOPIC)
        .unwrap()
        .unwrap()[0]
        .1
}

/// The key of every record in the topic, in offset order.
fn keys_in_topic(cluster: &MockCluster<'_, DefaultProducerContext>) -> Vec<String> {
    use rdkafka::message::Message;
    let consumer: BaseConsumer = kafka(cluster)
        .connection_config()
        .set("group.id", "keys")
        .create()
        .unwrap();
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment
        .add_partition_offset(TOPIC, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let records = records_in_topic(cluster) as usize;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut keys = Vec::new();
    while keys.len() < records && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            keys.push(String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned());
        }
    }
    keys
}

fn read(cluster: &MockCluster<'_, DefaultProducerContext>) -> GroupCheckpoint {
    KafkaLog::for_operator(&kafka(cluster), &ha("B"), Arc::default())
        .unwrap()
        .newest(Instant::now() + Duration::from_secs(20))
        .unwrap()
}

/// A process frozen past half its lease still believes it is active
/// until its next ping fails: what it writes then is stored but not
/// shared, or a stale checkpoint would reach the group with a fresh
/// timestamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_lease_stores_the_checkpoint_but_shares_nothing() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (writer, leadership, _) = writer(&cluster, dir.path());
    leadership.confirm(Instant::now());
    writer.write(&checkpoint(100)).unwrap();
    std::thread::sleep(Duration::from_millis(120));
    assert!(leadership.is_active() && !leadership.may_publish());
    writer.write(&checkpoint(200)).unwrap();
    assert_eq!(writer.load().unwrap().unwrap().position.pos, 200, "stored");
    flush_shares(&writer);
    assert_eq!(records_in_topic(&cluster), 1, "only the fresh one shared");
    match read(&cluster) {
        GroupCheckpoint::Found { checkpoint, .. } => assert_eq!(checkpoint.position.pos, 100),
        other => panic!("{other:?}"),
    }
}

/// Defect: taking back a clean stop's promise was shared without the
/// fence every other write has: an instance frozen past half its lease
/// shared it under a fresh timestamp, behind its successor's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_lease_takes_back_no_clean_stop_in_the_group() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (writer, leadership, _) = writer(&cluster, dir.path());
    leadership.confirm(Instant::now());
    let mut clean = checkpoint(100);
    clean.clean = true;
    writer.write(&clean).unwrap();
    std::thread::sleep(Duration::from_millis(120));
    assert!(leadership.is_active() && !leadership.may_publish());
    let refused = tokio::task::block_in_place(|| writer.unclean(&clean));
    assert!(refused.is_err(), "{refused:?}");
    assert!(
        writer.load().unwrap().unwrap().clean,
        "nothing stored either"
    );
    flush_shares(&writer);
    assert_eq!(records_in_topic(&cluster), 1, "only the fresh write shared");
    // With a fresh lease it is shared, and stored.
    leadership.confirm(Instant::now());
    tokio::task::block_in_place(|| writer.unclean(&clean)).unwrap();
    assert!(!writer.load().unwrap().unwrap().clean);
    assert_eq!(records_in_topic(&cluster), 2);
}

/// Defect: the share producer gave up on a record after 10 s whatever the
/// lease: a record queued by an instance just before it froze could land
/// after its successor's (a lease is 2 s at least). It now expires after a
/// quarter of a lease, as the messages of the data producer do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_that_cannot_land_within_a_quarter_lease_is_dropped_not_delivered_late() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (writer, leadership, metrics) = writer(&cluster, dir.path());
    leadership.confirm(Instant::now());
    // Connected, and one record in.
    tokio::task::block_in_place(|| writer.write_first(&checkpoint(100))).unwrap();
    // Queued while the broker cannot be reached (as by a process frozen
    // before it sent it), for longer than a quarter of the 2 s lease.
    cluster.broker_down(1).unwrap();
    leadership.confirm(Instant::now());
    writer.write(&checkpoint(200)).unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    cluster.broker_up(1).unwrap();
    writer
        .group
        .as_ref()
        .unwrap()
        .log
        .settle(Duration::from_secs(5));
    let rendered = metrics.render();
    assert!(
        rendered.contains("outbox_forwarder_ha_share_failures_total 1"),
        "the late record was given up:\n{rendered}"
    );
    assert_eq!(
        records_in_topic(&cluster),
        1,
        "only the first record landed"
    );
}

/// A share the broker refuses (here: not authorised to write the topic)
/// is counted, makes the instance unready, and fails a record that
/// gates publishing (the group's first start) instead of being lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_share_is_counted_and_the_first_start_fails() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    let dir = tempfile::tempdir().unwrap();
    let (writer, leadership, metrics) = writer(&cluster, dir.path());
    leadership.confirm(Instant::now());
    let first = writer.write_first(&checkpoint(100));
    let err = first.expect_err("the first start needs the broker's ack");
    assert!(
        err.contains("Authorization") || err.contains("authoriz"),
        "{err}"
    );
    assert!(metrics.is_share_failing());
    assert!(
        metrics
            .render()
            .contains("outbox_forwarder_ha_share_failures_total 1"),
        "{}",
        metrics.render()
    );
    assert_eq!(
        writer.load().unwrap(),
        None,
        "nothing stored: it is tried again"
    );
    assert_eq!(records_in_topic(&cluster), 0);

    // Once the broker takes it, the instance is ready again. librdkafka may
    // refuse the topic locally until its metadata is refreshed after the
    // authorisation error, so the record is tried again for a while, as
    // the forwarder tries its first start again.
    cluster.clear_request_errors(RDKafkaApiKey::Produce);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        leadership.confirm(Instant::now());
        match writer.write_first(&checkpoint(100)) {
            Ok(()) => break,
            Err(error) if Instant::now() < deadline => {
                tracing::info!(%error, "the share is refused still; trying again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("the broker never took the record: {error}"),
        }
    }
    assert!(!metrics.is_share_failing());
    assert!(matches!(read(&cluster), GroupCheckpoint::Found { .. }));
}

fn produce(cluster: &MockCluster<'_, DefaultProducerContext>, records: &[(&str, Vec<u8>)]) {
    let producer: ThreadedProducer<DefaultProducerContext> = kafka(cluster)
        .connection_config()
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for (key, payload) in records {
        let mut record: BaseRecord<'_, str, [u8]> =
            BaseRecord::to(TOPIC).key(*key).payload(payload.as_slice());
        while let Err((_, back)) = producer.send(record) {
            record = back;
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    producer.flush(Duration::from_secs(20)).unwrap();
}

/// The newest record of the group is found from the tail, however many
/// records of other groups come after it, and however many of its own
/// come before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_newest_record_is_read_from_the_tail() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    assert!(matches!(read(&cluster), GroupCheckpoint::NeverStarted));
    let json = |pos| serde_json::to_vec(&checkpoint(pos)).unwrap();
    let mut records: Vec<(&str, Vec<u8>)> = (0..3000).map(|i| ("g", json(i))).collect();
    records.extend((0..5000).map(|i| ("other", json(i))));
    produce(&cluster, &records);
    match read(&cluster) {
        GroupCheckpoint::Found { checkpoint, .. } => assert_eq!(checkpoint.position.pos, 2999),
        other => panic!("{other:?}"),
    }
    // Only other groups' records: this group never started.
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    produce(&cluster, &[("other", json(1))]);
    assert!(matches!(read(&cluster), GroupCheckpoint::NeverStarted));
}

/// An unreadable newest record is not skipped for an older readable one
/// (nor for nothing, which would mean `checkpoint.start`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_newest_record_is_reported_with_its_offset() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let json = serde_json::to_vec(&checkpoint(7)).unwrap();
    produce(&cluster, &[("g", json), ("g", b"{\"format\":99}".to_vec())]);
    match read(&cluster) {
        GroupCheckpoint::Unreadable(why) => {
            assert!(why.contains("partition 0, offset 1"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

/// Defect: a shared record was adopted only if its `written_at_ms` was
/// newer than the store's, comparing the wall clocks of different hosts:
/// a standby whose clock ran ahead kept its own checkpoint over the
/// group's newer records (an operator's `checkpoint set` moving it back,
/// its successor's progress), and logged "caught up" with a position it
/// did not use. The topic's offsets order the group's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_whose_clock_runs_ahead_follows_the_groups_newer_records() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (writer, _, _) = writer(&cluster, dir.path());
    // Its own checkpoint, stamped by a clock an hour ahead.
    let mut own = checkpoint(500);
    own.written_at_ms += 3_600_000;
    writer.store().save(&own).unwrap();
    let json = |pos| serde_json::to_vec(&checkpoint(pos)).unwrap();
    // The group's records: an operator set it back to 100, then 150.
    produce(&cluster, &[("g", json(100)), ("g", json(150))]);
    let newest = || match read(&cluster) {
        GroupCheckpoint::Found {
            checkpoint, offset, ..
        } => (checkpoint, offset),
        other => panic!("{other:?}"),
    };
    let (shared, offset) = newest();
    assert_eq!(offset, 1);
    assert!(writer.adopt(&shared, offset).unwrap(), "adopted");
    assert_eq!(writer.load().unwrap().unwrap().position.pos, 150);
    // The same record again changes nothing; the next one is taken.
    assert!(!writer.adopt(&shared, offset).unwrap());
    produce(&cluster, &[("g", json(160))]);
    let (shared, offset) = newest();
    assert!(writer.adopt(&shared, offset).unwrap());
    assert_eq!(writer.load().unwrap().unwrap().position.pos, 160);
}

/// Defect: any instance that took the lock within a lease of a clean
/// hand-over skipped the hold-off, not only the next one: after the next
/// holder's lock connection was cut (a `KILL`, a proxy), a third instance
/// took the lock, read the same hand-over, and published at once beside
/// the second, which publishes until its next failed ping. Now each new
/// holder records its term on the topic: only the first mark follows the
/// hand-over directly, and only that holder skips the hold-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_holder_after_a_hand_over_skips_the_hold_off() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, a_lease, _) = instance_writer(&cluster, dirs[0].path(), "A");
    a_lease.confirm(Instant::now());
    tokio::task::block_in_place(|| a.write_first(&checkpoint(100))).unwrap();
    a_lease.confirm(Instant::now());
    a.write(&checkpoint(120)).unwrap();
    a_lease.confirm(Instant::now());
    tokio::task::block_in_place(|| a.hand_over());
    let (handed, offset) = match read(&cluster) {
        GroupCheckpoint::Found {
            checkpoint,
            handed_over_at_ms: Some(_),
            offset,
        } => (checkpoint, offset),
        other => panic!("the newest record is the hand-over: {other:?}"),
    };
    assert_eq!(handed.position.pos, 120);
    let (b, b_lease, _) = instance_writer(&cluster, dirs[1].path(), "B");
    let (c, c_lease, _) = instance_writer(&cluster, dirs[2].path(), "C");
    b_lease.confirm(Instant::now());
    let b_first = tokio::task::block_in_place(|| b.record_term(&handed, Some(offset))).unwrap();
    c_lease.confirm(Instant::now());
    let c_first = tokio::task::block_in_place(|| c.record_term(&handed, Some(offset))).unwrap();
    assert!(
        b_first,
        "the first holder after the hand-over skips the hold-off"
    );
    assert!(!c_first, "a later one, within the same lease, does not");
    // The marks are no checkpoints: the group's newest is still the
    // hand-over, and a holder that records its term now finds the marks
    // after it, and holds off.
    match read(&cluster) {
        GroupCheckpoint::Found {
            handed_over_at_ms: Some(_),
            checkpoint,
            offset: newest,
        } => assert!(newest == offset && checkpoint.position.pos == 120),
        other => panic!("{other:?}"),
    }
    b_lease.confirm(Instant::now());
    let again = tokio::task::block_in_place(|| b.record_term(&handed, Some(offset))).unwrap();
    assert!(!again, "a later term after the same hand-over holds off");
}

/// A term's mark carries the checkpoint the term resumes from, but the
/// previous holder may still share a newer one until its fence closes: a
/// mark that lands after that newer one does not move the group's
/// checkpoint back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terms_mark_never_moves_the_groups_checkpoint_back() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, a_lease, _) = instance_writer(&cluster, dirs[0].path(), "A");
    a_lease.confirm(Instant::now());
    tokio::task::block_in_place(|| a.write_first(&checkpoint(100))).unwrap();
    // B takes the lock having read 100; A, its connection cut but its
    // fence still open, shares 150; then B's mark (100) lands.
    a_lease.confirm(Instant::now());
    a.write(&checkpoint(150)).unwrap();
    flush_shares(&a);
    let (b, b_lease, _) = instance_writer(&cluster, dirs[1].path(), "B");
    b_lease.confirm(Instant::now());
    let first = tokio::task::block_in_place(|| b.record_term(&checkpoint(100), None)).unwrap();
    assert!(!first, "no hand-over: it holds off");
    // Under a key of its own: compaction, which keeps each key's newest
    // record, never drops the group's last checkpoint for a mark.
    assert_eq!(keys_in_topic(&cluster), ["g", "g", "g/term"]);
    match read(&cluster) {
        GroupCheckpoint::Found { checkpoint, .. } => assert_eq!(checkpoint.position.pos, 150),
        other => panic!("{other:?}"),
    }
}

/// Defect: a holder whose claim of a hand-over was not acknowledged (a
/// slow broker) held off and published anyway; a holder after it found no
/// record after the hand-over, counted itself first, skipped the hold-off
/// and published beside it. A term's mark that does not land is an error
/// now: the role loop publishes nothing in that term and tries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terms_mark_that_does_not_land_is_an_error() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (writer, leadership, _) = writer(&cluster, dir.path());
    leadership.confirm(Instant::now());
    tokio::task::block_in_place(|| writer.write_first(&checkpoint(100))).unwrap();
    cluster.broker_down(1).unwrap();
    leadership.confirm(Instant::now());
    let recorded = tokio::task::block_in_place(|| writer.record_term(&checkpoint(100), Some(0)));
    cluster.broker_up(1).unwrap();
    assert!(recorded.is_err(), "{recorded:?}");
    // Stale lease: not even tried.
    std::thread::sleep(Duration::from_millis(120));
    let stale = tokio::task::block_in_place(|| writer.record_term(&checkpoint(100), None));
    assert!(stale.is_err(), "{stale:?}");
    assert_eq!(records_in_topic(&cluster), 1, "no mark landed");
}
