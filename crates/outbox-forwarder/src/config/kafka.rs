//! `[kafka]`: brokers, topics, the in-flight window and librdkafka's
//! properties (and where their secrets come from).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct KafkaSection {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Topic or template: `{aggregate_type}`, `{event_type}`, `{schema}`, `{table}`.
    pub topic: String,
    /// The topics rows may be routed to (by the template or `topic_column`):
    /// names, or prefixes followed by `*`. Empty: the template's literal
    /// prefix (`outbox.` for `outbox.{aggregate_type}`), or the topic itself
    /// when it has no placeholder. A row routed elsewhere is a bad row.
    #[serde(default)]
    pub allowed_topics: Vec<String>,
    /// Where rows refused under `outbox.bad_row_policy = "dead_letter"` go.
    #[serde(default = "default_dead_letter_topic")]
    pub dead_letter_topic: String,
    /// Messages sent and not yet acked; when reached, the binlog reader waits.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// On shutdown, how long to wait for outstanding acks before writing the
    /// final checkpoint.
    #[serde(default = "default_drain_timeout_ms")]
    pub drain_timeout_ms: u64,
    /// `linger.ms` batches only a backlog and a busy stream: once the reader
    /// has caught up, what it read is sent at once (nothing more is coming
    /// to batch with), one such request under way at a time, unless over
    /// 2 000 messages a second are coming (`crate::pipeline::linger`). Off by
    /// default: against tansu it cut the ack p50 but not the p99, and it
    /// raised the consumer-visible p99 (docs/performance.md).
    #[serde(default = "default_adaptive_linger")]
    pub adaptive_linger: bool,
    /// Other librdkafka producer properties; `enable.idempotence` and `acks`
    /// cannot be weakened. After [`ForwarderConfig::load`] it also holds the
    /// values of `properties_env` and `properties_files`.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// librdkafka properties whose values are read from environment
    /// variables: property → variable name (e.g. `sasl.password`).
    #[serde(default)]
    pub properties_env: BTreeMap<String, String>,
    /// librdkafka properties whose values are read from files: property →
    /// path (one trailing newline is ignored).
    #[serde(default)]
    pub properties_files: BTreeMap<String, PathBuf>,
    /// `[kafka.topics]`: create a topic the forwarder is about to write to
    /// when it does not exist, with these settings. Unset: never.
    pub topics: Option<TopicsSection>,
    /// The key every message is signed with (`outbox_signature`), from
    /// this environment variable; with a key, the read-back after a restart
    /// and the table tools take only signed messages for the forwarder's.
    #[serde(default)]
    pub signing_key_env: Option<String>,
    /// The signing key, from this file (one trailing newline dropped).
    #[serde(default)]
    pub signing_key_file: Option<PathBuf>,
    /// The signing key, once [`crate::ForwarderConfig::load`] read it.
    #[serde(skip)]
    pub signing_key: Option<String>,
    /// How a message's key, and a hashed `partition_column` value, picks
    /// its partition: `"crc32"` (librdkafka's default) or `"murmur2"` (the
    /// Java client's, and so Debezium's: keeps each key's partition across
    /// a cutover).
    #[serde(default)]
    pub partitioner: outbox_sink::Partitioner,
    /// How a message carries its binlog coordinates: `"one"` header,
    /// `binlog` (the default), or `"separate"` headers (`binlog_position`,
    /// `binlog_row`, `binlog_server`, `binlog_commit_ms`, `binlog_gtid`,
    /// `binlog_gtid_index`), as before the one header, for consumers that
    /// read them. The read-back after a restart reads both.
    #[serde(default)]
    pub coordinate_headers: outbox_sink::CoordinateHeaders,
    /// SASL/OAUTHBEARER: a program (and its arguments) that prints a token
    /// and its expiry, run at start and again before the token expires
    /// (see [`outbox_kafka::oauth`]).
    pub oauth_token_command: Option<Vec<String>>,
    /// Amazon MSK's IAM sign-in, built in: `{ region = "eu-west-1" }`.
    /// Tokens are signed with credentials from AWS's usual chain; it sets
    /// `security.protocol = "sasl_ssl"` and `sasl.mechanism = "OAUTHBEARER"`
    /// unless `[kafka.properties]` sets them (see [`outbox_kafka::oauth`]).
    #[serde(default)]
    pub aws_msk_iam: Option<outbox_kafka::AwsMskIam>,
    /// Variables the token command is given besides PATH, HOME, USER,
    /// LANG, LC_ALL, TZ and TMPDIR: names, or prefixes followed by `*`
    /// (`AWS_*`). The rest of the environment (the MySQL and Kafka
    /// passwords among it) is not passed.
    #[serde(default)]
    pub oauth_token_env: Vec<String>,
}

/// `[kafka.topics]`: how a missing topic is created.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct TopicsSection {
    /// Partitions of each created topic (no default: a topic's partition
    /// count is a choice of the deployment, and cannot be lowered).
    pub partitions: i32,
    /// Replicas of each partition; -1: the broker's default.
    #[serde(default = "default_replication_factor")]
    pub replication_factor: i32,
    /// Topic settings, e.g. `"min.insync.replicas" = "2"`.
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

/// The broker's own default (`default.replication.factor`).
const fn default_replication_factor() -> i32 {
    -1
}

impl TopicsSection {
    pub fn spec(&self) -> outbox_sink::TopicSpec {
        outbox_sink::TopicSpec {
            partitions: self.partitions,
            replication_factor: self.replication_factor,
            configs: self.configs.clone(),
        }
    }
}

impl KafkaSection {
    /// The token command every Kafka client carries, if one is set.
    pub fn client_auth(&self) -> Result<outbox_kafka::ClientAuth, outbox_core::DefiniteError> {
        outbox_kafka::ClientAuth::from_config(
            self.oauth_token_command.as_deref(),
            &self.oauth_token_env,
            self.aws_msk_iam.as_ref(),
            &self.properties,
        )
        .map_err(outbox_core::DefiniteError::Config)
    }
}

fn default_dead_letter_topic() -> String {
    "outbox.dead_letter".into()
}

/// Three of librdkafka's full batches (`batch.num.messages` = 10 000), so
/// that the next batches are on the wire while one waits for its ack; the
/// repeats it allows after a crash are fewer than one checkpoint interval of
/// a catch-up (about 100 000 events per second).
const fn default_max_in_flight() -> usize {
    30_000
}

const fn default_adaptive_linger() -> bool {
    false
}

const fn default_drain_timeout_ms() -> u64 {
    10_000
}
