//! The ack watermark: the one place that decides how far the checkpoint may go.
//!
//! Transactions enter in binlog order with the number of messages they
//! published. Acks arrive in any order. The watermark is the end position of
//! the newest transaction such that it and every transaction before it are
//! fully acked. A transaction with no outbox rows is acked on arrival, but
//! still waits behind older ones: the watermark never jumps over a pending
//! message.

use std::collections::VecDeque;
use std::time::Instant;

use outbox_core::{BinlogPosition, Gtid, GtidState, SourceTransaction};

/// Identifies a transaction inside the tracker (its arrival number).
pub type TransactionSeq = u64;

#[derive(Debug)]
struct Pending {
    end: BinlogPosition,
    /// Commit time of the newest transaction folded into this entry.
    commit_timestamp: u32,
    /// When the file `end` lies in was created (0 if unknown).
    file_created_at: u32,
    /// When the transaction was read, for the age of pending messages.
    read_at: Instant,
    /// When the transaction whose messages these are committed, ms since
    /// the epoch (a quiet transaction folded in does not change it).
    committed_at_ms: u64,
    unacked: usize,
}

#[derive(Debug)]
pub struct AckWatermark {
    /// Transactions not yet under the watermark; `pending[0]` has sequence `first_seq`.
    pending: VecDeque<Pending>,
    first_seq: TransactionSeq,
    watermark: BinlogPosition,
    watermark_commit_timestamp: u32,
    watermark_file_created_at: u32,
    unacked_messages: usize,
    /// The GTIDs of transactions not yet under the watermark, with the
    /// sequence of the entry each belongs to (a quiet transaction folded
    /// into a pending one shares its sequence).
    gtids: VecDeque<(TransactionSeq, Gtid)>,
    /// The GTID state at the watermark, when known.
    gtid_state: Option<GtidState>,
}

impl AckWatermark {
    /// Starts at `start`, the position the stream was requested from.
    pub fn new(start: BinlogPosition) -> Self {
        Self {
            pending: VecDeque::new(),
            first_seq: 0,
            watermark: start,
            watermark_commit_timestamp: 0,
            watermark_file_created_at: 0,
            unacked_messages: 0,
            gtids: VecDeque::new(),
            gtid_state: None,
        }
    }

    /// Starts at `start` whose GTID state is `state` (if known).
    pub fn with_gtid_state(start: BinlogPosition, state: Option<GtidState>) -> Self {
        Self {
            gtid_state: state,
            ..Self::new(start)
        }
    }

    /// Records the GTID of the transaction just pushed as `seq`.
    pub fn push_gtid(&mut self, seq: TransactionSeq, gtid: Gtid) {
        self.gtids.push_back((seq, gtid));
        self.apply_gtids();
    }

    fn apply_gtids(&mut self) {
        while self
            .gtids
            .front()
            .is_some_and(|(seq, _)| *seq < self.first_seq)
        {
            let (_, gtid) = self.gtids.pop_front().expect("front exists");
            // An unknown state stays unknown: the GTIDs seen since the
            // start are not the server's whole history.
            if let Some(state) = &mut self.gtid_state {
                state.apply(&gtid);
            }
        }
    }

    /// The GTID state of the transactions under the watermark.
    pub fn gtid_state(&self) -> Option<&GtidState> {
        self.gtid_state.as_ref()
    }

    /// Records a transaction that published `messages` messages.
    #[cfg(test)]
    pub fn push(&mut self, end: BinlogPosition, messages: usize) -> TransactionSeq {
        let quiet = SourceTransaction::empty(end, 0);
        self.push_committed(&quiet, messages, Instant::now())
    }

    /// Records `transaction`, which published `messages` messages and was
    /// read at `read_at`: its end, its commit time and the creation time of
    /// the file its end lies in.
    pub fn push_committed(
        &mut self,
        transaction: &SourceTransaction,
        messages: usize,
        read_at: Instant,
    ) -> TransactionSeq {
        let end = transaction.end.clone();
        let (commit_timestamp, file_created_at) =
            (transaction.commit_timestamp, transaction.file_created_at);
        // A transaction without messages behind pending ones only moves the
        // newest pending end: the queue grows with messages, not with
        // (possibly endless) quiet transactions.
        if messages == 0 {
            if let Some(last) = self.pending.back_mut() {
                last.end = end;
                last.commit_timestamp = commit_timestamp;
                last.file_created_at = file_created_at;
                return self.first_seq + self.pending.len() as TransactionSeq - 1;
            }
        }
        let seq = self.first_seq + self.pending.len() as TransactionSeq;
        self.pending.push_back(Pending {
            end,
            commit_timestamp,
            file_created_at,
            read_at,
            committed_at_ms: transaction.committed_at_ms,
            unacked: messages,
        });
        self.unacked_messages += messages;
        self.advance();
        seq
    }

