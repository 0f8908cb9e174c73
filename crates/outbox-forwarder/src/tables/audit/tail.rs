//! The auditor's reader of the topics: a thread that follows each
//! partition of the topics the outbox rows go to, from where the rows
//! first needed it, as it is written, and keeps a [`Mark`] of every
//! message that can prove a row (naming its table; signed, where a key
//! is set) until a pass takes them. A message is read once: the reader
//! never searches back, and never moves a partition it follows (a broker
//! that serves a fetch from inside a record batch with the next one,
//! tansu 0.6, would skip the rest of the batch).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use outbox_core::headers::{EVENT_ID, HEADER_SOURCE_TABLE};
use outbox_kafka::{ClientAuth, Signing};
use outbox_sink::KafkaConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::book::{Mark, Marks};
use crate::tables::pace::Pace;
use crate::tables::window::{self, Start};

/// What a pass takes from the reader.
#[derive(Debug, Default)]
pub struct Taken {
    /// The marks of the messages read since the last pass took them.
    pub marks: HashSet<Mark>,
    /// Messages read since then, marked or not.
    pub read: u64,
    /// Messages passed over since then: naming no table (another
    /// producer's), and without a valid signature where a key is set.
    pub tableless: u64,
    pub unsigned: u64,
    /// Marks not kept: more than [`MARKS_AT_MOST`] waited to be taken.
    pub dropped: u64,
    /// The topics read to the ends they had when the pass asked.
    pub topics: BTreeSet<String>,
}

/// Marks kept at most between two passes (a set of them takes about
/// 36 MB): passes that keep failing, or a reader paced below the topics'
/// rate, would otherwise keep them all.
pub const MARKS_AT_MOST: usize = 1_000_000;

/// The handle a pass holds: the thread stops when it is dropped.
pub struct Tail {
    commands: mpsc::Sender<Command>,
    thread: std::thread::JoinHandle<()>,
}

enum Command {
    /// Follow `topics` from the first message stamped at `start`.
    Follow {
        topics: BTreeSet<String>,
        start: Start,
        reply: tokio::sync::oneshot::Sender<Result<(), String>>,
    },
    /// Read every followed partition to the end it has now, then hand over
    /// what was read; an error if that takes longer than `within`.
    CatchUp {
        within: Duration,
        reply: tokio::sync::oneshot::Sender<Result<Taken, String>>,
    },
}

impl Tail {
    /// Starts the reader (following nothing yet); `max_messages_per_second`
    /// is its rate limit.
    pub fn start(
        kafka: &KafkaConfig,
        max_messages_per_second: Option<u32>,
        marks: Marks,
    ) -> Result<Self, String> {
        let consumer = window::consumer(
            kafka,
            &[
                // Fewer, fuller fetches: a pass waits for the ends anyway.
                ("fetch.wait.max.ms", "500"),
                ("fetch.min.bytes", "65536"),
                ("queued.max.messages.kbytes", "16384"),
                ("auto.offset.reset", "earliest"),
            ],
        )
        .map_err(|e| outbox_kafka::shown(&e))?;
        let (commands, received) = mpsc::channel();
        let mut reader = Reader {
            consumer,
            kafka: kafka.clone(),
            rate: max_messages_per_second,
            topics: BTreeSet::new(),
            read: Read {
                signing: kafka.signing.clone(),
                marks,
                positions: HashMap::new(),
                taken: Taken::default(),
                error: None,
                waiting: None,
            },
        };
        let thread = std::thread::Builder::new()
            .name("audit-reader".into())
            .spawn(move || reader.run(&received))
            .map_err(|e| format!("starting the auditor's reader: {e}"))?;
        Ok(Self { commands, thread })
    }

    /// Whether the reader's thread has ended (it panicked): a new one has
    /// to be started.
    pub fn stopped(&self) -> bool {
        self.thread.is_finished()
    }

