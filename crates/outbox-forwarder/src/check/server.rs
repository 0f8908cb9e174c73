//! The server's version and the settings the forwarder depends on, the
//! durability of what it publishes, GTIDs, the group's lock, the
//! forwarder's replica id and its privileges.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use outbox_source::server::{self, BinlogRetention, Flavor, ManagedRetention, ServerInfo};

use super::{Checked, QueryFailed, Report, Status};
use crate::config::ForwarderConfig;

/// The primary's settings that decide whether a transaction the forwarder
/// read (and published) survives a crash of the primary, with what their
/// being off risks.
const DURABILITY_SETTINGS: [(&str, &str); 2] = [
    (
        "sync_binlog",
        "the binlog is not on disk at commit, so a crash of the primary's host can lose the \
         tail the forwarder already published, and recovery then rolls those transactions back",
    ),
    (
        "innodb_flush_log_at_trx_commit",
        "a crash can lose transactions InnoDB had committed and the forwarder already \
         published",
    ),
];

/// Who runs the server, which decides how a setting is changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    SelfManaged,
    /// Amazon RDS for MySQL: it has `mysql.rds_show_configuration`.
    Rds,
    /// Aurora MySQL: it has `aurora_version` too.
    Aurora,
    /// Google Cloud SQL: its version ends in `-google`.
    CloudSql,
    /// Azure Database for MySQL Flexible Server: [`server::on_azure`].
    Azure,
}

impl Service {
    async fn of(
        info: &ServerInfo,
        retention: &BinlogRetention,
        conn: &mut Conn,
    ) -> Result<Self, QueryFailed> {
        Ok(
            if matches!(
                retention.managed,
                ManagedRetention::RdsHours(_) | ManagedRetention::Unreadable(_)
            ) {
                if variable(conn, "aurora_version").await?.is_some() {
                    Service::Aurora
                } else {
                    Service::Rds
                }
            } else if info.version.to_ascii_lowercase().contains("-google") {
                Service::CloudSql
            } else if retention.managed == ManagedRetention::AzureOnRelease
                || server::on_azure(conn).await?
            {
                Service::Azure
            } else {
                Service::SelfManaged
            },
        )
    }

    /// How to give `setting` the value `value`, in the service's terms.
    fn how_to_set(self, setting: &str, value: &str) -> String {
        match (self, setting) {
            (Service::Rds, "log_bin") => {
                "turn on automated backups (a backup retention period above 0): RDS logs the \
                 binlog only then"
                    .into()
            }
            (Service::Aurora, "log_bin") => {
                "set binlog_format = ROW in the DB cluster parameter group and reboot the \
                 writer: Aurora logs the binlog only then"
                    .into()
            }
            (Service::Rds, _) => format!(
                "set {setting} = {value} in the instance's DB parameter group and reboot it \
                 (RDS does not allow SET GLOBAL)"
            ),
            (Service::Aurora, _) => format!(
                "set {setting} = {value} in the DB cluster parameter group and reboot the \
                 writer (Aurora does not allow SET GLOBAL)"
            ),
            (Service::CloudSql, "log_bin") => {
                "turn on point-in-time recovery: Cloud SQL logs the binlog only then".into()
            }
            (Service::CloudSql, _) => format!(
                "set the database flag {setting}={value} (gcloud sql instances patch INSTANCE \
                 --database-flags={setting}={value}; it may restart the instance)"
            ),
            (Service::Azure, "log_bin" | "binlog_format") => format!(
                "Azure keeps {setting} = {value} itself; a server that shows otherwise is not \
                 Azure's Flexible Server as documented"
            ),
            (Service::Azure, _) => format!(
                "set the server parameter {setting} = {value} (az mysql flexible-server \
                 parameter set --resource-group GROUP --server-name SERVER --name {setting} \
                 --value {value}; a static parameter restarts the server)"
            ),
            (Service::SelfManaged, _) => format!(
                "set {setting}={value} in my.cnf and restart (or SET GLOBAL {setting}='{value}' \
                 and reconnect clients)"
            ),
        }
    }
}

