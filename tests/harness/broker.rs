//! The Kafka-protocol broker (`tansu`) as a child process, and a consumer
//! that reads back what reached it.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::ClientConfig;
use tokio::sync::OnceCell;

use crate::tls::{TestPki, TlsFront};
use crate::{free_port, process};

/// Where `.ci/run` and `scripts/install-deps.sh` install the broker.
pub fn tansu_binary() -> PathBuf {
    if let Ok(path) = std::env::var("TANSU_BIN") {
        return PathBuf::from(path);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let path = PathBuf::from(home).join(".cache/outbox-forwarder/tansu-0.6.0/bin/tansu");
    assert!(
        path.exists(),
        "{} not found: run scripts/install-deps.sh (or set TANSU_BIN)",
        path.display()
    );
    path
}

pub struct Broker {
    /// The broker's own (plaintext, unauthenticated until
    /// [`Broker::start_secured`] turns authentication on) listener.
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    persistent: bool,
    /// The port the broker tells clients to use: `port`, or its TLS front's.
    advertised: u16,
    front: Option<TlsFront>,
    authentication: bool,
    /// The librdkafka properties a client needs to reach it (TLS, SASL).
    client_properties: Vec<(String, String)>,
}

/// How [`Broker::start_secured`] protects the broker.
pub struct Security<'a> {
    /// Serve TLS with these certificates, client certificate required.
    pub tls: Option<&'a TestPki>,
    /// Require SASL/SCRAM-SHA-512 as this user with this password.
    pub scram_user: Option<(&'a str, &'a str)>,
    /// Topics to create while the broker still takes unauthenticated
    /// requests (tansu's command line cannot authenticate).
    pub topics: &'a [(&'a str, u32)],
}

