//! Reading back what a previous run published: the tails of the topics the
//! forwarder writes, from the offsets its checkpoint recorded, with the
//! binlog coordinate each message carries in its headers.
//!
//! The scan ends when every partition has been read up to its high
//! watermark and then nothing more has arrived for a quiet period. That
//! period also lets messages still on their way from a process that just
//! died land before the tail is judged (see docs/guarantees.md, "Delivery
//! guarantees"), and it covers brokers that report a high watermark short
//! of a batch's end (tansu 0.6 reports the batch's base offset + 1).
//!
//! A scan is *trusted* only if everything it read is known: any message
//! without coordinates, a changed partition count, a partition that is
//! shorter than the recorded offset or that cannot be read makes it
//! untrusted, with the reasons, and the caller publishes everything again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use outbox_core::{BinlogPosition, GtidSlot, GtidState, RowCoordinate};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use outbox_core::headers::{
    BinlogCoordinates, HEADER_BACKFILL, HEADER_BACKFILL_BEFORE, HEADER_BACKFILL_BEFORE_GTID,
    HEADER_BINLOG_SERVER, HEADER_SOURCE_TABLE,
};

use crate::config::KafkaConfig;
use outbox_kafka::ClientAuth;

/// How long a scan waits, after the high watermarks, for nothing more.
pub const QUIET: Duration = Duration::from_millis(400);
/// How far before the recorded offset a partition is read first when the
/// broker skipped the batch holding it.
const LOOK_BACK: i64 = 500;
/// How long a partition read from its start may stay silent before it is
/// judged shorter than the checkpoint recorded.
const SHORTER_AFTER: Duration = Duration::from_secs(5);
/// Metadata and watermark requests.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One topic to read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailRequest {
    pub topic: String,
    /// Per partition, the offset to read from; empty: every partition from
    /// its start (the topic did not exist when first written to).
    pub read_from: Vec<i64>,
}

/// A message found in a tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub coordinate: RowCoordinate,
    pub offset: i64,
    /// Its place in its transaction by GTID, when it carries one.
    pub slot: Option<GtidSlot>,
    /// Its `event_id` header: a slot is taken for a row only with it.
    pub event_id: Option<String>,
}

/// A message a backfill published after the recorded offset: not a binlog
/// row, but its event is in Kafka (see [`crate::encoder::Backfilled`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundBackfill {
    pub offset: i64,
    pub event_id: String,
    /// Its `source_table` header.
    pub table: Option<String>,
    /// The server whose binlog `before` is in.
    pub server: Option<String>,
    pub before: Option<BinlogPosition>,
    pub before_gtid: Option<GtidState>,
}

/// Which messages a scan accepts as the forwarder's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coordinates<'a> {
    /// Rows of this server's binlog ([`outbox_core::SourceIdentity::key`]).
    OfServer(&'a str),
    /// Rows of any server of the topology, each with its GTID slot: the
    /// forwarder resumed by GTID on another server than the one whose
    /// binlog the checkpoint's tails were written from.
    ByGtid,
}

/// What a scan takes for the forwarder's own: rows by `coordinates`, each
/// signed under `signing` when a key is set.
#[derive(Clone, Copy)]
struct Accept<'a> {
    coordinates: Coordinates<'a>,
    signing: Option<&'a outbox_kafka::Signing>,
}

/// What one partition held after the recorded offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionTail {
    /// In offset order.
    pub found: Vec<Found>,
    /// Backfilled messages, in offset order.
    pub backfilled: Vec<FoundBackfill>,
    /// Where the next message will be stored, as far as the scan saw: one
    /// past the last message read, or the high watermark if higher. Every
    /// message published after the scan lies at or after it.
    pub next_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTail {
    pub topic: String,
    /// Indexed by partition; `None` when the topic does not exist.
    pub partitions: Option<Vec<PartitionTail>>,
}

