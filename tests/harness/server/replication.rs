//! GTID replication between test servers of one flavor: replicas, a
//! promotion, a former primary brought back. MariaDB replicates from a
//! `gtid_slave_pos`; MySQL by `SOURCE_AUTO_POSITION` from its
//! `gtid_executed`, with the 8.4+ statement names (`CHANGE REPLICATION
//! SOURCE`, `START REPLICA`, `RESET BINARY LOGS AND GTIDS`).

use std::time::Duration;

use mysql_async::prelude::Queryable;

use super::{DbServer, Flavor};

impl DbServer {
    /// A second server replicating this one by GTID, with its own
    /// `server_id`, binlog file names (`replica-bin.*`, so its positions
    /// differ from the primary's), its replicated transactions in its own
    /// binlog, and `read_only`. It starts from the primary's current GTID
    /// position, with its own binlog holding only what it replicates from
    /// there.
    pub async fn start_replica(&self) -> DbServer {
        self.start_replica_with_id(2).await
    }

    /// [`DbServer::start_replica`] with `server_id` (a chain of replicas, or
    /// several of one primary, needs one each).
    pub async fn start_replica_with_id(&self, server_id: u32) -> DbServer {
        let server_id = format!("--server-id={server_id}");
        let log_updates = match self.flavor {
            Flavor::MariaDb => "--log-slave-updates=ON",
            Flavor::MySql => "--log-replica-updates=ON",
        };
        let replica = DbServer::start(
            self.flavor,
            &[
                &server_id,
                "--log-bin=replica-bin",
                log_updates,
                "--read-only=ON",
            ],
        )
        .await;
        let position = self.gtid_binlog_pos().await;
        let mut statements = replica.binlog_started_at(&position);
        statements.push(self.as_primary("slave_pos"));
        statements.push(replica.replication("START"));
        replica.execute(&statements).await;
        replica
    }

    /// Statements that empty this server's binlog and make its GTID state
    /// `position` (as if it had applied exactly that).
    fn binlog_started_at(&self, position: &str) -> Vec<String> {
        match self.flavor {
            Flavor::MariaDb => vec![
                "RESET MASTER".to_string(),
                format!("SET GLOBAL gtid_binlog_state = '{position}'"),
                format!("SET GLOBAL gtid_slave_pos = '{position}'"),
            ],
            Flavor::MySql => vec![
                "RESET BINARY LOGS AND GTIDS".to_string(),
                format!("SET GLOBAL gtid_purged = '{position}'"),
            ],
        }
    }

    /// `START`, `STOP`, `RESET ... ALL` of this server's replication.
    fn replication(&self, verb: &str) -> String {
        let noun = match self.flavor {
            Flavor::MariaDb => "SLAVE",
            Flavor::MySql => "REPLICA",
        };
        match verb {
            "RESET" => format!("RESET {noun} ALL"),
            verb => format!("{verb} {noun}"),
        }
    }

    /// The statement that makes a server replicate from this one by GTID.
    /// On MariaDB from the replica's `use_gtid` position (`slave_pos`,
    /// `current_pos`); on MySQL from its `gtid_executed`, the root account's
    /// caching_sha2_password exchanged with the source's RSA key.
    fn as_primary(&self, use_gtid: &str) -> String {
        match self.flavor {
            Flavor::MariaDb => format!(
                "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
                 MASTER_USER = 'root', MASTER_USE_GTID = {use_gtid}",
                self.port
            ),
            Flavor::MySql => format!(
                "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = {}, \
                 SOURCE_USER = 'root', SOURCE_AUTO_POSITION = 1, GET_SOURCE_PUBLIC_KEY = 1",
                self.port
            ),
        }
    }

    /// Makes this server (a former primary, say) a replica of `primary`,
    /// continuing from its own GTID position, read-only.
    pub async fn replicate_from(&self, primary: &DbServer) {
        self.execute(&[
            "SET GLOBAL read_only = ON".to_string(),
            primary.as_primary("current_pos"),
            self.replication("START"),
        ])
        .await;
    }

    /// The server's GTID position: MariaDB's `gtid_binlog_pos`, MySQL's
    /// `gtid_executed`.
    pub async fn gtid_binlog_pos(&self) -> String {
        let variable = match self.flavor {
            Flavor::MariaDb => "@@gtid_binlog_pos",
            Flavor::MySql => "@@global.gtid_executed",
        };
        let mut conn = self.root().await;
        let position: String = conn
            .query_first(format!("SELECT {variable}"))
            .await
            .unwrap()
            .unwrap();
        // MySQL breaks a long set over lines.
        position.replace('\n', "")
    }

