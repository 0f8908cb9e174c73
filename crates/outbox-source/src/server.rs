//! What the forwarder asks of the primary before and around streaming:
//! settings, identity, the binlog files it still has, and where it is now.
//! Each setting is checked by name and reported as
//! [`DefiniteError::InvalidSystemSetting`] with what was expected.
//!
//! Every connection is made from one [`MysqlConnect`]: the URL as configured
//! with the password and TLS settings kept outside it applied on top, turned
//! into driver options in one place ([`MysqlConnect::opts`]). It is never
//! logged: its `Debug` hides the URL and the password.

use std::fmt;
use std::path::PathBuf;

use mysql_async::prelude::Queryable;
use mysql_async::{ClientIdentity, Conn, Opts, OptsBuilder, Row, SslOpts};
use outbox_core::{
    BinlogPosition, DefiniteError, ForwarderError, GtidState, MariaDbGtidPos, MySqlGtidSet,
    SourceIdentity,
};

use crate::filter::TableNameCase;

/// Server error: the requested binlog position is not available (purged,
/// never existed, or past the end of the file).
pub const ER_MASTER_FATAL_ERROR_READING_BINLOG: u16 = 1236;

/// Server errors that will not go away by retrying: bad credentials or missing privileges.
const ACCESS_ERRORS: [u16; 5] = [1044, 1045, 1142, 1227, 1698];

/// Server error: the login itself was refused (user, password, host, or an
/// account that REQUIREs SSL reached without TLS).
const ER_ACCESS_DENIED_ERROR: u16 = 1045;

/// Sorts a driver error into the two kinds. Anything not known to be
/// permanent is transient: the loop retries it from the acked watermark.
pub fn classify(err: mysql_async::Error, doing: &str) -> ForwarderError {
    if let Some(why) = tls_failure(&err) {
        // A certificate the configured CA does not vouch for, or a server
        // without TLS, stays so however often the connection is retried.
        return DefiniteError::Config(format!(
            "TLS to MySQL failed during {doing}: {why}; check [mysql.tls] (mode, ca_file) \
             against the server's certificate"
        ))
        .into();
    }
    match &err {
        mysql_async::Error::Server(server) if server.code == ER_ACCESS_DENIED_ERROR => {
            DefiniteError::Config(format!(
                "MySQL refused {doing}: {} (error {}); check the user and password \
                 (mysql.url, mysql.password_env, mysql.password_file) and, if the account \
                 REQUIREs SSL or X509, [mysql.tls]",
                server.message, server.code
            ))
            .into()
        }
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

/// What a TLS failure in `err` was, if it is one: a certificate refused,
/// unreadable TLS material, or a server that does not offer TLS.
fn tls_failure(err: &mysql_async::Error) -> Option<String> {
    match err {
        mysql_async::Error::Io(mysql_async::IoError::Tls(e)) => Some(e.to_string()),
        // The handshake's own failures arrive as I/O errors wrapping rustls's.
        mysql_async::Error::Io(mysql_async::IoError::Io(e)) => e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .map(ToString::to_string),
        mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer) => {
            Some("the server does not offer TLS (start it with ssl_cert and ssl_key)".into())
        }
        _ => None,
    }
}

/// How far the client checks the server's certificate, named after the
/// MySQL client's `--ssl-mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsMode {
    /// No TLS.
    #[default]
    Disabled,
    /// Encrypted, but any certificate is accepted (no protection against an
    /// active man in the middle).
    Required,
    /// The certificate must chain to a trusted CA; the name is not compared.
    VerifyCa,
    /// The certificate must chain to a trusted CA and name the host connected to.
    VerifyIdentity,
}

impl TlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disabled => "disabled",
            TlsMode::Required => "required",
            TlsMode::VerifyCa => "verify_ca",
            TlsMode::VerifyIdentity => "verify_identity",
        }
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// TLS to the primary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MysqlTls {
    pub mode: TlsMode,
    /// PEM file of the CA certificate(s) the server's certificate must chain
    /// to; when unset, the built-in Mozilla roots (`webpki-roots`).
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain and its private key (PEM), for accounts
    /// created with `REQUIRE X509`.
    pub client_identity: Option<(PathBuf, PathBuf)>,
}

