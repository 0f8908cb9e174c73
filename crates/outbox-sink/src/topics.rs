//! Creating the topics the forwarder writes, as `[kafka.topics]` says.
//!
//! A topic template (`outbox.{aggregate_type}`) makes a new topic for each
//! new aggregate type. Where the broker does not create topics on produce
//! (most managed services; tansu), the first event of such a topic would
//! wait unacknowledged until someone created it; where it does, the topic
//! gets the broker's defaults. With `[kafka.topics]` the forwarder creates
//! a missing topic itself, before its first message, with the partitions,
//! replication factor and settings configured, as Kafka Connect's
//! `topic.creation.*` does. An account that may not create topics gets a
//! clear refusal naming the topic.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use outbox_core::{DefiniteError, ForwarderError};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};

use crate::config::{KafkaConfig, TopicSpec};
use outbox_kafka::ClientAuth;

/// Why a topic was not created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateError {
    /// The broker refused it (no permission, a policy, settings it does
    /// not take): asking again will not help.
    Refused(String),
    /// It could not be asked or did not answer: worth asking again.
    Failed(String),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::Refused(why) | CreateError::Failed(why) => f.write_str(why),
        }
    }
}

/// Creates `topic` as `spec` says; `Ok(false)` when it existed already.
pub async fn create_topic(
    kafka: &KafkaConfig,
    topic: &str,
    spec: &TopicSpec,
) -> Result<bool, CreateError> {
    create(kafka, topic, spec, false).await
}

/// Asks the brokers whether `topic` may be created as `spec` says, without
/// creating it (Kafka's `validateOnly`): `Ok` if it may, or exists.
pub async fn may_create_topic(
    kafka: &KafkaConfig,
    topic: &str,
    spec: &TopicSpec,
) -> Result<(), CreateError> {
    create(kafka, topic, spec, true).await.map(|_| ())
}

async fn create(
    kafka: &KafkaConfig,
    topic: &str,
    spec: &TopicSpec,
    validate_only: bool,
) -> Result<bool, CreateError> {
    use rdkafka::types::RDKafkaErrorCode as Code;
    let admin = admin_client(kafka).await.map_err(CreateError::Refused)?;
    let mut new = NewTopic::new(
        topic,
        spec.partitions,
        TopicReplication::Fixed(spec.replication_factor),
    );
    for (key, value) in &spec.configs {
        new = new.set(key, value);
    }
    let results = admin
        .create_topics(
            [&new],
            // The broker's wait for the topic, and ours for the answer (not
            // the minute of socket.timeout.ms when the brokers cannot be
            // reached or refuse the sign-in).
            &AdminOptions::new()
                .operation_timeout(Some(Duration::from_secs(10)))
                .request_timeout(Some(Duration::from_secs(15)))
                .validate_only(validate_only),
        )
        .await
        .map_err(|e| CreateError::Failed(e.to_string()))?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(true),
        Some(Err((_, Code::TopicAlreadyExists))) => Ok(false),
        Some(Err((
            _,
            e @ (Code::TopicAuthorizationFailed
            | Code::ClusterAuthorizationFailed
            | Code::PolicyViolation
            | Code::InvalidPartitions
            | Code::InvalidReplicationFactor
            | Code::InvalidReplicaAssignment
            | Code::InvalidConfig
            | Code::InvalidTopic),
        ))) => Err(CreateError::Refused(e.to_string())),
        Some(Err((_, e))) => Err(CreateError::Failed(e.to_string())),
        None => Err(CreateError::Failed(
            "the broker did not answer for the topic".into(),
        )),
    }
}

/// Whether `topic` exists, as the brokers' metadata of every topic says
/// (asking for it alone may create it where the brokers auto-create);
/// false when they cannot be asked.
pub async fn topic_exists(kafka: &KafkaConfig, topic: &str) -> bool {
    let Ok(admin) = admin_client(kafka).await else {
        return false;
    };
    tokio::task::block_in_place(|| {
        admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(5))
            .is_ok_and(|m| holds_topic(&m, topic))
    })
}

