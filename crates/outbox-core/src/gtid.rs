//! GTID state: which transactions of the primary's history a checkpoint
//! covers, in a form every server of a replication topology understands
//! (unlike `file:pos`, which means something only on the server that wrote
//! it).
//!
//! - MariaDB: a GTID position, per replication domain the last transaction
//!   applied, `domain-server-seq` (e.g. `0-1-100,1-2-5`).
//! - MySQL: a GTID set, per source `server_uuid` the intervals of
//!   transaction numbers applied (e.g. `3e11fa47-…:1-5:7-9`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One transaction's global id, as its GTID event names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gtid {
    MariaDb { domain: u32, server: u32, seq: u64 },
    MySql { uuid: String, gno: u64 },
}

/// The executed GTID state of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GtidState {
    /// `domain-server-seq,…`, MariaDB's `gtid_binlog_pos` format.
    #[serde(rename = "mariadb")]
    MariaDb(MariaDbGtidPos),
    /// `uuid:interval[:interval…],…`, MySQL's `gtid_executed` format.
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
            (GtidState::MySql(set), Gtid::MySql { uuid, gno }) => set.add(uuid, *gno),
            // A server of the other family: cannot happen on one stream.
            _ => {}
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

/// MySQL's GTID set: per source uuid (lower case), sorted disjoint
/// inclusive intervals of transaction numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MySqlGtidSet(BTreeMap<String, Vec<(u64, u64)>>);

impl MySqlGtidSet {
    /// Adds transaction `gno` of `uuid`, merging intervals.
    pub fn add(&mut self, uuid: &str, gno: u64) {
        self.add_interval(&uuid.to_ascii_lowercase(), gno, gno);
    }

    fn add_interval(&mut self, uuid: &str, start: u64, end: u64) {
        let intervals = self.0.entry(uuid.to_owned()).or_default();
        intervals.push((start, end));
        intervals.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
        for &(s, e) in intervals.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *intervals = merged;
    }

    /// The transactions of `self` that are not in `other`, as a set.
    pub fn minus(&self, other: &MySqlGtidSet) -> MySqlGtidSet {
        let mut rest = MySqlGtidSet::default();
        for (uuid, intervals) in &self.0 {
            let theirs = other.0.get(uuid).map(Vec::as_slice).unwrap_or_default();
            for &(start, end) in intervals {
                let mut from = start;
                for &(s, e) in theirs {
                    if e < from || s > end {
                        continue;
                    }
                    if s > from {
                        rest.add_interval(uuid, from, s - 1);
                    }
                    from = from.max(e.saturating_add(1));
                    if from > end {
                        break;
                    }
                }
                if from <= end {
                    rest.add_interval(uuid, from, end);
                }
            }
        }
        rest
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(Vec::is_empty)
    }

    /// uuid → intervals, for the dump request.
    pub fn intervals(&self) -> &BTreeMap<String, Vec<(u64, u64)>> {
        &self.0
    }
}

impl FromStr for MySqlGtidSet {
    type Err = ParseGtidError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let mut set = MySqlGtidSet::default();
        // gtid_executed may contain newlines after the commas.
        for part in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let mut pieces = part.split(':');
            let uuid = pieces.next().unwrap_or_default().to_ascii_lowercase();
            if !is_uuid(&uuid) {
                return Err(parse_error(input, "expected uuid:interval[:interval...]"));
            }
            let mut any = false;
            for interval in pieces {
                let (start, end) = match interval.split_once('-') {
                    Some((s, e)) => (s.parse::<u64>(), e.parse::<u64>()),
                    None => (interval.parse::<u64>(), interval.parse::<u64>()),
                };
                let (Ok(start), Ok(end)) = (start, end) else {
                    return Err(parse_error(input, "an interval is N or N-M"));
                };
                if start == 0 || end < start {
                    return Err(parse_error(
                        input,
                        "intervals start at 1 and do not run backwards",
                    ));
                }
                set.add_interval(&uuid, start, end);
                any = true;
            }
            if !any {
                return Err(parse_error(input, "a uuid without intervals"));
            }
        }
        Ok(set)
    }
}

/// `8-4-4-4-12` hexadecimal digits.
fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

impl fmt::Display for MySqlGtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (uuid, intervals) in self.0.iter().filter(|(_, i)| !i.is_empty()) {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            f.write_str(uuid)?;
            for (start, end) in intervals {
                if start == end {
                    write!(f, ":{start}")?;
                } else {
                    write!(f, ":{start}-{end}")?;
                }
            }
        }
        Ok(())
    }
}

impl TryFrom<String> for MySqlGtidSet {
    type Error = ParseGtidError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<MySqlGtidSet> for String {
    fn from(set: MySqlGtidSet) -> String {
        set.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "5a5a5a5a-0000-4000-8000-000000000001";

    #[test]
    fn mysql_sets_parse_merge_and_print_in_gtid_executed_form() {
        let set: MySqlGtidSet = format!("{},\n{A}:1-5:7,{A}:6", B.to_uppercase() + ":3")
            .parse()
            .unwrap();
        assert_eq!(set.to_string(), format!("{A}:1-7,{B}:3"));
        let mut set = set;
        set.add(A, 9);
        set.add(A, 8);
        assert_eq!(set.to_string(), format!("{A}:1-9,{B}:3"));
        for bad in [
            "nope:1",
            A,
            &format!("{A}:0"),
            &format!("{A}:5-3"),
            &format!("{A}:x"),
        ] {
            assert!(bad.parse::<MySqlGtidSet>().is_err(), "{bad}");
        }
        assert!("".parse::<MySqlGtidSet>().unwrap().is_empty());
    }

    #[test]
    fn mysql_set_difference() {
        let saved: MySqlGtidSet = format!("{A}:1-100,{B}:1-5").parse().unwrap();
        let executed: MySqlGtidSet = format!("{A}:1-50:60-120,{B}:1-5").parse().unwrap();
        assert_eq!(saved.minus(&executed).to_string(), format!("{A}:51-59"));
        assert!(!saved.minus(&executed).is_empty());
        let executed: MySqlGtidSet = format!("{A}:1-120,{B}:1-9").parse().unwrap();
        assert!(saved.minus(&executed).is_empty());
        // Purged transactions the saved state does not have.
        let purged: MySqlGtidSet = format!("{A}:1-110").parse().unwrap();
        assert_eq!(purged.minus(&saved).to_string(), format!("{A}:101-110"));
    }

    #[test]
    fn mariadb_positions_parse_apply_and_print_per_domain() {
        let mut pos: MariaDbGtidPos = "0-1-100, 1-2-5".parse().unwrap();
        pos.apply(0, 3, 101);
        assert_eq!(pos.to_string(), "0-3-101,1-2-5");
        for bad in ["0-1", "0-1-2-3", "a-1-2", "0-1-2,0-2-3"] {
            assert!(bad.parse::<MariaDbGtidPos>().is_err(), "{bad}");
        }
    }

    #[test]
    fn gtid_state_json_is_pinned() {
        let state = GtidState::MariaDb("0-1-100".parse().unwrap());
        assert_eq!(
            serde_json::to_string(&state).unwrap(),
            r#"{"mariadb":"0-1-100"}"#
        );
        let state = GtidState::MySql(format!("{A}:1-3").parse().unwrap());
        assert_eq!(
            serde_json::to_string(&state).unwrap(),
            format!(r#"{{"mysql":"{A}:1-3"}}"#)
        );
        let back: GtidState =
            serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
        assert_eq!(back, state);
    }
}
