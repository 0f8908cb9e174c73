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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The header of the record an instance stopping cleanly shares last.
const HANDED_OVER: &str = "handed_over_by";

/// The lock's name for `group`.
pub fn lock_name(group: &str) -> String {
    format!("outbox-forwarder/{group}")
}

#[derive(Debug)]
struct Lease {
    active: bool,
    confirmed_at: Instant,
    /// When the lock was taken, plus the hold-off (see [`Leadership::publish_from`]).
    publish_from: Instant,
}

/// Whether this instance is the active one, as far as the lease goes.
#[derive(Debug, Clone)]
pub struct Leadership {
    lease: Duration,
    state: Arc<Mutex<Lease>>,
    changes: watch::Sender<bool>,
    /// When (epoch ms) the last shared record of the group was a hand-over
    /// by an instance that stopped cleanly; 0 if it was not.
    handed_over_at_ms: Arc<AtomicU64>,
}

impl Leadership {
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            state: Arc::new(Mutex::new(Lease {
                active: false,
                confirmed_at: Instant::now(),
                publish_from: Instant::now(),
            })),
            changes: watch::channel(false).0,
            handed_over_at_ms: Arc::default(),
        }
    }

    /// When a new holder may start publishing. The server also frees the
    /// lock at once when the old holder's connection is cut while it lives
    /// (a `KILL`, a proxy reset): that holder stops only at its next failed
    /// ping or when its lease goes stale, so a new holder waits three
    /// quarters of a lease after taking the lock, unless the group's last
    /// shared record is a clean hand-over less than a lease old.
    pub fn publish_from(&self) -> Instant {
        self.state.lock().expect("not poisoned").publish_from
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
            let handed_over = self.handed_over_at_ms.load(Ordering::Relaxed);
            let clean = handed_over > 0
                && epoch_ms().saturating_sub(handed_over) < self.lease.as_millis() as u64;
            lease.publish_from = if clean { at } else { at + self.lease * 3 / 4 };
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
    // Whole seconds, rounded up: the server never frees it sooner.
    let wait_timeout = config.lease_ms.div_ceil(1000).max(1);
    let ping_every = (lease / 6).max(Duration::from_millis(200));
    let bounded = lease / 2;
    let pause = || tokio::time::sleep(Duration::from_millis(500));
    loop {
        if *release.borrow() {
            return;
        }
        // Named locks are per server: every instance takes it on the
        // same one, the first writable candidate (the primary).
        let mut chosen = None;
        for opts in &candidates {
            let Ok(Ok(mut conn)) =
                tokio::time::timeout(bounded, outbox_source::server::connect(opts)).await
            else {
                continue;
            };
            if matches!(
                tokio::time::timeout(bounded, outbox_source::server::role(&mut conn)).await,
                Ok(Ok(outbox_source::server::Role::Writable))
            ) {
                chosen = Some(conn);
                break;
            }
            let _ = conn.disconnect().await;
        }
        let Some(mut conn) = chosen else {
            pause().await;
            continue;
        };
        if conn
            .query_drop(format!("SET SESSION wait_timeout = {wait_timeout}"))
            .await
            .is_err()
        {
            pause().await;
            continue;
        }
        // Standby: ask for the lock until it is ours.
        let mut logged = false;
        loop {
            let asked_at = Instant::now();
            let asked = tokio::time::timeout(
                bounded,
                conn.exec_first::<Option<i64>, _, _>("SELECT GET_LOCK(?, 0)", (name.as_str(),)),
            )
            .await;
            match asked {
                Ok(Ok(Some(Some(1)))) => {
                    leadership.confirm(asked_at);
                    tracing::info!(group = %config.group, instance = %config.instance, "became the active instance of the group");
                    break;
                }
                Ok(Ok(_)) => {
                    if !logged {
                        tracing::info!(group = %config.group, instance = %config.instance, "standby: another instance holds the group's lock");
                        logged = true;
                    }
                }
                _ => {
                    pause().await;
                    break;
                }
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
                let _ = tokio::time::timeout(
                    bounded,
                    conn.exec_drop("SELECT RELEASE_LOCK(?)", (name.as_str(),)),
                )
                .await;
                let _ = tokio::time::timeout(bounded, conn.disconnect()).await;
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

    /// Shares `checkpoint` as this instance's last, before it frees the lock
    /// on a clean stop: the next holder need not hold off.
    pub fn hand_over(&self, checkpoint: &Checkpoint, instance: &str) {
        let value = serde_json::to_vec(checkpoint).expect("a checkpoint serialises");
        let record: BaseRecord<'_, str, [u8]> = BaseRecord::to(&self.topic)
            .key(self.group.as_str())
            .payload(value.as_slice())
            .headers(
                rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                    key: HANDED_OVER,
                    value: Some(instance),
                }),
            );
        if let Err((e, _)) = self.producer.send(record) {
            tracing::warn!(error = %e, topic = %self.topic, "cannot share the hand-over");
        }
    }

    /// Waits (bounded) for the queued checkpoints to be written.
    pub fn flush(&self) {
        let _ = self.producer.flush(Duration::from_secs(5));
    }
}

/// How long [`follow_checkpoints`] reads.
pub enum Until<'a> {
    /// Until this turns true (a standby's background follower).
    Stopped(&'a AtomicBool),
    /// Until every partition was read to its end and then nothing came for
    /// half a second (before taking over), or the deadline.
    CaughtUp(Instant),
}

/// Follows the shared checkpoints of the group into `store` (each newer
/// one) and tells `leadership` whether the last was a clean hand-over.
/// Blocking. An error when the topic cannot be read: a takeover must not
/// start from an older checkpoint than the group's last.
pub fn follow_checkpoints(
    kafka: &KafkaConfig,
    config: &HaSection,
    store: &CheckpointStore,
    leadership: &Leadership,
    until: Until<'_>,
) -> Result<(), String> {
    let consumer: BaseConsumer = kafka
        .connection_config()
        .set(
            "group.id",
            format!("outbox-forwarder-standby-{}", config.instance),
        )
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .map_err(|e| format!("cannot read ha.checkpoint_topic: {e}"))?;
    let topic = &config.checkpoint_topic;
    let marks = outbox_sink::tail::watermarks(consumer.client(), topic)
        .map_err(|e| format!("cannot read ha.checkpoint_topic {topic}: {e}"))?
        .ok_or_else(|| {
            format!(
                "ha.checkpoint_topic {topic} does not exist: create it (one partition, compacted)"
            )
        })?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..marks.len() as i32 {
        let _ = assignment.add_partition_offset(topic, p, Offset::Beginning);
    }
    consumer
        .assign(&assignment)
        .map_err(|e| format!("cannot read ha.checkpoint_topic {topic}: {e}"))?;
    // Per partition, whether the offset before its high watermark was read.
    let mut reached: Vec<bool> = marks.iter().map(|&(low, high)| high <= low).collect();
    let mut last = Instant::now();
    // The newest record read and not yet stored: stored once the topic
    // falls quiet, not once per record (the topic may hold many).
    let mut newest: Option<Checkpoint> = None;
    let store_newest = |newest: &mut Option<Checkpoint>| {
        let Some(shared) = newest.take() else {
            return;
        };
        let newer = match store.load() {
            Ok(Some(own)) => shared.written_at_ms > own.written_at_ms,
            Ok(None) => true,
            Err(_) => false,
        };
        if newer {
            match store.save(&shared) {
                Ok(()) => {
                    tracing::debug!(checkpoint = %shared.position, "shared checkpoint stored")
                }
                Err(e) => tracing::warn!(error = %e, "cannot store the shared checkpoint"),
            }
        }
    };
    loop {
        match until {
            Until::Stopped(stop) if stop.load(Ordering::Relaxed) => {
                store_newest(&mut newest);
                return Ok(());
            }
            Until::CaughtUp(deadline) => {
                if reached.iter().all(|r| *r) && last.elapsed() > Duration::from_millis(500) {
                    store_newest(&mut newest);
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "reading ha.checkpoint_topic {topic} to its end took too long"
                    ));
                }
            }
            _ => {}
        }
        let message = match consumer.poll(Duration::from_millis(100)) {
            None => {
                store_newest(&mut newest);
                continue;
            }
            Some(Err(e)) => return Err(format!("cannot read ha.checkpoint_topic {topic}: {e}")),
            Some(Ok(message)) => message,
        };
        last = Instant::now();
        if let Some(r) = reached.get_mut(message.partition() as usize) {
            let high = marks[message.partition() as usize].1;
            *r = *r || message.offset() + 1 >= high;
        }
        if message.key() != Some(config.group.as_bytes()) {
            continue;
        }
        let Some(Ok(shared)) = message.payload().map(serde_json::from_slice::<Checkpoint>) else {
            continue;
        };
        let handed_over = message.headers().is_some_and(|h| {
            use rdkafka::message::Headers;
            h.iter().any(|h| h.key == HANDED_OVER)
        });
        leadership.handed_over_at_ms.store(
            if handed_over { shared.written_at_ms } else { 0 },
            Ordering::Relaxed,
        );
        if newest
            .as_ref()
            .is_none_or(|n| shared.written_at_ms >= n.written_at_ms)
        {
            newest = Some(shared);
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
