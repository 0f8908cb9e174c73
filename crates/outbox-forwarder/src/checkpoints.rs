//! The one writer of checkpoints, and the group's shared record of them.
//!
//! [`CheckpointWriter`] is the only code that writes a checkpoint: to the
//! local sled store (durably, before it returns) and, in an `[ha]` group, to
//! the group's topic (`[ha] checkpoint_topic`, key = the group). It shares
//! only while this instance may publish (the fence: a lease confirmed less
//! than half a lease ago), never on the role alone, so an instance that
//! wakes from a freeze cannot share a stale checkpoint under a fresh
//! timestamp.
//!
//! A share counts once the broker acknowledged it: each delivery report is
//! counted (`outbox_forwarder_ha_share_failures_total`), and while the last
//! one failed the active instance is not ready (`/readyz` 503). Records that
//! gate publishing (the group's first start, a hand-over, an operator's
//! `checkpoint set`) are waited for; a failed one is an error, never a
//! warning.
//!
//! Reading the group's topic ([`read_group_checkpoint`]) looks only at its
//! tail: the newest record of the group is what counts, so a takeover takes
//! as long with a million records in the topic as with ten. A group with no
//! record has never started; a group whose newest record cannot be read has
//! a history nobody can establish, and no instance publishes until an
//! operator sets the checkpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_checkpoint::{Checkpoint, CheckpointStore};
use outbox_core::DefiniteError;
use outbox_sink::KafkaConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::config::HaSection;
use crate::ha::Leadership;
use crate::metrics::Metrics;

/// The header of a record an instance shares last, on a clean stop after
/// it published.
pub const HANDED_OVER: &str = "handed_over_by";
/// The header of the first record of a group.
pub const GROUP_STARTED: &str = "group_started_by";
/// The header naming the instance (or `operator`) that shared a record.
pub const SHARED_BY: &str = "shared_by";

/// How long a record that gates publishing may take to be acknowledged.
const ACK_WAIT: Duration = Duration::from_secs(10);

/// Writes the checkpoints of one forwarder (see the module doc).
pub struct CheckpointWriter {
    store: CheckpointStore,
    group: Option<GroupShare>,
    metrics: Arc<Metrics>,
}

struct GroupShare {
    share: CheckpointShare,
    leadership: Leadership,
    instance: String,
}

impl CheckpointWriter {
    pub fn new(store: CheckpointStore, metrics: Arc<Metrics>) -> Self {
        Self {
            store,
            group: None,
            metrics,
        }
    }

    /// In a group: checkpoints are shared through `share` while
    /// `leadership` may publish.
    pub fn in_group(
        mut self,
        share: CheckpointShare,
        leadership: Leadership,
        instance: &str,
    ) -> Self {
        self.group = Some(GroupShare {
            share,
            leadership,
            instance: instance.to_owned(),
        });
        self
    }

    pub fn store(&self) -> &CheckpointStore {
        &self.store
    }

    pub fn load(&self) -> Result<Option<Checkpoint>, DefiniteError> {
        self.store.load()
    }

    /// Writes the watermark's checkpoint: stored durably, then shared (not
    /// waited for) if this instance may publish.
    pub fn write(&self, checkpoint: &Checkpoint) -> Result<(), DefiniteError> {
        self.store.save(checkpoint)?;
        if let Some(g) = &self.group {
            if g.leadership.may_publish() {
                g.share.send(checkpoint, &[(SHARED_BY, &g.instance)]);
            }
        }
        self.metrics.checkpoint_written(&checkpoint.position);
        Ok(())
    }

    /// Writes where a stream starts that has no checkpoint yet. In a group
    /// this is the group's first start: recorded on its topic, and
    /// acknowledged, before anything is published.
    pub fn write_first(&self, checkpoint: &Checkpoint) -> Result<(), String> {
        if let Some(g) = &self.group {
            if !g.leadership.may_publish() {
                return Err("the group's lease is not fresh".into());
            }
            g.share.send_acked(
                checkpoint,
                &[(SHARED_BY, &g.instance), (GROUP_STARTED, &g.instance)],
            )?;
            tracing::warn!(topic = %g.share.topic, start = %checkpoint.position, "first start of the group: no instance of it has published before; its start is recorded on the group's topic");
        }
        self.store.save(checkpoint).map_err(|e| e.to_string())?;
        self.metrics.checkpoint_written(&checkpoint.position);
        Ok(())
    }

