//! What differs between the two server flavors the suite runs on: where the
//! server comes from, how its data directory is made, and the options it
//! starts with.
//!
//! MariaDB comes from this Debian release's packages. Oracle MySQL 9.7 comes
//! from Debian's unstable suite; its libraries are newer than this release's,
//! so it lives in a root of its own (made by `scripts/install-deps.sh`) and
//! runs under `chroot`. A chroot shares the host's network, so the server is
//! reached on 127.0.0.1 as any other; its files live inside the root, and a
//! path the server is given is the path inside it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The server a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// MariaDB from Debian's packages (`mariadb-server`).
    MariaDb,
    /// Oracle MySQL 9.7 LTS from Debian's unstable suite, in its own root.
    MySql,
}

impl std::fmt::Display for Flavor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Flavor::MariaDb => "MariaDB",
            Flavor::MySql => "MySQL",
        })
    }
}

/// The binlog settings the forwarder requires, per flavor. MySQL's GTIDs
/// are on, as in the deployments the failover paths serve; a test that
/// wants them off passes `--gtid-mode=OFF --enforce-gtid-consistency=OFF`
/// (the last of an option wins).
const MARIADB_BINLOG: [&str; 4] = [
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--log-bin-compress=OFF",
];
const MYSQL_BINLOG: [&str; 5] = [
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--gtid-mode=ON",
    "--enforce-gtid-consistency=ON",
];

/// Options both flavors start with: a small, fast, test-sized server.
const COMMON: [&str; 7] = [
    "--bind-address=127.0.0.1",
    "--user=root",
    "--innodb-buffer-pool-size=128M",
    "--innodb-flush-log-at-trx-commit=2",
    "--sync-binlog=0",
    "--max-allowed-packet=64M",
    "--character-set-server=utf8mb4",
];

/// The root MySQL runs in: `OUTBOX_MYSQL_ROOT`, else the cache
/// `scripts/install-deps.sh` fills.
pub fn mysql_root() -> PathBuf {
    let root = std::env::var_os("OUTBOX_MYSQL_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            Path::new(&home).join(".cache/outbox-forwarder/mysql-root")
        });
    assert!(
        root.join("usr/sbin/mysqld").exists(),
        "no MySQL root at {}: run scripts/install-deps.sh",
        root.display()
    );
    root
}

fn mariadb_binary(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"] {
        let path = Path::new(dir).join(name);
        if path.exists() {
            return path;
        }
    }
    panic!("{name} not found: install mariadb-server (apt-get install mariadb-server)");
}

impl Flavor {
    /// A new scratch directory for one server: under the system's temp dir
    /// for MariaDB, inside the root for MySQL.
    pub(super) fn scratch_dir(self) -> tempfile::TempDir {
        match self {
            Flavor::MariaDb => crate::scratch_dir("mariadb"),
            Flavor::MySql => crate::scratch_dir_in(&mysql_root().join("tmp"), "mysql"),
        }
    }

    /// `path` (on the host) as the server sees it.
    pub fn server_path(self, path: &Path) -> PathBuf {
        match self {
            Flavor::MariaDb => path.to_owned(),
            Flavor::MySql => {
                let root = mysql_root();
                Path::new("/").join(
                    path.strip_prefix(&root).unwrap_or_else(|_| {
                        panic!("{} is outside {}", path.display(), root.display())
                    }),
                )
            }
        }
    }

    /// A command running `program` of this flavor (inside the root for MySQL).
    fn command(self, program: &str) -> Command {
        match self {
            Flavor::MariaDb => Command::new(mariadb_binary(program)),
            Flavor::MySql => {
                let mut command = Command::new("chroot");
                command
                    .arg(mysql_root())
                    .arg(format!("/usr/sbin/{program}"));
                command
            }
        }
    }

