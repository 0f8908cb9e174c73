//! The part of a topic the table tools (`verify`, `backfill`, `repair-gap`,
//! `prune`) read: the window their rows need, not the topic's history.
//!
//! A row's message was produced after its insert, so its timestamp
//! (CreateTime, set by the producer) is no older than the row's creation
//! time, less the clocks' difference between the database's and the
//! producer's hosts. The window starts at the oldest selected row's time,
//! less a margin for those clocks and long transactions, and runs to each
//! partition's end: a row may have been published long after it was
//! written (a forwarder that lagged, a backfill).
//!
//! Under `timestamp_column` a message carries its row's own time, which
//! can be older than the row's creation: the window then starts at the
//! oldest of both.
//!
//! Each partition's first offset at or after the window's start comes from
//! the broker's time index (`ListOffsets` by timestamp) where its answer
//! holds up when checked against the messages around it; otherwise from a
//! binary search over the messages' timestamps (some Kafka-protocol
//! brokers answer the first with offset 0, or not at all). The search
//! assumes the timestamps rise with the offset, which holds for the
//! producers' own times (CreateTime) up to the margin (disorder smaller
//! than the margin cannot hide a row's message), and not for a
//! `timestamp_column`'s: a partition is read from its start, and the read
//! says so, where the rows stamp the messages, where its messages carry no
//! timestamps, and where two probes of the search found a later message
//! stamped more than half the margin before an earlier one (a sign of
//! unordered stamps; the probes see a few messages, so the margin remains
//! what covers disorder).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use outbox_core::DefiniteError;
use outbox_kafka::ClientAuth;
use outbox_sink::{header_pairs, KafkaConfig};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::pace::Pace;

/// How far before the oldest row's time the window starts by default:
/// clocks of different hosts, a transaction open for minutes.
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(15 * 60);

/// How the table tools read Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// How far before the oldest selected row's time the window starts.
    pub margin: Duration,
    /// Messages read per second, at most.
    pub max_messages_per_second: Option<u32>,
    /// Where the window ends, by message time (ms since the epoch): a
    /// partition is read up to its first message past it. `None`: to each
    /// partition's end (a row may be published long after it was written).
    pub until_ms: Option<i64>,
    /// Keep of each record only what proves a row (its id, table and
    /// signature), not its payload and other headers.
    pub ids_only: bool,
}

impl Default for Reading {
    fn default() -> Self {
        Self {
            margin: DEFAULT_MARGIN,
            max_messages_per_second: None,
            until_ms: None,
            ids_only: false,
        }
    }
}

/// How long a read may go without a message before its partitions' ends.
const STALLED: Duration = Duration::from_secs(60);

/// One record as read back.
pub struct KafkaRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub event_id: String,
    pub headers: Vec<(String, String)>,
    pub payload: String,
    /// Signed by the forwarder's key, or no key is set (see
    /// [`outbox_kafka::Signing`]).
    pub signed: bool,
}

impl std::fmt::Display for KafkaRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        write!(
            f,
            "{}[{}]@{} key={} headers={{{}}} payload={}",
            self.topic,
            self.partition,
            self.offset,
            self.event_id,
            headers.join(", "),
            self.payload
        )
    }
}

impl KafkaRecord {
    /// The `source_table` header: the table whose row the message stands for.
    pub fn source_table(&self) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == outbox_core::headers::HEADER_SOURCE_TABLE)
            .map(|(_, v)| v.as_str())
    }

    /// A message as the table tools compare it: its event id from the
    /// `event_id` header (or, without one, the key).
    fn of<M: Message>(message: &M, signing: Option<&outbox_kafka::Signing>) -> Self {
        let headers = message.headers().map(header_pairs).unwrap_or_default();
        let event_id = headers
            .iter()
            .find(|(k, _)| k == outbox_core::headers::EVENT_ID)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| {
                String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned()
            });
        Self {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            event_id,
            headers,
            payload: String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned(),
            signed: signing.is_none_or(|s| s.verifies(message)),
        }
    }
}

/// The rows' side of a window: where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Messages stamped at or after `ms` (since the epoch), `margin_ms`
    /// of it the margin. `rows_stamp`: the rows' `timestamp_column`
    /// stamps the messages, so the stamps need not rise with the offset.
    Since {
        ms: i64,
        margin_ms: i64,
        rows_stamp: bool,
    },
    /// Every message: why the rows cannot bound the read.
    Whole(String),
}

