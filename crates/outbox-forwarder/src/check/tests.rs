//! The lines `check` prints, from what the checks found: status, text and
//! fix, without a server.

use outbox_source::server::{PurgeAfter, Role};
use outbox_source::TablePattern;

use super::*;
use crate::resume::Seen;

fn empty() -> Report {
    Report(Vec::new())
}

#[test]
fn a_passing_line_carries_no_fix_and_a_failing_one_says_what_to_do() {
    let mut report = empty();
    report.add(
        Status::Pass,
        "binlog_format",
        "ROW",
        "ROW",
        "SET GLOBAL binlog_format=ROW",
    );
    report.add(
        Status::Fail,
        "binlog_format",
        "MIXED",
        "ROW",
        "SET GLOBAL binlog_format=ROW",
    );
    let lines: Vec<String> = report.0.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines[0],
        format!("PASS  {:<28} found: ROW; expected: ROW", "binlog_format")
    );
    assert_eq!(
        lines[1],
        format!(
            "FAIL  {:<28} found: MIXED; expected: ROW; fix: SET GLOBAL binlog_format=ROW",
            "binlog_format"
        )
    );
    assert!(!report.0[1].unreachable);
}

#[test]
fn an_unreachable_server_fails_its_line_and_marks_it_for_run_to_wait_out() {
    let mut report = empty();
    report.unreachable(
        "mysql connection",
        "127.0.0.1:1: refused".into(),
        "start MySQL",
    );
    let line = &report.0[0];
    assert_eq!(line.status, Status::Fail);
    assert!(line.unreachable);
    assert_eq!(line.expected, "reachable");
    assert_eq!(line.fix, "start MySQL");
}

#[test]
fn a_table_named_in_another_case_is_shown_as_the_server_names_it() {
    let pattern: TablePattern = "app.Outbox_Event".parse().unwrap();
    let mut report = empty();
    let found = ("app".to_string(), "outbox_event".to_string());
    outbox_tables::no_table_matches(&pattern, Some(&found), &mut report);
    let line = &report.0[0];
    assert_eq!(line.status, Status::Fail);
    assert!(
        line.found
            .contains("app.Outbox_Event is not app.outbox_event"),
        "{line}"
    );
    assert_eq!(line.fix, "write outbox.tables as \"app.outbox_event\"");

    let mut report = empty();
    outbox_tables::no_table_matches(&pattern, None, &mut report);
    assert_eq!(report.0[0].found, "no table matches app.Outbox_Event");
    assert!(report.0[0].fix.starts_with("create it"));
}

#[test]
fn the_group_topic_passes_only_when_compacted() {
    use kafka::Policy;
    let line = |policy: Policy| kafka::group_topic_line("outbox.ha", policy);
    let reported = |policy: &str| line(Policy::Reported(policy.into()));
    assert_eq!(reported("compact").0, Status::Pass);
    let (status, found) = reported("delete");
    assert_eq!(status, Status::Fail);
    assert!(found.contains("cleanup.policy=delete"), "{found}");
    assert_eq!(reported("compact,delete").0, Status::Warn);
    assert_eq!(reported("delete, compact").0, Status::Warn);
    let (status, found) = line(Policy::Unreported);
    assert_eq!(status, Status::Warn);
    assert!(found.contains("do not report"), "{found}");
    assert_eq!(line(Policy::NotCreated).0, Status::Pass);
    let (status, found) = line(Policy::CannotCreate(
        "Broker: Topic authorization failed".into(),
    ));
    assert_eq!(status, Status::Fail);
    assert!(
        found.contains("would not let this account create it"),
        "{found}"
    );
    assert_eq!(
        line(Policy::Unreadable(
            "Broker: Cluster authorization failed".into()
        ))
        .0,
        Status::Warn
    );
}

#[test]
fn several_candidates_get_a_line_each_with_why_one_cannot_serve() {
    let candidates = vec![
        Seen::Unreachable {
            reason: "connection refused".into(),
            definite: false,
        },
        Seen::Answered {
            role: Role::Writable,
            identity: "server-uuid a".into(),
            refused: None,
        },
        Seen::Answered {
            role: Role::RelayingReplica,
            identity: "server-uuid b".into(),
            refused: Some("it lacks 0-1-7".into()),
        },
    ];
    let mut report = empty();
    mysql::describe_candidates(&candidates, &mut report);
    let found: Vec<&str> = report.0.iter().map(|l| l.found.as_str()).collect();
    assert_eq!(
        found,
        [
            "candidate 1 of 3: unreachable (connection refused)",
            "candidate 2 of 3: server-uuid a, writable",
            "candidate 3 of 3: server-uuid b, read-only replica with log_slave_updates; \
             cannot serve the checkpoint: it lacks 0-1-7",
        ]
    );

    // One candidate: the source line says it all.
    let mut report = empty();
    mysql::describe_candidates(&candidates[1..2], &mut report);
    assert!(report.0.is_empty());
}

