use std::collections::BTreeMap;

use outbox_core::DefiniteError;

/// Kafka settings of the forwarder.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Topic name or template, e.g. `outbox.{aggregate_type}`.
    pub topic: String,
    /// Where refused rows go under the `dead_letter` bad-row policy.
    pub dead_letter_topic: String,
    /// Other librdkafka properties, passed through.
    pub properties: BTreeMap<String, String>,
}

/// Producer settings the forwarder's guarantees rest on; they may be
/// restated with the same value but never changed.
const PINNED: [(&str, &[&str]); 2] = [("enable.idempotence", &["true"]), ("acks", &["all", "-1"])];

/// Defaults chosen for this workload; each can be overridden in
/// `[kafka.properties]`.
const DEFAULTS: [(&str, &str); 4] = [
    // Small batches wait a little for company: throughput without much latency.
    ("linger.ms", "5"),
    // A message waits for the broker as long as it takes; the forwarder's
    // in-flight window, not a timeout, bounds what is pending. A timed-out
    // message would only be sent again from the checkpoint.
    ("message.timeout.ms", "0"),
    // The in-flight window (forwarder side) stays well under this.
    ("queue.buffering.max.messages", "1000000"),
    ("queue.buffering.max.kbytes", "1048576"),
];

impl KafkaConfig {
    /// The librdkafka configuration, or a clear error if the user's
    /// properties would weaken delivery.
    pub fn client_config(&self) -> Result<rdkafka::ClientConfig, DefiniteError> {
        for (key, allowed) in PINNED {
            if let Some(value) = self.properties.get(key) {
                if !allowed.iter().any(|a| a.eq_ignore_ascii_case(value)) {
                    return Err(DefiniteError::Config(format!(
                        "kafka.properties.{key} = {value:?} is refused: the forwarder needs \
                         {key}={} so that an ack means the message is stored exactly once; \
                         remove the property",
                        allowed[0]
                    )));
                }
            }
        }
        if self.properties.contains_key("bootstrap.servers") {
            return Err(DefiniteError::Config(
                "set the brokers with kafka.brokers, not kafka.properties.bootstrap.servers".into(),
            ));
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
            properties: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
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
}
