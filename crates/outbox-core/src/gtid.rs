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

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One transaction's global id, as its GTID event names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gtid {
    MariaDb {
        domain: u32,
        server: u32,
        seq: u64,
    },
    /// `uuid:gno`, or `uuid:tag:gno` (MySQL 8.3+, a GTID_TAGGED_LOG_EVENT).
    MySql {
        uuid: String,
        tag: Option<GtidTag>,
        gno: u64,
    },
}

impl fmt::Display for Gtid {
    /// `domain-server-seq` (MariaDB), `uuid:gno` or `uuid:tag:gno` (MySQL).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gtid::MariaDb {
                domain,
                server,
                seq,
            } => write!(f, "{domain}-{server}-{seq}"),
            Gtid::MySql {
                uuid,
                tag: None,
                gno,
            } => write!(f, "{uuid}:{gno}"),
            Gtid::MySql {
                uuid,
                tag: Some(tag),
                gno,
            } => write!(f, "{uuid}:{tag}:{gno}"),
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
                match pos.0.into_iter().collect::<Vec<_>>().as_slice() {
                    [(domain, (server, seq))] => Ok(Gtid::MariaDb {
                        domain: *domain,
                        server: *server,
                        seq: *seq,
                    }),
                    _ => Err(parse_error(input, "expected one domain-server-seq")),
                }
            }
            [uuid, n] => Ok(Gtid::MySql {
                uuid: uuid.to_ascii_lowercase(),
                tag: None,
                gno: gno(n)?,
            }),
            [uuid, tag, n] => Ok(Gtid::MySql {
                uuid: uuid.to_ascii_lowercase(),
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
                let intervals = match tag {
                    None => set.untagged.get(uuid.as_str()),
                    Some(tag) => set.tagged.get(&(uuid.clone(), tag.clone())),
                };
                intervals.is_some_and(|i| i.iter().any(|&(a, b)| a <= *gno && *gno <= b))
            }
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

/// MySQL's GTID set: per source uuid (lower case) the sorted, disjoint,
/// inclusive intervals of its transaction numbers, and the same per
/// (uuid, tag) for MySQL 8.3+ tagged transactions. A transaction is
/// (uuid, tag, gno): `uuid:5` and `uuid:tag_a:5` are two transactions.
///
/// Text form, as `gtid_executed` prints it: after each uuid its untagged
/// intervals, then each tag (sorted) with its intervals,
/// `uuid:1-5:tag_a:1-3:7,uuid2:1-9`. An untagged set prints as it did
/// before tags existed, so stored checkpoints read back unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MySqlGtidSet {
    untagged: BTreeMap<String, Vec<(u64, u64)>>,
    tagged: BTreeMap<(String, GtidTag), Vec<(u64, u64)>>,
}

impl MySqlGtidSet {
    /// Adds untagged transaction `gno` of `uuid`.
    pub fn add(&mut self, uuid: &str, gno: u64) {
        self.add_interval(&uuid.to_ascii_lowercase(), None, gno, gno);
    }

    /// Adds transaction `gno` of `uuid` tagged `tag`.
    pub fn add_tagged(&mut self, uuid: &str, tag: &GtidTag, gno: u64) {
        self.add_interval(&uuid.to_ascii_lowercase(), Some(tag), gno, gno);
    }

    fn add_interval(&mut self, uuid: &str, tag: Option<&GtidTag>, start: u64, end: u64) {
        let intervals = match tag {
            None => self.untagged.entry(uuid.to_owned()).or_default(),
            Some(tag) => self
                .tagged
                .entry((uuid.to_owned(), tag.clone()))
                .or_default(),
        };
        insert_interval(intervals, start, end);
    }

