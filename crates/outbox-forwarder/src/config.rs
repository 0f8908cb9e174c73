//! The TOML configuration (`--config FILE`). Unknown keys are errors; every
//! default is a `const fn` saying where its value comes from. The MySQL URL
//! may hold a password, so this type is never logged.
//!
//! Secrets may live outside the file (`mysql.password_env`,
//! `mysql.password_file`, `kafka.properties_env`, `kafka.properties_files`).
//! [`ForwarderConfig::load`] reads them once, before validation, into the
//! MySQL connection and the Kafka properties, so every command (`run`,
//! `check`, `verify`, `checkpoint set`) uses the same resolved values. Errors
//! name the variable or file, never its content.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use outbox_core::{BadRowPolicy, BinlogPosition, DefiniteError};
use outbox_sink::KafkaConfig;
use outbox_source::server::{MysqlConnect, MysqlTls, TlsMode};
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
    /// Active/standby operation; off when absent.
    pub ha: Option<HaSection>,
}

/// `[ha]`: instances with the same group on different hosts, one active
/// (see the `ha` module).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct HaSection {
    /// The group's name: one lock, one shared checkpoint.
    pub group: String,
    /// How long the lock outlives a silent holder; the active instance
    /// stops publishing half a lease after its last confirmation.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Where the active instance shares its checkpoints for the standbys
    /// (one partition, compacted).
    #[serde(default = "default_checkpoint_topic")]
    pub checkpoint_topic: String,
    /// This instance's name in logs and in the `published_by` header.
    #[serde(default = "default_instance")]
    pub instance: String,
}

const fn default_lease_ms() -> u64 {
    8_000
}

fn default_checkpoint_topic() -> String {
    "outbox.forwarder.checkpoints".into()
}

fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    format!("{host}-{}", std::process::id())
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
    /// `mysql://user:password@host:port`, or a list of them: the servers of
    /// one replication topology, tried in order (see [`MysqlUrls`]); the
    /// user needs REPLICATION SLAVE, REPLICATION CLIENT and SELECT on the
    /// outbox tables. After [`ForwarderConfig::load`] each also carries the
    /// password from `password_env` / `password_file` and the `[mysql.tls]`
    /// settings.
    pub url: MysqlUrls,
    /// Environment variable holding the password; replaces the URL's.
    pub password_env: Option<String>,
    /// File holding the password (one trailing newline is ignored);
    /// replaces the URL's.
    pub password_file: Option<PathBuf>,
    #[serde(default)]
    pub tls: TlsSection,
    /// The forwarder's replica id, unique among the primary's replicas.
    pub server_id: u32,
    /// Heartbeat period asked of the primary; a silent connection is declared
    /// dead after three periods.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// Whether a primary that may lose or roll back committed transactions
    /// in a crash (`sync_binlog` or `innodb_flush_log_at_trx_commit` other
    /// than 1) fails `check` and stops `run`, rather than only warning.
    #[serde(default)]
    pub require_durable_primary: bool,
}

/// `mysql.url`: one address (the primary, or a proxy / VIP in front of
/// it) or several candidates of one replication topology. On a lost
/// connection the forwarder streams from the first candidate that is
/// writable, else from one that answers (a replica with
/// `log_slave_updates`), resuming by GTID (see [`crate::resume`]).
#[derive(Clone, Debug)]
pub struct MysqlUrls(Vec<MysqlConnect>);

impl MysqlUrls {
    /// Every candidate, in order; [`crate::resume::decide`] picks among them.
    pub fn all(&self) -> &[MysqlConnect] {
        &self.0
    }

    /// The `[mysql.tls]` settings, the same for every candidate.
    pub fn tls(&self) -> &outbox_source::server::MysqlTls {
        self.0[0].tls()
    }
}

impl<'de> Deserialize<'de> for MysqlUrls {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(MysqlConnect),
            Many(Vec<MysqlConnect>),
        }
        match OneOrMany::deserialize(deserializer)? {
            OneOrMany::One(url) => Ok(MysqlUrls(vec![url])),
            OneOrMany::Many(urls) if !urls.is_empty() => Ok(MysqlUrls(urls)),
            OneOrMany::Many(_) => Err(serde::de::Error::custom(
                "mysql.url is an empty list; give at least one server",
            )),
        }
    }
}

