//! The reader task: reads the binlog ahead of the publisher and hands over
//! batches of committed transactions on a small bounded channel (the
//! backpressure: a full channel stops the reading).

use std::sync::Arc;
use std::time::Instant;

use outbox_core::{ForwarderError, SourceTransaction};
use outbox_source::BinlogSource;
use tokio::sync::{mpsc, watch};

use crate::metrics::Metrics;

/// Batches the reader may assemble ahead of the publisher.
pub(super) const READ_AHEAD_BATCHES: usize = 4;
/// A batch closes at this many transactions or this many outbox bytes, or
/// when the binlog has nothing more ready. Handing over batches instead of
/// single transactions keeps the reader and the publisher from waking each
/// other for every row; the read-ahead memory stays under
/// `READ_AHEAD_BATCHES` × `BATCH_BYTES` (plus one transaction).
const BATCH_TRANSACTIONS: usize = 1024;
const BATCH_BYTES: usize = 4 << 20;

/// Transactions the reader hands over together.
pub(super) struct ReadBatch {
    /// When the first of them was read.
    pub(super) read_at: Instant,
    pub(super) transactions: Vec<SourceTransaction>,
    /// The binlog had nothing more ready after them.
    pub(super) caught_up: bool,
}

/// The reader task: hands over batches of transactions until the first
/// error, which it hands over too (after the transactions read before it).
/// It tells `metrics` whether it has read all the binlog there is, for the
/// lag, and `failed` of the error as soon as it happens (the publisher may
/// be holding transactions and not taking batches).
pub(super) async fn read_transactions(
    mut source: BinlogSource,
    out: mpsc::Sender<Result<ReadBatch, ForwarderError>>,
    metrics: Arc<Metrics>,
    failed: watch::Sender<bool>,
) {
    loop {
        // Wait for one transaction, then take what is ready without waiting.
        // Dropping a pending read loses nothing: the stream and the
        // transaction being assembled live in `source`.
        let mut next = Some(source.next_transaction().await);
        let read_at = Instant::now();
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut failure = None;
        let mut caught_up = false;
        while let Some(result) = next {
            match result {
                Ok(transaction) => {
                    bytes += transaction
                        .events
                        .iter()
                        .map(|e| e.buffered_len())
                        .sum::<usize>();
                    batch.push(transaction);
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
            if batch.len() >= BATCH_TRANSACTIONS || bytes >= BATCH_BYTES {
                break;
            }
            next = source.ready_transaction();
            caught_up = next.is_none();
        }
        metrics.set_caught_up(caught_up);
        if failure.is_some() {
            failed.send_replace(true);
        }
        let batch = ReadBatch {
            read_at,
            transactions: batch,
            caught_up,
        };
        if !batch.transactions.is_empty() && out.send(Ok(batch)).await.is_err() {
            break;
        }
        if let Some(e) = failure {
            let _ = out.send(Err(e)).await;
            break;
        }
    }
    source.close().await;
}
