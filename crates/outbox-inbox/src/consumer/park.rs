//! A failed head: retried after a backoff, or parked in the dead-letter
//! topic with its error once its attempts are spent.

use super::*;

impl InboxConsumer {
    /// What follows a failed attempt: park the message when the event
    /// cannot succeed or has failed `max_attempts` times, retry otherwise.
    pub(super) async fn failed(
        &self,
        message: &OwnedMessage,
        error: ProcessError,
        failures: u32,
        attempt: u32,
    ) -> Step {
        let counted = error.counts_as_attempt();
        let failures = failures + u32::from(counted);
        if !error.is_retryable() || failures >= self.config.retry.max_attempts {
            return self
                .park(message, failures, attempt, error.to_string())
                .await;
        }
        if let ProcessError::CommitUnknown { event_id, .. } = &error {
            let location = MessageLocation::of(message);
            tracing::warn!(event_id = %event_id, %location, "commit outcome unknown; not acknowledged");
        }
        Step::Retry {
            counted,
            error: error.to_string(),
        }
    }

    /// Sends `message` to the dead-letter topic with `error` and waits for
    /// the broker's ack; settled only then.
    pub(super) async fn park(
        &self,
        message: &OwnedMessage,
        failures: u32,
        attempt: u32,
        error: String,
    ) -> Step {
        let location = MessageLocation::of(message);
        let mut headers = OwnedHeaders::new();
        if let Some(original) = message.headers() {
            for header in original.iter() {
                headers = headers.insert(header);
            }
        }
        let failures_text = failures.to_string();
        let location_text = location.to_string();
        for (key, value) in [
            (HEADER_ERROR, error.as_str()),
            (HEADER_ATTEMPTS, failures_text.as_str()),
            (HEADER_CONSUMER, self.inbox.consumer_name()),
            (HEADER_SOURCE, location_text.as_str()),
        ] {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&self.config.kafka.dead_letter_topic).headers(headers);
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = message.payload() {
            record = record.payload(payload);
        }
        match self.dead_letters.send(record, Duration::ZERO).await {
            Ok(_) => {
                lock(&self.tally).parked += 1;
                tracing::error!(
                    %location,
                    topic = %self.config.kafka.dead_letter_topic,
                    failures,
                    %error,
                    "event parked in the dead-letter topic"
                );
                self.report(Receipt {
                    location,
                    event_id: event_id_of(message),
                    attempt,
                    batch: 1,
                    status: ReceiptStatus::Parked { error },
                });
                Step::Settled
            }
            // Not settled: the message stays at the head and is tried again.
            Err((kafka, _)) => Step::Retry {
                counted: false,
                error: format!(
                    "parking failed ({kafka}) after: {error}; check that topic {} exists and \
                     accepts writes",
                    self.config.kafka.dead_letter_topic
                ),
            },
        }
    }
}
