//! The group's side: partition state shared with librdkafka's rebalance
//! callbacks, which commit settled offsets before a partition goes.

use super::*;

/// State shared with librdkafka's callbacks (which run inside `recv`, on
/// the consumer's own task, between two messages).
#[derive(Default)]
pub(super) struct GroupState {
    pub(super) ledger: Mutex<OffsetLedger>,
    /// Partitions revoked since the loop last looked; their lanes go.
    pub(super) revoked: Mutex<Vec<Partition>>,
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data stays consistent across a panic elsewhere (each
    // update is a single call), so a poisoned lock is still usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// librdkafka callbacks: logging, rebalances, commit results.
pub(super) struct GroupContext {
    pub(super) state: Arc<GroupState>,
    pub(super) auth: outbox_kafka::ClientAuth,
}

impl ClientContext for GroupContext {
    outbox_kafka::oauth_from!(auth);

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        outbox_kafka::log_librdkafka(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, "kafka client error: {reason}");
    }
}

pub(super) fn partitions_of(list: &TopicPartitionList) -> Vec<Partition> {
    list.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let partitions = partitions_of(list);
            let released = lock(&self.state.ledger).release(&partitions);
            if let Some(offsets) = released {
                match consumer.commit(&offsets, CommitMode::Sync) {
                    Ok(()) => tracing::info!(?partitions, "revoked: settled offsets committed"),
                    // The next owner repeats what this commit would have
                    // covered; the inbox skips those as duplicates.
                    Err(error) => {
                        tracing::warn!(%error, ?partitions, "revoked: committing settled offsets failed")
                    }
                }
            }
            lock(&self.state.revoked).extend(partitions);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                // A partition this member paused before it was revoked would
                // stay paused when it comes back.
                if let Err(error) = consumer.resume(list) {
                    tracing::warn!(%error, "resuming newly assigned partitions failed");
                }
                tracing::info!(partitions = ?partitions_of(list), "partitions assigned");
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(error) => tracing::warn!(%error, "rebalance failed"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(error) = result {
            tracing::warn!(%error, "committing offsets failed; they are sent again with the next commit");
            lock(&self.state.ledger).mark_dirty(offsets);
        }
    }
}
