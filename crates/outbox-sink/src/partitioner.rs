//! `kafka.partitioner`: which partition a message's key picks, the way
//! librdkafka's producer is told to pick it, so that a hashed
//! `partition_column` value lands where a message keyed by it would.

use outbox_core::PartitionBy;
use serde::Deserialize;

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
