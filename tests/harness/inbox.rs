//! Helpers for the inbox consumer's tests: a consumer binary as its own
//! process, writing records straight to a topic, and reading a group's
//! committed offsets.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::{process, Broker};

/// A consumer binary (e.g. `notification-planner`) running with
/// `--config FILE`, logging to a file.
pub struct ConsumerProcess {
    child: Option<Child>,
    /// The process's stderr (its log).
    pub log_path: PathBuf,
}

impl ConsumerProcess {
    /// Starts `binary --config config`, logging at `rust_log` into `log_path`.
    pub fn spawn(binary: &Path, config: &Path, log_path: &Path, rust_log: &str) -> Self {
        let log = std::fs::File::create(log_path).unwrap();
        let mut command = Command::new(binary);
        command
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::null())
            .stderr(log);
        let child = process::spawn(command).expect("consumer starts");
        ConsumerProcess {
            child: Some(child),
            log_path: log_path.to_owned(),
        }
    }

    /// The log so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log_path) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }

    /// Log lines containing every one of `needles`.
    pub fn count_lines(&self, needles: &[&str]) -> usize {
        self.log()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .count()
    }

    /// Waits until at least `count` log lines contain all of `needles`;
    /// panics with the log otherwise or if the process exits.
    pub async fn wait_for_lines(&mut self, needles: &[&str], count: usize, timeout: Duration) {
        process::wait_for_lines(
            "consumer",
            self.child.as_mut(),
            &self.log_path,
            needles,
            count,
            timeout,
        )
        .await;
    }

    /// SIGKILL: no offset commit, no cleanup.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        process::signal(child.id(), libc::SIGTERM);
        child.wait().unwrap()
    }
}

impl Drop for ConsumerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A record to write with [`produce`].
#[derive(Debug, Clone)]
pub struct OutgoingRecord {
    /// The record key (the forwarder uses the event id).
    pub key: String,
    /// Headers in order.
    pub headers: Vec<(String, String)>,
    /// The value (JSON text for outbox events).
    pub payload: String,
}

impl OutgoingRecord {
    /// An outbox-style record: key and `event_id` header = `event_id`, plus
    /// `event_type`, `aggregate_type`, `aggregate_id` and `event_version`.
    pub fn event(
        event_id: &str,
        event_type: &str,
        aggregate_type: &str,
        aggregate_id: &str,
        version: i64,
        payload: &str,
    ) -> Self {
        OutgoingRecord {
            key: event_id.to_owned(),
            headers: [
                ("event_id", event_id.to_owned()),
                ("event_type", event_type.to_owned()),
                ("aggregate_type", aggregate_type.to_owned()),
                ("aggregate_id", aggregate_id.to_owned()),
                ("event_version", version.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
            payload: payload.to_owned(),
        }
    }
}

/// Writes `records` to `topic` partition `partition`, in order, each acked
/// (`acks=all`) before the next is sent. Returns their offsets.
pub async fn produce(
    broker: &Broker,
    topic: &str,
    partition: i32,
    records: &[OutgoingRecord],
) -> Vec<i64> {
    produce_to(&broker.bootstrap(), topic, partition, records).await
}

/// [`produce`] to the brokers at `bootstrap` (e.g. librdkafka's mock cluster).
pub async fn produce_to(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    records: &[OutgoingRecord],
) -> Vec<i64> {
    produce_compressed(bootstrap, topic, partition, records, "none").await
}

/// [`produce_to`], the batches compressed with `codec` (librdkafka's
/// `compression.type`).
pub async fn produce_compressed(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    records: &[OutgoingRecord],
    codec: &str,
) -> Vec<i64> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("compression.type", codec)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .expect("producer");
    let mut offsets = Vec::new();
    for r in records {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header {
                key: k,
                value: Some(v.as_str()),
            });
        }
        let record = FutureRecord::to(topic)
            .partition(partition)
            .key(&r.key)
            .payload(&r.payload)
            .headers(headers);
        let delivery = tokio::time::timeout(crate::TIMEOUT, producer.send(record, crate::TIMEOUT))
            .await
            .expect("ack in time")
            .expect("record acked");
        offsets.push(delivery.offset);
    }
    offsets
}

/// The offset `group` has committed for `topic`/`partition`, `None` when
/// it has committed nothing there.
pub fn committed_offset(broker: &Broker, group: &str, topic: &str, partition: i32) -> Option<i64> {
    committed_offset_at(&broker.bootstrap(), group, topic, partition)
}

/// [`committed_offset`] on the brokers at `bootstrap`.
pub fn committed_offset_at(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, partition);
    let committed = consumer
        .committed_offsets(list, crate::TIMEOUT)
        .expect("committed offsets");
    match committed
        .find_partition(topic, partition)
        .expect("asked partition")
        .offset()
    {
        Offset::Offset(offset) => Some(offset),
        _ => None,
    }
}