impl MysqlTls {
    fn ssl_opts(&self) -> Option<SslOpts> {
        let verify = match self.mode {
            TlsMode::Disabled => return None,
            TlsMode::Required => SslOpts::default()
                .with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true),
            TlsMode::VerifyCa => SslOpts::default().with_danger_skip_domain_validation(true),
            TlsMode::VerifyIdentity => SslOpts::default(),
        };
        let roots = match &self.ca_file {
            // A configured CA is the only one trusted.
            Some(ca) => verify
                .with_root_certs(vec![ca.clone().into()])
                .with_disable_built_in_roots(true),
            None => verify,
        };
        let identity = self
            .client_identity
            .as_ref()
            .map(|(cert, key)| ClientIdentity::new(cert.clone().into(), key.clone().into()));
        Some(roots.with_client_identity(identity))
    }
}

/// How to reach the primary: the configured URL, with the password and TLS
/// settings that live outside it applied on top.
#[derive(Clone)]
pub struct MysqlConnect {
    url: String,
    password: Option<String>,
    tls: MysqlTls,
}

impl fmt::Debug for MysqlConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlConnect")
            .field("url", &"<hidden>")
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl<'de> serde::Deserialize<'de> for MysqlConnect {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(MysqlConnect::new)
    }
}

impl MysqlConnect {
    /// `mysql://user[:password]@host[:port][/db]`, without TLS.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            password: None,
            tls: MysqlTls::default(),
        }
    }

    /// Uses `password` instead of the URL's.
    pub fn with_password(mut self, password: String) -> Self {
        self.password = Some(password);
        self
    }

    pub fn with_tls(mut self, tls: MysqlTls) -> Self {
        self.tls = tls;
        self
    }

    pub fn tls(&self) -> &MysqlTls {
        &self.tls
    }

    /// The driver options. TLS is configured here only: a URL asking for it
    /// through its own parameters is refused rather than half-honoured.
    pub fn opts(&self) -> Result<Opts, DefiniteError> {
        let opts = Opts::from_url(&self.url)
            .map_err(|e| DefiniteError::Config(format!("mysql.url is invalid: {e}")))?;
        if opts.ssl_opts().is_some() {
            return Err(DefiniteError::Config(
                "mysql.url sets TLS parameters (require_ssl, verify_ca, verify_identity, \
                 built_in_roots); configure TLS under [mysql.tls] instead"
                    .into(),
            ));
        }
        let mut builder = OptsBuilder::from_opts(opts);
        if let Some(password) = &self.password {
            builder = builder.pass(Some(password.clone()));
        }
        if let Some(ssl) = self.tls.ssl_opts() {
            // mysql_async builds its rustls configuration with the process's
            // default crypto provider; name ring in case another dependency
            // also compiles aws-lc-rs into rustls. An error only means a
            // provider is already installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
            builder = builder
                .ssl_opts(ssl)
                // After a TCP connection to a local server the driver would
                // otherwise switch to the Unix socket, leaving the verified
                // TLS channel the operator asked for.
                .prefer_socket(false);
        }
        Ok(builder.into())
    }
}

/// The driver options for `connect` (never logged: they may hold a password).
pub fn parse_url(connect: &MysqlConnect) -> Result<Opts, DefiniteError> {
    connect.opts()
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

/// The server's GTID state at `position`: on MariaDB `BINLOG_GTID_POS`
/// (every transaction before it, per domain the last); on MySQL with
/// `gtid_mode=ON` only at its current position, from `SHOW MASTER STATUS`
/// (its `Executed_Gtid_Set` is of that position). `None` when the server
/// cannot tell.
pub async fn gtid_state_at(
    conn: &mut Conn,
    flavor: Flavor,
    position: &BinlogPosition,
) -> Result<Option<GtidState>, ForwarderError> {
    if flavor == Flavor::MySql {
        let (current, gtid) = current_position_and_gtid(conn, flavor).await?;
        return Ok(gtid.filter(|_| current == *position));
    }
    mariadb_gtid_pos_at(conn, position).await
}

/// MariaDB's `BINLOG_GTID_POS` of `position`.
async fn mariadb_gtid_pos_at(
    conn: &mut Conn,
    position: &BinlogPosition,
) -> Result<Option<GtidState>, ForwarderError> {
    let text: Option<Option<String>> = conn
        .exec_first(
            "SELECT BINLOG_GTID_POS(?, ?)",
            (position.file.as_str(), position.pos),
        )
        .await
        .map_err(|e| classify(e, "SELECT BINLOG_GTID_POS"))?;
    Ok(text
        .flatten()
        .and_then(|t| t.parse::<MariaDbGtidPos>().ok())
        .map(GtidState::MariaDb))
}

/// A MariaDB GTID *state* (`gtid_binlog_state`, a binlog's GTID list):
/// per domain and server id, the last sequence number, `d-s-n,…` (a domain
/// may appear once per server id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MariaDbGtidState(Vec<(u32, u32, u64)>);

impl std::str::FromStr for MariaDbGtidState {
    type Err = outbox_core::ParseGtidError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        // Each entry is a GTID position of its own.
        input
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(|gtid| {
                let pos: MariaDbGtidPos = gtid.parse()?;
                let (&domain, &(server, seq)) = pos.domains().iter().next().expect("one GTID");
                Ok((domain, server, seq))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(MariaDbGtidState)
    }
}

impl fmt::Display for MariaDbGtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries: Vec<String> = self
            .0
            .iter()
            .map(|(d, s, n)| format!("{d}-{s}-{n}"))
            .collect();
        f.write_str(&entries.join(","))
    }
}

