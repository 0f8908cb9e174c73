//! `[ha]`: the active/standby group an instance belongs to.

use serde::Deserialize;

/// `[ha]`: instances with the same group on different hosts, one active
/// (see the `ha` module).
#[derive(Deserialize, Clone, Debug)]
#[serde(from = "HaToml")]
pub struct HaSection {
    /// The group's name: one lock, one shared checkpoint.
    pub group: String,
    /// How long the lock outlives a silent holder; the active instance
    /// stops publishing half a lease after its last confirmation.
    pub lease_ms: u64,
    /// Where the active instance shares its checkpoints for the standbys
    /// (one partition, compacted); by default one topic per group.
    pub checkpoint_topic: String,
    /// This instance's name in logs and in the `published_by` header.
    pub instance: String,
    /// Appended to the lock's name (`outbox-forwarder/<group>/<suffix>`):
    /// a value only the group's instances know keeps another account from
    /// taking the lock first. Every instance of the group sets the same.
    pub lock_suffix: Option<String>,
}

/// The longest user-level lock name MySQL and MariaDB take.
pub const MAX_LOCK_NAME: usize = 64;

impl HaSection {
    /// The name of the group's lock on the primary, with the group's secret
    /// suffix if it has one.
    pub fn lock_name(&self) -> String {
        match &self.lock_suffix {
            Some(suffix) => format!("outbox-forwarder/{}/{suffix}", self.group),
            None => format!("outbox-forwarder/{}", self.group),
        }
    }
}

/// `[ha]` as written: the checkpoint topic's default follows the group.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HaToml {
    group: String,
    #[serde(default = "default_lease_ms")]
    lease_ms: u64,
    checkpoint_topic: Option<String>,
    #[serde(default = "default_instance")]
    instance: String,
    lock_suffix: Option<String>,
}

impl From<HaToml> for HaSection {
    fn from(toml: HaToml) -> Self {
        Self {
            checkpoint_topic: toml
                .checkpoint_topic
                .unwrap_or_else(|| default_checkpoint_topic(&toml.group)),
            group: toml.group,
            lease_ms: toml.lease_ms,
            instance: toml.instance,
            lock_suffix: toml.lock_suffix,
        }
    }
}

const fn default_lease_ms() -> u64 {
    8_000
}

/// A topic of the group's own: a takeover reads the group's newest record
/// from the tail, and in a topic shared with busier groups that record
/// sinks under theirs until it can no longer be found in time.
fn default_checkpoint_topic(group: &str) -> String {
    format!("{}{group}", outbox_sink::GROUP_TOPIC_PREFIX)
}

fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    format!("{host}-{}", std::process::id())
}
