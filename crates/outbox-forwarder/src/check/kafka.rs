//! The brokers: reachable, the topic there (or auto-created), and an
//! idempotent producer accepted.

use std::time::Duration;

use outbox_sink::{ConnectionContext, Refusal};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, Producer};

use super::{Report, Status};
use crate::ForwarderConfig;

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
    let Some(metadata) = brokers(config, report) else {
        return;
    };
    topic(config, &metadata, report);
    idempotent_producer(config, report).await;
}

/// The brokers answer, and accept the TLS handshake and authentication.
fn brokers(config: &ForwarderConfig, report: &mut Report) -> Option<Metadata> {
    let brokers = &config.kafka.brokers;
    let client: BaseConsumer<ConnectionContext> = match config
        .kafka_config()
        .connection_config()
        .create_with_context(ConnectionContext::default())
    {
        Ok(c) => c,
        Err(e) => {
            report.add(
                Status::Fail,
                "kafka client",
                e.to_string(),
                "valid kafka settings",
                "correct [kafka]",
            );
            return None;
        }
    };
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
        let exists = metadata
            .topics()
            .iter()
            .any(|t| t.name() == template && t.error().is_none());
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
    let producer = config
        .kafka_config()
        .client_config()
        .map(|c| c.create::<BaseProducer>());
    match producer {
        Ok(Ok(producer)) => {
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
            e.to_string(),
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
