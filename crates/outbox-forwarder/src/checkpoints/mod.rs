//! The one writer of checkpoints, and the group's shared record of them.
//!
//! [`CheckpointWriter`] is the only code that writes a checkpoint: to the
//! local sled store (durably, before it returns) and, in an `[ha]` group, to
//! the group's topic (`[ha] checkpoint_topic`, key = the group). It shares
//! only while this instance may publish (the fence: a lease confirmed less
//! than half a lease ago), never on the role alone, so an instance that
//! wakes from a freeze cannot share a stale checkpoint under a fresh
//! timestamp.
//!
//! A share counts once the broker acknowledged it: each delivery report is
//! counted (`outbox_forwarder_ha_share_failures_total`), and while the last
//! one failed the active instance is not ready (`/readyz` 503). Records that
//! gate publishing (the group's first start, a hand-over, an operator's
//! `checkpoint set`) are waited for; a failed one is an error, never a
//! warning.
//!
//! Reading the group's topic ([`crate::group::read_group`]) looks only at its
//! tail: the newest record of the group is what counts, so a takeover takes
//! as long with a million records in the topic as with ten. A group with no
//! record has never started; a group whose newest record cannot be read has
//! a history nobody can establish, and no instance publishes until an
//! operator sets the checkpoint.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_checkpoint::{Checkpoint, CheckpointStore};
use outbox_core::DefiniteError;

use crate::group::{GroupLog, KafkaLog, Kind, Leadership, Record};
use crate::metrics::Metrics;

mod operator;
pub use operator::operator_checkpoint;

/// Writes the checkpoints of one forwarder (see the module doc).
pub struct CheckpointWriter {
    store: CheckpointStore,
    group: Option<GroupShare>,
    metrics: Arc<Metrics>,
    /// The group's record last adopted, and its offset (see
    /// [`CheckpointWriter::adopt`]).
    adopted: Mutex<Option<(i64, Checkpoint)>>,
    /// Each record adopted, once stored: what a standby's barrier
    /// (`/acked`) answers from.
    adopted_watch: tokio::sync::watch::Sender<Option<Checkpoint>>,
}

struct GroupShare {
    log: Arc<dyn GroupLog>,
    leadership: Leadership,
    instance: String,
}

impl GroupShare {
    /// The fence of the records that must be acknowledged: refused unless
    /// this instance may publish.
    fn fenced(&self) -> Result<(), String> {
        if self.leadership.may_publish() {
            Ok(())
        } else {
            Err("the group's lease is not fresh".into())
        }
    }

    fn record<'a>(&'a self, checkpoint: &'a Checkpoint, kind: Kind) -> Record<'a> {
        Record {
            checkpoint,
            kind,
            by: &self.instance,
        }
    }
}

impl CheckpointWriter {
    pub fn new(store: CheckpointStore, metrics: Arc<Metrics>) -> Self {
        Self {
            store,
            group: None,
            metrics,
            adopted: Mutex::new(None),
            adopted_watch: tokio::sync::watch::channel(None).0,
        }
    }

    /// The group's records as this instance adopts them (a standby's).
    pub fn adopted(&self) -> tokio::sync::watch::Receiver<Option<Checkpoint>> {
        self.adopted_watch.subscribe()
    }

    /// In a group: checkpoints are shared on the group's `log` while
    /// `leadership` may publish.
    pub fn in_group(
        mut self,
        log: Arc<dyn GroupLog>,
        leadership: Leadership,
        instance: &str,
    ) -> Self {
        self.group = Some(GroupShare {
            log,
            leadership,
            instance: instance.to_owned(),
        });
        self
    }

    /// The writer of an operator's command (`checkpoint set`,
    /// `repair-gap`): in a group, sharing with it (acknowledged, see
    /// [`CheckpointWriter::set_by_operator`]).
    pub fn for_operator(
        config: &crate::config::ForwarderConfig,
        store: CheckpointStore,
    ) -> Result<Self, DefiniteError> {
        let metrics = Arc::new(Metrics::default());
        let writer = Self::new(store, metrics.clone());
        let Some(ha) = &config.ha else {
            return Ok(writer);
        };
        let log = KafkaLog::for_operator(&config.kafka_config(), ha, metrics)?;
        let leadership = Leadership::new(Duration::from_millis(ha.lease_ms));
        Ok(writer.in_group(Arc::new(log), leadership, &ha.instance))
    }

    pub fn store(&self) -> &CheckpointStore {
        &self.store
    }

    pub fn load(&self) -> Result<Option<Checkpoint>, DefiniteError> {
        self.store.load()
    }

    /// Writes the watermark's checkpoint: stored durably, then shared (not
    /// waited for) if this instance may publish.
    pub fn write(&self, checkpoint: &Checkpoint) -> Result<(), DefiniteError> {
        self.store.save(checkpoint)?;
        if let Some(g) = &self.group {
            if g.leadership.may_publish() {
                g.log.append(g.record(checkpoint, Kind::Checkpoint));
            }
        }
        self.metrics.checkpoint_written(&checkpoint.position);
        Ok(())
    }

    /// Takes back a clean stop's promise before anything is published
    /// after it: stored, and in a group shared and acknowledged, so that no
    /// instance skips the read-back after this one published. Returns the
    /// checkpoint as now stored.
    pub fn unclean(&self, checkpoint: &Checkpoint) -> Result<Checkpoint, String> {
        // Written now: a standby that adopted the clean one takes this one.
        let mut checkpoint = checkpoint.clone().rewritten_now();
        checkpoint.clean = false;
        if let Some(g) = &self.group {
            // Fenced as every other share: a stale instance's record would
            // land behind its successor's with a newer stamp.
            g.fenced()?;
            g.log
                .append_acked(g.record(&checkpoint, Kind::Checkpoint))?;
        }
        self.store.save(&checkpoint).map_err(|e| e.to_string())?;
        Ok(checkpoint)
    }