    /// Stores a checkpoint the group shared, if it is newer than this
    /// instance's own (a standby following the active one).
    pub fn adopt(&self, shared: &Checkpoint) -> Result<bool, DefiniteError> {
        let newer = match self.store.load()? {
            Some(own) => shared.written_at_ms > own.written_at_ms,
            None => true,
        };
        if newer {
            self.store.save(shared)?;
            tracing::debug!(checkpoint = %shared.position, "shared checkpoint stored");
        }
        Ok(newer)
    }

    /// On a clean stop of an instance that published in this term: its
    /// last checkpoint, shared as a hand-over (the next holder need not
    /// hold off) and waited for.
    pub fn hand_over(&self) {
        let Some(g) = &self.group else {
            return;
        };
        if !g.leadership.may_publish() {
            return;
        }
        let Ok(Some(last)) = self.store.load() else {
            return;
        };
        let handed = g.share.send_acked(
            &last.rewritten_now(),
            &[(SHARED_BY, &g.instance), (HANDED_OVER, &g.instance)],
        );
        if let Err(e) = handed {
            tracing::warn!("the hand-over was not shared ({e}): the next holder holds off");
        }
    }

    /// An operator's `checkpoint set`: stored, and shared with the group
    /// (waited for: the group's next takeover must start from it).
    pub fn set_by_operator(&self, checkpoint: &Checkpoint) -> Result<(), DefiniteError> {
        self.store.save(checkpoint)?;
        if let Some(g) = &self.group {
            g.share
                .send_acked(checkpoint, &[(SHARED_BY, "operator")])
                .map_err(|e| {
                    DefiniteError::Config(format!(
                        "stored locally, but not shared with the group: {e}; run it again"
                    ))
                })?;
        }
        Ok(())
    }
}

/// Counts the delivery reports of shared checkpoints.
pub struct ShareReports {
    metrics: Arc<Metrics>,
    failures: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl ClientContext for ShareReports {}

impl ProducerContext for ShareReports {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.metrics.share_delivered(true),
            Err((e, _)) => {
                self.failures.fetch_add(1, Ordering::AcqRel);
                self.metrics.share_delivered(false);
                tracing::warn!(error = %e, "a checkpoint shared with the group was not acknowledged");
                *self.last_error.lock().expect("not poisoned") = Some(e.to_string());
            }
        }
    }
}

/// The producer of the group's topic.
pub struct CheckpointShare {
    producer: ThreadedProducer<ShareReports>,
    topic: String,
    group: String,
}

impl CheckpointShare {
    pub fn new(
        kafka: &KafkaConfig,
        config: &HaSection,
        metrics: Arc<Metrics>,
    ) -> Result<Self, DefiniteError> {
        let context = ShareReports {
            metrics,
            failures: AtomicU64::new(0),
            last_error: Mutex::new(None),
        };
        let producer = kafka
            .connection_config()
            .set("linger.ms", "0")
            .set("acks", "all")
            .set("message.timeout.ms", ACK_WAIT.as_millis().to_string())
            .create_with_context(context)
            .map_err(|e| {
                DefiniteError::Config(format!(
                    "cannot create the producer of ha.checkpoint_topic: {e}"
                ))
            })?;
        Ok(Self {
            producer,
            topic: config.checkpoint_topic.clone(),
            group: config.group.clone(),
        })
    }

    /// Queues `checkpoint` with `headers`; its delivery report is counted.
    fn send(&self, checkpoint: &Checkpoint, headers: &[(&str, &str)]) {
        let value = serde_json::to_vec(checkpoint).expect("a checkpoint serialises");
        let mut owned = OwnedHeaders::new();
        for (key, value) in headers {
            owned = owned.insert(Header {
                key,
                value: Some(*value),
            });
        }
        let record: BaseRecord<'_, str, [u8]> = BaseRecord::to(&self.topic)
            .key(self.group.as_str())
            .payload(value.as_slice())
            .headers(owned);
        if let Err((e, _)) = self.producer.send(record) {
            let context = self.producer.context();
            context.failures.fetch_add(1, Ordering::AcqRel);
            context.metrics.share_delivered(false);
            tracing::warn!(error = %e, topic = %self.topic, "cannot share the checkpoint");
        }
    }

    /// [`CheckpointShare::send`], then waits until the broker acknowledged
    /// it (and whatever was queued before it).
    fn send_acked(&self, checkpoint: &Checkpoint, headers: &[(&str, &str)]) -> Result<(), String> {
        let context = self.producer.context();
        let failed_before = context.failures.load(Ordering::Acquire);
        self.send(checkpoint, headers);
        let flushed =
            tokio::task::block_in_place(|| self.producer.flush(ACK_WAIT + Duration::from_secs(1)));
        if context.failures.load(Ordering::Acquire) != failed_before {
            let why = context
                .last_error
                .lock()
                .expect("not poisoned")
                .clone()
                .unwrap_or_else(|| "the producer refused it".into());
            return Err(format!("{} did not take the record: {why}", self.topic));
        }
        flushed.map_err(|e| format!("{} did not acknowledge the record: {e}", self.topic))
    }
}

