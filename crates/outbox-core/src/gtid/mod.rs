//! GTID state: which transactions of the primary's history a checkpoint
//! covers, in a form every server of a replication topology understands
//! (unlike `file:pos`, which means something only on the server that wrote
//! it).
//!
//! - MariaDB: a GTID position, per replication domain the last transaction
//!   applied, `domain-server-seq` (e.g. `0-1-100,1-2-5`).
//! - MySQL: a GTID set, per source `server_uuid` the intervals of
//!   transaction numbers applied (e.g. `3e11fa47-…:1-5:7-9`); since 8.3 also
//!   per (uuid, tag) for tagged transactions (`3e11fa47-…:1-5:tag_a:1-3`).
//!
//! Two questions, each with its own words:
//! - **contains / covers**: whether transactions are at or before a state
//!   in the history's order, the question of a checkpoint (MariaDB: within
//!   a domain, sequence numbers grow whichever server logged them);
//! - **has applied**: whether a replica standing at a position has those
//!   very transactions, the question of the replica gate (MariaDB: a GTID
//!   of the same server at or past them in their domain, since a new
//!   primary numbers on from where it stood; [`MariaDbGtidState::has_logged`]
//!   asks the same of a server's `gtid_binlog_state`).
//!
//! On MySQL both are set membership. Each server kind's texts have one
//! parser: [`MariaDbGtidPos`] (`gtid_binlog_pos`, `gtid_slave_pos`),
//! [`MariaDbGtidState`] (`gtid_binlog_state`, a GTID list event),
//! [`MySqlGtidSet`] (`gtid_executed`, `gtid_purged`).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

mod mariadb;
mod mysql;

pub use mariadb::{MariaDbGtidPos, MariaDbGtidState};
pub use mysql::{GtidTag, MySqlGtidSet};

/// One transaction's global id, as its GTID event names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gtid {
    MariaDb {
        domain: u32,
        server: u32,
        seq: u64,
    },
    /// `uuid:gno`, or `uuid:tag:gno` (MySQL 8.3+, a GTID_TAGGED_LOG_EVENT).
    /// The uuid is shared: a server's transactions all carry the same.
    MySql {
        uuid: Arc<str>,
        tag: Option<GtidTag>,
        gno: u64,
    },
}

impl fmt::Display for Gtid {
    /// `domain-server-seq` (MariaDB), `uuid:gno` or `uuid:tag:gno` (MySQL).
    /// Numbers are written with `itoa`: every transaction's GTID is written
    /// out, for its messages' headers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut number = itoa::Buffer::new();
        match self {
            Gtid::MariaDb {
                domain,
                server,
                seq,
            } => {
                f.write_str(number.format(*domain))?;
                f.write_str("-")?;
                f.write_str(number.format(*server))?;
                f.write_str("-")?;
                f.write_str(number.format(*seq))
            }
            Gtid::MySql { uuid, tag, gno } => {
                f.write_str(uuid)?;
                f.write_str(":")?;
                if let Some(tag) = tag {
                    tag.fmt(f)?;
                    f.write_str(":")?;
                }
                f.write_str(number.format(*gno))
            }
        }
    }
}

impl FromStr for Gtid {
    type Err = ParseGtidError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = input.split(':').collect();
        let gno = |text: &str| {
            text.parse::<u64>()
                .map_err(|_| parse_error(input, "expected a transaction number"))
        };
        match parts.as_slice() {
            [mariadb] => {
                let pos: MariaDbGtidPos = mariadb.parse()?;
                match pos.domains().iter().collect::<Vec<_>>().as_slice() {
                    [(&domain, &(server, seq))] => Ok(Gtid::MariaDb {
                        domain,
                        server,
                        seq,
                    }),
                    _ => Err(parse_error(input, "expected one domain-server-seq")),
                }
            }
            [uuid, n] => Ok(Gtid::MySql {
                uuid: uuid.to_ascii_lowercase().into(),
                tag: None,
                gno: gno(n)?,
            }),
            [uuid, tag, n] => Ok(Gtid::MySql {
                uuid: uuid.to_ascii_lowercase().into(),
                tag: Some(tag.parse()?),
                gno: gno(n)?,
            }),
            _ => Err(parse_error(input, "expected d-s-n, uuid:n or uuid:tag:n")),
        }
    }
}

