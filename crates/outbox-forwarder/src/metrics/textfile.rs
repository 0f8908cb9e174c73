//! The metrics of a one-shot command (`backfill`, `repair-gap`, `prune`)
//! for a cron job: written to a file in the Prometheus text format that
//! node_exporter's textfile collector serves (`--textfile PATH`), replaced
//! whole so a scrape never reads half of it.

use std::fmt::Write;
use std::path::Path;

use outbox_core::DefiniteError;

/// `outbox_forwarder_{command}_{name} value` for each of `values`, then
/// `..._last_run_timestamp_seconds` and `..._last_run_success`.
pub fn render(
    command: &str,
    values: &[(&str, &str, u64)],
    success: bool,
    now_seconds: u64,
) -> String {
    let command = command.replace('-', "_");
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: u64| {
        let _ = writeln!(out, "# HELP outbox_forwarder_{command}_{name} {help}");
        let _ = writeln!(out, "# TYPE outbox_forwarder_{command}_{name} gauge");
        let _ = writeln!(out, "outbox_forwarder_{command}_{name} {value}");
    };
    for (name, help, value) in values {
        gauge(name, help, *value);
    }
    gauge(
        "last_run_timestamp_seconds",
        "When the last run ended (epoch seconds).",
        now_seconds,
    );
    gauge(
        "last_run_success",
        "1 if the last run succeeded.",
        u64::from(success),
    );
    out
}

/// Writes `text` to `path` through a temporary file in the same directory.
pub fn write(path: &Path, text: &str) -> Result<(), DefiniteError> {
    let failed = |e: std::io::Error| {
        DefiniteError::Config(format!(
            "cannot write the metrics to {}: {e}",
            path.display()
        ))
    };
    let temporary = path.with_extension("prom.tmp");
    std::fs::write(&temporary, text).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_renders_its_counts_and_its_outcome() {
        let text = render(
            "repair-gap",
            &[("published", "Rows published.", 12)],
            true,
            1_764_000_000,
        );
        assert!(text.contains("# TYPE outbox_forwarder_repair_gap_published gauge\n"));
        assert!(text.contains("\noutbox_forwarder_repair_gap_published 12\n"));
        assert!(
            text.contains("\noutbox_forwarder_repair_gap_last_run_timestamp_seconds 1764000000\n")
        );
        assert!(text.ends_with("outbox_forwarder_repair_gap_last_run_success 1\n"));
    }
}
