//! A MariaDB server from Debian's packages, with its own datadir, port and
//! binlog settings.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use tokio::sync::OnceCell;

use crate::{free_port, process};

/// The settings the forwarder requires.
pub const BINLOG_SETTINGS: [&str; 4] = [
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--log-bin-compress=OFF",
];

/// The forwarder's account: exactly the documented minimal grants.
pub const FORWARDER_USER: &str = "forwarder";
pub const FORWARDER_PASSWORD: &str = "s3cret-pw";

pub struct MariaDb {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra_args: Vec<String>,
}

fn binary(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"] {
        let path = Path::new(dir).join(name);
        if path.exists() {
            return path;
        }
    }
    panic!("{name} not found: install mariadb-server (apt-get install mariadb-server)");
}

impl MariaDb {
    /// One server shared by the tests of a test binary; each test uses its
    /// own schema.
    pub async fn shared() -> &'static MariaDb {
        static SHARED: OnceCell<MariaDb> = OnceCell::const_new();
        SHARED.get_or_init(|| MariaDb::start(&[])).await
    }

    /// A dedicated server, for tests that restart or reconfigure it.
    pub async fn start(extra_args: &[&str]) -> MariaDb {
        let dir = crate::scratch_dir("mariadb");
        // The bootstrap has been seen to fail once in a while under load;
        // it is retried on a fresh data directory, and its output kept.
        let data = dir.path().join("data");
        let log = dir.path().join("install-db.log");
        let mut attempts = 0;
        loop {
            attempts += 1;
            let _ = std::fs::remove_dir_all(&data);
            let status = Command::new(binary("mariadb-install-db"))
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .args([
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--user=root",
                ])
                .stdout(std::fs::File::create(&log).unwrap())
                .stderr(Stdio::from(
                    std::fs::File::options().append(true).open(&log).unwrap(),
                ))
                .status()
                .expect("mariadb-install-db runs");
            if status.success() {
                break;
            }
            let output = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(
                attempts < 3,
                "mariadb-install-db failed {attempts} times ({status}):\n{output}"
            );
            eprintln!("mariadb-install-db failed ({status}), retrying:\n{output}");
        }
        let mut db = MariaDb {
            port: free_port(),
            dir,
            child: None,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        };
        db.launch().await;
        let mut conn = db.root().await;
        conn.query_drop(format!(
            "CREATE USER '{FORWARDER_USER}'@'%' IDENTIFIED BY '{FORWARDER_PASSWORD}'"
        ))
        .await
        .unwrap();
        conn.query_drop(format!(
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{FORWARDER_USER}'@'%'"
        ))
        .await
        .unwrap();
        db
    }

    async fn launch(&mut self) {
        let dir = self.dir.path();
        let mut command = Command::new(binary("mariadbd"));
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
            // Its own temporary tables: nothing else on the machine touches them.
            .arg(format!("--tmpdir={}", dir.display()))
            .arg(format!("--log-error={}", dir.join("error.log").display()))
            .arg(format!(
                "--log-bin={}",
                dir.join("data").join("binlog").display()
            ))
            .arg(format!("--port={}", self.port))
            .args([
                "--bind-address=127.0.0.1",
                "--user=root",
                "--server-id=1",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=128M",
                "--innodb-flush-log-at-trx-commit=2",
                "--sync-binlog=0",
                "--max-allowed-packet=64M",
                "--character-set-server=utf8mb4",
            ])
            .args(BINLOG_SETTINGS)
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(process::spawn(command).expect("mariadbd starts"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(conn) = Conn::new(self.root_opts()).await {
                drop(conn.disconnect().await);
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                panic!("mariadbd exited with {status}:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "mariadbd did not accept connections in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the server (SIGTERM, clean) and starts it again on the same port and data.
    pub async fn restart(&mut self) {
        self.stop();
        self.launch().await;
    }

    /// Stops the server and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::signal(child.id(), libc::SIGTERM);
            let _ = child.wait();
        }
    }

    /// Kills the server with SIGKILL (a crash: no shutdown, no last words to
    /// its replicas) and waits for it to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::signal(child.id(), libc::SIGKILL);
            let _ = child.wait();
        }
    }

    /// A second server replicating this one by GTID, with its own
    /// `server_id`, binlog file names (`replica-bin.*`, so its positions
    /// differ from the primary's) and `log_slave_updates`, `read_only`.
    /// It starts from the primary's current GTID position, with its own
    /// binlog holding only what it replicates from there.
    pub async fn start_replica(&self) -> MariaDb {
        self.start_replica_with_id(2).await
    }

    /// [`MariaDb::start_replica`] with `server_id` (a chain of replicas, or
    /// several of one primary, needs one each).
    pub async fn start_replica_with_id(&self, server_id: u32) -> MariaDb {
        let server_id = format!("--server-id={server_id}");
        let replica = MariaDb::start(&[
            &server_id,
            "--log-bin=replica-bin",
            "--log-slave-updates=ON",
            "--read-only=ON",
        ])
        .await;
        let position = self.gtid_binlog_pos().await;
        replica
            .execute(&[
                "RESET MASTER".to_string(),
                format!("SET GLOBAL gtid_binlog_state = '{position}'"),
                format!("SET GLOBAL gtid_slave_pos = '{position}'"),
                self.as_primary("slave_pos"),
                "START SLAVE".to_string(),
            ])
            .await;
        replica
    }

    /// `CHANGE MASTER TO` this server, replicating from its `use_gtid`
    /// position (`slave_pos`, `current_pos`).
    fn as_primary(&self, use_gtid: &str) -> String {
        format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = 'root', MASTER_USE_GTID = {use_gtid}",
            self.port
        )
    }

    /// Runs `statements` as root, in order; panics naming one that fails.
    async fn execute(&self, statements: &[String]) {
        let mut conn = self.root().await;
        for statement in statements {
            conn.query_drop(statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
    }

    /// Makes this server (a former primary, say) a replica of `primary`,
    /// continuing from its own GTID position, read-only.
    pub async fn replicate_from(&self, primary: &MariaDb) {
        self.execute(&[
            "SET GLOBAL read_only = ON".to_string(),
            primary.as_primary("current_pos"),
            "START SLAVE".to_string(),
        ])
        .await;
    }

    /// Stops the server and starts it again on the same data, on another
    /// port (as a recreated container gets another address).
    pub async fn move_to_another_port(&mut self) {
        self.stop();
        self.port = free_port();
        self.launch().await;
    }

    /// The server's `gtid_binlog_pos`.
    pub async fn gtid_binlog_pos(&self) -> String {
        let mut conn = self.root().await;
        conn.query_first("SELECT @@gtid_binlog_pos")
            .await
            .unwrap()
            .unwrap()
    }

    /// Waits until this replica has applied everything up to `position`
    /// (a GTID position of its primary).
    pub async fn wait_for_gtid(&self, position: &str, timeout: Duration) {
        let mut conn = self.root().await;
        let waited: Option<i64> = conn
            .query_first(format!(
                "SELECT MASTER_GTID_WAIT('{position}', {})",
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

    /// The server's `gtid_slave_pos`: what it has applied as a replica.
    pub async fn gtid_slave_pos(&self) -> String {
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
    pub async fn follow(&self, primary: &MariaDb) {
        self.execute(&[
            "STOP SLAVE".to_string(),
            primary.as_primary("slave_pos"),
            "START SLAVE".to_string(),
        ])
        .await;
    }

    /// A crashed former primary brought back as a replica of `primary`, as
    /// an operator rebuilds one: started again, the rows of `schema` that
    /// only it has (transactions it committed and never sent) removed,
    /// its binlog started afresh at `primary`'s position, then replicating.
    pub async fn rebuild_as_replica_of(&mut self, primary: &MariaDb, schema: &str) {
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
        self.execute(&[
            "SET GLOBAL read_only = ON".to_string(),
            "STOP SLAVE".to_string(),
            "RESET SLAVE ALL".to_string(),
            "SET SESSION sql_log_bin = 0".to_string(),
            format!("DELETE FROM `{schema}`.outbox_event WHERE event_id NOT IN ({events})"),
            format!("DELETE FROM `{schema}`.orders WHERE order_id NOT IN ({orders})"),
            "RESET MASTER".to_string(),
            format!("SET GLOBAL gtid_binlog_state = '{position}'"),
            format!("SET GLOBAL gtid_slave_pos = '{position}'"),
            primary.as_primary("slave_pos"),
            "START SLAVE".to_string(),
        ])
        .await;
    }

    /// Stops (`false`) or starts (`true`) this replica's I/O thread: what
    /// the primary commits meanwhile does not reach it.
    pub async fn receive_from_primary(&self, receive: bool) {
        let statement = if receive {
            "START SLAVE IO_THREAD"
        } else {
            "STOP SLAVE IO_THREAD"
        };
        self.execute(&[statement.to_string()]).await;
    }

    /// Makes this replica the primary: replication stopped and forgotten,
    /// writes accepted.
    pub async fn promote(&self) {
        self.execute(&[
            "STOP SLAVE".to_string(),
            "RESET SLAVE ALL".to_string(),
            "SET GLOBAL read_only = OFF".to_string(),
        ])
        .await;
    }

    fn root_opts(&self) -> Opts {
        Opts::from_url(&format!("mysql://root@127.0.0.1:{}", self.port)).unwrap()
    }

    pub async fn root(&self) -> Conn {
        tokio::time::timeout(crate::TIMEOUT, Conn::new(self.root_opts()))
            .await
            .expect("connect in time")
            .expect("root connects")
    }

    /// URL of the forwarder's own account.
    pub fn forwarder_url(&self) -> String {
        format!(
            "mysql://{FORWARDER_USER}:{FORWARDER_PASSWORD}@127.0.0.1:{}",
            self.port
        )
    }

    /// Creates `schema` with the migrations applied, plus an `orders` table.
    pub async fn create_schema(&self, schema: &str) -> Conn {
        let mut conn = self.root().await;
        conn.query_drop(format!("CREATE DATABASE `{schema}`"))
            .await
            .unwrap();
        conn.query_drop(format!("USE `{schema}`")).await.unwrap();
        for statement in migration_statements() {
            conn.query_drop(statement).await.unwrap();
        }
        conn
    }

    /// Kills the server's binlog dump threads (the forwarder's connection).
    /// Returns how many it killed.
    pub async fn kill_dump_threads(&self) -> usize {
        let mut conn = self.root().await;
        let ids: Vec<u64> = conn
            .query("SELECT id FROM information_schema.processlist WHERE command = 'Binlog Dump'")
            .await
            .unwrap();
        for id in &ids {
            conn.query_drop(format!("KILL {id}")).await.unwrap();
        }
        ids.len()
    }

    /// The binlog position the server is writing at now.
    pub async fn position(&self) -> outbox_core::BinlogPosition {
        let mut conn = self.root().await;
        let row: mysql_async::Row = conn
            .query_first("SHOW MASTER STATUS")
            .await
            .unwrap()
            .unwrap();
        outbox_core::BinlogPosition::new(
            row.get::<String, _>(0).unwrap(),
            row.get::<u64, _>(1).unwrap(),
        )
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The statements of `migrations/*.sql`, in file order.
pub fn migration_statements() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let sql: Vec<String> = std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .map(str::to_owned)
                .collect();
            sql.join("\n")
                .split(';')
                .filter(|s| !s.trim().is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}