#[derive(Debug, Default)]
pub struct TailScan {
    pub topics: Vec<TopicTail>,
    /// Why the scan cannot be trusted; empty if it can.
    pub untrusted: Vec<String>,
    pub messages_read: usize,
    pub took: Duration,
}

/// What a message's headers say of the row it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub coordinate: RowCoordinate,
    /// The server whose binlog `coordinate` is in.
    pub server: Option<String>,
    pub slot: Option<GtidSlot>,
    pub event_id: Option<String>,
}

/// The text of header `name`, if the message has it and it is UTF-8.
pub(crate) fn header_text<'a, H: Headers>(headers: &'a H, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
        .and_then(|v| std::str::from_utf8(v).ok())
}

/// The coordinate in a message's headers (the one `binlog` header or the
/// separate ones), the server it names and the GTID slot, if it carries a
/// coordinate.
pub fn coordinate_of<M: Message>(message: &M) -> Option<Origin> {
    let headers = message.headers()?;
    let header = |name: &str| header_text(headers, name);
    let coordinates = BinlogCoordinates::read(header)?;
    Some(Origin {
        coordinate: RowCoordinate {
            event_position: coordinates.position.parse().ok()?,
            row_index: coordinates.row,
        },
        server: coordinates.server.map(str::to_owned),
        slot: coordinates.slot.map(|(gtid, index)| GtidSlot {
            gtid: gtid.to_owned(),
            index,
        }),
        event_id: header(outbox_core::headers::EVENT_ID).map(str::to_owned),
    })
}

/// What a backfilled message's headers say, if it is one (and names its
/// event).
pub fn backfill_of<M: Message>(message: &M) -> Option<FoundBackfill> {
    let headers = message.headers()?;
    let header = |name: &str| header_text(headers, name);
    header(HEADER_BACKFILL)?;
    Some(FoundBackfill {
        offset: message.offset(),
        event_id: header(outbox_core::headers::EVENT_ID)?.to_owned(),
        table: header(HEADER_SOURCE_TABLE).map(str::to_owned),
        server: header(HEADER_BINLOG_SERVER).map(str::to_owned),
        before: header(HEADER_BACKFILL_BEFORE).and_then(|p| p.parse().ok()),
        before_gtid: header(HEADER_BACKFILL_BEFORE_GTID).and_then(|g| serde_json::from_str(g).ok()),
    })
}

/// Reads the tails `requests` name, where every message must carry
/// the coordinates `accepted` names.
/// Blocking; at most `limit` messages (past it the scan is untrusted), at
/// most `timeout` in all.
pub fn scan(
    config: &KafkaConfig,
    requests: &[TailRequest],
    accepted: Coordinates<'_>,
    limit: usize,
    timeout: Duration,
) -> TailScan {
    let started = Instant::now();
    let mut scan = TailScan::default();
    let settings = [
        ("group.id", "outbox-forwarder-tail-scan"),
        ("auto.offset.reset", "error"),
        ("fetch.wait.max.ms", "50"),
    ];
    let consumer: BaseConsumer<ClientAuth> =
        match outbox_kafka::reader(config.connection_config(), &config.auth, &settings) {
            Ok(consumer) => consumer,
            Err(e) => {
                scan.untrusted.push(format!(
                    "cannot create a consumer to read the tails: {}",
                    outbox_kafka::shown(&e)
                ));
                return scan;
            }
        };
    let mut assignment = TopicPartitionList::new();
    let mut reading: HashMap<(usize, i32), Reading> = HashMap::new();
    for (index, request) in requests.iter().enumerate() {
        if started.elapsed() > timeout {
            scan.untrusted.push(format!(
                "looking up the topics' partitions took over {timeout:?}"
            ));
            break;
        }
        plan_topic(
            &consumer,
            index,
            request,
            &mut assignment,
            &mut reading,
            &mut scan,
        );
    }
    if !reading.is_empty() && scan.untrusted.is_empty() {
        if let Err(e) = consumer.assign(&assignment) {
            scan.untrusted
                .push(format!("cannot read the topic tails: {e}"));
        } else {
            let left = timeout.saturating_sub(started.elapsed());
            let accept = Accept {
                coordinates: accepted,
                signing: config.signing.as_ref(),
            };
            let read = read(
                &consumer,
                requests,
                accept,
                &mut reading,
                &mut scan,
                limit,
                left,
            );
            if let Err(why) = read {
                scan.untrusted.push(why);
            }
        }
    }
    scan.took = started.elapsed();
    scan
}