    /// Writes where a stream starts that has no checkpoint yet, or where a
    /// group starts whose topic has no record (from `checkpoint.start`, or
    /// from the instance's own checkpoint). In a group this is the group's
    /// first start: recorded on its topic, and acknowledged, before
    /// anything is published.
    pub fn write_first(&self, checkpoint: &Checkpoint) -> Result<(), String> {
        if let Some(g) = &self.group {
            g.fenced()?;
            g.log.append_acked(g.record(checkpoint, Kind::FirstStart))?;
            tracing::warn!(topic = %g.log.topic(), start = %checkpoint.position, "first start of the group: its topic had no record of it; where it starts is recorded on the group's topic");
        }
        self.store.save(checkpoint).map_err(|e| e.to_string())?;
        self.metrics.checkpoint_written(&checkpoint.position);
        Ok(())
    }

    /// Stores the group's newest record, found at `offset` of its topic,
    /// unless it is the one this process adopted last (a standby following
    /// the active one; a new holder). The topic orders the group's records:
    /// one written after the last adopted one is newer whatever its
    /// timestamp says (the clocks of different hosts), and it replaces this
    /// instance's own checkpoint, which the group has moved on from (or an
    /// operator moved back). A record is known by its offset and content:
    /// the newest record at a lower offset than the one adopted last, or
    /// another record at that offset, is a recreated topic's, followed as
    /// well. True if stored.
    pub fn adopt(&self, shared: &Checkpoint, offset: i64) -> Result<bool, DefiniteError> {
        let mut adopted = self.adopted.lock().expect("not poisoned");
        if let Some((last, record)) = &*adopted {
            if offset == *last && record == shared {
                return Ok(false);
            }
            if offset <= *last {
                tracing::warn!(
                    offset,
                    last_adopted = *last,
                    "the group's newest record is not the one adopted last at this offset or \
                     after: the group's topic was recreated; following it"
                );
            }
        }
        self.store.save(shared)?;
        *adopted = Some((offset, shared.clone()));
        self.adopted_watch.send_replace(Some(shared.clone()));
        tracing::debug!(checkpoint = %shared.position, offset, "shared checkpoint stored");
        Ok(true)
    }

    /// On a clean stop of an instance that published in this term: its
    /// last checkpoint, shared as a hand-over (the next holder need not
    /// hold off) and waited for.
    pub fn hand_over(&self) {
        let Some(g) = &self.group else {
            return;
        };
        if !g.leadership.may_publish() {
            return;
        }
        let Ok(Some(last)) = self.store.load() else {
            return;
        };
        let handed = g
            .log
            .append_acked(g.record(&last.rewritten_now(), Kind::HandOver));
        if let Err(e) = handed {
            tracing::warn!("the hand-over was not shared ({e}): the next holder holds off");
        }
    }

    /// Holding the lock, before anything is published in this term: the
    /// term's mark on the group's topic, with `adopted` (the group's newest
    /// checkpoint), acknowledged; an error if it was not (the term then
    /// publishes nothing). With `handed_over`, the offset of that
    /// checkpoint when it was a clean hand-over: true if this instance's
    /// mark is the first record after it, and so this the first holder
    /// since: only that one may skip the hold-off. A holder that took the
    /// lock after another one (whose lock connection was cut within the
    /// lease) finds that one's mark first, and holds off.
    pub fn record_term(
        &self,
        adopted: &Checkpoint,
        handed_over: Option<i64>,
    ) -> Result<bool, String> {
        let Some(g) = &self.group else {
            return Ok(false);
        };
        g.fenced()?;
        let recorded = g.log.append_acked(g.record(adopted, Kind::Term))?;
        let Some(handed_over) = handed_over else {
            return Ok(false);
        };
        // The log orders the marks: only one holder finds none between.
        let deadline = std::time::Instant::now() + crate::group::ACK_WAIT;
        let between =
            tokio::task::block_in_place(|| g.log.any_between(handed_over + 1, recorded, deadline))?;
        Ok(!between)
    }

    /// An operator's `checkpoint set`: stored, and shared with the group
    /// (waited for: the group's next takeover must start from it).
    /// Shared first: a checkpoint the group did not take is not stored
    /// either, and the command can simply be run again.
    pub fn set_by_operator(&self, checkpoint: &Checkpoint) -> Result<(), DefiniteError> {
        if let Some(g) = &self.group {
            g.log
                .append_acked(Record {
                    checkpoint,
                    kind: Kind::Checkpoint,
                    by: "operator",
                })
                .map_err(|e| {
                    DefiniteError::Config(format!(
                        "not shared with the group, and not stored: {e}; run it again"
                    ))
                })?;
        }
        self.store.save(checkpoint)
    }

    /// An operator's `checkpoint reset`: removes the stored checkpoint, so
    /// that the next run starts at `checkpoint.start`; true if one was
    /// stored. A group's record is left as it is: an instance of the group
    /// takes the group's checkpoint from its topic when it starts, whatever
    /// its own store holds (moving the group is `checkpoint set`'s).
    pub fn reset_by_operator(&self) -> Result<bool, DefiniteError> {
        self.store.reset()
    }
}

/// Opens the checkpoint store at `checkpoint.path`: the one way every
/// command does (sled lets one process at a time hold a store; the error
/// says when another does).
pub fn open_store(
    config: &crate::config::ForwarderConfig,
) -> Result<CheckpointStore, DefiniteError> {
    CheckpointStore::open(&config.checkpoint.path)
}

#[cfg(test)]
mod tests;