/// What a server holds of the GTID history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GtidHistory {
    /// Its `gtid_binlog_state` (per domain and server id, the last
    /// sequence number it logged), and nothing before the GTID list its
    /// oldest binlog starts with (older transactions were purged).
    MariaDb {
        binlog_state: MariaDbGtidState,
        purged_through: MariaDbGtidState,
        /// The oldest binlog file the server still has.
        oldest_file: String,
    },
    /// `gtid_executed`, of which `gtid_purged` is no longer in the binlog.
    MySql {
        executed: MySqlGtidSet,
        purged: MySqlGtidSet,
    },
}

impl GtidHistory {
    /// Why a stream after `saved` cannot be served, if it cannot: the
    /// transactions of `saved` the server lacks, or those after `saved` it
    /// has purged.
    pub fn cannot_serve(&self, saved: &GtidState) -> Option<String> {
        match (self, saved) {
            (
                GtidHistory::MariaDb {
                    binlog_state,
                    purged_through,
                    oldest_file,
                },
                GtidState::MariaDb(saved),
            ) => {
                // A GTID names its server: the server must have logged that
                // server's transactions of the domain up to the saved one (a
                // higher number from another server id is another history).
                let lacking: Vec<String> = saved
                    .domains()
                    .iter()
                    .filter(|(domain, (server, seq))| {
                        !binlog_state
                            .0
                            .iter()
                            .any(|(d, s, n)| d == *domain && s == server && n >= seq)
                    })
                    .map(|(domain, (server, seq))| format!("{domain}-{server}-{seq}"))
                    .collect();
                if !lacking.is_empty() {
                    return Some(format!(
                        "the server lacks transactions the checkpoint covers: {} (its \
                         gtid_binlog_state is {binlog_state})",
                        lacking.join(",")
                    ));
                }
                // Purged: a domain whose oldest file starts after the saved
                // sequence number.
                let purged: Vec<String> = purged_through
                    .0
                    .iter()
                    .filter(|(d, _, n)| saved.domains().get(d).is_none_or(|(_, seq)| n > seq))
                    .map(|(d, s, n)| format!("{d}-{s}-{n}"))
                    .collect();
                (!purged.is_empty()).then(|| {
                    format!(
                        "the server has purged transactions after the checkpoint: the oldest \
                         binlog the server still has: {oldest_file}, starts after {} (the \
                         checkpoint is at {saved})",
                        purged.join(",")
                    )
                })
            }
            (GtidHistory::MySql { executed, purged }, GtidState::MySql(saved)) => {
                let lacking = saved.minus(executed);
                if !lacking.is_empty() {
                    return Some(format!(
                        "the server lacks transactions the checkpoint covers: {lacking} (its \
                         gtid_executed is {executed})"
                    ));
                }
                let gone = purged.minus(saved);
                (!gone.is_empty()).then(|| {
                    format!(
                        "the server has purged transactions after the checkpoint: {gone} \
                         (gtid_purged is {purged})"
                    )
                })
            }
            _ => Some("the checkpoint's GTID state is of the other server family".into()),
        }
    }
}

