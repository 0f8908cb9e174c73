//! Not publishing again what an earlier run already published.
//!
//! After a crash the forwarder resumes at the checkpoint, and the events
//! between the checkpoint and the crash may already be in Kafka. At the
//! start of each session it reads back the tails of the topics it writes
//! (from offsets the checkpoint records, see [`outbox_sink::tail`]) and
//! collects the binlog coordinate of every message there. While replaying,
//! an event whose coordinate was found is not sent again.
//!
//! Why this is exact: a coordinate names one row of one server's binlog,
//! and a message carries it only if the broker stored that row's event. So
//! an event is skipped only if Kafka has it. What must hold for nothing to
//! be *republished* is that the scan saw every message of an event after
//! the checkpoint; the offsets recorded make sure of that:
//!
//! - this session's messages of a partition lie in the order they were
//!   sent (the idempotent producer keeps a partition's order within a
//!   session), so those of events after the checkpoint come after the last
//!   one of an event before it (`below`), or after where the partition
//!   ended when the session began (`session_start`) if there is none;
//! - messages an earlier run left after the checkpoint are the ones this
//!   session found (`found`): the lowest offset among those still after
//!   the checkpoint bounds them.
//!
//! The recorded offset of a partition is the lower of the two. A set of
//! coordinates, rather than the last coordinate of each partition, keeps
//! this exact when a partition's order is not the binlog's: a message that
//! failed and was sent again by a later session lies after newer ones, and
//! a run that died between the two leaves a gap, not a prefix.
//!
//! Where the scan cannot be trusted (see [`TailScan::untrusted`]) nothing is
//! skipped: the forwarder is at-least-once there, as before, and says so.
//!
//! **Across servers.** A coordinate names a row of one server's binlog: on
//! another server of the topology (a promoted replica, the new primary
//! after a switchover) the same rows have other coordinates. When the
//! forwarder resumes there by GTID, the tails are read by each message's
//! GTID slot instead (its transaction's GTID and its index in it, the same
//! on every server that logged the transaction): a message is after the
//! start when its GTID is not in the start's GTID state, and a transaction
//! of the stream is skipped message by message where its slots were found.
//! The offsets recorded stay exact the same way, with "under the
//! watermark" judged by the watermark's GTID state.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use outbox_checkpoint::Tails;
use outbox_core::Acks;
use outbox_core::{BinlogPosition, Gtid, GtidSlot, GtidState, RowCoordinate, SourceTransaction};
use outbox_sink::tail::{Found, TailRequest, TailScan};

use crate::pipeline::progress::TransactionSeq;

#[derive(Debug, Default)]
struct PartitionState {
    /// Every message this session sends lies at or after this offset.
    session_start: i64,
    /// The highest offset of this session's messages whose transaction is
    /// under the watermark.
    below: Option<i64>,
    /// This session's acked messages whose transaction is not yet under
    /// the watermark, in offset order.
    acked_above: VecDeque<(TransactionSeq, i64)>,
    /// Messages an earlier run left, in offset order; pruned as the
    /// watermark passes their rows.
    found: VecDeque<(FoundRow, i64)>,
}

/// The row of a message an earlier run left, as the scan could place it.
#[derive(Debug)]
enum FoundRow {
    /// By its coordinate on the server streamed from.
    At(RowCoordinate),
    /// By its transaction's GTID (read back on another server).
    InTransaction(Gtid),
    /// A backfilled event ([`outbox_sink::Backfilled`]), whose insert lies
    /// before `Before`: until the watermark passes it, the stream may still
    /// meet the insert, and skips it by its (table, event id).
    Backfilled(Before, BackfilledId),
}

/// A backfilled event: its `source_table` and event id.
type BackfilledId = (String, String);

/// A point of the binlog a backfilled row's insert lies before: by the
/// GTID state there, or by the position in the binlog streamed.
#[derive(Debug)]
struct Before {
    gtid: Option<GtidState>,
    position: Option<BinlogPosition>,
}

impl Before {
    /// Whether a watermark at `position` (with `gtid`) is past it; a bound
    /// that cannot be judged counts as passed (the message is no longer
    /// kept in the tails; at worst the insert is published again).
    fn passed(&self, position: &BinlogPosition, gtid: Option<&GtidState>) -> bool {
        match (&self.gtid, gtid, &self.position) {
            (Some(before), Some(watermark), _) => watermark.covers(before),
            (_, _, Some(before)) => before.compare(position).is_none_or(|o| o.is_le()),
            _ => true,
        }
    }
}

