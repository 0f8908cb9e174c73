use super::*;
use outbox_core::MariaDbGtidState;

fn pos(text: &str) -> outbox_core::MariaDbGtidPos {
    text.parse().unwrap()
}

#[test]
fn the_gate_releases_up_to_what_the_nth_replica_has() {
    let (released, watch) = watch::channel(0);
    let confirmed = Confirmed {
        need: 2,
        by_replica: Mutex::new(vec![0; 3]),
        released,
        unreleased: Mutex::default(),
    };
    confirmed.confirm(0, 10);
    assert_eq!(*watch.borrow(), 0, "one replica of the two needed");
    confirmed.confirm(2, 4);
    assert_eq!(*watch.borrow(), 4);
    confirmed.confirm(1, 12);
    assert_eq!(*watch.borrow(), 10);
    // An answer about an older transaction moves nothing back.
    confirmed.confirm(0, 3);
    assert_eq!(*watch.borrow(), 10);
}

fn gtid(text: &str) -> Gtid {
    let mut parts = text.split('-').map(|p| p.parse::<u64>().unwrap());
    let (domain, server, seq) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    Gtid::MariaDb {
        domain: domain as u32,
        server: server as u32,
        seq,
    }
}

#[test]
fn a_replica_confirms_in_order_as_far_as_its_position_covers() {
    let (released, _watch) = watch::channel(0);
    let confirmed = Confirmed {
        need: 1,
        by_replica: Mutex::new(vec![0]),
        released,
        unreleased: Mutex::new(
            [(1, "0-1-11"), (2, "1-1-5"), (3, "0-1-12"), (4, "0-1-13")]
                .into_iter()
                .map(|(n, g)| (n, gtid(g)))
                .collect(),
        ),
    };
    let at = |text: &str| Position {
        applied: GtidState::MariaDb(pos(text)),
        logged: MariaDbGtidState::default(),
    };
    assert_eq!(confirmed.unreleased_after(0).unwrap().0, 1);
    assert_eq!(confirmed.unreleased_after(2).unwrap().1, gtid("0-1-12"));
    // Domain 1 not applied yet: the walk stops before it, though
    // domain 0 is further on.
    assert_eq!(confirmed.covered_from(0, &at("0-1-13,1-1-4")), 1);
    assert_eq!(confirmed.covered_from(0, &at("0-1-12,1-1-5")), 3);
    assert_eq!(confirmed.covered_from(3, &at("0-1-13,1-1-5")), 4);
    // Another server's numbers confirm nothing.
    assert_eq!(confirmed.covered_from(0, &at("0-2-40,1-1-5")), 0);
    // Released without this replica: it goes on from the oldest
    // unreleased one.
    confirmed.unreleased.lock().unwrap().pop_front();
    confirmed.unreleased.lock().unwrap().pop_front();
    assert_eq!(confirmed.unreleased_after(0).unwrap().0, 3);
    assert_eq!(confirmed.covered_from(0, &at("0-1-13,1-1-5")), 4);
}

/// After a failover the new primary's binlog holds the old primary's
/// last transactions, then its own; its replicas' positions are soon
/// its own GTIDs, of which the sequence numbers say nothing.
#[test]
fn the_old_primarys_transactions_on_the_new_one_are_confirmed_by_its_replicas() {
    let (released, _watch) = watch::channel(0);
    let log = |entries: &[(u64, &str)]| -> VecDeque<(u64, Gtid)> {
        entries.iter().map(|(n, g)| (*n, gtid(g))).collect()
    };
    let confirmed = Confirmed {
        need: 1,
        by_replica: Mutex::new(vec![0]),
        released,
        unreleased: Mutex::new(log(&[(1, "0-1-481"), (2, "0-1-482"), (3, "0-2-483")])),
    };
    let position = |applied: &str, logged: &str| Position {
        applied: GtidState::MariaDb(pos(applied)),
        logged: logged.parse().unwrap(),
    };
    // Its position is a transaction read here: everything before it.
    assert_eq!(confirmed.covered_from(0, &position("0-2-483", "")), 3);
    // Not read yet, but it logged the old primary's up to 482 and its
    // new primary's up to 490.
    assert_eq!(
        confirmed.covered_from(0, &position("0-2-490", "0-1-482,0-2-490")),
        3
    );
    // A replica that never had the old primary's 481 (it followed the
    // new primary, which lacks it) confirms nothing: read from the old
    // primary, 481 would be a phantom.
    let confirmed = Confirmed {
        need: 1,
        by_replica: Mutex::new(vec![0]),
        released: watch::channel(0).0,
        unreleased: Mutex::new(log(&[(1, "0-1-481")])),
    };
    assert_eq!(
        confirmed.covered_from(0, &position("0-2-530", "0-1-480,0-2-530")),
        0
    );
}

#[test]
fn a_mysql_replica_covers_what_its_executed_set_holds() {
    let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    let executed = GtidState::MySql(format!("{uuid}:1-10").parse().unwrap());
    let at = |gno| Gtid::MySql {
        uuid: uuid.into(),
        tag: None,
        gno,
    };
    assert!(executed.has_applied(&at(10)));
    assert!(!executed.has_applied(&at(11)));
    let wanted = GtidState::MySql(format!("{uuid}:5-10").parse().unwrap());
    assert!(executed.has_applied_all(&wanted));
    let wanted = GtidState::MySql(format!("{uuid}:5-11").parse().unwrap());
    assert!(!executed.has_applied_all(&wanted));
}
