//! A table's primary key: what `backfill` reads a table along and what
//! `prune` deletes rows by. Every column of it, so that no two rows share
//! a cursor value (a chunk boundary inside equal values would skip rows, a
//! delete by a shared value would take others).

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_core::sql::Ident;
use outbox_core::DefiniteError;

use super::verify;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrimaryKey {
    columns: Vec<String>,
}

impl PrimaryKey {
    /// The primary key of `schema`.`table`; an error without one.
    pub(crate) async fn of(
        conn: &mut Conn,
        schema: &str,
        table: &str,
    ) -> Result<Self, DefiniteError> {
        let columns: Vec<String> = conn
            .exec(
                "SELECT column_name FROM information_schema.key_column_usage \
                 WHERE table_schema = ? AND table_name = ? AND constraint_name = 'PRIMARY' \
                 ORDER BY ordinal_position",
                (schema, table),
            )
            .await
            .map_err(verify::reading_tables)?;
        if columns.is_empty() {
            return Err(DefiniteError::Config(format!(
                "{schema}.{table} has no primary key: its rows cannot be read in chunks or \
                 deleted one by one (the migration's outbox_event has one)"
            )));
        }
        Ok(Self { columns })
    }

    /// `` `a`, `b` ``: for a select list or an ORDER BY.
    pub(crate) fn list(&self) -> String {
        self.columns
            .iter()
            .map(|c| Ident(c).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `` AND (`a`, `b`) > (?, ?) ``: rows after a key.
    pub(crate) fn after(&self) -> String {
        format!(" AND ({}) > ({})", self.list(), self.marks())
    }

    /// `` (`a`, `b`) IN ((?, ?), ...) `` for `rows` keys.
    pub(crate) fn any_of(&self, rows: usize) -> String {
        let one = format!("({})", self.marks());
        format!("({}) IN ({})", self.list(), vec![one; rows].join(", "))
    }

    /// Where each key column is among `names` (a table's columns in order).
    pub(crate) fn positions(&self, names: &[&str]) -> Result<Vec<usize>, DefiniteError> {
        self.columns
            .iter()
            .map(|c| {
                names
                    .iter()
                    .position(|n| n.eq_ignore_ascii_case(c))
                    .ok_or_else(|| DefiniteError::Config(format!("no key column `{c}` read")))
            })
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.columns.len()
    }

    fn marks(&self) -> String {
        vec!["?"; self.columns.len()].join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_column_takes_part() {
        let key = PrimaryKey {
            columns: vec!["tenant".into(), "id".into()],
        };
        assert_eq!(key.list(), "`tenant`, `id`");
        assert_eq!(key.after(), " AND (`tenant`, `id`) > (?, ?)");
        assert_eq!(key.any_of(2), "(`tenant`, `id`) IN ((?, ?), (?, ?))");
        assert_eq!(key.positions(&["id", "payload", "tenant"]).unwrap(), [2, 0]);
        assert!(key.positions(&["id"]).is_err());
        let single = PrimaryKey {
            columns: vec!["event_id".into()],
        };
        assert_eq!(single.after(), " AND (`event_id`) > (?)");
    }
}
