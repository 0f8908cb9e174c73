//! Working on a lane's front: a batch, or the failed head alone, and what
//! its outcome settles.

use super::*;

impl InboxConsumer {
    /// One attempt at the head of `partition`'s lane: a batch of the events
    /// waiting there when the head has not failed before, the head alone
    /// otherwise.
    pub(super) async fn work_on<H: Handler>(
        &self,
        handler: &H,
        partition: &Partition,
        lane: &mut Lane,
    ) {
        if lane.batches() && self.work_on_batch(handler, partition, lane).await {
            return;
        }
        let Some(message) = lane.waiting.front() else {
            return;
        };
        let attempt = lane.failures + lane.outages + 1;
        let step = self.attempt(handler, message, lane.failures, attempt).await;
        self.conclude(partition, lane, step, attempt);
    }

    /// Processes the lane's first events (up to `inbox.max_batch`, the
    /// decodable ones) in one transaction, settles those that reached an
    /// outcome and concludes the failed attempt of the event after them,
    /// if any. Returns false, having done nothing, when fewer than two
    /// events would make the batch.
    pub(super) async fn work_on_batch<H: Handler>(
        &self,
        handler: &H,
        partition: &Partition,
        lane: &mut Lane,
    ) -> bool {
        let events: Vec<InboxEvent> = lane
            .waiting
            .iter()
            .take(self.config.inbox.max_batch)
            .map_while(|message| self.decode(message).ok())
            .collect();
        if events.len() < 2 {
            return false;
        }
        let result = self.inbox.process_batch(handler, &events).await;
        let settled = result.outcomes.len();
        for (outcome, event) in result.outcomes.into_iter().zip(&events) {
            let message = lane
                .waiting
                .pop_front()
                .expect("a batch is taken from the lane");
            self.report_settled(&message, event, outcome, 1, settled);
            lock(&self.state.ledger).settle(partition, message.offset());
        }
        if let Some(error) = result.stopped {
            let message = lane
                .waiting
                .front()
                .expect("the batch stopped at a waiting event");
            // A failure that concerns the event is its first attempt. An
            // outage, a deadlock between batches or an unknown commit says
            // nothing about it: the event is tried alone at once, as it
            // would have been without batching, and that attempt counts.
            let step = if error.counts_as_attempt() {
                self.failed(message, error, 0, 1).await
            } else {
                self.attempt(handler, message, 0, 1).await
            };
            self.conclude(partition, lane, step, 1);
        } else {
            self.settled_head(partition, lane);
        }
        true
    }

    /// Applies how an attempt at the lane's head ended.
    pub(super) fn conclude(
        &self,
        partition: &Partition,
        lane: &mut Lane,
        step: Step,
        attempt: u32,
    ) {
        let Some(message) = lane.waiting.front() else {
            return;
        };
        let offset = message.offset();
        let location = MessageLocation::of(message);
        let event_id = event_id_of(message);
        match step {
            Step::Settled => {
                lane.waiting.pop_front();
                lane.failures = 0;
                lane.outages = 0;
                lane.retry_at = None;
                lock(&self.state.ledger).settle(partition, offset);
                self.settled_head(partition, lane);
            }
            Step::Retry { counted, error } => {
                if counted {
                    lane.failures += 1;
                } else {
                    lane.outages += 1;
                }
                let retry_in = self.config.backoff(lane.failures + lane.outages);
                lane.retry_at = Some(Instant::now() + retry_in);
                if !lane.paused {
                    self.pause(partition, true);
                    lane.paused = true;
                }
                tracing::warn!(
                    %location,
                    attempt,
                    counted,
                    retry_in_ms = retry_in.as_millis() as u64,
                    %error,
                    "attempt failed; the partition waits for this message"
                );
                self.report(Receipt {
                    location,
                    event_id,
                    attempt,
                    batch: 1,
                    status: ReceiptStatus::Failed {
                        error,
                        counted,
                        retry_in,
                    },
                });
            }
        }
    }

    /// After the head (or a batch) settled: an emptied lane stops filling
    /// and, if this member paused it, the partition is resumed.
    pub(super) fn settled_head(&self, partition: &Partition, lane: &mut Lane) {
        if lane.waiting.is_empty() {
            lane.filling_since = None;
            if lane.paused {
                self.pause(partition, false);
                lane.paused = false;
            }
        }
    }

    /// Decodes, processes and, when that is final, reports. Parks when the
    /// event cannot succeed or has failed `max_attempts` times.
    pub(super) async fn attempt<H: Handler>(
        &self,
        handler: &H,
        message: &OwnedMessage,
        failures: u32,
        attempt: u32,
    ) -> Step {
        let event = match self.decode(message) {
            Ok(event) => event,
            Err(error) => {
                return self
                    .park(message, failures + 1, attempt, error.to_string())
                    .await
            }
        };
        match self.inbox.process(handler, &event).await {
            Ok(outcome) => {
                self.report_settled(message, &event, outcome, attempt, 1);
                Step::Settled
            }
            Err(error) => self.failed(message, error, failures, attempt).await,
        }
    }

    /// Logs (in the event's span) and reports an attempt that reached
    /// `outcome`; `batch` events were settled by its transaction.
    pub(super) fn report_settled(
        &self,
        message: &OwnedMessage,
        event: &InboxEvent,
        outcome: InboxOutcome,
        attempt: u32,
        batch: usize,
    ) {
        let event_id = &event.event_id;
        let _span = event.span().entered();
        let location = MessageLocation::of(message);
        let mut tally = lock(&self.tally);
        match outcome {
            InboxOutcome::Processed => {
                tally.processed += 1;
                tracing::debug!(event_id = %event_id, %location, attempt, batch, "event processed")
            }
            InboxOutcome::Duplicate => {
                tally.duplicates += 1;
                tracing::debug!(
                    event_id = %event_id,
                    %location,
                    "duplicate event skipped: already in the inbox"
                )
            }
            InboxOutcome::Skipped => {
                tally.skipped += 1;
                tracing::debug!(event_id = %event_id, %location, "event not handled here")
            }
        }
        drop(tally);
        self.report(Receipt {
            location,
            event_id: Some(event_id.to_owned()),
            attempt,
            batch,
            status: ReceiptStatus::Settled(outcome),
        });
    }
}
