//! The inbox consumer on real servers: MariaDB from the harness, the real
//! `tansu` broker, the `notification-planner` binary as its own process
//! where a crash is needed, and the forwarder for the end-to-end run.
//!
//! Every test first proves its fault happened (a redelivery was received,
//! an attempt failed, a duplicate was met) and then checks the counts.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use harness::inbox::{
    committed_offset, committed_offset_at, produce, produce_to, ConsumerProcess, OutgoingRecord,
};
use harness::workload::{forwarder_config, server_id, write_order, Written, SETTLE};
use harness::{unique, Broker, DbServer, Flavor, ForwarderSetup, TIMEOUT};
use mysql_async::prelude::Queryable;
use mysql_async::{Pool, Transaction};
use outbox_inbox::planner::NotificationPlanner;
use outbox_inbox::{
    ApplyResult, BatchFailure, Handler, HandlerError, Inbox, InboxConfig, InboxConsumer,
    InboxEvent, InboxOutcome, InboxSection, KafkaSection, MessageLocation, MysqlSection,
    ProcessError, Receipt, ReceiptStatus, RetrySection, VersionedAggregate,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::ClientConfig;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

mod crashes;
mod duplicates;
mod failures;
mod handlers;
mod ordering;
mod signing;
mod tls;
mod traces;

use duplicates::batches_of;
use handlers::*;

const PLANNER: &str = "notification-planner";

fn db_url(db: &DbServer, schema: &str) -> String {
    format!("mysql://root@127.0.0.1:{}/{schema}", db.port)
}

/// Short intervals so tests run fast; `max_attempts` and the backoff are
/// the test's.
struct Setup {
    topic: String,
    group: String,
    dead_letter: String,
    max_attempts: u32,
    backoff_ms: (u64, u64),
    commit_interval_ms: u64,
}

impl Setup {
    fn new(broker: &Broker, partitions: u32) -> Self {
        let setup = Setup {
            topic: unique("events"),
            group: unique("group"),
            dead_letter: unique("parked"),
            max_attempts: 3,
            backoff_ms: (100, 400),
            commit_interval_ms: 100,
        };
        broker.create_topic(&setup.topic, partitions);
        broker.create_topic(&setup.dead_letter, 1);
        setup
    }

    fn config(&self, db: &DbServer, broker: &Broker, schema: &str) -> InboxConfig {
        self.config_at(db, broker.bootstrap(), schema)
    }

    /// [`Setup::config`] for the brokers at `bootstrap`.
    fn config_at(&self, db: &DbServer, bootstrap: String, schema: &str) -> InboxConfig {
        InboxConfig {
            mysql: MysqlSection::new(db_url(db, schema)),
            kafka: KafkaSection {
                brokers: bootstrap,
                group_id: self.group.clone(),
                topics: vec![self.topic.clone()],
                dead_letter_topic: self.dead_letter.clone(),
                commit_interval_ms: self.commit_interval_ms,
                properties: [("fetch.wait.max.ms", "50"), ("session.timeout.ms", "6000")]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                oauth_token_command: None,
                oauth_token_env: Vec::new(),
                aws_msk_iam: None,
                signing_key_env: None,
                signing_key_file: None,
            },
            inbox: InboxSection::new(PLANNER),
            retry: RetrySection {
                max_attempts: self.max_attempts,
                initial_backoff_ms: self.backoff_ms.0,
                max_backoff_ms: self.backoff_ms.1,
            },
            metrics: Default::default(),
        }
    }

    /// The same settings as the planner's TOML file.
    fn toml(&self, db: &DbServer, broker: &Broker, schema: &str) -> String {
        format!(
            r#"
[mysql]
url = "{url}"
[kafka]
brokers = "{brokers}"
group_id = "{group}"
topics = ["{topic}"]
dead_letter_topic = "{dead_letter}"
commit_interval_ms = {commit}
[kafka.properties]
"fetch.wait.max.ms" = "50"
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[inbox]
consumer_name = "{PLANNER}"
[retry]
max_attempts = {attempts}
initial_backoff_ms = {b0}
max_backoff_ms = {b1}
"#,
            url = db_url(db, schema),
            brokers = broker.bootstrap(),
            group = self.group,
            topic = self.topic,
            dead_letter = self.dead_letter,
            commit = self.commit_interval_ms,
            attempts = self.max_attempts,
            b0 = self.backoff_ms.0,
            b1 = self.backoff_ms.1,
        )
    }
}

/// An in-process consumer and the receipts of its attempts.
struct Running {
    receipts: mpsc::UnboundedReceiver<Receipt>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    seen: Vec<Receipt>,
}

fn start<H: Handler + 'static>(config: InboxConfig, handler: H) -> Running {
    start_traced(config, handler, tracing::Dispatch::none())
}

/// [`start`], its spans and events going to `dispatch` (the consumer runs
/// as one task, so everything it does).
fn start_traced<H: Handler + 'static>(
    config: InboxConfig,
    handler: H,
    dispatch: tracing::Dispatch,
) -> Running {
    use tracing::instrument::WithSubscriber;

    let (tx, receipts) = mpsc::unbounded_channel();
    let (stop, shutdown) = watch::channel(false);
    let consumer = InboxConsumer::new(config)
        .expect("valid config")
        .with_receipts(tx);
    let run = async move {
        consumer
            .run(handler, shutdown)
            .await
            .expect("consumer runs");
    };
    let task = tokio::spawn(run.with_subscriber(dispatch));
    Running {
        receipts,
        stop,
        task,
        seen: Vec::new(),
    }
}