    /// Records the ack of one message of transaction `seq`; returns when
    /// that transaction was read, and when it committed (ms since the
    /// epoch, 0 if unknown).
    pub fn ack(&mut self, seq: TransactionSeq) -> (Instant, u64) {
        let index = seq
            .checked_sub(self.first_seq)
            .expect("an ack for a transaction already under the watermark")
            as usize;
        let pending = &mut self.pending[index];
        pending.unacked = pending
            .unacked
            .checked_sub(1)
            .expect("more acks than messages for one transaction");
        let times = (pending.read_at, pending.committed_at_ms);
        self.unacked_messages -= 1;
        self.advance();
        times
    }

    fn advance(&mut self) {
        while self.pending.front().is_some_and(|p| p.unacked == 0) {
            let done = self.pending.pop_front().expect("front exists");
            self.watermark = done.end;
            self.watermark_commit_timestamp = done.commit_timestamp;
            self.watermark_file_created_at = done.file_created_at;
            self.first_seq += 1;
        }
        self.apply_gtids();
    }

    /// The oldest transaction not under the watermark: every one before it is.
    pub fn first_pending_seq(&self) -> TransactionSeq {
        self.first_seq
    }

    /// Every outbox row committed before this position has been acked.
    pub fn watermark(&self) -> &BinlogPosition {
        &self.watermark
    }

    /// Commit time of the newest transaction under the watermark (0 if unknown).
    pub fn watermark_commit_timestamp(&self) -> u32 {
        self.watermark_commit_timestamp
    }

    /// When the binlog file of the watermark was created (0 if unknown).
    pub fn watermark_file_created_at(&self) -> u32 {
        self.watermark_file_created_at
    }

    /// When the oldest transaction still waiting for acks was read.
    pub fn oldest_pending_read_at(&self) -> Option<Instant> {
        self.pending.front().map(|p| p.read_at)
    }

    /// Messages sent and not yet acked.
    pub fn unacked_messages(&self) -> usize {
        self.unacked_messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(p: u64) -> BinlogPosition {
        BinlogPosition::new("bin.000001", p)
    }

    #[test]
    fn watermark_waits_for_every_message_of_the_oldest_transaction() {
        let mut w = AckWatermark::new(pos(4));
        let a = w.push(pos(100), 2);
        let b = w.push(pos(200), 1);
        w.ack(b);
        assert_eq!(w.watermark(), &pos(4), "b is acked but a is not");
        w.ack(a);
        assert_eq!(w.watermark(), &pos(4), "a has one message left");
        w.ack(a);
        assert_eq!(w.watermark(), &pos(200));
        assert_eq!(w.unacked_messages(), 0);
    }

    #[test]
    fn empty_transactions_advance_only_behind_pending_ones() {
        let mut w = AckWatermark::new(pos(4));
        w.push(pos(50), 0);
        assert_eq!(w.watermark(), &pos(50), "nothing pending: moves at once");
        let a = w.push(pos(100), 1);
        w.push(pos(150), 0);
        assert_eq!(w.watermark(), &pos(50));
        w.ack(a);
        assert_eq!(w.watermark(), &pos(150));
    }

    #[test]
    fn quiet_transactions_behind_a_pending_one_do_not_grow_the_queue() {
        let mut w = AckWatermark::new(pos(4));
        let a = w.push(pos(100), 1);
        for p in 101..1_000 {
            w.push(pos(p), 0);
        }
        assert_eq!(w.pending.len(), 1);
        assert_eq!(w.watermark(), &pos(4));
        w.ack(a);
        assert_eq!(w.watermark(), &pos(999));
    }

    #[test]
    fn out_of_order_acks_across_many_transactions() {
        let mut w = AckWatermark::new(pos(4));
        let seqs: Vec<_> = (1..=5).map(|i| w.push(pos(i * 100), 1)).collect();
        for &i in &[4, 2, 3] {
            w.ack(seqs[i]);
        }
        assert_eq!(w.watermark(), &pos(4));
        w.ack(seqs[0]);
        assert_eq!(w.watermark(), &pos(100));
        w.ack(seqs[1]);
        assert_eq!(w.watermark(), &pos(500));
    }

    #[test]
    fn the_gtid_state_follows_the_watermark_not_the_acks() {
        let start: GtidState = GtidState::MariaDb("0-1-10".parse().unwrap());
        let mut w = AckWatermark::with_gtid_state(pos(4), Some(start));
        let gtid = |seq| Gtid::MariaDb {
            domain: 0,
            server: 1,
            seq,
        };
        let a = w.push(pos(100), 1);
        w.push_gtid(a, gtid(11));
        // A quiet transaction folds into the pending one.
        let b = w.push(pos(200), 0);
        w.push_gtid(b, gtid(12));
        let c = w.push(pos(300), 1);
        w.push_gtid(c, gtid(13));
        w.ack(c);
        assert_eq!(w.gtid_state().unwrap().to_string(), "0-1-10");
        w.ack(a);
        assert_eq!(w.watermark(), &pos(300));
        assert_eq!(w.gtid_state().unwrap().to_string(), "0-1-13");
        // Unknown at the start: stays unknown.
        let mut w = AckWatermark::new(pos(4));
        let d = w.push(pos(100), 0);
        w.push_gtid(d, gtid(1));
        assert!(w.gtid_state().is_none());
    }
}
