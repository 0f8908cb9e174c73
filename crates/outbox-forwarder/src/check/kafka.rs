//! The brokers: reachable, the topic there (or auto-created), and an
//! idempotent producer accepted.

use std::time::Duration;

use outbox_kafka::{ConnectionContext, Refusal};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, Producer};

use super::{Report, Status};
use crate::config::ForwarderConfig;

/// The TLS or SASL refusal `client` was told of, if any. librdkafka hands
/// its error reports over when the client is polled.
fn refusal_of(client: &BaseConsumer<ConnectionContext>) -> Option<Refusal> {
    for _ in 0..10 {
        if let Some(refusal) = client.context().refusal() {
            return Some(refusal);
        }
        let _ = tokio::task::block_in_place(|| client.poll(Duration::from_millis(50)));
    }
    client.context().refusal()
}

pub(super) async fn checks(config: &ForwarderConfig, report: &mut Report) {
    super::kafka_transport::transport(
        &config.kafka.brokers,
        &config.kafka_config().properties,
        report,
    );
    let Some(metadata) = brokers(config, report) else {
        return;
    };
    topic(config, &metadata, report);
    compression(config, report);
    if let Some(ha) = &config.ha {
        let topic = &ha.checkpoint_topic;
        let policy = match outbox_sink::holds_topic(&metadata, topic) {
            true => cleanup_policy(config, topic).await,
            false => {
                let spec = crate::group::topic_spec();
                let kafka = config.kafka_config();
                match outbox_sink::may_create_topic(&kafka, topic, &spec).await {
                    // Some brokers (tansu) create the topic on a
                    // validate-only request.
                    Ok(()) if outbox_sink::topic_exists(&kafka, topic).await => {
                        Policy::CreatedByAsking
                    }
                    Ok(()) => Policy::NotCreated,
                    Err(e) => Policy::CannotCreate(e.to_string()),
                }
            }
        };
        let fix = match &policy {
            Policy::CannotCreate(_) => crate::group::create_command(topic),
            _ => format!(
                "kafka-configs --alter --entity-type topics --entity-name {topic} --add-config \
                 cleanup.policy=compact: under delete the group's newest record goes with \
                 retention"
            ),
        };
        let (status, found) = group_topic_line(topic, policy);
        report.add(
            status,
            "ha checkpoint topic",
            found,
            "cleanup.policy=compact",
            &fix,
        );
        group_topic_partitions(&metadata, topic, report);
    }
    idempotent_producer(config, report).await;
}

/// The codecs this build reads and writes (librdkafka with zlib and zstd;
/// snappy and lz4 are its own).
pub const CODECS: [&str; 4] = ["gzip", "snappy", "lz4", "zstd"];

/// The codec the producer compresses with (`compression.type`, or its
/// alias `compression.codec`), the forwarder's default (lz4) included.
fn compression(config: &ForwarderConfig, report: &mut Report) {
    let effective = config.kafka_config().client_config().ok();
    let codec = effective
        .as_ref()
        .and_then(|c| {
            c.get("compression.type")
                .or_else(|| c.get("compression.codec"))
        })
        .unwrap_or("none");
    let known = codec == "none" || CODECS.contains(&codec);
    report.add(
        if known { Status::Pass } else { Status::Fail },
        "kafka compression",
        format!(
            "compression.type={codec}; messages compressed with any of {} are read",
            CODECS.join(", ")
        ),
        "none or one of the codecs",
        "set kafka.properties \"compression.type\" to none, gzip, snappy, lz4 or zstd",
    );
}

/// Whether the brokers list `topic` (without an error).
/// The group's topic has one partition: its records all carry the
/// group's key and land in one partition while the count stays, but a
/// partition added later moves the key, and the newest record is then
/// told by the clocks of the hosts that wrote them.
fn group_topic_partitions(metadata: &Metadata, topic: &str, report: &mut Report) {
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return;
    };
    let partitions = found.partitions().len();
    if partitions > 1 {
        report.add(
            Status::Warn,
            "ha checkpoint topic partitions",
            format!("{topic}: {partitions} partitions"),
            "1",
            "recreate it with one partition while no instance runs (`outbox-forwarder group \
             start --at POS` sets where the group resumes): a partition added later moves the \
             group's key, and its newest record is then told by the hosts' clocks",
        );
    }
}

