//! An in-memory [`Publisher`] for the session loop's unit tests: it keeps
//! every message handed over, in order, and reports each one as acked or
//! failed only when the test says so. A fence, as the Kafka producer's,
//! refuses a hand-over once it turns false.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use outbox_core::{Acks, Delivered, Placement};
use outbox_core::{DeadLetter, DefiniteError, ForwarderError, OutboxEvent};
use outbox_sink::Fence;
use tokio::sync::Notify;

use super::publisher::Publisher;

/// The topic every event goes to.
pub(super) const TOPIC: &str = "outbox.events";
const DEAD_LETTERS: &str = "outbox.dead-letters";

/// A message handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sent {
    pub(super) topic: String,
    pub(super) event_id: String,
    /// The tag its report comes back under (the transaction's sequence).
    pub(super) tag: u64,
}

/// Cheap to clone: the test keeps one handle, the session another.
#[derive(Clone, Default)]
pub(super) struct FakePublisher(Arc<Shared>);

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    reported: Notify,
}

#[derive(Default)]
struct State {
    sent: Vec<Sent>,
    /// Indices into `sent` of the messages not reported yet, oldest first.
    unreported: VecDeque<usize>,
    /// Reports in and not taken yet.
    reports: Acks,
    /// The offset the next message acked is stored at, per topic (each
    /// topic has one partition, empty at first).
    next_offset: Vec<(String, i64)>,
    fence: Option<Fence>,
}

impl FakePublisher {
    /// Refuses every hand-over once `fence` turns false.
    pub(super) fn set_fence(&self, fence: Fence) {
        self.state().fence = Some(fence);
    }

    /// Every message handed over so far.
    pub(super) fn sent(&self) -> Vec<Sent> {
        self.state().sent.clone()
    }

    /// The event ids of the messages handed over so far, in order.
    pub(super) fn sent_ids(&self) -> Vec<String> {
        self.state()
            .sent
            .iter()
            .map(|s| s.event_id.clone())
            .collect()
    }

    /// Acks the `n` oldest messages not reported yet; how many it acked.
    pub(super) fn ack(&self, n: usize) -> usize {
        let mut state = self.state();
        let mut acked = 0;
        while acked < n {
            let Some(index) = state.unreported.pop_front() else {
                break;
            };
            let Sent { topic, tag, .. } = state.sent[index].clone();
            let offset = match state.next_offset.iter_mut().find(|(t, _)| *t == topic) {
                Some((_, next)) => {
                    *next += 1;
                    *next - 1
                }
                None => {
                    state.next_offset.push((topic.clone(), 1));
                    0
                }
            };
            let reports = &mut state.reports;
            let topic_index = match reports.per_topic.iter().position(|(t, _)| *t == topic) {
                Some(i) => i,
                None => {
                    reports.per_topic.push((
                        topic,
                        Delivered {
                            messages: 0,
                            bytes: 0,
                        },
                    ));
                    reports.per_topic.len() - 1
                }
            };
            reports.per_topic[topic_index].1.messages += 1;
            reports.tags.push(tag);
            reports.acked_at.push(Instant::now());
            reports.placements.push(Placement {
                topic: topic_index,
                partition: 0,
                offset,
            });
            acked += 1;
        }
        drop(state);
        self.0.reported.notify_one();
        acked
    }

    /// Acks every message not reported yet.
    pub(super) fn ack_all(&self) -> usize {
        self.ack(usize::MAX)
    }

    /// Reports the oldest message not reported yet as refused by the
    /// broker with `error`.
    pub(super) fn fail_oldest(&self, error: ForwarderError) {
        let mut state = self.state();
        state.unreported.pop_front().expect("a message to fail");
        state.reports.failed = Some(error);
        drop(state);
        self.0.reported.notify_one();
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().expect("not poisoned")
    }

    fn hand_over(&self, topic: &str, event_id: String, tag: u64) -> Result<(), ForwarderError> {
        // Asked unlocked: a test's fence may look at what was sent.
        let fence = self.state().fence.clone();
        if fence.is_some_and(|may_publish| !may_publish()) {
            return Err(ForwarderError::transient("fenced: the lease is not fresh"));
        }
        let mut state = self.state();
        state.sent.push(Sent {
            topic: topic.to_owned(),
            event_id,
            tag,
        });
        let index = state.sent.len() - 1;
        state.unreported.push_back(index);
        Ok(())
    }
}

impl Publisher for FakePublisher {
    fn topic_for(&self, _event: &OutboxEvent) -> Result<String, DefiniteError> {
        Ok(TOPIC.to_owned())
    }

    fn dead_letter_topic(&self) -> &str {
        DEAD_LETTERS
    }

    async fn send_to(
        &self,
        topic: &str,
        event: &OutboxEvent,
        tag: u64,
        _slot: Option<(&str, u32)>,
    ) -> Result<(), ForwarderError> {
        self.hand_over(topic, event.event_id.clone(), tag)
    }

    async fn send_dead_letter(
        &self,
        dead: &DeadLetter,
        tag: u64,
        _slot: Option<(&str, u32)>,
    ) -> Result<(), ForwarderError> {
        let id = dead.event_id.clone().unwrap_or_default();
        self.hand_over(DEAD_LETTERS, id, tag)
    }

    fn send_now(&self) {}

    async fn acks_ready(&self) {
        self.0.reported.notified().await;
    }

    fn outstanding(&self) -> usize {
        self.state().unreported.len()
    }

    fn take_acks(&self, into: &mut Acks) {
        std::mem::swap(&mut self.state().reports, into);
    }

    fn probe_brokers(&self) {}

    async fn watermarks(&self, _topic: &str) -> Result<Option<Vec<(i64, i64)>>, String> {
        // One empty partition.
        Ok(Some(vec![(0, 0)]))
    }
}
