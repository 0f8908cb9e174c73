//! `[mysql]`: the candidates of `mysql.url`, the replica id, the password's
//! source and `[mysql.tls]`.

use std::path::PathBuf;

use outbox_source::server::{MysqlConnect, TlsSection};
use serde::Deserialize;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct MysqlSection {
    /// `mysql://user:password@host:port`, or a list of them: the servers of
    /// one replication topology, tried in order (see [`MysqlUrls`]); the
    /// user needs REPLICATION SLAVE, REPLICATION CLIENT and SELECT on the
    /// outbox tables. After [`ForwarderConfig::load`] each also carries the
    /// password from `password_env` / `password_file` and the `[mysql.tls]`
    /// settings.
    pub url: MysqlUrls,
    /// Environment variable holding the password; replaces the URL's.
    pub password_env: Option<String>,
    /// File holding the password (one trailing newline is ignored);
    /// replaces the URL's.
    pub password_file: Option<PathBuf>,
    #[serde(default)]
    pub tls: TlsSection,
    /// RDS and Aurora IAM database authentication: `{ region = "..." }`.
    /// No password is kept; each connection signs a 15-minute token with
    /// AWS credentials (see [`outbox_source::server::use_rds_iam`]).
    #[serde(default)]
    pub aws_iam: Option<AwsIamSection>,
    /// The forwarder's replica id, unique among the primary's replicas.
    pub server_id: u32,
    /// Heartbeat period asked of the primary; a silent connection is declared
    /// dead after three periods.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// Whether a primary that may lose or roll back committed transactions
    /// in a crash (`sync_binlog` or `innodb_flush_log_at_trx_commit` other
    /// than 1) fails `check` and stops `run`, rather than only warning.
    #[serde(default)]
    pub require_durable_primary: bool,
    /// Hands a transaction's events to the producer only once this many
    /// replicas among the other candidates of `mysql.url` have applied it
    /// (by GTID), so that a failover to one of them never leaves Kafka
    /// holding events of transactions the new primary lacks. 0 (the
    /// default): off, events are published as soon as they are read.
    #[serde(default)]
    pub publish_after_replicas: usize,
    /// The least binlog retention `check` (and so `run`) accepts, in
    /// hours: the smaller of the server's expiry and, on RDS and Aurora,
    /// `binlog retention hours`. It is how long the forwarder may be down
    /// or behind before the server purges what it has not read. 0: not
    /// checked.
    #[serde(default = "default_min_binlog_retention_hours")]
    pub min_binlog_retention_hours: u64,
}

/// `mysql.aws_iam`: sign in to RDS or Aurora with IAM tokens.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct AwsIamSection {
    /// The database's region (`eu-west-1`).
    pub region: String,
}

/// A day: a forwarder down overnight resumes where it stopped.
const fn default_min_binlog_retention_hours() -> u64 {
    24
}

/// `mysql.url`: one address (the primary, or a proxy / VIP in front of
/// it) or several candidates of one replication topology. On a lost
/// connection the forwarder streams from the first candidate that is
/// writable, else from one that answers (a replica with
/// `log_slave_updates`), resuming by GTID (see `crate::resume`).
#[derive(Clone, Debug)]
pub struct MysqlUrls(pub(super) Vec<MysqlConnect>);

impl MysqlUrls {
    /// Every candidate, in order; `crate::resume::decide` picks among them.
    pub fn all(&self) -> &[MysqlConnect] {
        &self.0
    }

    /// The `[mysql.tls]` settings, the same for every candidate.
    pub fn tls(&self) -> &outbox_source::server::MysqlTls {
        self.0[0].tls()
    }
}

impl<'de> Deserialize<'de> for MysqlUrls {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(MysqlConnect),
            Many(Vec<MysqlConnect>),
        }
        match OneOrMany::deserialize(deserializer)? {
            OneOrMany::One(url) => Ok(MysqlUrls(vec![url])),
            OneOrMany::Many(urls) if !urls.is_empty() => Ok(MysqlUrls(urls)),
            OneOrMany::Many(_) => Err(serde::de::Error::custom(
                "mysql.url is an empty list; give at least one server",
            )),
        }
    }
}

/// A few seconds: quick to notice a dead connection, negligible traffic.
const fn default_heartbeat_ms() -> u64 {
    5_000
}