    /// Follows `topics` (those not followed yet) from `start`.
    pub async fn follow(&self, topics: BTreeSet<String>, start: Start) -> Result<(), String> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.ask(Command::Follow {
            topics,
            start,
            reply,
        })?;
        answer.await.map_err(|_| gone())?
    }

    /// What the reader read, once every followed partition is read to the
    /// end it has now.
    pub async fn catch_up(&self, within: Duration) -> Result<Taken, String> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.ask(Command::CatchUp { within, reply })?;
        answer.await.map_err(|_| gone())?
    }

    fn ask(&self, command: Command) -> Result<(), String> {
        self.commands.send(command).map_err(|_| gone())
    }
}

fn gone() -> String {
    "the auditor's reader of the topics stopped".into()
}

/// A partition: (topic, partition).
type Partition = (String, i32);

/// A pass waiting for the ends.
struct Waiting {
    ends: HashMap<Partition, i64>,
    deadline: Instant,
    reply: tokio::sync::oneshot::Sender<Result<Taken, String>>,
}

struct Reader {
    consumer: BaseConsumer<ClientAuth>,
    kafka: KafkaConfig,
    rate: Option<u32>,
    topics: BTreeSet<String>,
    read: Read,
}

/// What the reader has read.
struct Read {
    signing: Option<Signing>,
    marks: Marks,
    /// The next offset to read of each partition followed.
    positions: HashMap<Partition, i64>,
    taken: Taken,
    /// The last error reading, until a message arrives.
    error: Option<String>,
    waiting: Option<Waiting>,
}

/// How long a paced read counts its messages before it starts counting
/// afresh (a rate, not a budget saved up while idle).
const PACE_SPAN: Duration = Duration::from_secs(10);

