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
        uuid: A.to_uppercase().into(),
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
    let back: GtidState = serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
    assert_eq!(back, state);
}

#[test]
fn a_state_covers_another_when_it_holds_each_of_its_transactions() {
    let mariadb = |s: &str| GtidState::MariaDb(s.parse().unwrap());
    assert!(mariadb("0-1-10,1-2-5").covers(&mariadb("0-1-10")));
    assert!(mariadb("0-1-10,1-2-5").covers(&mariadb("0-3-9,1-2-5")));
    assert!(!mariadb("0-1-10").covers(&mariadb("0-1-11")));
    assert!(
        !mariadb("0-1-10").covers(&mariadb("0-1-3,1-2-1")),
        "a domain it lacks"
    );
    let mysql = |s: &str| GtidState::MySql(s.parse().unwrap());
    let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    assert!(mysql(&format!("{uuid}:1-42")).covers(&mysql(&format!("{uuid}:5-42"))));
    assert!(!mysql(&format!("{uuid}:1-42")).covers(&mysql(&format!("{uuid}:40-43"))));
    assert!(
        !mysql(&format!("{uuid}:1-42")).covers(&mariadb("0-1-1")),
        "another flavour"
    );
}

// The replica gate's question, server-exact on MariaDB (see the module doc).
fn pos(text: &str) -> MariaDbGtidPos {
    text.parse().unwrap()
}

#[test]
fn a_replica_of_the_same_server_at_or_past_the_transaction_has_it() {
    assert!(pos("0-1-29").has_applied_all(&pos("0-1-29")));
    assert!(pos("0-1-35").has_applied_all(&pos("0-1-29")));
    assert!(!pos("0-1-28").has_applied_all(&pos("0-1-29")));
}

#[test]
fn another_servers_sequence_numbers_do_not_count() {
    // The old primary (1) took 0-1-29 with it; the new one (2) numbers
    // its own transactions from 29 on.
    assert!(!pos("0-2-35").has_applied_all(&pos("0-1-29")));
}

#[test]
fn every_domain_read_must_be_there() {
    assert!(pos("0-1-10,1-1-7").has_applied_all(&pos("0-1-10,1-1-7")));
    assert!(!pos("0-1-10").has_applied_all(&pos("0-1-10,1-1-7")));
    // Domains the session did not read from are not asked about.
    assert!(pos("0-1-10,5-9-3").has_applied_all(&pos("0-1-10")));
}

#[test]
fn the_sequence_order_and_the_replicas_question_differ_after_a_failover() {
    // Old primary 1 took 0-1-29 with it; new primary 2 numbers on from 29.
    let at_new = GtidState::MariaDb(pos("0-2-35"));
    let old_29: Gtid = "0-1-29".parse().unwrap();
    assert!(
        at_new.contains(&old_29),
        "in the history's order, 29 is before 35"
    );
    assert!(
        !at_new.has_applied(&old_29),
        "but a replica at 0-2-35 never had it"
    );
}

#[test]
fn a_binlog_state_says_what_each_server_logged() {
    let state: MariaDbGtidState = "0-1-482,0-2-490, 1-1-7".parse().unwrap();
    assert_eq!(state.to_string(), "0-1-482,0-2-490,1-1-7");
    assert!(state.has_logged(0, 1, 482));
    assert!(state.has_logged(0, 2, 483));
    assert!(!state.has_logged(0, 1, 483));
    assert!(!state.has_logged(1, 2, 1), "a server it has nothing of");
    assert!("".parse::<MariaDbGtidState>().unwrap().entries().is_empty());
    assert!("0-1".parse::<MariaDbGtidState>().is_err());
}
