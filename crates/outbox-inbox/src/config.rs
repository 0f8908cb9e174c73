//! The consumer's configuration, as TOML (`--config FILE` of the example
//! service). Unknown keys are errors; every default is a `const fn` saying
//! where its value comes from. The MySQL URL may hold a password, so this
//! type is never logged.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::error::InboxError;

/// Everything an [`crate::InboxConsumer`] needs.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct InboxConfig {
    /// The database holding `consumed_event` and the handler's tables.
    pub mysql: MysqlSection,
    /// Where the events come from and where poison messages go.
    pub kafka: KafkaSection,
    /// Whose inbox this is.
    pub inbox: InboxSection,
    /// How failed events are retried before they are parked.
    #[serde(default)]
    pub retry: RetrySection,
    /// Where the consumer's measures are served.
    #[serde(default)]
    pub metrics: MetricsSection,
}

/// The consumer's metrics endpoint.
#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// `host:port` answering `GET /metrics` (OpenMetrics text, see
    /// [`crate::metrics`]) and `GET /healthz`; none by default.
    #[serde(default)]
    pub listen: Option<std::net::SocketAddr>,
}

/// The consumer's database.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct MysqlSection {
    /// `mysql://user:password@host:port/schema`; the user needs INSERT on
    /// `consumed_event` and whatever the handler writes. The pool's own
    /// URL parameters (`pool_min`, `pool_max`, `reset_connection`,
    /// `inactive_connection_ttl`) are refused: the settings below set them.
    pub url: String,
    /// Pool size. Partitions are worked on side by side, a batch each on a
    /// connection of its own; with more partitions than connections they
    /// take turns.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Whether a connection the pool takes back is reset
    /// (`COM_RESET_CONNECTION`) before its next transaction. The reset
    /// undoes whatever session state a handler left (session variables,
    /// temporary tables) but also drops the connection's prepared
    /// statements, so every batch prepares its statements again on the
    /// server. Off: a handler must leave no session state behind (the
    /// inbox's own strict `sql_mode` is set at the start of every
    /// transaction either way).
    #[serde(default = "default_reset_sessions")]
    pub reset_sessions: bool,
    /// The password, from this environment variable instead of the URL.
    #[serde(default)]
    pub password_env: Option<String>,
    /// The password, from this file (one trailing newline dropped).
    #[serde(default)]
    pub password_file: Option<std::path::PathBuf>,
    /// TLS to the database, as the forwarder's `[mysql.tls]`: `mode`,
    /// `ca_file`, `client_cert_file`, `client_key_file`, `allow_plaintext`.
    #[serde(default)]
    pub tls: outbox_source::server::TlsSection,
}

impl MysqlSection {
    /// The database at `url` with the default pool.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: default_max_connections(),
            reset_sessions: default_reset_sessions(),
            password_env: None,
            password_file: None,
            tls: Default::default(),
        }
    }
}

/// A few partitions side by side, plus room for a connection being replaced.
const fn default_max_connections() -> usize {
    4
}

/// Reset: what one handler's transaction leaves in its session never
/// reaches the next.
const fn default_reset_sessions() -> bool {
    true
}

/// The Kafka side.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct KafkaSection {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Consumer group; its committed offsets are where a restart resumes.
    pub group_id: String,
    /// Topics to consume.
    pub topics: Vec<String>,
    /// Where a message goes after `retry.max_attempts` failures (or at once
    /// when the handler rejects it), with the error in a header, so the
    /// partition can go on.
    pub dead_letter_topic: String,
    /// How often settled offsets are committed. A crash repeats at most this
    /// much work, which the inbox then skips as duplicates.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// Other librdkafka properties for the consumer and the dead-letter
    /// producer; offset handling cannot be changed.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// SASL/OAUTHBEARER: a program that prints a token and its expiry, run
    /// at start and before the token expires (`outbox_kafka::oauth`).
    #[serde(default)]
    pub oauth_token_command: Option<Vec<String>>,
    /// Variables the token command is given besides PATH, HOME, USER,
    /// LANG, LC_ALL, TZ and TMPDIR: names, or prefixes followed by `*`.
    #[serde(default)]
    pub oauth_token_env: Vec<String>,
    /// Amazon MSK's IAM sign-in, built in: `{ region = "eu-west-1" }`
    /// (`outbox_kafka::oauth`).
    #[serde(default)]
    pub aws_msk_iam: Option<outbox_kafka::AwsMskIam>,
    /// The forwarder's `kafka.signing_key`, from this environment variable:
    /// a message without a valid `outbox_signature` is parked, never
    /// processed (nor claims its event id).
    #[serde(default)]
    pub signing_key_env: Option<String>,
    /// The signing key, from this file (one trailing newline dropped).
    #[serde(default)]
    pub signing_key_file: Option<std::path::PathBuf>,
}

