//! `[ha]`: the active/standby group an instance belongs to.

use serde::Deserialize;

/// `[ha]`: instances with the same group on different hosts, one active
/// (see the `ha` module).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct HaSection {
    /// The group's name: one lock, one shared checkpoint.
    pub group: String,
    /// How long the lock outlives a silent holder; the active instance
    /// stops publishing half a lease after its last confirmation.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Where the active instance shares its checkpoints for the standbys
    /// (one partition, compacted).
    #[serde(default = "default_checkpoint_topic")]
    pub checkpoint_topic: String,
    /// This instance's name in logs and in the `published_by` header.
    #[serde(default = "default_instance")]
    pub instance: String,
}

const fn default_lease_ms() -> u64 {
    8_000
}

fn default_checkpoint_topic() -> String {
    "outbox.forwarder.checkpoints".into()
}

fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    format!("{host}-{}", std::process::id())
}
