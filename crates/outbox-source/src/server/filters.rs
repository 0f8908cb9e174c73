//! Replication and binlog filters: a replica whose `replicate_*` filters
//! (or whose `binlog_*_db` filters) leave rows out still moves its GTID
//! position past their transactions, so neither its binlog nor its
//! position proves it has the outbox rows.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use outbox_core::ForwarderError;

use super::classify;

/// Server error: a privilege is missing (reading the replication status
/// takes SLAVE MONITOR on MariaDB, REPLICATION CLIENT on MySQL).
const ER_SPECIFIC_ACCESS_DENIED: u16 = 1227;
/// Server error: a statement this version does not know.
const ER_PARSE_ERROR: u16 = 1064;

/// The columns of the replication status that name a filter: what a
/// replica leaves out, relays under another schema (MySQL's rewrite), or
/// skips by the server or GTID domain it came from (MariaDB's domains).
pub const REPLICA_FILTERS: [&str; 10] = [
    "Replicate_Do_DB",
    "Replicate_Ignore_DB",
    "Replicate_Do_Table",
    "Replicate_Ignore_Table",
    "Replicate_Wild_Do_Table",
    "Replicate_Wild_Ignore_Table",
    "Replicate_Rewrite_DB",
    "Replicate_Ignore_Server_Ids",
    "Replicate_Do_Domain_Ids",
    "Replicate_Ignore_Domain_Ids",
];

/// The column naming a row's replication channel: MariaDB's connection
/// (multi-source), MySQL's channel.
const CHANNEL: [&str; 2] = ["Connection_name", "Channel_Name"];

/// The columns of the binlog status that name a filter.
const BINLOG_FILTERS: [&str; 2] = ["Binlog_Do_DB", "Binlog_Ignore_DB"];

/// The filters set on the server behind `conn`, as `Column=value` (with
/// the channel, for a channel that has a name), over every replication
/// channel; `None` when its account may not read the replication status.
/// A replica whose filters cannot be read may have any: the callers treat
/// it as filtered.
pub async fn replication_filters(conn: &mut Conn) -> Result<Option<Vec<String>>, ForwarderError> {
    let mut filters = Vec::new();
    // Every channel: MariaDB shows its other connections only with ALL;
    // MySQL shows a row per channel, and knows no ALL.
    let replica = [
        "SHOW ALL REPLICAS STATUS",
        "SHOW ALL SLAVES STATUS",
        "SHOW REPLICA STATUS",
        "SHOW SLAVE STATUS",
    ];
    match status(conn, &replica).await? {
        Some(rows) => {
            for row in &rows {
                let channel = CHANNEL.iter().find_map(|c| column(row, c));
                let named = named(row, &REPLICA_FILTERS);
                filters.extend(named.into_iter().map(|f| match &channel {
                    Some(channel) if !channel.is_empty() => format!("channel '{channel}': {f}"),
                    _ => f,
                }));
            }
        }
        None => return Ok(None),
    }
    match status(conn, &["SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"]).await? {
        Some(rows) => {
            for row in &rows {
                filters.extend(named(row, &BINLOG_FILTERS));
            }
        }
        None => return Ok(None),
    }
    Ok(Some(filters))
}

/// The rows of the first of `statements` this version knows; `None`
/// without the privilege.
async fn status(conn: &mut Conn, statements: &[&str]) -> Result<Option<Vec<Row>>, ForwarderError> {
    let mut last = None;
    for statement in statements {
        match conn.query::<Row, _>(*statement).await {
            Ok(rows) => return Ok(Some(rows)),
            Err(mysql_async::Error::Server(e)) if e.code == ER_PARSE_ERROR => {
                last = Some(*statement);
            }
            Err(mysql_async::Error::Server(e)) if e.code == ER_SPECIFIC_ACCESS_DENIED => {
                return Ok(None)
            }
            Err(e) => return Err(classify(e, statement)),
        }
    }
    Err(ForwarderError::transient(format!(
        "the server knows none of {statements:?} (the last tried: {})",
        last.unwrap_or_default()
    )))
}

/// `row`'s value of `name`, if it has the column.
fn column(row: &Row, name: &str) -> Option<String> {
    let i = row
        .columns_ref()
        .iter()
        .position(|c| c.name_str() == name)?;
    row.get::<Option<String>, _>(i).flatten()
}

/// `Column=value` for each of `columns` that is set in `row`.
fn named(row: &Row, columns: &[&str]) -> Vec<String> {
    columns
        .iter()
        .filter_map(|name| {
            let value = column(row, name)?;
            (!value.is_empty()).then(|| format!("{name}={value}"))
        })
        .collect()
}