    /// Makes `dir/data`, a data directory with a root account without
    /// password. MariaDB's is made by `mariadb-install-db`; MySQL's is a
    /// copy of one `mysqld --initialize-insecure` makes once per test
    /// process (seconds each time otherwise), less its `auto.cnf`, so that
    /// each server makes a `server_uuid` of its own.
    pub(super) fn create_datadir(self, dir: &Path) {
        let data = dir.join("data");
        match self {
            Flavor::MariaDb => self.bootstrap(&data, &dir.join("install-db.log")),
            Flavor::MySql => {
                static TEMPLATE: OnceLock<tempfile::TempDir> = OnceLock::new();
                let template = TEMPLATE.get_or_init(|| {
                    let template = self.scratch_dir();
                    let log = template.path().join("install-db.log");
                    self.bootstrap(&template.path().join("data"), &log);
                    template
                });
                let status = Command::new("cp")
                    .arg("-a")
                    .arg(template.path().join("data"))
                    .arg(&data)
                    .status()
                    .expect("cp runs");
                assert!(status.success(), "copying the MySQL template failed");
                std::fs::remove_file(data.join("auto.cnf")).unwrap();
            }
        }
    }

    /// Makes the data directory `data` with the flavor's tool, its output
    /// in `log`. The bootstrap has been seen to fail once in a while under
    /// load; it is retried on a fresh directory, and its output kept.
    fn bootstrap(self, data: &Path, log: &Path) {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let _ = std::fs::remove_dir_all(data);
            let status = self
                .bootstrap_command(data, log)
                .status()
                .expect("the bootstrap runs");
            if status.success() {
                return;
            }
            let output = std::fs::read_to_string(log).unwrap_or_default();
            assert!(
                attempts < 3,
                "{self} bootstrap failed {attempts} times ({status}):\n{output}"
            );
            eprintln!("{self} bootstrap failed ({status}), retrying:\n{output}");
        }
    }

    /// The command that makes an empty data directory `data` with a root
    /// account without password, its output going to `log`.
    fn bootstrap_command(self, data: &Path, log: &Path) -> Command {
        let datadir = format!("--datadir={}", self.server_path(data).display());
        let mut command = match self {
            Flavor::MariaDb => {
                let mut command = self.command("mariadb-install-db");
                command.arg("--no-defaults").arg(datadir).args([
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--user=root",
                ]);
                command
            }
            Flavor::MySql => {
                let mut command = self.command("mysqld");
                command
                    .arg("--no-defaults")
                    .arg("--initialize-insecure")
                    .arg("--user=root")
                    .arg(datadir);
                command
            }
        };
        command
            .stdout(std::fs::File::create(log).unwrap())
            .stderr(Stdio::from(
                std::fs::File::options().append(true).open(log).unwrap(),
            ));
        command
    }

    /// The server command on `dir` (its data in `dir/data`) and `port`.
    ///
    /// Both run as root (`--user=root`): a server that changes its user
    /// loses the death signal the harness gives its children, and would
    /// outlive a test process that never drops it.
    pub(super) fn server(self, dir: &Path, port: u16, extra_args: &[String]) -> Command {
        let at = |name: &str| self.server_path(&dir.join(name)).display().to_string();
        let mut command = self.command(match self {
            Flavor::MariaDb => "mariadbd",
            Flavor::MySql => "mysqld",
        });
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", at("data")))
            .arg(format!("--socket={}", at("mysqld.sock")))
            .arg(format!("--pid-file={}", at("mysqld.pid")))
            // Its own temporary tables: nothing else on the machine touches them.
            .arg(format!("--tmpdir={}", self.server_path(dir).display()))
            .arg(format!("--log-error={}", at("error.log")))
            .arg(format!("--log-bin={}/binlog", at("data")))
            .arg(format!("--port={port}"))
            .arg("--server-id=1")
            .args(COMMON);
        match self {
            // Accounts are matched by address, not by a name looked up.
            Flavor::MariaDb => command.arg("--skip-name-resolve").args(MARIADB_BINLOG),
            // `root@localhost` (all --initialize-insecure makes) matches a
            // connection from 127.0.0.1 through the name it resolves to.
            Flavor::MySql => command
                .args(["--mysqlx=OFF", "--secure-file-priv="])
                .args(MYSQL_BINLOG),
        };
        command
            .args(extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    /// The statement that shows the binlog file and position being written.
    pub fn binlog_status_statement(self) -> &'static str {
        match self {
            Flavor::MariaDb => "SHOW MASTER STATUS",
            // Since 8.4; 9.x no longer knows SHOW MASTER STATUS.
            Flavor::MySql => "SHOW BINARY LOG STATUS",
        }
    }
}