/// Whether `metadata` lists `topic`, without an error.
pub fn holds_topic(metadata: &rdkafka::metadata::Metadata, topic: &str) -> bool {
    metadata
        .topics()
        .iter()
        .any(|t| t.name() == topic && t.error().is_none())
}

/// An admin client with the configured sign-in ([`outbox_kafka::admin`]).
pub async fn admin_client(kafka: &KafkaConfig) -> Result<AdminClient<ClientAuth>, String> {
    outbox_kafka::admin(kafka.connection_config(), &kafka.auth)
}

/// The topics known to exist, and how to create those that do not.
pub(crate) struct Creation {
    spec: TopicSpec,
    existing: Mutex<HashSet<String>>,
}

impl Creation {
    pub(crate) fn new(spec: TopicSpec) -> Self {
        Self {
            spec,
            existing: Mutex::default(),
        }
    }

    pub(crate) fn exists(&self, topic: &str) -> bool {
        self.existing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(topic)
    }

    pub(crate) fn note(&self, topic: &str) {
        self.existing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(topic.to_owned());
    }

    /// Creates `topic` (found missing); a refusal is definite and names
    /// what to do, a failure to ask is transient.
    pub(crate) async fn create(
        &self,
        kafka: &KafkaConfig,
        topic: &str,
    ) -> Result<(), ForwarderError> {
        match create_topic(kafka, topic, &self.spec).await {
            Ok(created) => {
                if created {
                    tracing::info!(
                        topic,
                        partitions = self.spec.partitions,
                        replication_factor = self.spec.replication_factor,
                        "created the topic ([kafka.topics])"
                    );
                }
                self.note(topic);
                Ok(())
            }
            Err(CreateError::Refused(why)) => Err(DefiniteError::Config(format!(
                "cannot create topic {topic} ([kafka.topics]): {why}; create it, or let the \
                 forwarder's principal create topics (CreateTopics on the cluster or the topic)"
            ))
            .into()),
            Err(CreateError::Failed(why)) => Err(ForwarderError::transient(format!(
                "cannot create topic {topic} ([kafka.topics]) now: {why}"
            ))),
        }
    }
}

/// The topics on the brokers that `allowed` lets rows write and that hold
/// messages now, but `except`, those beginning with `_` and `[ha]` groups'
/// topics: what a forwarder of this outbox published before (as far as
/// retention kept it). Blocking.
pub fn holding_messages(
    kafka: &KafkaConfig,
    allowed: &crate::allowed::AllowedTopics,
    except: &[&str],
) -> Result<Vec<String>, String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    const REQUEST: Duration = Duration::from_secs(10);
    let consumer: BaseConsumer<ClientAuth> =
        outbox_kafka::reader(kafka.connection_config(), &kafka.auth, &[])
            .map_err(|e| outbox_kafka::shown(&e))?;
    let metadata = consumer.fetch_metadata(None, REQUEST).map_err(|e| {
        format!(
            "cannot list the brokers' topics: {}",
            outbox_kafka::shown(&e)
        )
    })?;
    let mut holding = Vec::new();
    for topic in metadata.topics() {
        let name = topic.name();
        if name.starts_with('_')
            || name.starts_with(crate::allowed::GROUP_TOPIC_PREFIX)
            || except.contains(&name)
            || !allowed.permits(name)
        {
            continue;
        }
        for partition in topic.partitions() {
            let (low, high) = consumer
                .fetch_watermarks(name, partition.id(), REQUEST)
                .map_err(|e| {
                    format!(
                        "cannot read the offsets of {name}: {}",
                        outbox_kafka::shown(&e)
                    )
                })?;
            if high > low {
                holding.push(name.to_owned());
                break;
            }
        }
    }
    holding.sort();
    Ok(holding)
}
