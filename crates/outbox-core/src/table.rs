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
        crate::sql::configured_name("outbox.tables", s)?;
        Ok(Self {
            schema: (schema != "*").then(|| schema.to_owned()),
            table: table.to_owned(),
        })
    }
}

impl TablePattern {
    /// Whether `schema.table` is this pattern's table, its names compared
    /// as `case` says.
    pub fn matches(&self, schema: &str, table: &str, case: TableNameCase) -> bool {
        case.same(&self.table, table) && self.schema.as_deref().is_none_or(|s| case.same(s, schema))
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

/// How the server compares schema and table names, from its
/// `lower_case_table_names`: the binlog carries names as the server stores
/// them, so they must be matched the way the server matches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableNameCase {
    /// `lower_case_table_names=0`: names are case-sensitive.
    #[default]
    Sensitive,
    /// `lower_case_table_names=1` (names stored in lowercase, as the
    /// binlog carries them) or `2` (stored as written, compared in
    /// lowercase).
    Insensitive,
}

impl TableNameCase {
    /// The rule of a server whose `lower_case_table_names` is `value`.
    pub fn of_server(value: u8) -> Self {
        if value == 0 {
            TableNameCase::Sensitive
        } else {
            TableNameCase::Insensitive
        }
    }

    /// Whether the server takes `a` and `b` for the same name.
    pub fn same(self, a: &str, b: &str) -> bool {
        match self {
            TableNameCase::Sensitive => a == b,
            TableNameCase::Insensitive => a
                .chars()
                .flat_map(char::to_lowercase)
                .eq(b.chars().flat_map(char::to_lowercase)),
        }
    }
}

/// The configured outbox tables. Rows of any other table are skipped on purpose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTables {
    patterns: Vec<TablePattern>,
    case: TableNameCase,
}

impl OutboxTables {
    /// The tables `patterns` name, compared case-sensitively until
    /// [`OutboxTables::compared_as`] says otherwise.
    pub fn new(patterns: Vec<TablePattern>) -> Self {
        Self {
            patterns,
            case: TableNameCase::Sensitive,
        }
    }

    /// The same tables, with names compared as `case` says (the server's rule).
    pub fn compared_as(self, case: TableNameCase) -> Self {
        Self { case, ..self }
    }

    pub fn patterns(&self) -> &[TablePattern] {
        &self.patterns
    }

    pub fn matches(&self, schema: &str, table: &str) -> bool {
        self.patterns
            .iter()
            .any(|p| p.matches(schema, table, self.case))
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
    /// What the payload column holds.
    pub payload_format: PayloadFormat,
    /// Column whose value places the message among the topic's partitions.
    pub partition_column: Option<String>,
    /// Column holding the record's timestamp (`DATETIME`, `TIMESTAMP`, or
    /// an integer of milliseconds since the epoch).
    pub timestamp_column: Option<String>,
    /// Column naming the row's topic; when NULL the topic template applies.
    pub topic_column: Option<String>,
    /// W3C trace-context columns, copied into the `traceparent` and
    /// `tracestate` headers byte for byte when the table has them.
    pub traceparent: String,
    pub tracestate: String,
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
            payload_format: PayloadFormat::Json,
            partition_column: None,
            timestamp_column: None,
            topic_column: None,
            traceparent: "traceparent".into(),
            tracestate: "tracestate".into(),
        }
    }
}

impl ColumnMapping {
    /// Every column this mapping requires of a table (the event id, the
    /// payload, and each one named on purpose), with the setting that names it.
    pub fn required(&self) -> Vec<(&'static str, &str)> {
        let named = [
            ("key", &self.key),
            ("partition_column", &self.partition_column),
            ("timestamp_column", &self.timestamp_column),
            ("topic_column", &self.topic_column),
        ];
        let mut required = vec![
            ("event_id", self.event_id.as_str()),
            ("payload", self.payload.as_str()),
        ];
        required.extend(
            named
                .into_iter()
                .filter_map(|(setting, column)| Some((setting, column.as_deref()?))),
        );
        required
    }

