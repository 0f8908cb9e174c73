use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A point in the primary's binlog: `file:pos`, where `pos` is the end
/// (`log_pos`) of a boundary event, i.e. where the next transaction starts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BinlogPosition {
    /// Binlog file name as the server names it, e.g. `mysql-bin.000042`.
    pub file: String,
    /// Byte offset in `file`.
    pub pos: u64,
}

/// The smallest position in a binlog file: right after its 4-byte magic header.
pub const BINLOG_FILE_START: u64 = 4;

impl BinlogPosition {
    pub fn new(file: impl Into<String>, pos: u64) -> Self {
        Self {
            file: file.into(),
            pos,
        }
    }

    /// Numeric suffix of the file name (`mysql-bin.000042` → 42), which orders
    /// files of one server.
    pub fn file_index(&self) -> Option<u64> {
        split_file(&self.file).map(|(_, index)| index)
    }

    /// Compares two positions of the same binlog; `None` when the base names
    /// differ, because positions of different binlogs have no order.
    pub fn compare(&self, other: &Self) -> Option<Ordering> {
        let (base_a, index_a) = split_file(&self.file)?;
        let (base_b, index_b) = split_file(&other.file)?;
        if base_a != base_b {
            return None;
        }
        Some(index_a.cmp(&index_b).then(self.pos.cmp(&other.pos)))
    }
}

fn split_file(file: &str) -> Option<(&str, u64)> {
    let (base, suffix) = file.rsplit_once('.')?;
    if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, suffix.parse().ok()?))
}

impl fmt::Display for BinlogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid binlog position {input:?}: expected FILE:POS, e.g. mysql-bin.000003:1234 ({reason})"
)]
pub struct ParsePositionError {
    input: String,
    reason: &'static str,
}

impl FromStr for BinlogPosition {
    type Err = ParsePositionError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParsePositionError {
            input: input.to_owned(),
            reason,
        };
        let (file, pos) = input.rsplit_once(':').ok_or_else(|| err("no ':'"))?;
        if file.is_empty() {
            return Err(err("empty file name"));
        }
        let pos: u64 = pos.parse().map_err(|_| err("POS is not a number"))?;
        if pos < BINLOG_FILE_START {
            return Err(err("POS is below 4, the first event of a binlog file"));
        }
        Ok(Self::new(file, pos))
    }
}

/// Which server a position belongs to. A checkpoint is only valid against the
/// server that wrote the binlog it points into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceIdentity {
    /// `@@server_uuid` on MySQL; absent on MariaDB, which has none.
    pub server_uuid: Option<String>,
    /// `@@server_id` of the primary.
    pub server_id: u32,
    /// `@@hostname:@@port` of the primary, to tell apart MariaDB servers that
    /// share a server_id.
    pub host: String,
}

impl SourceIdentity {
    /// Whether `other` is the same server: the same `server_uuid` where
    /// both have one (MySQL), whatever the address it is reached at (a
    /// recreated container, a new host name); else the same `server_id` at
    /// the same address.
    pub fn is_same_server(&self, other: &SourceIdentity) -> bool {
        match (&self.server_uuid, &other.server_uuid) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            _ => self == other,
        }
    }

    /// A short name of the server, carried by every message (the
    /// `binlog` header, or `binlog_server`) so that its binlog coordinates are never
    /// mistaken for another server's: the `server_uuid` where there is one,
    /// else `server_id@host`.
    pub fn key(&self) -> String {
        match &self.server_uuid {
            Some(uuid) => uuid.clone(),
            None => format!("{}@{}", self.server_id, self.host),
        }
    }
}

impl fmt::Display for SourceIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.server_uuid {
            Some(uuid) => write!(
                f,
                "server_uuid={uuid} server_id={} host={}",
                self.server_id, self.host
            ),
            None => write!(f, "server_id={} host={}", self.server_id, self.host),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_round_trips_through_display_and_from_str() {
        let pos: BinlogPosition = "mysql-bin.000042:1234".parse().unwrap();
        assert_eq!(pos, BinlogPosition::new("mysql-bin.000042", 1234));
        assert_eq!(pos.to_string(), "mysql-bin.000042:1234");
        assert_eq!(pos.file_index(), Some(42));
    }

    #[test]
    fn position_rejects_malformed_input() {
        for bad in ["", "mysql-bin.000001", ":5", "f.000001:x", "f.000001:3"] {
            assert!(bad.parse::<BinlogPosition>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn positions_order_across_files_by_numeric_suffix() {
        let a = BinlogPosition::new("bin.000009", 99_999);
        let b = BinlogPosition::new("bin.000010", 4);
        assert_eq!(a.compare(&b), Some(Ordering::Less));
        assert_eq!(b.compare(&a), Some(Ordering::Greater));
        assert_eq!(a.compare(&a), Some(Ordering::Equal));
    }

    #[test]
    fn positions_of_different_binlogs_do_not_compare() {
        let a = BinlogPosition::new("bin.000001", 4);
        let b = BinlogPosition::new("other.000001", 4);
        assert_eq!(a.compare(&b), None);
    }

    #[test]
    fn position_json_is_pinned_so_stored_checkpoints_stay_readable() {
        let pos = BinlogPosition::new("mariadb-bin.000002", 385);
        let json = serde_json::to_string(&pos).unwrap();
        assert_eq!(json, r#"{"file":"mariadb-bin.000002","pos":385}"#);
        assert_eq!(serde_json::from_str::<BinlogPosition>(&json).unwrap(), pos);
    }

    #[test]
    fn a_server_uuid_names_the_server_whatever_its_address() {
        let at = |uuid: Option<&str>, host: &str| SourceIdentity {
            server_uuid: uuid.map(str::to_owned),
            server_id: 1,
            host: host.into(),
        };
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        assert!(at(Some(uuid), "db1:3306")
            .is_same_server(&at(Some(&uuid.to_uppercase()), "db-new:3307")));
        assert!(!at(Some(uuid), "db1:3306").is_same_server(&at(
            Some("5a5a5a5a-0000-4000-8000-000000000001"),
            "db1:3306"
        )));
        // Without one (MariaDB): the same id at the same address.
        assert!(at(None, "db1:3306").is_same_server(&at(None, "db1:3306")));
        assert!(!at(None, "db1:3306").is_same_server(&at(None, "db2:3306")));
    }
}