/// What a read found.
#[derive(Default)]
pub struct WindowRead {
    pub records: Vec<KafkaRecord>,
    /// Messages of the partitions read that lie before the window, unread.
    pub before: u64,
    /// Partitions read from their start, and why.
    pub widened: Vec<String>,
}

/// The records in the window (what the table tools compare with their
/// rows): which rows they stand for.
#[derive(Debug, Default)]
pub struct Published {
    /// (table, event id) of the records that name their table.
    in_table: HashSet<(String, String)>,
    /// Records passed over for want of a valid signature.
    pub unsigned: u64,
    /// Records passed over for want of a `source_table` header: every
    /// message the forwarder and `backfill` write names its table, so such
    /// a record is another producer's, and matching a row by its bare id
    /// would take it as proof for a row never published.
    pub tableless: u64,
}

impl Published {
    /// What `records` stand for; only the signed ones when a key is set
    /// (see [`outbox_kafka::Signing`]): a message another principal wrote
    /// proves nothing.
    pub fn of(records: &[KafkaRecord]) -> Self {
        let mut published = Self::default();
        for record in records {
            if !record.signed {
                published.unsigned += 1;
                continue;
            }
            match record.source_table() {
                Some(table) => {
                    published
                        .in_table
                        .insert((table.to_owned(), record.event_id.clone()));
                }
                None => published.tableless += 1,
            }
        }
        published
    }

    /// Whether a record stands for the row `event_id` of `table`
    /// (`schema.table`).
    pub fn holds(&self, table: &str, event_id: &str) -> bool {
        self.in_table
            .contains(&(table.to_owned(), event_id.to_owned()))
    }
}

/// Reads the window `start` names from every partition of `topics` as
/// `reading` says: at most its rate, to each partition's end or its first
/// message past its `until_ms`, whole records or their ids. Blocking: off the runtime's workers where it
/// runs in one (see [`read_off_the_runtime`]).
pub fn read(
    kafka_config: &KafkaConfig,
    topics: &BTreeSet<String>,
    start: &Start,
    reading: &Reading,
) -> Result<WindowRead, DefiniteError> {
    let until_ms = reading.until_ms;
    let brokers = &kafka_config.brokers;
    let kafka = |e: rdkafka::error::KafkaError| {
        DefiniteError::Config(format!(
            "reading Kafka at {brokers}: {}",
            outbox_kafka::shown(&e)
        ))
    };
    let consumer = consumer(kafka_config, &[]).map_err(kafka)?;
    let mut read = WindowRead::default();
    // Probed with a consumer of its own: no message fetched for a probe
    // reaches the read.
    let probe = self::consumer(kafka_config, &[]).map_err(kafka)?;
    let plan = plan(&probe, topics, start, &mut read).map_err(kafka)?;
    drop(probe);
    if plan.ends.is_empty() {
        return Ok(read);
    }
    consumer.assign(&plan.assignment).map_err(kafka)?;
    let total: i64 = plan.ends.values().sum::<i64>() - plan.starts.values().sum::<i64>();
    let mut meter = super::meter::Meter::new("kafka", "messages", Some(total.max(0) as u64));
    let pace = Pace::new(reading.max_messages_per_second);
    let mut ends = plan.ends;
    // Past the watermarks, read on until the partitions stay quiet for a
    // moment: some brokers (tansu 0.6) report the high watermark of a
    // multi-record batch short of the batch's end. A topic still written
    // to is never quiet: then a few seconds past the watermarks do.
    const QUIET: Duration = Duration::from_millis(500);
    const PAST_THE_ENDS: Duration = Duration::from_secs(3);
    let mut last_message = Instant::now();
    let mut ends_reached: Option<Instant> = None;
    let mut past: HashSet<(String, i32)> = HashSet::new();
    while !ends.is_empty()
        || (last_message.elapsed() < QUIET
            && ends_reached.get_or_insert_with(Instant::now).elapsed() < PAST_THE_ENDS)
    {
        if !ends.is_empty() && last_message.elapsed() > STALLED {
            return Err(DefiniteError::Config(format!(
                "reading Kafka at {brokers}: no message for {} s with {} partition(s) short of \
                 their end, after {} messages",
                STALLED.as_secs(),
                ends.len(),
                read.records.len()
            )));
        }
        std::thread::sleep(pace.delay(read.records.len() as u64));
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.map_err(kafka)?;
        last_message = Instant::now();
        let key = (message.topic().to_owned(), message.partition());
        if past.contains(&key) {
            continue;
        }
        if until_ms.is_some_and(|until| message.timestamp().to_millis() > Some(until)) {
            // This partition's window ends here.
            let mut partition = TopicPartitionList::new();
            partition.add_partition(&key.0, key.1);
            let _ = consumer.pause(&partition);
            ends.remove(&key);
            past.insert(key);
            continue;
        }
        read.records
            .push(record_of(&message, kafka_config, reading.ids_only));
        meter.tick(read.records.len() as u64, read.records.len() as u64);
        if ends
            .get(&key)
            .is_some_and(|high| message.offset() + 1 >= *high)
        {
            ends.remove(&key);
        }
    }
    Ok(read)
}

