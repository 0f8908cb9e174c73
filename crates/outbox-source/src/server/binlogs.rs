//! The binlog files a server still has and where it writes now.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use outbox_core::{BinlogPosition, DefiniteError, ForwarderError, GtidState, MySqlGtidSet};

use super::{classify, gtid::mariadb_gtid_pos_at, variable, Flavor};

/// The binlog files the server still has, oldest first, with their sizes.
pub async fn binary_logs(conn: &mut Conn) -> Result<Vec<(String, u64)>, ForwarderError> {
    let rows: Vec<Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(|e| classify(e, "SHOW BINARY LOGS"))?;
    Ok(rows
        .into_iter()
        .filter_map(|row| Some((row.get::<String, _>(0)?, row.get::<u64, _>(1)?)))
        .collect())
}

/// Where the server is writing now (the `latest` start).
/// `SHOW BINARY LOG STATUS` (MySQL 8.4) or `SHOW MASTER STATUS`.
async fn master_status(conn: &mut Conn) -> Result<Option<Row>, ForwarderError> {
    // MySQL 8.4 renamed the statement; older servers and MariaDB know the old name.
    match conn.query_first("SHOW BINARY LOG STATUS").await {
        Ok(row) => Ok(row),
        Err(_) => conn
            .query_first("SHOW MASTER STATUS")
            .await
            .map_err(|e| classify(e, "SHOW MASTER STATUS")),
    }
}

pub async fn current_position(conn: &mut Conn) -> Result<BinlogPosition, ForwarderError> {
    let row = master_status(conn).await?;
    let row = row.ok_or_else(|| DefiniteError::InvalidSystemSetting {
        setting: "log_bin".into(),
        expected: "ON".into(),
        actual: "OFF (SHOW MASTER STATUS is empty)".into(),
    })?;
    match (row.get::<String, _>(0), row.get::<u64, _>(1)) {
        (Some(file), Some(pos)) => Ok(BinlogPosition::new(file, pos)),
        _ => Err(ForwarderError::transient(
            "SHOW MASTER STATUS returned no position",
        )),
    }
}

/// The start of the oldest binlog the server still has (the `earliest` start).
pub async fn first_position(conn: &mut Conn) -> Result<BinlogPosition, ForwarderError> {
    let logs = binary_logs(conn).await?;
    let (file, _) = logs
        .first()
        .ok_or_else(|| DefiniteError::InvalidSystemSetting {
            setting: "log_bin".into(),
            expected: "ON".into(),
            actual: "no binary logs".into(),
        })?;
    Ok(BinlogPosition::new(file.clone(), 4))
}

/// Where the server is writing now and its GTID state there, read together:
/// on MySQL from one `SHOW MASTER STATUS` row (a commit between two reads
/// would leave the state unknown), on MariaDB by `BINLOG_GTID_POS` of the
/// position, which holds whenever it is asked.
pub async fn current_position_and_gtid(
    conn: &mut Conn,
    flavor: Flavor,
) -> Result<(BinlogPosition, Option<GtidState>), ForwarderError> {
    if flavor == Flavor::MariaDb {
        let position = current_position(conn).await?;
        let gtid = mariadb_gtid_pos_at(conn, &position).await?;
        return Ok((position, gtid));
    }
    let gtid_on = variable(conn, "gtid_mode")
        .await?
        .is_some_and(|m| m.eq_ignore_ascii_case("ON"));
    let row = master_status(conn)
        .await?
        .ok_or_else(|| DefiniteError::InvalidSystemSetting {
            setting: "log_bin".into(),
            expected: "ON".into(),
            actual: "OFF (SHOW MASTER STATUS is empty)".into(),
        })?;
    let status = MasterStatus {
        file: row.get("File"),
        pos: row.get("Position"),
        executed: row.get("Executed_Gtid_Set"),
    };
    status.position_and_gtid(gtid_on)
}