/// Pool parameters `mysql_async` reads from a URL that the inbox sets
/// itself, and what to do instead.
const POOL_PARAMETERS: [(&str, &str); 4] = [
    ("pool_min", "set mysql.max_connections"),
    ("pool_max", "set mysql.max_connections"),
    ("reset_connection", "set mysql.reset_sessions"),
    (
        "inactive_connection_ttl",
        "idle connections are kept for a minute",
    ),
];

/// How long a pooled connection may stay idle before it is closed.
const IDLE_CONNECTION_TTL: std::time::Duration = std::time::Duration::from_secs(60);

impl MysqlSection {
    /// The driver options of the inbox's pool: its size and reset. Idle
    /// connections are kept for a minute: without a time to live the pool
    /// closes every returned connection but one, and partitions worked on
    /// side by side would connect anew for each batch.
    ///
    /// Pool parameters in the URL are refused rather than silently
    /// replaced.
    pub fn pool_options(&self) -> Result<mysql_async::Opts, String> {
        use outbox_source::server::{refuse_plaintext, secret_from_either};
        mysql_async::Opts::from_url(&self.url)
            .map_err(|e| format!("mysql.url is not a MySQL URL: {e}"))?;
        let tls = self.tls.resolve().map_err(|e| e.to_string())?;
        let mut connect =
            outbox_source::server::MysqlConnect::new(self.url.clone()).with_tls(tls.clone());
        refuse_plaintext(
            &tls,
            self.tls.allow_plaintext,
            std::slice::from_ref(&connect),
        )
        .map_err(|e| e.to_string())?;
        let password = secret_from_either(
            "mysql.password",
            self.password_env.as_deref(),
            self.password_file.as_deref(),
            &|n| std::env::var_os(n),
        )
        .map_err(|e| e.to_string())?;
        if let Some(password) = password {
            connect = connect.with_password(password);
        }
        let opts = connect.opts().map_err(|e| e.to_string())?;
        let parameters = self.url.split_once('?').map_or("", |(_, query)| query);
        for parameter in parameters.split('&') {
            let name = parameter.split('=').next().unwrap_or_default();
            if let Some((_, own)) = POOL_PARAMETERS.iter().find(|(url, _)| *url == name) {
                return Err(format!(
                    "mysql.url sets {name}, which the inbox's pool does not take from the URL: \
                     {own}"
                ));
            }
        }
        let constraints = mysql_async::PoolConstraints::new(1, self.max_connections.max(1))
            .ok_or_else(|| "mysql.max_connections must be at least 1".to_owned())?;
        Ok(mysql_async::OptsBuilder::from_opts(opts)
            .pool_opts(
                mysql_async::PoolOpts::default()
                    .with_constraints(constraints)
                    .with_inactive_connection_ttl(IDLE_CONNECTION_TTL)
                    .with_reset_connection(self.reset_sessions),
            )
            .into())
    }
}

impl KafkaSection {
    /// The key messages must be signed with, when one is configured.
    pub fn signing(&self) -> Result<Option<outbox_kafka::Signing>, InboxError> {
        let key = outbox_source::server::secret_from_either(
            "kafka.signing_key",
            self.signing_key_env.as_deref(),
            self.signing_key_file.as_deref(),
            &|n| std::env::var_os(n),
        )
        .map_err(|e| InboxError::Config(e.to_string()))?;
        let Some(key) = key else {
            return Ok(None);
        };
        outbox_kafka::Signing::new(key.as_bytes())
            .map(Some)
            .map_err(|why| InboxError::Config(format!("kafka.signing_key: {why}")))
    }

    /// The token command the consumer and the dead-letter producer carry.
    pub fn client_auth(&self) -> Result<outbox_kafka::ClientAuth, InboxError> {
        outbox_kafka::ClientAuth::from_config(
            self.oauth_token_command.as_deref(),
            &self.oauth_token_env,
            self.aws_msk_iam.as_ref(),
            &self.properties,
        )
        .map_err(InboxError::Config)
    }
}

/// One second: a few hundred repeats at most after a crash, negligible
/// commit traffic.
const fn default_commit_interval_ms() -> u64 {
    1_000
}