#[derive(Debug, Default)]
struct TopicState {
    partitions: Vec<PartitionState>,
    /// The topic's partition count is known (it existed when last looked at).
    count_known: bool,
}

/// The tails of one forwarder's topics and the events not to publish again.
#[derive(Debug, Default)]
pub struct Replay {
    topics: BTreeMap<String, TopicState>,
    /// Coordinates after the start found in the tails, not yet met, with
    /// the event id Kafka holds there.
    skip: HashMap<RowCoordinate, Option<String>>,
    /// The newest position among `skip`: past it, nothing is left to skip.
    skip_until: Option<BinlogPosition>,
    /// Slots after the start found in the tails, not yet met (a replay
    /// read back by GTID), with the event id Kafka holds there.
    skip_slots: HashMap<GtidSlot, Option<String>>,
    /// Events a backfill published after the recorded offsets whose inserts
    /// the stream may still meet: they are in Kafka, wherever it meets them.
    skip_ids: HashSet<BackfilledId>,
    /// Topic index of each `Acks::per_topic` entry, reused per batch.
    resolved: Vec<Option<String>>,
}

/// What [`Replay::from_scan`] found.
#[derive(Debug, Default)]
pub struct Resumption {
    /// Events after the start that are already in Kafka.
    pub already_published: usize,
    /// Of them, messages a backfill published (skipped by event id).
    pub backfilled: usize,
    /// Why everything after the start is published again; empty if not.
    pub fallback: Vec<String>,
}

impl Replay {
    /// What to read back, from the tails a checkpoint recorded.
    pub fn requests(tails: &Tails) -> Vec<TailRequest> {
        tails
            .iter()
            .map(|(topic, read_from)| TailRequest {
                topic: topic.clone(),
                read_from: read_from.clone(),
            })
            .collect()
    }

    /// The replay after a clean stop ([`outbox_checkpoint::Checkpoint::clean`]):
    /// nothing after the checkpoint is in the topics, so nothing is read
    /// back, and every partition's messages of this session lie at or after
    /// the recorded offset.
    pub fn after_clean_stop(tails: &Tails) -> Self {
        let mut replay = Self::default();
        for (topic, read_from) in tails {
            // `[]`: created by the first write to it, read from its start.
            let state = if read_from.is_empty() {
                TopicState::default()
            } else {
                TopicState {
                    partitions: read_from
                        .iter()
                        .map(|&offset| PartitionState {
                            session_start: offset,
                            ..Default::default()
                        })
                        .collect(),
                    count_known: true,
                }
            };
            replay.topics.insert(topic.clone(), state);
        }
        replay
    }

    /// Whether every message this replay knows of lies under the last
    /// tails it recorded: none acked above the watermark, none found ahead.
    pub fn holds_nothing_ahead(&self) -> bool {
        self.topics
            .values()
            .flat_map(|t| &t.partitions)
            .all(|p| p.found.is_empty() && p.acked_above.is_empty())
    }

    /// A replay from `start` that publishes everything again (nothing was
    /// read back), for the reasons given, and records tails from here on.
    pub fn at_least_once(scan: TailScan, reasons: Vec<String>) -> (Self, Resumption) {
        let mut replay = Self::default();
        replay.adopt(&scan);
        (
            replay,
            Resumption {
                already_published: 0,
                backfilled: 0,
                fallback: reasons,
            },
        )
    }

    /// A replay from `start` after reading back `scan`.
    pub fn from_scan(start: &BinlogPosition, scan: TailScan) -> (Self, Resumption) {
        let behind = |before: &Before| before.passed(start, None);
        Self::read_back(scan, behind, |replay, found| {
            let position = &found.coordinate.event_position;
            if !position.compare(start).is_some_and(|o| o.is_gt()) {
                return Ok(None);
            }
            if replay
                .skip_until
                .as_ref()
                .is_none_or(|until| position.compare(until).is_some_and(|o| o.is_gt()))
            {
                replay.skip_until = Some(position.clone());
            }
            replay.skip.insert(found.coordinate.clone(), found.event_id);
            Ok(Some(FoundRow::At(found.coordinate)))
        })
    }