/// The GTID history of the server, if a stream can be requested from it by
/// GTID: MariaDB, or MySQL with `gtid_mode=ON`.
pub async fn gtid_history(
    conn: &mut Conn,
    flavor: Flavor,
) -> Result<Option<GtidHistory>, ForwarderError> {
    // The server prints the same text again if asked again: not transient.
    let parse_error = |what: &str, e: outbox_core::ParseGtidError| -> ForwarderError {
        DefiniteError::Config(format!(
            "the server's {what} does not parse as a GTID set ({e}); this release cannot \
             resume by GTID on it"
        ))
        .into()
    };
    if flavor == Flavor::MySql {
        if !variable(conn, "gtid_mode")
            .await?
            .is_some_and(|m| m.eq_ignore_ascii_case("ON"))
        {
            return Ok(None);
        }
        let executed = variable(conn, "gtid_executed").await?.unwrap_or_default();
        let purged = variable(conn, "gtid_purged").await?.unwrap_or_default();
        return Ok(Some(GtidHistory::MySql {
            executed: executed
                .parse()
                .map_err(|e| parse_error("gtid_executed", e))?,
            purged: purged.parse().map_err(|e| parse_error("gtid_purged", e))?,
        }));
    }
    let binlog_state = variable(conn, "gtid_binlog_state")
        .await?
        .unwrap_or_default()
        .parse()
        .map_err(|e| parse_error("gtid_binlog_state", e))?;
    let logs = binary_logs(conn).await?;
    let mut purged_through = MariaDbGtidState::default();
    let oldest_file = logs.first().map(|(f, _)| f.clone()).unwrap_or_default();
    if let Some((oldest, _)) = logs.first() {
        let rows: Vec<Row> = conn
            .query(format!(
                "SHOW BINLOG EVENTS IN '{}' LIMIT 4",
                oldest.replace('\'', "")
            ))
            .await
            .map_err(|e| classify(e, "SHOW BINLOG EVENTS"))?;
        for row in rows {
            let kind: Option<String> = row.get("Event_type");
            if kind.as_deref() == Some("Gtid_list") {
                let info: String = row.get("Info").unwrap_or_default();
                purged_through = info
                    .trim_matches(|c| c == '[' || c == ']')
                    .parse()
                    .map_err(|e| parse_error(&format!("the Gtid_list of {oldest}"), e))?;
            }
        }
    }
    Ok(Some(GtidHistory::MariaDb {
        binlog_state,
        purged_through,
        oldest_file,
    }))
}

#[cfg(test)]
mod tests {

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

    use super::*;

    const URL: &str = "mysql://repl:in-the-url@db.example:3306";

    #[test]
    fn a_password_from_outside_the_url_replaces_the_urls() {
        let opts = MysqlConnect::new(URL)
            .with_password("from-a-file".into())
            .opts()
            .unwrap();
        assert_eq!(opts.pass(), Some("from-a-file"));
        assert_eq!(opts.user(), Some("repl"));
        assert_eq!(opts.ip_or_hostname(), "db.example");
        assert!(opts.ssl_opts().is_none());
        let plain = MysqlConnect::new(URL).opts().unwrap();
        assert_eq!(plain.pass(), Some("in-the-url"));
    }

    #[test]
    fn debug_shows_neither_the_url_nor_the_password() {
        let connect = MysqlConnect::new(URL).with_password("pw-from-env".into());
        let shown = format!("{connect:?}");
        assert!(!shown.contains("in-the-url") && !shown.contains("pw-from-env"));
        assert!(!shown.contains("db.example"), "{shown}");
    }

    fn tls(mode: TlsMode, ca: Option<&str>) -> MysqlTls {
        MysqlTls {
            mode,
            ca_file: ca.map(PathBuf::from),
            client_identity: None,
        }
    }

