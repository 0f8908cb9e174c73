//! The binlog source: connects to a MySQL 8 / MariaDB primary like a replica,
//! checks that its binlog can be read by column name, and turns the stream
//! into committed transactions holding the rows inserted into the outbox
//! tables.
//!
//! Contract with the rest of the pipeline:
//! - a [`SourceTransaction`](outbox_core::SourceTransaction) is only handed
//!   out after its commit event was read, and its `end` is a transaction
//!   boundary, so resuming from it never starts mid-transaction;
//! - a stream always starts at a position the pipeline got from a previous
//!   `end` (or from the server's own status), never from a guess;
//! - anything that cannot be read is a definite error, never a skip.

pub mod decode;
pub mod file;
pub mod server;
pub mod stream;

pub use decode::{DecodeConfig, TableColumn, TableDecoder, TransactionAssembler};
pub use file::read_binlog_file;
// The outbox table's configuration types live in core, where the writer
// library shares them.
pub use outbox_core::table::{
    ColumnMapping, EventIdFormat, OutboxTables, PayloadFormat, TableNameCase, TablePattern,
};
pub use stream::{BinlogSource, StreamConfig};