    /// A replay from the GTID state `start` after reading back `scan` by
    /// GTID slots (on another server than the tails were written from).
    pub fn from_scan_by_gtid(start: &GtidState, scan: TailScan) -> (Self, Resumption) {
        // Positions are another server's here: only GTID bounds count.
        let nowhere = BinlogPosition::new("", 0);
        let behind = |before: &Before| before.passed(&nowhere, Some(start));
        Self::read_back(scan, behind, |replay, found| {
            let slot = found
                .slot
                .expect("a scan by GTID keeps only messages with a slot");
            let Ok(gtid) = slot.gtid.parse::<Gtid>() else {
                return Err(format!(
                    "a message at offset {} carries {:?} as its transaction's GTID, which is not a GTID",
                    found.offset, slot.gtid
                ));
            };
            if start.contains(&gtid) {
                return Ok(None);
            }
            replay.skip_slots.insert(slot, found.event_id);
            Ok(Some(FoundRow::InTransaction(gtid)))
        })
    }

    /// The replay after `scan`: `place` says of each message found whether
    /// it is after the start (and records what to skip), or why the scan
    /// cannot be trusted after all; `behind` whether a backfilled row's
    /// insert lies before the start.
    fn read_back(
        scan: TailScan,
        behind: impl Fn(&Before) -> bool,
        mut place: impl FnMut(&mut Self, Found) -> Result<Option<FoundRow>, String>,
    ) -> (Self, Resumption) {
        if !scan.untrusted.is_empty() {
            let reasons = scan.untrusted.clone();
            return Self::at_least_once(scan, reasons);
        }
        let mut replay = Self::default();
        replay.adopt(&scan);
        for tail in scan.topics {
            let Some(partitions) = tail.partitions else {
                continue;
            };
            for (index, read) in partitions.into_iter().enumerate() {
                let mut rows = Vec::new();
                for backfilled in read.backfilled {
                    let before = Before {
                        gtid: backfilled.before_gtid,
                        position: backfilled.before,
                    };
                    // Nothing to place it by, or its insert lies before the
                    // start: the stream will not meet it.
                    let (Some(table), false) = (backfilled.table, behind(&before)) else {
                        continue;
                    };
                    if before.gtid.is_none() && before.position.is_none() {
                        continue;
                    }
                    let id = (table, backfilled.event_id);
                    replay.skip_ids.insert(id.clone());
                    rows.push((FoundRow::Backfilled(before, id), backfilled.offset));
                }
                for found in read.found {
                    let offset = found.offset;
                    match place(&mut replay, found) {
                        Ok(Some(row)) => rows.push((row, offset)),
                        Ok(None) => {}
                        Err(reason) => return replay.publishing_everything(reason),
                    }
                }
                rows.sort_by_key(|&(_, offset)| offset);
                if let Some(partition) = replay
                    .topics
                    .get_mut(&tail.topic)
                    .and_then(|t| t.partitions.get_mut(index))
                {
                    partition.found.extend(rows);
                }
            }
        }
        let backfilled = replay.skip_ids.len();
        let already_published = replay.skip.len() + replay.skip_slots.len() + backfilled;
        (
            replay,
            Resumption {
                already_published,
                backfilled,
                fallback: Vec::new(),
            },
        )
    }

    /// This replay with nothing found skipped, for `reason`.
    fn publishing_everything(mut self, reason: String) -> (Self, Resumption) {
        self.skip.clear();
        self.skip_until = None;
        self.skip_slots.clear();
        self.skip_ids.clear();
        for partition in self.topics.values_mut().flat_map(|t| &mut t.partitions) {
            partition.found.clear();
        }
        (
            self,
            Resumption {
                already_published: 0,
                backfilled: 0,
                fallback: vec![reason],
            },
        )
    }

    /// Takes over the partitions and where they end from `scan`.
    fn adopt(&mut self, scan: &TailScan) {
        for tail in &scan.topics {
            let state = match &tail.partitions {
                Some(partitions) => TopicState {
                    partitions: partitions
                        .iter()
                        .map(|p| PartitionState {
                            session_start: p.next_offset,
                            ..Default::default()
                        })
                        .collect(),
                    count_known: true,
                },
                None => TopicState::default(),
            };
            self.topics.insert(tail.topic.clone(), state);
        }
    }

