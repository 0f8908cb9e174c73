//! Opening the writer: what the outbox table really holds (its columns,
//! how much each takes, the unique keys on the event id), read once at
//! start-up.

use mysql_async::prelude::Queryable;

use crate::column::TableColumn;
use crate::error::WriteError;
use crate::insert::Outbox;
use crate::table::OutboxTable;

impl OutboxTable {
    /// Reads what the table holds through `conn` (which columns, how long
    /// each may be) and returns the writer for it. Once, at start-up: the
    /// writer keeps no connection and is shared by every request.
    pub async fn open<Q: Queryable>(self, conn: &mut Q) -> Result<Outbox, WriteError> {
        let (database, max_packet): (Option<String>, u64) = conn
            .query_first("SELECT DATABASE(), @@max_allowed_packet")
            .await
            .map_err(|source| self.inspect_failed(source))?
            .unwrap_or_default();
        let schema = match self.schema().map(str::to_owned).or(database) {
            Some(schema) => schema,
            None => {
                return Err(WriteError::Table(format!(
                    "outbox table {}: the connection has no database; name the schema \
                     (`schema.{}`) or connect to one",
                    self.name(),
                    self.name()
                )))
            }
        };
        type ColumnRow = (
            String,
            String,
            String,
            Option<u64>,
            Option<u64>,
            Option<String>,
        );
        let rows: Vec<ColumnRow> = conn
            .exec(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_MAXIMUM_LENGTH, \
                 CHARACTER_OCTET_LENGTH, CHARACTER_SET_NAME FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                (&schema, self.name()),
            )
            .await
            .map_err(|source| self.inspect_failed(source))?;
        let columns = rows
            .into_iter()
            .map(|(name, data_type, column_type, chars, octets, charset)| {
                TableColumn::new(
                    name,
                    &data_type,
                    &column_type,
                    chars,
                    octets,
                    charset.as_deref(),
                )
            })
            .collect();
        // The unique keys on the event id alone: a 1062 naming one of them
        // is a duplicate event id, any other 1062 is not.
        let id_keys: Vec<String> = conn
            .exec(
                "SELECT INDEX_NAME FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 \
                 GROUP BY INDEX_NAME HAVING COUNT(*) = 1 AND LOWER(MAX(COLUMN_NAME)) = LOWER(?)",
                (&schema, self.name(), &self.mapping().event_id),
            )
            .await
            .map_err(|source| self.inspect_failed(source))?;
        Outbox::new(self, schema, columns, id_keys, max_packet)
    }

    fn inspect_failed(&self, source: mysql_async::Error) -> WriteError {
        WriteError::Inspect {
            table: self.name().to_owned(),
            source,
        }
    }
}
