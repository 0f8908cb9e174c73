//! The arguments the table tools share, and their parsers.

use std::path::PathBuf;

use outbox_core::DefiniteError;

use crate::tables::repair::RepairOptions;
use crate::tables::verify::Selection;

/// `repair-gap`'s arguments.
#[derive(clap::Args)]
pub(super) struct RepairGapArgs {
    #[arg(long)]
    config: PathBuf,
    /// Widen the window by this much on either side (long transactions,
    /// clocks): e.g. 10m, 1h.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    margin: std::time::Duration,
    /// The window's start, for a checkpoint that does not record when
    /// its newest transaction was committed (e.g. "2026-11-29 10:00:00").
    #[arg(long)]
    since: Option<String>,
    /// The rows' creation time column.
    #[arg(long, default_value = "created_at", value_parser = time_column)]
    time_column: String,
    /// Move the checkpoint even where the table cannot prove the gap
    /// whole (no rows in the window, rows deleted before the window's start).
    #[arg(long)]
    accept_unproven: bool,
    /// Only print the window and what cannot be proved.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    reading: Reading,
    #[command(flatten)]
    kafka: KafkaWindow,
    /// Write the run's metrics to this file (node_exporter's textfile collector).
    #[arg(long)]
    textfile: Option<PathBuf>,
}

impl RepairGapArgs {
    /// The configuration file, what the command is asked, and the metrics
    /// file.
    pub(super) fn into_parts(self) -> (PathBuf, RepairOptions, Option<PathBuf>) {
        let options = RepairOptions {
            margin: self.margin,
            since: self.since,
            time_column: self.time_column,
            max_rows_per_second: self.reading.max_rows_per_second,
            chunk: self.reading.chunk.max(1),
            replica_wait: self.reading.replica_wait,
            accept_unproven: self.accept_unproven,
            dry_run: self.dry_run,
            kafka: self.kafka.into(),
        };
        (self.config, options, self.textfile)
    }
}

/// Which outbox rows `verify` and `backfill` read.
#[derive(clap::Args)]
pub(super) struct RowSelection {
    /// Only rows created at or after this time (e.g. "2026-11-29 10:00:00"),
    /// or this long ago (e.g. 1h, 30m, 7d).
    #[arg(long)]
    since: Option<String>,
    /// Only rows created before this time (or this long ago).
    #[arg(long)]
    until: Option<String>,
    /// The column --since/--until apply to.
    #[arg(long, default_value = "created_at", value_parser = time_column)]
    time_column: String,
    /// Only this event id (repeatable).
    #[arg(long = "event-id")]
    event_ids: Vec<String>,
}

impl From<RowSelection> for Selection {
    fn from(rows: RowSelection) -> Self {
        Selection {
            since: rows.since,
            until: rows.until,
            time_column: rows.time_column,
            event_ids: rows.event_ids,
        }
    }
}

/// How a table is read.
#[derive(clap::Args)]
pub(super) struct Reading {
    /// Rows read from the outbox tables per second, at most.
    #[arg(long)]
    pub(super) max_rows_per_second: Option<u32>,
    /// Rows per query.
    #[arg(long, default_value_t = 1000)]
    pub(super) chunk: usize,
    /// Under mysql.publish_after_replicas: how long a chunk waits for
    /// enough replicas to have its rows before the command gives up.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(super) replica_wait: std::time::Duration,
}

/// How the table tools read Kafka: the rows' window, not the topics'
/// history.
#[derive(clap::Args)]
pub(super) struct KafkaWindow {
    /// Read Kafka from this long before the oldest selected row's creation
    /// time (clocks of different hosts, long transactions): e.g. 15m, 2h.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    kafka_margin: std::time::Duration,
    /// Messages read from Kafka per second, at most.
    #[arg(long)]
    max_messages_per_second: Option<u32>,
}

impl From<KafkaWindow> for crate::tables::window::Reading {
    fn from(window: KafkaWindow) -> Self {
        Self {
            margin: window.kafka_margin,
            max_messages_per_second: window.max_messages_per_second,
            until_ms: None,
            ids_only: false,
        }
    }
}

/// `90s`, `10m`, `12h`, `7d`, `250ms`, or plain seconds.
/// `--time-column`: a column name, refused with a backtick or a NUL.
pub(super) fn time_column(name: &str) -> Result<String, String> {
    outbox_core::sql::configured_name("--time-column", name)?;
    Ok(name.to_owned())
}

pub(super) use crate::tables::parse_duration;

/// Event ids, one per line (blank lines and `#` comments skipped), from
/// `path` or standard input (`-`).
pub(super) fn read_event_ids(path: &std::path::Path) -> Result<Vec<String>, DefiniteError> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| DefiniteError::Config(format!("cannot read {}: {e}", path.display())))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        let s = std::time::Duration::from_secs;
        assert_eq!(parse_duration("90s"), Ok(s(90)));
        assert_eq!(parse_duration("90"), Ok(s(90)));
        assert_eq!(parse_duration("10m"), Ok(s(600)));
        assert_eq!(parse_duration("12h"), Ok(s(43_200)));
        assert_eq!(parse_duration("7d"), Ok(s(604_800)));
        assert_eq!(
            parse_duration("250ms"),
            Ok(std::time::Duration::from_millis(250))
        );
        assert!(parse_duration("7w").unwrap_err().contains("unit"));
        assert!(parse_duration("soon").is_err());
    }
}
