//! Partitions chosen by a row's `partition_column`: the topic's partition
//! count, looked up once and again every few minutes, and the value placed
//! the way the configured partitioner places a key (`kafka.partitioner`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::producer::{Producer, ThreadedProducer};

use super::SinkContext;

/// How long a topic's partition count is trusted (librdkafka's own
/// `topic.metadata.refresh.interval.ms` default).
const REFRESH: Duration = Duration::from_secs(300);

/// Partition counts of the topics rows were placed in.
#[derive(Default)]
pub(super) struct PartitionCounts(Mutex<HashMap<String, (i32, Instant)>>);

impl PartitionCounts {
    /// The partition count of `topic`, from the cache or the brokers.
    pub(super) async fn of(
        &self,
        producer: &Arc<ThreadedProducer<SinkContext>>,
        topic: &str,
    ) -> Result<i32, String> {
        if let Some((count, at)) = self.0.lock().expect("not poisoned").get(topic) {
            if at.elapsed() < REFRESH {
                return Ok(*count);
            }
        }
        let producer = producer.clone();
        let name = topic.to_owned();
        let count = tokio::task::spawn_blocking(move || {
            let metadata = producer
                .client()
                .fetch_metadata(Some(&name), Duration::from_secs(5))
                .map_err(|e| e.to_string())?;
            let topic = metadata.topics().first().ok_or("no metadata")?;
            if let Some(error) = topic.error() {
                return Err(rdkafka::types::RDKafkaErrorCode::from(error).to_string());
            }
            Ok(topic.partitions().len() as i32)
        })
        .await
        .expect("the metadata request does not panic")
        .map_err(|e| format!("cannot learn the partition count of topic {topic}: {e}"))?;
        if count == 0 {
            return Err(format!("topic {topic} has no partitions (does it exist?)"));
        }
        self.0
            .lock()
            .expect("not poisoned")
            .insert(topic.to_owned(), (count, Instant::now()));
        Ok(count)
    }
}

impl PartitionCounts {
    /// Forgets the count of `topic`, so the next use asks the brokers (a
    /// partition number beyond it may name a partition added since).
    pub(super) fn forget(&self, topic: &str) {
        self.0.lock().expect("not poisoned").remove(topic);
    }
}
