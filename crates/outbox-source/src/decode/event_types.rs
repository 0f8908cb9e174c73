//! Event types `mysql_common` does not name, and how events are named in
//! errors.

use mysql_common::binlog::consts::EventType;

/// MySQL 8.0.26+ heartbeat (not in `mysql_common`'s `EventType`).
pub(super) const MYSQL_HEARTBEAT_V2: u8 = 41;

/// MariaDB event type codes (they are not in `mysql_common`'s `EventType`).
pub(super) mod mariadb {
    pub const ANNOTATE_ROWS: u8 = 160;
    pub const BINLOG_CHECKPOINT: u8 = 161;
    pub const GTID: u8 = 162;
    pub const GTID_LIST: u8 = 163;
    pub const START_ENCRYPTION: u8 = 164;
    /// QUERY_COMPRESSED (165) up to DELETE_ROWS_COMPRESSED_V1 (171).
    pub const FIRST_COMPRESSED: u8 = 165;
    pub const LAST_COMPRESSED: u8 = 171;
    /// GTID flag: the event group is a single statement with no COMMIT.
    pub const FL_STANDALONE: u8 = 1;
}

/// A `server_uuid` as MySQL prints it, from its 16 bytes.
pub(super) fn format_uuid(sid: &[u8; 16]) -> String {
    outbox_core::hex::uuid(sid)
}

pub(super) fn event_type_name(raw: u8) -> String {
    match EventType::try_from(raw) {
        Ok(t) => format!("{t:?}"),
        Err(_) => match raw {
            mariadb::ANNOTATE_ROWS => "MARIADB_ANNOTATE_ROWS(160)".into(),
            mariadb::GTID => "MARIADB_GTID(162)".into(),
            mariadb::START_ENCRYPTION => "MARIADB_START_ENCRYPTION(164)".into(),
            mariadb::FIRST_COMPRESSED..=mariadb::LAST_COMPRESSED => {
                format!("MARIADB_COMPRESSED_EVENT({raw})")
            }
            _ => format!("UNKNOWN({raw})"),
        },
    }
}