/// The executed GTID state of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GtidState {
    /// `domain-server-seq,…`, MariaDB's `gtid_binlog_pos` format.
    #[serde(rename = "mariadb")]
    MariaDb(MariaDbGtidPos),
    /// `uuid:interval[:interval…][:tag:interval…],…`, MySQL's
    /// `gtid_executed` format.
    #[serde(rename = "mysql")]
    MySql(MySqlGtidSet),
}

impl GtidState {
    /// The state after transaction `gtid` (of the same flavour) too.
    pub fn apply(&mut self, gtid: &Gtid) {
        match (self, gtid) {
            (
                GtidState::MariaDb(pos),
                Gtid::MariaDb {
                    domain,
                    server,
                    seq,
                },
            ) => pos.apply(*domain, *server, *seq),
            (GtidState::MySql(set), Gtid::MySql { uuid, tag, gno }) => match tag {
                None => set.add(uuid, *gno),
                Some(tag) => set.add_tagged(uuid, tag, *gno),
            },
            // A server of the other family: cannot happen on one stream.
            _ => {}
        }
    }
}

impl GtidState {
    /// Whether transaction `gtid` is at or before this state: on MariaDB,
    /// its domain's sequence number is not past the state's (numbers grow
    /// within a domain, whichever server logged them); on MySQL, it is in
    /// the set.
    pub fn contains(&self, gtid: &Gtid) -> bool {
        match (self, gtid) {
            (GtidState::MariaDb(pos), Gtid::MariaDb { domain, seq, .. }) => pos
                .domains()
                .get(domain)
                .is_some_and(|(_, saved)| seq <= saved),
            (GtidState::MySql(set), Gtid::MySql { uuid, tag, gno }) => {
                set.contains(uuid, tag.as_ref(), *gno)
            }
            _ => false,
        }
    }
}

impl GtidState {
    /// Whether every transaction of `other` is at or before this state
    /// (false across flavours).
    pub fn covers(&self, other: &GtidState) -> bool {
        match (self, other) {
            (GtidState::MariaDb(pos), GtidState::MariaDb(other)) => {
                other.domains().iter().all(|(domain, (_, seq))| {
                    pos.domains()
                        .get(domain)
                        .is_some_and(|(_, saved)| seq <= saved)
                })
            }
            (GtidState::MySql(set), GtidState::MySql(other)) => other.minus(set).is_empty(),
            _ => false,
        }
    }
}

impl GtidState {
    /// Whether a replica at this position has applied transaction `gtid`
    /// (see the module doc: on MariaDB, server-exact; on MySQL, the set
    /// holds it). False across flavours.
    pub fn has_applied(&self, gtid: &Gtid) -> bool {
        match (self, gtid) {
            (
                GtidState::MariaDb(pos),
                Gtid::MariaDb {
                    domain,
                    server,
                    seq,
                },
            ) => pos.has_applied(*domain, *server, *seq),
            (GtidState::MySql(_), Gtid::MySql { .. }) => self.contains(gtid),
            _ => false,
        }
    }

    /// Whether a replica at this position has applied every transaction of
    /// `state` (on MariaDB, the last of each of its domains, server-exact).
    pub fn has_applied_all(&self, state: &GtidState) -> bool {
        match (self, state) {
            (GtidState::MariaDb(pos), GtidState::MariaDb(wanted)) => pos.has_applied_all(wanted),
            (GtidState::MySql(_), GtidState::MySql(_)) => self.covers(state),
            _ => false,
        }
    }
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GtidState::MariaDb(pos) => pos.fmt(f),
            GtidState::MySql(set) => set.fmt(f),
        }
    }
}

/// Why a GTID text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid GTID {input:?}: {reason}")]
pub struct ParseGtidError {
    input: String,
    reason: &'static str,
}

fn parse_error(input: &str, reason: &'static str) -> ParseGtidError {
    ParseGtidError {
        input: input.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests;