/// Every check of this file, in order; returns what the server is and
/// how long it keeps its binlogs.
pub(super) async fn checks(
    config: &ForwarderConfig,
    conn: &mut Conn,
    report: &mut Report,
) -> Result<(ServerInfo, BinlogRetention), QueryFailed> {
    let info = server::server_info(conn).await?;
    let retention = server::binlog_retention(conn).await?;
    let service = Service::of(&info, &retention, conn).await?;
    version(&info, conn, report);
    settings(&info, service, conn, report).await?;
    retention_line(config, service, &retention, report);
    durability(config, conn, report).await?;
    gtid_mode(&info, conn, report).await?;
    ha_lock(config, conn, report).await?;
    replica_id(config, &info, conn, report).await?;
    privileges(conn, report).await?;
    Ok((info, retention))
}

fn version(info: &ServerInfo, conn: &Conn, report: &mut Report) {
    let (major, minor, _) = conn.server_version();
    let supported = match info.flavor {
        Flavor::MySql => major >= 8,
        Flavor::MariaDb => (major, minor) >= (10, 5),
    };
    report.add(
        if supported {
            Status::Pass
        } else {
            Status::Fail
        },
        "server version",
        info.version.clone(),
        "MySQL 8.0+ or MariaDB 10.5+",
        "upgrade the server (binlog_row_metadata=FULL needs these versions)",
    );
}

/// The settings without which rows cannot be read.
async fn settings(
    info: &ServerInfo,
    service: Service,
    conn: &mut Conn,
    report: &mut Report,
) -> Checked {
    // The same settings, judged the same way, as `run` checks at each
    // session start (server::check_settings).
    for (setting, expected, actual) in server::required_settings(conn).await? {
        let ok = server::setting_is(actual.as_deref(), expected);
        report.add(
            if ok { Status::Pass } else { Status::Fail },
            setting,
            actual.unwrap_or_else(|| "(absent)".into()),
            expected,
            &service.how_to_set(setting, expected),
        );
    }
    if info.flavor == Flavor::MariaDb {
        let compress = variable(conn, "log_bin_compress")
            .await?
            .unwrap_or_else(|| "OFF".into());
        report.add(
            if compress.eq_ignore_ascii_case("OFF") {
                Status::Pass
            } else {
                Status::Fail
            },
            "log_bin_compress",
            compress,
            "OFF",
            "set log_bin_compress=OFF: compressed MariaDB events cannot be read",
        );
    }
    Ok(())
}

/// How long the server keeps a binlog file, against
/// `mysql.min_binlog_retention_hours`: the forwarder may be down or behind
/// that long before the server purges what it has not read.
fn retention_line(
    config: &ForwarderConfig,
    service: Service,
    retention: &BinlogRetention,
    report: &mut Report,
) {
    let min_hours = config.mysql.min_binlog_retention_hours;
    let expected = format!("at least {min_hours}h (mysql.min_binlog_retention_hours)");
    let own = match retention.expiry_seconds {
        0 => "binlog_expire_logs_seconds=0 (the server's own expiry is off)".to_string(),
        s => format!("binlog_expire_logs_seconds={s} ({}h)", s / 3600),
    };
    let below = |status| if min_hours == 0 { Status::Warn } else { status };
    let (status, found, fix) = match &retention.managed {
        ManagedRetention::Unreadable(why) => (
            below(Status::Fail),
            format!(
                "cannot call mysql.rds_show_configuration: {why}; RDS's binlog retention \
                 hours is unknown"
            ),
            "GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration TO the forwarder's user"
                .to_string(),
        ),
        ManagedRetention::AzureOnRelease => (
            below(Status::Fail),
            "binlog_expire_logs_seconds=0 on Azure Flexible Server: a binlog is deleted as soon \
             as no backup or replica holds it, under a forwarder that falls behind"
                .to_string(),
            service.how_to_set(
                "binlog_expire_logs_seconds",
                &(min_hours.max(24).saturating_mul(3600)).to_string(),
            ),
        ),
        ManagedRetention::RdsHours(None) => (
            below(Status::Fail),
            format!(
                "binlog retention hours is NULL (RDS's default): binlogs are purged as soon \
                 as possible, under a forwarder that falls behind; {own}"
            ),
            format!(
                "as the master user: CALL mysql.rds_set_configuration('binlog retention \
                 hours', {})",
                min_hours.max(24)
            ),
        ),
        _ => {
            let (enough, found, fix) = configured_retention(retention, service, min_hours, own);
            let status = if enough {
                Status::Pass
            } else {
                below(Status::Fail)
            };
            (status, found, fix)
        }
    };
    report.add(status, "binlog retention", found, expected, &fix);
}

