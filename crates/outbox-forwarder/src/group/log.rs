//! The group's log: its topic, as the role loop and the checkpoint writer
//! use it. [`GroupLog`] is the seam; [`super::KafkaLog`] is the group's
//! topic (`[ha] checkpoint_topic`, one partition, compacted) and, in tests,
//! an in-memory log stands for it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_checkpoint::Checkpoint;

use super::{GROUP_STARTED, HANDED_OVER, SHARED_BY, TERM};

/// What a record on the group's log is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A checkpoint of the active instance (or an operator's).
    Checkpoint,
    /// The last checkpoint of an instance that stopped cleanly
    /// ([`HANDED_OVER`]): the next holder need not hold off.
    HandOver,
    /// The group's first record ([`GROUP_STARTED`]).
    FirstStart,
    /// A term's mark ([`TERM`]), under a key of its own: no checkpoint of
    /// the group.
    Term,
}

/// One record for the group's log.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub checkpoint: &'a Checkpoint,
    pub kind: Kind,
    /// Who writes it: an instance, `operator`, or `group start`.
    pub by: &'a str,
}

impl Record<'_> {
    /// Its headers: who shared it, and what it is.
    pub fn headers(&self) -> Vec<(&'static str, &str)> {
        let mut headers = vec![(SHARED_BY, self.by)];
        match self.kind {
            Kind::Checkpoint => {}
            Kind::HandOver => headers.push((HANDED_OVER, self.by)),
            Kind::FirstStart => headers.push((GROUP_STARTED, self.by)),
            Kind::Term => headers.push((TERM, self.by)),
        }
        headers
    }
}

/// What the group's log says of the group.
#[derive(Debug)]
pub enum GroupCheckpoint {
    /// No record of the group: it never started.
    NeverStarted,
    /// The group's newest record.
    Found {
        checkpoint: Box<Checkpoint>,
        /// It was a clean hand-over, shared at this time (epoch ms).
        handed_over_at_ms: Option<u64>,
        /// Its offset in the topic (one partition): what orders the
        /// group's records, not the clocks of the hosts that wrote them.
        offset: i64,
    },
    /// The group's newest record cannot be read.
    Unreadable(String),
}

/// Why the group's log cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogError {
    /// The topic does not exist: [`GroupLog::create`] creates it.
    Missing(String),
    /// Any other failure, said.
    Failed(String),
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Missing(topic) => write!(f, "ha.checkpoint_topic {topic} does not exist"),
            LogError::Failed(why) => f.write_str(why),
        }
    }
}

/// A future the log's creation returns.
pub type Creating<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// The group's log. Its records are ordered by offset, whatever the clocks
/// of the hosts that wrote them say. Reads and acknowledged appends block
/// (the role loop runs them where blocking is allowed).
pub trait GroupLog: Send + Sync {
    /// The topic's name, for what is said about it.
    fn topic(&self) -> &str;
    /// The group's newest checkpoint (marks passed over), by `deadline`.
    fn newest(&self, deadline: Instant) -> Result<GroupCheckpoint, LogError>;
    /// Queues `record`: its delivery is counted, not waited for. A record
    /// not delivered within the log's expiry (a quarter lease for an
    /// instance's) is dropped, never delivered late.
    fn append(&self, record: Record<'_>);
    /// Appends `record` (after whatever was queued before it) and waits for
    /// the acknowledgement: its offset.
    fn append_acked(&self, record: Record<'_>) -> Result<i64, String>;
    /// Whether a record of the group, a mark included, lies among offsets
    /// `from..to`.
    fn any_between(&self, from: i64, to: i64, deadline: Instant) -> Result<bool, String>;
    /// Creates the log if it does not exist.
    fn create(&self) -> Creating<'_>;
    /// Waits (up to `timeout`) until what was queued is delivered or
    /// dropped.
    #[cfg(test)]
    fn settle(&self, timeout: Duration);
}

/// Reads `log`'s newest record on a blocking thread, within `within`.
pub async fn read_newest(
    log: &Arc<dyn GroupLog>,
    within: Duration,
) -> Result<GroupCheckpoint, LogError> {
    let log = log.clone();
    tokio::task::spawn_blocking(move || log.newest(Instant::now() + within))
        .await
        .expect("reading the group's log does not panic")
}
