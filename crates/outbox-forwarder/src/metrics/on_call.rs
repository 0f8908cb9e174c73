//! The gauges an on-call rotation alerts on beyond the pipeline's own: how
//! long until the server purges the checkpoint's binlog, how old the stored
//! and the group's shared checkpoints are, whether the brokers answer, and
//! which build runs.
//!
//! - `binlog_purge_headroom_seconds`: the server's binlog retention (the
//!   smaller of its own expiry, `binlog_expire_logs_seconds` or
//!   `expire_logs_days`, and on RDS and Aurora `binlog retention hours`,
//!   0 when that is NULL) minus the age of
//!   the file under the stored checkpoint. While the forwarder streams,
//!   caught up, in that file, the server is still writing it and cannot
//!   purge it: the whole expiry is left. Otherwise (behind, not streaming,
//!   or the reader past the file) its age is counted from the commit time
//!   of the newest transaction under the watermark, which is no later than
//!   the file's last write: the headroom shown is never more than the real
//!   one. `+Inf` when the server does not expire binlogs; absent until a
//!   session has read the server's settings, and while RDS's retention
//!   cannot be read (a forwarder that never
//!   streams is what `OutboxForwarderNotStreaming` / `Down` alert on).
//! - `checkpoint_age_seconds`: since this process last stored a checkpoint
//!   (or started).
//! - `group_checkpoint_age_seconds`: in an `[ha]` group, since the broker
//!   last acknowledged a checkpoint this instance shared with the group (or
//!   the start): meaningful on the active instance, and growing there too
//!   while nothing is written to the outbox or elsewhere on the server.
//! - `brokers_up`: 1 while the Kafka brokers answer.
//! - `build_info{version,commit}`: 1.

use std::fmt::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use outbox_sink::BrokerHealth;
use outbox_source::server::PurgeAfter;

use super::{escape, header};

/// The version and the commit this binary was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("OUTBOX_FORWARDER_COMMIT"),
    ")"
);

/// An instant that starts as the moment it was made.
struct Stamp(Mutex<Instant>);

impl Default for Stamp {
    fn default() -> Self {
        Stamp(Mutex::new(Instant::now()))
    }
}

impl Stamp {
    fn touch(&self) {
        *self.0.lock().expect("not poisoned") = Instant::now();
    }

    fn age(&self) -> Duration {
        self.0.lock().expect("not poisoned").elapsed()
    }
}

#[derive(Default)]
pub struct OnCall {
    checkpoint_stored: Stamp,
    group_shared: Stamp,
    /// The `[ha]` group's name, when in one.
    group: OnceLock<String>,
    /// When the server purges a binlog file, once read.
    binlog_retention: Mutex<Option<PurgeAfter>>,
    /// The binlog file the reader is in.
    read_file: Mutex<Option<String>>,
    brokers: OnceLock<Arc<BrokerHealth>>,
}

impl OnCall {
    /// A checkpoint was stored.
    pub fn checkpoint_stored(&self) {
        self.checkpoint_stored.touch();
    }

    /// The broker acknowledged a checkpoint shared with the group.
    pub fn group_checkpoint_shared(&self) {
        self.group_shared.touch();
    }

    /// This instance belongs to `[ha]` group `group`.
    pub fn set_group(&self, group: &str) {
        let _ = self.group.set(group.to_owned());
    }

    /// The `[ha]` group's name, `""` without one.
    pub fn group(&self) -> &str {
        self.group.get().map_or("", String::as_str)
    }

    /// The server streamed from purges binlogs as `retention` says
    /// (`None`: unknown).
    pub fn set_binlog_retention(&self, retention: Option<PurgeAfter>) {
        *self.binlog_retention.lock().expect("not poisoned") = retention;
    }

    /// The reader moved into binlog `file`.
    pub fn set_read_file(&self, file: &str) {
        *self.read_file.lock().expect("not poisoned") = Some(file.to_owned());
    }

    /// Whose answers `brokers_up` reports.
    pub fn set_brokers(&self, brokers: Arc<BrokerHealth>) {
        let _ = self.brokers.set(brokers);
    }