/// A few seconds: quick to notice a dead connection, negligible traffic.
const fn default_heartbeat_ms() -> u64 {
    5_000
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// `disabled` (the default: a local primary needs no TLS), `required`,
    /// `verify_ca` or `verify_identity`.
    #[serde(default)]
    pub mode: TlsMode,
    /// CA certificate(s) (PEM) the server's certificate must chain to;
    /// the built-in Mozilla roots when unset.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), for accounts created with `REQUIRE X509`.
    pub client_cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub client_key_file: Option<PathBuf>,
}

impl TlsSection {
    /// The TLS settings, with conflicting options refused and every named
    /// file checked to be readable now rather than at the first connection.
    fn resolve(&self) -> Result<MysqlTls, DefiniteError> {
        let mode = self.mode;
        let conflict = |why: &str| Err(DefiniteError::Config(format!("[mysql.tls]: {why}")));
        if self.ca_file.is_some() && !matches!(mode, TlsMode::VerifyCa | TlsMode::VerifyIdentity) {
            return conflict(&format!(
                "ca_file is only used with mode = \"verify_ca\" or \"verify_identity\", \
                 mode is \"{mode}\""
            ));
        }
        let client_identity = match (&self.client_cert_file, &self.client_key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            _ => return conflict("client_cert_file and client_key_file go together"),
        };
        if client_identity.is_some() && mode == TlsMode::Disabled {
            return conflict("a client certificate needs TLS: set mode");
        }
        for (option, path) in [
            ("ca_file", &self.ca_file),
            ("client_cert_file", &self.client_cert_file),
            ("client_key_file", &self.client_key_file),
        ] {
            if let Some(path) = path {
                std::fs::File::open(path).map_err(|e| {
                    DefiniteError::Config(format!(
                        "mysql.tls.{option}: cannot read {}: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        Ok(MysqlTls {
            mode,
            ca_file: self.ca_file.clone(),
            client_identity,
        })
    }
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
    pub columns: ColumnMapping,
}

impl Default for OutboxSection {
    fn default() -> Self {
        Self {
            tables: default_tables(),
            event_id_format: default_event_id_format(),
            max_transaction_bytes: default_max_transaction_bytes(),
            bad_row_policy: default_bad_row_policy(),
            columns: ColumnMapping::default(),
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
    /// `linger.ms` batches only a backlog and a busy stream: once the reader
    /// has caught up, what it read is sent at once (nothing more is coming
    /// to batch with), one such request under way at a time, unless over
    /// 2 000 messages a second are coming ([`crate::linger`]). Off by
    /// default: against tansu it cut the ack p50 but not the p99, and it
    /// raised the consumer-visible p99 (README, Performance).
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
    /// At each start, read back the topic tails recorded with the
    /// checkpoint and do not publish again the events found there.
    #[serde(default = "default_skip_published")]
    pub skip_published: bool,
}

const fn default_skip_published() -> bool {
    true
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

/// A secret read from the environment variable `name`, for `option`.
fn secret_from_env(
    option: &str,
    name: &str,
    env: &impl Fn(&str) -> Option<OsString>,
) -> Result<String, DefiniteError> {
    let value = env(name).ok_or_else(|| {
        DefiniteError::Config(format!(
            "{option}: the environment variable {name} is not set"
        ))
    })?;
    let value = value.into_string().map_err(|_| {
        DefiniteError::Config(format!(
            "{option}: the environment variable {name} is not valid UTF-8"
        ))
    })?;
    if value.is_empty() {
        return Err(DefiniteError::Config(format!(
            "{option}: the environment variable {name} is empty"
        )));
    }
    Ok(value)
}

/// A secret read from the file at `path`, for `option`. One trailing
/// newline is dropped: `echo secret > file` should just work.
fn secret_from_file(option: &str, path: &Path) -> Result<String, DefiniteError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        DefiniteError::Config(format!("{option}: cannot read {}: {e}", path.display()))
    })?;
    let value = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if value.is_empty() {
        return Err(DefiniteError::Config(format!(
            "{option}: {} is empty",
            path.display()
        )));
    }
    Ok(value.to_owned())
}

impl ForwarderConfig {
    /// Reads the file, then the secrets it refers to, then validates.
    pub fn load(path: &Path) -> Result<Self, DefiniteError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| DefiniteError::Config(format!("cannot read {}: {e}", path.display())))?;
        let mut config: Self = toml::from_str(&text)
            .map_err(|e| DefiniteError::Config(format!("{}: {e}", path.display())))?;
        config.resolve(&|name| std::env::var_os(name))?;
        config.validate()?;
        Ok(config)
    }

    /// Applies what the file only points at: the MySQL password and TLS
    /// settings go into `mysql.url`, the Kafka secrets into
    /// `kafka.properties`. `env` looks up environment variables.
    fn resolve(&mut self, env: &impl Fn(&str) -> Option<OsString>) -> Result<(), DefiniteError> {
        let mysql = &mut self.mysql;
        let password = match (&mysql.password_env, &mysql.password_file) {
            (Some(_), Some(_)) => {
                return Err(DefiniteError::Config(
                    "mysql.password_env and mysql.password_file are both set; keep one".into(),
                ))
            }
            (Some(name), None) => Some(secret_from_env("mysql.password_env", name, env)?),
            (None, Some(path)) => Some(secret_from_file("mysql.password_file", path)?),
            (None, None) => None,
        };
        let tls = mysql.tls.resolve()?;
        for connect in &mut mysql.url.0 {
            *connect = connect.clone().with_tls(tls.clone());
            if let Some(password) = &password {
                *connect = connect.clone().with_password(password.clone());
            }
        }

        let kafka = &mut self.kafka;
        let mut secrets = Vec::new();
        for (key, name) in &kafka.properties_env {
            let option = format!("kafka.properties_env.{key:?} (${name})");
            let value = secret_from_env(&format!("kafka.properties_env.{key:?}"), name, env)?;
            secrets.push((key, option, value));
        }
        for (key, path) in &kafka.properties_files {
            let option = format!("kafka.properties_files.{key:?} ({})", path.display());
            let value = secret_from_file(&format!("kafka.properties_files.{key:?}"), path)?;
            secrets.push((key, option, value));
        }
        let mut resolved = BTreeMap::new();
        for (key, option, value) in secrets {
            if kafka.properties.contains_key(key) || resolved.contains_key(key) {
                return Err(DefiniteError::Config(format!(
                    "kafka property {key:?} is set more than once (kafka.properties, \
                     properties_env, properties_files); keep one"
                )));
            }
            // The check every property passes; the message names where the
            // value came from and leaves the value out.
            if let Some(why) = KafkaConfig::refused_property(key, &value) {
                return Err(DefiniteError::Config(format!("{option} is refused: {why}")));
            }
            resolved.insert(key.clone(), value);
        }
        kafka.properties.extend(resolved);
        Ok(())
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
        if let Some(ha) = &self.ha {
            if ha.lease_ms < 2_000 {
                return Err(DefiniteError::Config(
                    "ha.lease_ms must be at least 2000: the lock's session times out in whole seconds".into(),
                ));
            }
            if self.kafka.properties.contains_key("delivery.timeout.ms") {
                return Err(DefiniteError::Config(
                    "kafka.properties.delivery.timeout.ms is refused with [ha]: set \
                     message.timeout.ms (at most ha.lease_ms / 4) or leave it to the default"
                        .into(),
                ));
            }
            // The fence needs queued messages to expire inside the lease.
            let timeout = self.kafka_config().properties["message.timeout.ms"].clone();
            if timeout
                .parse::<u64>()
                .map_or(true, |t| t == 0 || t > ha.lease_ms / 4)
            {
                return Err(DefiniteError::Config(format!(
                    "kafka.properties.message.timeout.ms = {timeout} is refused with [ha]: it must \
                     be at most ha.lease_ms / 4 = {}, so that a demoted instance's queued \
                     messages expire before another one takes over",
                    ha.lease_ms / 4
                )));
            }
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
        Ok(DecodeConfig {
            tables: OutboxTables::new(tables),
            columns: self.outbox.columns.clone(),
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
        let mut properties = self.kafka.properties.clone();
        if let Some(ha) = &self.ha {
            // The fence: a queued message expires well inside the lease.
            properties
                .entry("message.timeout.ms".into())
                .or_insert_with(|| (ha.lease_ms / 4).max(1).to_string());
        }
        KafkaConfig {
            brokers: self.kafka.brokers.clone(),
            topic: self.kafka.topic.clone(),
            dead_letter_topic: self.kafka.dead_letter_topic.clone(),
            properties,
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
    fn a_group_bounds_how_long_a_message_may_wait_for_the_broker() {
        let with_ha = format!("{MINIMAL}\n[ha]\ngroup = \"g\"\nlease_ms = 8000\n");
        let c: ForwarderConfig = toml::from_str(&with_ha).unwrap();
        c.validate().unwrap();
        assert_eq!(c.kafka_config().properties["message.timeout.ms"], "2000");
        assert_eq!(
            c.ha.as_ref().unwrap().checkpoint_topic,
            "outbox.forwarder.checkpoints"
        );
        let too_long = with_ha.replace(
            "[checkpoint]",
            "[kafka.properties]\n\"message.timeout.ms\" = \"0\"\n[checkpoint]",
        );
        let c: ForwarderConfig = toml::from_str(&too_long).unwrap();
        let err = c.validate().expect_err("refused");
        assert!(
            err.to_string().contains("at most ha.lease_ms / 4 = 2000"),
            "{err}"
        );
        // Without a group the producer waits as long as it takes.
        let c: ForwarderConfig = toml::from_str(MINIMAL).unwrap();
        assert!(!c
            .kafka_config()
            .properties
            .contains_key("message.timeout.ms"));
    }

    #[test]
    fn minimal_config_gets_documented_defaults() {
        let c: ForwarderConfig = toml::from_str(MINIMAL).unwrap();
        c.validate().unwrap();
        assert_eq!(c.outbox.tables, ["*.outbox_event"]);
        assert_eq!(c.start_position().unwrap(), StartPosition::Latest);
        assert_eq!(c.checkpoint.flush_interval_ms, 1_000);
        assert_eq!(c.kafka.max_in_flight, 30_000);
    }

    #[test]
    fn outbox_columns_override_only_what_they_name_and_refuse_unknown_names() {
        let text = format!("{MINIMAL}\n[outbox.columns]\nevent_id = \"id\"\npayload = \"body\"\n");
        let c: ForwarderConfig = toml::from_str(&text).unwrap();
        let columns = c.decode_config().unwrap().columns;
        assert_eq!(
            (columns.event_id.as_str(), columns.payload.as_str()),
            ("id", "body")
        );
        assert_eq!(columns.aggregate_type, "aggregate_type");
        assert_eq!(columns.key, None);
        let typo = format!("{MINIMAL}\n[outbox.columns]\nevent_idd = \"id\"\n");
        assert!(toml::from_str::<ForwarderConfig>(&typo).is_err());
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

    /// Parses, resolves against `env` (not the process's) and validates.
    fn resolved(text: &str, env: &[(&str, &str)]) -> Result<ForwarderConfig, DefiniteError> {
        let mut c: ForwarderConfig = toml::from_str(text).unwrap();
        let env: BTreeMap<String, OsString> = env
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        c.resolve(&|name| env.get(name).cloned())?;
        c.validate()?;
        Ok(c)
    }

    fn with_mysql(extra: &str) -> String {
        MINIMAL.replace("server_id = 4201", &format!("server_id = 4201\n{extra}"))
    }

    fn password(c: &ForwarderConfig) -> String {
        c.mysql.url.all()[0]
            .opts()
            .unwrap()
            .pass()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn the_password_comes_from_the_named_variable() {
        let c = resolved(
            &with_mysql("password_env = \"DB_PW\""),
            &[("DB_PW", "pw from env")],
        )
        .unwrap();
        assert_eq!(password(&c), "pw from env");
        assert_eq!(password(&resolved(MINIMAL, &[]).unwrap()), "secret");
    }

    #[test]
    fn the_password_file_loses_one_trailing_newline_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        let text = with_mysql(&format!("password_file = {:?}", file.display().to_string()));
        for (content, expected) in [
            ("pw\n", "pw"),
            ("pw\r\n", "pw"),
            ("pw", "pw"),
            (" pw \n\n", " pw \n"),
        ] {
            std::fs::write(&file, content).unwrap();
            assert_eq!(
                password(&resolved(&text, &[]).unwrap()),
                expected,
                "{content:?}"
            );
        }
        std::fs::write(&file, "\n").unwrap();
        let err = resolved(&text, &[]).err().expect("an empty password file");
        assert!(err.to_string().contains("is empty"), "{err}");
    }

    #[test]
    fn a_missing_secret_names_the_variable_or_file_and_shows_no_secret() {
        let err = resolved(&with_mysql("password_env = \"NO_SUCH_PW\""), &[])
            .err()
            .expect("unset variable");
        let text = err.to_string();
        assert!(
            text.contains("mysql.password_env") && text.contains("NO_SUCH_PW is not set"),
            "{text}"
        );
        let err = resolved(&with_mysql("password_file = \"/nonexistent/pw\""), &[])
            .err()
            .expect("missing file");
        let text = err.to_string();
        assert!(
            text.contains("mysql.password_file: cannot read /nonexistent/pw"),
            "{text}"
        );
        let both = with_mysql("password_env = \"A\"\npassword_file = \"/b\"");
        let err = resolved(&both, &[("A", "x")]).err().expect("both set");
        assert!(err.to_string().contains("keep one"), "{err}");
    }

    #[test]
    fn tls_options_reach_the_connection_and_conflicts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let section = |body: &str| format!("{MINIMAL}\n[mysql.tls]\n{body}\n");
        let ca_line = format!("ca_file = {:?}", ca.display().to_string());

        let c = resolved(&section(&format!("mode = \"verify_ca\"\n{ca_line}")), &[]).unwrap();
        assert_eq!(c.mysql.url.tls().mode, TlsMode::VerifyCa);
        assert_eq!(c.mysql.url.tls().ca_file.as_deref(), Some(ca.as_path()));
        assert!(c.mysql.url.all()[0].opts().unwrap().ssl_opts().is_some());
        assert_eq!(
            resolved(MINIMAL, &[]).unwrap().mysql.url.tls().mode,
            TlsMode::Disabled
        );

        for (body, needle) in [
            (ca_line.clone(), "ca_file is only used with"),
            (
                format!("mode = \"required\"\n{ca_line}"),
                "ca_file is only used with",
            ),
            (
                format!(
                    "mode = \"verify_identity\"\nclient_cert_file = {:?}",
                    ca.display().to_string()
                ),
                "client_cert_file and client_key_file go together",
            ),
            (
                "mode = \"verify_identity\"\nca_file = \"/nonexistent/ca.pem\"".into(),
                "mysql.tls.ca_file: cannot read /nonexistent/ca.pem",
            ),
        ] {
            let err = resolved(&section(&body), &[]).err().expect(&body);
            assert!(err.to_string().contains(needle), "{body}: {err}");
        }
        assert!(
            toml::from_str::<ForwarderConfig>(&section("mode = \"preferred\"")).is_err(),
            "an unknown mode is an error"
        );
    }

    #[test]
    fn kafka_secrets_fill_properties_from_variables_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let key_pw = dir.path().join("key-pw");
        std::fs::write(&key_pw, "from-file\n").unwrap();
        let text = MINIMAL.replace(
            "topic = ",
            &format!(
                "properties_env = {{ \"sasl.password\" = \"KAFKA_PW\" }}\n\
                 properties_files = {{ \"ssl.key.password\" = {:?} }}\ntopic = ",
                key_pw.display().to_string()
            ),
        );
        let c = resolved(&text, &[("KAFKA_PW", "from-env")]).unwrap();
        let client = c.kafka_config().client_config().unwrap();
        assert_eq!(client.get("sasl.password"), Some("from-env"));
        assert_eq!(client.get("ssl.key.password"), Some("from-file"));
        let shown = format!("{:?}", c.kafka_config());
        assert!(
            !shown.contains("from-env") && !shown.contains("from-file"),
            "{shown}"
        );

        let err = resolved(&text, &[]).err().expect("unset variable");
        assert!(err.to_string().contains("KAFKA_PW is not set"), "{err}");
    }

    #[test]
    fn kafka_secrets_cannot_weaken_delivery_or_repeat_a_property() {
        let env_acks = MINIMAL.replace(
            "topic = ",
            "properties_env = { \"acks\" = \"ACKS\" }\ntopic = ",
        );
        let err = resolved(&env_acks, &[("ACKS", "1-from-env")])
            .err()
            .expect("acks=1 refused");
        let text = err.to_string();
        assert!(
            text.contains("kafka.properties_env.\"acks\" ($ACKS) is refused")
                && text.contains("acks=all"),
            "{text}"
        );
        assert!(
            !text.contains("1-from-env"),
            "the value is not shown: {text}"
        );
        assert!(resolved(&env_acks, &[("ACKS", "all")]).is_ok());

        let twice = format!(
            "{}\n[kafka.properties]\n\"sasl.password\" = \"inline\"\n",
            MINIMAL.replace(
                "topic = ",
                "properties_env = { \"sasl.password\" = \"PW\" }\ntopic = "
            )
        );
        let err = resolved(&twice, &[("PW", "x")]).err().expect("set twice");
        assert!(err.to_string().contains("more than once"), "{err}");
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
