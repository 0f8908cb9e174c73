//! `[checkpoint]`: the store, where a forwarder without one starts, how
//! often it is written and whether a restart reads the topic tails back.

use std::path::PathBuf;

use outbox_core::BinlogPosition;
use serde::Deserialize;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSection {
    /// Directory of the sled store.
    pub path: PathBuf,
    /// Where to start without a stored checkpoint: `latest`, `earliest` or `FILE:POS`.
    #[serde(default = "default_start")]
    pub start: StartPosition,
    /// How often the acked watermark is written.
    #[serde(default = "default_flush_interval_ms")]
    pub flush_interval_ms: u64,
    /// At each start, read back the topic tails recorded with the
    /// checkpoint and do not publish again the events found there.
    #[serde(default = "default_skip_published")]
    pub skip_published: bool,
}

const fn default_skip_published() -> bool {
    true
}

/// Only what is committed from now on: a forwarder added to a running
/// system does not republish history unless told to.
const fn default_start() -> StartPosition {
    StartPosition::Latest
}

/// One second: at most a second of events is published twice after a crash.
const fn default_flush_interval_ms() -> u64 {
    1_000
}

/// Where to start when no checkpoint is stored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum StartPosition {
    Latest,
    Earliest,
    At(BinlogPosition),
}

impl std::str::FromStr for StartPosition {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "latest" => Ok(StartPosition::Latest),
            "earliest" => Ok(StartPosition::Earliest),
            other => other
                .parse()
                .map(StartPosition::At)
                .map_err(|e| format!("{e}; or use \"latest\" / \"earliest\"")),
        }
    }
}

impl TryFrom<String> for StartPosition {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl std::fmt::Display for StartPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartPosition::Latest => f.write_str("latest"),
            StartPosition::Earliest => f.write_str("earliest"),
            StartPosition::At(position) => position.fmt(f),
        }
    }
}
