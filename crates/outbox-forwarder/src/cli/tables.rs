//! The table tools' commands: each report printed, its metrics written
//! where `--textfile` says, and its outcome turned into the command's.

use std::path::PathBuf;

use outbox_core::DefiniteError;

use super::args::{read_event_ids, Reading, RowSelection};
use crate::config::ForwarderConfig;
use crate::tables::backfill::{backfill, BackfillOptions, BackfillReport};
use crate::tables::prune::{prune, Proof, PruneOptions};
use crate::tables::repair::{repair_gap, RepairOptions, RepairReport};
use crate::tables::verify::{verify, Selection, VerifyOptions};

/// `verify`: the reconciliation and its lists; fails if rows are missing.
pub(super) async fn verify_command(
    config: &std::path::Path,
    options: &VerifyOptions,
    statement: bool,
) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let report = verify(&config, options).await?;
    println!("reconciliation: {report}");
    if statement {
        let selection = &options.selection;
        let bound = |b: &Option<String>, none: &str| {
            b.as_deref()
                .map_or(none.to_owned(), |b| match crate::tables::ago(b) {
                    Some(_) => format!("{b} ago"),
                    None => b.to_owned(),
                })
        };
        println!(
            "delivery statement, rows created from {} to {} ({}):",
            bound(&selection.since, "the first"),
            bound(&selection.until, "now"),
            selection.time_column
        );
        for (table, part) in &report.tables {
            println!("  {table}: {part}");
        }
    }
    for widened in &report.widened {
        println!("read whole: {widened}");
    }
    for id in &report.missing {
        println!("missing: {id}");
    }
    for (id, count) in &report.duplicated {
        println!("duplicated: {id} x{count}");
    }
    for id in &report.unexpected {
        println!("unexpected: {id}");
    }
    if report.missing.is_empty() {
        Ok(())
    } else {
        Err(DefiniteError::Config(format!(
            "{} outbox rows are not in Kafka; if the forwarder is running and \
             caught up, move the checkpoint back before them with `checkpoint set`",
            report.missing.len()
        )))
    }
}

/// How `backfill` reads: which rows, how fast, and Kafka's window.
pub(super) struct Tables {
    pub(super) all: bool,
    pub(super) reading: Reading,
    pub(super) kafka: crate::tables::window::Reading,
}

/// `backfill`: the report, the rows it could not publish, the metrics.
pub(super) async fn backfill_command(
    config: &std::path::Path,
    rows: RowSelection,
    event_ids_from: Option<PathBuf>,
    how: Tables,
    textfile: Option<PathBuf>,
) -> Result<(), DefiniteError> {
    let Tables {
        all,
        reading,
        kafka,
    } = how;
    let config = ForwarderConfig::load(config)?;
    let mut selection: Selection = rows.into();
    if let Some(path) = event_ids_from {
        selection.event_ids.extend(read_event_ids(&path)?);
    }
    let options = BackfillOptions {
        selection,
        all,
        max_rows_per_second: reading.max_rows_per_second,
        chunk: reading.chunk.max(1),
        replica_wait: reading.replica_wait,
        by: "backfill",
        kafka,
    };
    let report = backfill(&config, &options).await;
    if let Ok(report) = &report {
        println!("backfill: {report}");
    }
    conclude(
        "backfill",
        textfile.as_deref(),
        report,
        backfill_outcome,
        |report| report.map(backfill_values).unwrap_or_default(),
    )
}

/// `repair-gap`: the window, what is unproven, the move, the metrics.
pub(super) async fn repair_command(
    config: &std::path::Path,
    options: &RepairOptions,
    textfile: Option<PathBuf>,
) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let report = repair_gap(&config, options).await;
    conclude(
        "repair-gap",
        textfile.as_deref(),
        report,
        |report| repair_outcome(report, options),
        |report| {
            let mut values = report
                .and_then(|r| r.backfill.as_ref())
                .map(backfill_values)
                .unwrap_or_default();
            let unproven = report.map_or(0, |r| r.unproven.len() as u64);
            values.push((
                "unproven",
                "What the table could not prove of the gap.",
                unproven,
            ));
            values
        },
    )
}

