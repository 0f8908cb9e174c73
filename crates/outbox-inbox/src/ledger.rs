//! The offsets that may be committed: per partition, the offset after the
//! last message that reached a final outcome.
//!
//! Invariant: an offset enters the ledger only through [`OffsetLedger::settle`],
//! which the consumer calls once a message was processed, found duplicate,
//! skipped or parked, and only for the oldest unsettled message of its
//! partition (messages of a partition are settled one after another, in
//! offset order). So a committed offset never passes a message that has not
//! been processed. Nobody else decides what is committed.

use std::collections::{BTreeMap, BTreeSet};

use rdkafka::{Offset, TopicPartitionList};

/// A topic partition.
pub type Partition = (String, i32);

/// Settled positions, and which of them the broker has not stored yet.
#[derive(Debug, Default)]
pub struct OffsetLedger {
    /// Next offset to read per partition: everything before it is settled.
    next: BTreeMap<Partition, i64>,
    /// Partitions whose `next` moved since the last commit was sent.
    dirty: BTreeSet<Partition>,
}

impl OffsetLedger {
    /// Records that the message at `offset` of `partition` reached a final
    /// outcome; the partition may now be committed up to `offset + 1`.
    pub fn settle(&mut self, partition: &Partition, offset: i64) {
        self.next.insert(partition.clone(), offset + 1);
        self.dirty.insert(partition.clone());
    }

    /// The offsets to commit now (the dirty ones), marking them clean; `None`
    /// when nothing moved.
    pub fn take_pending(&mut self) -> Option<TopicPartitionList> {
        if self.dirty.is_empty() {
            return None;
        }
        let dirty = std::mem::take(&mut self.dirty);
        Some(self.list(dirty.iter()))
    }

    /// Every known offset, for a final synchronous commit.
    pub fn all(&mut self) -> Option<TopicPartitionList> {
        self.dirty.clear();
        if self.next.is_empty() {
            None
        } else {
            Some(self.list(self.next.keys()))
        }
    }

    /// A commit of these partitions failed: send them again next time.
    pub fn mark_dirty(&mut self, offsets: &TopicPartitionList) {
        for element in offsets.elements() {
            let partition = (element.topic().to_owned(), element.partition());
            if self.next.contains_key(&partition) {
                self.dirty.insert(partition);
            }
        }
    }

    /// The offsets of `partitions` (those the ledger knows), removing them:
    /// called when the partitions are revoked, to commit them one last time.
    pub fn release(&mut self, partitions: &[Partition]) -> Option<TopicPartitionList> {
        let mut released = BTreeMap::new();
        for partition in partitions {
            self.dirty.remove(partition);
            if let Some(next) = self.next.remove(partition) {
                released.insert(partition.clone(), next);
            }
        }
        if released.is_empty() {
            return None;
        }
        let mut list = TopicPartitionList::new();
        for ((topic, partition), next) in released {
            // Offsets come from the broker's own messages, so they are valid.
            let _ = list.add_partition_offset(&topic, partition, Offset::Offset(next));
        }
        Some(list)
    }

    fn list<'a>(&self, partitions: impl Iterator<Item = &'a Partition>) -> TopicPartitionList {
        let mut list = TopicPartitionList::new();
        for partition in partitions {
            if let Some(next) = self.next.get(partition) {
                let _ = list.add_partition_offset(&partition.0, partition.1, Offset::Offset(*next));
            }
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(list: &TopicPartitionList) -> Vec<(String, i32, Offset)> {
        list.elements()
            .iter()
            .map(|e| (e.topic().to_owned(), e.partition(), e.offset()))
            .collect()
    }

    #[test]
    fn commits_the_offset_after_the_last_settled_message_once() {
        let mut ledger = OffsetLedger::default();
        let p0 = ("t".to_owned(), 0);
        assert!(ledger.take_pending().is_none());
        ledger.settle(&p0, 4);
        ledger.settle(&p0, 5);
        let pending = ledger.take_pending().unwrap();
        assert_eq!(offsets(&pending), [("t".into(), 0, Offset::Offset(6))]);
        assert!(ledger.take_pending().is_none(), "clean after sending");
        ledger.mark_dirty(&pending);
        assert_eq!(
            offsets(&ledger.take_pending().unwrap()),
            [("t".into(), 0, Offset::Offset(6))]
        );
    }

    #[test]
    fn released_partitions_leave_the_ledger() {
        let mut ledger = OffsetLedger::default();
        let (p0, p1) = (("t".to_owned(), 0), ("t".to_owned(), 1));
        ledger.settle(&p0, 1);
        ledger.settle(&p1, 9);
        let released = ledger.release(std::slice::from_ref(&p1)).unwrap();
        assert_eq!(offsets(&released), [("t".into(), 1, Offset::Offset(10))]);
        assert_eq!(
            offsets(&ledger.all().unwrap()),
            [("t".into(), 0, Offset::Offset(2))]
        );
    }
}
