//! Test harness: real servers as child processes on free loopback ports in
//! temporary directories, and helpers to write outbox rows and read back what
//! reached the broker.
//!
//! Every child process is spawned from one long-lived thread with
//! `PR_SET_PDEATHSIG`, so it dies with the test process even when a test
//! panics or a static server is never dropped.

pub mod broker;
pub mod config;
pub mod forwarder;
pub mod http;
pub mod inbox;
pub mod mariadb;
mod process;
pub mod prometheus;
pub mod slow_link;
pub mod tls;
pub mod workload;

pub use broker::{Broker, Record};
pub use config::{replaced, ForwarderToml};
pub use forwarder::{ForwarderProcess, ForwarderSetup};
pub use mariadb::MariaDb;

use std::time::Duration;

/// Every await on a server is bounded by this unless a test says otherwise.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A name unique to this test run, for schemas, topics and groups.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}