#[test]
fn a_checkpoint_binlog_purged_within_a_day_is_a_warning() {
    let day = 86_400;
    let mut report = empty();
    let after = PurgeAfter::Seconds(7 * day);
    checkpoint::expiry_line("mysql-bin.000042", PurgeAfter::Never, 10 * day, &mut report);
    checkpoint::expiry_line("mysql-bin.000042", after, day, &mut report);
    checkpoint::expiry_line("mysql-bin.000042", after, 6 * day + 3600, &mut report);
    checkpoint::expiry_line("mysql-bin.000042", after, 8 * day, &mut report);
    let lines: Vec<(Status, &str)> = report
        .0
        .iter()
        .map(|l| (l.status, l.found.as_str()))
        .collect();
    assert_eq!(
        lines,
        [
            (
                Status::Pass,
                "mysql-bin.000042 present; the server does not expire binlogs"
            ),
            (
                Status::Pass,
                "mysql-bin.000042 present; expiry purges it in at most 144h"
            ),
            (
                Status::Warn,
                "mysql-bin.000042 present; expiry purges it in at most 23h"
            ),
            (
                Status::Warn,
                "mysql-bin.000042 present; expiry purges it in at most 0h"
            ),
        ]
    );
    assert!(
        report.0[2]
            .fix
            .starts_with("keep the forwarder running, or raise the binlog retention"),
        "{}",
        report.0[2].fix
    );
}

fn migration_columns(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    [
        ("event_id", "char"),
        ("aggregate_type", "varchar"),
        ("aggregate_id", "varchar"),
        ("event_type", "varchar"),
        ("event_version", "int"),
        ("payload", "json"),
        ("created_at", "datetime"),
    ]
    .iter()
    .chain(extra)
    .map(|(name, data_type)| (name.to_string(), data_type.to_string()))
    .collect()
}

fn decode(edit: impl FnOnce(&mut outbox_source::DecodeConfig)) -> outbox_source::DecodeConfig {
    let mut decode = outbox_source::DecodeConfig::new(outbox_source::OutboxTables::new(Vec::new()));
    edit(&mut decode);
    decode
}

#[test]
fn the_migrations_table_fits_the_defaults_without_trace_columns() {
    let fit = outbox_tables::column_fit(&decode(|_| {}), &migration_columns(&[]));
    assert!(fit.problems.is_empty(), "{:?}", fit.problems);
    assert!(
        fit.optional_missing.is_empty(),
        "{:?}",
        fit.optional_missing
    );
}

#[test]
fn every_named_column_must_exist_and_fit_its_use() {
    let mut columns = migration_columns(&[("tenant", "varchar"), ("traceparent", "int")]);
    columns[1].1 = "enum".into();
    columns.push(("region".into(), "set".into()));
    let fit = outbox_tables::column_fit(
        &decode(|d| {
            d.columns.timestamp_column = Some("tenant".into());
            d.columns.topic_column = Some("event_version".into());
            d.columns.partition_column = Some("shard".into());
            d.headers = vec![("region".into(), "region".into())];
        }),
        &columns,
    );
    let problems = fit.problems.join("\n");
    for expected in [
        "`tenant` (timestamp_column) is varchar",
        "`event_version` (topic_column) is int",
        "no column `shard` (partition_column)",
        "`traceparent` (traceparent) is int",
        "`aggregate_type` (aggregate_type) is enum: the binlog holds its index",
        "`region` (header region) is set: the binlog holds its index",
    ] {
        assert!(problems.contains(expected), "{expected} in:\n{problems}");
    }
    assert_eq!(fit.problems.len(), 6, "{problems}");
}

#[test]
fn a_payload_needs_text_or_binary_unless_it_is_bytes_and_a_renamed_trace_column_must_exist() {
    let columns = migration_columns(&[("body", "varbinary"), ("count", "int")]);
    let json_in_binary =
        outbox_tables::column_fit(&decode(|d| d.columns.payload = "body".into()), &columns);
    assert!(
        json_in_binary.problems.is_empty(),
        "{:?}",
        json_in_binary.problems
    );
    let json_in_int =
        outbox_tables::column_fit(&decode(|d| d.columns.payload = "count".into()), &columns);
    assert!(
        json_in_int.problems[0].contains("payload_format = \"bytes\""),
        "{:?}",
        json_in_int.problems
    );
    let bytes_in_int = outbox_tables::column_fit(
        &decode(|d| {
            d.columns.payload = "count".into();
            d.columns.payload_format = outbox_source::PayloadFormat::Bytes;
        }),
        &columns,
    );
    assert!(
        bytes_in_int.problems.is_empty(),
        "{:?}",
        bytes_in_int.problems
    );
    let misspelt = outbox_tables::column_fit(
        &decode(|d| d.columns.traceparent = "trace_parnet".into()),
        &columns,
    );
    assert_eq!(misspelt.optional_missing, ["trace_parnet"]);
}