    /// The transactions of `self` that are not in `other`, as a set.
    pub fn minus(&self, other: &MySqlGtidSet) -> MySqlGtidSet {
        fn rest<K: Ord + Clone>(
            mine: &BTreeMap<K, Vec<(u64, u64)>>,
            theirs: &BTreeMap<K, Vec<(u64, u64)>>,
        ) -> BTreeMap<K, Vec<(u64, u64)>> {
            mine.iter()
                .map(|(key, intervals)| {
                    let theirs = theirs.get(key).map(Vec::as_slice).unwrap_or_default();
                    (key.clone(), subtract(intervals, theirs))
                })
                .filter(|(_, left)| !left.is_empty())
                .collect()
        }
        MySqlGtidSet {
            untagged: rest(&self.untagged, &other.untagged),
            tagged: rest(&self.tagged, &other.tagged),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.untagged.values().all(Vec::is_empty) && self.tagged.values().all(Vec::is_empty)
    }

    /// uuid → intervals of the *untagged* transactions only. A dump request
    /// must carry the tagged ones too: see [`tsids`](Self::tsids).
    pub fn intervals(&self) -> &BTreeMap<String, Vec<(u64, u64)>> {
        &self.untagged
    }

    /// Every (uuid, tag) of the set with its intervals, in MySQL's order:
    /// by uuid, the untagged transactions (`None`) first, then by tag. One
    /// item is one block of a `COM_BINLOG_DUMP_GTID` request.
    pub fn tsids(&self) -> impl Iterator<Item = (&str, Option<&GtidTag>, &[(u64, u64)])> + '_ {
        let untagged = self
            .untagged
            .iter()
            .map(|(uuid, intervals)| (uuid.as_str(), None, intervals.as_slice()));
        let tagged = self
            .tagged
            .iter()
            .map(|((uuid, tag), intervals)| (uuid.as_str(), Some(tag), intervals.as_slice()));
        let mut all: Vec<_> = untagged
            .chain(tagged)
            .filter(|(_, _, intervals)| !intervals.is_empty())
            .collect();
        all.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        all.into_iter()
    }
}

