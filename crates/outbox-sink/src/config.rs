use std::collections::BTreeMap;

use outbox_core::DefiniteError;

/// How a topic the forwarder creates is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub partitions: i32,
    /// `-1`: the broker's default.
    pub replication_factor: i32,
    /// Topic settings (`min.insync.replicas`, `retention.ms`, ...).
    pub configs: BTreeMap<String, String>,
}

/// Kafka settings of the forwarder.
#[derive(Clone)]
pub struct KafkaConfig {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Topic name or template, e.g. `outbox.{aggregate_type}`.
    pub topic: String,
    /// Where refused rows go under the `dead_letter` bad-row policy.
    pub dead_letter_topic: String,
    /// Topics no row may be routed to besides the dead-letter topic and
    /// Kafka's internal `__` ones (an `[ha]` group's checkpoint topic).
    pub reserved_topics: Vec<String>,
    /// `kafka.allowed_topics`: the topics rows may be routed to (see
    /// [`crate::AllowedTopics`]); empty: the template's literal prefix.
    pub allowed_topics: Vec<String>,
    /// `[kafka.topics]`: a topic found missing before its first message is
    /// created so (see [`crate::create_topic`]); `None`: never.
    pub topic_creation: Option<TopicSpec>,
    /// `kafka.signing_key`: every message is signed, and only signed
    /// messages are taken for the forwarder's own (see [`outbox_kafka::Signing`]).
    pub signing: Option<outbox_kafka::Signing>,
    /// Other librdkafka properties, passed through. They may hold secrets
    /// (`sasl.password`, `ssl.key.password`), so `Debug` shows only their names.
    pub properties: BTreeMap<String, String>,
    /// The OAUTHBEARER token command, if any: every client's context
    /// carries it.
    pub auth: outbox_kafka::ClientAuth,
    /// `kafka.partitioner`: how keys, and hashed `partition_column` values,
    /// pick their partition.
    pub partitioner: crate::partitioner::Partitioner,
    /// `kafka.coordinate_headers`: a message's binlog coordinates in one
    /// header or in six.
    pub coordinate_headers: crate::encoder::CoordinateHeaders,
}

impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("reserved_topics", &self.reserved_topics)
            .field("properties", &self.properties.keys().collect::<Vec<_>>())
            .field("auth", &self.auth)
            .field("partitioner", &self.partitioner)
            .field("coordinate_headers", &self.coordinate_headers)
            .finish()
    }
}

/// Producer settings the forwarder's guarantees rest on; they may be
/// restated with the same value but never changed.
const PINNED: [(&str, &[&str]); 2] = [("enable.idempotence", &["true"]), ("acks", &["all", "-1"])];

/// Properties about reaching the brokers (TLS, SASL), which every client
/// of the forwarder needs, not only the producer.
const CONNECTION_PREFIXES: [&str; 3] = ["security.", "sasl.", "ssl."];

/// Defaults chosen for this workload; each can be overridden in
/// `[kafka.properties]`.
const DEFAULTS: [(&str, &str); 6] = [
    // A topic that does not exist is not created by the broker on produce
    // (librdkafka's producer asks by default): a row would otherwise make
    // topics, with the broker's default partitions and settings. Create
    // topics first, or set this to "true".
    ("allow.auto.create.topics", "false"),
    // Small batches wait a little for company: throughput without much latency.
    ("linger.ms", "5"),
    // Outbox payloads are repetitive JSON; lz4 costs little CPU and cut the
    // bytes the broker handles enough to raise catch-up throughput by about
    // a third in outbox-bench on 2 cores (librdkafka bundles lz4).
    ("compression.type", "lz4"),
    // A message waits for the broker as long as it takes; the forwarder's
    // in-flight window, not a timeout, bounds what is pending. A timed-out
    // message would only be sent again from the checkpoint.
    ("message.timeout.ms", "0"),
    // The in-flight window (forwarder side) stays well under this.
    ("queue.buffering.max.messages", "1000000"),
    ("queue.buffering.max.kbytes", "1048576"),
];

impl KafkaConfig {
    /// Why the property `key = value` cannot be passed to librdkafka, if it
    /// cannot: it would weaken delivery, or it belongs to another option.
    /// The reason never repeats `value`, which may be a secret.
    pub fn refused_property(key: &str, value: &str) -> Option<String> {
        if key == "bootstrap.servers" {
            return Some("set the brokers with kafka.brokers".into());
        }
        if key == "partitioner" {
            return Some(
                "set kafka.partitioner (\"crc32\" or \"murmur2\"): partition_column values \
                 are hashed the same way as keys"
                    .into(),
            );
        }
        let (_, allowed) = PINNED.iter().find(|(pinned, _)| *pinned == key)?;
        if allowed.iter().any(|a| a.eq_ignore_ascii_case(value)) {
            return None;
        }
        Some(format!(
            "the forwarder needs {key}={} so that an ack means the message is stored \
             exactly once; remove the property",
            allowed[0]
        ))
    }

