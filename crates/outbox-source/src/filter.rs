//! Which tables are outboxes, and which of their columns mean what.

use std::fmt;
use std::str::FromStr;

/// One `schema.table` pattern; `*` as schema matches every schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePattern {
    pub schema: Option<String>,
    pub table: String,
}

impl FromStr for TablePattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (schema, table) = s.split_once('.').ok_or_else(|| {
            format!("outbox table {s:?} must be written schema.table (or *.table)")
        })?;
        if schema.is_empty() || table.is_empty() || table.contains('.') {
            return Err(format!(
                "outbox table {s:?} must be written schema.table (or *.table)"
            ));
        }
        Ok(Self {
            schema: (schema != "*").then(|| schema.to_owned()),
            table: table.to_owned(),
        })
    }
}

impl fmt::Display for TablePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}",
            self.schema.as_deref().unwrap_or("*"),
            self.table
        )
    }
}

/// The configured outbox tables. Rows of any other table are skipped on purpose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTables(pub Vec<TablePattern>);

impl OutboxTables {
    pub fn matches(&self, schema: &str, table: &str) -> bool {
        self.0
            .iter()
            .any(|p| p.table == table && p.schema.as_deref().is_none_or(|s| s == schema))
    }
}

/// Names of the outbox columns; matched case-insensitively, like MySQL does.
/// Read from `[outbox.columns]`; unset names keep their defaults.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ColumnMapping {
    pub event_id: String,
    pub payload: String,
    pub event_type: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_version: String,
    /// Kafka key column when it is not `event_id`.
    pub key: Option<String>,
}

impl Default for ColumnMapping {
    fn default() -> Self {
        Self {
            event_id: "event_id".into(),
            payload: "payload".into(),
            event_type: "event_type".into(),
            aggregate_type: "aggregate_type".into(),
            aggregate_id: "aggregate_id".into(),
            event_version: "event_version".into(),
            key: None,
        }
    }
}

/// What an event id must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventIdFormat {
    /// A UUID in text form, as `CHAR(36)` in the migration stores it.
    Uuid,
    /// Any non-empty UTF-8 text.
    Any,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_schema_matches_every_schema_but_only_the_named_table() {
        let tables = OutboxTables(vec!["*.outbox_event".parse().unwrap()]);
        assert!(tables.matches("shop", "outbox_event"));
        assert!(tables.matches("billing", "outbox_event"));
        assert!(!tables.matches("shop", "orders"));
    }

    #[test]
    fn named_schema_does_not_match_a_same_named_table_elsewhere() {
        let tables = OutboxTables(vec!["shop.outbox_event".parse().unwrap()]);
        assert!(tables.matches("shop", "outbox_event"));
        assert!(!tables.matches("shop_archive", "outbox_event"));
    }

    #[test]
    fn malformed_patterns_are_rejected() {
        for bad in ["outbox_event", ".t", "s.", "a.b.c"] {
            assert!(bad.parse::<TablePattern>().is_err(), "{bad}");
        }
    }
}
