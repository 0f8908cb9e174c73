//! The group's log on Kafka: the group's topic, written by the share
//! producer ([`super::share`]) and read from its tail ([`super::topic`]).

use std::sync::{Arc, Mutex};
#[cfg(test)]
use std::time::Duration;
use std::time::Instant;

use outbox_core::DefiniteError;
use outbox_sink::KafkaConfig;

use super::log::{Creating, GroupCheckpoint, GroupLog, LogError, Record};
use super::share::CheckpointShare;
use super::topic::{self, GroupReader};
use crate::config::HaSection;
use crate::metrics::Metrics;

/// The group's topic (see [`GroupLog`]).
pub struct KafkaLog {
    share: CheckpointShare,
    kafka: KafkaConfig,
    config: HaSection,
    /// One consumer for the reads of the newest record, made again after
    /// a read failed.
    reader: Mutex<Option<GroupReader>>,
}

impl KafkaLog {
    /// The log of an instance of the group: what it queues expires within
    /// a quarter lease.
    pub fn new(
        kafka: &KafkaConfig,
        config: &HaSection,
        metrics: Arc<Metrics>,
    ) -> Result<Self, DefiniteError> {
        let share = CheckpointShare::new(kafka, config, metrics)?;
        Ok(Self::over(share, kafka, config))
    }

    /// The log of an operator's command (`checkpoint set`, `repair-gap`,
    /// `group start`), which holds no lease.
    pub fn for_operator(
        kafka: &KafkaConfig,
        config: &HaSection,
        metrics: Arc<Metrics>,
    ) -> Result<Self, DefiniteError> {
        let share = CheckpointShare::for_operator(kafka, config, metrics)?;
        Ok(Self::over(share, kafka, config))
    }

    fn over(share: CheckpointShare, kafka: &KafkaConfig, config: &HaSection) -> Self {
        Self {
            share,
            kafka: kafka.clone(),
            config: config.clone(),
            reader: Mutex::new(None),
        }
    }
}

impl GroupLog for KafkaLog {
    fn topic(&self) -> &str {
        &self.config.checkpoint_topic
    }

    fn newest(&self, deadline: Instant) -> Result<GroupCheckpoint, LogError> {
        let mut reader = self.reader.lock().expect("not poisoned");
        let read = match &*reader {
            Some(reader) => reader.newest(deadline),
            None => GroupReader::new(&self.kafka, &self.config)
                .and_then(|created| reader.insert(created).newest(deadline)),
        };
        if read.is_err() {
            *reader = None;
        }
        read
    }

    fn append(&self, record: Record<'_>) {
        self.share.send(record);
    }

    fn append_acked(&self, record: Record<'_>) -> Result<i64, String> {
        self.share.send_acked(record)
    }

    fn any_between(&self, from: i64, to: i64, deadline: Instant) -> Result<bool, String> {
        topic::group_record_between(&self.kafka, &self.config, from, to, deadline)
    }

    fn create(&self) -> Creating<'_> {
        Box::pin(topic::ensure_topic(&self.kafka, &self.config))
    }

    #[cfg(test)]
    fn settle(&self, timeout: Duration) {
        let _ = tokio::task::block_in_place(|| self.share.flush(timeout));
    }
}
