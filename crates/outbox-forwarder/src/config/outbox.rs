//! `[outbox]`: which tables, how their columns map, what a bad row means.

use std::collections::BTreeMap;

use outbox_core::{BadRowPolicy, ChangePolicy};
use outbox_source::{ColumnMapping, EventIdFormat};
use serde::Deserialize;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct OutboxSection {
    /// `schema.table` or `*.table` entries.
    #[serde(default = "outbox_core::table::default_tables")]
    pub tables: Vec<String>,
    /// `uuid` (any version, as the migration's `CHAR(36)` holds it) or `any`.
    #[serde(default)]
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
    /// Header name → column: each row's value of the column (as text, or
    /// bytes as stored) in that header; NULL leaves it out. Added in name order.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A NULL payload publishes a tombstone (a record without a value)
    /// rather than being a bad row.
    #[serde(default)]
    pub tombstone_on_null_payload: bool,
    /// What an UPDATE of an outbox row means: `ignore`, `warn` or `fail`.
    #[serde(default)]
    pub on_update: ChangePolicy,
    /// What a DELETE of an outbox row means: `ignore` (a cleanup in the
    /// inserting transaction, a retention job), `warn` or `fail`.
    #[serde(default)]
    pub on_delete: ChangePolicy,
}

impl OutboxSection {
    /// `[outbox.headers]` as the decoder takes it, refusing names the
    /// forwarder sets itself.
    pub fn header_columns(&self) -> Result<Vec<(String, String)>, String> {
        for (header, column) in &self.headers {
            let reserved = outbox_core::headers::is_reserved(header);
            if header.is_empty() || column.is_empty() {
                return Err(format!(
                    "outbox.headers: {header:?} = {column:?}: name a header and a column"
                ));
            }
            if reserved {
                return Err(format!(
                    "outbox.headers: {header:?} is a header the forwarder sets itself; choose another name"
                ));
            }
            outbox_core::sql::configured_name(&format!("outbox.headers.{header:?}"), column)?;
        }
        Ok(self
            .headers
            .iter()
            .map(|(h, c)| (h.clone(), c.clone()))
            .collect())
    }
}

impl Default for OutboxSection {
    fn default() -> Self {
        Self {
            tables: outbox_core::table::default_tables(),
            event_id_format: EventIdFormat::default(),
            max_transaction_bytes: default_max_transaction_bytes(),
            bad_row_policy: default_bad_row_policy(),
            columns: ColumnMapping::default(),
            headers: BTreeMap::new(),
            tombstone_on_null_payload: false,
            on_update: ChangePolicy::Ignore,
            on_delete: ChangePolicy::Ignore,
        }
    }
}

/// Stopping is the safe default: an operator decides what a bad row means.
const fn default_bad_row_policy() -> BadRowPolicy {
    BadRowPolicy::Fail
}

/// 64 MiB: Kafka's default maximum message is 1 MiB, so this holds dozens of
/// large events or tens of thousands of small ones.
const fn default_max_transaction_bytes() -> usize {
    64 << 20
}