/// A retention the server sets (its own expiry, or RDS's retention hours):
/// whether it keeps a file `min_hours` at least, what it is (`own`: the
/// server's own expiry, as found), and how to raise it.
fn configured_retention(
    retention: &BinlogRetention,
    service: Service,
    min_hours: u64,
    own: String,
) -> (bool, String, String) {
    let seconds = match retention.purge_after() {
        Some(server::PurgeAfter::Seconds(s)) => Some(s),
        _ => None,
    };
    let found = match retention.managed {
        ManagedRetention::RdsHours(Some(hours)) => {
            format!("binlog retention hours is {hours}; {own}")
        }
        _ => own,
    };
    let enough = seconds.is_none_or(|s| s >= min_hours.saturating_mul(3600));
    let fix = match service {
        Service::Rds | Service::Aurora => format!(
            "as the master user: CALL mysql.rds_set_configuration('binlog retention \
             hours', {min_hours}), and keep binlog_expire_logs_seconds (parameter \
             group) at 0 or above it; or lower mysql.min_binlog_retention_hours"
        ),
        _ => format!(
            "{}; or lower mysql.min_binlog_retention_hours",
            service.how_to_set(
                "binlog_expire_logs_seconds",
                &(min_hours.saturating_mul(3600)).to_string()
            )
        ),
    };
    (enough, found, fix)
}

/// Crash durability of what the forwarder publishes: both settings at 1,
/// or a crash of the primary can undo what Kafka already has.
async fn durability(config: &ForwarderConfig, conn: &mut Conn, report: &mut Report) -> Checked {
    for (setting, risk) in DURABILITY_SETTINGS {
        let actual = variable(conn, setting)
            .await?
            .unwrap_or_else(|| "(absent)".into());
        let status = if actual == "1" {
            Status::Pass
        } else if config.mysql.require_durable_primary {
            Status::Fail
        } else {
            Status::Warn
        };
        report.add(
            status,
            setting,
            actual,
            "1",
            &format!(
                "set {setting}=1 on the primary (SET GLOBAL {setting}=1, and in my.cnf): \
                 otherwise {risk}; mysql.require_durable_primary = true makes this a failure"
            ),
        );
    }
    Ok(())
}

async fn gtid_mode(info: &ServerInfo, conn: &mut Conn, report: &mut Report) -> Checked {
    match info.flavor {
        Flavor::MySql => {
            let mode = variable(conn, "gtid_mode")
                .await?
                .unwrap_or_else(|| "OFF".into());
            let on = mode.eq_ignore_ascii_case("ON");
            report.add(
                if on { Status::Pass } else { Status::Warn },
                "gtid mode",
                if on {
                    format!("gtid_mode={mode}; the forwarder resumes by GTID and follows a failover to a server that has every checkpointed transaction")
                } else {
                    format!("gtid_mode={mode}; positions are file:pos only, so a failover or a switchover to another server is not followed")
                },
                "gtid_mode=ON",
                "set gtid_mode=ON and enforce_gtid_consistency=ON on the primary and its replicas",
            );
        }
        Flavor::MariaDb => {
            let pos = variable(conn, "gtid_binlog_pos").await?.unwrap_or_default();
            report.add(
                if pos.is_empty() { Status::Warn } else { Status::Pass },
                "gtid mode",
                format!("gtid_binlog_pos={pos}; the forwarder resumes by GTID and follows a failover to a server that has every checkpointed transaction"),
                "GTIDs in the binlog",
                "with no GTID yet, a failover is not followed until the first transaction",
            );
        }
    }
    Ok(())
}

