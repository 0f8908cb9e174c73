//! Incremental events on a versioned aggregate: an event that brings the
//! aggregate to version `v` applies only when the row is at `v - 1`.
//!
//! Invariant: the check and the change are one conditional UPDATE
//! (`... WHERE key = ? AND version = v - 1`), never a SELECT followed by an
//! unconditional UPDATE (two consumers would both advance from the value
//! they read). Only when the UPDATE changed nothing is the row read again,
//! with a locking read, to say why:
//!
//! | row version | result                                              |
//! |-------------|-----------------------------------------------------|
//! | `v - 1`     | [`ApplyResult::Applied`] (by the UPDATE itself)     |
//! | `v`         | [`ApplyResult::Duplicate`]: this version is in      |
//! | `< v - 1`   | [`ApplyResult::Gap`]: a predecessor is missing; retry later |
//! | `> v`       | [`ApplyResult::Stale`]: older than what is there; reject |
//! | no row      | [`ApplyResult::Missing`]                            |
//!
//! Skipping ahead on a gap (setting the version to `v` anyway) would lose
//! the change of the missing version for good, so a gap is never applied.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Transaction, Value};
use outbox_core::sql::Ident;

/// What one conditional update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyResult {
    /// The row was at `v - 1` and is now at `v` with the change applied.
    Applied,
    /// The row is already at `v`: this version was applied before.
    Duplicate,
    /// The row is behind `v - 1`: an earlier version has not been applied
    /// yet. Nothing changed; try again later.
    Gap {
        /// The row's version now.
        current: i64,
    },
    /// The row is past `v`: the event is older than the state. Nothing
    /// changed; reject it.
    Stale {
        /// The row's version now.
        current: i64,
    },
    /// There is no row with that key.
    Missing,
}

/// A table whose rows carry a version column advanced by one per event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedAggregate {
    table: String,
    key_column: String,
    version_column: String,
}

/// An identifier that is not a plain SQL name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a plain SQL identifier (letters, digits, underscore); quote-free names only")]
pub struct BadIdentifier(pub String);

fn identifier(name: &str) -> Result<String, BadIdentifier> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if plain {
        Ok(name.to_owned())
    } else {
        Err(BadIdentifier(name.to_owned()))
    }
}

impl VersionedAggregate {
    /// The rows of `table`, found by `key_column`, versioned by
    /// `version_column`. Names are checked because they are spliced into SQL.
    pub fn new(table: &str, key_column: &str, version_column: &str) -> Result<Self, BadIdentifier> {
        Ok(VersionedAggregate {
            table: identifier(table)?,
            key_column: identifier(key_column)?,
            version_column: identifier(version_column)?,
        })
    }

    /// Applies `set` (e.g. `"balance = balance + ?"`, with `set_params` for
    /// its placeholders) to the row `key` and moves it to `version`, only if
    /// the row is at `version - 1`. Runs inside `tx`, so an error or a
    /// non-[`ApplyResult::Applied`] result the caller turns into an error
    /// rolls back the inbox row too.
    pub async fn apply(
        &self,
        tx: &mut Transaction<'_>,
        key: impl Into<Value>,
        version: i64,
        set: &str,
        set_params: Vec<Value>,
    ) -> Result<ApplyResult, mysql_async::Error> {
        let key = key.into();
        let (table, key_col, version_col) = (
            Ident(&self.table),
            Ident(&self.key_column),
            Ident(&self.version_column),
        );
        let mut params = set_params;
        params.extend([Value::from(version), key.clone(), Value::from(version - 1)]);
        tx.exec_drop(
            format!(
                "UPDATE {table} SET {set}, {version_col} = ? \
                 WHERE {key_col} = ? AND {version_col} = ?"
            ),
            Params::Positional(params),
        )
        .await?;
        // The version always changes from v - 1 to v, so a matched row is
        // always a changed row: affected_rows is exact here.
        if tx.affected_rows() == 1 {
            return Ok(ApplyResult::Applied);
        }
        let current: Option<i64> = tx
            .exec_first(
                format!("SELECT {version_col} FROM {table} WHERE {key_col} = ? FOR UPDATE"),
                (key,),
            )
            .await?;
        Ok(match current {
            None => ApplyResult::Missing,
            Some(current) if current == version => ApplyResult::Duplicate,
            Some(current) if current < version => ApplyResult::Gap { current },
            Some(current) => ApplyResult::Stale { current },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_identifiers_are_spliced_into_sql() {
        assert!(VersionedAggregate::new("account", "account_id", "version").is_ok());
        for bad in ["", "account`; DROP TABLE x", "a b", "x.y"] {
            assert!(
                VersionedAggregate::new(bad, "id", "version").is_err(),
                "{bad}"
            );
        }
    }
}