/// Looks `request`'s topic up, adds its tail to `scan`, and adds to
/// `assignment` (and `reading`) the partitions to read from the offsets
/// the checkpoint recorded.
fn plan_topic(
    consumer: &BaseConsumer<ClientAuth>,
    index: usize,
    request: &TailRequest,
    assignment: &mut TopicPartitionList,
    reading: &mut HashMap<(usize, i32), Reading>,
    scan: &mut TailScan,
) {
    let topic = &request.topic;
    let marks = match outbox_kafka::watermarks(consumer.client(), topic) {
        Ok(marks) => marks,
        Err(e) => {
            // Left out: the forwarder looks it up again before writing to it.
            scan.untrusted
                .push(format!("cannot read the partitions of topic {topic}: {e}"));
            return;
        }
    };
    let Some(marks) = marks else {
        if !request.read_from.is_empty() {
            scan.untrusted.push(format!(
                "topic {topic} no longer exists, though the checkpoint records offsets in it"
            ));
        }
        scan.topics.push(TopicTail {
            topic: topic.clone(),
            partitions: None,
        });
        return;
    };
    if !request.read_from.is_empty() && request.read_from.len() != marks.len() {
        scan.untrusted.push(format!(
            "topic {topic} has {} partitions, the checkpoint recorded {}: events may now \
             be routed to other partitions",
            marks.len(),
            request.read_from.len()
        ));
    }
    let mut partitions = Vec::with_capacity(marks.len());
    for (p, &(low, high)) in marks.iter().enumerate() {
        let p = p as i32;
        let recorded = request.read_from.get(p as usize).copied().unwrap_or(0);
        partitions.push(PartitionTail {
            next_offset: high,
            ..Default::default()
        });
        let state = Reading::new(recorded, low, high);
        if state.reached && state.proof_seen {
            continue;
        }
        if let Err(e) = assignment.add_partition_offset(topic, p, Offset::Offset(state.from)) {
            scan.untrusted
                .push(format!("cannot read {topic} partition {p}: {e}"));
            continue;
        }
        reading.insert((index, p), state);
    }
    scan.topics.push(TopicTail {
        topic: topic.clone(),
        partitions: Some(partitions),
    });
}

/// How one partition's tail is being read.
///
/// Only messages at or after the recorded offset are collected, each once
/// (a seek back makes the broker send some again), and only after the
/// message just under the recorded offset (the *proof*) was seen: that
/// message shows the partition is not shorter than recorded.
struct Reading {
    /// The recorded offset: messages from here on are collected.
    recorded: i64,
    /// The next offset to collect: messages under it are ignored.
    next: i64,
    proof_seen: bool,
    /// Where the partition is being read from, and its low watermark.
    from: i64,
    low: i64,
    high: i64,
    /// A message at or past the high watermark was seen.
    reached: bool,
    /// The last message of the partition, or the last seek.
    active_at: Instant,
}

impl Reading {
    fn new(recorded: i64, low: i64, high: i64) -> Self {
        // Unless retention already removed it, the message under the
        // recorded offset must be there.
        let proof_seen = recorded <= low;
        let from = if proof_seen { low } else { recorded - 1 };
        Self {
            recorded,
            next: recorded.max(low),
            proof_seen,
            from,
            low,
            high,
            reached: from >= high,
            active_at: Instant::now(),
        }
    }

