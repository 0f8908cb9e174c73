//! Readers: consumers that read the partitions they are assigned, from the
//! offsets they are given, outside any consumer group's assignment and
//! without committing. The read-back after a restart, the standby's reader
//! of the group's topic, the table tools and the auditor read so.

use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

use crate::oauth::ClientAuth;

/// A reader over `connection` (the brokers and how to reach and sign in to
/// them), with `settings` on top, signed in with its own copy of `auth`:
/// with a token source it has its first token on return (5 s at most), so
/// that the metadata and watermark requests made before its first poll
/// can connect.
pub fn reader(
    mut connection: ClientConfig,
    auth: &ClientAuth,
    settings: &[(&str, &str)],
) -> Result<BaseConsumer<ClientAuth>, KafkaError> {
    let auth = auth.for_client();
    connection
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    for (key, value) in settings {
        connection.set(*key, *value);
    }
    let consumer: BaseConsumer<ClientAuth> = connection.create_with_context(auth.clone())?;
    auth.sign_in(|| {
        consumer.poll(Duration::from_millis(50));
    });
    Ok(consumer)
}
