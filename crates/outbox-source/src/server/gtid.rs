//! A server's GTID state at a position and the GTID history it holds:
//! whether it can serve a checkpoint's GTID state.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use outbox_core::{
    BinlogPosition, DefiniteError, ForwarderError, GtidState, MariaDbGtidPos, MariaDbGtidState,
    MySqlGtidSet,
};

use super::{binary_logs, classify, current_position_and_gtid, variable, Flavor};

/// What repairs a purged gap.
const REPAIR: &str = "`outbox-forwarder repair-gap --config FILE` publishes their outbox rows \
                      that the table still holds and moves the checkpoint past them";

/// The server's GTID state at `position`: on MariaDB `BINLOG_GTID_POS`
/// (every transaction before it, per domain the last); on MySQL with
/// `gtid_mode=ON` only at its current position, from `SHOW MASTER STATUS`
/// (its `Executed_Gtid_Set` is of that position). `None` when the server
/// cannot tell.
pub async fn gtid_state_at(
    conn: &mut Conn,
    flavor: Flavor,
    position: &BinlogPosition,
) -> Result<Option<GtidState>, ForwarderError> {
    if flavor == Flavor::MySql {
        let (current, gtid) = current_position_and_gtid(conn, flavor).await?;
        return Ok(gtid.filter(|_| current == *position));
    }
    mariadb_gtid_pos_at(conn, position).await
}

/// MariaDB's `BINLOG_GTID_POS` of `position`.
pub(super) async fn mariadb_gtid_pos_at(
    conn: &mut Conn,
    position: &BinlogPosition,
) -> Result<Option<GtidState>, ForwarderError> {
    let text: Option<Option<String>> = conn
        .exec_first(
            "SELECT BINLOG_GTID_POS(?, ?)",
            (position.file.as_str(), position.pos),
        )
        .await
        .map_err(|e| classify(e, "SELECT BINLOG_GTID_POS"))?;
    Ok(text
        .flatten()
        .and_then(|t| t.parse::<MariaDbGtidPos>().ok())
        .map(GtidState::MariaDb))
}

/// What a server holds of the GTID history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GtidHistory {
    /// Its `gtid_binlog_state` (per domain and server id, the last
    /// sequence number it logged), and nothing before the GTID list its
    /// oldest binlog starts with (older transactions were purged).
    MariaDb {
        binlog_state: MariaDbGtidState,
        purged_through: MariaDbGtidState,
        /// The oldest binlog file the server still has.
        oldest_file: String,
    },
    /// `gtid_executed`, of which `gtid_purged` is no longer in the binlog.
    MySql {
        executed: MySqlGtidSet,
        purged: MySqlGtidSet,
    },
}

/// Why a server cannot serve a stream after a GTID state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotServed {
    /// It lacks transactions the state covers (another history, or a
    /// replica behind): waiting or another server may serve it.
    Lacks(String),
    /// It has purged transactions after the state: their binlog is gone
    /// from this server for good.
    Purged(String),
}

impl NotServed {
    pub fn is_purged(&self) -> bool {
        matches!(self, NotServed::Purged(_))
    }
}

impl std::fmt::Display for NotServed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotServed::Lacks(reason) | NotServed::Purged(reason) => f.write_str(reason),
        }
    }
}

impl GtidHistory {
    /// Why a stream after `saved` cannot be served, if it cannot: the
    /// transactions of `saved` the server lacks, or those after `saved` it
    /// has purged.
    pub fn cannot_serve(&self, saved: &GtidState) -> Option<NotServed> {
        match (self, saved) {
            (
                GtidHistory::MariaDb {
                    binlog_state,
                    purged_through,
                    oldest_file,
                },
                GtidState::MariaDb(saved),
            ) => {
                // A GTID names its server: the server must have logged that
                // server's transactions of the domain up to the saved one (a
                // higher number from another server id is another history).
                let lacking: Vec<String> = saved
                    .domains()
                    .iter()
                    .filter(|(domain, (server, seq))| {
                        !binlog_state.has_logged(**domain, *server, *seq)
                    })
                    .map(|(domain, (server, seq))| format!("{domain}-{server}-{seq}"))
                    .collect();
                if !lacking.is_empty() {
                    return Some(NotServed::Lacks(format!(
                        "the server lacks transactions the checkpoint covers: {} (its \
                         gtid_binlog_state is {binlog_state})",
                        lacking.join(",")
                    )));
                }
                // Purged: a domain whose oldest file starts after the saved
                // sequence number.
                let purged: Vec<String> = purged_through
                    .entries()
                    .iter()
                    .filter(|(d, _, n)| saved.domains().get(d).is_none_or(|(_, seq)| n > seq))
                    .map(|(d, s, n)| format!("{d}-{s}-{n}"))
                    .collect();
                (!purged.is_empty()).then(|| {
                    NotServed::Purged(format!(
                        "the server has purged transactions after the checkpoint: the oldest \
                         binlog the server still has: {oldest_file}, starts after {} (the \
                         checkpoint is at {saved}); {REPAIR}",
                        purged.join(",")
                    ))
                })
            }
            (GtidHistory::MySql { executed, purged }, GtidState::MySql(saved)) => {
                let lacking = saved.minus(executed);
                if !lacking.is_empty() {
                    return Some(NotServed::Lacks(format!(
                        "the server lacks transactions the checkpoint covers: {lacking} (its \
                         gtid_executed is {executed})"
                    )));
                }
                let gone = purged.minus(saved);
                (!gone.is_empty()).then(|| {
                    NotServed::Purged(format!(
                        "the server has purged transactions after the checkpoint: {gone} \
                         (gtid_purged is {purged}); {REPAIR}"
                    ))
                })
            }
            _ => Some(NotServed::Lacks(
                "the checkpoint's GTID state is of the other server family".into(),
            )),
        }
    }
}