    /// Whether `topic` is tracked (else [`Replay::register`] it before
    /// sending to it).
    pub fn knows(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// Starts tracking `topic`, whose partitions end at the high watermarks
    /// of `marks` (`None`: it does not exist yet, so every message in it
    /// will be this forwarder's).
    pub fn register(&mut self, topic: &str, marks: Option<Vec<(i64, i64)>>) {
        let state = match marks {
            Some(marks) => TopicState {
                partitions: marks
                    .into_iter()
                    .map(|(_, high)| PartitionState {
                        session_start: high,
                        ..Default::default()
                    })
                    .collect(),
                count_known: true,
            },
            None => TopicState::default(),
        };
        self.topics.insert(topic.to_owned(), state);
    }

    /// Topics whose partition count is not known yet but which now hold
    /// this session's messages: look them up, then [`Replay::set_partition_count`].
    pub fn unknown_counts(&self) -> Vec<String> {
        self.topics
            .iter()
            .filter(|(_, t)| !t.count_known && !t.partitions.is_empty())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// `topic` has `count` partitions; created during this session, so each
    /// holds only messages sent since (read from the start).
    pub fn set_partition_count(&mut self, topic: &str, count: usize) {
        if let Some(state) = self.topics.get_mut(topic) {
            if state.partitions.len() < count {
                state.partitions.resize_with(count, Default::default);
            }
            state.count_known = state.partitions.len() == count;
        }
    }

    /// Which messages of `transaction` (its events, then its dead letters)
    /// are already in Kafka; `None` when none is. Each found coordinate is
    /// skipped once. A transaction that names one coordinate twice (no
    /// decoder should produce that) is published whole: which copy Kafka
    /// holds could not be told.
    pub fn published_in(
        &mut self,
        transaction: &SourceTransaction,
        gtid: Option<&str>,
    ) -> Option<Vec<bool>> {
        let published = self.published_by_origin(transaction, gtid);
        if self.skip_ids.is_empty() {
            return published;
        }
        let messages = transaction.events.len() + transaction.dead_letters.len();
        let mut published = published.unwrap_or_else(|| vec![false; messages]);
        for (flag, event) in published.iter_mut().zip(&transaction.events) {
            // Taken once: a second insert of the id is another event.
            let id = (event.origin.qualified_table(), event.event_id.clone());
            if self.skip_ids.remove(&id) {
                *flag = true;
            }
        }
        published.contains(&true).then_some(published)
    }

    /// [`Replay::published_in`] by the coordinates or GTID slots found.
    fn published_by_origin(
        &mut self,
        transaction: &SourceTransaction,
        gtid: Option<&str>,
    ) -> Option<Vec<bool>> {
        if !self.skip_slots.is_empty() {
            let gtid = gtid?;
            // A slot counts only for the same event id: two topologies
            // that share a GTID domain and server id, or a configuration
            // that moved a row to another index, must not make a row look
            // published that Kafka does not hold.
            let ids = transaction
                .events
                .iter()
                .map(|e| Some(e.event_id.as_str()))
                .chain(
                    transaction
                        .dead_letters
                        .iter()
                        .map(|d| d.event_id.as_deref()),
                );
            let published: Vec<bool> = ids
                .enumerate()
                .map(|(index, id)| {
                    let slot = GtidSlot {
                        gtid: gtid.to_owned(),
                        index: index as u32,
                    };
                    match self.skip_slots.remove(&slot) {
                        Some(Some(found)) => id == Some(found.as_str()),
                        _ => false,
                    }
                })
                .collect();
            return published.contains(&true).then_some(published);
        }
        let until = self.skip_until.as_ref()?;
        // Past the newest found coordinate, nothing is left to skip.
        let passed = transaction.end.compare(until).is_none_or(|o| o.is_gt());
        let origins: Vec<(RowCoordinate, Option<&str>)> = transaction
            .events
            .iter()
            .map(|e| (e.origin.coordinate(), Some(e.event_id.as_str())))
            .chain(
                transaction
                    .dead_letters
                    .iter()
                    .map(|d| (d.origin.coordinate(), d.event_id.as_deref())),
            )
            .collect();
        let unique = origins.iter().map(|(c, _)| c).collect::<HashSet<_>>().len() == origins.len();
        // A coordinate counts only for the same event id, as a slot does:
        // a message that names the row's coordinate with another id (a
        // principal that may write the topic, a table recreated under the
        // same binlog) must not make the row look published.
        let published: Vec<bool> = if unique {
            origins
                .iter()
                .map(|(c, id)| {
                    self.skip
                        .remove(c)
                        .is_some_and(|found| found.as_deref() == *id)
                })
                .collect()
        } else {
            vec![false; origins.len()]
        };
        if passed {
            self.skip.clear();
            self.skip_until = None;
        }
        published.contains(&true).then_some(published)
    }

    /// Records where `acks` placed each message (tagged with its
    /// transaction); every transaction before `first_pending` is under the
    /// watermark, so only the acks of later ones are kept apart.
    pub fn acked(&mut self, acks: &Acks, first_pending: TransactionSeq) {
        self.resolved.clear();
        self.resolved.extend(
            acks.per_topic
                .iter()
                .map(|(topic, _)| self.topics.contains_key(topic).then(|| topic.clone())),
        );
        // Acks of one topic come in runs: look its state up once per run.
        let mut current: Option<(usize, &mut TopicState)> = None;
        for (&seq, placement) in acks.tags.iter().zip(&acks.placements) {
            if current.as_ref().is_none_or(|(i, _)| *i != placement.topic) {
                current = self.resolved[placement.topic]
                    .as_ref()
                    .and_then(|name| self.topics.get_mut(name))
                    .map(|state| (placement.topic, state));
            }
            let Some((_, state)) = current.as_mut() else {
                continue;
            };
            let index = placement.partition as usize;
            if index >= state.partitions.len() {
                // A partition not seen before: read it from its start.
                state.partitions.resize_with(index + 1, Default::default);
            }
            state.partitions[index]
                .acked_above
                .push_back((seq, placement.offset));
        }
        // Folded in at once: at catch-up speed a checkpoint interval holds
        // hundreds of thousands of acks.
        for state in self.topics.values_mut() {
            for partition in &mut state.partitions {
                partition.fold_acks(first_pending);
            }
        }
    }

    /// The tails to store with the checkpoint at `watermark` (with the GTID
    /// state `watermark_gtid` there, when known), under which every
    /// transaction before `first_pending` lies.
    pub fn tails(
        &mut self,
        watermark: &BinlogPosition,
        watermark_gtid: Option<&GtidState>,
        first_pending: TransactionSeq,
    ) -> Tails {
        let mut passed = Vec::new();
        let tails = self
            .topics
            .iter_mut()
            .map(|(topic, state)| {
                let read_from = if state.count_known {
                    state
                        .partitions
                        .iter_mut()
                        .map(|p| p.read_from(watermark, watermark_gtid, first_pending, &mut passed))
                        .collect()
                } else {
                    Vec::new()
                };
                (topic.clone(), read_from)
            })
            .collect();
        // Their inserts are behind the watermark now.
        for id in passed {
            self.skip_ids.remove(&id);
        }
        tails
    }
}

impl PartitionState {
    /// Moves the acks of transactions under the watermark into `below`.
    fn fold_acks(&mut self, first_pending: TransactionSeq) {
        while let Some(&(seq, offset)) = self.acked_above.front() {
            if seq >= first_pending {
                break;
            }
            self.below = Some(self.below.map_or(offset, |b| b.max(offset)));
            self.acked_above.pop_front();
        }
    }

    /// The offset to record (see the module docs); the backfilled events
    /// whose inserts the watermark passed go to `passed`.
    fn read_from(
        &mut self,
        watermark: &BinlogPosition,
        watermark_gtid: Option<&GtidState>,
        first_pending: TransactionSeq,
        passed: &mut Vec<BackfilledId>,
    ) -> i64 {
        self.fold_acks(first_pending);
        while let Some((row, _)) = self.found.front() {
            let under = match row {
                FoundRow::At(coordinate) => coordinate
                    .event_position
                    .compare(watermark)
                    .is_some_and(|o| o.is_lt()),
                FoundRow::InTransaction(gtid) => watermark_gtid.is_some_and(|w| w.contains(gtid)),
                FoundRow::Backfilled(before, _) => before.passed(watermark, watermark_gtid),
            };
            if !under {
                break;
            }
            if let Some((FoundRow::Backfilled(_, id), _)) = self.found.pop_front() {
                passed.push(id);
            }
        }
        let own = self.below.map_or(self.session_start, |b| b + 1);
        self.found
            .front()
            .map_or(own, |&(_, offset)| offset.min(own))
    }
}

#[cfg(test)]
mod tests;
