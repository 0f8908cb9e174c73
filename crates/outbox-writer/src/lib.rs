//! The producing side of the outbox: a service appends its events inside
//! the transaction that makes the business change, and the forwarder
//! carries them to Kafka once that transaction commits.
//!
//! ```no_run
//! # async fn place(conn: &mut mysql_async::Conn) -> Result<(), Box<dyn std::error::Error>> {
//! use mysql_async::prelude::Queryable;
//! use outbox_writer::{NewEvent, OutboxTable};
//!
//! // Once, at start-up: the table and columns the forwarder reads.
//! let outbox = OutboxTable::from_forwarder_config_file("config/forwarder.toml")?
//!     .open(conn)
//!     .await?;
//!
//! // For each request: one transaction, the change and its event.
//! let mut tx = conn.start_transaction(Default::default()).await?;
//! tx.exec_drop("INSERT INTO orders (customer, amount_cents, status) VALUES (?, ?, 'ACCEPTED')", ("ada", 1200))
//!     .await?;
//! let order_id = tx.last_insert_id().unwrap_or_default();
//! let event = NewEvent::new("order", order_id.to_string(), "ORDER_ACCEPTED", &serde_json::json!({
//!     "order_id": order_id,
//! }))?
//! .version(1);
//! outbox.append(&mut tx, &event).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! What it takes care of:
//! - **The caller's transaction, never its own.** [`Outbox::append`] and
//!   [`Outbox::append_all`] take a `Transaction`; an error leaves it open
//!   for the caller to roll back (or, when `append` refused its one event,
//!   to go on without it; a failed `append_all` of more than one statement
//!   may have left its earlier events in the transaction). A rollback
//!   leaves no event; a commit is what the forwarder publishes.
//! - **Time-ordered ids.** `event_id` is a UUIDv7 unless the caller gives
//!   one: the primary key's index then grows at its end, where a random
//!   (v4) id splits pages all over it once the table outgrows the buffer
//!   pool (docs/performance.md measures both).
//! - **The version and the payload** from the caller: any
//!   `serde::Serialize` as JSON, or bytes as stored.
//! - **The trace context**: `traceparent` and `tracestate` from the
//!   current OpenTelemetry span (feature `opentelemetry`) or given, stored
//!   when the table has the columns; the forwarder copies them into the
//!   message's headers and the inbox handles the event in a span carrying
//!   the same trace id.
//! - **One configuration for both sides**: the table and column names come
//!   from the forwarder's `[outbox]` section ([`OutboxTable`]).
//! - **The forwarder's row rules, before sending**: a row the forwarder
//!   would refuse as bad (a payload that is not JSON under `payload_format
//!   = "json"`, a `timestamp_column` in seconds or before 1970, a
//!   `partition_column` number the topic lacks, a `topic_column` that is
//!   no topic name, text an integer column would convert) is refused here,
//!   by the same rules (`outbox_core::rules`), rather than stopping the
//!   stream later.
//! - **Waiting for publication** when a service must know its event is in
//!   Kafka before it answers: [`committed_gtid`] after the commit, then
//!   [`wait_published`] on the forwarder's `/acked`.
//! - **Errors that say what was wrong** ([`WriteError`]): a payload too
//!   large for its column, a duplicate event id, a missing column, an id
//!   the forwarder would refuse.

mod barrier;
mod column;
mod error;
mod event;
mod insert;
mod open;
mod rules;
mod table;
mod trace;

pub use barrier::{committed_gtid, wait_published};
pub use error::{ConfigError, WriteError};
pub use event::NewEvent;
pub use insert::Outbox;
pub use outbox_core::table::{ColumnMapping, EventIdFormat, PayloadFormat};
pub use outbox_core::trace::TraceContext;
pub use table::OutboxTable;
pub use trace::current_trace_context;
