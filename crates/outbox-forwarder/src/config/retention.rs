//! `[retention]`: deleting outbox rows whose events are in Kafka, from
//! inside `run` (see the `prune` module).

use serde::Deserialize;

/// `[retention]`: every `interval_seconds`, rows created more than
/// `older_than_seconds` ago whose events are under the stored checkpoint
/// and found in Kafka are deleted, `batch` rows per statement, `pause_ms`
/// apart.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct RetentionSection {
    pub older_than_seconds: u64,
    #[serde(default = "default_interval_seconds")]
    pub interval_seconds: u64,
    #[serde(default = "default_batch")]
    pub batch: usize,
    #[serde(default = "default_pause_ms")]
    pub pause_ms: u64,
    /// The column `older_than_seconds` applies to.
    #[serde(default = "default_time_column")]
    pub time_column: String,
    /// Rows created in this much time after the line of streaming began are
    /// left to `prune`: room for a `time_column` set by an application
    /// whose clock runs ahead of the server's.
    #[serde(default = "default_clock_margin_seconds")]
    pub clock_margin_seconds: u64,
}

const fn default_clock_margin_seconds() -> u64 {
    60
}

/// Once an hour.
const fn default_interval_seconds() -> u64 {
    3_600
}

/// Small enough that one statement holds its locks briefly and its binlog
/// event stays small.
const fn default_batch() -> usize {
    1_000
}

const fn default_pause_ms() -> u64 {
    100
}

fn default_time_column() -> String {
    "created_at".into()
}
