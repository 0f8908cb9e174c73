//! The preflight: every condition the forwarder depends on, checked one by
//! one and reported as a line (pass / warn / fail, what was found, what is
//! expected, how to fix). `outbox-forwarder check` prints them; `run` runs
//! them at start and refuses to start on a failure. Nothing here prints the
//! MySQL URL or any secret.

//!
//! One file per concern: [`mysql`] (the candidates, the chosen source and
//! TLS), [`server`] (the server's version, settings, durability, GTIDs,
//! the group's lock, the replica id, privileges), [`outbox_tables`],
//! [`checkpoint`] (the stored checkpoint's binlog and its expiry) and
//! [`kafka`].

use std::fmt;

use outbox_checkpoint::Checkpoint;
use outbox_core::ForwarderError;

use crate::config::ForwarderConfig;

mod checkpoint;
mod kafka;
mod kafka_transport;
mod mysql;
mod outbox_tables;
mod replicas;
mod server;
#[cfg(test)]
mod tests;

/// A query a check needed failed: reported as a `mysql queries` line.
#[derive(Debug)]
struct QueryFailed(String);

impl From<mysql_async::Error> for QueryFailed {
    fn from(e: mysql_async::Error) -> Self {
        QueryFailed(e.to_string())
    }
}

impl From<ForwarderError> for QueryFailed {
    fn from(e: ForwarderError) -> Self {
        QueryFailed(e.to_string())
    }
}

impl fmt::Display for QueryFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a check that queries the server returns.
type Checked = Result<(), QueryFailed>;

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

/// Which settings came from the environment rather than the file, each
/// with its variable (values of secrets not shown).
fn overrides(config: &ForwarderConfig, report: &mut Report) {
    let prefix = crate::config::ENV_PREFIX;
    let found = if config.overrides.is_empty() {
        format!("no {prefix}__ variables; every setting from the file")
    } else {
        config
            .overrides
            .iter()
            .map(|o| format!("{} = {} (from {})", o.key, o.shown, o.variable))
            .collect::<Vec<_>>()
            .join(", ")
    };
    report.add(
        Status::Pass,
        "settings from environment",
        found,
        format!("{prefix}__SECTION__KEY variables override the file's keys"),
        "",
    );
}

/// Runs every check. `checkpoint` is the stored one, if any, resumed as
/// `run` would (with `--accept-new-source` when `accept_new_source`).
pub async fn preflight(
    config: &ForwarderConfig,
    checkpoint: Option<&Checkpoint>,
    accept_new_source: bool,
) -> Vec<CheckLine> {
    let mut report = Report(Vec::new());
    overrides(config, &mut report);
    mysql::checks(config, checkpoint, accept_new_source, &mut report).await;
    kafka::checks(config, &mut report).await;
    report.0
}
