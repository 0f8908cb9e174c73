//! What a server is: its identity and flavour, the settings the forwarder
//! reads by name (each failure a
//! [`DefiniteError::InvalidSystemSetting`] with what was expected), and its
//! role among the candidates.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use outbox_core::{DefiniteError, ForwarderError, SourceIdentity};

use super::classify;
use crate::filter::TableNameCase;

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
    /// How the server compares table names (`lower_case_table_names`), and
    /// so how the outbox tables must be matched in its binlog.
    pub table_names: TableNameCase,
}

pub async fn variable(conn: &mut Conn, name: &str) -> Result<Option<String>, ForwarderError> {
    let row: Option<Row> = conn
        .query_first(format!("SHOW GLOBAL VARIABLES LIKE '{name}'"))
        .await
        .map_err(|e| classify(e, "reading server variables"))?;
    Ok(row.and_then(|row| row.get::<Option<String>, _>(1).flatten()))
}

/// After how long the server purges a binlog file; 0 when it never does.
/// `binlog_expire_logs_seconds` (MySQL 8, MariaDB 10.6+) wins over
/// `expire_logs_days` when set.
pub async fn binlog_expiry_seconds(conn: &mut Conn) -> Result<u64, ForwarderError> {
    Ok(match variable(conn, "binlog_expire_logs_seconds").await? {
        Some(s) if s.parse::<u64>().is_ok_and(|v| v > 0) => s.parse::<u64>().unwrap_or(0),
        _ => variable(conn, "expire_logs_days")
            .await?
            .and_then(|d| d.parse::<f64>().ok())
            .map_or(0, |d| (d * 86_400.0) as u64),
    })
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
    let lower_case_table_names = variable(conn, "lower_case_table_names")
        .await?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok(ServerInfo {
        flavor,
        version,
        table_names: TableNameCase::of_server(lower_case_table_names),
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

/// Each of [`REQUIRED_SETTINGS`] as the server has it: `(setting,
/// expected, actual)`, `actual` `None` where the server has no such
/// variable. `check` reports every one; [`check_settings`] stops at the
/// first that is off.
pub async fn required_settings(
    conn: &mut Conn,
) -> Result<Vec<(&'static str, &'static str, Option<String>)>, ForwarderError> {
    let mut found = Vec::with_capacity(REQUIRED_SETTINGS.len());
    for (setting, expected) in REQUIRED_SETTINGS {
        found.push((setting, expected, variable(conn, setting).await?));
    }
    Ok(found)
}

/// Whether `actual` is what a required setting must be.
/// The server's clock, in milliseconds since the epoch.
pub async fn now_ms(conn: &mut Conn) -> Result<u64, ForwarderError> {
    let now: Option<u64> = conn
        .query_first("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS UNSIGNED)")
        .await
        .map_err(|e| super::classify(e, "reading the server's clock"))?;
    now.ok_or_else(|| ForwarderError::transient("the server did not tell its time"))
}

pub fn setting_is(actual: Option<&str>, expected: &str) -> bool {
    actual.is_some_and(|a| a.eq_ignore_ascii_case(expected))
}

/// Checks [`REQUIRED_SETTINGS`]; the first one that is off is a definite error.
pub async fn check_settings(conn: &mut Conn) -> Result<(), ForwarderError> {
    for (setting, expected, actual) in required_settings(conn).await? {
        if !setting_is(actual.as_deref(), expected) {
            return Err(DefiniteError::InvalidSystemSetting {
                setting: setting.into(),
                expected: expected.into(),
                actual: actual.unwrap_or_else(|| "(not supported by this server)".into()),
            }
            .into());
        }
    }
    Ok(())
}

/// What a candidate of `mysql.url` is to the forwarder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Takes writes (`read_only=OFF`): the primary.
    Writable,
    /// Read-only, and logs what it replicates (`log_slave_updates=ON`):
    /// its binlog holds the primary's transactions too.
    RelayingReplica,
    /// Read-only without `log_slave_updates`: its binlog lacks what it
    /// replicates, so it must not be streamed from.
    Unusable,
}

pub async fn role(conn: &mut Conn) -> Result<Role, ForwarderError> {
    let on = |v: Option<String>| v.is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1");
    if !on(variable(conn, "read_only").await?) {
        return Ok(Role::Writable);
    }
    Ok(if on(variable(conn, "log_slave_updates").await?) {
        Role::RelayingReplica
    } else {
        Role::Unusable
    })
}
