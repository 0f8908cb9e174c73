//! The table tools: one-shot commands that read the outbox tables beside
//! the topics, rather than the binlog.
//!
//! Their base is [`verify`]'s: which tables and rows are selected
//! ([`verify::Selection`]), the connection to the server a fresh start
//! would pick, and the comparison of rows with messages by event id, over
//! the [`window`] of the topics the rows need (never a topic's whole
//! history), read along a table's [`key`] at a [`pace`], its progress
//! logged by a `meter`. On it:
//!
//! - [`backfill`]: publishes rows from their table;
//! - [`repair`]: `repair-gap`, backfills what a purged binlog gap lost and
//!   moves the checkpoint past it;
//! - [`prune`]: deletes rows known to be in Kafka, once (`prune`) or
//!   continuously inside `run` (`[retention]`, [`prune::retention`]).

pub mod audit;
pub mod backfill;
pub mod key;
mod meter;
pub mod pace;
pub mod prune;
pub mod repair;
pub mod verify;
pub mod window;

/// A duration as the table tools take it: `90s`, `10m`, `12h`, `7d`,
/// `250ms` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 90s, 10m, 12h, 7d)"))?;
    let seconds = match unit {
        "ms" => return Ok(std::time::Duration::from_millis(n)),
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m, h or d")),
    };
    Ok(std::time::Duration::from_secs(seconds))
}

/// A `--since` or `--until` given as a time ago (`1h`, `30m`: digits and
/// a unit), in seconds; `None` for a time (`2026-11-29 10:00:00`, or
/// digits alone, which MySQL reads as a date).
pub fn ago(text: &str) -> Option<u64> {
    let unit = text.trim().ends_with(|c: char| c.is_ascii_alphabetic());
    let digits = text.trim().starts_with(|c: char| c.is_ascii_digit());
    match unit && digits {
        true => parse_duration(text).ok().map(|d| d.as_secs()),
        false => None,
    }
}