/// What the brokers say of a topic's `cleanup.policy`.
#[derive(Debug)]
pub(super) enum Policy {
    /// The topic does not exist yet; the brokers would let this account
    /// create it.
    NotCreated,
    /// The topic does not exist, and the brokers would not let this
    /// account create it: why.
    CannotCreate(String),
    /// The brokers created it when asked whether they would.
    CreatedByAsking,
    /// They answer without it (some brokers do not report topic configs).
    Unreported,
    Reported(String),
    /// They refuse or fail: why.
    Unreadable(String),
}

/// What the brokers report of `topic`'s `cleanup.policy`.
async fn cleanup_policy(config: &ForwarderConfig, topic: &str) -> Policy {
    use rdkafka::admin::{AdminOptions, ResourceSpecifier};
    let admin = match outbox_sink::admin_client(&config.kafka_config()).await {
        Ok(admin) => admin,
        Err(e) => return Policy::Unreadable(e),
    };
    let described = admin
        .describe_configs(
            [&ResourceSpecifier::Topic(topic)],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
        )
        .await;
    match described.map(|d| d.into_iter().next()) {
        Ok(Some(Ok(resource))) => resource
            .get("cleanup.policy")
            .and_then(|entry| entry.value.clone())
            .map_or(Policy::Unreported, Policy::Reported),
        Ok(Some(Err(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition))) => {
            Policy::NotCreated
        }
        Ok(Some(Err(code))) => Policy::Unreadable(code.to_string()),
        Ok(None) => Policy::Unreported,
        Err(e) => Policy::Unreadable(e.to_string()),
    }
}

/// The line for the group's checkpoint topic: only compaction keeps each
/// group's newest record for as long as the group lives.
pub(super) fn group_topic_line(topic: &str, policy: Policy) -> (Status, String) {
    match policy {
        Policy::Reported(policy) => {
            let policies: Vec<&str> = policy.split(',').map(str::trim).collect();
            match (policies.contains(&"compact"), policies.contains(&"delete")) {
                (true, false) => (Status::Pass, format!("{topic}: cleanup.policy={policy}")),
                (true, true) => (
                    Status::Warn,
                    format!(
                        "{topic}: cleanup.policy={policy}: a group idle for longer than the \
                         topic's retention.ms loses its newest record"
                    ),
                ),
                _ => (
                    Status::Fail,
                    format!("{topic}: cleanup.policy={policy}: the group's newest record is deleted with retention"),
                ),
            }
        }
        Policy::Unreported => (
            Status::Warn,
            format!(
                "{topic}: the brokers do not report its cleanup.policy; make sure it is compact"
            ),
        ),
        Policy::NotCreated => (
            Status::Pass,
            format!(
                "{topic}: not created yet; the brokers let this account create it, and the \
                 first instance does (one partition, compacted)"
            ),
        ),
        Policy::CreatedByAsking => (
            Status::Pass,
            format!(
                "{topic}: created now, one partition, compacted (these brokers create a topic \
                 when asked whether they would)"
            ),
        ),
        Policy::CannotCreate(why) => (
            Status::Fail,
            format!(
                "{topic}: does not exist, and the brokers would not let this account create it \
                 ({why}): no instance of the group can start until it exists"
            ),
        ),
        Policy::Unreadable(e) => (
            Status::Warn,
            format!("{topic}: its cleanup.policy cannot be read ({e}); make sure it is compact"),
        ),
    }
}