impl Running {
    /// Reads receipts until `done` holds for all seen so far.
    async fn until(&mut self, what: &str, done: impl Fn(&[Receipt]) -> bool) {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        while !done(&self.seen) {
            match tokio::time::timeout_at(deadline, self.receipts.recv()).await {
                Ok(Some(receipt)) => self.seen.push(receipt),
                Ok(None) => panic!("consumer stopped before {what}: {:#?}", self.seen),
                Err(_) => panic!("no {what} within {TIMEOUT:?}: {:#?}", self.seen),
            }
        }
    }

    /// Clean shutdown: the consumer commits what it settled and returns.
    async fn stop(self) -> Vec<Receipt> {
        let _ = self.stop.send(true);
        tokio::time::timeout(TIMEOUT, self.task)
            .await
            .expect("consumer stops in time")
            .expect("consumer task did not panic");
        self.seen
    }
}

fn for_event<'a>(receipts: &'a [Receipt], id: &str) -> Vec<&'a Receipt> {
    receipts
        .iter()
        .filter(|r| r.event_id.as_deref() == Some(id))
        .collect()
}

fn settled(receipts: &[Receipt], id: &str, outcome: InboxOutcome) -> usize {
    for_event(receipts, id)
        .iter()
        .filter(|r| r.status == ReceiptStatus::Settled(outcome))
        .count()
}

/// `notification-planner` processes sharing one configuration file.
struct Planners {
    dir: tempfile::TempDir,
}

impl Planners {
    /// Writes `toml` as the configuration.
    fn new(toml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("planner.toml"), toml).unwrap();
        Planners { dir }
    }

    /// Starts one, logging at `rust_log` to `<name>.log`.
    fn spawn(&self, name: &str, rust_log: &str) -> ConsumerProcess {
        ConsumerProcess::spawn(
            &PathBuf::from(env!("CARGO_BIN_EXE_notification-planner")),
            &self.dir.path().join("planner.toml"),
            &self.dir.path().join(format!("{name}.log")),
            rust_log,
        )
    }
}

/// The forwarder (its own process, streaming) and `notification-planner`
/// (logging `outbox_inbox` at debug) on a schema of their own, on the
/// shared MariaDB and broker.
struct EndToEnd {
    pool: Pool,
    setup: Setup,
    forwarder: ForwarderSetup,
    process: harness::ForwarderProcess,
    /// Holds the planner's configuration and log.
    _planners: Planners,
    planner: ConsumerProcess,
}

/// The forwarder (its own process, streaming) on a schema of its own, to
/// the consumer's topic.
struct Forwarding {
    schema: String,
    pool: Pool,
    setup: Setup,
    forwarder: ForwarderSetup,
    process: harness::ForwarderProcess,
}

impl Forwarding {
    async fn start(db: &DbServer, broker: &Broker, partitions: u32) -> Self {
        let (schema, pool) = schema(db).await;
        let setup = Setup::new(broker, partitions);
        let forwarder = ForwarderSetup::new(&forwarder_config(
            db,
            broker,
            &schema,
            &setup.topic,
            server_id(),
        ));
        let mut process = forwarder.spawn(&[]);
        process.wait_for_log("binlog stream started", TIMEOUT).await;
        Forwarding {
            schema,
            pool,
            setup,
            forwarder,
            process,
        }
    }
}

impl EndToEnd {
    async fn start(db: &DbServer, broker: &Broker, partitions: u32) -> Self {
        Self::start_with(db, broker, partitions, "").await
    }

    /// [`EndToEnd::start`], `sections` added to the planner's configuration.
    async fn start_with(db: &DbServer, broker: &Broker, partitions: u32, sections: &str) -> Self {
        let Forwarding {
            schema,
            pool,
            setup,
            forwarder,
            process,
        } = Forwarding::start(db, broker, partitions).await;
        let planners = Planners::new(&(setup.toml(db, broker, &schema) + sections));
        let planner = planners.spawn("planner", "info,outbox_inbox=debug");
        EndToEnd {
            pool,
            setup,
            forwarder,
            process,
            _planners: planners,
            planner,
        }
    }
}

/// Whether every one of `ids` has a settled receipt.
fn all_settled(ids: &[String]) -> impl Fn(&[Receipt]) -> bool + '_ {
    move |receipts| {
        ids.iter().all(|id| {
            for_event(receipts, id)
                .iter()
                .any(|r| matches!(r.status, ReceiptStatus::Settled(_)))
        })
    }
}

/// `events` notification jobs, one per event, and `events` inbox rows.
async fn assert_one_job_per_event(pool: &Pool, events: u64) {
    assert_eq!(
        count(pool, "SELECT COUNT(*) FROM notification_job").await,
        events
    );
    assert_eq!(
        count(
            pool,
            "SELECT COUNT(DISTINCT event_id) FROM notification_job"
        )
        .await,
        events
    );
    assert_eq!(
        count(pool, "SELECT COUNT(*) FROM consumed_event").await,
        events
    );
}

async fn count(pool: &Pool, sql: &str) -> u64 {
    let mut conn = tokio::time::timeout(TIMEOUT, pool.get_conn())
        .await
        .expect("connect in time")
        .expect("connect");
    conn.query_first(sql)
        .await
        .expect("count query")
        .expect("one row")
}

fn order_event(id: &str, order_id: i64) -> OutgoingRecord {
    OutgoingRecord::event(
        id,
        "ORDER_ACCEPTED",
        "order",
        &order_id.to_string(),
        1,
        &format!(r#"{{"order_id":{order_id}}}"#),
    )
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn schema(db: &DbServer) -> (String, Pool) {
    let schema = unique("inbox");
    let conn = db.create_schema(&schema).await;
    drop(conn.disconnect().await);
    let pool = Pool::new(db_url(db, &schema).as_str());
    (schema, pool)
}