    #[test]
    fn each_tls_mode_maps_to_the_drivers_verification_switches() {
        let opts = |t| MysqlConnect::new(URL).with_tls(t).opts().unwrap();
        assert!(opts(tls(TlsMode::Disabled, None)).ssl_opts().is_none());

        let required = opts(tls(TlsMode::Required, None));
        let ssl = required.ssl_opts().unwrap();
        assert!(ssl.accept_invalid_certs() && ssl.skip_domain_validation());
        assert!(
            !required.prefer_socket(),
            "TLS must not switch to the socket"
        );

        let ca = opts(tls(TlsMode::VerifyCa, Some("/etc/ca.pem")));
        let ssl = ca.ssl_opts().unwrap();
        assert!(!ssl.accept_invalid_certs() && ssl.skip_domain_validation());
        assert!(
            ssl.disable_built_in_roots(),
            "only the configured CA is trusted"
        );
        assert_eq!(ssl.root_certs(), [PathBuf::from("/etc/ca.pem").into()]);

        let identity = opts(MysqlTls {
            client_identity: Some(("/c.pem".into(), "/k.pem".into())),
            ..tls(TlsMode::VerifyIdentity, None)
        });
        let ssl = identity.ssl_opts().unwrap();
        assert!(!ssl.accept_invalid_certs() && !ssl.skip_domain_validation());
        assert!(!ssl.disable_built_in_roots() && ssl.root_certs().is_empty());
        let client = ssl.client_identity().unwrap();
        assert_eq!(client.cert_chain(), PathBuf::from("/c.pem").into());
        assert_eq!(client.priv_key(), PathBuf::from("/k.pem").into());
    }

    #[test]
    fn tls_parameters_in_the_url_are_refused() {
        let err = MysqlConnect::new(format!("{URL}?require_ssl=true"))
            .opts()
            .expect_err("TLS belongs to [mysql.tls]");
        assert!(err.to_string().contains("[mysql.tls]"), "{err}");
        assert!(!err.to_string().contains("in-the-url"), "{err}");
    }

    #[test]
    fn a_refused_certificate_is_definite_and_other_io_errors_are_transient() {
        let handshake = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let err = classify(
            mysql_async::Error::Io(mysql_async::IoError::Io(handshake)),
            "connection",
        );
        let ForwarderError::Definite(e) = err else {
            panic!("retrying cannot fix a certificate: {err:?}")
        };
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        assert!(e.to_string().contains("[mysql.tls]"), "{e}");

        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let err = classify(
            mysql_async::Error::Io(mysql_async::IoError::Io(reset)),
            "connection",
        );
        assert!(matches!(err, ForwarderError::Transient(_)), "{err:?}");
    }

    #[test]
    fn a_server_serves_a_gtid_state_only_if_it_has_it_all_and_purged_nothing_after_it() {
        const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mysql = |executed: &str, purged: &str| GtidHistory::MySql {
            executed: executed.parse().unwrap(),
            purged: purged.parse().unwrap(),
        };
        let saved = GtidState::MySql(format!("{A}:1-100").parse().unwrap());
        assert_eq!(
            mysql(&format!("{A}:1-150"), &format!("{A}:1-40")).cannot_serve(&saved),
            None
        );
        let lacking = mysql(&format!("{A}:1-90"), "")
            .cannot_serve(&saved)
            .unwrap();
        assert!(
            lacking.contains(&format!(
                "lacks transactions the checkpoint covers: {A}:91-100"
            )),
            "{lacking}"
        );
        let purged = mysql(&format!("{A}:1-150"), &format!("{A}:1-120"))
            .cannot_serve(&saved)
            .unwrap();
        assert!(
            purged.contains(&format!(
                "purged transactions after the checkpoint: {A}:101-120"
            )),
            "{purged}"
        );

        let mariadb = |binlog_state: &str, purged_through: &str| GtidHistory::MariaDb {
            binlog_state: binlog_state.parse().unwrap(),
            purged_through: purged_through.parse().unwrap(),
            oldest_file: "bin.000007".into(),
        };
        let saved = GtidState::MariaDb("0-1-100".parse().unwrap());
        // A promoted replica: server 1's transactions up to 120, then its own.
        assert_eq!(
            mariadb("0-1-120,0-2-130", "0-1-50").cannot_serve(&saved),
            None
        );
        assert!(mariadb("0-1-99", "")
            .cannot_serve(&saved)
            .unwrap()
            .contains("lacks"));
        // Higher numbers of another server id are another history.
        assert!(mariadb("0-5-900", "")
            .cannot_serve(&saved)
            .unwrap()
            .contains("lacks"));
        assert!(mariadb("0-1-120,0-2-130", "0-1-100,0-2-110")
            .cannot_serve(&saved)
            .unwrap()
            .contains("purged"));
        assert!(mariadb("0-1-100", "")
            .cannot_serve(&GtidState::MySql(Default::default()))
            .is_some());
    }
}