impl Broker {
    /// One in-memory broker shared by the tests of a test binary; each test
    /// uses its own topics.
    pub async fn shared() -> &'static Broker {
        static SHARED: OnceCell<Broker> = OnceCell::const_new();
        SHARED.get_or_init(|| Broker::start(false)).await
    }

    /// A dedicated broker; `persistent` keeps its data in SQLite so that it
    /// survives a restart.
    pub async fn start(persistent: bool) -> Broker {
        let port = free_port();
        let mut broker = Broker {
            port,
            dir: crate::scratch_dir("tansu"),
            child: None,
            persistent,
            advertised: port,
            front: None,
            authentication: false,
            client_properties: Vec::new(),
        };
        broker.launch().await;
        broker
    }

    /// A dedicated broker reached through TLS, SASL/SCRAM or both, as
    /// `security` says. Users and topics are made first, then the broker is
    /// restarted on the same storage with authentication required.
    pub async fn start_secured(security: Security<'_>) -> Broker {
        let mut broker = Broker::start(true).await;
        let mut protocol = "plaintext";
        if let Some(pki) = security.tls {
            let front = TlsFront::start(pki, broker.port);
            broker.advertised = front.port;
            broker.front = Some(front);
            protocol = "ssl";
            for (key, path) in [
                ("ssl.ca.location", pki.ca()),
                ("ssl.certificate.location", pki.client_cert()),
                ("ssl.key.location", pki.client_key()),
            ] {
                broker
                    .client_properties
                    .push((key.into(), path.display().to_string()));
            }
        }
        for (topic, partitions) in security.topics {
            broker.create_topic(topic, *partitions);
        }
        if let Some((user, password)) = security.scram_user {
            broker.tansu_command(&["user", "create", user, password, "--mechanism", "scram512"]);
            broker.authentication = true;
            protocol = if protocol == "ssl" {
                "sasl_ssl"
            } else {
                "sasl_plaintext"
            };
            for (key, value) in [
                ("sasl.mechanism", "SCRAM-SHA-512"),
                ("sasl.username", user),
                ("sasl.password", password),
            ] {
                broker.client_properties.push((key.into(), value.into()));
            }
        }
        broker
            .client_properties
            .push(("security.protocol".into(), protocol.into()));
        // The advertised listener and authentication take effect on restart.
        broker.restart().await;
        broker
    }

    /// The librdkafka properties a client needs to reach this broker.
    pub fn client_properties(&self) -> &[(String, String)] {
        &self.client_properties
    }

    async fn launch(&mut self) {
        let listener = format!("tcp://127.0.0.1:{}", self.port);
        let advertised = format!("tcp://127.0.0.1:{}", self.advertised);
        let storage = if self.persistent {
            // Resolved against the working directory, set below.
            "sqlite://tansu.db".to_string()
        } else {
            "memory://tansu/".to_string()
        };
        let log = std::fs::File::create(self.dir.path().join("broker.log")).unwrap();
        let mut command = Command::new(tansu_binary());
        command
            .arg("broker")
            .args(["--kafka-listener-url", &listener])
            .args(["--kafka-advertised-listener-url", &advertised])
            .args(["--storage-engine", &storage])
            .current_dir(self.dir.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log);
        if self.authentication {
            command.arg("--authentication");
        }
        self.child = Some(process::spawn(command).expect("tansu starts"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let log =
                    std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default();
                panic!("tansu exited with {status}:\n{log}");
            }
            assert!(Instant::now() < deadline, "tansu did not listen in 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.advertised)
    }

    /// Stops the broker process (SIGKILL: as abrupt as a lost machine).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub async fn restart(&mut self) {
        self.stop();
        self.launch().await;
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the broker: it keeps its
    /// connections but answers nothing, so nothing gets acked meanwhile.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.child.as_ref().expect("running").id();
        process::signal(pid, if frozen { libc::SIGSTOP } else { libc::SIGCONT });
    }

    /// Creates `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        self.create_topic_with(topic, partitions, &[]);
    }

    /// [`Self::create_topic`] with topic configs (`cleanup.policy=delete`).
    pub fn create_topic_with(&self, topic: &str, partitions: u32, configs: &[&str]) {
        let partitions = partitions.to_string();
        let mut args = vec!["topic", "create", topic, "--partitions", &partitions];
        for config in configs {
            args.extend(["--config", config]);
        }
        self.tansu_command(&args);
    }

    /// Deletes `topic` with its records.
    pub fn delete_topic(&self, topic: &str) {
        self.tansu_command(&["topic", "delete", topic]);
    }

    /// Writes `count` small messages to `topic`, spread over `partitions`
    /// partitions, stamped `timestamp_ms` (CreateTime): history the table
    /// tools must not read. Keys and values are `old-N`; no headers, as
    /// another producer's; in record batches of at most 100.
    pub fn fill(&self, topic: &str, partitions: i32, count: usize, timestamp_ms: i64) {
        self.fill_compressed(topic, partitions, count, timestamp_ms, "none");
    }

    /// [`Self::fill`], the batches compressed with `codec` (librdkafka's
    /// `compression.type`).
    pub fn fill_compressed(
        &self,
        topic: &str,
        partitions: i32,
        count: usize,
        timestamp_ms: i64,
        codec: &str,
    ) {
        use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.bootstrap())
            .set("compression.type", codec)
            .set("linger.ms", "20")
            .set("batch.num.messages", "100")
            .set("queue.buffering.max.messages", "1000000");
        for (k, v) in &self.client_properties {
            config.set(k, v);
        }
        let producer: ThreadedProducer<DefaultProducerContext> = config.create().expect("producer");
        for n in 0..count {
            let key = format!("old-{n}");
            let mut record = BaseRecord::to(topic)
                .partition(n as i32 % partitions)
                .key(&key)
                .payload(&key)
                .timestamp(timestamp_ms);
            // A full queue waits for deliveries.
            while let Err((e, back)) = producer.send(record) {
                use rdkafka::error::{KafkaError, RDKafkaErrorCode};
                assert!(
                    matches!(
                        e,
                        KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)
                    ),
                    "queued: {e}"
                );
                std::thread::sleep(Duration::from_millis(10));
                record = back;
            }
        }
        producer.flush(Duration::from_secs(120)).expect("flushed");
    }

    /// Runs tansu's command line against the broker's own listener.
    fn tansu_command(&self, args: &[&str]) {
        assert!(
            !self.authentication,
            "tansu's command line cannot authenticate"
        );
        let output = Command::new(tansu_binary())
            .args(args)
            .args(["--broker", &format!("tcp://127.0.0.1:{}", self.port)])
            .output()
            .expect("tansu's command line runs");
        assert!(
            output.status.success(),
            "tansu {}: {}",
            args[..2].join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Reads `topic` from the beginning with a fresh group until `expected`
    /// records arrived, then `settle` longer to catch any extra (duplicate)
    /// records. Panics if `expected` are not there within `timeout`.
    pub fn consume(
        &self,
        topic: &str,
        expected: usize,
        timeout: Duration,
        settle: Duration,
    ) -> Vec<Record> {
        self.consume_until(topic, Goal::Records(expected), timeout, settle)
    }

    /// Like [`Broker::consume`], until every id of `ids` was seen as a key
    /// (however many duplicates arrive meanwhile).
    pub fn consume_covering(
        &self,
        topic: &str,
        ids: &HashSet<String>,
        timeout: Duration,
        settle: Duration,
    ) -> Vec<Record> {
        let missing = ids.iter().map(String::as_str).collect();
        self.consume_until(topic, Goal::Keys(missing), timeout, settle)
    }

    fn consume_until(
        &self,
        topic: &str,
        mut goal: Goal<'_>,
        timeout: Duration,
        settle: Duration,
    ) -> Vec<Record> {
        let mut config = ClientConfig::new();
        for (key, value) in &self.client_properties {
            config.set(key, value);
        }
        let consumer: BaseConsumer = config
            .set("bootstrap.servers", self.bootstrap())
            .set("group.id", crate::unique("verify"))
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "50")
            .create()
            .expect("consumer");
        consumer.subscribe(&[topic]).expect("subscribe");
        let mut records = Vec::new();
        let deadline = Instant::now() + timeout;
        let mut settle_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if settle_until.is_none() && goal.reached(records.len()) {
                settle_until = Some(now + settle);
            }
            if settle_until.is_some_and(|t| now >= t) {
                break;
            }
            if now >= deadline {
                panic!(
                    "only {} records arrived on {topic} within {timeout:?}, not all that were \
                     expected ({})",
                    records.len(),
                    goal.shortfall(records.len())
                );
            }
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(message)) => {
                    let record = Record::from(&message);
                    goal.saw(&record);
                    records.push(record);
                }
                Some(Err(e)) => eprintln!("consumer: {e}"),
                None => {}
            }
        }
        records
    }
}

