//! The stored checkpoint on the chosen server: served by GTID, or its
//! binlog file still there and how long until the server's expiry purges
//! it.

use mysql_async::Conn;
use outbox_checkpoint::Checkpoint;
use outbox_source::server::{self, PurgeAfter};

use super::{Checked, Report, Status};
use crate::config::ForwarderConfig;
use crate::resume::Via;

pub(super) async fn checks(
    config: &ForwarderConfig,
    checkpoint: Option<&Checkpoint>,
    via: Option<&Via>,
    purge_after: Option<PurgeAfter>,
    conn: &mut Conn,
    report: &mut Report,
) -> Checked {
    let logs = server::binary_logs(conn).await?;
    let Some(checkpoint) = checkpoint else {
        report.add(
            Status::Pass,
            "stored checkpoint",
            format!("none; will start at \"{}\"", config.checkpoint.start),
            "-",
            "",
        );
        return Ok(());
    };
    match via {
        // Refused: the `source` line says why.
        None => return Ok(()),
        Some(Via::Gtid(state)) => {
            report.add(
                Status::Pass,
                "checkpoint gtid",
                format!("{state}: the server has every transaction of it and purged none after it"),
                "served",
                "",
            );
            return Ok(());
        }
        Some(Via::FilePos { .. }) => {}
    }
    let file = &checkpoint.position.file;
    if !logs.iter().any(|(f, _)| f == file) {
        let gone = outbox_core::DefiniteError::BinlogNotAvailable {
            position: checkpoint.position.clone(),
            oldest: logs.first().map(|(f, _)| f.clone()),
            server_message: "SHOW BINARY LOGS does not list the file".into(),
        };
        report.add(
            Status::Fail,
            "checkpoint binlog",
            gone.to_string(),
            "present",
            "see above",
        );
        return Ok(());
    }
    // Unknown (RDS's retention unreadable): the `binlog retention` line says so.
    let Some(purge_after) = purge_after else {
        return Ok(());
    };
    let age = outbox_core::epoch_ms().saturating_sub(checkpoint.written_at_ms) / 1000;
    expiry_line(file, purge_after, age, report);
    Ok(())
}

/// How long the checkpoint's binlog `file` is left before the server's
/// expiry purges it, counted from the checkpoint's age (the file is at
/// least that old): under a day is a warning.
pub(super) fn expiry_line(
    file: &str,
    purge_after: PurgeAfter,
    age_seconds: u64,
    report: &mut Report,
) {
    let PurgeAfter::Seconds(expire_seconds) = purge_after else {
        report.add(
            Status::Pass,
            "checkpoint binlog",
            format!("{file} present; the server does not expire binlogs"),
            "present",
            "",
        );
        return;
    };
    let left = expire_seconds.saturating_sub(age_seconds);
    report.add(
        if left < 86_400 {
            Status::Warn
        } else {
            Status::Pass
        },
        "checkpoint binlog",
        format!(
            "{file} present; expiry purges it in at most {}h",
            left / 3600
        ),
        "present for more than a day",
        "keep the forwarder running, or raise the binlog retention (see the `binlog \
         retention` line: binlog_expire_logs_seconds, or on RDS and Aurora binlog retention \
         hours)",
    );
}