    fn proof(&self) -> i64 {
        self.recorded - 1
    }

    /// Reads the partition from further back: some brokers (tansu 0.6)
    /// answer a fetch from inside a batch with the batch after it, or with
    /// nothing if it is the last. False when already at the start.
    fn look_further_back(
        &mut self,
        consumer: &BaseConsumer<ClientAuth>,
        topic: &str,
        partition: i32,
    ) -> Result<bool, KafkaError> {
        if self.from <= self.low {
            return Ok(false);
        }
        let back = (self.proof() - self.from).max(LOOK_BACK) * 2;
        self.from = (self.proof() - back).max(self.low);
        self.reached = self.from >= self.high;
        self.active_at = Instant::now();
        consumer.seek(topic, partition, Offset::Offset(self.from), REQUEST_TIMEOUT)?;
        Ok(true)
    }
}

/// Reads the assigned partitions until every one reached its high
/// watermark (and showed its proof) and the broker stayed quiet a while;
/// whatever makes the scan untrusted stops it, with the reason.
fn read(
    consumer: &BaseConsumer<ClientAuth>,
    requests: &[TailRequest],
    accept: Accept<'_>,
    reading: &mut HashMap<(usize, i32), Reading>,
    scan: &mut TailScan,
    limit: usize,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let index_of: HashMap<&str, usize> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| (r.topic.as_str(), i))
        .collect();
    // Silence is measured from the assignment, not from the look-ups.
    for state in reading.values_mut() {
        state.active_at = Instant::now();
    }
    let mut last_message = Instant::now();
    loop {
        let all_reached = reading.values().all(|r| r.reached && r.proof_seen);
        if all_reached && last_message.elapsed() >= QUIET {
            return Ok(());
        }
        if Instant::now() > deadline {
            let proofs = reading.values().filter(|r| !r.proof_seen).count();
            return Err(format!(
                "reading the topic tails took over {timeout:?} ({proofs} partitions never \
                 returned the message under the offset the checkpoint recorded)"
            ));
        }
        look_back_where_silent(consumer, requests, reading)?;
        let Some(message) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let message = message.map_err(|e| format!("cannot read the topic tails: {e}"))?;
        last_message = Instant::now();
        let Some(&index) = index_of.get(message.topic()) else {
            continue;
        };
        let partition = message.partition();
        let Some(state) = reading.get_mut(&(index, partition)) else {
            continue;
        };
        let tail = &mut scan.topics[index]
            .partitions
            .as_mut()
            .expect("assigned partitions exist")[partition as usize];
        let topic = &requests[index].topic;
        let Some(taken) = take(consumer, topic, &message, state, tail, accept)? else {
            continue;
        };
        scan.messages_read += 1;
        if scan.messages_read > limit {
            return Err(format!(
                "more than {limit} messages after the checkpoint in the topic tails"
            ));
        }
        match taken {
            Taken::Row(found) => tail.found.push(found),
            Taken::Backfill(found) => tail.backfilled.push(found),
        }
    }
}

/// A partition silent for a quiet period while its proof is awaited is
/// read from further back; once at its start, it is given a long while
/// before it is judged shorter than recorded.
fn look_back_where_silent(
    consumer: &BaseConsumer<ClientAuth>,
    requests: &[TailRequest],
    reading: &mut HashMap<(usize, i32), Reading>,
) -> Result<(), String> {
    for ((index, partition), state) in reading.iter_mut() {
        if state.proof_seen || state.active_at.elapsed() < QUIET {
            continue;
        }
        let topic = &requests[*index].topic;
        match state.look_further_back(consumer, topic, *partition) {
            Ok(true) => {}
            Ok(false) if state.active_at.elapsed() < SHORTER_AFTER => {}
            Ok(false) => {
                return Err(format!(
                    "{topic} partition {partition} ends before offset {}, which the \
                     checkpoint recorded (was the topic deleted and created again?)",
                    state.recorded
                ))
            }
            Err(e) => return Err(format!("cannot read {topic} partition {partition}: {e}")),
        }
    }
    Ok(())
}