    /// Seconds until the server may purge `checkpoint_file`, as the module
    /// docs say; `None` while unknown.
    pub(super) fn purge_headroom(
        &self,
        checkpoint_file: Option<&str>,
        caught_up: bool,
        watermark_commit_time: u64,
        now_epoch: u64,
    ) -> Option<f64> {
        let expiry = match (*self.binlog_retention.lock().expect("not poisoned"))? {
            PurgeAfter::Never => return Some(f64::INFINITY),
            PurgeAfter::Seconds(seconds) => seconds,
        };
        let checkpoint_file = checkpoint_file?;
        let read_file = self.read_file.lock().expect("not poisoned");
        if caught_up && read_file.as_deref() == Some(checkpoint_file) {
            return Some(expiry as f64);
        }
        if watermark_commit_time == 0 {
            return None;
        }
        let age = now_epoch.saturating_sub(watermark_commit_time);
        Some(expiry.saturating_sub(age) as f64)
    }

    pub(super) fn render(&self, out: &mut String, headroom: Option<f64>) {
        if let Some(headroom) = headroom {
            header(
                out,
                "binlog_purge_headroom_seconds",
                "gauge",
                "Seconds until the server's binlog expiry may purge the file under the stored checkpoint (a lower bound; +Inf when binlogs do not expire).",
            );
            let value = if headroom.is_infinite() {
                "+Inf".to_string()
            } else {
                format!("{headroom:.0}")
            };
            let _ = writeln!(
                out,
                "outbox_forwarder_binlog_purge_headroom_seconds {value}"
            );
        }
        header(
            out,
            "checkpoint_age_seconds",
            "gauge",
            "Seconds since this process last stored a checkpoint (or started).",
        );
        let _ = writeln!(
            out,
            "outbox_forwarder_checkpoint_age_seconds {:.3}",
            self.checkpoint_stored.age().as_secs_f64()
        );
        if self.group.get().is_some() {
            header(
                out,
                "group_checkpoint_age_seconds",
                "gauge",
                "Seconds since the broker last acknowledged a checkpoint shared with the [ha] group (or the start).",
            );
            let _ = writeln!(
                out,
                "outbox_forwarder_group_checkpoint_age_seconds {:.3}",
                self.group_shared.age().as_secs_f64()
            );
        }
        if let Some(brokers) = self.brokers.get() {
            header(
                out,
                "brokers_up",
                "gauge",
                "1 while the Kafka brokers answer the producer.",
            );
            let _ = writeln!(
                out,
                "outbox_forwarder_brokers_up {}",
                u8::from(brokers.is_up())
            );
        }
        header(
            out,
            "build_info",
            "gauge",
            "The version and the commit of this build, as labels; always 1.",
        );
        let _ = writeln!(
            out,
            "outbox_forwarder_build_info{{version=\"{}\",commit=\"{}\"}} 1",
            escape(env!("CARGO_PKG_VERSION")),
            escape(env!("OUTBOX_FORWARDER_COMMIT"))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headroom_is_the_whole_expiry_while_caught_up_in_the_file_and_shrinks_otherwise() {
        let on_call = OnCall::default();
        let now = 1_000_000;
        let headroom =
            |caught_up, commit| on_call.purge_headroom(Some("bin.000007"), caught_up, commit, now);
        assert_eq!(
            headroom(true, now - 10),
            None,
            "the expiry is not known yet"
        );
        on_call.set_binlog_retention(Some(PurgeAfter::Seconds(86_400 * 3)));
        on_call.set_read_file("bin.000007");
        assert_eq!(headroom(true, now - 10), Some(259_200.0));
        // Behind (a broker outage, a full window): the server may have moved
        // on without the reader; the file is at least as old as the newest
        // commit under the watermark.
        assert_eq!(headroom(false, now - 200_000), Some(59_200.0));
        // The reader moved on: the file is closed.
        on_call.set_read_file("bin.000008");
        assert_eq!(headroom(true, now - 300_000), Some(0.0));
        assert_eq!(headroom(true, 0), None, "no commit time known");
        on_call.set_binlog_retention(Some(PurgeAfter::Never));
        assert_eq!(headroom(false, 1), Some(f64::INFINITY));
    }

    #[test]
    fn group_gauges_appear_only_in_a_group_and_the_build_is_named() {
        let on_call = OnCall::default();
        let mut out = String::new();
        on_call.render(&mut out, Some(f64::INFINITY));
        assert!(out.contains("outbox_forwarder_binlog_purge_headroom_seconds +Inf\n"));
        assert!(!out.contains("group_checkpoint_age_seconds"));
        assert!(out.contains(&format!(
            "outbox_forwarder_build_info{{version=\"{}\",commit=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION"),
            env!("OUTBOX_FORWARDER_COMMIT")
        )));
        on_call.set_group("orders");
        let mut out = String::new();
        on_call.render(&mut out, None);
        assert!(out.contains("outbox_forwarder_group_checkpoint_age_seconds "));
        assert!(!out.contains("binlog_purge_headroom_seconds"));
    }
}
