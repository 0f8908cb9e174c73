//! The table tools: one-shot commands that read the outbox tables beside
//! the topics, rather than the binlog.
//!
//! Their base is [`verify`]'s: which tables and rows are selected
//! ([`verify::Selection`]), the connection to the server a fresh start
//! would pick, and the comparison of rows with messages by event id, over
//! the [`window`] of the topics the rows need (never a topic's whole
//! history), read along a table's [`key`] at a [`pace`]. On it:
//!
//! - [`backfill`]: publishes rows from their table;
//! - [`repair`]: `repair-gap`, backfills what a purged binlog gap lost and
//!   moves the checkpoint past it;
//! - [`prune`]: deletes rows known to be in Kafka, once (`prune`) or
//!   continuously inside `run` (`[retention]`, [`prune::retention`]).

pub mod audit;
pub mod backfill;
pub mod key;
pub mod pace;
pub mod prune;
pub mod repair;
pub mod verify;
pub mod window;