/// What the group's topic says.
#[derive(Debug)]
pub enum GroupCheckpoint {
    /// No record of the group: it never started.
    NeverStarted,
    /// The group's newest record.
    Found {
        checkpoint: Box<Checkpoint>,
        /// It was a clean hand-over, shared at this time (epoch ms).
        handed_over_at_ms: Option<u64>,
    },
    /// The group's newest record cannot be read.
    Unreadable(String),
}

/// Records of the group looked at first from the end of each partition;
/// multiplied by 16 each time the group has none there.
const FIRST_WINDOW: i64 = 64;

/// Reads the newest record of the group from the tail of its topic.
/// Blocking; an error when the topic cannot be read by `deadline` (or does
/// not exist: [`ensure_topic`] creates it).
pub fn read_group_checkpoint(
    kafka: &KafkaConfig,
    config: &HaSection,
    deadline: Instant,
) -> Result<GroupCheckpoint, String> {
    let topic = &config.checkpoint_topic;
    let consumer: BaseConsumer = kafka
        .connection_config()
        .set(
            "group.id",
            format!("outbox-forwarder-standby-{}", config.instance),
        )
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .map_err(|e| format!("cannot read ha.checkpoint_topic {topic}: {e}"))?;
    let marks = outbox_sink::tail::watermarks(consumer.client(), topic)
        .map_err(|e| format!("cannot read ha.checkpoint_topic {topic}: {e}"))?
        .ok_or_else(|| format!("ha.checkpoint_topic {topic} does not exist"))?;
    // Per partition, the newest record of the group: (its payload parsed,
    // or why not, and whether it was a hand-over).
    let mut newest: Option<GroupCheckpoint> = None;
    for (partition, &(low, high)) in marks.iter().enumerate() {
        let mut window = FIRST_WINDOW;
        loop {
            let from = (high - window).max(low);
            let found = read_range(&consumer, config, partition as i32, from, high, deadline)?;
            if let Some(found) = found {
                newest = Some(match (newest, found) {
                    (
                        Some(GroupCheckpoint::Found {
                            checkpoint,
                            handed_over_at_ms,
                        }),
                        GroupCheckpoint::Found {
                            checkpoint: other, ..
                        },
                    ) if checkpoint.written_at_ms >= other.written_at_ms => {
                        GroupCheckpoint::Found {
                            checkpoint,
                            handed_over_at_ms,
                        }
                    }
                    (Some(GroupCheckpoint::Unreadable(why)), _) => GroupCheckpoint::Unreadable(why),
                    (_, found) => found,
                });
                break;
            }
            if from <= low {
                break;
            }
            window = window.saturating_mul(16);
        }
    }
    Ok(newest.unwrap_or(GroupCheckpoint::NeverStarted))
}

/// The newest record of the group among offsets `from..high` of `partition`.
fn read_range(
    consumer: &BaseConsumer,
    config: &HaSection,
    partition: i32,
    from: i64,
    high: i64,
    deadline: Instant,
) -> Result<Option<GroupCheckpoint>, String> {
    let topic = &config.checkpoint_topic;
    if from >= high {
        return Ok(None);
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(from))
        .map_err(|e| e.to_string())?;
    consumer
        .assign(&assignment)
        .map_err(|e| format!("cannot read ha.checkpoint_topic {topic}: {e}"))?;
    let mut newest = None;
    loop {
        if Instant::now() > deadline {
            return Err(format!(
                "reading the tail of ha.checkpoint_topic {topic} (offsets {from}..{high} of partition {partition}) took too long"
            ));
        }
        let message = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            Some(Err(e)) => return Err(format!("cannot read ha.checkpoint_topic {topic}: {e}")),
            Some(Ok(message)) => message,
        };
        if message.key() == Some(config.group.as_bytes()) {
            newest = Some(parse_record(&message, config));
        }
        if message.offset() + 1 >= high {
            return Ok(newest);
        }
    }
}

