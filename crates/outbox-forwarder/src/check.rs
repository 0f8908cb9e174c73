//! The preflight: every condition the forwarder depends on, checked one by
//! one and reported as a line (pass / warn / fail, what was found, what is
//! expected, how to fix). `outbox-forwarder check` prints them; `run` runs
//! them at start and refuses to start on a failure. Nothing here prints the
//! MySQL URL or any secret.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Row};
use outbox_checkpoint::Checkpoint;
use outbox_core::ForwarderError;
use outbox_sink::{ConnectionContext, Refusal};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, Producer};

use outbox_source::server::{self, Flavor, TlsMode, REQUIRED_SETTINGS};
use outbox_source::TablePattern;

use crate::resume::{self, Via};
use crate::ForwarderConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

/// One checked condition.
#[derive(Debug, Clone)]
pub struct CheckLine {
    pub status: Status,
    pub name: String,
    pub found: String,
    pub expected: String,
    /// How to fix it (empty when passing).
    pub fix: String,
    /// The condition could not be checked because something is unreachable;
    /// `run` retries these instead of refusing to start.
    pub unreachable: bool,
}

impl fmt::Display for CheckLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match self.status {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        };
        write!(
            f,
            "{status}  {:<28} found: {}; expected: {}",
            self.name, self.found, self.expected
        )?;
        if !self.fix.is_empty() {
            write!(f, "; fix: {}", self.fix)?;
        }
        Ok(())
    }
}

struct Report(Vec<CheckLine>);

impl Report {
    fn add(
        &mut self,
        status: Status,
        name: &str,
        found: impl Into<String>,
        expected: impl Into<String>,
        fix: &str,
    ) {
        self.0.push(CheckLine {
            status,
            name: name.into(),
            found: found.into(),
            expected: expected.into(),
            fix: if status == Status::Pass {
                String::new()
            } else {
                fix.into()
            },
            unreachable: false,
        });
    }

    fn unreachable(&mut self, name: &str, found: String, fix: &str) {
        self.add(Status::Fail, name, found, "reachable", fix);
        self.0.last_mut().expect("just added").unreachable = true;
    }
}

/// Runs every check. `checkpoint` is the stored one, if any, resumed as
/// `run` would (with `--accept-new-source` when `accept_new_source`).
pub async fn preflight(
    config: &ForwarderConfig,
    checkpoint: Option<&Checkpoint>,
    accept_new_source: bool,
) -> Vec<CheckLine> {
    let mut report = Report(Vec::new());
    mysql_checks(config, checkpoint, accept_new_source, &mut report).await;
    kafka_checks(config, &mut report).await;
    report.0
}

