//! MariaDB's GTID position: per domain, the server id and sequence number
//! of its last transaction (`gtid_binlog_pos`'s `domain-server-seq,…`);
//! and its GTID state: per domain *and server*, the last sequence number
//! (`gtid_binlog_state`, a binlog's GTID list).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{parse_error, ParseGtidError};

/// MariaDB's GTID position: per domain, the last GTID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MariaDbGtidPos(BTreeMap<u32, (u32, u64)>);

impl MariaDbGtidPos {
    pub fn apply(&mut self, domain: u32, server: u32, seq: u64) {
        self.0.insert(domain, (server, seq));
    }

    /// Domain → (server, seq).
    pub fn domains(&self) -> &BTreeMap<u32, (u32, u64)> {
        &self.0
    }

    /// Whether a replica at this position (its `gtid_slave_pos`) has
    /// applied transaction `seq` of `server` in `domain`: a GTID of the same
    /// server at or past it in the domain. Sequence numbers alone do not
    /// tell: a new primary numbers on from where it stood, so after a
    /// failover its replicas reach the numbers of transactions the old
    /// primary took with it. A position of another server in the domain is
    /// taken as not applied.
    pub fn has_applied(&self, domain: u32, server: u32, seq: u64) -> bool {
        self.0
            .get(&domain)
            .is_some_and(|&(at_server, at_seq)| at_server == server && at_seq >= seq)
    }

    /// [`MariaDbGtidPos::has_applied`] of the last transaction of every
    /// domain of `wanted`.
    pub fn has_applied_all(&self, wanted: &MariaDbGtidPos) -> bool {
        wanted
            .0
            .iter()
            .all(|(&domain, &(server, seq))| self.has_applied(domain, server, seq))
    }
}

impl FromStr for MariaDbGtidPos {
    type Err = ParseGtidError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let mut pos = MariaDbGtidPos::default();
        for gtid in input.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            let mut parts = gtid.split('-');
            let mut number = || {
                parts
                    .next()
                    .and_then(|p| p.parse::<u64>().ok())
                    .ok_or_else(|| parse_error(input, "expected domain-server-seq numbers"))
            };
            let (domain, server, seq) = (number()?, number()?, number()?);
            if parts.next().is_some() {
                return Err(parse_error(input, "expected domain-server-seq numbers"));
            }
            let (Ok(domain), Ok(server)) = (u32::try_from(domain), u32::try_from(server)) else {
                return Err(parse_error(input, "domain and server ids are 32-bit"));
            };
            if pos.0.insert(domain, (server, seq)).is_some() {
                return Err(parse_error(input, "a domain appears twice"));
            }
        }
        Ok(pos)
    }
}

impl fmt::Display for MariaDbGtidPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (domain, (server, seq)) in &self.0 {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{domain}-{server}-{seq}")?;
        }
        Ok(())
    }
}

impl TryFrom<String> for MariaDbGtidPos {
    type Error = ParseGtidError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<MariaDbGtidPos> for String {
    fn from(pos: MariaDbGtidPos) -> String {
        pos.to_string()
    }
}

/// A MariaDB GTID *state* (`gtid_binlog_state`, a binlog's GTID list): per
/// domain and server id, the last sequence number, `d-s-n,…` (a domain may
/// appear once per server id). The one parser of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MariaDbGtidState(Vec<(u32, u32, u64)>);

impl MariaDbGtidState {
    /// Whether the server logged transaction `seq` of `server` in `domain`:
    /// its last one of that server in that domain is at or past it.
    pub fn has_logged(&self, domain: u32, server: u32, seq: u64) -> bool {
        self.0
            .iter()
            .any(|&(d, s, n)| d == domain && s == server && n >= seq)
    }

    /// (domain, server, last sequence number), as the server lists them.
    pub fn entries(&self) -> &[(u32, u32, u64)] {
        &self.0
    }
}

impl FromStr for MariaDbGtidState {
    type Err = ParseGtidError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        // Each entry is a GTID position of its own.
        input
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(|gtid| {
                let pos: MariaDbGtidPos = gtid.parse()?;
                let (&domain, &(server, seq)) = pos
                    .domains()
                    .iter()
                    .next()
                    .ok_or_else(|| parse_error(input, "expected domain-server-seq numbers"))?;
                Ok((domain, server, seq))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(MariaDbGtidState)
    }
}

impl fmt::Display for MariaDbGtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries: Vec<String> = self
            .0
            .iter()
            .map(|(d, s, n)| format!("{d}-{s}-{n}"))
            .collect();
        f.write_str(&entries.join(","))
    }
}
