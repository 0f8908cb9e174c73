use super::*;
use crate::pipeline::progress::AckWatermark;
use outbox_core::RowOrigin;
use outbox_core::{Delivered, Placement};
use outbox_sink::tail::{Found, PartitionTail, TopicTail};

const TOPIC: &str = "orders";

fn coordinate(transaction: u64, row: u32) -> RowCoordinate {
    RowCoordinate {
        event_position: BinlogPosition::new("bin.000001", transaction * 100),
        row_index: row,
    }
}

/// Where transaction `t` ends: after its rows event, before the next one.
fn end(t: u64) -> BinlogPosition {
    BinlogPosition::new("bin.000001", t * 100 + 50)
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A broker in memory: per partition, the coordinates stored in order.
struct Log(Vec<Vec<RowCoordinate>>);

impl Log {
    /// What [`outbox_sink::tail::scan`] reads from `tails`.
    fn scan(&self, tails: &Tails) -> TailScan {
        TailScan {
            topics: tails
                .iter()
                .map(|(topic, read_from)| TopicTail {
                    topic: topic.clone(),
                    partitions: Some(
                        self.0
                            .iter()
                            .enumerate()
                            .map(|(p, log)| {
                                let from = read_from.get(p).copied().unwrap_or(0) as usize;
                                PartitionTail {
                                    found: log[from.min(log.len())..]
                                        .iter()
                                        .enumerate()
                                        .map(|(i, c)| Found {
                                            coordinate: c.clone(),
                                            offset: (from + i) as i64,
                                            slot: None,
                                            event_id: Some(event_at(c.clone()).event_id),
                                        })
                                        .collect(),
                                    backfilled: Vec::new(),
                                    next_offset: log.len() as i64,
                                }
                            })
                            .collect(),
                    ),
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// Events of transaction `t` (1 to 3 rows).
fn rows(t: u64) -> u32 {
    1 + (t % 3) as u32
}

fn partition_of(c: &RowCoordinate, partitions: usize) -> usize {
    ((c.event_position.pos / 100 * 7 + c.row_index as u64 * 3) % partitions as u64) as usize
}

/// Runs sessions that crash at random moments (acks in any order across
/// partitions, in order within one, checkpoints now and then) until one
/// gets through every transaction; returns the broker's log.
fn crash_repeatedly(seed: u64, transactions: u64, partitions: usize) -> (Log, usize) {
    let mut rng = Rng(seed);
    let mut log = Log(vec![Vec::new(); partitions]);
    let mut stored = (end(0), Tails::new());
    let mut skipped_total = 0;
    for session in 0.. {
        let (start, tails) = stored.clone();
        let (mut replay, resumption) = if tails.is_empty() {
            // The first message to a topic is preceded by a
            // checkpoint write recording it (`Forwarder::track`).
            let mut replay = Replay::default();
            replay.register(TOPIC, Some(vec![(0, 0); partitions]));
            stored.1 = replay.tails(&start, None, 0);
            (replay, Resumption::default())
        } else {
            Replay::from_scan(&start, log.scan(&tails))
        };
        assert!(resumption.fallback.is_empty());
        let mut tracker = AckWatermark::new(start.clone());
        // Sent, not yet stored: per partition, in order.
        let mut in_flight: Vec<VecDeque<(TransactionSeq, RowCoordinate)>> =
            vec![VecDeque::new(); partitions];
        let first = start.pos / 100 + 1;
        let crash_after = if session < 12 {
            rng.below(4 * transactions) as usize
        } else {
            usize::MAX
        };
        let mut steps = 0;
        let mut next = first;
        loop {
            steps += 1;
            if steps > crash_after {
                break;
            }
            let pending: Vec<usize> = (0..partitions)
                .filter(|&p| !in_flight[p].is_empty())
                .collect();
            if next > transactions && pending.is_empty() {
                let first_pending = tracker.first_pending_seq();
                assert_eq!(tracker.watermark(), &end(transactions));
                replay.tails(tracker.watermark(), None, first_pending);
                return (log, skipped_total);
            }
            match rng.below(5) {
                // Read and send the next transaction.
                0 | 1 if next <= transactions => {
                    let t = next;
                    next += 1;
                    let transaction = transaction(t);
                    let published = replay.published_in(&transaction, None);
                    let repeats = published
                        .as_ref()
                        .map_or(0, |p| p.iter().filter(|&&p| p).count());
                    skipped_total += repeats;
                    let seq = tracker.push(end(t), transaction.events.len() - repeats);
                    for (i, event) in transaction.events.iter().enumerate() {
                        if published.as_ref().is_some_and(|p| p[i]) {
                            continue;
                        }
                        let c = event.origin.coordinate();
                        in_flight[partition_of(&c, partitions)].push_back((seq, c));
                    }
                }
                // The broker stores and acks the oldest message of a partition.
                2 | 3 if !pending.is_empty() => {
                    let p = pending[rng.below(pending.len() as u64) as usize];
                    let (seq, c) = in_flight[p].pop_front().unwrap();
                    log.0[p].push(c);
                    tracker.ack(seq);
                    let first_pending = tracker.first_pending_seq();
                    replay.acked(
                        &Acks {
                            tags: vec![seq],
                            placements: vec![Placement {
                                topic: 0,
                                partition: p as i32,
                                offset: log.0[p].len() as i64 - 1,
                            }],
                            acked_at: vec![std::time::Instant::now()],
                            in_producer: vec![],
                            per_topic: vec![(
                                TOPIC.into(),
                                Delivered {
                                    messages: 1,
                                    bytes: 0,
                                },
                            )],
                            failed: None,
                        },
                        first_pending,
                    );
                }
                // A checkpoint write.
                _ => {
                    let tails =
                        replay.tails(tracker.watermark(), None, tracker.first_pending_seq());
                    stored = (tracker.watermark().clone(), tails);
                }
            }
        }
    }
    unreachable!()
}

fn event_at(c: RowCoordinate) -> outbox_core::OutboxEvent {
    outbox_core::OutboxEvent {
        event_id: format!("{c}"),
        event_type: None,
        aggregate_type: None,
        aggregate_id: None,
        event_version: None,
        key: None,
        payload: None,
        committed_at_ms: 0,
        shape: Default::default(),
        origin: RowOrigin {
            schema: "shop".into(),
            table: "outbox_event".into(),
            event_position: c.event_position,
            row_index: c.row_index,
        },
    }
}

fn one_partition_scan(found: &[(RowCoordinate, i64)]) -> TailScan {
    TailScan {
        topics: vec![TopicTail {
            topic: TOPIC.into(),
            partitions: Some(vec![PartitionTail {
                found: found
                    .iter()
                    .map(|(coordinate, offset)| Found {
                        coordinate: coordinate.clone(),
                        offset: *offset,
                        slot: None,
                        event_id: Some(event_at(coordinate.clone()).event_id),
                    })
                    .collect(),
                backfilled: Vec::new(),
                next_offset: found.last().map_or(0, |(_, o)| o + 1),
            }]),
        }],
        ..Default::default()
    }
}

fn transaction(t: u64) -> SourceTransaction {
    SourceTransaction {
        events: (0..rows(t))
            .map(|row| event_at(coordinate(t, row)))
            .collect(),
        dead_letters: Vec::new(),
        end: end(t),
        commit_timestamp: 0,
        committed_at_ms: 0,
        file_created_at: 0,
        gtid: None,
        changed_rows: 0,
    }
}

/// A message that failed in the run that crashed leaves a gap: what
/// follows it in the partition is in Kafka, it is not. A last-coordinate
/// rule would skip it; the found set publishes it.
#[test]
fn a_gap_in_a_partition_is_published_and_what_follows_it_is_not() {
    let scan = one_partition_scan(&[
        (coordinate(2, 0), 5),
        (coordinate(2, 1), 6),
        (coordinate(4, 0), 7),
    ]);
    let (mut replay, resumption) = Replay::from_scan(&end(1), scan);
    assert_eq!(resumption.already_published, 3);
    assert_eq!(
        replay.published_in(&transaction(2), None),
        Some(vec![true, true, false])
    );
    assert_eq!(
        replay.published_in(&transaction(3), None),
        None,
        "the gap is published"
    );
    assert_eq!(
        replay.published_in(&transaction(4), None),
        Some(vec![true, false])
    );
    // Met once, skipped once: a second meeting publishes.
    assert_eq!(replay.published_in(&transaction(4), None), None);
}

/// Defect: a message was taken for a row's by its coordinate alone, so
/// anyone who may write the topic could make a restart skip real rows
/// with messages naming their coordinates. The event id must match too.
#[test]
fn a_message_with_a_rows_coordinate_but_another_event_id_does_not_skip_the_row() {
    let mut scan = one_partition_scan(&[(coordinate(2, 0), 5), (coordinate(2, 1), 6)]);
    let found = &mut scan.topics[0].partitions.as_mut().unwrap()[0].found;
    found[0].event_id = Some("forged".into());
    found[1].event_id = None;
    let (mut replay, _) = Replay::from_scan(&end(1), scan);
    assert_eq!(
        replay.published_in(&transaction(2), None),
        None,
        "neither message is the row's own"
    );
    let scan = one_partition_scan(&[(coordinate(2, 0), 5), (coordinate(2, 1), 6)]);
    let (mut replay, _) = Replay::from_scan(&end(1), scan);
    assert_eq!(
        replay.published_in(&transaction(2), None),
        Some(vec![true, true, false])
    );
}

#[test]
fn an_untrusted_scan_skips_nothing() {
    let mut scan = one_partition_scan(&[(coordinate(2, 0), 5)]);
    scan.untrusted
        .push("another producer writes to the topic".into());
    let (mut replay, resumption) = Replay::from_scan(&end(1), scan);
    assert_eq!(resumption.already_published, 0);
    assert_eq!(
        resumption.fallback,
        ["another producer writes to the topic"]
    );
    assert_eq!(replay.published_in(&transaction(2), None), None);
    // Its tails are still recorded from where the partition ended.
    assert_eq!(replay.tails(&end(1), None, 0)[TOPIC], [6]);
}

/// The argument of the module comment, checked on a model of the
/// broker: whatever moments the crashes come at, every event is stored
/// exactly once.
#[test]
fn crashes_at_any_moment_store_every_event_exactly_once() {
    let mut skipped = 0;
    for seed in 1..=300 {
        for partitions in [1, 3] {
            let (log, repeats_avoided) = crash_repeatedly(seed * 7919 + 1, 40, partitions);
            skipped += repeats_avoided;
            let mut seen = HashSet::new();
            for c in log.0.iter().flatten() {
                assert!(seen.insert(c.clone()), "seed {seed}: {c} stored twice");
            }
            let expected: usize = (1..=40).map(|t| rows(t) as usize).sum();
            assert_eq!(seen.len(), expected, "seed {seed}: events missing");
        }
    }
    // The crashes really left events after the checkpoints in Kafka.
    assert!(skipped > 1000, "only {skipped} events were found again");
}

/// The event id of message `index` of transaction `gtid`.
fn event_id(gtid: &str, index: u32) -> String {
    format!("e-{gtid}-{index}")
}

/// Transaction `gtid` on the server streamed from now: `events` rows of
/// a rows event at `pos` of `file`.
fn on_server(file: &str, pos: u64, events: u32, gtid: &str) -> SourceTransaction {
    let mut t = SourceTransaction::empty(BinlogPosition::new(file, pos + 50), 0);
    for row in 0..events {
        t.events.push(outbox_core::OutboxEvent {
            event_id: event_id(gtid, row),
            event_type: None,
            aggregate_type: None,
            aggregate_id: None,
            event_version: None,
            key: None,
            payload: None,
            committed_at_ms: 0,
            shape: Default::default(),
            origin: RowOrigin {
                schema: "shop".into(),
                table: "outbox_event".into(),
                event_position: BinlogPosition::new(file, pos),
                row_index: row,
            },
        });
    }
    t
}

/// After a failover the replica holds the old primary's transactions
/// under the same GTIDs but at other coordinates: read back by GTID
/// slot, exactly what Kafka holds is skipped, a transaction the old
/// primary lost (a phantom) matches nothing, and the offsets recorded
/// move on as the watermark's GTID state passes the rows.
#[test]
fn read_back_by_gtid_on_another_server_skips_exactly_what_kafka_holds() {
    let slot = |gtid: &str, index| GtidSlot {
        gtid: gtid.into(),
        index,
    };
    // In the old primary's binlog, at its coordinates.
    let found = [
        (slot("0-1-2", 0), 10), // under the checkpoint
        (slot("0-1-3", 0), 11),
        (slot("0-1-3", 1), 12),
        (slot("0-1-4", 0), 13), // its second message never made it
        (slot("0-1-5", 0), 14), // lost with the old primary
        (slot("0-1-6", 0), 15), // another topology's row, same GTID
    ];
    let scan = TailScan {
        topics: vec![TopicTail {
            topic: TOPIC.into(),
            partitions: Some(vec![PartitionTail {
                found: found
                    .iter()
                    .map(|(slot, offset)| Found {
                        coordinate: RowCoordinate {
                            event_position: BinlogPosition::new(
                                "primary-bin.000001",
                                *offset as u64 * 100,
                            ),
                            row_index: 0,
                        },
                        offset: *offset,
                        slot: Some(slot.clone()),
                        event_id: Some(if *offset == 15 {
                            "another-topologys-event".into()
                        } else {
                            event_id(&slot.gtid, slot.index)
                        }),
                    })
                    .collect(),
                backfilled: Vec::new(),
                next_offset: 16,
            }]),
        }],
        ..Default::default()
    };
    let start: GtidState = GtidState::MariaDb("0-1-2".parse().unwrap());
    let (mut replay, resumption) = Replay::from_scan_by_gtid(&start, scan);
    assert!(resumption.fallback.is_empty());
    assert_eq!(resumption.already_published, 5);

    // The replica's binlog: same transactions, other file and offsets.
    let t3 = on_server("replica-bin.000002", 700, 2, "0-1-3");
    let t4 = on_server("replica-bin.000002", 900, 2, "0-1-4");
    let own = on_server("replica-bin.000002", 1100, 1, "0-2-5");
    assert_eq!(
        replay.published_in(&t3, Some("0-1-3")),
        Some(vec![true, true])
    );
    assert_eq!(
        replay.published_in(&t4, Some("0-1-4")),
        Some(vec![true, false])
    );
    assert_eq!(replay.published_in(&own, Some("0-2-5")), None);
    // The same slot with another event id is not this row: published.
    let same_gtid = on_server("replica-bin.000002", 1300, 1, "0-1-6");
    assert_eq!(replay.published_in(&same_gtid, Some("0-1-6")), None);
    // Without its GTID a transaction cannot be placed: published.
    let t7 = on_server("replica-bin.000002", 1500, 1, "0-1-7");
    assert_eq!(replay.published_in(&t7, None), None);

    // Watermark after 0-1-4: the phantom (offset 14) is still ahead.
    let after_t4 = GtidState::MariaDb("0-1-4".parse().unwrap());
    assert_eq!(replay.tails(&t4.end, Some(&after_t4), 0)[TOPIC], [14]);
    // After the replica's own 0-2-5, the domain has passed it.
    let after_own = GtidState::MariaDb("0-2-5".parse().unwrap());
    assert_eq!(replay.tails(&own.end, Some(&after_own), 0)[TOPIC], [15]);
}

/// A slot whose GTID does not parse makes the whole read-back untrusted:
/// nothing is skipped, and the reason is given.
#[test]
fn a_slot_that_is_not_a_gtid_skips_nothing_and_says_why() {
    let found = |offset: i64, gtid: &str| Found {
        coordinate: RowCoordinate {
            event_position: BinlogPosition::new("primary-bin.000001", offset as u64 * 100),
            row_index: 0,
        },
        offset,
        slot: Some(GtidSlot {
            gtid: gtid.into(),
            index: 0,
        }),
        event_id: Some(event_id(gtid, 0)),
    };
    let scan = TailScan {
        topics: vec![TopicTail {
            topic: TOPIC.into(),
            partitions: Some(vec![PartitionTail {
                found: vec![found(10, "0-1-3"), found(11, "not-a-gtid")],
                backfilled: Vec::new(),
                next_offset: 12,
            }]),
        }],
        ..Default::default()
    };
    let start = GtidState::MariaDb("0-1-2".parse().unwrap());
    let (mut replay, resumption) = Replay::from_scan_by_gtid(&start, scan);
    assert_eq!(resumption.already_published, 0);
    assert!(
        resumption.fallback[0].contains("offset 11")
            && resumption.fallback[0].contains("not a GTID"),
        "{:?}",
        resumption.fallback
    );
    let t3 = on_server("replica-bin.000002", 700, 1, "0-1-3");
    assert_eq!(replay.published_in(&t3, Some("0-1-3")), None);
    // The topic stays known, read from where the scan saw it end.
    assert_eq!(replay.tails(&t3.end, Some(&start), 0)[TOPIC], [12]);
}

/// A backfill that ran beside the forwarder left messages among its own:
/// they are no reason to publish everything again, the events they carry
/// are not published twice, and the recorded offset stays under them
/// until the watermark passes the point their inserts lie before.
#[test]
fn backfilled_messages_are_skipped_by_event_id_and_kept_until_their_inserts_are_passed() {
    let backfilled = |offset: i64, t: u64, before: Option<u64>| outbox_sink::tail::FoundBackfill {
        offset,
        event_id: format!("{}", coordinate(t, 0)),
        table: Some("shop.outbox_event".into()),
        server: Some("db1".into()),
        before: before.map(end),
        before_gtid: None,
    };
    let mut scan = one_partition_scan(&[(coordinate(2, 0), 5), (coordinate(4, 0), 8)]);
    let partitions = scan.topics[0].partitions.as_mut().unwrap();
    partitions[0].backfilled = vec![
        // Transaction 3's first row, published from the table: its insert
        // lies before the end of transaction 5.
        backfilled(6, 3, Some(5)),
        // A row of the gap, whose insert lies before the start: the stream
        // never meets it.
        backfilled(7, 0, Some(1)),
        // Without a bound it cannot be placed: not skipped.
        backfilled(9, 6, None),
    ];
    partitions[0].next_offset = 10;
    let (mut replay, resumption) = Replay::from_scan(&end(1), scan);
    assert!(resumption.fallback.is_empty(), "{:?}", resumption.fallback);
    assert_eq!(resumption.already_published, 3);
    assert_eq!(resumption.backfilled, 1);
    assert_eq!(
        replay.published_in(&transaction(2), None),
        Some(vec![true, false, false])
    );
    assert_eq!(
        replay.published_in(&transaction(3), None),
        Some(vec![true]),
        "the backfilled row, by its table and event id"
    );
    // Under the end of transaction 3, the backfilled row at offset 6 may
    // still be met by a later session (its bound is transaction 5): the
    // recorded offset stays under it.
    assert_eq!(replay.tails(&end(3), None, 0)[TOPIC], [6]);
    assert_eq!(
        replay.published_in(&transaction(4), None),
        Some(vec![true, false])
    );
    assert_eq!(replay.published_in(&transaction(5), None), None);
    assert_eq!(replay.published_in(&transaction(6), None), None);
    // Past transaction 5 every bound is passed: read from after them all.
    assert_eq!(replay.tails(&end(6), None, 0)[TOPIC], [10]);
}

/// Once the watermark passed a backfilled row's bound, its id no longer
/// stands for a message in Kafka: a later insert of the same id (the row
/// deleted and written again), or the id in another table, is published.
#[test]
fn a_backfilled_id_is_skipped_only_in_its_table_and_before_its_bound() {
    let mut scan = one_partition_scan(&[]);
    scan.topics[0].partitions.as_mut().unwrap()[0].backfilled =
        vec![outbox_sink::tail::FoundBackfill {
            offset: 0,
            event_id: format!("{}", coordinate(3, 0)),
            table: Some("shop.outbox_event".into()),
            server: Some("db1".into()),
            before: Some(end(2)),
            before_gtid: None,
        }];
    scan.topics[0].partitions.as_mut().unwrap()[0].next_offset = 1;
    let (mut replay, resumption) = Replay::from_scan(&end(1), scan);
    assert_eq!(resumption.backfilled, 1);
    let mut elsewhere = transaction(3);
    elsewhere.events[0].origin.table = "other_outbox".into();
    assert_eq!(replay.published_in(&elsewhere, None), None, "another table");
    assert_eq!(replay.tails(&end(2), None, 0)[TOPIC], [1], "bound passed");
    assert_eq!(
        replay.published_in(&transaction(3), None),
        None,
        "past its bound, the id is another event"
    );
}