/// Every candidate of `mysql.url` is connected to and described; the
/// server `run` would stream from (see [`crate::resume`]) is named and
/// checked in detail.
async fn mysql_checks(
    config: &ForwarderConfig,
    checkpoint: Option<&Checkpoint>,
    accept_new_source: bool,
    report: &mut Report,
) {
    let candidates = match resume::candidates(config) {
        Ok(candidates) => candidates,
        Err(e) => {
            return report.add(
                Status::Fail,
                "mysql.url",
                e.to_string(),
                "mysql://user:password@host:port",
                "correct mysql.url",
            )
        }
    };
    let n = candidates.len();
    let mut connected = 0;
    for (i, opts) in candidates.iter().enumerate() {
        let target = format!(
            "{}{}:{} as {}",
            if n > 1 {
                format!("candidate {} of {n}: ", i + 1)
            } else {
                String::new()
            },
            opts.ip_or_hostname(),
            opts.tcp_port(),
            opts.user().unwrap_or("?")
        );
        let connect = tokio::time::timeout(Duration::from_secs(10), server::connect(opts)).await;
        match connect {
            Ok(Ok(conn)) => {
                connected += 1;
                report.add(Status::Pass, "mysql connection", target, "connected", "");
                let _ = conn.disconnect().await;
            }
            // One of several down: the others may serve.
            Ok(Err(e)) if n > 1 => report.add(
                Status::Warn,
                "mysql connection",
                format!("{target}: {e}"),
                "connected",
                "start it or remove it from mysql.url",
            ),
            // Refused credentials or a refused certificate: waiting will not help.
            Ok(Err(ForwarderError::Definite(e))) => report.add(
                Status::Fail,
                "mysql connection",
                format!("{target}: {e}"),
                "connected",
                "see the message",
            ),
            Ok(Err(e)) => report.unreachable(
                "mysql connection",
                format!("{target}: {e}"),
                "start MySQL or correct mysql.url",
            ),
            Err(_) if n > 1 => report.add(
                Status::Warn,
                "mysql connection",
                format!("{target}: timed out"),
                "connected",
                "start it or remove it from mysql.url",
            ),
            Err(_) => report.unreachable(
                "mysql connection",
                format!("{target}: timed out"),
                "start MySQL or correct mysql.url",
            ),
        }
    }
    if connected == 0 {
        if n > 1 {
            report.unreachable(
                "mysql connection",
                format!("none of the {n} candidates answers"),
                "start MySQL or correct mysql.url",
            );
        }
        return;
    }
    let decided = resume::decide(&candidates, 0, checkpoint, accept_new_source).await;
    let (decision, via) = match decided {
        Ok(decision) => {
            let via = decision.via.clone();
            (decision, via)
        }
        Err(refused) => {
            describe_candidates(&refused.candidates, report);
            let lag_only = matches!(refused.error, ForwarderError::Transient(_));
            report.add(
                if lag_only { Status::Warn } else { Status::Fail },
                "source",
                refused.error.to_string(),
                "a candidate that serves the checkpoint",
                "point the forwarder at a server of the checkpoint's topology that has it; or \
                 decide what to republish and run `outbox-forwarder checkpoint set`; or, if this \
                 server really holds the checkpoint's binlog, run with --accept-new-source",
            );
            // The other checks on a server that answers.
            match resume::decide(&candidates, 0, None, false).await {
                Ok(any) => (any, None),
                Err(_) => return,
            }
        }
    };
    if via.is_some() || checkpoint.is_none() {
        describe_candidates(&decision.candidates, report);
        let how = match &via {
            None => format!("starts at checkpoint.start = {:?}", config.checkpoint.start),
            Some(Via::Gtid(state)) => format!("resumes the checkpoint by GTID after {state}"),
            Some(Via::FilePos { overridden: false }) => "resumes the checkpoint at its file:pos".into(),
            Some(Via::FilePos { overridden: true }) => {
                "resumes the checkpoint at its file:pos on another server identity, as asked (--accept-new-source)".into()
            }
        };
        report.add(
            Status::Pass,
            "source",
            format!(
                "candidate {} of {n} ({}): {how}",
                decision.index + 1,
                decision.info.identity
            ),
            "a candidate that serves the checkpoint",
            "",
        );
    }
    let opts = &candidates[decision.index];
    let mut conn = decision.conn;
    if let Err(e) = tls_check(config, opts, &mut conn, report).await {
        report.add(
            Status::Fail,
            "mysql tls",
            e.to_string(),
            "answers",
            "see the message",
        );
    }
    if let Err(e) = server_checks(config, checkpoint, via.as_ref(), &mut conn, report).await {
        report.add(
            Status::Fail,
            "mysql queries",
            e.to_string(),
            "answers",
            "check the user's privileges",
        );
    }
    let _ = conn.disconnect().await;
}

/// A line per candidate of several: what it is.
fn describe_candidates(candidates: &[resume::Seen], report: &mut Report) {
    let n = candidates.len();
    if n < 2 {
        return;
    }
    for (i, seen) in candidates.iter().enumerate() {
        report.add(
            Status::Pass,
            "mysql candidate",
            format!("candidate {} of {n}: {seen}", i + 1),
            "-",
            "",
        );
    }
}

