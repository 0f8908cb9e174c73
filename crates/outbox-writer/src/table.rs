//! Which table to write and what its columns are called, from the
//! forwarder's `[outbox]` section.

use std::path::Path;

use outbox_core::table::{ColumnMapping, EventIdFormat, TablePattern};
use serde::Deserialize;

use crate::error::ConfigError;

/// The outbox table a service writes, as the forwarder reads it: its
/// name, its `[outbox.columns]` and its `event_id_format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTable {
    /// `None`: the connection's current database.
    schema: Option<String>,
    table: String,
    columns: ColumnMapping,
    event_id_format: EventIdFormat,
    /// The fewest partitions among the topics the rows go to, when the
    /// service knows it: a `partition_column` number beyond is refused.
    partition_count: Option<i32>,
}

/// The part of the forwarder's configuration both sides read; every other
/// key belongs to the forwarder alone.
#[derive(Deserialize)]
struct ForwarderFile {
    #[serde(default)]
    outbox: OutboxPart,
}

#[derive(Deserialize)]
struct OutboxPart {
    #[serde(default = "outbox_core::table::default_tables")]
    tables: Vec<String>,
    #[serde(default)]
    columns: ColumnMapping,
    #[serde(default)]
    event_id_format: EventIdFormat,
}

impl Default for OutboxPart {
    fn default() -> Self {
        OutboxPart {
            tables: outbox_core::table::default_tables(),
            columns: ColumnMapping::default(),
            event_id_format: EventIdFormat::default(),
        }
    }
}

impl OutboxTable {
    /// `table` (in the connection's database) or `schema.table`, with the
    /// default columns (the migration's) and UUID ids.
    pub fn new(name: &str) -> Result<Self, ConfigError> {
        let invalid = || ConfigError::TableName(name.to_owned());
        let (schema, table) = match name.split_once('.') {
            None => (None, name),
            Some(("*", table)) => (None, table),
            Some((schema, table)) => (Some(schema.to_owned()), table),
        };
        if table.is_empty() || table.contains('.') || schema.as_deref() == Some("") {
            return Err(invalid());
        }
        Ok(OutboxTable {
            schema,
            table: table.to_owned(),
            columns: ColumnMapping::default(),
            event_id_format: EventIdFormat::default(),
            partition_count: None,
        })
    }

    /// The table with `columns` named as `[outbox.columns]` names them.
    pub fn columns(mut self, columns: ColumnMapping) -> Self {
        self.columns = columns;
        self
    }

    /// The table with ids checked as `event_id_format` says.
    pub fn event_id_format(mut self, format: EventIdFormat) -> Self {
        self.event_id_format = format;
        self
    }

    /// The table with `partition_column` numbers checked against the
    /// topics' partition count (the fewest among the topics its rows go
    /// to): the forwarder refuses a row naming a partition the topic does
    /// not have. Without it, only numbers no topic has (negative, past
    /// 2^31) are refused before they are sent.
    pub fn partition_count(mut self, count: i32) -> Self {
        self.partition_count = Some(count);
        self
    }

    /// The one table `[outbox] tables` of the forwarder's configuration
    /// (TOML text) names, with its columns and id format.
    pub fn from_forwarder_config(text: &str) -> Result<Self, ConfigError> {
        Self::from_config(text, "the configuration", None)
    }

    /// `table` (`schema.table` or `*.table`, as listed in `[outbox] tables`)
    /// of a configuration that names several.
    pub fn from_forwarder_config_for(text: &str, table: &str) -> Result<Self, ConfigError> {
        Self::from_config(text, "the configuration", Some(table))
    }

