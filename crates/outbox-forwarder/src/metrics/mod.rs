//! Prometheus metrics of one forwarder, rendered in the text exposition
//! format. The pipeline updates them; the HTTP listener reads them.
//!
//! - `events_forwarded_total{topic}` and `bytes_forwarded_total` count acked
//!   messages (dead letters included, under their topic);
//! - `ack_latency_seconds` is the time from reading a transaction's commit
//!   event (the batch it was read in) to the broker's ack of each message,
//!   as its delivery report comes in (not when the pipeline counts it);
//! - `producer_latency_seconds` is the part of it spent in the producer,
//!   from handing a message to it to its delivery report (the linger, the
//!   request and the broker), as librdkafka times it: the rest is the
//!   forwarder's own (decoding, and the hand-over to the publishing loop);
//! - `lag_seconds` is now minus the commit time of the newest transaction
//!   under the acked watermark, and 0 when nothing is pending and the
//!   reader has read all the binlog there is (caught up);
//! - `oldest_unacked_age_seconds` is how long the oldest pending message
//!   has waited for its ack;
//! - `replay_skipped_total` counts events not published again because the
//!   topic tails read back at a session's start held them, and
//!   `replay_fallbacks_total` the sessions that could not trust the tails
//!   and published everything after the checkpoint again;
//! - `outbox_rows_changed_total` counts outbox rows updated or deleted,
//!   under `outbox.on_update` / `on_delete = "warn"`;
//! - `ha_share_failures_total` counts checkpoints shared with an `[ha]`
//!   group that the broker did not acknowledge;
//! - under `mysql.publish_after_replicas`, `publish_held_seconds` is how
//!   long the next transaction has waited for enough replicas to apply it
//!   (0 when none waits), and per replica `replica_up`,
//!   `replica_behind_transactions` and `replica_behind_seconds` say whether
//!   it answers and how far it is behind what the forwarder has read;
//! - [`on_call`]: the purge headroom of the checkpoint's binlog, the ages
//!   of the stored and the group's checkpoints, the brokers, the build.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use outbox_core::BinlogPosition;

mod audit;
mod on_call;
pub mod textfile;

pub use audit::AuditMetrics;
pub use on_call::{OnCall, VERSION};

/// Upper bounds of the latency histogram, in seconds: half a millisecond
/// apart up to 5 ms, where a forwarder near the broker's own floor acks (a
/// p99 of 3 ms must read differently from one of 5), then coarser up to the
/// seconds an outage or a backlog takes.
const LATENCY_BUCKETS: [f64; 26] = [
    0.0005, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.0035, 0.004, 0.0045, 0.005, 0.006, 0.008, 0.01,
    0.0125, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upper bounds of the commit-to-ack histogram, in seconds: from a healthy
/// few milliseconds to the hour a backlog after an outage can take.
const BACKLOG_BUCKETS: [f64; 18] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0,
];