/// [`read`] from async code: where the runtime has several workers, the
/// others go on meanwhile (the lock keeper's pings, the stream).
pub fn read_off_the_runtime(
    kafka_config: &KafkaConfig,
    topics: &BTreeSet<String>,
    start: &Start,
    reading: &Reading,
) -> Result<WindowRead, DefiniteError> {
    outbox_kafka::blocking::off_the_runtime(|| read(kafka_config, topics, start, reading))
}

/// `message` as the window keeps it: whole, or with `ids_only` without its
/// payload and with no header but the one naming its table.
fn record_of(
    message: &rdkafka::message::BorrowedMessage<'_>,
    kafka_config: &KafkaConfig,
    ids_only: bool,
) -> KafkaRecord {
    let mut record = KafkaRecord::of(message, kafka_config.signing.as_ref());
    if ids_only {
        record.payload = String::new();
        record
            .headers
            .retain(|(k, _)| k == outbox_core::headers::HEADER_SOURCE_TABLE);
    }
    record
}

/// A consumer that reads partitions it is given (no group, no commits),
/// signed in; `settings` on top of the table tools' own.
pub(super) fn consumer(
    kafka_config: &KafkaConfig,
    settings: &[(&str, &str)],
) -> Result<BaseConsumer<ClientAuth>, rdkafka::error::KafkaError> {
    let group = format!("outbox-forwarder-verify-{}", std::process::id());
    let mut all = vec![("group.id", group.as_str()), ("fetch.wait.max.ms", "50")];
    all.extend_from_slice(settings);
    outbox_kafka::reader(kafka_config.connection_config(), &kafka_config.auth, &all)
}

/// An offset per (topic, partition).
type Marks = HashMap<(String, i32), i64>;

/// Where each partition's read starts and ends.
pub(super) struct Plan {
    /// The partitions that hold records in the window, from their start.
    assignment: TopicPartitionList,
    starts: Marks,
    ends: Marks,
    /// Every partition and where the window starts in it, records or not.
    pub(super) all: Vec<(String, i32, i64)>,
}

/// Per partition of `topics` that holds records in the window: where to
/// read from and its high watermark.
pub(super) fn plan(
    consumer: &BaseConsumer<ClientAuth>,
    topics: &BTreeSet<String>,
    start: &Start,
    read: &mut WindowRead,
) -> Result<Plan, rdkafka::error::KafkaError> {
    let mut plan = Plan {
        assignment: TopicPartitionList::new(),
        starts: Marks::new(),
        ends: Marks::new(),
        all: Vec::new(),
    };
    for topic in topics {
        let marks = outbox_kafka::watermarks(consumer.client(), topic)?.unwrap_or_default();
        for (p, (low, high)) in (0..).zip(marks) {
            let from = match start {
                Start::Whole(_) => low,
                Start::Since {
                    ms,
                    margin_ms,
                    rows_stamp,
                } => {
                    let search = Search::new(consumer, topic, p, (low, high));
                    match search.read_from(*ms, *rows_stamp, margin_ms / 2)? {
                        Found::At(offset) => offset,
                        Found::Whole(why) => {
                            read.widened.push(format!("{topic}[{p}]: {why}"));
                            low
                        }
                    }
                }
            };
            read.before += (from - low).max(0) as u64;
            plan.all.push((topic.clone(), p, from));
            if high > from {
                plan.assignment
                    .add_partition_offset(topic, p, Offset::Offset(from))?;
                plan.starts.insert((topic.clone(), p), from);
                plan.ends.insert((topic.clone(), p), high);
            }
        }
    }
    Ok(plan)
}

