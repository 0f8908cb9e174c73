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
use std::path::Path;
use std::time::Duration;

use outbox_core::DefiniteError;
use outbox_sink::KafkaConfig;
use outbox_source::server::{
    refuse_plaintext, secret_from_either, secret_from_env, secret_from_file,
};
use outbox_source::{DecodeConfig, OutboxTables, StreamConfig, TablePattern};
use serde::Deserialize;

mod audit;
mod checkpoint;
mod ha;
mod kafka;
mod mysql;
mod outbox;
mod retention;

pub use audit::AuditSection;
pub use checkpoint::{CheckpointSection, StartPosition};
pub use ha::HaSection;
pub use kafka::KafkaSection;
pub use mysql::{MysqlSection, MysqlUrls};
pub use outbox::OutboxSection;
pub use outbox_source::server::TlsSection;
pub use retention::RetentionSection;

#[derive(Deserialize, Clone)]
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
    /// Deleting published outbox rows; off when absent.
    pub retention: Option<RetentionSection>,
    /// Proving, every minute, that the committed rows are in Kafka.
    #[serde(default)]
    pub audit: AuditSection,
    /// The settings [`ENV_PREFIX`] variables gave, for `check` to show.
    #[serde(skip)]
    pub overrides: Vec<outbox_core::settings::Override>,
}

/// Variables named `OUTBOX_FORWARDER__SECTION__KEY` override the file's
/// settings (see [`outbox_core::settings`]).
pub const ENV_PREFIX: &str = "OUTBOX_FORWARDER";

#[derive(Deserialize, Clone)]
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

#[derive(Deserialize, Clone)]
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

impl ForwarderConfig {
    /// The replica id of a tool's short dump connection (reading when a
    /// binlog file began): `mysql.server_id` with its top bit flipped, so
    /// it never ends a running forwarder's dump of the same id.
    pub fn tool_server_id(&self) -> u32 {
        self.mysql.server_id ^ 0x8000_0000
    }

    /// Only `metrics.listen` of the file at `path` (and the environment):
    /// what a health probe needs, without the secrets the rest refers to
    /// (which a probe's environment may lack).
    pub fn metrics_listen(path: &Path) -> Result<Option<std::net::SocketAddr>, DefiniteError> {
        #[derive(Deserialize)]
        struct OnlyMetrics {
            #[serde(default)]
            metrics: MetricsSection,
        }
        // Only the metrics section's variables: the rest are not read here.
        let metrics = format!("{ENV_PREFIX}__METRICS");
        let env = outbox_core::settings::process_environment()
            .filter(|(name, _)| name == &metrics || name.starts_with(&format!("{metrics}__")));
        let only: OnlyMetrics = outbox_core::settings::parse(
            &read(path)?,
            &path.display().to_string(),
            ENV_PREFIX,
            env,
        )
        .map_err(DefiniteError::Config)?
        .config;
        Ok(only.metrics.listen)
    }

    /// Reads the file and the [`ENV_PREFIX`] variables, then the secrets
    /// they refer to, then validates.
    pub fn load(path: &Path) -> Result<Self, DefiniteError> {
        let settings = outbox_core::settings::parse(
            &read(path)?,
            &path.display().to_string(),
            ENV_PREFIX,
            outbox_core::settings::process_environment(),
        )
        .map_err(DefiniteError::Config)?;
        let mut config: Self = settings.config;
        config.overrides = settings.overrides;
        config.resolve(&|name| std::env::var_os(name))?;
        config.validate()?;
        if let Some(iam) = &config.mysql.aws_iam {
            outbox_source::server::use_rds_iam(&iam.region).map_err(DefiniteError::Config)?;
        }
        Ok(config)
    }

