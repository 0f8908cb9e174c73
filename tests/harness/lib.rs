//! Test harness: real servers as child processes on free loopback ports in
//! temporary directories, and helpers to write outbox rows and read back what
//! reached the broker.
//!
//! Every child process is spawned from one long-lived thread with
//! `PR_SET_PDEATHSIG`, so it dies with the test process even when a test
//! panics or a static server is never dropped.

pub mod broker;
pub mod config;
pub mod container;
pub mod forwarder;
pub mod http;
pub mod inbox;
pub mod kube;
mod process;
pub mod prometheus;
pub mod server;
pub mod slow_link;
pub mod tls;
pub mod workload;

pub use broker::{Broker, Record};
pub use config::{replaced, ForwarderToml};
pub use forwarder::{ForwarderProcess, ForwarderSetup};
pub use server::{DbServer, Flavor};

use std::time::Duration;

/// One test per [`Flavor`] for each scenario named, an `async fn(Flavor)`
/// in scope: `<scenario>::mariadb` and `<scenario>::mysql`, so
/// `cargo test --test <suite> -- ::mysql` runs a suite's MySQL half.
#[macro_export]
macro_rules! on_both_flavors {
    ($($scenario:ident),+ $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mariadb() {
                super::$scenario($crate::Flavor::MariaDb).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                super::$scenario($crate::Flavor::MySql).await
            }
        }
    )+};
}

/// Every await on a server is bounded by this unless a test says otherwise.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A free TCP port on 127.0.0.1, never one this process was given before:
/// a port is free when asked for, not when its user binds it, and two
/// tests of one process could otherwise be given the same one.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// A name unique to this test run, for schemas, topics and groups.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A temporary directory `<tmp>/<prefix>XXXX` owned by this test process
/// (its pid in `owner.pid`). Servers shared by a test binary live in
/// statics that are never dropped, and a killed run drops nothing, so their
/// directories would stay behind: the first call of a process removes the
/// directories of `prefix` whose owner has exited.
pub fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    scratch_dir_in(&std::env::temp_dir(), prefix)
}

/// [`scratch_dir`] under `parent` (a server in its own root needs its
/// files inside that root).
pub fn scratch_dir_in(parent: &std::path::Path, prefix: &str) -> tempfile::TempDir {
    static SWEPT: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut swept = SWEPT.lock().unwrap();
    let swept_key = parent.join(prefix);
    if !swept.contains(&swept_key) {
        remove_orphans(parent, prefix);
        swept.push(swept_key);
    }
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .unwrap();
    std::fs::write(dir.path().join("owner.pid"), std::process::id().to_string()).unwrap();
    dir
}

/// Removes `<parent>/<prefix>*` directories whose `owner.pid` names a
/// process that no longer exists (directories without one are left alone).
fn remove_orphans(parent: &std::path::Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let owner = std::fs::read_to_string(entry.path().join("owner.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<i32>().ok());
        let Some(pid) = owner else { continue };
        // Signal 0 checks for existence; ESRCH: no such process.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