/// Finds a partition's first offset stamped at or after a time.
struct Search<'a> {
    consumer: &'a BaseConsumer<ClientAuth>,
    topic: &'a str,
    partition: i32,
    low: i64,
    high: i64,
}

/// A message found at or after an offset: its offset and timestamp.
type Probe = Option<(i64, Option<i64>)>;

/// Where a partition's read starts.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    At(i64),
    /// From its start: why the time cannot be found in it.
    Whole(String),
}

impl<'a> Search<'a> {
    fn new(
        consumer: &'a BaseConsumer<ClientAuth>,
        topic: &'a str,
        partition: i32,
        marks: (i64, i64),
    ) -> Self {
        Self {
            consumer,
            topic,
            partition,
            low: marks.0,
            high: marks.1,
        }
    }

    /// Where a read of the messages stamped at or after `ms` starts: just
    /// before the first of them (see [`search`]), or the partition's start
    /// when the search cannot be trusted (`rows_stamp`: the rows' own times
    /// stamp the messages; or probes out of order by more than
    /// `disorder_ms`).
    fn read_from(
        &self,
        ms: i64,
        rows_stamp: bool,
        disorder_ms: i64,
    ) -> Result<Found, rdkafka::error::KafkaError> {
        if self.high <= self.low {
            return Ok(Found::At(self.low));
        }
        if let Some(offset) = self.indexed(ms)? {
            return Ok(Found::At(offset));
        }
        if rows_stamp {
            return Ok(Found::Whole(
                "timestamp_column stamps its messages with the rows' own times, which need not \
                 rise with the offset, and the broker's time index gave no answer to check"
                    .into(),
            ));
        }
        search((self.low, self.high), ms, disorder_ms, |at| self.probe(at))
    }

    /// The broker's own answer from its time index, if the messages
    /// around it confirm it: the one at it is stamped at or after `ms`,
    /// the one before it earlier.
    fn indexed(&self, ms: i64) -> Result<Option<i64>, rdkafka::error::KafkaError> {
        let mut wanted = TopicPartitionList::new();
        wanted.add_partition_offset(self.topic, self.partition, Offset::Offset(ms))?;
        let Ok(found) = self
            .consumer
            .offsets_for_times(wanted, Duration::from_secs(10))
        else {
            return Ok(None);
        };
        let offset = match found
            .find_partition(self.topic, self.partition)
            .map(|p| p.offset())
        {
            Some(Offset::Offset(o)) if (self.low..=self.high).contains(&o) => o,
            Some(Offset::End) => self.high,
            _ => return Ok(None),
        };
        let at_or_after = offset == self.high
            || matches!(self.probe(offset)?, Some((_, Some(stamp))) if stamp >= ms);
        let before = offset == self.low
            || match self.probe(offset - 1)? {
                Some((o, Some(stamp))) => o >= offset || stamp < ms,
                _ => false,
            };
        Ok((at_or_after && before).then_some(offset))
    }

    /// The first message at or after `offset`: its offset and timestamp;
    /// `None` if none arrives.
    fn probe(&self, offset: i64) -> Result<Probe, rdkafka::error::KafkaError> {
        let mut at = TopicPartitionList::new();
        at.add_partition_offset(self.topic, self.partition, Offset::Offset(offset))?;
        self.consumer.assign(&at)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let Some(message) = self.consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let message = message?;
            if message.partition() == self.partition && message.offset() >= offset {
                return Ok(Some((message.offset(), message.timestamp().to_millis())));
            }
        }
        Ok(None)
    }
}

/// The binary search for the first message stamped at or after `ms` in
/// the partition `[low, high)`, `probe` giving the first message at or
/// after an offset. Messages stamped in offset order, within the margin:
/// the first one at or after `ms` lies in `[lo, hi)`. The read starts at
/// the newest message found stamped before `ms`, one message early: a
/// broker that serves a fetch from inside a record batch with the next
/// batch (tansu 0.6) would otherwise skip the rest of the batch the window
/// starts in. The partition's first message is probed too, and every
/// probe is checked against the others' order (`disorder_ms`).
fn search<E>(
    (low, high): (i64, i64),
    ms: i64,
    disorder_ms: i64,
    mut probe: impl FnMut(i64) -> Result<Probe, E>,
) -> Result<Found, E> {
    let (mut lo, mut hi) = (low, high);
    let mut older = low;
    let mut seen = Vec::new();
    let mut next = Some(low);
    while let Some(at) = next.take().or((lo < hi).then(|| lo + (hi - lo) / 2)) {
        let found = probe(at)?;
        if let Some((offset, Some(stamp))) = found {
            seen.push((offset, stamp));
        }
        match found {
            None => hi = at,
            Some((_, None)) => return Ok(Found::Whole("its messages carry no timestamps".into())),
            Some((_, Some(stamp))) if stamp >= ms => hi = hi.min(at.max(lo)),
            Some((offset, Some(_))) => {
                older = older.max(offset);
                lo = lo.max(offset.max(at) + 1);
            }
        }
    }
    match disorder(&mut seen, disorder_ms) {
        Some(why) => Ok(Found::Whole(why)),
        None => Ok(Found::At(older)),
    }
}