/// `prune`: proved by Kafka; the report and the metrics.
pub(super) async fn prune_command(
    config: &std::path::Path,
    options: &PruneOptions,
    textfile: Option<PathBuf>,
) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let report = prune(&config, options, &mut Proof::Kafka).await;
    if let Ok(report) = &report {
        println!("prune: {report}");
    }
    conclude(
        "prune",
        textfile.as_deref(),
        report,
        |_| Ok(()),
        |report| {
            report.map_or_else(Vec::new, |r| {
                vec![
                    ("candidates", "Rows older than the cut-off.", r.candidates),
                    ("deleted", "Rows deleted.", r.deleted),
                    (
                        "kept",
                        "Rows older than the cut-off not proved in Kafka.",
                        r.kept,
                    ),
                ]
            })
        },
    )
}

/// A backfill's counts for `--textfile`.
fn backfill_values(report: &BackfillReport) -> Vec<(&'static str, &'static str, u64)> {
    vec![
        (
            "rows_read",
            "Rows read from the outbox tables.",
            report.rows_read,
        ),
        (
            "published",
            "Rows published and acknowledged.",
            report.published,
        ),
        (
            "bad_rows",
            "Rows that cannot become messages.",
            report.bad_rows.len() as u64,
        ),
        (
            "gone",
            "Missing rows no longer in the table.",
            report.gone.len() as u64,
        ),
    ]
}

/// A one-shot command's end: its outcome (`outcome` of its report, or the
/// error that stopped it), and its metrics (`values` of the report, if it
/// has one) written where `--textfile` says.
fn conclude<R>(
    command: &str,
    textfile: Option<&std::path::Path>,
    report: Result<R, DefiniteError>,
    outcome: impl FnOnce(&R) -> Result<(), DefiniteError>,
    values: impl FnOnce(Option<&R>) -> Vec<(&'static str, &'static str, u64)>,
) -> Result<(), DefiniteError> {
    let outcome = report.as_ref().map_err(Clone::clone).and_then(outcome);
    let values = values(report.as_ref().ok());
    write_textfile(textfile, command, &values, outcome.is_ok())?;
    outcome
}

/// Writes a one-shot command's metrics where `--textfile` says.
fn write_textfile(
    path: Option<&std::path::Path>,
    command: &str,
    values: &[(&str, &str, u64)],
    success: bool,
) -> Result<(), DefiniteError> {
    let Some(path) = path else { return Ok(()) };
    let now = outbox_core::epoch_ms() / 1000;
    let text = crate::metrics::textfile::render(command, values, success, now);
    crate::metrics::textfile::write(path, &text)
}

/// Bad rows and rows gone from the table are listed and fail the command.
fn backfill_outcome(report: &BackfillReport) -> Result<(), DefiniteError> {
    for bad in &report.bad_rows {
        println!("bad row: {bad}");
    }
    for id in &report.gone {
        println!("gone from the table: {id}");
    }
    if report.bad_rows.is_empty() && report.gone.is_empty() {
        return Ok(());
    }
    Err(DefiniteError::Config(format!(
        "{} rows cannot become messages and {} missing rows are no longer in the table: \
         they are not in Kafka (fix the rows and run the command again; `verify` lists what is missing)",
        report.bad_rows.len(),
        report.gone.len()
    )))
}

/// The repair's window, what it published, what it could not prove, and
/// where the checkpoint is now.
fn repair_outcome(report: &RepairReport, options: &RepairOptions) -> Result<(), DefiniteError> {
    println!(
        "repair-gap: window {} to {} (to the start of {}, the oldest binlog, widened by {:?})",
        report.since, report.until, report.oldest_binlog, options.margin
    );
    for line in &report.unproven {
        println!("unproven: {line}");
    }
    if let Some(checkpoint) = &report.moved_to {
        println!("checkpoint moved to {}", checkpoint.position);
    }
    if let Some(backfilled) = &report.backfill {
        println!("repair-gap: {backfilled}");
        for bad in &backfilled.bad_rows {
            println!("bad row: {bad}");
        }
        if !backfilled.bad_rows.is_empty() {
            return Err(DefiniteError::Config(format!(
                "the checkpoint was not moved: {} rows of the gap cannot become messages; fix \
                 them (the log names each), then run again",
                backfilled.bad_rows.len()
            )));
        }
    }
    match &report.moved_to {
        Some(_) => Ok(()),
        None if options.dry_run => Ok(()),
        None => Err(DefiniteError::Config(
            "the checkpoint was not moved: the table cannot prove the gap whole (see \
             `unproven`); repair what you can from elsewhere, then run again with \
             --accept-unproven"
                .into(),
        )),
    }
}