    /// Waits until this replica has applied everything up to `position`
    /// (a GTID position of its primary).
    pub async fn wait_for_gtid(&self, position: &str, timeout: Duration) {
        let function = match self.flavor {
            Flavor::MariaDb => "MASTER_GTID_WAIT",
            Flavor::MySql => "WAIT_FOR_EXECUTED_GTID_SET",
        };
        let mut conn = self.root().await;
        let waited: Option<i64> = conn
            .query_first(format!(
                "SELECT {function}('{position}', {})",
                timeout.as_secs()
            ))
            .await
            .unwrap();
        assert_eq!(
            waited,
            Some(0),
            "the replica reached {position} in {timeout:?}"
        );
    }

    /// What the server has applied as a replica: MariaDB's
    /// `gtid_slave_pos`; on MySQL its `gtid_executed` (a replica writes
    /// nothing of its own).
    pub async fn gtid_slave_pos(&self) -> String {
        if self.flavor == Flavor::MySql {
            return self.gtid_binlog_pos().await;
        }
        let mut conn = self.root().await;
        conn.query_first("SELECT @@gtid_slave_pos")
            .await
            .unwrap()
            .unwrap_or_default()
    }

    /// Waits until this replica's applied position stops moving (it has
    /// applied what it received), and returns it.
    pub async fn settled_gtid_slave_pos(&self) -> String {
        let mut last = self.gtid_slave_pos().await;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = self.gtid_slave_pos().await;
            if now == last {
                return now;
            }
            last = now;
        }
    }

    /// Makes this replica follow `primary` from where it stands (its
    /// `gtid_slave_pos`): a replica of a former primary moved under the new
    /// one.
    pub async fn follow(&self, primary: &DbServer) {
        self.execute(&[
            self.replication("STOP"),
            primary.as_primary("slave_pos"),
            self.replication("START"),
        ])
        .await;
    }

    /// A crashed former primary brought back as a replica of `primary`, as
    /// an operator rebuilds one: started again, the rows of `schema` that
    /// only it has (transactions it committed and never sent) removed,
    /// its binlog started afresh at `primary`'s position, then replicating.
    pub async fn rebuild_as_replica_of(&mut self, primary: &DbServer, schema: &str) {
        if self.child.is_none() {
            self.launch().await;
        }
        let position = primary.gtid_binlog_pos().await;
        let keep = |table: &str, column: &str| format!("SELECT {column} FROM `{schema}`.{table}");
        let mut on_primary = primary.root().await;
        let events: Vec<String> = on_primary
            .query(keep("outbox_event", "event_id"))
            .await
            .unwrap();
        let orders: Vec<u64> = on_primary.query(keep("orders", "order_id")).await.unwrap();
        let listed = |values: Vec<String>| {
            if values.is_empty() {
                "NULL".to_string()
            } else {
                values.join(",")
            }
        };
        let events = listed(events.iter().map(|id| format!("'{id}'")).collect());
        let orders = listed(orders.iter().map(u64::to_string).collect());
        let mut statements = vec![
            "SET GLOBAL read_only = ON".to_string(),
            self.replication("STOP"),
            self.replication("RESET"),
            "SET SESSION sql_log_bin = 0".to_string(),
            format!("DELETE FROM `{schema}`.outbox_event WHERE event_id NOT IN ({events})"),
            format!("DELETE FROM `{schema}`.orders WHERE order_id NOT IN ({orders})"),
        ];
        statements.extend(self.binlog_started_at(&position));
        statements.push(primary.as_primary("slave_pos"));
        statements.push(self.replication("START"));
        self.execute(&statements).await;
    }

    /// Stops (`false`) or starts (`true`) this replica's I/O thread: what
    /// the primary commits meanwhile does not reach it.
    pub async fn receive_from_primary(&self, receive: bool) {
        let verb = if receive { "START" } else { "STOP" };
        self.execute(&[format!("{} IO_THREAD", self.replication(verb))])
            .await;
    }

    /// Makes this replica the primary: replication stopped and forgotten,
    /// writes accepted.
    pub async fn promote(&self) {
        self.execute(&[
            self.replication("STOP"),
            self.replication("RESET"),
            "SET GLOBAL read_only = OFF".to_string(),
        ])
        .await;
    }
}
