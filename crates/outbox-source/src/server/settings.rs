//! What a server is: its identity and flavour, the settings the forwarder
//! reads by name (each failure a
//! [`DefiniteError::InvalidSystemSetting`] with what was expected), and its
//! role among the candidates.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use outbox_core::{DefiniteError, ForwarderError, SourceIdentity};

use super::classify;
use outbox_core::table::TableNameCase;

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

/// After how long the server's own expiry purges a binlog file; 0 when it
/// never does. `binlog_expire_logs_seconds` (MySQL 8, MariaDB 10.6+) wins
/// over `expire_logs_days` when set.
pub async fn binlog_expiry_seconds(conn: &mut Conn) -> Result<u64, ForwarderError> {
    Ok(match variable(conn, "binlog_expire_logs_seconds").await? {
        Some(s) if s.parse::<u64>().is_ok_and(|v| v > 0) => s.parse::<u64>().unwrap_or(0),
        _ => variable(conn, "expire_logs_days")
            .await?
            .and_then(|d| d.parse::<f64>().ok())
            .map_or(0, |d| (d * 86_400.0) as u64),
    })
}

/// Server error: no such stored procedure.
const ER_SP_DOES_NOT_EXIST: u16 = 1305;

/// Server errors that refuse the call itself: no EXECUTE on the routine
/// (1370), no access to its database or table (1044, 1142), a missing
/// privilege (1227).
const ACCESS_DENIED: [u16; 4] = [1370, 1044, 1142, 1227];

/// The binlog retention of Amazon RDS and Aurora MySQL, which purge a
/// binlog file after `binlog retention hours` whatever the server's own
/// expiry says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManagedRetention {
    /// Not RDS or Aurora: the server has no `mysql.rds_show_configuration`.
    None,
    /// `binlog retention hours`; `None` when NULL (RDS's default): files
    /// are purged as soon as possible.
    RdsHours(Option<u64>),
    /// `mysql.rds_show_configuration` exists but could not be read: the
    /// server's reason.
    Unreadable(String),
    /// Azure Database for MySQL Flexible Server with
    /// `binlog_expire_logs_seconds = 0`, its default: a file is deleted as
    /// soon as no backup or replica holds it, where MySQL itself reads 0
    /// as "never".
    AzureOnRelease,
}

/// When a binlog file may be purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeAfter {
    Never,
    Seconds(u64),
}

/// How long the server keeps its binlog files: its own expiry and, on
/// RDS and Aurora, the service's retention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinlogRetention {
    /// [`binlog_expiry_seconds`]: 0 when the server's own expiry is off.
    pub expiry_seconds: u64,
    pub managed: ManagedRetention,
}

impl BinlogRetention {
    /// The smaller of the two limits; `None` when RDS's cannot be read.
    pub fn purge_after(&self) -> Option<PurgeAfter> {
        let own = (self.expiry_seconds > 0).then_some(self.expiry_seconds);
        let managed = match &self.managed {
            ManagedRetention::None => None,
            ManagedRetention::RdsHours(hours) => Some(hours.map_or(0, |h| h.saturating_mul(3600))),
            ManagedRetention::AzureOnRelease => Some(0),
            ManagedRetention::Unreadable(_) => return None,
        };
        Some(match (own, managed) {
            (Some(a), Some(b)) => PurgeAfter::Seconds(a.min(b)),
            (Some(s), None) | (None, Some(s)) => PurgeAfter::Seconds(s),
            (None, None) => PurgeAfter::Never,
        })
    }
}

