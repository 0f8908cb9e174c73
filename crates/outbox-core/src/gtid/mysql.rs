//! MySQL's GTID set (`gtid_executed`'s `uuid:intervals[:tag:intervals],…`)
//! and its 8.3+ tags.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{parse_error, ParseGtidError};

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

    /// Whether transaction `gno` of `uuid` (tagged `tag`) is in the set.
    pub fn contains(&self, uuid: &str, tag: Option<&GtidTag>, gno: u64) -> bool {
        let intervals = match tag {
            None => self.untagged.get(uuid),
            Some(tag) => self.tagged.get(&(uuid.to_owned(), tag.clone())),
        };
        intervals.is_some_and(|i| i.iter().any(|&(a, b)| a <= gno && gno <= b))
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
