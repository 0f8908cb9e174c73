//! The outbox forwarder: reads row inserts into MySQL outbox tables from the
//! binlog, publishes each as a Kafka message keyed by its `event_id`, and
//! checkpoints the binlog position only after the broker acked everything
//! before it.
//!
//! Layers: `outbox-source` (binlog) → `outbox-sink` (Kafka) →
//! `pipeline::progress` (ack watermark) → `outbox-checkpoint` (sled),
//! driven by `pipeline`.
//!
//! The parts, from the top down:
//! - [`cli`]: the command line; each command's outcome and exit code;
//! - `pipeline`: the streaming engine (`run`): sessions on the binlog, the
//!   publisher, the ack watermark, the read-back of the tails, serving as
//!   an instance of a group;
//! - `tables`: the table tools (`verify`, `backfill`, `repair-gap`,
//!   `prune` and `[retention]`), on `verify`'s base;
//! - `check`: the preflight `check` and `run` share;
//! - `role`: the role loop of an `[ha]` group's instance, the protocol its
//!   model proves;
//! - `group`: the `[ha]` group's lease and lock, and its log;
//! - `checkpoints` (the one writer), `resume` (which server, from where),
//!   `replicas` (the replicas' acknowledgement);
//! - plumbing: [`config`], [`metrics`], [`http`], [`shutdown`],
//!   [`memory`].
//!
//! Only what other crates and the binary use is public.

pub(crate) mod check;
pub(crate) mod checkpoints;
pub mod cli;
pub mod config;
pub(crate) mod group;
pub mod http;
pub mod memory;
pub mod metrics;
pub(crate) mod pipeline;
pub(crate) mod replicas;
pub(crate) mod resume;
pub(crate) mod role;
pub mod shutdown;
pub(crate) mod tables;

pub use config::{ForwarderConfig, RetentionSection};
pub use pipeline::{run, RunOptions};