/// Whose inbox.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct InboxSection {
    /// `consumed_event.consumer_name`: one name per consuming logic, shared
    /// by all its instances (a per-instance name would let every instance
    /// process every event once).
    pub consumer_name: String,
    /// Events of one partition processed in one MySQL transaction, at most
    /// (1: one transaction per event).
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    /// How long a partition's oldest waiting event may wait for more to
    /// fill its batch; 0: a batch is what has arrived when the partition's
    /// turn comes (under a backlog that is `max_batch`).
    #[serde(default)]
    pub max_batch_wait_ms: u64,
}

impl InboxSection {
    /// `consumer_name` with the default batching.
    pub fn new(consumer_name: impl Into<String>) -> Self {
        Self {
            consumer_name: consumer_name.into(),
            max_batch: default_max_batch(),
            max_batch_wait_ms: 0,
        }
    }
}

/// A thousand events: under a backlog each transaction's fixed costs (its
/// round trips, the statements prepared again after a reset, the log flush
/// of its commit on a durable database) are shared by a thousand events
/// (`outbox-bench` on a durable MariaDB: about 1.3× the rate of batches of
/// 200), and a failing batch is retried without the event its handler
/// names. At a low rate a batch is what has arrived, so it adds no latency.
const fn default_max_batch() -> usize {
    1_000
}

/// The most events one batch may hold: one multi-row statement each for
/// the inbox rows and the handler's writes stays far below
/// `max_allowed_packet`.
const MAX_BATCH: usize = 5_000;

/// Retries of a failing event.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RetrySection {
    /// Failed attempts after which the message is parked. Database outages
    /// do not count: they are retried until the database is back.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// First wait after a failure; doubles up to `max_backoff_ms`.
    #[serde(default = "default_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    /// Longest wait between two attempts.
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
}

impl Default for RetrySection {
    fn default() -> Self {
        Self {
            max_attempts: default_max_attempts(),
            initial_backoff_ms: default_initial_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
        }
    }
}

/// Enough to ride out a short outage of what the handler depends on
/// (about 6 s with the default backoff) before parking.
const fn default_max_attempts() -> u32 {
    5
}

const fn default_initial_backoff_ms() -> u64 {
    200
}

const fn default_max_backoff_ms() -> u64 {
    30_000
}

/// Consumer settings the inbox's guarantees rest on: offsets move only when
/// the consumer commits what it settled.
const PINNED: [(&str, &str); 2] = [
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
];

/// Set by this configuration's own keys, not by `kafka.properties`.
const OWN_KEYS: [(&str, &str); 2] = [
    ("bootstrap.servers", "kafka.brokers"),
    ("group.id", "kafka.group_id"),
];

/// Variables named `OUTBOX_INBOX__SECTION__KEY` override the file's settings.
pub const ENV_PREFIX: &str = "OUTBOX_INBOX";

/// The longest `consumed_event.consumer_name`.
const MAX_CONSUMER_NAME: usize = 128;

