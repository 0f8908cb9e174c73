//! Partitions chosen by a row's `partition_column`: the topic's partition
//! count, looked up once and again every few minutes, and the value placed
//! the way the configured partitioner places a key (`kafka.partitioner`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::PartitionBy;
use rdkafka::producer::{Producer, ThreadedProducer};
use serde::Deserialize;

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

/// `kafka.partitioner`: how a message's key picks its partition, and so how
/// a hashed `partition_column` value does (the producer is told the same,
/// so both agree).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partitioner {
    /// librdkafka's default (`consistent_random`): the key's CRC-32 modulo
    /// the partition count.
    #[default]
    #[serde(alias = "consistent_random")]
    Crc32,
    /// The Java client's default, and so Kafka Connect's and Debezium's:
    /// the key's murmur2 with the sign bit cleared, modulo the partition
    /// count (librdkafka's `murmur2_random`). After a cutover from Debezium
    /// each key keeps its partition, and its events their order.
    #[serde(alias = "murmur2_random")]
    Murmur2,
}

impl Partitioner {
    /// librdkafka's name for it (its `partitioner` property).
    pub fn librdkafka_name(self) -> &'static str {
        match self {
            Self::Crc32 => "consistent_random",
            Self::Murmur2 => "murmur2_random",
        }
    }

    /// The partition among `count` (at least 1) of a message keyed `key`.
    pub fn partition(self, key: &[u8], count: i32) -> i32 {
        let count = count.max(1) as u32;
        let hash = match self {
            Self::Crc32 => crc32fast::hash(key),
            Self::Murmur2 => murmur2(key) & 0x7fff_ffff,
        };
        (hash % count) as i32
    }
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`): MurmurHash2
/// with the Java client's seed, over the bytes as Java reads them.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// The partition among `count` that `by` names: an integer as it is (it
/// must exist), a value hashed as `partitioner` hashes a key, so a row
/// lands where a message keyed by that value would.
pub fn partition_for(
    by: &PartitionBy,
    count: i32,
    partitioner: Partitioner,
) -> Result<i32, String> {
    match by {
        PartitionBy::Number(n) => outbox_core::rules::partition_number(*n, Some(count)),
        PartitionBy::Hash(value) => Ok(partitioner.partition(value, count)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of the Java client's `Utils.murmur2`, as Kafka's own tests
    /// (`UtilsTest.testMurmur2`) list them.
    #[test]
    fn murmur2_is_the_java_clients() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (data, java) in cases {
            assert_eq!(
                murmur2(data) as i32,
                java,
                "{}",
                String::from_utf8_lossy(data)
            );
        }
    }
}
