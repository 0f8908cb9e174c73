//! Reading the group's checkpoint from the tail of its topic, and creating
//! the topic when it is missing.

use std::time::{Duration, Instant};

use outbox_checkpoint::Checkpoint;
use outbox_kafka::ClientAuth;
use outbox_sink::KafkaConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::HaSection;

use super::log::{GroupCheckpoint, LogError};
use super::HANDED_OVER;

/// Records of the group looked at first from the end of each partition;
/// multiplied by 16 each time the group has none there.
const FIRST_WINDOW: i64 = 64;

/// A reader of the group's topic on one consumer, for a standby that reads
/// it every second: one connection (and TLS and SASL handshake) for as
/// long as it follows, not one a read.
pub struct GroupReader {
    consumer: BaseConsumer<ClientAuth>,
    config: HaSection,
}

impl GroupReader {
    pub fn new(kafka: &KafkaConfig, config: &HaSection) -> Result<Self, LogError> {
        Ok(Self {
            consumer: tail_consumer(kafka, config).map_err(LogError::Failed)?,
            config: config.clone(),
        })
    }

    /// The group's newest record, read from the tail of its topic by
    /// `deadline`.
    pub fn newest(&self, deadline: Instant) -> Result<GroupCheckpoint, LogError> {
        let (consumer, config) = (&self.consumer, &self.config);
        let topic = &config.checkpoint_topic;
        let marks = outbox_kafka::watermarks(consumer.client(), topic)
            .map_err(|e| LogError::Failed(format!("cannot read ha.checkpoint_topic {topic}: {e}")))?
            .ok_or_else(|| LogError::Missing(topic.clone()))?;
        // Per partition, the newest record of the group: (its payload parsed,
        // or why not, and whether it was a hand-over).
        let mut newest: Option<GroupCheckpoint> = None;
        for (partition, &(low, high)) in marks.iter().enumerate() {
            let mut window = FIRST_WINDOW;
            loop {
                let from = (high - window).max(low);
                let found = read_range(
                    consumer,
                    config,
                    partition as i32,
                    (from, high),
                    false,
                    deadline,
                )
                .map_err(LogError::Failed)?;
                if let Some(found) = found {
                    newest = Some(match (newest, found) {
                        (
                            Some(GroupCheckpoint::Found {
                                checkpoint,
                                handed_over_at_ms,
                                offset,
                            }),
                            GroupCheckpoint::Found {
                                checkpoint: other, ..
                            },
                        ) if checkpoint.written_at_ms >= other.written_at_ms => {
                            GroupCheckpoint::Found {
                                checkpoint,
                                handed_over_at_ms,
                                offset,
                            }
                        }
                        (Some(GroupCheckpoint::Unreadable(why)), _) => {
                            GroupCheckpoint::Unreadable(why)
                        }
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
}

/// A consumer of the group's topic that reads where it is told.
fn tail_consumer(
    kafka: &KafkaConfig,
    config: &HaSection,
) -> Result<BaseConsumer<ClientAuth>, String> {
    let group = format!("outbox-forwarder-standby-{}", config.instance);
    let settings = [("group.id", group.as_str()), ("fetch.wait.max.ms", "100")];
    outbox_kafka::reader(kafka.connection_config(), &kafka.auth, &settings).map_err(|e| {
        format!(
            "cannot read ha.checkpoint_topic {}: {}",
            config.checkpoint_topic,
            outbox_kafka::shown(&e)
        )
    })
}

/// Whether the group has a record, a term's mark included, among offsets
/// `from..to` of its topic's (first) partition. Blocking.
pub fn group_record_between(
    kafka: &KafkaConfig,
    config: &HaSection,
    from: i64,
    to: i64,
    deadline: Instant,
) -> Result<bool, String> {
    let consumer = tail_consumer(kafka, config)?;
    Ok(read_range(&consumer, config, 0, (from, to), true, deadline)?.is_some())
}

/// The newest record of the group among offsets `from..high` of
/// `partition`: with `marks`, a term's mark too (see [`super::TERM`]).
fn read_range(
    consumer: &BaseConsumer<ClientAuth>,
    config: &HaSection,
    partition: i32,
    (from, high): (i64, i64),
    marks: bool,
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
    let read = read_assigned(consumer, config, (partition, from, high), marks, deadline);
    // Not left assigned between reads: nothing is fetched meanwhile, and
    // a topic deleted between two reads is not followed by the consumer.
    let _ = consumer.unassign();
    read
}

/// [`read_range`] once assigned.
fn read_assigned(
    consumer: &BaseConsumer<ClientAuth>,
    config: &HaSection,
    (partition, from, high): (i32, i64, i64),
    marks: bool,
    deadline: Instant,
) -> Result<Option<GroupCheckpoint>, String> {
    let topic = &config.checkpoint_topic;
    let mut newest = None;
    let mark = super::mark_key(&config.group);
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
        let key = message.key();
        if key == Some(config.group.as_bytes()) || (marks && key == Some(mark.as_bytes())) {
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
                offset: message.offset(),
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

/// How the group's topic is made: one partition, compacted.
pub fn topic_spec() -> outbox_sink::TopicSpec {
    outbox_sink::TopicSpec {
        partitions: 1,
        replication_factor: -1,
        configs: [("cleanup.policy".to_owned(), "compact".to_owned())].into(),
    }
}

/// The command that creates the group's topic as an instance would.
pub fn create_command(topic: &str) -> String {
    format!(
        "kafka-topics --bootstrap-server <brokers> --create --topic {topic} --partitions 1 \
         --config cleanup.policy=compact"
    )
}

/// Creates the group's topic (one partition, compacted) if it does not
/// exist and the broker allows it.
pub async fn ensure_topic(kafka: &KafkaConfig, config: &HaSection) -> Result<(), String> {
    match outbox_sink::create_topic(kafka, &config.checkpoint_topic, &topic_spec()).await {
        Ok(created) => {
            if created {
                tracing::info!(topic = %config.checkpoint_topic, "created ha.checkpoint_topic (one partition, compacted)");
            }
            Ok(())
        }
        Err(e) => Err(format!(
            "cannot create ha.checkpoint_topic {}: {e}; create it: {}",
            config.checkpoint_topic,
            create_command(&config.checkpoint_topic)
        )),
    }
}