impl InboxConfig {
    /// Reads `path`, with any setting overridden by an
    /// `OUTBOX_INBOX__SECTION__KEY` variable (see
    /// [`outbox_core::settings`]), and checks it.
    pub fn load(path: &Path) -> Result<Self, InboxError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| InboxError::Config(format!("cannot read {}: {e}", path.display())))?;
        let env = outbox_core::settings::process_environment();
        let mut config: Self =
            outbox_core::settings::parse(&text, &path.display().to_string(), ENV_PREFIX, env)
                .map_err(InboxError::Config)?
                .config;
        if let Some(msk) = &config.kafka.aws_msk_iam {
            msk.fill_properties(&mut config.kafka.properties);
        }
        config.validate()?;
        Ok(config)
    }

    /// Rejects values that would break the guarantees or cannot work.
    pub fn validate(&self) -> Result<(), InboxError> {
        let err = |m: String| Err(InboxError::Config(m));
        self.kafka.client_auth()?;
        self.kafka.signing()?;
        let name = &self.inbox.consumer_name;
        if name.is_empty() || name.len() > MAX_CONSUMER_NAME {
            return err(format!(
                "inbox.consumer_name must be 1 to {MAX_CONSUMER_NAME} characters \
                 (consumed_event.consumer_name)"
            ));
        }
        if self.inbox.max_batch == 0 || self.inbox.max_batch > MAX_BATCH {
            return err(format!(
                "inbox.max_batch must be 1 to {MAX_BATCH} (events per MySQL transaction)"
            ));
        }
        if self.kafka.topics.is_empty() {
            return err("kafka.topics is empty: name the topics to consume".into());
        }
        if self.kafka.topics.contains(&self.kafka.dead_letter_topic) {
            return err(format!(
                "kafka.dead_letter_topic {:?} is also in kafka.topics: parked messages \
                 would be consumed again; use a topic of its own",
                self.kafka.dead_letter_topic
            ));
        }
        if self.retry.max_attempts == 0 {
            return err("retry.max_attempts must be at least 1".into());
        }
        if self.retry.initial_backoff_ms > self.retry.max_backoff_ms {
            return err("retry.initial_backoff_ms is larger than retry.max_backoff_ms".into());
        }
        for (key, value) in PINNED {
            if let Some(v) = self.kafka.properties.get(key) {
                if !v.eq_ignore_ascii_case(value) {
                    return err(format!(
                        "kafka.properties.{key} = {v:?} is refused: the inbox commits offsets \
                         itself, only behind processed messages; remove the property"
                    ));
                }
            }
        }
        for (key, own) in OWN_KEYS {
            if self.kafka.properties.contains_key(key) {
                return err(format!("set {key} with {own}, not kafka.properties.{key}"));
            }
        }
        self.mysql.pool_options().map_err(InboxError::Config)?;
        Ok(())
    }

    /// The consumer's librdkafka configuration.
    pub fn consumer_config(&self) -> rdkafka::ClientConfig {
        let mut config = self.client_config();
        // A new group starts at the beginning: events published before the
        // consumer first ran are still events to process.
        config.set("auto.offset.reset", "earliest");
        // A topic subscribed to before it exists (the first event of a new
        // aggregate type creates it) is found within seconds; librdkafka's
        // default looks again every five minutes.
        config.set("topic.metadata.refresh.interval.ms", "5000");
        for (key, value) in &self.kafka.properties {
            config.set(key, value);
        }
        for (key, value) in PINNED {
            config.set(key, value);
        }
        config.set("group.id", &self.kafka.group_id);
        config
    }

    /// The dead-letter producer's configuration: idempotent, `acks=all`, so
    /// an ack means the parked message is stored before the offset moves.
    pub fn producer_config(&self) -> rdkafka::ClientConfig {
        let mut config = self.client_config();
        for (key, value) in &self.kafka.properties {
            // Consumer-only properties would make the producer warn.
            if !key.starts_with("auto.")
                && !key.starts_with("session.")
                && !key.starts_with("max.poll")
            {
                config.set(key, value);
            }
        }
        config.set("enable.idempotence", "true");
        config.set("acks", "all");
        config
    }

    fn client_config(&self) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", &self.kafka.brokers);
        config
    }

    /// `kafka.commit_interval_ms`.
    pub fn max_batch_wait(&self) -> Duration {
        Duration::from_millis(self.inbox.max_batch_wait_ms)
    }

    pub fn commit_interval(&self) -> Duration {
        Duration::from_millis(self.kafka.commit_interval_ms.max(1))
    }

    /// The wait before attempt `failures + 1`: initial × 2^(failures-1),
    /// capped.
    pub fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(32);
        let ms = self
            .retry
            .initial_backoff_ms
            .saturating_mul(1u64 << doublings)
            .min(self.retry.max_backoff_ms);
        Duration::from_millis(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [mysql]
        url = "mysql://planner:secret@127.0.0.1:3306/shop"
        [kafka]
        brokers = "127.0.0.1:9092"
        group_id = "notification-planner"
        topics = ["outbox.order"]
        dead_letter_topic = "notification-planner.dead-letter"
        [inbox]
        consumer_name = "notification-planner"
    "#;

    #[test]
    fn minimal_config_gets_documented_defaults() {
        let c: InboxConfig = toml::from_str(MINIMAL).unwrap();
        c.validate().unwrap();
        assert_eq!(c.retry.max_attempts, 5);
        assert_eq!(c.kafka.commit_interval_ms, 1_000);
        assert_eq!(c.mysql.max_connections, 4);
        assert_eq!(c.inbox.max_batch, 1_000);
        assert_eq!(c.max_batch_wait(), Duration::ZERO);
        let consumer = c.consumer_config();
        assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
        assert_eq!(consumer.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(consumer.get("group.id"), Some("notification-planner"));
        assert_eq!(c.producer_config().get("acks"), Some("all"));
    }

    #[test]
    fn unknown_keys_are_errors() {
        let text = MINIMAL.replace("[inbox]", "[inbox]\nconsumer = \"x\"");
        assert!(toml::from_str::<InboxConfig>(&text).is_err());
    }

    #[test]
    fn auto_commit_and_a_looping_dead_letter_topic_are_refused() {
        let text = format!("{MINIMAL}\n[kafka.properties]\n\"enable.auto.commit\" = \"true\"\n");
        let err = toml::from_str::<InboxConfig>(&text)
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("enable.auto.commit"), "{err}");
        let text = MINIMAL.replace(
            "dead_letter_topic = \"notification-planner.dead-letter\"",
            "dead_letter_topic = \"outbox.order\"",
        );
        let err = toml::from_str::<InboxConfig>(&text)
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("dead_letter_topic"), "{err}");
    }

    #[test]
    fn a_batch_holds_one_to_five_thousand_events() {
        for (max_batch, valid) in [(0, false), (1, true), (5_000, true), (5_001, false)] {
            let mut c: InboxConfig = toml::from_str(MINIMAL).unwrap();
            c.inbox.max_batch = max_batch;
            assert_eq!(c.validate().is_ok(), valid, "{max_batch}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut c: InboxConfig = toml::from_str(MINIMAL).unwrap();
        c.retry.initial_backoff_ms = 100;
        c.retry.max_backoff_ms = 500;
        let waits: Vec<u64> = (1..=5).map(|n| c.backoff(n).as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
    }

    #[test]
    fn pool_parameters_in_the_url_are_refused_not_ignored() {
        let mut c: InboxConfig = toml::from_str(MINIMAL).unwrap();
        c.mysql.url = "mysql://u@127.0.0.1:3306/shop?reset_connection=false".into();
        let error = c.validate().unwrap_err().to_string();
        assert!(
            error.contains("reset_connection") && error.contains("mysql.reset_sessions"),
            "{error}"
        );
        c.mysql.url = "mysql://u@127.0.0.1:3306/shop?prefer_socket=false&pool_max=20".into();
        let error = c.validate().unwrap_err().to_string();
        assert!(
            error.contains("pool_max") && error.contains("mysql.max_connections"),
            "{error}"
        );
        c.mysql.url = "mysql://u@127.0.0.1:3306/shop?prefer_socket=false".into();
        c.validate().unwrap();
    }

    #[test]
    fn the_documented_example_config_loads() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/notification-planner.toml");
        let c = InboxConfig::load(&path).unwrap();
        assert_eq!(c.inbox.consumer_name, "notification-planner");
        assert_eq!(c.kafka.topics, ["outbox.order"]);
    }

    /// The documented configuration loads and says the defaults the code
    /// has; the container's is it pointed at the compose services
    /// (`OUTBOX_WRITE_DOCKER_CONFIG=1` writes it).
    #[test]
    fn the_documented_and_the_docker_configs_are_the_defaults() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let documented = root.join("config/notification-planner.toml");
        let config = InboxConfig::load(&documented).unwrap();
        let defaults: InboxConfig = toml::from_str(MINIMAL).unwrap();
        assert_eq!(config.mysql.max_connections, defaults.mysql.max_connections);
        assert_eq!(config.mysql.reset_sessions, defaults.mysql.reset_sessions);
        assert_eq!(
            config.kafka.commit_interval_ms,
            defaults.kafka.commit_interval_ms
        );
        assert_eq!(config.inbox.max_batch, defaults.inbox.max_batch);
        assert_eq!(
            config.inbox.max_batch_wait_ms,
            defaults.inbox.max_batch_wait_ms
        );
        assert_eq!(config.retry.max_attempts, defaults.retry.max_attempts);
        assert_eq!(
            config.retry.initial_backoff_ms,
            defaults.retry.initial_backoff_ms
        );
        assert_eq!(config.retry.max_backoff_ms, defaults.retry.max_backoff_ms);
        assert!(config.kafka.properties.is_empty());

        let mut expected = std::fs::read_to_string(&documented).unwrap();
        for (from, to) in [
            ("@127.0.0.1:3306/", "@mysql:3306/"),
            ("brokers = \"127.0.0.1:9092\"", "brokers = \"kafka:29092\""),
            // MySQL in plaintext on the compose project's own network.
            ("allow_plaintext = false", "allow_plaintext = true"),
            // Scraped from the host through the published port.
            ("# listen = \"127.0.0.1:9465\"", "listen = \"0.0.0.0:9465\""),
        ] {
            assert_eq!(expected.matches(from).count(), 1, "{from}");
            expected = expected.replace(from, to);
        }
        let docker = root.join("docker/notification-planner.toml");
        if std::env::var_os("OUTBOX_WRITE_DOCKER_CONFIG").is_some() {
            std::fs::write(&docker, &expected).unwrap();
        }
        assert!(
            std::fs::read_to_string(&docker).unwrap_or_default() == expected,
            "docker/notification-planner.toml is not config/notification-planner.toml pointed \
             at the compose services: OUTBOX_WRITE_DOCKER_CONFIG=1 cargo test -p outbox-inbox \
             docker writes it"
        );
        InboxConfig::load(&docker).unwrap();
    }
}
