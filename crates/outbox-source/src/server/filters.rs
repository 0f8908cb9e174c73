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

/// The columns of the replication status that name a filter.
const REPLICA_FILTERS: [&str; 6] = [
    "Replicate_Do_DB",
    "Replicate_Ignore_DB",
    "Replicate_Do_Table",
    "Replicate_Ignore_Table",
    "Replicate_Wild_Do_Table",
    "Replicate_Wild_Ignore_Table",
];

/// The columns of the binlog status that name a filter.
const BINLOG_FILTERS: [&str; 2] = ["Binlog_Do_DB", "Binlog_Ignore_DB"];

/// The filters set on the server behind `conn`, as `Column=value`; `None`
/// when its account may not read the replication status.
pub async fn replication_filters(conn: &mut Conn) -> Result<Option<Vec<String>>, ForwarderError> {
    let mut filters = Vec::new();
    match status(conn, "SHOW REPLICA STATUS", "SHOW SLAVE STATUS").await? {
        Some(Some(row)) => filters.extend(named(&row, &REPLICA_FILTERS)),
        Some(None) => {}
        None => return Ok(None),
    }
    match status(conn, "SHOW BINARY LOG STATUS", "SHOW MASTER STATUS").await? {
        Some(Some(row)) => filters.extend(named(&row, &BINLOG_FILTERS)),
        Some(None) => {}
        None => return Ok(None),
    }
    Ok(Some(filters))
}

/// The first row of `statement` (or of `older`, on a version that knows
/// only that name); `None` without the privilege.
async fn status(
    conn: &mut Conn,
    statement: &str,
    older: &str,
) -> Result<Option<Option<Row>>, ForwarderError> {
    let mut asked = conn.query_first::<Row, _>(statement).await;
    if matches!(&asked, Err(mysql_async::Error::Server(e)) if e.code == ER_PARSE_ERROR) {
        asked = conn.query_first(older).await;
    }
    match asked {
        Ok(row) => Ok(Some(row)),
        Err(mysql_async::Error::Server(e)) if e.code == ER_SPECIFIC_ACCESS_DENIED => Ok(None),
        Err(e) => Err(classify(e, statement)),
    }
}

/// `Column=value` for each of `columns` that is set in `row`.
fn named(row: &Row, columns: &[&str]) -> Vec<String> {
    columns
        .iter()
        .filter_map(|name| {
            let i = row
                .columns_ref()
                .iter()
                .position(|c| c.name_str() == *name)?;
            let value = row.get::<Option<String>, _>(i).flatten()?;
            (!value.is_empty()).then(|| format!("{name}={value}"))
        })
        .collect()
}