    /// A configuration for the forwarder's other clients (the `check`
    /// probe, `verify`'s consumer): the brokers and the properties that say
    /// how to reach and authenticate to them, none of the producer's.
    pub fn connection_config(&self) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        for (key, value) in &self.properties {
            if CONNECTION_PREFIXES.iter().any(|p| key.starts_with(p)) {
                config.set(key, value);
            }
        }
        config.set("bootstrap.servers", &self.brokers);
        config
    }

    /// The librdkafka configuration, or a clear error if the user's
    /// properties would weaken delivery.
    pub fn client_config(&self) -> Result<rdkafka::ClientConfig, DefiniteError> {
        for (key, value) in &self.properties {
            if let Some(why) = Self::refused_property(key, value) {
                let shown = if PINNED.iter().any(|(pinned, _)| pinned == key) {
                    format!(" = {value:?}")
                } else {
                    String::new()
                };
                return Err(DefiniteError::Config(format!(
                    "kafka.properties.{key}{shown} is refused: {why}"
                )));
            }
        }
        let mut config = rdkafka::ClientConfig::new();
        for (key, value) in DEFAULTS {
            config.set(key, value);
        }
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        for (key, allowed) in PINNED {
            config.set(key, allowed[0]);
        }
        config.set("partitioner", self.partitioner.librdkafka_name());
        config.set("bootstrap.servers", &self.brokers);
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(props: &[(&str, &str)]) -> KafkaConfig {
        KafkaConfig {
            brokers: "127.0.0.1:9092".into(),
            topic: "t".into(),
            dead_letter_topic: "dlq".into(),
            reserved_topics: Vec::new(),
            allowed_topics: Vec::new(),
            signing: None,
            topic_creation: None,
            properties: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            auth: Default::default(),
            partitioner: Default::default(),
            coordinate_headers: Default::default(),
        }
    }

    #[test]
    fn idempotence_and_acks_all_cannot_be_turned_off() {
        for props in [[("enable.idempotence", "false")], [("acks", "1")]] {
            let err = config(&props).client_config().expect_err("must be refused");
            assert!(err.to_string().contains("is refused"), "{err}");
        }
    }

    #[test]
    fn pinned_settings_win_and_other_properties_pass_through() {
        let cfg = config(&[
            ("acks", "-1"),
            ("linger.ms", "20"),
            ("compression.type", "lz4"),
        ])
        .client_config()
        .unwrap();
        assert_eq!(cfg.get("acks"), Some("all"));
        assert_eq!(cfg.get("enable.idempotence"), Some("true"));
        assert_eq!(cfg.get("linger.ms"), Some("20"));
        assert_eq!(cfg.get("compression.type"), Some("lz4"));
        assert_eq!(cfg.get("bootstrap.servers"), Some("127.0.0.1:9092"));
    }

    #[test]
    fn other_clients_get_the_security_properties_only() {
        let cfg = config(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.username", "u"),
            ("ssl.ca.location", "/ca.pem"),
            ("linger.ms", "20"),
        ])
        .connection_config();
        assert_eq!(cfg.get("security.protocol"), Some("sasl_plaintext"));
        assert_eq!(cfg.get("sasl.username"), Some("u"));
        assert_eq!(cfg.get("ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(cfg.get("bootstrap.servers"), Some("127.0.0.1:9092"));
        assert_eq!(cfg.get("linger.ms"), None);
        assert_eq!(cfg.get("enable.idempotence"), None);
    }

    /// What `[kafka.properties]` can ask of the bundled librdkafka: it is
    /// built with OpenSSL (rdkafka's `ssl` feature), so TLS and every SASL
    /// mechanism but GSSAPI can be configured. If this fails after a
    /// dependency change, update docs/security.md.
    #[test]
    fn this_build_speaks_tls_and_sasl_plain_and_scram() {
        let create = |props: &[(&str, &str)]| {
            config(props)
                .client_config()
                .unwrap()
                .create::<rdkafka::producer::BaseProducer>()
                .map(|_| ())
        };
        create(&[("security.protocol", "ssl")]).expect("TLS is built in");
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            for protocol in ["sasl_plaintext", "sasl_ssl"] {
                create(&[
                    ("security.protocol", protocol),
                    ("sasl.mechanism", mechanism),
                    ("sasl.username", "forwarder"),
                    ("sasl.password", "pw"),
                ])
                .unwrap_or_else(|e| panic!("{protocol} with {mechanism}: {e}"));
            }
        }
    }
}