/// The server's own expiry and, on RDS and Aurora, `binlog retention
/// hours` as `CALL mysql.rds_show_configuration` shows it; on Azure, what
/// an expiry of 0 means there.
pub async fn binlog_retention(conn: &mut Conn) -> Result<BinlogRetention, ForwarderError> {
    let expiry_seconds = binlog_expiry_seconds(conn).await?;
    let managed = match conn
        .query::<Row, _>("CALL mysql.rds_show_configuration")
        .await
    {
        Ok(rows) => ManagedRetention::RdsHours(
            rows.into_iter()
                .find(|row| {
                    row.get::<Option<String>, _>(0)
                        .flatten()
                        .is_some_and(|name| name.eq_ignore_ascii_case("binlog retention hours"))
                })
                .and_then(|row| row.get::<Option<String>, _>(1).flatten())
                .and_then(|value| value.trim().parse::<u64>().ok()),
        ),
        Err(mysql_async::Error::Server(e)) if e.code == ER_SP_DOES_NOT_EXIST => {
            ManagedRetention::None
        }
        // MySQL refuses a user without EXECUTE before it looks for the
        // procedure: only a server that shows RDS's or Aurora's signs has it.
        // Any other failure is an outage, retried like one.
        Err(mysql_async::Error::Server(e)) if ACCESS_DENIED.contains(&e.code) => {
            if on_rds_or_aurora(conn).await? {
                ManagedRetention::Unreadable(format!("{} (error {})", e.message, e.code))
            } else {
                ManagedRetention::None
            }
        }
        Err(e) => return Err(classify(e, "reading mysql.rds_show_configuration")),
    };
    let managed =
        if managed == ManagedRetention::None && expiry_seconds == 0 && on_azure(conn).await? {
            ManagedRetention::AzureOnRelease
        } else {
            managed
        };
    Ok(BinlogRetention {
        expiry_seconds,
        managed,
    })
}

/// Whether the server is Azure Database for MySQL Flexible Server: it has
/// the `aad_auth_only` server parameter (Microsoft Entra authentication),
/// or `innodb_tmpdir` is one of the two places Azure documents for it,
/// `/mnt/temp` (its default) or under `/app/work/`
/// (<https://learn.microsoft.com/azure/mysql/flexible-server/concepts-server-parameters>).
pub async fn on_azure(conn: &mut Conn) -> Result<bool, ForwarderError> {
    if variable(conn, "aad_auth_only").await?.is_some() {
        return Ok(true);
    }
    let tmpdir = variable(conn, "innodb_tmpdir").await?.unwrap_or_default();
    Ok(is_azure_tmpdir(&tmpdir))
}

fn is_azure_tmpdir(dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    dir == "/mnt/temp" || dir.starts_with("/app/work/")
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

/// Whether the server is Amazon RDS (its binaries under `/rdsdbbin/`) or
/// Aurora MySQL (it has `aurora_version`).
async fn on_rds_or_aurora(conn: &mut Conn) -> Result<bool, ForwarderError> {
    let basedir = variable(conn, "basedir").await?.unwrap_or_default();
    Ok(is_rds_basedir(&basedir) || variable(conn, "aurora_version").await?.is_some())
}

fn is_rds_basedir(basedir: &str) -> bool {
    basedir.starts_with("/rdsdbbin/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smaller_limit_decides_and_rds_null_purges_at_once() {
        let retention = |expiry_seconds, managed| {
            BinlogRetention {
                expiry_seconds,
                managed,
            }
            .purge_after()
        };
        use ManagedRetention::*;
        use PurgeAfter::*;
        assert_eq!(retention(0, None), Some(Never));
        assert_eq!(retention(7200, None), Some(Seconds(7200)));
        assert_eq!(retention(0, RdsHours(Some(2))), Some(Seconds(7200)));
        assert_eq!(retention(604_800, RdsHours(Some(1))), Some(Seconds(3600)));
        assert_eq!(retention(3600, RdsHours(Some(168))), Some(Seconds(3600)));
        assert_eq!(retention(604_800, RdsHours(Option::None)), Some(Seconds(0)));
        assert_eq!(
            retention(604_800, Unreadable("denied".into())),
            Option::None
        );
        assert_eq!(retention(0, AzureOnRelease), Some(Seconds(0)));
    }

    #[test]
    fn azure_is_known_by_its_documented_tmpdir() {
        assert!(is_azure_tmpdir("/mnt/temp"));
        assert!(is_azure_tmpdir("/mnt/temp/"));
        assert!(is_azure_tmpdir("/app/work/tmpdir"));
        assert!(!is_azure_tmpdir(""));
        assert!(!is_azure_tmpdir("/tmp"));
        assert!(!is_azure_tmpdir("/mnt/temporary"));
    }
}
