//! `[audit]`: the continuous proof that every committed outbox row is in
//! Kafka, from inside `run` (see [`crate::tables::audit`]). On unless
//! `enabled = false`.

use serde::Deserialize;

/// `[audit]`: every `interval_seconds`, the rows committed more than
/// `settle_seconds` ago and not yet proven are looked for in the topics by
/// their table and event id; `time_column` dates them.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    #[serde(default = "on")]
    pub enabled: bool,
    #[serde(default = "a_minute")]
    pub interval_seconds: u64,
    /// How long a row has to reach Kafka before its absence counts.
    #[serde(default = "a_minute")]
    pub settle_seconds: u64,
    #[serde(default = "default_time_column")]
    pub time_column: String,
    /// Kafka messages read per second, at most.
    pub max_messages_per_second: Option<u32>,
}

impl Default for AuditSection {
    fn default() -> Self {
        Self {
            enabled: on(),
            interval_seconds: a_minute(),
            settle_seconds: a_minute(),
            time_column: default_time_column(),
            max_messages_per_second: None,
        }
    }
}

const fn on() -> bool {
    true
}

const fn a_minute() -> u64 {
    60
}

fn default_time_column() -> String {
    "created_at".into()
}
