//! Active/standby operation: several instances with the same `[ha] group`,
//! one active.
//!
//! **Leadership** is a MySQL named lock, `GET_LOCK('outbox-forwarder/<group>')`
//! on the source, held by a dedicated connection whose session has
//! `wait_timeout` = the lease. The server releases the lock when that
//! session ends: at once when the holder dies (its socket closes), and after
//! a lease of silence when it is frozen or cut off (the holder pings the
//! lock several times per lease while it is well). A standby asks for the
//! lock every half second.
//!
//! **The fence** is the lease, kept on the publishing side: the active
//! instance hands a transaction to the producer only while its last
//! confirmation of the lock is less than half a lease old (a monotonic
//! clock, which runs on while a process is stopped), and its producer gives
//! up on a message after a quarter of a lease (`message.timeout.ms`). So a
//! frozen or partitioned instance stops sending by half a lease after its
//! last good ping, and whatever it had queued expires by three quarters of
//! a lease (librdkafka scans for expired messages before it produces, after
//! a pause of a second or more), while the server frees the lock a whole
//! lease after that ping: a new active instance starts after the old one
//! can no longer publish. What remains is a request already written by
//! librdkafka into its socket buffer before the freeze. A network split
//! between the active instance and MySQL works the same way: its pings fail
//! within a quarter of a lease and it steps down.
//!
//! **Warm standby**: the active instance writes every checkpoint it stores
//! to `[ha] checkpoint_topic` (key = the group); a standby follows that
//! topic into its own store, so a takeover starts from a checkpoint at most
//! one flush interval old, and the topic tails it records make the replay
//! publish nothing twice.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Opts;
use outbox_checkpoint::{Checkpoint, CheckpointStore};
use outbox_sink::KafkaConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;

use crate::config::HaSection;

/// The lock's name for `group`.
pub fn lock_name(group: &str) -> String {
    format!("outbox-forwarder/{group}")
}

#[derive(Debug)]
struct Lease {
    active: bool,
    confirmed_at: Instant,
}

/// Whether this instance is the active one, as far as the lease goes.
#[derive(Debug, Clone)]
pub struct Leadership {
    lease: Duration,
    state: Arc<Mutex<Lease>>,
    changes: watch::Sender<bool>,
}

impl Leadership {
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            state: Arc::new(Mutex::new(Lease {
                active: false,
                confirmed_at: Instant::now(),
            })),
            changes: watch::channel(false).0,
        }
    }

    /// Holds the lock and may hand messages to the producer: the lock was
    /// confirmed less than half a lease ago.
    pub fn may_publish(&self) -> bool {
        let lease = self.state.lock().expect("not poisoned");
        lease.active && lease.confirmed_at.elapsed() < self.lease / 2
    }

    pub fn is_active(&self) -> bool {
        self.state.lock().expect("not poisoned").active
    }

    /// Resolves on every change of the role.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.changes.subscribe()
    }

    fn confirm(&self, at: Instant) {
        let mut lease = self.state.lock().expect("not poisoned");
        lease.confirmed_at = at;
        if !lease.active {
            lease.active = true;
            self.changes.send_replace(true);
        }
    }

    fn demote(&self) {
        let mut lease = self.state.lock().expect("not poisoned");
        if lease.active {
            lease.active = false;
            self.changes.send_replace(false);
        }
    }
}

/// Takes and holds the group's lock on the first candidate that answers,
/// until `release` turns true (then frees it at once) or `shutdown`.
pub async fn hold_lock(
    candidates: Vec<Opts>,
    config: HaSection,
    leadership: Leadership,
    mut release: watch::Receiver<bool>,
) {
    let name = lock_name(&config.group);
    let lease = Duration::from_millis(config.lease_ms);
    let wait_timeout = lease.as_secs().max(1);
    let ping_every = (lease / 6).max(Duration::from_millis(200));
    let mut next = 0;
    loop {
        if *release.borrow() {
            return;
        }
        let opts = candidates[next % candidates.len()].clone();
        next += 1;
        let Ok(mut conn) = outbox_source::server::connect(&opts).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        if conn
            .query_drop(format!("SET SESSION wait_timeout = {wait_timeout}"))
            .await
            .is_err()
        {
            continue;
        }
        // Standby: ask for the lock until it is ours.
        let mut logged = false;
        loop {
            let asked_at = Instant::now();
            match conn
                .exec_first::<Option<i64>, _, _>("SELECT GET_LOCK(?, 0)", (name.as_str(),))
                .await
            {
                Ok(Some(Some(1))) => {
                    leadership.confirm(asked_at);
                    tracing::info!(group = %config.group, instance = %config.instance, "became the active instance of the group");
                    break;
                }
                Ok(_) => {
                    if !logged {
                        tracing::info!(group = %config.group, instance = %config.instance, "standby: another instance holds the group's lock");
                        logged = true;
                    }
                }
                Err(_) => break,
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = release.wait_for(|r| *r) => return,
            }
        }
        // Active: keep confirming the lock; losing it demotes at once.
        while leadership.is_active() {
            let handing_over = tokio::select! {
                _ = tokio::time::sleep(ping_every) => false,
                _ = release.wait_for(|r| *r) => true,
            };
            if handing_over {
                let _ = conn
                    .exec_drop("SELECT RELEASE_LOCK(?)", (name.as_str(),))
                    .await;
                let _ = conn.disconnect().await;
                leadership.demote();
                tracing::info!(group = %config.group, "released the group's lock");
                return;
            }
            let asked_at = Instant::now();
            let ping = tokio::time::timeout(
                lease / 4,
                conn.exec_first::<Option<i64>, _, _>(
                    "SELECT IS_USED_LOCK(?) = CONNECTION_ID()",
                    (name.as_str(),),
                ),
            )
            .await;
            match ping {
                Ok(Ok(Some(Some(1)))) => leadership.confirm(asked_at),
                other => {
                    leadership.demote();
                    tracing::warn!(group = %config.group, instance = %config.instance, answer = ?other.map(|r| r.map_err(|e| e.to_string())), "lost the group's lock: stepping down");
                }
            }
        }
    }
}