/// A record of the group, as a [`GroupCheckpoint`].
pub fn parse_record<M: Message>(message: &M, config: &HaSection) -> GroupCheckpoint {
    match message.payload().map(serde_json::from_slice::<Checkpoint>) {
        Some(Ok(checkpoint)) => {
            let handed_over = message
                .headers()
                .is_some_and(|h| h.iter().any(|h| h.key == HANDED_OVER));
            GroupCheckpoint::Found {
                handed_over_at_ms: handed_over.then_some(checkpoint.written_at_ms),
                checkpoint: Box::new(checkpoint),
            }
        }
        Some(Err(e)) => GroupCheckpoint::Unreadable(format!(
            "the group's newest record in ha.checkpoint_topic {} (partition {}, offset {}) is not a checkpoint this release reads: {e}",
            config.checkpoint_topic,
            message.partition(),
            message.offset()
        )),
        None => GroupCheckpoint::Unreadable(format!(
            "the group's newest record in ha.checkpoint_topic {} (partition {}, offset {}) is empty",
            config.checkpoint_topic,
            message.partition(),
            message.offset()
        )),
    }
}

/// Creates the group's topic (one partition, compacted) if it does not
/// exist and the broker allows it.
pub async fn ensure_topic(kafka: &KafkaConfig, config: &HaSection) -> Result<(), String> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = kafka
        .connection_config()
        .create()
        .map_err(|e| e.to_string())?;
    let topic = NewTopic::new(&config.checkpoint_topic, 1, TopicReplication::Fixed(-1))
        .set("cleanup.policy", "compact");
    let results = admin
        .create_topics(
            [&topic],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .map_err(|e| e.to_string())?;
    for result in results {
        match result {
            Ok(_) => {
                tracing::info!(topic = %config.checkpoint_topic, "created ha.checkpoint_topic (one partition, compacted)")
            }
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, e)) => {
                return Err(format!(
                "cannot create ha.checkpoint_topic {}: {e}; create it (one partition, compacted)",
                config.checkpoint_topic
            ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{BinlogPosition, SourceIdentity};
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::DefaultProducerContext;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    const TOPIC: &str = "checkpoints";

    fn checkpoint(pos: u64) -> Checkpoint {
        let source = SourceIdentity {
            server_uuid: None,
            server_id: 1,
            host: "db1:3306".into(),
        };
        Checkpoint::new(BinlogPosition::new("bin.000001", pos), source)
    }

    fn kafka(cluster: &MockCluster<'_, DefaultProducerContext>) -> KafkaConfig {
        KafkaConfig {
            brokers: cluster.bootstrap_servers(),
            topic: "orders".into(),
            dead_letter_topic: "dlq".into(),
            properties: Default::default(),
        }
    }

    fn ha(instance: &str) -> HaSection {
        HaSection {
            group: "g".into(),
            lease_ms: 200,
            checkpoint_topic: TOPIC.into(),
            instance: instance.into(),
        }
    }

    /// A writer of group `g` as `instance`, with its lease and metrics.
    fn writer(
        cluster: &MockCluster<'_, DefaultProducerContext>,
        dir: &std::path::Path,
    ) -> (CheckpointWriter, Leadership, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::default());
        let leadership = Leadership::new(Duration::from_millis(200));
        let share = CheckpointShare::new(&kafka(cluster), &ha("A"), metrics.clone()).unwrap();
        let writer = CheckpointWriter::new(CheckpointStore::open(dir).unwrap(), metrics.clone())
            .in_group(share, leadership.clone(), "A");
        (writer, leadership, metrics)
    }

    fn records_in_topic(cluster: &MockCluster<'_, DefaultProducerContext>) -> i64 {
        let consumer: BaseConsumer = kafka(cluster).connection_config().create().unwrap();
        outbox_sink::tail::watermarks(consumer.client(), TOPIC)
            .unwrap()
            .unwrap()[0]
            .1
    }

    fn read(cluster: &MockCluster<'_, DefaultProducerContext>) -> GroupCheckpoint {
        read_group_checkpoint(
            &kafka(cluster),
            &ha("B"),
            Instant::now() + Duration::from_secs(20),
        )
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
        tokio::task::block_in_place(|| {
            writer
                .group
                .as_ref()
                .unwrap()
                .share
                .producer
                .flush(Duration::from_secs(10))
        })
        .unwrap();
        assert_eq!(records_in_topic(&cluster), 1, "only the fresh one shared");
        match read(&cluster) {
            GroupCheckpoint::Found { checkpoint, .. } => assert_eq!(checkpoint.position.pos, 100),
            other => panic!("{other:?}"),
        }
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

        // Once the broker takes it, the instance is ready again.
        cluster.clear_request_errors(RDKafkaApiKey::Produce);
        leadership.confirm(Instant::now());
        writer.write_first(&checkpoint(100)).unwrap();
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
}