    /// Applies what the file only points at: the MySQL password and TLS
    /// settings go into `mysql.url`, the Kafka secrets into
    /// `kafka.properties`. `env` looks up environment variables.
    fn resolve(&mut self, env: &impl Fn(&str) -> Option<OsString>) -> Result<(), DefiniteError> {
        let mysql = &mut self.mysql;
        let password = secret_from_either(
            "mysql.password",
            mysql.password_env.as_deref(),
            mysql.password_file.as_deref(),
            env,
        )?;
        let tls = mysql.tls.resolve()?;
        if mysql.aws_iam.is_some() {
            iam_sign_in(&mysql.url.0, password.is_some(), tls.mode)?;
        }
        refuse_plaintext(&tls, mysql.tls.allow_plaintext, &mysql.url.0)?;
        for connect in &mut mysql.url.0 {
            *connect = connect.clone().with_tls(tls.clone());
            if let Some(password) = &password {
                *connect = connect.clone().with_password(password.clone());
            }
        }

        let kafka = &mut self.kafka;
        kafka.signing_key = secret_from_either(
            "kafka.signing_key",
            kafka.signing_key_env.as_deref(),
            kafka.signing_key_file.as_deref(),
            env,
        )?;
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
        if let Some(msk) = &kafka.aws_msk_iam {
            msk.fill_properties(&mut kafka.properties);
        }
        Ok(())
    }