#[derive(Default)]
pub struct Metrics {
    forwarded: Mutex<BTreeMap<String, u64>>,
    bytes_forwarded: AtomicU64,
    in_flight: AtomicU64,
    checkpoint: Mutex<Option<BinlogPosition>>,
    /// Commit time (epoch seconds) of the newest transaction under the watermark.
    watermark_commit_time: AtomicU64,
    /// When the oldest pending message was read; `None` when none is pending.
    oldest_unacked: Mutex<Option<Instant>>,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    reconnects: AtomicU64,
    replay_skipped: AtomicU64,
    replay_fallbacks: AtomicU64,
    /// Outbox rows updated or deleted, seen under `on_update`/`on_delete = "warn"`.
    rows_changed: AtomicU64,
    /// How long the last read-back of the topic tails took, in microseconds.
    replay_scan_micros: AtomicU64,
    latency: Mutex<Histogram>,
    commit_latency: Mutex<BacklogHistogram>,
    producer_latency: Mutex<Histogram>,
    /// A binlog session is up and streaming.
    streaming: AtomicBool,
    /// The reader has read everything the server had written.
    caught_up: AtomicBool,
    /// A standby of an `[ha]` group (not the active instance).
    standby: AtomicBool,
    /// The group's lock is held by a session of another account.
    lock_held_by_other_account: AtomicBool,
    /// What this instance last read of its `[ha]` group's record.
    group_state: AtomicU8,
    /// Checkpoints shared with the group that the broker did not take.
    share_failures: AtomicU64,
    /// The last checkpoint shared with the group was not acknowledged.
    share_failing: AtomicBool,
    /// Since when the next transaction waits for replicas to apply it.
    held_since: Mutex<Option<Instant>>,
    /// Under `mysql.publish_after_replicas`: each replica, by address.
    replicas: Mutex<BTreeMap<String, ReplicaView>>,
    /// `[retention]`: rows deleted, rows the last pass kept (not proved
    /// published), failed passes, and when the last pass succeeded.
    retention_deleted: AtomicU64,
    retention_kept: AtomicU64,
    retention_failures: AtomicU64,
    retention_last_success: AtomicU64,
    /// What on-call alerts on beyond the pipeline's own gauges.
    pub on_call: OnCall,
    /// `[audit]`'s findings.
    pub audit: AuditMetrics,
}

/// What an instance read of its `[ha]` group's newest record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// Not read yet.
    Unknown = 0,
    /// The group's topic holds no record of it (or does not exist).
    NeverStarted = 1,
    Started = 2,
    /// The newest record is not one this release reads.
    Unreadable = 3,
}

/// What the forwarder knows of one replica.
#[derive(Debug, Clone, Copy)]
struct ReplicaView {
    up: bool,
    /// Transactions read that it has not been seen to apply.
    behind: u64,
    /// Since when it has been behind.
    behind_since: Option<Instant>,
}

struct Histogram {
    bounds: &'static [f64],
    /// Per bucket, the latencies above the previous bound and at most its
    /// own (one increment per latency; cumulated when rendered).
    counts: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new(&LATENCY_BUCKETS)
    }
}

/// A histogram with the bounds a backlog reaches.
struct BacklogHistogram(Histogram);

impl Default for BacklogHistogram {
    fn default() -> Self {
        Self(Histogram::new(&BACKLOG_BUCKETS))
    }
}

