//! The group's log: its topic, as the role loop and the checkpoint writer
//! use it. [`GroupLog`] is the seam; [`KafkaLog`] is the group's topic
//! (`[ha] checkpoint_topic`, one partition, compacted) and, in tests, an
//! in-memory log stands for it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_checkpoint::Checkpoint;
use outbox_core::DefiniteError;
use outbox_sink::KafkaConfig;

use super::share::CheckpointShare;
use super::topic::{self, GroupCheckpoint, GroupReader};
use super::{GROUP_STARTED, HANDED_OVER, SHARED_BY, TERM};
use crate::config::HaSection;
use crate::metrics::Metrics;

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

/// The group's topic (see [`GroupLog`]).
pub struct KafkaLog {
    share: CheckpointShare,
    kafka: KafkaConfig,
    config: HaSection,
    /// One consumer for the reads of the newest record, made again after
    /// a read failed.
    reader: Mutex<Option<GroupReader>>,
}

impl KafkaLog {
    /// The log of an instance of the group: what it queues expires within
    /// a quarter lease.
    pub fn new(
        kafka: &KafkaConfig,
        config: &HaSection,
        metrics: Arc<Metrics>,
    ) -> Result<Self, DefiniteError> {
        let share = CheckpointShare::new(kafka, config, metrics)?;
        Ok(Self::over(share, kafka, config))
    }

    /// The log of an operator's command (`checkpoint set`, `repair-gap`,
    /// `group start`), which holds no lease.
    pub fn for_operator(
        kafka: &KafkaConfig,
        config: &HaSection,
        metrics: Arc<Metrics>,
    ) -> Result<Self, DefiniteError> {
        let share = CheckpointShare::for_operator(kafka, config, metrics)?;
        Ok(Self::over(share, kafka, config))
    }

    fn over(share: CheckpointShare, kafka: &KafkaConfig, config: &HaSection) -> Self {
        Self {
            share,
            kafka: kafka.clone(),
            config: config.clone(),
            reader: Mutex::new(None),
        }
    }
}

impl GroupLog for KafkaLog {
    fn topic(&self) -> &str {
        &self.config.checkpoint_topic
    }

    fn newest(&self, deadline: Instant) -> Result<GroupCheckpoint, LogError> {
        let mut reader = self.reader.lock().expect("not poisoned");
        let read = match &*reader {
            Some(reader) => reader.newest(deadline),
            None => GroupReader::new(&self.kafka, &self.config)
                .and_then(|created| reader.insert(created).newest(deadline)),
        };
        if read.is_err() {
            *reader = None;
        }
        read
    }

    fn append(&self, record: Record<'_>) {
        self.share.send(record);
    }

    fn append_acked(&self, record: Record<'_>) -> Result<i64, String> {
        self.share.send_acked(record)
    }

    fn any_between(&self, from: i64, to: i64, deadline: Instant) -> Result<bool, String> {
        topic::group_record_between(&self.kafka, &self.config, from, to, deadline)
    }

    fn create(&self) -> Creating<'_> {
        Box::pin(topic::ensure_topic(&self.kafka, &self.config))
    }

    #[cfg(test)]
    fn settle(&self, timeout: Duration) {
        let _ = tokio::task::block_in_place(|| self.share.flush(timeout));
    }
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
