//! What a session's select loop carries from one wake-up to the next: the
//! transactions of the reader's batch not yet handed over, the adaptive
//! linger, and under `mysql.publish_after_replicas` the replica gate with
//! the transactions it holds (their numbers, read times and bytes).

use std::collections::VecDeque;
use std::time::Instant;

use outbox_core::{ForwarderError, SourceTransaction};
use tokio::sync::{mpsc, watch};

use super::reader::ReadBatch;
use super::SessionEnd;
use crate::pipeline::linger::AdaptiveLinger;
use crate::replicas::ReplicaGate;

/// What a session's select loop carries from one wake-up to the next.
pub(super) struct Flow {
    /// Transactions of a received batch not yet published: the window is
    /// checked before each one, not once per batch.
    pub(super) unpublished: VecDeque<SourceTransaction>,
    pub(super) batch_read_at: Instant,
    /// The batch being published was all the binlog had: under the
    /// adaptive linger, once it is handed over the producer may be told
    /// to send without waiting out its linger.
    pub(super) batch_caught_up: bool,
    pub(super) linger: Option<AdaptiveLinger>,
    pub(super) forwarded: u64,
    pub(super) last_report: Instant,
    /// Under `mysql.publish_after_replicas`: the replica gate and what it
    /// holds.
    pub(super) gate: Option<GateQueue>,
}

/// The replica gate with the transactions it holds: for each unpublished
/// transaction, in order, its number at the gate and when it was read; and
/// their outbox bytes, which bound how far the reader may run ahead.
pub(super) struct GateQueue {
    gate: ReplicaGate,
    numbers: VecDeque<(u64, Instant)>,
    held_bytes: usize,
}

impl GateQueue {
    fn new(gate: ReplicaGate) -> Self {
        Self {
            gate,
            numbers: VecDeque::new(),
            held_bytes: 0,
        }
    }

    /// The gate, to subscribe to what it releases.
    pub(super) fn gate(&self) -> &ReplicaGate {
        &self.gate
    }

    /// Holds `transactions`, read at `read_at`, and asks the replicas for
    /// the newest.
    fn hold(&mut self, transactions: &[SourceTransaction], read_at: Instant) {
        for transaction in transactions {
            let number = self.gate.number(transaction.gtid.as_ref());
            self.numbers.push_back((number, read_at));
            self.held_bytes += outbox_bytes(transaction);
        }
        self.gate.ask();
    }

    /// Lets the front transaction, `transaction`, go: when it was read.
    fn let_go(&mut self, transaction: &SourceTransaction) -> Option<Instant> {
        let (_, read_at) = self.numbers.pop_front()?;
        self.held_bytes -= outbox_bytes(transaction);
        Some(read_at)
    }

    /// Whether the reader may run further ahead.
    fn has_room(&self, waiting: usize) -> bool {
        self.held_bytes < HOLD_AHEAD_BYTES && waiting < HOLD_AHEAD_TRANSACTIONS
    }

    fn clear(&mut self) {
        self.numbers.clear();
        self.held_bytes = 0;
    }

    /// Whether the front transaction has passed the gate.
    fn front_released(&self) -> bool {
        self.numbers
            .front()
            .is_none_or(|&(number, _)| self.gate.releases(number))
    }

    /// Tells the gate whether the front transaction waits for it.
    fn note_hold(&mut self) {
        let held = self
            .numbers
            .front()
            .copied()
            .filter(|&(number, _)| !self.gate.releases(number));
        self.gate.note_front(held);
    }
}

impl Flow {
    /// A new session's: `gate` under `publish_after_replicas`, and the
    /// adaptive linger if `kafka.adaptive_linger`.
    pub(super) fn new(gate: Option<ReplicaGate>, adaptive_linger: bool) -> Self {
        Self {
            unpublished: VecDeque::new(),
            batch_read_at: Instant::now(),
            batch_caught_up: false,
            linger: adaptive_linger.then(AdaptiveLinger::default),
            forwarded: 0,
            last_report: Instant::now(),
            gate: gate.map(GateQueue::new),
        }
    }

