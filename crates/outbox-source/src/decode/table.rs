//! Outbox rows read from their table (by `backfill` and `repair-gap`)
//! rather than from the binlog, turned into the events the binlog's copies
//! of the same rows become: the same layout, the same column rules, the
//! same message.
//!
//! The values come over the binary protocol, which gives the types the
//! binlog gives, with two exceptions made equal here: a `TIMESTAMP` is
//! selected as epoch seconds (the binlog holds seconds, the protocol a
//! calendar time in the session's zone), and MySQL's `JSON` text is
//! rendered as the binlog's binary JSON is.

use mysql_common::binlog::value::BinlogValue;
use mysql_common::constants::ColumnType;
use mysql_common::value::Value;
use outbox_core::sql::Ident;
use outbox_core::{BinlogPosition, DefiniteError, OutboxEvent, RowOrigin};

use super::layout::TableLayout;
use super::{DecodeConfig, TransactionAssembler};

/// A column of an outbox table as `information_schema.columns` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    pub name: String,
    /// `DATA_TYPE`, e.g. `bigint`, `varchar`, `json`.
    pub data_type: String,
    /// `COLUMN_TYPE` ends in `unsigned`.
    pub unsigned: bool,
}

/// Decodes the rows of one outbox table as `SELECT` returns them.
pub struct TableDecoder {
    assembler: TransactionAssembler,
    layout: TableLayout,
    columns: Vec<TableColumn>,
}

impl TableDecoder {
    /// The decoder of `schema`.`table` with `columns` (in table order); an
    /// error when a column the configuration names is missing or does not
    /// fit, as the stream would report it.
    pub fn new(
        config: DecodeConfig,
        schema: &str,
        table: &str,
        columns: Vec<TableColumn>,
    ) -> Result<Self, DefiniteError> {
        let assembler = TransactionAssembler::new(config, "");
        let names = columns.iter().map(|c| c.name.clone()).collect();
        let shape = columns
            .iter()
            .map(|c| (column_type(&c.data_type), Vec::new(), c.unsigned))
            .collect();
        let here = BinlogPosition::new("", 0);
        let layout = assembler.layout_of(schema, table, names, false, shape, here)?;
        Ok(Self {
            assembler,
            layout,
            columns,
        })
    }

