//! `[outbox]`: which tables, how their columns map, what a bad row means.

use outbox_core::BadRowPolicy;
use outbox_source::{ColumnMapping, EventIdFormat};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxSection {
    /// `schema.table` or `*.table` entries.
    #[serde(default = "default_tables")]
    pub tables: Vec<String>,
    /// `uuid` (the migration's `CHAR(36)`) or `any`.
    #[serde(default = "default_event_id_format")]
    pub event_id_format: EventIdFormat,
    /// Bound on the outbox bytes buffered for one transaction until its commit.
    #[serde(default = "default_max_transaction_bytes")]
    pub max_transaction_bytes: usize,
    /// `fail`: stop before the checkpoint passes a row that cannot become a
    /// message; `dead_letter`: publish it raw to `kafka.dead_letter_topic`.
    #[serde(default = "default_bad_row_policy")]
    pub bad_row_policy: BadRowPolicy,
    #[serde(default)]
    pub columns: ColumnMapping,
}

impl Default for OutboxSection {
    fn default() -> Self {
        Self {
            tables: default_tables(),
            event_id_format: default_event_id_format(),
            max_transaction_bytes: default_max_transaction_bytes(),
            bad_row_policy: default_bad_row_policy(),
            columns: ColumnMapping::default(),
        }
    }
}

fn default_tables() -> Vec<String> {
    vec!["*.outbox_event".into()]
}

/// Stopping is the safe default: an operator decides what a bad row means.
const fn default_bad_row_policy() -> BadRowPolicy {
    BadRowPolicy::Fail
}

/// What the migration's `CHAR(36)` column holds.
const fn default_event_id_format() -> EventIdFormat {
    EventIdFormat::Uuid
}

/// 64 MiB: Kafka's default maximum message is 1 MiB, so this holds dozens of
/// large events or tens of thousands of small ones.
const fn default_max_transaction_bytes() -> usize {
    64 << 20
}