impl Metrics {
    /// `messages` acked on `topic`, with `bytes` of payload.
    pub fn acked(&self, topic: &str, messages: u64, bytes: u64) {
        let mut forwarded = self.forwarded.lock().expect("not poisoned");
        match forwarded.get_mut(topic) {
            Some(n) => *n += messages,
            None => {
                forwarded.insert(topic.to_owned(), messages);
            }
        }
        drop(forwarded);
        self.bytes_forwarded.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The read-to-ack latency of each acked message.
    pub fn ack_latencies(&self, latencies: &[Duration]) {
        self.latency.lock().expect("not poisoned").record(latencies);
    }

    /// The commit-to-ack latency of each acked message whose commit time
    /// is known.
    pub fn commit_latencies(&self, latencies: &[Duration]) {
        if !latencies.is_empty() {
            self.commit_latency
                .lock()
                .expect("not poisoned")
                .0
                .record(latencies);
        }
    }

    /// The time each acked message spent in the producer.
    pub fn producer_latencies(&self, latencies: &[Duration]) {
        if !latencies.is_empty() {
            self.producer_latency
                .lock()
                .expect("not poisoned")
                .record(latencies);
        }
    }

    /// State of the ack queue after a change.
    pub fn progress(
        &self,
        in_flight: usize,
        oldest_unacked: Option<Instant>,
        watermark_commit_time: u32,
    ) {
        self.in_flight.store(in_flight as u64, Ordering::Relaxed);
        *self.oldest_unacked.lock().expect("not poisoned") = oldest_unacked;
        if watermark_commit_time > 0 {
            self.watermark_commit_time
                .store(u64::from(watermark_commit_time), Ordering::Relaxed);
        }
    }

    pub fn checkpoint_written(&self, position: &BinlogPosition) {
        *self.checkpoint.lock().expect("not poisoned") = Some(position.clone());
        self.on_call.checkpoint_stored();
    }

    pub fn error(&self, kind: &'static str) {
        *self
            .errors
            .lock()
            .expect("not poisoned")
            .entry(kind)
            .or_default() += 1;
    }

    pub fn reconnect(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
    }

    /// A session's start read back the topic tails in `took`.
    pub fn tails_read(&self, took: Duration) {
        self.replay_scan_micros
            .store(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// A session's start could not trust the topic tails.
    pub fn replay_fallback(&self) {
        self.replay_fallbacks.fetch_add(1, Ordering::Relaxed);
    }

    /// An event was not published again: the tails held it.
    pub fn replay_skipped(&self, events: u64) {
        self.replay_skipped.fetch_add(events, Ordering::Relaxed);
    }

    /// A transaction updated or deleted `rows` outbox rows (under `warn`).
    /// A `[retention]` pass ended: `deleted` rows deleted, `kept` left as
    /// not proved published; `ok` false when it failed.
    pub fn retention_pass(&self, deleted: u64, kept: u64, ok: bool) {
        if ok {
            self.retention_deleted.fetch_add(deleted, Ordering::Relaxed);
            self.retention_kept.store(kept, Ordering::Relaxed);
            self.retention_last_success
                .store(outbox_core::epoch_ms() / 1000, Ordering::Relaxed);
        } else {
            self.retention_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn rows_changed(&self, rows: u64) {
        self.rows_changed.fetch_add(rows, Ordering::Relaxed);
    }

    /// In an `[ha]` group: whether this instance is the active one.
    pub fn set_active(&self, active: bool) {
        self.standby.store(!active, Ordering::Relaxed);
    }

    /// What this instance read of its `[ha]` group's newest record.
    pub fn set_group_state(&self, state: GroupState) {
        self.group_state.store(state as u8, Ordering::Relaxed);
    }

    pub fn group_state(&self) -> GroupState {
        match self.group_state.load(Ordering::Relaxed) {
            1 => GroupState::NeverStarted,
            2 => GroupState::Started,
            3 => GroupState::Unreadable,
            _ => GroupState::Unknown,
        }
    }

    /// Whether the group's lock is held by another account's session;
    /// returns what it was.
    pub fn set_lock_held_by_other_account(&self, foreign: bool) -> bool {
        self.lock_held_by_other_account
            .swap(foreign, Ordering::Relaxed)
    }

    /// The broker's answer to a checkpoint shared with the group.
    pub fn share_delivered(&self, acked: bool) {
        if acked {
            self.on_call.group_checkpoint_shared();
        } else {
            self.share_failures.fetch_add(1, Ordering::Relaxed);
        }
        self.share_failing.store(!acked, Ordering::Relaxed);
    }

    /// The last checkpoint shared with the group was not acknowledged.
    pub fn is_share_failing(&self) -> bool {
        self.share_failing.load(Ordering::Relaxed)
    }

    pub fn is_standby(&self) -> bool {
        self.standby.load(Ordering::Relaxed)
    }

    pub fn set_streaming(&self, streaming: bool) {
        self.streaming.store(streaming, Ordering::Relaxed);
    }

    pub fn set_caught_up(&self, caught_up: bool) {
        self.caught_up.store(caught_up, Ordering::Relaxed);
    }

    pub fn is_streaming(&self) -> bool {
        self.streaming.load(Ordering::Relaxed)
    }

    /// The next transaction waits for replicas since `since` (`None`: it
    /// does not wait).
    pub fn set_held_since(&self, since: Option<Instant>) {
        *self.held_since.lock().expect("not poisoned") = since;
    }

    /// How long the next transaction has waited for replicas.
    pub fn held_for(&self) -> Duration {
        self.held_since
            .lock()
            .expect("not poisoned")
            .map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// Forgets the replicas of the last session.
    pub fn reset_replicas(&self) {
        self.replicas.lock().expect("not poisoned").clear();
    }

    /// Replica `label` answers (or not) and is `behind` transactions behind.
    pub fn set_replica(&self, label: &str, up: bool, behind: u64) {
        let mut replicas = self.replicas.lock().expect("not poisoned");
        let view = replicas.entry(label.to_owned()).or_insert(ReplicaView {
            up,
            behind: 0,
            behind_since: None,
        });
        view.up = up;
        view.behind = behind;
        view.behind_since = match (behind, view.behind_since) {
            (0, _) => None,
            (_, Some(since)) => Some(since),
            (_, None) => Some(Instant::now()),
        };
    }

    /// Each replica in a few words, for the log.
    pub fn describe_replicas(&self) -> String {
        let replicas = self.replicas.lock().expect("not poisoned");
        if replicas.is_empty() {
            return "none answered yet".into();
        }
        replicas
            .iter()
            .map(|(label, view)| match (view.up, view.behind_since) {
                (false, _) => format!("{label} unreachable"),
                (true, None) => format!("{label} in sync"),
                (true, Some(since)) => format!(
                    "{label} {} transactions behind for {:.1}s",
                    view.behind,
                    since.elapsed().as_secs_f64()
                ),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// See the module docs. A transaction held for replicas makes the lag
    /// at least as long as its hold.
    pub fn lag(&self) -> Duration {
        self.held_for().max(self.watermark_lag())
    }

    fn watermark_lag(&self) -> Duration {
        let nothing_pending = self.oldest_unacked.lock().expect("not poisoned").is_none();
        if nothing_pending && self.caught_up.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        let commit = self.watermark_commit_time.load(Ordering::Relaxed);
        if commit == 0 {
            return Duration::ZERO;
        }
        let now = match outbox_core::epoch_ms() / 1000 {
            0 => commit,
            now => now,
        };
        Duration::from_secs(now.saturating_sub(commit))
    }

    /// The `[ha]` group's gauges, the group as a label.
    fn render_group(&self, out: &mut String) {
        header(out, "ha_active", "gauge", "1 on the active instance of an [ha] group (and without [ha]), 0 on a standby; the group as a label (empty without [ha]).");
        let _ = writeln!(
            out,
            "outbox_forwarder_ha_active{{group=\"{}\"}} {}",
            escape(self.on_call.group()),
            u8::from(!self.is_standby())
        );
        header(out, "ha_group_started", "gauge", "1 once this instance has read a record of its [ha] group (the group has started; always 1 without [ha]); 0 while the group's topic holds none (start it: `outbox-forwarder group start`) or cannot be read. The group as a label.");
        let started = self.on_call.group().is_empty() || self.group_state() == GroupState::Started;
        let _ = writeln!(
            out,
            "outbox_forwarder_ha_group_started{{group=\"{}\"}} {}",
            escape(self.on_call.group()),
            u8::from(started)
        );
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        header(
            &mut out,
            "events_forwarded_total",
            "counter",
            "Messages acked by Kafka, by topic.",
        );
        for (topic, n) in self.forwarded.lock().expect("not poisoned").iter() {
            let _ = writeln!(
                out,
                "outbox_forwarder_events_forwarded_total{{topic=\"{}\"}} {n}",
                escape(topic)
            );
        }
        self.render_group(&mut out);
        self.render_singles(&mut out);
        header(
            &mut out,
            "checkpoint_position",
            "gauge",
            "The stored checkpoint: file as a label, position as the value.",
        );
        if let Some(position) = self.checkpoint.lock().expect("not poisoned").as_ref() {
            let _ = writeln!(
                out,
                "outbox_forwarder_checkpoint_position{{file=\"{}\"}} {}",
                escape(&position.file),
                position.pos
            );
        }
        self.render_replicas(&mut out);
        self.render_on_call(&mut out);
        self.audit.render(&mut out);
        self.render_errors(&mut out);
        self.render_latencies(&mut out);
        out
    }
}

impl Metrics {
    /// The metrics of one value each, without labels.
    fn render_singles(&self, out: &mut String) {
        let oldest = self
            .oldest_unacked
            .lock()
            .expect("not poisoned")
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        let scan_seconds = self.replay_scan_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let single: [(&str, &str, &str, String); 17] = [
            ("ha_lock_held_by_other_account", "gauge", "1 while the [ha] group's lock is held by a session of another MySQL account than this instance's: not an instance of the group, and no instance publishes.", u8::from(self.lock_held_by_other_account.load(Ordering::Relaxed)).to_string()),
            ("ha_share_failures_total", "counter", "Checkpoints shared with the [ha] group that the broker did not acknowledge.", self.share_failures.load(Ordering::Relaxed).to_string()),
            ("bytes_forwarded_total", "counter", "Payload bytes acked by Kafka.", self.bytes_forwarded.load(Ordering::Relaxed).to_string()),
            ("in_flight_messages", "gauge", "Messages sent and not yet acked.", self.in_flight.load(Ordering::Relaxed).to_string()),
            ("lag_seconds", "gauge", "Now minus the commit time of the newest transaction under the acked watermark; 0 when caught up.", self.lag().as_secs().to_string()),
            ("oldest_unacked_age_seconds", "gauge", "How long the oldest pending message has waited for its ack.", format!("{oldest:.3}")),
            ("reconnects_total", "counter", "Sessions restarted after a transient failure.", self.reconnects.load(Ordering::Relaxed).to_string()),
            ("streaming", "gauge", "1 while a binlog session is up.", u8::from(self.is_streaming()).to_string()),
            ("replay_skipped_total", "counter", "Events not published again after a restart: the topic tails read back already held them.", self.replay_skipped.load(Ordering::Relaxed).to_string()),
            ("replay_fallbacks_total", "counter", "Session starts that could not trust the topic tails and published everything after the checkpoint again.", self.replay_fallbacks.load(Ordering::Relaxed).to_string()),
            ("replay_scan_seconds", "gauge", "How long the last read-back of the topic tails took.", format!("{scan_seconds:.6}")),
            ("outbox_rows_changed_total", "counter", "Outbox rows updated or deleted, seen under outbox.on_update / on_delete = \"warn\" (rows are events, written once).", self.rows_changed.load(Ordering::Relaxed).to_string()),
            ("retention_deleted_rows_total", "counter", "Outbox rows [retention] deleted, each under the stored checkpoint.", self.retention_deleted.load(Ordering::Relaxed).to_string()),
            ("retention_kept_rows", "gauge", "Rows older than [retention]'s cut-off that its last pass kept: not yet under the stored checkpoint.", self.retention_kept.load(Ordering::Relaxed).to_string()),
            ("retention_failures_total", "counter", "[retention] passes that failed.", self.retention_failures.load(Ordering::Relaxed).to_string()),
            ("retention_last_success_timestamp_seconds", "gauge", "When the last [retention] pass ended well (epoch seconds); 0 before the first.", self.retention_last_success.load(Ordering::Relaxed).to_string()),
            ("publish_held_seconds", "gauge", "How long the next transaction has waited for mysql.publish_after_replicas replicas to apply it; 0 when none waits.", format!("{:.3}", self.held_for().as_secs_f64())),
        ];
        for (name, kind, help, value) in single {
            header(out, name, kind, help);
            let _ = writeln!(out, "outbox_forwarder_{name} {value}");
        }
    }

    /// The latency histograms.
    fn render_latencies(&self, out: &mut String) {
        self.latency.lock().expect("not poisoned").render(
            out,
            "ack_latency_seconds",
            "From reading a transaction's commit event to the broker's ack of each of its messages.",
        );
        self.commit_latency.lock().expect("not poisoned").0.render(
            out,
            "commit_to_ack_seconds",
            "From a transaction's commit on the primary (to the millisecond on MySQL, the second on MariaDB) to the broker's ack of each of its messages, dead letters included, by this host's clock; a backlog shows here, not in ack_latency_seconds.",
        );
        self.producer_latency.lock().expect("not poisoned").render(
            out,
            "producer_latency_seconds",
            "From handing a message to the producer to its delivery report (linger, request, broker).",
        );
    }

    /// The on-call gauges, with the purge headroom of the stored
    /// checkpoint's file.
    fn render_on_call(&self, out: &mut String) {
        let checkpoint_file = self
            .checkpoint
            .lock()
            .expect("not poisoned")
            .as_ref()
            .map(|p| p.file.clone());
        let headroom = self.on_call.purge_headroom(
            checkpoint_file.as_deref(),
            self.is_streaming() && self.caught_up.load(Ordering::Relaxed),
            self.watermark_commit_time.load(Ordering::Relaxed),
            outbox_core::epoch_ms() / 1000,
        );
        self.on_call.render(out, headroom);
    }

    /// `errors_total` by kind. The kinds alerts count appear at 0 from the
    /// start: increase() cannot see a series' first sample, so the first
    /// error would not count otherwise.
    fn render_errors(&self, out: &mut String) {
        header(out, "errors_total", "counter", "Errors by kind.");
        let mut errors = self.errors.lock().expect("not poisoned").clone();
        for kind in ["dead_letter", "definite", "transient"] {
            errors.entry(kind).or_default();
        }
        for (kind, n) in &errors {
            let _ = writeln!(out, "outbox_forwarder_errors_total{{kind=\"{kind}\"}} {n}");
        }
    }

    fn render_replicas(&self, out: &mut String) {
        let replicas = self.replicas.lock().expect("not poisoned");
        type Series = (&'static str, &'static str, fn(&ReplicaView) -> String);
        let series: [Series; 3] = [
            (
                "replica_up",
                "1 while the replica answers the forwarder (mysql.publish_after_replicas).",
                |v| u8::from(v.up).to_string(),
            ),
            (
                "replica_behind_transactions",
                "Transactions read from the binlog that the replica has not been seen to apply.",
                |v| v.behind.to_string(),
            ),
            (
                "replica_behind_seconds",
                "How long the replica has been behind what the forwarder has read; 0 when in sync.",
                |v| {
                    format!(
                        "{:.3}",
                        v.behind_since.map_or(0.0, |t| t.elapsed().as_secs_f64())
                    )
                },
            ),
        ];
        for (name, help, value) in series {
            header(out, name, "gauge", help);
            for (label, view) in replicas.iter() {
                let _ = writeln!(
                    out,
                    "outbox_forwarder_{name}{{replica=\"{}\"}} {}",
                    escape(label),
                    value(view)
                );
            }
        }
    }
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            count: 0,
            sum: 0.0,
        }
    }

    fn record(&mut self, latencies: &[Duration]) {
        for latency in latencies {
            let seconds = latency.as_secs_f64();
            let bucket = self.bounds.partition_point(|&bound| bound < seconds);
            if let Some(count) = self.counts.get_mut(bucket) {
                *count += 1;
            }
            self.count += 1;
            self.sum += seconds;
        }
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, "histogram", help);
        let mut cumulative = 0;
        for (count, bound) in self.counts.iter().zip(self.bounds) {
            cumulative += count;
            let _ = writeln!(
                out,
                "outbox_forwarder_{name}_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "outbox_forwarder_{name}_bucket{{le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "outbox_forwarder_{name}_sum {}", self.sum);
        let _ = writeln!(out, "outbox_forwarder_{name}_count {}", self.count);
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(
        out,
        "# HELP outbox_forwarder_{name} {help}\n# TYPE outbox_forwarder_{name} {kind}"
    );
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_counted_by_topic_and_bucketed_by_latency() {
        let m = Metrics::default();
        m.acked("outbox.order", 1, 100);
        m.acked("outbox.order", 1, 50);
        m.acked("outbox.user", 1, 10);
        m.ack_latencies(&[
            Duration::from_millis(3),
            Duration::from_millis(30),
            Duration::from_secs(20),
            Duration::from_secs(60),
        ]);
        m.checkpoint_written(&BinlogPosition::new("bin.000002", 77));
        m.error("transient");
        let text = m.render();
        assert!(
            text.contains("outbox_forwarder_events_forwarded_total{topic=\"outbox.order\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("outbox_forwarder_events_forwarded_total{topic=\"outbox.user\"} 1\n"));
        assert!(text.contains("outbox_forwarder_bytes_forwarded_total 160\n"));
        assert!(text.contains("outbox_forwarder_ack_latency_seconds_bucket{le=\"0.0025\"} 0\n"));
        // A bound is inclusive (`le`): 3 ms falls in the 3 ms bucket.
        assert!(text.contains("outbox_forwarder_ack_latency_seconds_bucket{le=\"0.003\"} 1\n"));
        assert!(text.contains("outbox_forwarder_ack_latency_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("outbox_forwarder_ack_latency_seconds_bucket{le=\"0.05\"} 2\n"));
        assert!(text.contains("outbox_forwarder_ack_latency_seconds_bucket{le=\"30\"} 3\n"));
        assert!(text.contains("outbox_forwarder_ack_latency_seconds_bucket{le=\"+Inf\"} 4\n"));
        assert!(text.contains("outbox_forwarder_ack_latency_seconds_count 4\n"));
        // Its own histogram, on the same bounds.
        m.producer_latencies(&[Duration::from_micros(1200)]);
        let text = m.render();
        assert!(text.contains("outbox_forwarder_producer_latency_seconds_bucket{le=\"0.001\"} 0\n"));
        assert!(
            text.contains("outbox_forwarder_producer_latency_seconds_bucket{le=\"0.0015\"} 1\n")
        );
        assert!(text.contains("outbox_forwarder_producer_latency_seconds_count 1\n"));
        assert!(text.contains("outbox_forwarder_ack_latency_seconds_count 4\n"));
        assert!(text.contains("outbox_forwarder_checkpoint_position{file=\"bin.000002\"} 77\n"));
        assert!(text.contains("outbox_forwarder_errors_total{kind=\"transient\"} 1\n"));
    }

    #[test]
    fn a_hold_for_replicas_counts_as_lag_and_each_replica_is_shown() {
        let m = Metrics::default();
        m.set_caught_up(true);
        assert_eq!(m.lag(), Duration::ZERO, "caught up, nothing pending");
        m.set_held_since(Some(Instant::now() - Duration::from_secs(5)));
        assert!(m.lag() >= Duration::from_secs(5));
        m.set_replica("10.0.0.2:3306", true, 0);
        m.set_replica("10.0.0.3:3306", false, 7);
        let text = m.render();
        assert!(text.contains("outbox_forwarder_replica_up{replica=\"10.0.0.2:3306\"} 1\n"));
        assert!(text.contains("outbox_forwarder_replica_up{replica=\"10.0.0.3:3306\"} 0\n"));
        assert!(text.contains(
            "outbox_forwarder_replica_behind_transactions{replica=\"10.0.0.3:3306\"} 7\n"
        ));
        assert!(text.contains(
            "outbox_forwarder_replica_behind_seconds{replica=\"10.0.0.2:3306\"} 0.000\n"
        ));
        assert!(m.describe_replicas().contains("10.0.0.3:3306 unreachable"));
        m.set_held_since(None);
        assert_eq!(m.lag(), Duration::ZERO, "released");
    }
}
