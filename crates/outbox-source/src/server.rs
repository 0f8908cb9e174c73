//! What the forwarder asks of the primary before and around streaming:
//! settings, identity, the binlog files it still has, and where it is now.
//! Each setting is checked by name and reported as
//! [`DefiniteError::InvalidSystemSetting`] with what was expected.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Row};
use outbox_core::{BinlogPosition, DefiniteError, ForwarderError, SourceIdentity};

/// Server error: the requested binlog position is not available (purged,
/// never existed, or past the end of the file).
pub const ER_MASTER_FATAL_ERROR_READING_BINLOG: u16 = 1236;

/// Server errors that will not go away by retrying: bad credentials or missing privileges.
const ACCESS_ERRORS: [u16; 5] = [1044, 1045, 1142, 1227, 1698];

/// Sorts a driver error into the two kinds. Anything not known to be
/// permanent is transient: the loop retries it from the acked watermark.
pub fn classify(err: mysql_async::Error, doing: &str) -> ForwarderError {
    match &err {
        mysql_async::Error::Server(server) if ACCESS_ERRORS.contains(&server.code) => {
            DefiniteError::Config(format!(
                "MySQL refused {doing}: {} (error {}); the forwarder's user needs \
                 REPLICATION SLAVE, REPLICATION CLIENT and SELECT on the outbox tables",
                server.message, server.code
            ))
            .into()
        }
        mysql_async::Error::Url(e) => DefiniteError::Config(format!("mysql.url: {e}")).into(),
        _ => ForwarderError::transient(format!("MySQL {doing}: {err}")),
    }
}

/// Parses the connection URL (never logged: it may hold a password).
pub fn parse_url(url: &str) -> Result<Opts, DefiniteError> {
    Opts::from_url(url).map_err(|e| DefiniteError::Config(format!("mysql.url is invalid: {e}")))
}

pub async fn connect(opts: &Opts) -> Result<Conn, ForwarderError> {
    Conn::new(opts.clone())
        .await
        .map_err(|e| classify(e, "connection"))
}

/// Server family, which decides a few protocol details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MySql,
    MariaDb,
}

/// What the forwarder needs to know about the primary.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub flavor: Flavor,
    pub version: String,
    pub identity: SourceIdentity,
}

async fn variable(conn: &mut Conn, name: &str) -> Result<Option<String>, ForwarderError> {
    let row: Option<Row> = conn
        .query_first(format!("SHOW GLOBAL VARIABLES LIKE '{name}'"))
        .await
        .map_err(|e| classify(e, "reading server variables"))?;
    Ok(row.and_then(|row| row.get::<Option<String>, _>(1).flatten()))
}

pub async fn server_info(conn: &mut Conn) -> Result<ServerInfo, ForwarderError> {
    let version = variable(conn, "version").await?.unwrap_or_default();
    let flavor = if version.to_ascii_lowercase().contains("mariadb") {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    };
    let server_id = variable(conn, "server_id")
        .await?
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    let server_uuid = match flavor {
        Flavor::MySql => variable(conn, "server_uuid").await?,
        Flavor::MariaDb => None,
    };
    let hostname = variable(conn, "hostname").await?.unwrap_or_default();
    let port = variable(conn, "port").await?.unwrap_or_default();
    Ok(ServerInfo {
        flavor,
        version,
        identity: SourceIdentity {
            server_uuid,
            server_id,
            host: format!("{hostname}:{port}"),
        },
    })
}

/// The settings without which rows cannot be read correctly.
pub const REQUIRED_SETTINGS: [(&str, &str); 4] = [
    ("log_bin", "ON"),
    ("binlog_format", "ROW"),
    ("binlog_row_image", "FULL"),
    ("binlog_row_metadata", "FULL"),
];

/// Checks [`REQUIRED_SETTINGS`]; the first one that is off is a definite error.
pub async fn check_settings(conn: &mut Conn) -> Result<(), ForwarderError> {
    for (setting, expected) in REQUIRED_SETTINGS {
        let actual = variable(conn, setting).await?;
        let actual = actual.unwrap_or_else(|| "(not supported by this server)".into());
        if !actual.eq_ignore_ascii_case(expected) {
            return Err(DefiniteError::InvalidSystemSetting {
                setting: setting.into(),
                expected: expected.into(),
                actual,
            }
            .into());
        }
    }
    Ok(())
}

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
pub async fn current_position(conn: &mut Conn) -> Result<BinlogPosition, ForwarderError> {
    // MySQL 8.4 renamed the statement; older servers and MariaDB know the old name.
    let row: Option<Row> = match conn.query_first("SHOW BINARY LOG STATUS").await {
        Ok(row) => row,
        Err(_) => conn
            .query_first("SHOW MASTER STATUS")
            .await
            .map_err(|e| classify(e, "SHOW MASTER STATUS"))?,
    };
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