/// When a read of a topic has what it waited for. Each record is looked at
/// once, when it arrives: a wait for tens of thousands of records must not
/// rescan the ones before it.
enum Goal<'a> {
    /// At least this many records.
    Records(usize),
    /// A record keyed by each of these (the keys not seen yet).
    Keys(HashSet<&'a str>),
}

impl Goal<'_> {
    fn saw(&mut self, record: &Record) {
        if let Goal::Keys(missing) = self {
            if let Ok(key) = std::str::from_utf8(&record.key) {
                missing.remove(key);
            }
        }
    }

    fn reached(&self, received: usize) -> bool {
        match self {
            Goal::Records(expected) => received >= *expected,
            Goal::Keys(missing) => missing.is_empty(),
        }
    }

    fn shortfall(&self, received: usize) -> String {
        match self {
            Goal::Records(expected) => format!("{expected} expected"),
            Goal::Keys(missing) => format!(
                "{} keys still missing after {received} records",
                missing.len()
            ),
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One record as a consumer saw it.
#[derive(Debug, Clone)]
pub struct Record {
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub headers: HashMap<String, String>,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp, milliseconds since the epoch.
    pub timestamp: Option<i64>,
    /// It has no value at all (not an empty one).
    pub tombstone: bool,
}

impl Record {
    pub fn key_str(&self) -> &str {
        std::str::from_utf8(&self.key).expect("UTF-8 key")
    }

    /// The binlog coordinates the record's headers carry, in either form.
    pub fn coordinates(&self) -> outbox_core::headers::BinlogCoordinates<'_> {
        outbox_core::headers::BinlogCoordinates::read(|name| {
            self.headers.get(name).map(String::as_str)
        })
        .unwrap_or_else(|| panic!("no binlog coordinates in {:?}", self.headers))
    }

    /// The binlog position of the rows event that carried the record's row.
    pub fn binlog_position(&self) -> outbox_core::BinlogPosition {
        self.coordinates()
            .position
            .parse()
            .expect("a binlog position")
    }
}

impl<M: Message> From<&M> for Record {
    fn from(message: &M) -> Self {
        let headers = message
            .headers()
            .map(|h| outbox_sink::header_pairs(h).into_iter().collect())
            .unwrap_or_default();
        Record {
            key: message.key().unwrap_or_default().to_vec(),
            payload: message.payload().unwrap_or_default().to_vec(),
            headers,
            partition: message.partition(),
            offset: message.offset(),
            timestamp: message.timestamp().to_millis(),
            tombstone: message.payload().is_none(),
        }
    }
}
