//! Partition ends: where each partition of a topic begins and ends now.
//! The read-back, the standby's reader of the group's topic, the table
//! tools, the auditor and topic creation all ask so.

use std::time::Duration;

use rdkafka::client::{Client, ClientContext};
use rdkafka::error::KafkaError;

/// How long each metadata or offsets request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Per partition of `topic`, its (low, high) watermarks, at the
/// partition's id (Kafka numbers a topic's partitions 0 to n-1, and the
/// metadata lists every one, offline or not); `None` when the topic does
/// not exist (its metadata holds an error or no partition). Blocking: a
/// metadata request, then one offsets request per partition.
pub fn watermarks<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
) -> Result<Option<Vec<(i64, i64)>>, KafkaError> {
    let metadata = client.fetch_metadata(Some(topic), REQUEST_TIMEOUT)?;
    let Some(described) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    if described.error().is_some() || described.partitions().is_empty() {
        return Ok(None);
    }
    let mut ids: Vec<i32> = described.partitions().iter().map(|p| p.id()).collect();
    ids.sort_unstable();
    ids.iter()
        .map(|&p| client.fetch_watermarks(topic, p, REQUEST_TIMEOUT))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}