    /// A batch from the reader, or how the session ends without one.
    pub(super) fn receive(
        &mut self,
        received: Option<Result<ReadBatch, ForwarderError>>,
    ) -> Option<SessionEnd> {
        match received {
            Some(Ok(batch)) => {
                if let Some(gate) = &mut self.gate {
                    gate.hold(&batch.transactions, batch.read_at);
                }
                self.batch_read_at = batch.read_at;
                self.batch_caught_up = batch.caught_up;
                self.unpublished.extend(batch.transactions);
                None
            }
            Some(Err(e)) => Some(SessionEnd::Failed(e)),
            None => Some(SessionEnd::Failed(ForwarderError::transient(
                "the binlog reader stopped",
            ))),
        }
    }
}

impl Flow {
    /// The front transaction, to hand over now, and when it was read: with
    /// a gate, batches are taken ahead, so each transaction keeps the read
    /// time of its own batch. `None` when nothing waits.
    pub(super) fn take_front(&mut self) -> Option<(SourceTransaction, Instant)> {
        let transaction = self.unpublished.pop_front()?;
        let read_at = self
            .gate
            .as_mut()
            .and_then(|gate| gate.let_go(&transaction))
            .unwrap_or(self.batch_read_at);
        Some((transaction, read_at))
    }

    /// Whether to take the reader's next batch: once the last one is
    /// published; with a replica gate, also while transactions wait for the
    /// replicas (up to [`HOLD_AHEAD_BYTES`]), so that the replicas are asked
    /// for the newest transaction as soon as it is read rather than one
    /// batch after another.
    pub(super) fn takes_more(&self) -> bool {
        self.unpublished.is_empty()
            || self
                .gate
                .as_ref()
                .is_some_and(|gate| gate.has_room(self.unpublished.len()))
    }

    /// The stream failed while transactions wait for the replicas: they go
    /// unpublished, to be read again from the next server (a replica's
    /// sequence numbers may soon be a new primary's), and the session ends
    /// with the reader's own error, which follows its last batch.
    pub(super) async fn drop_held(
        &mut self,
        transactions: &mut mpsc::Receiver<Result<ReadBatch, ForwarderError>>,
    ) -> SessionEnd {
        let mut dropped = self.unpublished.len();
        self.unpublished.clear();
        if let Some(gate) = &mut self.gate {
            gate.clear();
        }
        let error = loop {
            match transactions.recv().await {
                Some(Ok(batch)) => dropped += batch.transactions.len(),
                Some(Err(e)) => break e,
                None => break ForwarderError::transient("the binlog reader stopped"),
            }
        };
        tracing::warn!(
            dropped,
            "the binlog stream failed while transactions waited for mysql.publish_after_replicas: \
             none of them was published; they are read again where the next session starts"
        );
        SessionEnd::Failed(error)
    }

    /// Whether the front transaction has passed the replica gate (always,
    /// without one).
    pub(super) fn front_released(&self) -> bool {
        self.gate.as_ref().is_none_or(GateQueue::front_released)
    }

    /// Tells the gate whether the front transaction waits for it.
    pub(super) fn note_hold(&mut self) {
        if let Some(gate) = &mut self.gate {
            gate.note_hold();
        }
    }
}

/// How many outbox bytes, and transactions (most touch no outbox table),
/// may wait for the replicas before the reader is left to wait too.
const HOLD_AHEAD_BYTES: usize = 16 << 20;
const HOLD_AHEAD_TRANSACTIONS: usize = 65_536;

/// The outbox bytes a transaction holds in memory.
fn outbox_bytes(transaction: &SourceTransaction) -> usize {
    transaction
        .events
        .iter()
        .map(|e| e.buffered_len())
        .sum::<usize>()
        + transaction
            .dead_letters
            .iter()
            .map(|d| d.row.len())
            .sum::<usize>()
}

/// Completes when the replica gate releases more; never without a gate.
pub(super) async fn more_released(released: Option<&mut watch::Receiver<u64>>) {
    match released {
        Some(released) => {
            if released.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}