/// Adds `start..=end` to sorted disjoint `intervals`, merging neighbours.
fn insert_interval(intervals: &mut Vec<(u64, u64)>, start: u64, end: u64) {
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

/// `mine` without `theirs`, both sorted and disjoint; so is the result.
fn subtract(mine: &[(u64, u64)], theirs: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut rest = Vec::new();
    for &(start, end) in mine {
        let mut from = start;
        for &(s, e) in theirs {
            if e < from || s > end {
                continue;
            }
            if s > from {
                rest.push((from, s - 1));
            }
            from = from.max(e.saturating_add(1));
            if from > end {
                break;
            }
        }
        if from <= end {
            rest.push((from, end));
        }
    }
    rest
}

impl FromStr for MySqlGtidSet {
    type Err = ParseGtidError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let mut set = MySqlGtidSet::default();
        // gtid_executed may contain newlines after the commas.
        for part in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let mut items = part.split(':');
            let uuid = items.next().unwrap_or_default().to_ascii_lowercase();
            if !is_uuid(&uuid) {
                return Err(parse_error(
                    input,
                    "expected uuid:interval[:interval...] or uuid:tag:interval[...]",
                ));
            }
            // The tag of the intervals that follow; whether any followed yet.
            let mut tag: Option<GtidTag> = None;
            let mut bare = true;
            for item in items {
                if item.starts_with(|c: char| !c.is_ascii_digit()) {
                    if tag.is_some() && bare {
                        return Err(parse_error(input, "a tag without intervals"));
                    }
                    tag = Some(item.parse().map_err(|_| parse_error(input, TAG_RULE))?);
                    bare = true;
                    continue;
                }
                let (start, end) = match item.split_once('-') {
                    Some((s, e)) => (s.parse::<u64>(), e.parse::<u64>()),
                    None => (item.parse::<u64>(), item.parse::<u64>()),
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
                set.add_interval(&uuid, tag.as_ref(), start, end);
                bare = false;
            }
            if bare {
                return Err(parse_error(
                    input,
                    match tag {
                        Some(_) => "a tag without intervals",
                        None => "a uuid without intervals",
                    },
                ));
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
        let mut previous: Option<&str> = None;
        for (uuid, tag, intervals) in self.tsids() {
            if previous != Some(uuid) {
                if previous.is_some() {
                    f.write_str(",")?;
                }
                f.write_str(uuid)?;
                previous = Some(uuid);
            }
            if let Some(tag) = tag {
                write!(f, ":{tag}")?;
            }
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

const TAG_RULE: &str = "a tag is a letter or _ followed by up to 31 letters, digits or _";

/// A MySQL 8.3+ GTID tag, `[a-z_][a-z0-9_]{0,31}`: written in any case,
/// kept in lower case as MySQL does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GtidTag(String);

impl GtidTag {
    /// MySQL's `tag_max_length`.
    pub const MAX_LEN: usize = 32;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for GtidTag {
    type Err = ParseGtidError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let tag = input.to_ascii_lowercase();
        let mut bytes = tag.bytes();
        let valid = tag.len() <= Self::MAX_LEN
            && bytes
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(parse_error(input, TAG_RULE));
        }
        Ok(GtidTag(tag))
    }
}

impl fmt::Display for GtidTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gtid_prints_and_parses_back_and_is_placed_against_a_state() {
        for text in [
            "0-1-42",
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:7",
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_a:3",
        ] {
            let gtid: Gtid = text.parse().unwrap();
            assert_eq!(gtid.to_string(), text);
        }
        assert!("0-1-42,1-1-3".parse::<Gtid>().is_err());
        let maria = GtidState::MariaDb("0-1-100,1-2-5".parse().unwrap());
        assert!(maria.contains(&"0-1-100".parse().unwrap()));
        assert!(
            maria.contains(&"0-2-99".parse().unwrap()),
            "numbers grow within a domain"
        );
        assert!(!maria.contains(&"0-2-101".parse().unwrap()));
        assert!(
            !maria.contains(&"2-1-1".parse().unwrap()),
            "a domain the state has not seen"
        );
        let mysql = GtidState::MySql(
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:9:tag_a:1-3"
                .parse()
                .unwrap(),
        );
        assert!(mysql.contains(&"3e11fa47-71ca-11e1-9e33-c80aa9429562:9".parse().unwrap()));
        assert!(!mysql.contains(&"3e11fa47-71ca-11e1-9e33-c80aa9429562:7".parse().unwrap()));
        assert!(mysql.contains(
            &"3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_a:2"
                .parse()
                .unwrap()
        ));
        assert!(!mysql.contains(
            &"3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_b:2"
                .parse()
                .unwrap()
        ));
        assert!(
            !mysql.contains(&"0-1-1".parse().unwrap()),
            "the other family"
        );
    }

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
    fn tagged_sets_parse_and_print_in_gtid_executed_form() {
        // Untagged intervals first, then each tag (lower case, sorted) with
        // the intervals that follow it.
        let text = format!("{},\n{B}:1-9", A.to_uppercase() + ":1-5:tag_a:1-3:7");
        let set: MySqlGtidSet = text.parse().unwrap();
        assert_eq!(set.to_string(), format!("{A}:1-5:tag_a:1-3:7,{B}:1-9"));
        let set: MySqlGtidSet = format!("{A}:TAG_B:4:Tag_A:3:1-2,{A}:9,{B}:x:1")
            .parse()
            .unwrap();
        assert_eq!(set.to_string(), format!("{A}:9:tag_a:1-3:tag_b:4,{B}:x:1"));
        // A single tagged GTID; the same number untagged is another transaction.
        let set: MySqlGtidSet = format!("{A}:tag_a:7,{A}:7").parse().unwrap();
        assert_eq!(set.to_string(), format!("{A}:7:tag_a:7"));
        let longest = "_".repeat(32);
        for text in [
            format!("{A}:1-5:tag_a:1-3:7,{B}:1-9"),
            format!("{A}:_9:1:{longest}:2"),
            format!("{B}:z:1-2:4"),
        ] {
            let set: MySqlGtidSet = text.parse().unwrap();
            assert_eq!(set.to_string(), text);
            assert_eq!(set.to_string().parse::<MySqlGtidSet>().unwrap(), set);
        }
    }

    #[test]
    fn invalid_tags_are_rejected_naming_the_tag_rule() {
        let tag_rule = "a tag is a letter or _ followed by up to 31 letters, digits or _";
        let too_long = "t".repeat(33);
        let cases = [
            (format!("{A}:bad-tag:1"), tag_rule),
            (format!("{A}:{too_long}:1"), tag_rule),
            (format!("{A}:t\u{e4}g:1"), tag_rule),
            (format!("{A}:1:tag_a"), "a tag without intervals"),
            (format!("{A}:tag_a:tag_b:1"), "a tag without intervals"),
            (format!("{A}:tag_a:1:"), "an interval is N or N-M"),
            (
                format!("{A}:tag_a:0"),
                "intervals start at 1 and do not run backwards",
            ),
        ];
        for (text, reason) in cases {
            let error = text.parse::<MySqlGtidSet>().unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("invalid GTID {text:?}: {reason}")
            );
        }
    }

    #[test]
    fn tagged_set_difference_counts_uuid_tag_and_number() {
        let saved: MySqlGtidSet = format!("{A}:1-10:tag_a:1-5,{B}:t:1").parse().unwrap();
        let executed: MySqlGtidSet = format!("{A}:1-10:tag_a:1-3,{B}:t:1").parse().unwrap();
        assert_eq!(saved.minus(&executed).to_string(), format!("{A}:tag_a:4-5"));
        // Untagged 1-5 does not cover tag_a:1-5, nor tag_b tag_a.
        let untagged: MySqlGtidSet = format!("{A}:1-5").parse().unwrap();
        let tagged: MySqlGtidSet = format!("{A}:tag_a:1-5").parse().unwrap();
        assert_eq!(tagged.minus(&untagged), tagged);
        assert_eq!(untagged.minus(&tagged), untagged);
        let other_tag: MySqlGtidSet = format!("{A}:tag_b:1-5").parse().unwrap();
        assert_eq!(tagged.minus(&other_tag), tagged);
        // Purged tagged transactions the saved state does not have.
        let purged: MySqlGtidSet = format!("{A}:1-3:tag_a:1-7").parse().unwrap();
        assert_eq!(purged.minus(&saved).to_string(), format!("{A}:tag_a:6-7"));
        let everything: MySqlGtidSet = format!("{A}:1-20:tag_a:1-9,{B}:t:1-2").parse().unwrap();
        assert!(saved.minus(&everything).is_empty());
        assert!(!everything.minus(&saved).is_empty());
    }

    #[test]
    fn applying_a_tagged_gtid_adds_it_under_its_tag_only() {
        let mut state = GtidState::MySql(format!("{A}:1-3").parse().unwrap());
        let tagged = |gno| Gtid::MySql {
            uuid: A.to_uppercase(),
            tag: Some("Tag_A".parse().unwrap()),
            gno,
        };
        state.apply(&tagged(1));
        state.apply(&tagged(2));
        state.apply(&Gtid::MySql {
            uuid: A.into(),
            tag: None,
            gno: 4,
        });
        assert_eq!(state.to_string(), format!("{A}:1-4:tag_a:1-2"));
        assert_eq!("_".parse::<GtidTag>().unwrap().as_str(), "_");
        assert!("".parse::<GtidTag>().is_err());
        assert!("9a".parse::<GtidTag>().is_err());
    }

    #[test]
    fn tagged_gtid_state_json_is_pinned() {
        let state = GtidState::MySql(format!("{A}:1-3:Tag_A:1").parse().unwrap());
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(json, format!(r#"{{"mysql":"{A}:1-3:tag_a:1"}}"#));
        assert_eq!(serde_json::from_str::<GtidState>(&json).unwrap(), state);
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