/// One row of `SHOW MASTER STATUS` (MySQL).
struct MasterStatus {
    file: Option<String>,
    pos: Option<u64>,
    executed: Option<String>,
}

impl MasterStatus {
    /// The position and, with `gtid_mode=ON`, the executed set at it: a set
    /// that does not parse is a definite error (retrying reads it again).
    fn position_and_gtid(
        self,
        gtid_on: bool,
    ) -> Result<(BinlogPosition, Option<GtidState>), ForwarderError> {
        let (Some(file), Some(pos)) = (self.file, self.pos) else {
            return Err(ForwarderError::transient(
                "SHOW MASTER STATUS returned no position",
            ));
        };
        let position = BinlogPosition::new(file, pos);
        let gtid = match self.executed {
            Some(set) if gtid_on => Some(GtidState::MySql(set.parse::<MySqlGtidSet>().map_err(
                |e| {
                    DefiniteError::Config(format!(
                        "the server's Executed_Gtid_Set at {position} does not parse: {e}"
                    ))
                },
            )?)),
            _ => None,
        };
        Ok((position, gtid))
    }
}

/// When the server started writing binlog `file`, seconds since the epoch:
/// the time of the file's FORMAT_DESCRIPTION event, read over a dump
/// connection of its own (`conn` is used up) as replica `server_id`. Every
/// transaction of the files before it was written earlier.
pub async fn file_started_at(
    mut conn: Conn,
    file: &str,
    server_id: u32,
) -> Result<u32, ForwarderError> {
    use futures_util::StreamExt;
    use mysql_common::binlog::consts::EventType;
    let request = mysql_async::BinlogStreamRequest::new(server_id)
        .with_filename(file.as_bytes())
        .with_pos(4);
    // Without it MariaDB sends placeholders for its own event types.
    let _ = conn.query_drop("SET @mariadb_slave_capability = 4").await;
    let mut stream = conn
        .get_binlog_stream(request)
        .await
        .map_err(|e| classify(e, "reading the start of a binlog file"))?;
    // The file's first events come at once; a heartbeat would come later.
    while let Some(event) = stream.next().await {
        let event = event.map_err(|e| classify(e, "reading the start of a binlog file"))?;
        let header = event.header();
        if header.event_type() == Ok(EventType::FORMAT_DESCRIPTION_EVENT) && header.timestamp() > 0
        {
            let _ = stream.close().await;
            return Ok(header.timestamp());
        }
    }
    Err(ForwarderError::transient(format!(
        "binlog {file} ended before its format description event"
    )))
}

/// The position a stream may start from: `position`'s file must still exist.
pub async fn ensure_available(
    conn: &mut Conn,
    position: &BinlogPosition,
) -> Result<(), ForwarderError> {
    let logs = binary_logs(conn).await?;
    if logs.iter().any(|(file, _)| *file == position.file) {
        return Ok(());
    }
    Err(DefiniteError::BinlogNotAvailable {
        position: position.clone(),
        oldest: logs.first().map(|(file, _)| file.clone()),
        server_message: "SHOW BINARY LOGS does not list the file".into(),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_position_and_the_executed_set_come_from_one_status_row() {
        let status = MasterStatus {
            file: Some("binlog.000007".into()),
            pos: Some(1234),
            executed: Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42".into()),
        };
        let (position, gtid) = status.position_and_gtid(true).unwrap();
        assert_eq!(position, BinlogPosition::new("binlog.000007", 1234));
        assert_eq!(
            gtid.unwrap().to_string(),
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42"
        );
        let off = MasterStatus {
            file: Some("binlog.000007".into()),
            pos: Some(1234),
            executed: Some(String::new()),
        };
        assert_eq!(off.position_and_gtid(false).unwrap().1, None);
        let bad = MasterStatus {
            file: Some("binlog.000007".into()),
            pos: Some(1234),
            executed: Some("not-a-set".into()),
        };
        assert!(matches!(
            bad.position_and_gtid(true),
            Err(ForwarderError::Definite(_))
        ));
    }
}
