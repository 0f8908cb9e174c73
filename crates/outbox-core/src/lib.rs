//! Domain types shared by every layer of the forwarder, free of I/O.
//!
//! - [`BinlogPosition`]: where a transaction ends in the primary's binlog, the
//!   unit of progress. A stored position always sits on a transaction boundary.
//! - [`OutboxEvent`]: one inserted outbox row, decoded by column name.
//! - [`SourceTransaction`]: the committed unit the source hands downstream.
//! - [`Acks`]: what a publisher reports back of the messages handed to it.
//! - [`DefiniteError`]: problems that retrying cannot fix; each says what
//!   happened, where, and what the operator can do.
//! - [`headers`]: the name of every header the forwarder writes, and the
//!   reserved set built from them.
//! - [`rules`]: what a row must hold to be published, applied alike by the
//!   decoder to each row it reads and by the writer before it sends one.
//! - [`settings`]: a configuration file with any setting overridden from
//!   the environment.
//! - [`sql`]: schema, table and column names as quoted identifiers, the
//!   one way a name goes into SQL text.
//! - [`table`]: which tables are outboxes and which of their columns mean
//!   what, as `[outbox]` configures them for the forwarder and the writer.
//! - [`trace`]: the W3C trace context an event carries from its writer to
//!   its consumer.

mod acks;
mod clock;
mod error;
mod event;
mod gtid;
pub mod headers;
pub mod hex;
mod position;
pub mod rules;
pub mod settings;
pub mod sql;
pub mod table;
pub mod trace;

pub use acks::{Acks, Delivered, Placement};
pub use clock::epoch_ms;
pub use error::{DefiniteError, ForwarderError};
pub use event::{
    BadRowPolicy, ChangePolicy, DeadLetter, GtidSlot, MessageShape, OutboxEvent, PartitionBy,
    RowCoordinate, RowOrigin, SourceTransaction,
};
pub use gtid::{
    Gtid, GtidState, GtidTag, MariaDbGtidPos, MariaDbGtidState, MySqlGtidSet, ParseGtidError,
};
pub use position::{BinlogPosition, ParsePositionError, SourceIdentity};
