//! Handing a transaction's messages to the producer: events, dead letters
//! (under that policy), each with its GTID slot, and the topic tails
//! recorded before a topic is first written to.

use outbox_core::{DefiniteError, ForwarderError, SourceTransaction};
use outbox_sink::dead_letter_for_event;

use super::publisher::Publisher;
use super::session::Session;
use crate::pipeline::progress::TransactionSeq;

impl<P: Publisher> Session<P> {
    /// Hands every message of `transaction` (whose GTID is `gtid`) to the
    /// producer, tagged with `seq`, but those `published` marks as already
    /// in Kafka (events, then dead letters). Under the dead-letter policy a
    /// row Kafka refuses outright becomes a dead letter instead of stopping.
    pub(super) async fn publish(
        &mut self,
        transaction: &SourceTransaction,
        gtid: Option<&str>,
        seq: TransactionSeq,
        published: Option<&[bool]>,
    ) -> Result<(), ForwarderError> {
        let metrics = self.lasting().metrics.clone();
        if transaction.changed_rows > 0 {
            metrics.rows_changed(u64::from(transaction.changed_rows));
        }
        let is_published = |i: usize| published.is_some_and(|p| p[i]);
        let slot = |i: usize| gtid.map(|g| (g, i as u32));
        for (i, event) in transaction.events.iter().enumerate() {
            if is_published(i) {
                continue;
            }
            let sent = match self.publisher().topic_for(event) {
                Ok(topic) => {
                    self.track(&topic).await?;
                    self.publisher().send_to(&topic, event, seq, slot(i)).await
                }
                Err(e) => Err(e.into()),
            };
            match sent {
                Err(ForwarderError::Definite(DefiniteError::BadRow { reason, .. }))
                    if self.lasting().limits.dead_letter =>
                {
                    tracing::warn!(event_id = %event.event_id, position = %event.origin.event_position, %reason, "event goes to the dead-letter topic");
                    metrics.error("dead_letter");
                    self.track_dead_letters().await?;
                    self.publisher()
                        .send_dead_letter(&dead_letter_for_event(event, reason), seq, slot(i))
                        .await?
                }
                other => other?,
            }
        }
        for (i, dead) in transaction.dead_letters.iter().enumerate() {
            if is_published(transaction.events.len() + i) {
                continue;
            }
            metrics.error("dead_letter");
            self.track_dead_letters().await?;
            let index = transaction.events.len() + i;
            self.publisher()
                .send_dead_letter(dead, seq, slot(index))
                .await?;
        }
        Ok(())
    }

    /// Before the first message to `topic`: records where its partitions
    /// end, and stores that, so a crash after the message leaves the
    /// topic's tail known.
    async fn track(&mut self, topic: &str) -> Result<(), ForwarderError> {
        if self.replay.as_ref().is_none_or(|r| r.knows(topic)) {
            return Ok(());
        }
        let marks = self.publisher().watermarks(topic).await.map_err(|e| {
            ForwarderError::transient(format!(
                "cannot look up the partitions of topic {topic} before writing to it: {e}"
            ))
        })?;
        tracing::info!(
            topic,
            partitions = marks.as_ref().map_or(0, Vec::len),
            "writing to a new topic; its tail is recorded from here"
        );
        if let Some(replay) = &mut self.replay {
            replay.register(topic, marks);
        }
        self.save(false)?;
        Ok(())
    }

    /// [`Session::track`] of the dead-letter topic.
    async fn track_dead_letters(&mut self) -> Result<(), ForwarderError> {
        let topic = self.publisher().dead_letter_topic().to_owned();
        self.track(&topic).await
    }

    /// Looks up the partition count of topics first written to before they
    /// existed, so their tails are recorded per partition.
    pub(super) async fn learn_partition_counts(&mut self) {
        let Some(replay) = &self.replay else {
            return;
        };
        for topic in replay.unknown_counts() {
            if let Ok(Some(marks)) = self.publisher().watermarks(&topic).await {
                if let Some(replay) = &mut self.replay {
                    replay.set_partition_count(&topic, marks.len());
                }
            }
        }
    }
}