/// What a message of a tail is.
enum Taken {
    Row(Found),
    Backfill(FoundBackfill),
}

/// One message of a partition being read: what it proves, and what it
/// adds to the tail (`None`: nothing, already collected or read again
/// from further back); an error when it shows the tail cannot be trusted.
fn take(
    consumer: &BaseConsumer<ClientAuth>,
    topic: &str,
    message: &BorrowedMessage<'_>,
    state: &mut Reading,
    tail: &mut PartitionTail,
    accept: Accept<'_>,
) -> Result<Option<Taken>, String> {
    let (partition, offset) = (message.partition(), message.offset());
    state.active_at = Instant::now();
    if offset + 1 >= state.high {
        state.reached = true;
    }
    tail.next_offset = tail.next_offset.max(offset + 1);
    if offset == state.proof() {
        state.proof_seen = true;
    }
    if offset < state.next {
        return Ok(None);
    }
    if !state.proof_seen {
        // Past the proof without seeing it: the broker skipped it.
        return match state.look_further_back(consumer, topic, partition) {
            Ok(true) => Ok(None),
            Ok(false) => Err(format!(
                "{topic} partition {partition} has no message at offset {}, under the \
                 offset the checkpoint recorded (was the topic deleted and created \
                 again, or compacted?)",
                state.proof()
            )),
            Err(e) => Err(format!("cannot read {topic} partition {partition}: {e}")),
        };
    }
    state.next = offset + 1;
    taken(topic, message, accept).map(Some)
}

/// What a message of a tail is, as `accept` reads it; an error when it is
/// one the forwarder did not write, or cannot be recognised.
fn taken(topic: &str, message: &BorrowedMessage<'_>, accept: Accept<'_>) -> Result<Taken, String> {
    let (partition, offset) = (message.partition(), message.offset());
    // Signed by the forwarder, when a key is set: anyone else's message
    // makes the scan untrusted (everything after the checkpoint is
    // published again), never a row skipped.
    if let Some(signing) = accept.signing {
        if !signing.verifies(message) {
            return Err(format!(
                "{topic} partition {partition} offset {offset} has no valid {}: another \
                 producer writes to the topic, or another key signed it",
                outbox_core::headers::HEADER_SIGNATURE
            ));
        }
    }
    let accepted = accept.coordinates;
    // A backfilled event is in Kafka whatever server it was read from; its
    // position bound only counts in the binlog of the server streamed.
    if let Some(mut backfilled) = backfill_of(message) {
        let comparable = match accepted {
            Coordinates::OfServer(server) => backfilled.server.as_deref() == Some(server),
            Coordinates::ByGtid => false,
        };
        if !comparable {
            backfilled.before = None;
        }
        return Ok(Taken::Backfill(backfilled));
    }
    let Some(origin) = coordinate_of(message) else {
        return Err(format!(
            "{topic} partition {partition} offset {offset} carries no binlog \
             coordinates (a binlog header, or binlog_position and binlog_row): another \
             producer writes to the topic"
        ));
    };
    match accepted {
        Coordinates::OfServer(server) if origin.server.as_deref() != Some(server) => {
            return Err(format!(
                "{topic} partition {partition} offset {offset} carries a row of the binlog of \
                 {} instead of {server}: another forwarder (or release) writes to the topic",
                origin.server.as_deref().unwrap_or("(none)")
            ));
        }
        Coordinates::ByGtid if origin.slot.is_none() => {
            return Err(format!(
                "{topic} partition {partition} offset {offset} carries no GTID \
                 (written by an older release, or without GTIDs): its row cannot be \
                 recognised on another server"
            ));
        }
        _ => {}
    }
    Ok(Taken::Row(Found {
        coordinate: origin.coordinate,
        offset,
        slot: origin.slot,
        event_id: origin.event_id,
    }))
}
