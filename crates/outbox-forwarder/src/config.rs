//! The TOML configuration (`--config FILE`). Unknown keys are errors; every
//! default is a `const fn` saying where its value comes from. The MySQL URL
//! may hold a password, so this type is never logged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use outbox_core::{BadRowPolicy, BinlogPosition, DefiniteError};
use outbox_sink::KafkaConfig;
use outbox_source::{
    ColumnMapping, DecodeConfig, EventIdFormat, OutboxTables, StreamConfig, TablePattern,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwarderConfig {
    pub mysql: MysqlSection,
    #[serde(default)]
    pub outbox: OutboxSection,
    pub kafka: KafkaSection,
    pub checkpoint: CheckpointSection,
    #[serde(default)]
    pub retry: RetrySection,
    #[serde(default)]
    pub metrics: MetricsSection,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// Address of the `/metrics`, `/healthz` and `/readyz` listener; off when unset.
    pub listen: Option<std::net::SocketAddr>,
    /// `/readyz` fails while the lag is above this.
    #[serde(default = "default_ready_max_lag_seconds")]
    pub ready_max_lag_seconds: u64,
}

impl Default for MetricsSection {
    fn default() -> Self {
        Self {
            listen: None,
            ready_max_lag_seconds: default_ready_max_lag_seconds(),
        }
    }
}

/// A minute: well past a normal catch-up pause, short enough to page on.
const fn default_ready_max_lag_seconds() -> u64 {
    60
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlSection {
    /// `mysql://user:password@host:port`; the user needs REPLICATION SLAVE,
    /// REPLICATION CLIENT and SELECT on the outbox tables.
    pub url: String,
    /// The forwarder's replica id, unique among the primary's replicas.
    pub server_id: u32,
    /// Heartbeat period asked of the primary; a silent connection is declared
    /// dead after three periods.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
}

/// A few seconds: quick to notice a dead connection, negligible traffic.
const fn default_heartbeat_ms() -> u64 {
    5_000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxSection {
    /// `schema.table` or `*.table` entries.
    #[serde(default = "default_tables")]
    pub tables: Vec<String>,
    /// `uuid` (the migration's `CHAR(36)`) or `any`.
    #[serde(default = "default_event_id_format")]
    pub event_id_format: String,
    /// Bound on the outbox bytes buffered for one transaction until its commit.
    #[serde(default = "default_max_transaction_bytes")]
    pub max_transaction_bytes: usize,
    /// `fail`: stop before the checkpoint passes a row that cannot become a
    /// message; `dead_letter`: publish it raw to `kafka.dead_letter_topic`.
    #[serde(default = "default_bad_row_policy")]
    pub bad_row_policy: String,
    #[serde(default)]
    pub columns: ColumnsSection,
}

impl Default for OutboxSection {
    fn default() -> Self {
        Self {
            tables: default_tables(),
            event_id_format: default_event_id_format(),
            max_transaction_bytes: default_max_transaction_bytes(),
            bad_row_policy: default_bad_row_policy(),
            columns: ColumnsSection::default(),
        }
    }
}

fn default_tables() -> Vec<String> {
    vec!["*.outbox_event".into()]
}

/// Stopping is the safe default: an operator decides what a bad row means.
fn default_bad_row_policy() -> String {
    "fail".into()
}

fn default_event_id_format() -> String {
    "uuid".into()
}

/// 64 MiB: Kafka's default maximum message is 1 MiB, so this holds dozens of
/// large events or tens of thousands of small ones.
const fn default_max_transaction_bytes() -> usize {
    64 << 20
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ColumnsSection {
    pub event_id: String,
    pub payload: String,
    pub event_type: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_version: String,
    /// Kafka key column; `event_id` when unset.
    pub key: Option<String>,
}

impl Default for ColumnsSection {
    fn default() -> Self {
        let d = ColumnMapping::default();
        Self {
            event_id: d.event_id,
            payload: d.payload,
            event_type: d.event_type,
            aggregate_type: d.aggregate_type,
            aggregate_id: d.aggregate_id,
            event_version: d.event_version,
            key: d.key,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSection {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Topic or template: `{aggregate_type}`, `{event_type}`, `{schema}`, `{table}`.
    pub topic: String,
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
    /// Other librdkafka producer properties; `enable.idempotence` and `acks`
    /// cannot be weakened.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

fn default_dead_letter_topic() -> String {
    "outbox.dead_letter".into()
}

/// Enough to keep the broker busy across a few linger periods, small enough
/// that the duplicates after a crash stay few.
const fn default_max_in_flight() -> usize {
    10_000
}

const fn default_drain_timeout_ms() -> u64 {
    10_000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSection {
    /// Directory of the sled store.
    pub path: PathBuf,
    /// Where to start without a stored checkpoint: `latest`, `earliest` or `FILE:POS`.
    #[serde(default = "default_start")]
    pub start: String,
    /// How often the acked watermark is written.
    #[serde(default = "default_flush_interval_ms")]
    pub flush_interval_ms: u64,
}

fn default_start() -> String {
    "latest".into()
}

/// One second: at most a second of events is published twice after a crash.
const fn default_flush_interval_ms() -> u64 {
    1_000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySection {
    /// First wait after a transient failure; doubles up to `max_backoff_ms`.
    #[serde(default = "default_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
}

impl Default for RetrySection {
    fn default() -> Self {
        Self {
            initial_backoff_ms: default_initial_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
        }
    }
}

const fn default_initial_backoff_ms() -> u64 {
    500
}

const fn default_max_backoff_ms() -> u64 {
    30_000
}

/// Where to start when no checkpoint is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPosition {
    Latest,
    Earliest,
    At(BinlogPosition),
}

impl ForwarderConfig {
    pub fn load(path: &Path) -> Result<Self, DefiniteError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| DefiniteError::Config(format!("cannot read {}: {e}", path.display())))?;
        let config: Self = toml::from_str(&text)
            .map_err(|e| DefiniteError::Config(format!("{}: {e}", path.display())))?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), DefiniteError> {
        self.decode_config()?;
        self.start_position()?;
        self.kafka_config().client_config()?;
        self.kafka.topic.parse::<outbox_sink::TopicTemplate>()?;
        if self.kafka.max_in_flight == 0 {
            return Err(DefiniteError::Config(
                "kafka.max_in_flight must be at least 1".into(),
            ));
        }
        if self.mysql.server_id == 0 {
            return Err(DefiniteError::Config(
                "mysql.server_id must be non-zero and unique among the primary's replicas".into(),
            ));
        }
        Ok(())
    }

    pub fn decode_config(&self) -> Result<DecodeConfig, DefiniteError> {
        let tables = self
            .outbox
            .tables
            .iter()
            .map(|t| t.parse::<TablePattern>().map_err(DefiniteError::Config))
            .collect::<Result<Vec<_>, _>>()?;
        if tables.is_empty() {
            return Err(DefiniteError::Config("outbox.tables is empty".into()));
        }
        let event_id_format = match self.outbox.event_id_format.as_str() {
            "uuid" => EventIdFormat::Uuid,
            "any" => EventIdFormat::Any,
            other => {
                return Err(DefiniteError::Config(format!(
                    "outbox.event_id_format = {other:?}: use \"uuid\" or \"any\""
                )))
            }
        };
        let c = &self.outbox.columns;
        Ok(DecodeConfig {
            tables: OutboxTables(tables),
            columns: ColumnMapping {
                event_id: c.event_id.clone(),
                payload: c.payload.clone(),
                event_type: c.event_type.clone(),
                aggregate_type: c.aggregate_type.clone(),
                aggregate_id: c.aggregate_id.clone(),
                event_version: c.event_version.clone(),
                key: c.key.clone(),
            },
            event_id_format,
            max_transaction_bytes: self.outbox.max_transaction_bytes,
            bad_rows: self.bad_row_policy()?,
        })
    }

    pub fn bad_row_policy(&self) -> Result<BadRowPolicy, DefiniteError> {
        match self.outbox.bad_row_policy.as_str() {
            "fail" => Ok(BadRowPolicy::Fail),
            "dead_letter" => Ok(BadRowPolicy::DeadLetter),
            other => Err(DefiniteError::Config(format!(
                "outbox.bad_row_policy = {other:?}: use \"fail\" or \"dead_letter\""
            ))),
        }
    }

    pub fn stream_config(&self) -> StreamConfig {
        StreamConfig {
            server_id: self.mysql.server_id,
            heartbeat: Duration::from_millis(self.mysql.heartbeat_ms),
        }
    }

    pub fn kafka_config(&self) -> KafkaConfig {
        KafkaConfig {
            brokers: self.kafka.brokers.clone(),
            topic: self.kafka.topic.clone(),
            dead_letter_topic: self.kafka.dead_letter_topic.clone(),
            properties: self.kafka.properties.clone(),
        }
    }

    pub fn start_position(&self) -> Result<StartPosition, DefiniteError> {
        match self.checkpoint.start.as_str() {
            "latest" => Ok(StartPosition::Latest),
            "earliest" => Ok(StartPosition::Earliest),
            other => other.parse().map(StartPosition::At).map_err(|e| {
                DefiniteError::Config(format!(
                    "checkpoint.start: {e}; or use \"latest\" / \"earliest\""
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [mysql]
        url = "mysql://repl:secret@127.0.0.1:3306"
        server_id = 4201
        [kafka]
        brokers = "127.0.0.1:9092"
        topic = "outbox.{aggregate_type}"
        [checkpoint]
        path = "./data/checkpoint"
    "#;

    #[test]
    fn minimal_config_gets_documented_defaults() {
        let c: ForwarderConfig = toml::from_str(MINIMAL).unwrap();
        c.validate().unwrap();
        assert_eq!(c.outbox.tables, ["*.outbox_event"]);
        assert_eq!(c.start_position().unwrap(), StartPosition::Latest);
        assert_eq!(c.checkpoint.flush_interval_ms, 1_000);
        assert_eq!(c.kafka.max_in_flight, 10_000);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let text = MINIMAL.replace("server_id = 4201", "server_id = 4201\nserverid = 1");
        assert!(toml::from_str::<ForwarderConfig>(&text).is_err());
    }

    #[test]
    fn weakened_producer_settings_are_refused() {
        let text = format!("{MINIMAL}\n[kafka.properties]\n\"enable.idempotence\" = \"false\"\n");
        let c: ForwarderConfig = toml::from_str(&text).unwrap();
        let err = c.validate().expect_err("idempotence off must be refused");
        assert!(err.to_string().contains("enable.idempotence"), "{err}");
    }

    #[test]
    fn start_accepts_file_pos() {
        let c: ForwarderConfig =
            toml::from_str(&MINIMAL.replace("path = ", "start = \"bin.000002:120\"\npath = "))
                .unwrap();
        assert_eq!(
            c.start_position().unwrap(),
            StartPosition::At(BinlogPosition::new("bin.000002", 120))
        );
    }
}

#[cfg(test)]
mod example_file {
    use super::*;

    #[test]
    fn the_documented_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/forwarder.toml");
        let config = ForwarderConfig::load(&path).unwrap();
        assert_eq!(config.outbox.tables, ["shop.outbox_event"]);
        assert_eq!(config.kafka.topic, "outbox.{aggregate_type}");
    }
}
