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

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use outbox_core::DefiniteError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};

use crate::{ClientAuth, KafkaConfig};

/// How a topic the forwarder creates is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub partitions: i32,
    /// `-1`: the broker's default.
    pub replication_factor: i32,
    /// Topic settings (`min.insync.replicas`, `retention.ms`, ...).
    pub configs: BTreeMap<String, String>,
}

/// Creates `topic` as `spec` says; `Ok(false)` when it existed already.
pub async fn create_topic(
    kafka: &KafkaConfig,
    topic: &str,
    spec: &TopicSpec,
) -> Result<bool, String> {
    let admin: AdminClient<ClientAuth> = kafka
        .connection_config()
        .create_with_context(kafka.auth.clone())
        .map_err(|e| crate::shown(&e))?;
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
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .map_err(|e| e.to_string())?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(true),
        Some(Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
        Some(Err((_, e))) => Err(e.to_string()),
        None => Err("the broker did not answer for the topic".into()),
    }
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
    /// what to do.
    pub(crate) async fn create(
        &self,
        kafka: &KafkaConfig,
        topic: &str,
    ) -> Result<(), DefiniteError> {
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
            Err(why) => Err(DefiniteError::Config(format!(
                "cannot create topic {topic} ([kafka.topics]): {why}; create it, or let the \
                 forwarder's principal create topics (CreateTopics on the cluster or the topic)"
            ))),
        }
    }
}
