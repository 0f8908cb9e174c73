//! Inbox-deduplicating consumers of the outbox events.
//!
//! The forwarder delivers every event at least once; after a crash some
//! come twice, and a rebalance or a consumer crash repeats more. A consumer
//! built on this crate turns that into *one local effect per event*:
//!
//! - [`Inbox`]: for each event, one MySQL transaction that inserts
//!   `(consumer_name, event_id)` into `consumed_event` and runs the
//!   [`Handler`]. The unique key `uq_consumed_event_identity` makes a repeat
//!   fail with 1062, which, and only which, means "already processed"
//!   ([`InboxOutcome::Duplicate`]). A handler error rolls back the inbox row
//!   with the side effects. A failed COMMIT is an unknown outcome and is not
//!   acknowledged. Events waiting on a partition are processed in batches,
//!   one transaction each, with the same guarantees.
//! - [`InboxConsumer`]: the Kafka consumer group member around it: manual
//!   offset commits, only behind settled messages and in order per
//!   partition; retries with backoff; after `retry.max_attempts` the message
//!   is parked in a dead-letter topic with the error, and the partition goes
//!   on.
//! - [`metrics`]: per consumer, the time from each event's commit on the
//!   writer's primary to its handler's commit, as a histogram with trace
//!   ids as exemplars, in the OpenMetrics format (`[metrics] listen`).
//! - [`VersionedAggregate`]: incremental events on a versioned row in one
//!   conditional UPDATE: applied, duplicate, gap (retry later) or stale
//!   (reject), never guessed from an earlier SELECT.
//!
//! The guarantee covers side effects written through the handler's
//! transaction. A call to another system from a handler is outside it and
//! needs that system's own idempotency key.
//!
//! `notification-planner` (in `src/bin`) is the example service:
//! [`planner::NotificationPlanner`] creates one `notification_job` per
//! `ORDER_ACCEPTED` event.

mod config;
mod consumer;
mod error;
mod event;
mod inbox;
mod ledger;
pub mod metrics;
pub mod planner;
mod versioned;

pub use config::{
    InboxConfig, InboxSection, KafkaSection, MetricsSection, MysqlSection, RetrySection,
};
pub use consumer::{
    InboxConsumer, Receipt, ReceiptStatus, HEADER_ATTEMPTS, HEADER_CONSUMER, HEADER_ERROR,
    HEADER_SOURCE,
};
pub use error::InboxError;
pub use event::{DecodeError, InboxEvent, MessageLocation};
pub use inbox::{
    handle_one_by_one, is_inbox_duplicate, is_outage, BatchFailure, BatchResult, Disposition,
    Handler, HandlerError, Inbox, InboxOutcome, ProcessError, INBOX_IDENTITY_KEY,
    OUTAGE_SERVER_ERRORS,
};
pub use versioned::{ApplyResult, BadIdentifier, VersionedAggregate};