    /// Refuses a mapping that names a column with a backtick or a NUL
    /// ([`crate::sql::configured_name`]).
    pub fn check_names(&self) -> Result<(), String> {
        for (setting, column) in self.required().into_iter().chain(self.optional()) {
            crate::sql::configured_name(&format!("outbox.columns.{setting}"), column)?;
        }
        Ok(())
    }

    /// The columns used when the table has them, with the setting that names them.
    pub fn optional(&self) -> [(&'static str, &str); 6] {
        [
            ("event_type", self.event_type.as_str()),
            ("aggregate_type", self.aggregate_type.as_str()),
            ("aggregate_id", self.aggregate_id.as_str()),
            ("event_version", self.event_version.as_str()),
            ("traceparent", self.traceparent.as_str()),
            ("tracestate", self.tracestate.as_str()),
        ]
    }
}

/// What a payload column holds (`payload_format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadFormat {
    /// JSON text (or MySQL's JSON type); a row whose payload does not parse
    /// is a bad row.
    #[default]
    Json,
    /// UTF-8 text.
    Text,
    /// Any bytes (`VARBINARY`, `BLOB`: Avro, Protobuf), published as stored.
    Bytes,
}

/// The tables an `[outbox]` section without `tables` names: `outbox_event`
/// in any schema, as the migration creates it.
pub fn default_tables() -> Vec<String> {
    vec!["*.outbox_event".into()]
}

/// What an event id must look like (`uuid` or `any` in a configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventIdFormat {
    /// A UUID in text form, as `CHAR(36)` in the migration stores it (the
    /// default).
    #[default]
    Uuid,
    /// Any non-empty UTF-8 text.
    Any,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_schema_matches_every_schema_but_only_the_named_table() {
        let tables = OutboxTables::new(vec!["*.outbox_event".parse().unwrap()]);
        assert!(tables.matches("shop", "outbox_event"));
        assert!(tables.matches("billing", "outbox_event"));
        assert!(!tables.matches("shop", "orders"));
    }

    #[test]
    fn named_schema_does_not_match_a_same_named_table_elsewhere() {
        let tables = OutboxTables::new(vec!["shop.outbox_event".parse().unwrap()]);
        assert!(tables.matches("shop", "outbox_event"));
        assert!(!tables.matches("shop_archive", "outbox_event"));
    }

    #[test]
    fn names_are_compared_as_the_server_compares_them() {
        let configured = || OutboxTables::new(vec!["Shop.OutboxEvent".parse().unwrap()]);
        // lower_case_table_names=1: the binlog carries the lowercased names.
        let folded = configured().compared_as(TableNameCase::of_server(1));
        assert!(folded.matches("shop", "outboxevent"));
        assert!(folded.matches("SHOP", "OutboxEvent"));
        assert!(!folded.matches("shop", "outbox_event"));
        assert_eq!(TableNameCase::of_server(2), TableNameCase::Insensitive);
        // lower_case_table_names=0: another case is another table.
        let exact = configured().compared_as(TableNameCase::of_server(0));
        assert!(exact.matches("Shop", "OutboxEvent"));
        assert!(!exact.matches("shop", "outboxevent"));
        assert!(TableNameCase::Insensitive.same("Übersicht", "übersicht"));
    }

    #[test]
    fn a_mapping_naming_a_column_with_a_backtick_is_refused_by_its_setting() {
        assert!(ColumnMapping::default().check_names().is_ok());
        let crafted = ColumnMapping {
            timestamp_column: Some("at` FROM mysql.user #".into()),
            ..ColumnMapping::default()
        };
        let refused = crafted.check_names().unwrap_err();
        assert!(
            refused.contains("outbox.columns.timestamp_column"),
            "{refused}"
        );
        let crafted = ColumnMapping {
            tracestate: "state\0".into(),
            ..ColumnMapping::default()
        };
        assert!(crafted.check_names().unwrap_err().contains("tracestate"));
    }

    #[test]
    fn malformed_patterns_are_rejected() {
        for bad in [
            "outbox_event",
            ".t",
            "s.",
            "a.b.c",
            "s.out`box",
            "s`.t",
            "s.t\0",
        ] {
            assert!(bad.parse::<TablePattern>().is_err(), "{bad}");
        }
    }
}
