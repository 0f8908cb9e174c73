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
mod encoder;
mod kick;
mod partitioner;
mod producer;
pub mod tail;
mod topics;

pub use allowed::{AllowedTopics, GROUP_TOPIC_PREFIX};
pub use config::{KafkaConfig, TopicSpec};
pub use encoder::{
    dead_letter_for_event, header_pairs, Backfilled, CoordinateHeaders, MessageHeaders,
    TopicTemplate,
};
pub use partitioner::{murmur2, partition_for, Partitioner};
pub use producer::{BrokerHealth, Fence, KafkaSink, FENCED};
pub use topics::{
    admin_client, create_topic, holding_messages, holds_topic, may_create_topic, topic_exists,
    CreateError,
};