/// Who holds the `[ha]` group's lock on this server.
async fn ha_lock(config: &ForwarderConfig, conn: &mut Conn, report: &mut Report) -> Checked {
    if let Some(ha) = &config.ha {
        let name = ha.lock_name();
        let holder: Option<Option<u64>> = conn
            .exec_first("SELECT IS_USED_LOCK(?)", (name.as_str(),))
            .await?;
        let found = match holder.flatten() {
            Some(id) => {
                let host: Option<String> = conn
                    .exec_first(
                        "SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = ?",
                        (id,),
                    )
                    .await
                    .ok()
                    .flatten();
                format!(
                    "group {}: the active instance holds the lock on connection {id}{}",
                    ha.group,
                    host.map(|h| format!(" from {h}")).unwrap_or_default()
                )
            }
            None => format!(
                "group {}: no instance holds the lock; the first to start becomes active",
                ha.group
            ),
        };
        report.add(Status::Pass, "ha group", found, "-", "");
    }
    Ok(())
}

/// The forwarder's `server_id`: not the primary's, not another registered
/// replica's.
async fn replica_id(
    config: &ForwarderConfig,
    info: &ServerInfo,
    conn: &mut Conn,
    report: &mut Report,
) -> Checked {
    let own = config.mysql.server_id;
    let replicas: Vec<Row> = match conn.query("SHOW SLAVE HOSTS").await {
        Ok(rows) => rows,
        Err(_) => conn.query("SHOW REPLICAS").await.unwrap_or_default(),
    };
    let taken = replicas.iter().any(|r| r.get::<u32, _>(0) == Some(own));
    let (status, found) = if own == info.identity.server_id {
        (
            Status::Fail,
            format!("{own} is the primary's own server_id"),
        )
    } else if taken {
        // A forwarder restarted right after a crash may still be listed, so
        // this warns rather than fails.
        (
            Status::Warn,
            format!("{own} is registered by a connected replica"),
        )
    } else {
        (
            Status::Pass,
            format!("{own} not used by the primary or a registered replica"),
        )
    };
    report.add(
        status,
        "forwarder server_id",
        found,
        "unique among replicas",
        "choose another mysql.server_id",
    );
    Ok(())
}

/// Privileges, tested by what they allow and by the grants text.
async fn privileges(conn: &mut Conn, report: &mut Report) -> Checked {
    let grants: Vec<String> = conn.query("SHOW GRANTS").await?;
    let grants = grants.join("\n").to_ascii_uppercase();
    let has = |p: &str| grants.contains("ALL PRIVILEGES") || grants.contains(p);
    let replication = has("REPLICATION SLAVE") || has("REPLICATION REPLICA");
    let client = has("REPLICATION CLIENT") || has("BINLOG MONITOR");
    // Grants held through roles are not visible in this text, so a missing
    // one warns; the dump itself fails clearly if it really is missing.
    report.add(
        if replication && client {
            Status::Pass
        } else {
            Status::Warn
        },
        "replication privileges",
        format!("REPLICATION SLAVE: {replication}, REPLICATION CLIENT/BINLOG MONITOR: {client}"),
        "both",
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the forwarder's user",
    );
    Ok(())
}

async fn variable(conn: &mut Conn, name: &str) -> Result<Option<String>, QueryFailed> {
    Ok(server::variable(conn, name).await?)
}