    /// The select list that reads a row for [`TableDecoder::decode`]:
    /// every column in table order.
    pub fn select_list(&self) -> String {
        self.columns
            .iter()
            .map(|c| {
                let name = Ident(&c.name);
                if c.data_type.eq_ignore_ascii_case("timestamp") {
                    format!("CAST(UNIX_TIMESTAMP({name}) AS DECIMAL(20,6)) AS {name}")
                } else {
                    name.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The event of one row read with [`TableDecoder::select_list`], its
    /// origin placed at `at` (a binlog position after the row's insert).
    pub fn decode(
        &self,
        values: Vec<Value>,
        at: &BinlogPosition,
    ) -> Result<OutboxEvent, DefiniteError> {
        let origin = RowOrigin {
            schema: self.layout.schema.clone(),
            table: self.layout.table.clone(),
            event_position: at.clone(),
            row_index: 0,
        };
        if values.len() != self.columns.len() {
            return Err(super::rows::bad_row(
                &origin,
                None,
                format!(
                    "the row has {} columns, the table {} (was it altered meanwhile?)",
                    values.len(),
                    self.columns.len()
                ),
            ));
        }
        let row = values
            .into_iter()
            .zip(&self.columns)
            .map(|(value, column)| Ok(Some(BinlogValue::Value(as_in_binlog(value, column)?))))
            .collect::<Result<Vec<_>, String>>()
            .map_err(|reason| super::rows::bad_row(&origin, None, reason))?;
        self.assembler.decode_row(&self.layout, row, origin)
    }
}

/// A value as the binlog holds it (see the module docs).
fn as_in_binlog(value: Value, column: &TableColumn) -> Result<Value, String> {
    match value {
        Value::Bytes(text) if column.data_type.eq_ignore_ascii_case("json") => {
            let json: serde_json::Value = serde_json::from_slice(&text)
                .map_err(|e| format!("column {} is not JSON: {e}", column.name))?;
            Ok(Value::Bytes(
                serde_json::to_vec(&json).expect("JSON values serialise"),
            ))
        }
        other => Ok(other),
    }
}

/// The binlog column type of an `information_schema` `DATA_TYPE`, as far
/// as the column rules tell types apart.
fn column_type(data_type: &str) -> ColumnType {
    use ColumnType::*;
    match data_type.to_ascii_lowercase().as_str() {
        "tinyint" => MYSQL_TYPE_TINY,
        "smallint" => MYSQL_TYPE_SHORT,
        "mediumint" => MYSQL_TYPE_INT24,
        "int" | "integer" => MYSQL_TYPE_LONG,
        "bigint" => MYSQL_TYPE_LONGLONG,
        "datetime" => MYSQL_TYPE_DATETIME2,
        "timestamp" => MYSQL_TYPE_TIMESTAMP2,
        "date" => MYSQL_TYPE_DATE,
        "time" => MYSQL_TYPE_TIME2,
        "year" => MYSQL_TYPE_YEAR,
        "float" => MYSQL_TYPE_FLOAT,
        "double" => MYSQL_TYPE_DOUBLE,
        "decimal" => MYSQL_TYPE_NEWDECIMAL,
        "json" => MYSQL_TYPE_JSON,
        "enum" => MYSQL_TYPE_ENUM,
        "set" => MYSQL_TYPE_SET,
        "bit" => MYSQL_TYPE_BIT,
        "tinyblob" | "blob" | "mediumblob" | "longblob" | "tinytext" | "text" | "mediumtext"
        | "longtext" => MYSQL_TYPE_BLOB,
        _ => MYSQL_TYPE_VARCHAR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::table::OutboxTables;

    fn columns() -> Vec<TableColumn> {
        [
            ("id", "bigint", true),
            ("event_id", "char", false),
            ("aggregate_type", "varchar", false),
            ("aggregate_id", "varchar", false),
            ("event_type", "varchar", false),
            ("payload", "json", false),
            ("created_at", "timestamp", false),
        ]
        .into_iter()
        .map(|(name, data_type, unsigned)| TableColumn {
            name: name.into(),
            data_type: data_type.into(),
            unsigned,
        })
        .collect()
    }

    #[test]
    fn a_row_read_from_its_table_becomes_the_event_its_binlog_row_becomes() {
        let mut config =
            DecodeConfig::new(OutboxTables::new(vec!["*.outbox_event".parse().unwrap()]));
        config.columns.timestamp_column = Some("created_at".into());
        config.columns.key = Some("aggregate_id".into());
        let decoder = TableDecoder::new(config, "shop", "outbox_event", columns()).unwrap();
        assert_eq!(
            decoder.select_list(),
            "`id`, `event_id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, \
             CAST(UNIX_TIMESTAMP(`created_at`) AS DECIMAL(20,6)) AS `created_at`"
        );
        let id = "0b5e5c8e-9d4b-4d57-a2a8-4c1f1a0e0d11";
        let row = vec![
            Value::UInt(7),
            Value::Bytes(id.into()),
            Value::Bytes(b"order".to_vec()),
            Value::Bytes(b"42".to_vec()),
            Value::Bytes(b"OrderPlaced".to_vec()),
            // MySQL prints JSON with spaces; its binlog holds binary JSON.
            Value::Bytes(br#"{"total": 10, "id": 42}"#.to_vec()),
            Value::Bytes(b"1764000000.250000".to_vec()),
        ];
        let at = BinlogPosition::new("bin.000004", 4);
        let event = decoder.decode(row, &at).unwrap();
        assert_eq!(event.event_id, id);
        assert_eq!(event.aggregate_type.as_deref(), Some("order"));
        assert_eq!(event.key_bytes(), b"42");
        assert_eq!(
            event.payload.as_deref(),
            Some(&br#"{"id":42,"total":10}"#[..])
        );
        assert_eq!(event.shape().timestamp_ms, Some(1_764_000_000_250));
        assert_eq!(event.origin.event_position, at);

        let bad = vec![Value::UInt(8), Value::NULL];
        let error = decoder.decode(bad, &at).unwrap_err().to_string();
        assert!(error.contains("2 columns"), "{error}");
    }

    #[test]
    fn a_missing_column_is_refused_as_the_stream_refuses_it() {
        let config = DecodeConfig::new(OutboxTables::new(vec!["*.outbox_event".parse().unwrap()]));
        let without_payload: Vec<TableColumn> = columns()
            .into_iter()
            .filter(|c| c.name != "payload")
            .collect();
        let error = TableDecoder::new(config, "shop", "outbox_event", without_payload)
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("no column `payload`"), "{error}");
    }
}