/// Why the probes' stamps do not rise with their offsets (a later message
/// stamped more than `disorder_ms` before an earlier one), if they do not.
fn disorder(seen: &mut [(i64, i64)], disorder_ms: i64) -> Option<String> {
    seen.sort_unstable();
    let mut newest: Option<(i64, i64)> = None;
    for &(offset, stamp) in seen.iter() {
        if let Some((at, before)) = newest {
            if before - stamp > disorder_ms {
                return Some(format!(
                    "its timestamps do not rise with the offset (offset {offset} is stamped \
                     {} s before offset {at}), so a time cannot be searched for in it",
                    (before - stamp) / 1000
                ));
            }
        }
        if newest.is_none_or(|(_, before)| stamp > before) {
            newest = Some((offset, stamp));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_that_fall_back_further_than_the_disorder_allowed_are_named() {
        assert_eq!(
            disorder(&mut [(0, 1_000), (5, 1_500), (9, 3_000)], 1_000),
            None
        );
        assert_eq!(
            disorder(&mut [(9, 3_000), (0, 1_000), (5, 800)], 1_000),
            None
        );
        let why = disorder(&mut [(7, 5_000), (0, 90_000), (3, 91_000)], 1_000).unwrap();
        assert!(
            why.contains("offset 7 is stamped 86 s before offset 3"),
            "{why}"
        );
        assert_eq!(disorder(&mut [(7, 5_000), (3, 91_000)], 90_000), None);
    }

    /// A partition of `stamps` (one message per offset, from 0): the
    /// search's probe, counting its calls.
    fn partition(stamps: &[Option<i64>]) -> impl FnMut(i64) -> Result<Probe, ()> + '_ {
        move |at| Ok(stamps.get(at as usize).map(|stamp| (at, *stamp)))
    }

    #[test]
    fn the_search_finds_the_message_before_the_first_one_stamped_in_the_window() {
        let rising: Vec<Option<i64>> = (0..1_000).map(|i| Some(i * 10)).collect();
        let found = |ms| search((0, 1_000), ms, 1_000, partition(&rising)).unwrap();
        // 4 550 is offset 455's stamp: the read starts at 454.
        assert_eq!(found(4_550), Found::At(454));
        assert_eq!(found(4_555), Found::At(455));
        assert_eq!(found(0), Found::At(0));
        assert_eq!(found(-5), Found::At(0));
        assert_eq!(found(1_000_000), Found::At(999));
        // Same stamps for a batch of 100: the window starts in the batch
        // before the first of them.
        let batched: Vec<Option<i64>> = (0..1_000).map(|i| Some(i / 100 * 1_000)).collect();
        let found = search((0, 1_000), 3_000, 0, partition(&batched)).unwrap();
        assert_eq!(found, Found::At(299));
        // A high watermark past the messages that arrive.
        let short: Vec<Option<i64>> = (0..600).map(|i| Some(i * 10)).collect();
        assert_eq!(
            search((0, 1_000), 4_550, 1_000, partition(&short)).unwrap(),
            Found::At(454)
        );
    }

    #[test]
    fn a_partition_without_stamps_or_with_unordered_ones_is_read_whole() {
        let none = vec![None; 100];
        let found = search((0, 100), 50, 1_000, partition(&none)).unwrap();
        assert!(matches!(found, Found::Whole(why) if why.contains("no timestamps")));
        // Event times of rows written in any order: days apart.
        let unordered: Vec<Option<i64>> = (0..1_000i64)
            .map(|i| Some((i * 7_919) % 1_000 * 86_400_000))
            .collect();
        let found = search((0, 1_000), 500 * 86_400_000, 60_000, partition(&unordered)).unwrap();
        assert!(matches!(found, Found::Whole(why) if why.contains("do not rise")));
    }
}
