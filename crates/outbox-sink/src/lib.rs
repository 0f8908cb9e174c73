//! The Kafka side: which topic an outbox event goes to, what the message
//! looks like, and the producer that sends it.
//!
//! The producer is idempotent with `acks=all`, and nothing can turn that off:
//! a broker ack then means the message is in every in-sync replica exactly
//! once per producer session. Across a restart, the forwarder reads back
//! what the topics hold after its checkpoint ([`tail`]) and does not publish
//! it again; where it cannot tell, it publishes again, and consumers drop
//! the repeats by `event_id`.

mod allowed;
mod config;
mod connection;
mod encoder;
mod kick;
pub mod oauth;
mod producer;
mod signing;
pub mod tail;
mod topics;

pub use allowed::{AllowedTopics, GROUP_TOPIC_PREFIX};
pub use config::KafkaConfig;
pub use connection::{refusal_fix, shown, ConnectionContext, Refusal};
pub use encoder::{dead_letter_for_event, header_pairs, Backfilled, MessageHeaders, TopicTemplate};
pub use oauth::{AwsMskIam, ClientAuth, TokenCommand};
pub use producer::{
    log_librdkafka, murmur2, partition_for, Acks, BrokerHealth, Delivered, Fence, KafkaSink,
    Partitioner, Placement, FENCED,
};
pub use signing::{Signing, MIN_KEY_BYTES};
pub use topics::{
    admin_client, create_topic, holding_messages, holds_topic, may_create_topic, topic_exists,
    CreateError, TopicSpec,
};
