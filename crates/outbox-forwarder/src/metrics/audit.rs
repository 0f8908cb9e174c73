//! The auditor's gauges and counters (`[audit]`, see
//! [`crate::tables::audit`]): rows proven in Kafka, rows not proven yet and
//! how long the oldest has waited, what the passes read.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::header;

/// What the auditor has found.
#[derive(Default)]
pub struct AuditMetrics {
    proven: AtomicU64,
    unproven: AtomicU64,
    /// When the oldest row still unproven was first found so, and the
    /// settle delay it had waited before (seconds).
    oldest_unproven: Mutex<Option<(Instant, u64)>>,
    messages_read: AtomicU64,
    failures: AtomicU64,
    /// The end of the time the last good pass proved (epoch seconds).
    proved_until: AtomicU64,
}

impl AuditMetrics {
    /// A pass ended well: `proven` rows newly proven, `unproven` left (the
    /// oldest found unproven at `oldest`, after `settle_s`), `read`
    /// messages read, every row created before `until` (epoch seconds)
    /// looked at.
    pub fn pass(
        &self,
        proven: u64,
        unproven: u64,
        oldest: Option<Instant>,
        settle_s: u64,
        read: u64,
        until: u64,
    ) {
        self.proven.fetch_add(proven, Ordering::Relaxed);
        self.unproven.store(unproven, Ordering::Relaxed);
        *self.oldest_unproven.lock().expect("not poisoned") = oldest.map(|at| (at, settle_s));
        self.messages_read.fetch_add(read, Ordering::Relaxed);
        self.proved_until.store(until, Ordering::Relaxed);
    }

    /// The auditor began at `epoch` (seconds): its lag counts from there
    /// until a pass ends well.
    pub fn started(&self, epoch: u64) {
        self.proved_until.store(epoch, Ordering::Relaxed);
    }

    pub fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    pub fn render(&self, out: &mut String) {
        let oldest = self
            .oldest_unproven
            .lock()
            .expect("not poisoned")
            .map_or(0, |(at, settle)| at.elapsed().as_secs() + settle);
        let until = self.proved_until.load(Ordering::Relaxed);
        let lag = match until {
            0 => 0,
            until => (outbox_core::epoch_ms() / 1000).saturating_sub(until),
        };
        let all: [(&str, &str, &str, u64); 6] = [
            ("audit_proven_rows_total", "counter", "Outbox rows the auditor found in Kafka by their table and event id.", self.proven.load(Ordering::Relaxed)),
            ("audit_unproven_rows", "gauge", "Committed outbox rows older than the settle delay that the auditor has not found in Kafka (named in the log).", self.unproven.load(Ordering::Relaxed)),
            ("audit_oldest_unproven_seconds", "gauge", "How long the oldest unproven row has been committed, at least (since the pass that first missed it, plus the settle delay); 0 when none.", oldest),
            ("audit_messages_read_total", "counter", "Kafka messages the auditor read.", self.messages_read.load(Ordering::Relaxed)),
            ("audit_failures_total", "counter", "Audit passes that could not read the table or the topics.", self.failures.load(Ordering::Relaxed)),
            ("audit_lag_seconds", "gauge", "Now minus the newest creation time the last good pass looked at (the settle delay and the interval), or minus the auditor's start before a pass ends well; 0 with [audit] off.", lag),
        ];
        for (name, kind, help, value) in all {
            header(out, name, kind, help);
            let _ = writeln!(out, "outbox_forwarder_{name} {value}");
        }
    }
}