/// The GTID history of the server, if a stream can be requested from it by
/// GTID: MariaDB, or MySQL with `gtid_mode=ON`.
pub async fn gtid_history(
    conn: &mut Conn,
    flavor: Flavor,
) -> Result<Option<GtidHistory>, ForwarderError> {
    // The server prints the same text again if asked again: not transient.
    let parse_error = |what: &str, e: outbox_core::ParseGtidError| -> ForwarderError {
        DefiniteError::Config(format!(
            "the server's {what} does not parse as a GTID set ({e}); this release cannot \
             resume by GTID on it"
        ))
        .into()
    };
    if flavor == Flavor::MySql {
        if !variable(conn, "gtid_mode")
            .await?
            .is_some_and(|m| m.eq_ignore_ascii_case("ON"))
        {
            return Ok(None);
        }
        let executed = variable(conn, "gtid_executed").await?.unwrap_or_default();
        let purged = variable(conn, "gtid_purged").await?.unwrap_or_default();
        return Ok(Some(GtidHistory::MySql {
            executed: executed
                .parse()
                .map_err(|e| parse_error("gtid_executed", e))?,
            purged: purged.parse().map_err(|e| parse_error("gtid_purged", e))?,
        }));
    }
    let binlog_state = variable(conn, "gtid_binlog_state")
        .await?
        .unwrap_or_default()
        .parse()
        .map_err(|e| parse_error("gtid_binlog_state", e))?;
    let logs = binary_logs(conn).await?;
    let mut purged_through = MariaDbGtidState::default();
    let oldest_file = logs.first().map(|(f, _)| f.clone()).unwrap_or_default();
    if let Some((oldest, _)) = logs.first() {
        let rows: Vec<Row> = conn
            .query(format!(
                "SHOW BINLOG EVENTS IN '{}' LIMIT 4",
                oldest.replace('\'', "")
            ))
            .await
            .map_err(|e| classify(e, "SHOW BINLOG EVENTS"))?;
        for row in rows {
            let kind: Option<String> = row.get("Event_type");
            if kind.as_deref() == Some("Gtid_list") {
                let info: String = row.get("Info").unwrap_or_default();
                purged_through = info
                    .trim_matches(|c| c == '[' || c == ']')
                    .parse()
                    .map_err(|e| parse_error(&format!("the Gtid_list of {oldest}"), e))?;
            }
        }
    }
    Ok(Some(GtidHistory::MariaDb {
        binlog_state,
        purged_through,
        oldest_file,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_serves_a_gtid_state_only_if_it_has_it_all_and_purged_nothing_after_it() {
        const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mysql = |executed: &str, purged: &str| GtidHistory::MySql {
            executed: executed.parse().unwrap(),
            purged: purged.parse().unwrap(),
        };
        let saved = GtidState::MySql(format!("{A}:1-100").parse().unwrap());
        assert_eq!(
            mysql(&format!("{A}:1-150"), &format!("{A}:1-40")).cannot_serve(&saved),
            None
        );
        let lacking = mysql(&format!("{A}:1-90"), "")
            .cannot_serve(&saved)
            .unwrap();
        assert!(!lacking.is_purged());
        let lacking = lacking.to_string();
        assert!(
            lacking.contains(&format!(
                "lacks transactions the checkpoint covers: {A}:91-100"
            )),
            "{lacking}"
        );
        let purged = mysql(&format!("{A}:1-150"), &format!("{A}:1-120"))
            .cannot_serve(&saved)
            .unwrap();
        assert!(purged.is_purged());
        let purged = purged.to_string();
        assert!(
            purged.contains(&format!(
                "purged transactions after the checkpoint: {A}:101-120"
            )),
            "{purged}"
        );

        let mariadb = |binlog_state: &str, purged_through: &str| GtidHistory::MariaDb {
            binlog_state: binlog_state.parse().unwrap(),
            purged_through: purged_through.parse().unwrap(),
            oldest_file: "bin.000007".into(),
        };
        let saved = GtidState::MariaDb("0-1-100".parse().unwrap());
        // A promoted replica: server 1's transactions up to 120, then its own.
        assert_eq!(
            mariadb("0-1-120,0-2-130", "0-1-50").cannot_serve(&saved),
            None
        );
        assert!(matches!(
            mariadb("0-1-99", "").cannot_serve(&saved),
            Some(NotServed::Lacks(reason)) if reason.contains("lacks")
        ));
        // Higher numbers of another server id are another history.
        assert!(matches!(
            mariadb("0-5-900", "").cannot_serve(&saved),
            Some(NotServed::Lacks(reason)) if reason.contains("lacks")
        ));
        assert!(matches!(
            mariadb("0-1-120,0-2-130", "0-1-100,0-2-110").cannot_serve(&saved),
            Some(NotServed::Purged(reason)) if reason.contains("purged")
        ));
        assert!(mariadb("0-1-100", "")
            .cannot_serve(&GtidState::MySql(Default::default()))
            .is_some());
    }
}
