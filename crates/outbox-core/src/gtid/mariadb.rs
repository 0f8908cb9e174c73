//! MariaDB's GTID position: per domain, the server id and sequence number
//! of its last transaction (`gtid_binlog_pos`'s `domain-server-seq,…`).

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
