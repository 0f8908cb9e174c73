//! The Kafka side: which topic an outbox event goes to, what the message
//! looks like, and the producer that sends it.
//!
//! The producer is idempotent with `acks=all`, and nothing can turn that off:
//! a broker ack then means the message is in every in-sync replica exactly
//! once per producer session. Across a restart, the forwarder reads back
//! what the topics hold after its checkpoint ([`tail`]) and does not publish
//! it again; where it cannot tell, it publishes again, and consumers drop
//! the repeats by `event_id`.

mod config;
mod connection;
mod encoder;
pub mod headers;
mod kick;
pub mod oauth;
mod producer;
pub mod tail;

pub use config::KafkaConfig;
pub use connection::{refusal_fix, shown, ConnectionContext, Refusal};
pub use encoder::{dead_letter_for_event, header_pairs, Backfilled, MessageHeaders, TopicTemplate};
pub use headers::{
    HEADER_BACKFILL, HEADER_BACKFILL_BEFORE, HEADER_BACKFILL_BEFORE_GTID, HEADER_BINLOG_GTID,
    HEADER_BINLOG_GTID_INDEX, HEADER_BINLOG_POSITION, HEADER_BINLOG_ROW, HEADER_BINLOG_SERVER,
    HEADER_ERROR, HEADER_PUBLISHED_BY, HEADER_SOURCE_TABLE,
};
pub use oauth::{ClientAuth, TokenCommand};
pub use producer::{
    log_librdkafka, partition_for, Acks, BrokerHealth, Delivered, Fence, KafkaSink, Placement,
    FENCED,
};
