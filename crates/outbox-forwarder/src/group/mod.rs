//! Active/standby operation: several instances with the same `[ha] group`,
//! one active.
//!
//! **Leadership** is a MySQL named lock, `GET_LOCK('outbox-forwarder/<group>')`
//! on the writable candidate that serves the group's checkpoint (every
//! instance picks the same one, see [`crate::resume`]), held by a dedicated
//! connection whose session has
//! `wait_timeout` = the lease. The server releases the lock when that
//! session ends: at once when the holder dies (its socket closes), and after
//! a lease of silence when it is frozen or cut off (the holder pings the
//! lock several times per lease while it is well). A standby asks for the
//! lock every half second. The lock lives where the writes are: each ping
//! also asks whether the server still takes writes, and a holder whose
//! server became read-only (a switchover that leaves the old primary
//! running) steps down and takes the lock again on the new primary; a
//! standby never takes it on a read-only server.
//!
//! **The fence** is the lease, kept on the publishing side: the active
//! instance hands a message to the producer (asked right before each one,
//! after any wait for metadata or a full queue) only while its last
//! confirmation of the lock is less than half a lease old (a monotonic
//! clock, which runs on while a process is stopped), and its producer gives
//! up on a message after a quarter of a lease (`message.timeout.ms`). So a
//! frozen or partitioned instance stops sending by half a lease after its
//! last good ping, and whatever it had queued expires by three quarters of
//! a lease (librdkafka scans for expired messages before it produces, after
//! a pause of a second or more), while the server frees the lock a whole
//! lease after that ping: a new active instance starts after the old one
//! can no longer publish. What remains is a request already written by
//! librdkafka into its socket buffer before the freeze. A network split
//! between the active instance and MySQL works the same way: its pings fail
//! within a quarter of a lease and it steps down.
//!
//! **Warm standby**: the active instance shares every checkpoint it stores
//! on `[ha] checkpoint_topic` (key = the group, see [`share`] and [`topic`]);
//! a standby follows that topic's tail into its own store, so a takeover
//! starts from a checkpoint at most one flush interval old, and the topic
//! tails it records make the replay publish nothing twice.
//!
//! **The role loop** ([`crate::role`]) is the protocol `protocol.pml` models: it
//! works through two seams, the group's log ([`GroupLog`]: the topic) and
//! the lock's session ([`lease::LockSession`]: the server's connection),
//! each with an in-memory stand-in its unit tests replay the model's
//! counterexamples through. `crate::checkpoints` is the one writer that
//! shares; the pipeline serves between the role loop's "publish".

use std::time::Duration;

mod kafka_log;
mod lease;
mod log;
#[cfg(test)]
pub(crate) mod memory;
mod share;
mod topic;

pub use kafka_log::KafkaLog;
pub use lease::{hold_lock, Leadership};
#[cfg(test)]
pub(crate) use lease::{GroupLock, Pinged, Turn};
pub use log::{read_newest, GroupCheckpoint, GroupLog, Kind, LogError, Record};
#[cfg(test)]
pub(crate) use share::expiry as share_expiry;
pub use topic::{create_command, topic_spec};

/// The header of a record an instance shares last, on a clean stop after
/// it published.
pub const HANDED_OVER: &str = "handed_over_by";
/// The header of a term's mark: the record every holder writes, and has
/// acknowledged, before it publishes (see `CheckpointWriter::record_term`).
/// It carries the checkpoint the term resumes from, but it is no checkpoint
/// of the group: the previous holder may still share a newer one until its
/// fence closes, and a mark landing after that must not move the group's
/// checkpoint back. So it has a key of its own ([`mark_key`]): readers of
/// the group's checkpoint never see it, and compaction, which keeps the
/// newest record of each key, never drops the group's last checkpoint for
/// a mark.
pub const TERM: &str = "term_by";

/// The key of `group`'s marks on its topic (see [`TERM`]).
pub fn mark_key(group: &str) -> String {
    format!("{group}/term")
}
/// The header of the first record of a group.
pub const GROUP_STARTED: &str = "group_started_by";
/// The header naming the instance (or `operator`) that shared a record.
pub const SHARED_BY: &str = "shared_by";

/// How long a record that gates publishing may take to be acknowledged.
pub(crate) const ACK_WAIT: Duration = Duration::from_secs(10);