/// What protects the connection: the TLS version and cipher the server
/// reports for this session, or, without TLS, whether that is acceptable
/// (a loopback address) or worth a warning.
async fn tls_check(
    config: &ForwarderConfig,
    opts: &Opts,
    conn: &mut Conn,
    report: &mut Report,
) -> Result<(), mysql_async::Error> {
    let mode = config.mysql.url.tls().mode;
    let status: Vec<(String, String)> = conn
        .query("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        .await?;
    let value = |name: &str| {
        status
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let (version, cipher) = (value("Ssl_version"), value("Ssl_cipher"));
    if mode != TlsMode::Disabled {
        let encrypted = !cipher.is_empty();
        report.add(
            if encrypted {
                Status::Pass
            } else {
                Status::Fail
            },
            "mysql tls",
            format!("mode {mode}, {version} {cipher}"),
            "an encrypted session",
            "check [mysql.tls]",
        );
        return Ok(());
    }
    let loopback = opts
        .ip_or_hostname()
        .parse::<std::net::IpAddr>()
        .map_or(opts.ip_or_hostname() == "localhost", |ip| ip.is_loopback());
    report.add(
        if loopback { Status::Pass } else { Status::Warn },
        "mysql tls",
        "mode disabled: the session is not encrypted",
        "TLS unless the primary is on this host",
        "set [mysql.tls] mode = \"verify_identity\" (and ca_file): the binlog carries \
         every outbox payload",
    );
    Ok(())
}

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

async fn variable(conn: &mut Conn, name: &str) -> Result<Option<String>, mysql_async::Error> {
    let row: Option<Row> = conn
        .query_first(format!("SHOW GLOBAL VARIABLES LIKE '{name}'"))
        .await?;
    Ok(row.and_then(|r| r.get::<Option<String>, _>(1).flatten()))
}

async fn server_checks(
    config: &ForwarderConfig,
    checkpoint: Option<&Checkpoint>,
    via: Option<&Via>,
    conn: &mut Conn,
    report: &mut Report,
) -> Result<(), mysql_async::Error> {
    let info = server::server_info(conn)
        .await
        .map_err(|e| mysql_async::Error::Other(e.to_string().into()))?;
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

    for (setting, expected) in REQUIRED_SETTINGS {
        let actual = variable(conn, setting)
            .await?
            .unwrap_or_else(|| "(absent)".into());
        let ok = actual.eq_ignore_ascii_case(expected);
        report.add(
            if ok { Status::Pass } else { Status::Fail },
            setting,
            actual,
            expected,
            &format!("set {setting}={expected} in my.cnf and restart (or SET GLOBAL {setting}='{expected}' and reconnect clients)"),
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
    // Crash durability of what the forwarder publishes: both settings at 1,
    // or a crash of the primary can undo what Kafka already has.
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

    if let Some(ha) = &config.ha {
        let name = crate::ha::lock_name(&ha.group);
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

    // server_id: not the primary's, not another registered replica's.
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

    // Privileges, tested by what they allow and by the grants text.
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

    // The outbox tables and their mapped columns.
    let decode = match config.decode_config() {
        Ok(decode) => decode,
        Err(e) => {
            report.add(
                Status::Fail,
                "outbox config",
                e.to_string(),
                "valid",
                "correct [outbox]",
            );
            return Ok(());
        }
    };
    for pattern in decode.tables.patterns() {
        // information_schema's own comparison depends on its collation, so
        // the candidates are found regardless of case and then matched the
        // way the forwarder matches the binlog's names: as the server does.
        let candidates: Vec<(String, String)> = conn
            .exec(
                "SELECT table_schema, table_name FROM information_schema.tables \
                 WHERE LOWER(table_name) = LOWER(?) AND (? IS NULL OR LOWER(table_schema) = LOWER(?))",
                (pattern.table.as_str(), pattern.schema.as_deref(), pattern.schema.as_deref()),
            )
            .await?;
        let (tables, other_case): (Vec<_>, Vec<_>) = candidates
            .into_iter()
            .partition(|(schema, table)| pattern.matches(schema, table, info.table_names));
        if tables.is_empty() {
            match other_case.first() {
                Some((schema, table)) => {
                    let written = TablePattern {
                        schema: pattern.schema.as_ref().map(|_| schema.clone()),
                        table: table.clone(),
                    };
                    report.add(
                        Status::Fail,
                        "outbox table",
                        format!(
                            "{pattern} is not {schema}.{table}: with lower_case_table_names=0 \
                             the server compares table names case-sensitively, and its binlog \
                             names the table {schema}.{table}; no row of it would be forwarded"
                        ),
                        "the table named as the server names it",
                        &format!("write outbox.tables as \"{written}\""),
                    )
                }
                None => report.add(
                    Status::Fail,
                    "outbox table",
                    format!("no table matches {pattern}"),
                    "at least one",
                    "create it (migrations/) or correct outbox.tables",
                ),
            }
            continue;
        }
        for (schema, table) in tables {
            let columns: Vec<String> = conn
                .exec("SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ?", (schema.as_str(), table.as_str()))
                .await?;
            let present = |c: &str| columns.iter().any(|x| x.eq_ignore_ascii_case(c));
            let cols = &decode.columns;
            let missing: Vec<&str> = [cols.event_id.as_str(), cols.payload.as_str()]
                .into_iter()
                .chain(cols.key.as_deref())
                .filter(|c| !present(c))
                .collect();
            let optional_missing: Vec<&str> = [
                &cols.event_type,
                &cols.aggregate_type,
                &cols.aggregate_id,
                &cols.event_version,
            ]
            .into_iter()
            .map(String::as_str)
            .filter(|c| !present(c))
            .collect();
            let name = format!("outbox {schema}.{table}");
            let readable = conn
                .query_drop(format!("SELECT 1 FROM `{schema}`.`{table}` LIMIT 0"))
                .await
                .is_ok();
            if !missing.is_empty() || !readable {
                report.add(
                    Status::Fail,
                    &name,
                    format!("missing columns {missing:?}, SELECT allowed: {readable}"),
                    "event_id and payload columns, SELECT",
                    "map the columns under [outbox.columns] / GRANT SELECT",
                );
            } else if !optional_missing.is_empty() {
                report.add(
                    Status::Warn,
                    &name,
                    format!("no columns {optional_missing:?} (their headers are left out)"),
                    "all mapped columns",
                    "map them under [outbox.columns] if they exist under other names",
                );
            } else {
                report.add(
                    Status::Pass,
                    &name,
                    "all mapped columns, SELECT allowed",
                    "all mapped columns",
                    "",
                );
            }
        }
    }

    // The checkpoint's binlog file, and how long the server keeps binlogs.
    let logs = server::binary_logs(conn)
        .await
        .map_err(|e| mysql_async::Error::Other(e.to_string().into()))?;
    let Some(checkpoint) = checkpoint else {
        report.add(
            Status::Pass,
            "stored checkpoint",
            format!("none; will start at {:?}", config.checkpoint.start),
            "-",
            "",
        );
        return Ok(());
    };
    match via {
        // Refused: the `source` line says why.
        None => return Ok(()),
        Some(Via::Gtid(state)) => {
            report.add(
                Status::Pass,
                "checkpoint gtid",
                format!("{state}: the server has every transaction of it and purged none after it"),
                "served",
                "",
            );
            return Ok(());
        }
        Some(Via::FilePos { .. }) => {}
    }
    let file = &checkpoint.position.file;
    if !logs.iter().any(|(f, _)| f == file) {
        let gone = outbox_core::DefiniteError::BinlogNotAvailable {
            position: checkpoint.position.clone(),
            oldest: logs.first().map(|(f, _)| f.clone()),
            server_message: "SHOW BINARY LOGS does not list the file".into(),
        };
        report.add(
            Status::Fail,
            "checkpoint binlog",
            gone.to_string(),
            "present",
            "see above",
        );
        return Ok(());
    }
    let expire_seconds = match variable(conn, "binlog_expire_logs_seconds").await? {
        Some(s) if s.parse::<u64>().is_ok_and(|v| v > 0) => s.parse::<u64>().unwrap_or(0),
        _ => variable(conn, "expire_logs_days")
            .await?
            .and_then(|d| d.parse::<f64>().ok())
            .map_or(0, |d| (d * 86_400.0) as u64),
    };
    if expire_seconds == 0 {
        report.add(
            Status::Pass,
            "checkpoint binlog",
            format!("{file} present; the server does not expire binlogs"),
            "present",
            "",
        );
    } else {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let age = now_ms.saturating_sub(checkpoint.written_at_ms) / 1000;
        let left = expire_seconds.saturating_sub(age);
        report.add(
            if left < 86_400 {
                Status::Warn
            } else {
                Status::Pass
            },
            "checkpoint binlog",
            format!(
                "{file} present; expiry purges it in at most {}h",
                left / 3600
            ),
            "present for more than a day",
            "keep the forwarder running or raise binlog_expire_logs_seconds",
        );
    }
    Ok(())
}

/// The TLS or SASL refusal `client` was told of, if any. librdkafka hands
/// its error reports over when the client is polled.
fn refusal_of(client: &BaseConsumer<ConnectionContext>) -> Option<Refusal> {
    for _ in 0..10 {
        if let Some(refusal) = client.context().refusal() {
            return Some(refusal);
        }
        let _ = tokio::task::block_in_place(|| client.poll(Duration::from_millis(50)));
    }
    client.context().refusal()
}

async fn kafka_checks(config: &ForwarderConfig, report: &mut Report) {
    let brokers = &config.kafka.brokers;
    let client: BaseConsumer<ConnectionContext> = match config
        .kafka_config()
        .connection_config()
        .create_with_context(ConnectionContext::default())
    {
        Ok(c) => c,
        Err(e) => {
            return report.add(
                Status::Fail,
                "kafka client",
                e.to_string(),
                "valid kafka settings",
                "correct [kafka]",
            )
        }
    };
    let metadata =
        match tokio::task::block_in_place(|| client.fetch_metadata(None, Duration::from_secs(5))) {
            Ok(m) => m,
            // A refused handshake is a setting to correct, not an outage
            // to wait out: `run` refuses to start on it.
            Err(e) => match refusal_of(&client) {
                Some(refusal) => {
                    return report.add(
                        Status::Fail,
                        "kafka brokers",
                        format!("{brokers}: {}", refusal.reason),
                        "a TLS handshake and authentication the brokers accept",
                        refusal.fix,
                    )
                }
                None => {
                    return report.unreachable(
                        "kafka brokers",
                        format!("{brokers}: {e}"),
                        "start the brokers or correct kafka.brokers",
                    )
                }
            },
        };
    report.add(
        Status::Pass,
        "kafka brokers",
        format!("{brokers}: {} broker(s)", metadata.brokers().len()),
        "reachable",
        "",
    );
    let template = &config.kafka.topic;
    if template.contains('{') {
        report.add(
            Status::Warn,
            "kafka topics",
            format!("{template} is a template; its topics are known only per row"),
            "topics exist or auto-creation is on",
            "create the topics each aggregate type needs",
        );
    } else {
        let exists = metadata
            .topics()
            .iter()
            .any(|t| t.name() == template && t.error().is_none());
        report.add(
            if exists { Status::Pass } else { Status::Warn },
            "kafka topic",
            if exists {
                format!("{template} exists")
            } else {
                format!("{template} not found")
            },
            "exists (or auto-creation on)",
            "create the topic, or enable auto.create.topics.enable on the brokers",
        );
    }
    let producer = config
        .kafka_config()
        .client_config()
        .map(|c| c.create::<BaseProducer>());
    match producer {
        Ok(Ok(producer)) => {
            // librdkafka asks for a producer id as soon as it connects; a
            // broker that refuses idempotence raises a fatal error.
            let _ = tokio::task::block_in_place(|| {
                producer
                    .client()
                    .fetch_metadata(None, Duration::from_secs(5))
            });
            tokio::time::sleep(Duration::from_secs(1)).await;
            match producer.client().fatal_error() {
                None => report.add(
                    Status::Pass,
                    "idempotent producer",
                    "accepted",
                    "accepted",
                    "",
                ),
                Some((_, reason)) => report.add(
                    Status::Fail,
                    "idempotent producer",
                    reason,
                    "accepted",
                    "use brokers that support idempotent producers (Kafka 0.11+)",
                ),
            }
        }
        Ok(Err(e)) => report.add(
            Status::Fail,
            "idempotent producer",
            e.to_string(),
            "created",
            "correct [kafka.properties]",
        ),
        Err(e) => report.add(
            Status::Fail,
            "idempotent producer",
            e.to_string(),
            "enable.idempotence=true, acks=all",
            "remove the property",
        ),
    }
}