impl Reader {
    fn run(&mut self, commands: &mpsc::Receiver<Command>) {
        let mut pace = (Pace::new(self.rate), Instant::now(), 0u64);
        loop {
            loop {
                match commands.try_recv() {
                    Ok(command) => self.obey(command),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            }
            if pace.1.elapsed() > PACE_SPAN {
                pace = (Pace::new(self.rate), Instant::now(), 0);
            }
            std::thread::sleep(pace.0.delay(pace.2));
            match self.consumer.poll(Duration::from_millis(100)) {
                Some(Ok(message)) => {
                    pace.2 += 1;
                    self.read.error = None;
                    self.read.note(&message);
                }
                Some(Err(e)) => self.read.error = Some(outbox_kafka::shown(&e)),
                None => {}
            }
            self.read.answer(&self.topics);
        }
    }

    fn obey(&mut self, command: Command) {
        match command {
            Command::Follow {
                topics,
                start,
                reply,
            } => {
                let _ = reply.send(self.follow(topics, &start));
            }
            Command::CatchUp { within, reply } => match self.ends() {
                Ok(ends) => {
                    self.read.waiting = Some(Waiting {
                        ends,
                        deadline: Instant::now() + within,
                        reply,
                    });
                    self.read.answer(&self.topics);
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
        }
    }

    /// Assigns the partitions of `topics` not followed yet, from the
    /// window's start in each (see [`window`]).
    fn follow(&mut self, topics: BTreeSet<String>, start: &Start) -> Result<(), String> {
        let topics: BTreeSet<String> = topics.difference(&self.topics).cloned().collect();
        if topics.is_empty() {
            return Ok(());
        }
        let shown = |e: rdkafka::error::KafkaError| outbox_kafka::shown(&e);
        // Searched with a consumer of its own: the probes' messages never
        // reach the marks.
        let probe = window::consumer(&self.kafka, &[]).map_err(shown)?;
        let plan = window::plan(&probe, &topics, start, &mut Default::default()).map_err(shown)?;
        drop(probe);
        let mut assignment = TopicPartitionList::new();
        let mut added = Vec::new();
        for (topic, partition, from) in plan.all {
            if self
                .read
                .positions
                .contains_key(&(topic.clone(), partition))
            {
                continue;
            }
            assignment
                .add_partition_offset(&topic, partition, Offset::Offset(from))
                .map_err(shown)?;
            added.push(((topic, partition), from));
        }
        // Followed once assigned: a partition in `positions` is read.
        self.consumer
            .incremental_assign(&assignment)
            .map_err(shown)?;
        self.read.positions.extend(added);
        self.topics.extend(topics);
        Ok(())
    }

    /// Each followed partition's end now (new partitions of the followed
    /// topics are followed from their start first): those not read to it.
    fn ends(&mut self) -> Result<HashMap<Partition, i64>, String> {
        let shown = |e: rdkafka::error::KafkaError| outbox_kafka::shown(&e);
        let mut new = TopicPartitionList::new();
        let mut added = Vec::new();
        let mut ends = HashMap::new();
        for topic in &self.topics {
            let marks = outbox_kafka::watermarks(self.consumer.client(), topic).map_err(shown)?;
            for (partition, (low, high)) in (0..).zip(marks.unwrap_or_default()) {
                let key = (topic.clone(), partition);
                let at = match self.read.positions.get(&key) {
                    Some(at) => *at,
                    None => {
                        new.add_partition_offset(topic, partition, Offset::Offset(low))
                            .map_err(shown)?;
                        added.push((key.clone(), low));
                        low
                    }
                };
                if high > at {
                    ends.insert(key, high);
                }
            }
        }
        if new.count() > 0 {
            self.consumer.incremental_assign(&new).map_err(shown)?;
            self.read.positions.extend(added);
        }
        Ok(ends)
    }
}

impl Read {
    /// Keeps what a message proves, and moves its partition's position.
    fn note<M: Message>(&mut self, message: &M) {
        let key = (message.topic().to_owned(), message.partition());
        let next = message.offset() + 1;
        if let Some(waiting) = &mut self.waiting {
            if waiting.ends.get(&key).is_some_and(|end| next >= *end) {
                waiting.ends.remove(&key);
            }
        }
        self.positions.insert(key, next);
        self.taken.read += 1;
        if self.signing.as_ref().is_some_and(|s| !s.verifies(message)) {
            self.taken.unsigned += 1;
            return;
        }
        match mark(message, &self.marks) {
            Some(mark)
                if self.taken.marks.len() >= MARKS_AT_MOST && !self.taken.marks.contains(&mark) =>
            {
                self.taken.dropped += 1
            }
            Some(mark) => {
                self.taken.marks.insert(mark);
            }
            None => self.taken.tableless += 1,
        }
    }

    /// Answers a waiting pass once the ends are reached, or its time is up.
    fn answer(&mut self, topics: &BTreeSet<String>) {
        let Some(waiting) = &self.waiting else { return };
        if waiting.ends.is_empty() {
            let Some(waiting) = self.waiting.take() else {
                return;
            };
            let mut taken = std::mem::take(&mut self.taken);
            taken.topics = topics.clone();
            let _ = waiting.reply.send(Ok(taken));
        } else if Instant::now() > waiting.deadline {
            let Some(waiting) = self.waiting.take() else {
                return;
            };
            let short: i64 = waiting
                .ends
                .iter()
                .map(|(key, end)| end - self.positions.get(key).copied().unwrap_or(0))
                .sum();
            let why = self
                .error
                .as_deref()
                .map_or(String::new(), |e| format!(" (last error: {e})"));
            let _ = waiting.reply.send(Err(format!(
                "the auditor's reader is {short} messages short of the topics' ends in {} \
                 partition(s){why}",
                waiting.ends.len()
            )));
        }
    }
}

/// The mark of the row a message stands for: its `source_table` header and
/// its event id (the `event_id` header, or the key); `None` for a message
/// that names no table.
fn mark<M: Message>(message: &M, marks: &Marks) -> Option<Mark> {
    let headers = message.headers()?;
    let (mut table, mut event_id) = (None, None);
    for header in headers.iter() {
        match header.key {
            HEADER_SOURCE_TABLE => table = header.value,
            EVENT_ID => event_id = header.value,
            _ => {}
        }
    }
    let event_id = event_id.or_else(|| message.key()).unwrap_or_default();
    Some(marks.of(table?, event_id))
}
