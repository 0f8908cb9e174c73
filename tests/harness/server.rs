//! A MySQL-family server for the tests: MariaDB or Oracle MySQL (see
//! [`Flavor`]), each with its own datadir, port and binlog settings, and the
//! same helpers for both.

mod flavor;
mod replication;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use tokio::sync::OnceCell;

use crate::{free_port, process};

pub use flavor::{mysql_root, Flavor};

/// The forwarder's account: exactly the documented minimal grants. On
/// MySQL its password uses the server's default plugin,
/// caching_sha2_password.
pub const FORWARDER_USER: &str = "forwarder";
pub const FORWARDER_PASSWORD: &str = "s3cret-pw";

pub struct DbServer {
    pub flavor: Flavor,
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra_args: Vec<String>,
}

impl DbServer {
    /// One server of `flavor` shared by the tests of a test binary; each
    /// test uses its own schema.
    pub async fn shared(flavor: Flavor) -> &'static DbServer {
        static MARIADB: OnceCell<DbServer> = OnceCell::const_new();
        static MYSQL: OnceCell<DbServer> = OnceCell::const_new();
        let cell = match flavor {
            Flavor::MariaDb => &MARIADB,
            Flavor::MySql => &MYSQL,
        };
        cell.get_or_init(|| DbServer::start(flavor, &[])).await
    }

    /// A dedicated server, for tests that restart or reconfigure it.
    pub async fn start(flavor: Flavor, extra_args: &[&str]) -> DbServer {
        let dir = flavor.scratch_dir();
        flavor.create_datadir(dir.path());
        let mut db = DbServer {
            flavor,
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
        // Reading a replica's filters: MariaDB's REPLICATION CLIENT does
        // not cover it (MySQL's does), and a replica whose filters cannot
        // be read confirms nothing and is not streamed from.
        if flavor == Flavor::MariaDb {
            conn.query_drop(format!(
                "GRANT SLAVE MONITOR ON *.* TO '{FORWARDER_USER}'@'%'"
            ))
            .await
            .unwrap();
        }
        db
    }

    async fn launch(&mut self) {
        let dir = self.dir.path();
        let command = self.flavor.server(dir, self.port, &self.extra_args);
        self.child = Some(process::spawn(command).expect("the server starts"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(conn) = Conn::new(self.root_opts()).await {
                drop(conn.disconnect().await);
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                panic!("{} exited with {status}:\n{log}", self.flavor);
            }
            assert!(
                Instant::now() < deadline,
                "{} did not accept connections in 60 s",
                self.flavor
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

    /// Stops the server and starts it again on the same data, on another
    /// port (as a recreated container gets another address).
    pub async fn move_to_another_port(&mut self) {
        self.stop();
        self.port = free_port();
        self.launch().await;
    }

    /// Runs `statements` as root, in order; panics naming one that fails.
    pub async fn execute(&self, statements: &[String]) {
        let mut conn = self.root().await;
        for statement in statements {
            conn.query_drop(statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
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

    /// MySQL's `@@server_uuid`, the source of the GTIDs it writes.
    pub async fn server_uuid(&self) -> String {
        let mut conn = self.root().await;
        conn.query_first("SELECT @@server_uuid")
            .await
            .unwrap()
            .unwrap()
    }

    /// The authentication plugin of `user`@'%'.
    pub async fn account_plugin(&self, user: &str) -> String {
        let mut conn = self.root().await;
        conn.query_first(format!(
            "SELECT plugin FROM mysql.user WHERE user = '{user}' AND host = '%'"
        ))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no account {user}@'%'"))
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
            // `Binlog Dump GTID` on MySQL when the dump asks by GTID.
            .query(
                "SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'",
            )
            .await
            .unwrap();
        for id in &ids {
            conn.query_drop(format!("KILL {id}")).await.unwrap();
        }
        ids.len()
    }

    /// The types of the binlog events the server wrote from `from` on, to
    /// the end of that file, in order (`SHOW BINLOG EVENTS`).
    pub async fn binlog_event_types_since(
        &self,
        from: &outbox_core::BinlogPosition,
    ) -> Vec<String> {
        let mut conn = self.root().await;
        let rows: Vec<mysql_async::Row> = conn
            .query(format!(
                "SHOW BINLOG EVENTS IN '{}' FROM {}",
                from.file, from.pos
            ))
            .await
            .unwrap();
        rows.iter()
            .map(|row| row.get::<String, _>("Event_type").unwrap())
            .collect()
    }

    /// The binlog position the server is writing at now.
    pub async fn position(&self) -> outbox_core::BinlogPosition {
        let mut conn = self.root().await;
        let row: mysql_async::Row = conn
            .query_first(self.flavor.binlog_status_statement())
            .await
            .unwrap()
            .unwrap();
        outbox_core::BinlogPosition::new(
            row.get::<String, _>(0).unwrap(),
            row.get::<u64, _>(1).unwrap(),
        )
    }
}

impl Drop for DbServer {
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