    /// Whether outbox rows may be deleted: the forwarder reads their
    /// DELETEs as `on_delete` says, so only `ignore` lets it stream on.
    pub fn may_prune(&self) -> Result<(), DefiniteError> {
        if self.outbox.on_delete != outbox_core::ChangePolicy::Ignore {
            return Err(DefiniteError::Config(
                "deleting outbox rows ([retention], `prune`) needs [outbox] on_delete = \"ignore\": \
                 the forwarder would report every row deleted"
                    .into(),
            ));
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), DefiniteError> {
        self.decode_config()?;
        self.kafka.client_auth()?;
        self.kafka_config().client_config()?;
        if let Some(key) = &self.kafka.signing_key {
            outbox_kafka::Signing::new(key.as_bytes())
                .map_err(|why| DefiniteError::Config(format!("kafka.signing_key: {why}")))?;
        }
        if let Some(topics) = &self.kafka.topics {
            if topics.partitions < 1
                || topics.replication_factor == 0
                || topics.replication_factor < -1
            {
                return Err(DefiniteError::Config(
                    "[kafka.topics]: partitions must be at least 1 and replication_factor at \
                     least 1 (or -1, the broker's default)"
                        .into(),
                ));
            }
        }
        let template = self.kafka.topic.parse::<outbox_sink::TopicTemplate>()?;
        outbox_sink::AllowedTopics::new(&self.kafka.allowed_topics, &template)?;
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
        let need = self.mysql.publish_after_replicas;
        let candidates = self.mysql.url.all().len();
        if need > 0 && need >= candidates {
            return Err(DefiniteError::Config(format!(
                "mysql.publish_after_replicas = {need} needs at least {} candidates in mysql.url \
                 (the primary and {need} replicas); it lists {candidates}",
                need + 1
            )));
        }
        if let Some(retention) = &self.retention {
            self.may_prune()?;
            outbox_core::sql::configured_name("retention.time_column", &retention.time_column)
                .map_err(DefiniteError::Config)?;
            if retention.batch == 0 || retention.interval_seconds == 0 {
                return Err(DefiniteError::Config(
                    "retention.batch and retention.interval_seconds must be at least 1".into(),
                ));
            }
        }
        if let Some(ha) = &self.ha {
            self.validate_group(ha)?;
        }
        outbox_core::sql::configured_name("audit.time_column", &self.audit.time_column)
            .map_err(DefiniteError::Config)?;
        if self.audit.interval_seconds == 0 {
            return Err(DefiniteError::Config(
                "audit.interval_seconds must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// What `[ha]` needs of the rest of the configuration.
    fn validate_group(&self, ha: &HaSection) -> Result<(), DefiniteError> {
        if !outbox_core::rules::is_topic_name(&ha.checkpoint_topic) {
            return Err(DefiniteError::Config(format!(
                "ha.checkpoint_topic {:?} is not a topic name Kafka takes (letters, digits, \
                 '.', '_', '-'; by default it is derived from ha.group): set \
                 ha.checkpoint_topic",
                ha.checkpoint_topic
            )));
        }
        let lock = ha.lock_name();
        if lock.chars().count() > ha::MAX_LOCK_NAME {
            return Err(DefiniteError::Config(format!(
                "the [ha] lock's name {lock:?} is longer than {} characters, which the \
                 server refuses: shorten ha.group or ha.lock_suffix",
                ha::MAX_LOCK_NAME
            )));
        }
        if ha.lease_ms < 2_000 {
            return Err(DefiniteError::Config(
                "ha.lease_ms must be at least 2000: the lock's session times out in whole seconds"
                    .into(),
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
        self.outbox
            .columns
            .check_names()
            .map_err(DefiniteError::Config)?;
        Ok(DecodeConfig {
            tables: OutboxTables::new(tables),
            columns: self.outbox.columns.clone(),
            event_id_format: self.outbox.event_id_format,
            max_transaction_bytes: self.outbox.max_transaction_bytes,
            bad_rows: self.outbox.bad_row_policy,
            headers: self
                .outbox
                .header_columns()
                .map_err(DefiniteError::Config)?,
            tombstone_on_null_payload: self.outbox.tombstone_on_null_payload,
            on_update: self.outbox.on_update,
            on_delete: self.outbox.on_delete,
        })
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
            reserved_topics: self
                .ha
                .iter()
                .map(|ha| ha.checkpoint_topic.clone())
                .collect(),
            allowed_topics: self.kafka.allowed_topics.clone(),
            topic_creation: self.kafka.topics.as_ref().map(kafka::TopicsSection::spec),
            signing: self
                .kafka
                .signing_key
                .as_deref()
                .and_then(|key| outbox_kafka::Signing::new(key.as_bytes()).ok()),
            auth: self.kafka.client_auth().unwrap_or_default(),
            partitioner: self.kafka.partitioner,
            coordinate_headers: self.kafka.coordinate_headers,
            properties,
        }
    }
}

/// What `mysql.aws_iam` needs of the connections: no password of their own
/// (`with_password`: `password_env` or `password_file`), a user to sign in
/// as, and off this host a verified TLS channel, since the token travels
/// in clear text and opens the database for 15 minutes to whoever reads it.
fn iam_sign_in(
    candidates: &[outbox_source::server::MysqlConnect],
    with_password: bool,
    tls: outbox_source::server::TlsMode,
) -> Result<(), DefiniteError> {
    use outbox_source::server::TlsMode;
    let refuse = |why: &str| Err(DefiniteError::Config(format!("mysql.aws_iam: {why}")));
    for connect in candidates {
        let opts = connect.opts()?;
        if with_password || opts.pass().is_some() {
            return refuse(
                "each connection signs in with a token: remove the password from mysql.url \
                 and unset mysql.password_env / password_file",
            );
        }
        if opts.user().is_none_or(str::is_empty) {
            return refuse("mysql.url names no user to sign in as: mysql://USER@host:port");
        }
        if connect.remote_host().is_some()
            && !matches!(tls, TlsMode::VerifyCa | TlsMode::VerifyIdentity)
        {
            return refuse(
                "the token is sent in clear text: set [mysql.tls] mode = \"verify_identity\" \
                 with ca_file = RDS's CA bundle (allow_plaintext does not apply)",
            );
        }
    }
    Ok(())
}

/// The text of the file at `path`.
fn read(path: &Path) -> Result<String, DefiniteError> {
    std::fs::read_to_string(path)
        .map_err(|e| DefiniteError::Config(format!("cannot read {}: {e}", path.display())))
}

#[cfg(test)]
mod tests;