    /// [`OutboxTable::from_forwarder_config`] of the file at `path`.
    pub fn from_forwarder_config_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_config(&text, &path.display().to_string(), None)
    }

    fn from_config(text: &str, origin: &str, wanted: Option<&str>) -> Result<Self, ConfigError> {
        let file: ForwarderFile = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
        let outbox = file.outbox;
        outbox
            .columns
            .check_names()
            .map_err(|message| ConfigError::Parse {
                path: origin.to_owned(),
                message,
            })?;
        let patterns = outbox
            .tables
            .iter()
            .map(|t| t.parse::<TablePattern>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|message| ConfigError::Parse {
                path: origin.to_owned(),
                message,
            })?;
        let pattern = match wanted {
            Some(wanted) => patterns
                .iter()
                .find(|p| p.to_string() == wanted)
                .ok_or_else(|| ConfigError::NotConfigured(wanted.to_owned()))?,
            None => match &patterns[..] {
                [one] => one,
                many => {
                    return Err(ConfigError::WhichTable {
                        count: many.len(),
                        tables: outbox.tables.join(", "),
                    })
                }
            },
        };
        Ok(OutboxTable {
            schema: pattern.schema.clone(),
            table: pattern.table.clone(),
            columns: outbox.columns,
            event_id_format: outbox.event_id_format,
            partition_count: None,
        })
    }

    /// `schema` when named, else `None`: the connection's database.
    pub(crate) fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    pub(crate) fn mapping(&self) -> &ColumnMapping {
        &self.columns
    }

    pub(crate) fn id_format(&self) -> EventIdFormat {
        self.event_id_format
    }

    pub(crate) fn partitions(&self) -> Option<i32> {
        self.partition_count
    }

    pub(crate) fn name(&self) -> &str {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarders_configuration_names_the_table_and_its_columns() {
        let text = "[mysql]\nurl = \"mysql://u:p@h/\"\n\n[outbox]\ntables = [\"shop.events\"]\n\
                    event_id_format = \"any\"\n\n[outbox.columns]\nevent_id = \"id\"\n\
                    traceparent = \"trace_parent\"\n";
        let table = OutboxTable::from_forwarder_config(text).unwrap();
        assert_eq!(table.schema.as_deref(), Some("shop"));
        assert_eq!(table.table, "events");
        assert_eq!(table.columns.event_id, "id");
        assert_eq!(table.columns.traceparent, "trace_parent");
        assert_eq!(table.columns.payload, "payload");
        assert_eq!(table.event_id_format, EventIdFormat::Any);
    }

    #[test]
    fn without_an_outbox_section_both_sides_mean_the_migrations_table() {
        let table = OutboxTable::from_forwarder_config("[mysql]\nurl = \"x\"\n").unwrap();
        assert_eq!(table, OutboxTable::new("outbox_event").unwrap());
        assert_eq!(table.event_id_format, EventIdFormat::Uuid);
    }

    #[test]
    fn several_tables_need_one_named_and_a_misspelt_column_key_is_refused() {
        let text = "[outbox]\ntables = [\"a.outbox\", \"*.outbox_event\"]\n";
        let err = OutboxTable::from_forwarder_config(text).unwrap_err();
        assert!(
            matches!(err, ConfigError::WhichTable { count: 2, .. }),
            "{err}"
        );
        let table = OutboxTable::from_forwarder_config_for(text, "a.outbox").unwrap();
        assert_eq!(
            (table.schema.as_deref(), table.table.as_str()),
            (Some("a"), "outbox")
        );
        let err = OutboxTable::from_forwarder_config_for(text, "b.outbox").unwrap_err();
        assert!(matches!(err, ConfigError::NotConfigured(_)), "{err}");

        let text = "[outbox.columns]\nevent_idd = \"id\"\n";
        let err = OutboxTable::from_forwarder_config(text)
            .unwrap_err()
            .to_string();
        assert!(err.contains("event_idd"), "{err}");
    }

    #[test]
    fn table_names_are_checked() {
        for bad in ["", "a.", ".b", "a.b.c"] {
            assert!(OutboxTable::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            OutboxTable::new("*.t").unwrap(),
            OutboxTable::new("t").unwrap()
        );
    }
}
