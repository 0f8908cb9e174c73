//! The outbox forwarder: reads row inserts into MySQL outbox tables from the
//! binlog, publishes each as a Kafka message keyed by its `event_id`, and
//! checkpoints the binlog position only after the broker acked everything
//! before it.
//!
//! Layers: `outbox-source` (binlog) → `outbox-sink` (Kafka) →
//! [`progress`] (ack watermark) → `outbox-checkpoint` (sled), driven by
//! [`pipeline`].

pub mod check;
pub mod checkpoints;
pub mod cli;
pub mod config;
pub mod group;
pub mod http;
pub mod memory;
pub mod meter;
pub mod metrics;
pub mod pipeline;
pub mod replicas;
pub mod resume;
pub mod shutdown;
pub mod tables;

pub use config::{ForwarderConfig, RetentionSection};
pub use pipeline::{run, RunOptions};
