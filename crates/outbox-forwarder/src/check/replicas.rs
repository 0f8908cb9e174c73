//! Under `mysql.publish_after_replicas`: each replica the forwarder would
//! wait for (every candidate but the source), its role, what it has
//! applied and how far it lags; and whether enough of them replicate for
//! a run to publish rather than hold.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Row};
use outbox_source::server::{self as source_server, Flavor, ServerInfo};

use super::{Report, Status};

/// What one replica says of itself.
struct Replica {
    read_only: bool,
    /// `gtid_slave_pos` (MariaDB) or `gtid_executed` (MySQL).
    applied: String,
    /// Both replication threads run; `None` when the account may not read
    /// the replication status.
    replicating: Option<bool>,
    /// `Seconds_Behind_Master` / `Seconds_Behind_Source`, when known.
    lag_seconds: Option<u64>,
    /// Its replication and binlog filters, as `Column=value`.
    filters: Vec<String>,
}

pub(super) async fn checks(need: usize, candidates: &[Opts], source: usize, report: &mut Report) {
    let n = candidates.len();
    let mut in_sync = 0;
    for (i, opts) in candidates.iter().enumerate().filter(|(i, _)| *i != source) {
        let name = format!("candidate {} of {n}", i + 1);
        let described = tokio::time::timeout(Duration::from_secs(10), describe(opts)).await;
        let replica = match described {
            Ok(Ok(replica)) => replica,
            unanswered => {
                let why = match unanswered {
                    Ok(Err(e)) => e.to_string(),
                    _ => "no answer in 10 s".to_owned(),
                };
                report.add(
                    Status::Warn,
                    "replica",
                    format!("{name}: {why}"),
                    "a replica that answers",
                    "start it: until it answers it confirms nothing",
                );
                continue;
            }
        };
        let found = format!("{name}: {}", replica.described());
        if !replica.filters.is_empty() {
            filtering(report, &found, &replica.filters);
            continue;
        }
        let ok = replica.replicating == Some(true) && replica.read_only;
        if ok {
            in_sync += 1;
        }
        report.add(
            if ok { Status::Pass } else { Status::Warn },
            "replica",
            found,
            "a read-only replica, replicating",
            "a server that is not replicating confirms nothing: start its replication, or \
             leave it out of the count",
        );
    }
    report.add(
        if in_sync >= need {
            Status::Pass
        } else {
            Status::Warn
        },
        "publish_after_replicas",
        format!("{need} needed; {in_sync} of the other candidates replicate"),
        "at least as many replicating as needed",
        "until enough replicas replicate, run holds every transaction (nothing is lost; it \
         waits): start their replication, or lower mysql.publish_after_replicas",
    );
}

impl Replica {
    /// Its role, replication, what it applied and its lag, in words.
    fn described(&self) -> String {
        let lag = self
            .lag_seconds
            .map_or("lag unknown".to_string(), |s| format!("{s} s behind"));
        format!(
            "{}, {}, applied {}, {lag}",
            if self.read_only {
                "read-only"
            } else {
                "writable"
            },
            match self.replicating {
                Some(true) => "replicating",
                Some(false) => "not replicating",
                None => "replication status not readable (grant SLAVE MONITOR on MariaDB, REPLICATION CLIENT on MySQL)",
            },
            if self.applied.is_empty() {
                "nothing"
            } else {
                &self.applied
            },
        )
    }
}

/// A replica with replication filters: the server is refused, not the
/// run (enough others may replicate whole).
fn filtering(report: &mut Report, found: &str, filters: &[String]) {
    report.add(
        Status::Warn,
        "replica",
        format!("{found}, filters {}", filters.join(", ")),
        "a replica without replication filters",
        "its GTID position passes transactions whose rows the filters dropped, so it confirms \
         nothing and is never streamed from: remove the filters, or the server from mysql.url",
    );
}

/// Connects to a replica and reads what it is.
async fn describe(opts: &Opts) -> Result<Replica, String> {
    let mut conn = source_server::connect(opts)
        .await
        .map_err(|e| e.to_string())?;
    let described = read(&mut conn).await.map_err(|e| e.to_string());
    let _ = conn.disconnect().await;
    described
}

async fn read(conn: &mut Conn) -> Result<Replica, Box<dyn std::error::Error>> {
    let info: ServerInfo = source_server::server_info(conn).await?;
    let read_only: Option<i64> = conn.query_first("SELECT @@global.read_only").await?;
    let (applied, status, lag_column) = match info.flavor {
        Flavor::MariaDb => (
            "@@gtid_slave_pos",
            "SHOW SLAVE STATUS",
            "Seconds_Behind_Master",
        ),
        Flavor::MySql => (
            "@@gtid_executed",
            "SHOW REPLICA STATUS",
            "Seconds_Behind_Source",
        ),
    };
    let applied: Option<String> = conn.query_first(format!("SELECT {applied}")).await?;
    // Reading it takes SLAVE MONITOR (MariaDB) or REPLICATION CLIENT
    // (MySQL); without it the rest is still worth showing.
    let mut asked = conn.query_first(status).await;
    if matches!(&asked, Err(mysql_async::Error::Server(e)) if e.code == 1064) {
        // MySQL before 8.0.22 knows only the older name.
        asked = conn.query_first("SHOW SLAVE STATUS").await;
    }
    let status: Option<Option<Row>> = match asked {
        Ok(row) => Some(row),
        Err(mysql_async::Error::Server(e)) if e.code == 1227 => None,
        Err(e) => return Err(e.into()),
    };
    let column = |row: &Row, name: &str| -> Option<String> {
        row.columns_ref()
            .iter()
            .position(|c| c.name_str() == name)
            .and_then(|i| row.get::<Option<String>, _>(i).flatten())
    };
    let (replicating, lag_seconds) = match &status {
        None => (None, None),
        Some(None) => (Some(false), None),
        Some(Some(row)) => {
            let io = column(row, "Slave_IO_Running").or_else(|| column(row, "Replica_IO_Running"));
            let sql =
                column(row, "Slave_SQL_Running").or_else(|| column(row, "Replica_SQL_Running"));
            let running = io.as_deref() == Some("Yes") && sql.as_deref() == Some("Yes");
            let lag = column(row, lag_column).or_else(|| column(row, "Seconds_Behind_Master"));
            (Some(running), lag.and_then(|s| s.parse().ok()))
        }
    };
    let filters = source_server::replication_filters(conn)
        .await?
        .unwrap_or_default();
    Ok(Replica {
        filters,
        read_only: read_only.unwrap_or(0) != 0,
        applied: applied.unwrap_or_default(),
        replicating,
        lag_seconds,
    })
}
