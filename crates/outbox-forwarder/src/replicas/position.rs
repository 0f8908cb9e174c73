//! Whether a replica's position has applied a transaction read here.

use std::collections::VecDeque;

use outbox_core::{Gtid, GtidState, MariaDbGtidState};

/// For each domain of a MariaDB position, the number under which this
/// session read the GTID the position ends at, if it did.
pub(super) fn read_here(
    unreleased: &VecDeque<(u64, Gtid)>,
    position: &GtidState,
) -> Vec<(u32, u64)> {
    let GtidState::MariaDb(position) = position else {
        return Vec::new();
    };
    position
        .domains()
        .iter()
        .filter_map(|(&d, &(s, q))| {
            unreleased.iter().rev().find_map(|(n, gtid)| match gtid {
                Gtid::MariaDb {
                    domain,
                    server,
                    seq,
                } if (*domain, *server, *seq) == (d, s, q) => Some((d, *n)),
                _ => None,
            })
        })
        .collect()
}

/// Whether a replica at `position` has applied transaction `number`
/// (`gtid`): its applied position [`GtidState::has_applied`] it; or (MariaDB) it logged a
/// transaction of the same server at or past it (a server's transactions
/// keep their order everywhere); or its position in the domain is a
/// transaction this session read after it (`read_here`: the order of a
/// domain is the same on every server, whichever servers logged its
/// transactions, as after a failover, where the new primary's binlog holds
/// the old primary's transactions and then its own).
pub(super) fn applied(
    position: &Position,
    gtid: &Gtid,
    number: u64,
    read_here: &[(u32, u64)],
) -> bool {
    if position.applied.has_applied(gtid) {
        return true;
    }
    let Gtid::MariaDb {
        domain,
        server,
        seq,
    } = gtid
    else {
        return false;
    };
    position.logged.has_logged(*domain, *server, *seq)
        || read_here.iter().any(|(d, at)| d == domain && *at >= number)
}

/// Where a replica stands.
pub(super) struct Position {
    pub(super) applied: GtidState,
    /// MariaDB's `gtid_binlog_state`: per domain and server, the last
    /// sequence number the replica logged (with `log_slave_updates`, what
    /// it replicated too); empty on MySQL.
    pub(super) logged: MariaDbGtidState,
}