/// The brokers answer, and accept the TLS handshake and authentication.
fn brokers(config: &ForwarderConfig, report: &mut Report) -> Option<Metadata> {
    let brokers = &config.kafka.brokers;
    let kafka = config.kafka_config();
    let auth = kafka.auth.for_client();
    let client: BaseConsumer<ConnectionContext> = match kafka
        .connection_config()
        .create_with_context(ConnectionContext::new(auth.clone()))
    {
        Ok(c) => c,
        Err(e) => {
            report.add(
                Status::Fail,
                "kafka client",
                outbox_kafka::shown(&e),
                "valid kafka settings",
                "correct [kafka]",
            );
            return None;
        }
    };
    tokio::task::block_in_place(|| {
        auth.sign_in(|| {
            client.poll(Duration::from_millis(50));
        })
    });
    let metadata =
        match tokio::task::block_in_place(|| client.fetch_metadata(None, Duration::from_secs(5))) {
            Ok(m) => m,
            // A refused handshake is a setting to correct, not an outage
            // to wait out: `run` refuses to start on it.
            Err(e) => match refusal_of(&client) {
                Some(refusal) => {
                    report.add(
                        Status::Fail,
                        "kafka brokers",
                        format!("{brokers}: {}", refusal.reason),
                        "a TLS handshake and authentication the brokers accept",
                        refusal.fix,
                    );
                    return None;
                }
                None => {
                    report.unreachable(
                        "kafka brokers",
                        format!("{brokers}: {e}"),
                        "start the brokers or correct kafka.brokers",
                    );
                    return None;
                }
            },
        };
    report.add(
        Status::Pass,
        "kafka brokers",
        format!("{brokers}: {} broker(s)", metadata.brokers().len()),
        "reachable",
        "",
    );
    Some(metadata)
}

/// The topic exists, unless it is a template whose topics are known per row.
fn topic(config: &ForwarderConfig, metadata: &Metadata, report: &mut Report) {
    let template = &config.kafka.topic;
    if template.contains('{') {
        report.add(
            Status::Warn,
            "kafka topics",
            format!("{template} is a template; its topics are known only per row"),
            "topics exist or auto-creation is on",
            "create the topics each aggregate type needs",
        );
    } else {
        let exists = outbox_sink::holds_topic(metadata, template);
        report.add(
            if exists { Status::Pass } else { Status::Warn },
            "kafka topic",
            if exists {
                format!("{template} exists")
            } else {
                format!("{template} not found")
            },
            "exists (or auto-creation on)",
            "create the topic, or enable auto.create.topics.enable on the brokers",
        );
    }
}

/// The brokers accept an idempotent producer with the configured settings.
async fn idempotent_producer(config: &ForwarderConfig, report: &mut Report) {
    let kafka = config.kafka_config();
    let producer = kafka.client_config().map(|c| {
        outbox_kafka::producer::<_, BaseProducer<_>>(&c, &kafka.auth, "a producer", |auth| auth)
    });
    match producer {
        Ok(Ok(producer)) => {
            tokio::task::block_in_place(|| outbox_kafka::producer::signed_in(&producer));
            // librdkafka asks for a producer id as soon as it connects; a
            // broker that refuses idempotence raises a fatal error.
            let _ = tokio::task::block_in_place(|| {
                producer
                    .client()
                    .fetch_metadata(None, Duration::from_secs(5))
            });
            tokio::time::sleep(Duration::from_secs(1)).await;
            match producer.client().fatal_error() {
                None => report.add(
                    Status::Pass,
                    "idempotent producer",
                    "accepted",
                    "accepted",
                    "",
                ),
                Some((_, reason)) => report.add(
                    Status::Fail,
                    "idempotent producer",
                    reason,
                    "accepted",
                    "use brokers that support idempotent producers (Kafka 0.11+)",
                ),
            }
        }
        Ok(Err(e)) => report.add(
            Status::Fail,
            "idempotent producer",
            e,
            "created",
            "correct [kafka.properties]",
        ),
        Err(e) => report.add(
            Status::Fail,
            "idempotent producer",
            e.to_string(),
            "enable.idempotence=true, acks=all",
            "remove the property",
        ),
    }
}