/// Writes the checkpoints of the active instance to the shared topic.
pub struct CheckpointShare {
    producer: ThreadedProducer<DefaultProducerContext>,
    topic: String,
    group: String,
}

impl CheckpointShare {
    pub fn new(
        kafka: &KafkaConfig,
        config: &HaSection,
    ) -> Result<Self, outbox_core::DefiniteError> {
        let producer = kafka
            .connection_config()
            .set("linger.ms", "0")
            .create()
            .map_err(|e| {
                outbox_core::DefiniteError::Config(format!(
                    "cannot create the producer of ha.checkpoint_topic: {e}"
                ))
            })?;
        Ok(Self {
            producer,
            topic: config.checkpoint_topic.clone(),
            group: config.group.clone(),
        })
    }

    /// Queues `checkpoint` for the topic (best effort: a lost one is
    /// superseded by the next).
    pub fn share(&self, checkpoint: &Checkpoint) {
        let value = serde_json::to_vec(checkpoint).expect("a checkpoint serialises");
        let record: BaseRecord<'_, str, [u8]> = BaseRecord::to(&self.topic)
            .key(self.group.as_str())
            .payload(value.as_slice());
        if let Err((e, _)) = self.producer.send(record) {
            tracing::warn!(error = %e, topic = %self.topic, "cannot share the checkpoint");
        }
    }

    /// Waits (bounded) for the queued checkpoints to be written.
    pub fn flush(&self) {
        let _ = self.producer.flush(Duration::from_secs(5));
    }
}

/// A standby's follower of the shared checkpoints: stores each newer one
/// of the group until `done(the last message's arrival)` holds. Blocking;
/// run it on its own thread.
pub fn follow_checkpoints(
    kafka: &KafkaConfig,
    config: &HaSection,
    store: &CheckpointStore,
    done: &dyn Fn(Instant) -> bool,
) {
    let consumer: BaseConsumer = match kafka
        .connection_config()
        .set(
            "group.id",
            format!("outbox-forwarder-standby-{}", config.instance),
        )
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
    {
        Ok(consumer) => consumer,
        Err(e) => {
            tracing::warn!(error = %e, "cannot follow ha.checkpoint_topic");
            return;
        }
    };
    let topic = &config.checkpoint_topic;
    let partitions = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(5))
        .ok()
        .and_then(|m| {
            m.topics()
                .iter()
                .find(|t| t.name() == topic.as_str())
                .map(|t| t.partitions().len())
        })
        .unwrap_or(0);
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        let _ = assignment.add_partition_offset(topic, p, Offset::Beginning);
    }
    if partitions == 0 || consumer.assign(&assignment).is_err() {
        tracing::warn!(topic = %topic, "ha.checkpoint_topic cannot be read: a takeover starts from this instance's own checkpoint");
        return;
    }
    let mut last = Instant::now();
    while !done(last) {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        last = Instant::now();
        if message.key() != Some(config.group.as_bytes()) {
            continue;
        }
        let Some(Ok(shared)) = message.payload().map(serde_json::from_slice::<Checkpoint>) else {
            continue;
        };
        let newer = match store.load() {
            Ok(Some(own)) => shared.written_at_ms > own.written_at_ms,
            Ok(None) => true,
            Err(_) => false,
        };
        if newer {
            if let Err(e) = store.save(&shared) {
                tracing::warn!(error = %e, "cannot store the shared checkpoint");
            } else {
                tracing::debug!(checkpoint = %shared.position, "shared checkpoint stored");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fence's clock: a confirmed lease allows publishing for half a
    /// lease, then not, even while the lock is still believed held (a
    /// process that was stopped wakes up with a stale confirmation).
    #[test]
    fn publishing_stops_half_a_lease_after_the_last_confirmation() {
        let leadership = Leadership::new(Duration::from_millis(200));
        assert!(!leadership.may_publish(), "a standby never publishes");
        let mut role = leadership.subscribe();
        leadership.confirm(Instant::now());
        assert!(role.has_changed().unwrap() && *role.borrow_and_update());
        assert!(leadership.may_publish());
        std::thread::sleep(Duration::from_millis(120));
        assert!(leadership.is_active());
        assert!(!leadership.may_publish(), "the confirmation is stale");
        leadership.confirm(Instant::now());
        assert!(leadership.may_publish(), "a fresh ping renews it");
        leadership.demote();
        assert!(!leadership.may_publish());
        assert!(!*role.borrow_and_update());
    }
}
