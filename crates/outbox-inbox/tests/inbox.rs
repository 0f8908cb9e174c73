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
use harness::{unique, Broker, ForwarderSetup, MariaDb, TIMEOUT};
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

const PLANNER: &str = "notification-planner";

fn db_url(db: &MariaDb, schema: &str) -> String {
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

    fn config(&self, db: &MariaDb, broker: &Broker, schema: &str) -> InboxConfig {
        self.config_at(db, broker.bootstrap(), schema)
    }

    /// [`Setup::config`] for the brokers at `bootstrap`.
    fn config_at(&self, db: &MariaDb, bootstrap: String, schema: &str) -> InboxConfig {
        InboxConfig {
            mysql: MysqlSection {
                url: db_url(db, schema),
                max_connections: 4,
            },
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
            },
            inbox: InboxSection::new(PLANNER),
            retry: RetrySection {
                max_attempts: self.max_attempts,
                initial_backoff_ms: self.backoff_ms.0,
                max_backoff_ms: self.backoff_ms.1,
            },
        }
    }

    /// The same settings as the planner's TOML file.
    fn toml(&self, db: &MariaDb, broker: &Broker, schema: &str) -> String {
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
    let (tx, receipts) = mpsc::unbounded_channel();
    let (stop, shutdown) = watch::channel(false);
    let consumer = InboxConsumer::new(config)
        .expect("valid config")
        .with_receipts(tx);
    let task = tokio::spawn(async move {
        consumer
            .run(handler, shutdown)
            .await
            .expect("consumer runs");
    });
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

async fn schema(db: &MariaDb) -> (String, Pool) {
    let schema = unique("inbox");
    let conn = db.create_schema(&schema).await;
    drop(conn.disconnect().await);
    let pool = Pool::new(db_url(db, &schema).as_str());
    (schema, pool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivery_after_a_crash_between_db_commit_and_offset_commit_is_skipped_by_the_inbox() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let mut setup = Setup::new(broker, 1);
    // No periodic commit before the kill: the crash lands after the DB
    // commit and before the offset commit.
    setup.commit_interval_ms = 600_000;
    let planners = Planners::new(&setup.toml(db, broker, &schema));

    let event = new_id();
    let offsets = produce(broker, &setup.topic, 0, &[order_event(&event, 42)]).await;
    assert_eq!(offsets, [0]);

    let mut first = planners.spawn("first", "info,outbox_inbox=debug");
    first
        .wait_for_lines(&["event processed", &event], 1, TIMEOUT)
        .await;
    first.kill9();

    assert_eq!(
        count(
            &pool,
            &format!("SELECT COUNT(*) FROM notification_job WHERE event_id = '{event}'")
        )
        .await,
        1
    );
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 1);
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        None,
        "the crash came before any offset commit"
    );

    let mut second = planners.spawn("second", "info,outbox_inbox=debug");
    // The fault: the same event arrives again, at the same offset.
    second
        .wait_for_lines(&["duplicate event skipped", &event, "@0"], 1, TIMEOUT)
        .await;
    assert_eq!(
        second.count_lines(&["event processed"]),
        0,
        "{}",
        second.log()
    );
    assert_eq!(
        count(
            &pool,
            &format!("SELECT COUNT(*) FROM notification_job WHERE event_id = '{event}'")
        )
        .await,
        1,
        "no second job"
    );
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 1);
    let status = second.terminate();
    assert!(status.success(), "clean exit: {status}\n{}", second.log());
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        Some(1),
        "the clean shutdown commits past the settled duplicate"
    );
}

/// The planner, slowed down inside its transaction so that a second
/// consumer's inbox insert meets the first one's uncommitted row.
struct SlowPlanner;

impl Handler for SlowPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        NotificationPlanner.handle(tx, event).await?;
        tokio::time::sleep(Duration::from_millis(150)).await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_racing_on_the_same_events_create_exactly_one_job_per_event() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let setup = Setup::new(broker, 1);
    // Two groups: each gets every event, the double delivery is certain.
    let mut one = start(setup.config(db, broker, &schema), SlowPlanner);
    let mut other_config = setup.config(db, broker, &schema);
    other_config.kafka.group_id = unique("rival");
    let mut two = start(other_config, SlowPlanner);

    let events: Vec<String> = (0..10).map(|_| new_id()).collect();
    let records: Vec<OutgoingRecord> = events
        .iter()
        .enumerate()
        .map(|(i, id)| order_event(id, 100 + i as i64))
        .collect();
    produce(broker, &setup.topic, 0, &records).await;

    one.until(
        "every event settled by the first consumer",
        all_settled(&events),
    )
    .await;
    two.until(
        "every event settled by the second consumer",
        all_settled(&events),
    )
    .await;
    let mut receipts = one.stop().await;
    receipts.extend(two.stop().await);

    for id in &events {
        assert_eq!(
            for_event(&receipts, id).len(),
            2,
            "both consumers received {id}: {receipts:#?}"
        );
        assert_eq!(settled(&receipts, id, InboxOutcome::Processed), 1, "{id}");
        assert_eq!(settled(&receipts, id, InboxOutcome::Duplicate), 1, "{id}");
    }
    assert_one_job_per_event(&pool, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_target_integrity_error_is_not_a_duplicate_and_its_offset_is_not_committed() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    {
        // Another unique key, only in this test's schema, already holding
        // order 7 (written by some other path, without an inbox row).
        let mut conn = pool.get_conn().await.unwrap();
        conn.query_drop(
            "CREATE UNIQUE INDEX uq_notification_job_order ON notification_job (order_id)",
        )
        .await
        .unwrap();
        conn.query_drop(
            "INSERT INTO notification_job (event_id, order_id, source_version) VALUES ('legacy', 7, 1)",
        )
        .await
        .unwrap();
    }
    let mut setup = Setup::new(broker, 1);
    setup.max_attempts = 1_000;
    let (before, conflicting, behind) = (new_id(), new_id(), new_id());
    let offsets = produce(
        broker,
        &setup.topic,
        0,
        &[
            order_event(&before, 6),
            order_event(&conflicting, 7),
            order_event(&behind, 8),
        ],
    )
    .await;
    assert_eq!(offsets, [0, 1, 2]);

    let mut consumer = start(setup.config(db, broker, &schema), NotificationPlanner);
    consumer
        .until("three failed attempts at the conflicting event", |r| {
            for_event(r, &conflicting).len() >= 3
        })
        .await;
    // Longer than the commit interval: whatever was going to be committed was.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let receipts = consumer.stop().await;

    for receipt in for_event(&receipts, &conflicting) {
        match &receipt.status {
            ReceiptStatus::Failed { error, counted, .. } => {
                assert!(
                    error.contains("1062") && error.contains("uq_notification_job_order"),
                    "{error}"
                );
                assert!(counted, "an integrity error concerns the event");
            }
            other => panic!("the conflicting event must only fail, got {other:?}"),
        }
    }
    assert_eq!(settled(&receipts, &before, InboxOutcome::Processed), 1);
    assert!(
        for_event(&receipts, &behind).is_empty(),
        "a message behind the failing one must wait: {receipts:#?}"
    );
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 1);
    assert_eq!(
        count(
            &pool,
            &format!("SELECT COUNT(*) FROM consumed_event WHERE event_id = '{conflicting}'")
        )
        .await,
        0,
        "no inbox row for the failed event"
    );
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        2
    );
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        Some(offsets[1]),
        "committed up to the failing message, not past it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_inbox_key_is_a_duplicate_on_real_mariadb_errors() {
    let db = MariaDb::shared().await;
    let (schema, pool) = schema(db).await;
    let mut conn = pool.get_conn().await.unwrap();
    conn.query_drop("CREATE UNIQUE INDEX uq_notification_job_order ON notification_job (order_id)")
        .await
        .unwrap();
    let insert_twice = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            let mut conn = pool.get_conn().await.unwrap();
            conn.query_drop(sql).await.unwrap();
            match conn.query_drop(sql).await {
                Err(mysql_async::Error::Server(e)) => e,
                other => panic!("expected a server error, got {other:?}"),
            }
        }
    };
    let inbox_dup =
        insert_twice("INSERT INTO consumed_event (consumer_name, event_id) VALUES ('c', 'e')")
            .await;
    assert_eq!(inbox_dup.code, 1062);
    assert!(
        outbox_inbox::is_inbox_duplicate(&inbox_dup),
        "{}",
        inbox_dup.message
    );
    let other_dup = insert_twice(
        "INSERT INTO notification_job (event_id, order_id, source_version) VALUES ('x', 1, 1)",
    )
    .await;
    assert_eq!(other_dup.code, 1062);
    assert!(
        !outbox_inbox::is_inbox_duplicate(&other_dup),
        "{}",
        other_dup.message
    );

    // An event id longer than the column: strict sessions make it an error,
    // and the error is a failed claim, not a duplicate.
    let opts = Inbox::pool_options(&db_url(db, &schema), 2).unwrap();
    let inbox = Inbox::new(Pool::new(opts), PLANNER);
    let event = InboxEvent {
        event_id: "x".repeat(100),
        event_type: Some("ORDER_ACCEPTED".into()),
        aggregate_type: Some("order".into()),
        aggregate_id: Some("9".into()),
        event_version: Some(1),
        payload: serde_json::json!({"order_id": 9}),
        headers: BTreeMap::new(),
        location: MessageLocation {
            topic: "t".into(),
            partition: 0,
            offset: 0,
        },
    };
    match inbox.process(&NotificationPlanner, &event).await {
        Err(ProcessError::Claim { code, .. }) => assert_eq!(code, 1406),
        other => panic!("expected a failed claim (1406), got {other:?}"),
    }
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM consumed_event WHERE consumer_name = 'notification-planner'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM notification_job WHERE order_id = 9"
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_keeps_failing_is_parked_with_its_error_and_the_partition_goes_on() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let mut setup = Setup::new(broker, 1);
    setup.max_attempts = 2;
    let too_long = "y".repeat(80);
    let after = new_id();
    produce(
        broker,
        &setup.topic,
        0,
        &[order_event(&too_long, 1), order_event(&after, 2)],
    )
    .await;
    let mut consumer = start(setup.config(db, broker, &schema), NotificationPlanner);
    consumer
        .until("the event behind the parked one processed", |r| {
            settled(r, &after, InboxOutcome::Processed) == 1
        })
        .await;
    let receipts = consumer.stop().await;

    let attempts = for_event(&receipts, &too_long);
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    assert!(matches!(
        attempts[0].status,
        ReceiptStatus::Failed { counted: true, .. }
    ));
    match &attempts[1].status {
        ReceiptStatus::Parked { error } => assert!(error.contains("1406"), "{error}"),
        other => panic!("expected parked, got {other:?}"),
    }
    let parked = broker.consume(&setup.dead_letter, 1, TIMEOUT, Duration::from_millis(500));
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].key_str(), too_long);
    assert_eq!(parked[0].headers["event_id"], too_long);
    assert_eq!(parked[0].headers["inbox_attempts"], "2");
    assert_eq!(parked[0].headers["inbox_consumer"], PLANNER);
    assert_eq!(
        parked[0].headers["inbox_source"],
        format!("{}/0@0", setup.topic)
    );
    assert!(parked[0].headers["inbox_error"].contains("1406"));
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 1);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        1
    );
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        Some(2)
    );
}

/// The planner, failing its first attempt at one event after writing the
/// job, to show that the rollback takes the job and the inbox row along.
struct FlakyPlanner {
    fail_event: String,
    calls: Arc<AtomicUsize>,
}

impl Handler for FlakyPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        NotificationPlanner.handle(tx, event).await?;
        if event.event_id == self.fail_event && self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(HandlerError::retry("notification service unavailable"));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failure_leaves_no_inbox_row_and_the_event_is_processed_on_retry() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let mut setup = Setup::new(broker, 1);
    // Long enough to look at the database between the two attempts.
    setup.backoff_ms = (3_000, 3_000);
    let event = new_id();
    produce(broker, &setup.topic, 0, &[order_event(&event, 5)]).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = FlakyPlanner {
        fail_event: event.clone(),
        calls: calls.clone(),
    };
    let mut consumer = start(setup.config(db, broker, &schema), handler);

    consumer
        .until("the failed first attempt", |r| {
            !for_event(r, &event).is_empty()
        })
        .await;
    let first = for_event(&consumer.seen, &event)[0].clone();
    assert!(
        matches!(&first.status, ReceiptStatus::Failed { error, counted: true, .. } if error.contains("notification service unavailable")),
        "{first:?}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the handler ran and wrote a job"
    );
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 0);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        0
    );

    consumer
        .until("the retry", |r| {
            settled(r, &event, InboxOutcome::Processed) == 1
        })
        .await;
    let receipts = consumer.stop().await;
    let attempts = for_event(&receipts, &event);
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[1].attempt, 2);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 1);
    assert_eq!(
        count(
            &pool,
            &format!("SELECT COUNT(*) FROM notification_job WHERE event_id = '{event}'")
        )
        .await,
        1
    );
}

/// Applies `{"account_id", "amount"}` events to `account` by version.
struct BalanceProjection {
    accounts: VersionedAggregate,
    results: Arc<std::sync::Mutex<Vec<(String, ApplyResult)>>>,
}

impl BalanceProjection {
    fn new() -> Self {
        BalanceProjection {
            accounts: VersionedAggregate::new("account", "account_id", "version").unwrap(),
            results: Arc::default(),
        }
    }
}

impl Handler for BalanceProjection {
    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        let account = event.payload["account_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let amount = event.payload["amount"].as_i64().unwrap_or_default();
        let version = event
            .event_version
            .ok_or_else(|| HandlerError::reject("no event_version"))?;
        let result = self
            .accounts
            .apply(
                tx,
                account,
                version,
                "balance = balance + ?",
                vec![amount.into()],
            )
            .await?;
        self.results
            .lock()
            .unwrap()
            .push((event.event_id.clone(), result));
        match result {
            ApplyResult::Applied | ApplyResult::Duplicate => Ok(()),
            ApplyResult::Gap { current } => Err(HandlerError::retry(format!(
                "version gap: account at {current}, event brings {version}"
            ))),
            ApplyResult::Stale { current } => Err(HandlerError::reject(format!(
                "stale: account at {current}, event brings {version}"
            ))),
            ApplyResult::Missing => Err(HandlerError::reject("no such account")),
        }
    }
}

fn account_event(id: &str, version: i64, amount: i64) -> InboxEvent {
    InboxEvent {
        event_id: id.into(),
        event_type: Some("BALANCE_CHANGED".into()),
        aggregate_type: Some("account".into()),
        aggregate_id: Some("order-42".into()),
        event_version: Some(version),
        payload: serde_json::json!({"account_id": "order-42", "amount": amount}),
        headers: BTreeMap::new(),
        location: MessageLocation {
            topic: "balance".into(),
            partition: 0,
            offset: 0,
        },
    }
}

async fn account_state(pool: &Pool) -> (i64, i64, u64) {
    let mut conn = pool.get_conn().await.unwrap();
    let (balance, version): (i64, i64) = conn
        .query_first("SELECT balance, version FROM account WHERE account_id = 'order-42'")
        .await
        .unwrap()
        .unwrap();
    let inbox = count(
        pool,
        "SELECT COUNT(*) FROM consumed_event WHERE consumer_name = 'balance-v1'",
    )
    .await;
    (balance, version, inbox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioned_apply_rejects_a_gap_recovers_skips_the_duplicate_and_rejects_the_stale_copy() {
    let db = MariaDb::shared().await;
    let (schema, pool) = schema(db).await;
    pool.get_conn()
        .await
        .unwrap()
        .query_drop("INSERT INTO account (account_id, balance, version) VALUES ('order-42', 0, 0)")
        .await
        .unwrap();
    let inbox = Inbox::new(
        Pool::new(Inbox::pool_options(&db_url(db, &schema), 2).unwrap()),
        "balance-v1",
    );
    let projection = BalanceProjection::new();

    // event-2 before event-1: a gap, rolled back with its inbox row.
    let gap = inbox
        .process(&projection, &account_event("event-2", 2, 20))
        .await;
    assert!(
        matches!(&gap, Err(ProcessError::Handler { error, .. }) if error.to_string().contains("gap")),
        "{gap:?}"
    );
    assert_eq!(account_state(&pool).await, (0, 0, 0));

    let first = inbox
        .process(&projection, &account_event("event-1", 1, 10))
        .await;
    assert_eq!(first.unwrap(), InboxOutcome::Processed);
    assert_eq!(account_state(&pool).await, (10, 1, 1));

    // The gap recovers when event-2 comes again.
    let recovered = inbox
        .process(&projection, &account_event("event-2", 2, 20))
        .await;
    assert_eq!(recovered.unwrap(), InboxOutcome::Processed);
    assert_eq!(account_state(&pool).await, (30, 2, 2));

    // event-2 once more: the inbox skips it, the handler does not run.
    let runs_before = projection.results.lock().unwrap().len();
    let duplicate = inbox
        .process(&projection, &account_event("event-2", 2, 20))
        .await;
    assert_eq!(duplicate.unwrap(), InboxOutcome::Duplicate);
    assert_eq!(projection.results.lock().unwrap().len(), runs_before);

    // A new id carrying the old version 1: stale, rejected, no inbox row.
    let stale = inbox
        .process(&projection, &account_event("stale-copy", 1, 10))
        .await;
    match &stale {
        Err(e @ ProcessError::Handler { .. }) => assert!(!e.is_retryable(), "{e}"),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(account_state(&pool).await, (30, 2, 2));

    let results: Vec<(String, ApplyResult)> = projection.results.lock().unwrap().clone();
    assert_eq!(
        results,
        [
            ("event-2".to_owned(), ApplyResult::Gap { current: 0 }),
            ("event-1".to_owned(), ApplyResult::Applied),
            ("event-2".to_owned(), ApplyResult::Applied),
            ("stale-copy".to_owned(), ApplyResult::Stale { current: 2 }),
        ]
    );

    // Without the inbox: the same version again is a duplicate by version,
    // an unknown row is missing; neither changes anything.
    let mut conn = pool.get_conn().await.unwrap();
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    let accounts = VersionedAggregate::new("account", "account_id", "version").unwrap();
    let same = accounts
        .apply(
            &mut tx,
            "order-42",
            2,
            "balance = balance + ?",
            vec![20.into()],
        )
        .await
        .unwrap();
    let missing = accounts
        .apply(
            &mut tx,
            "order-43",
            1,
            "balance = balance + ?",
            vec![5.into()],
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        (same, missing),
        (ApplyResult::Duplicate, ApplyResult::Missing)
    );
    assert_eq!(account_state(&pool).await, (30, 2, 2));
}

fn balance_record(id: &str, version: i64, amount: i64) -> OutgoingRecord {
    OutgoingRecord::event(
        id,
        "BALANCE_CHANGED",
        "account",
        "order-42",
        version,
        &format!(r#"{{"account_id":"order-42","amount":{amount}}}"#),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_gap_waits_on_its_partition_while_the_predecessor_arrives_on_another() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    pool.get_conn()
        .await
        .unwrap()
        .query_drop("INSERT INTO account (account_id, balance, version) VALUES ('order-42', 0, 0)")
        .await
        .unwrap();
    let mut setup = Setup::new(broker, 2);
    setup.max_attempts = 50;
    setup.backoff_ms = (200, 200);
    let mut config = setup.config(db, broker, &schema);
    config.inbox.consumer_name = "balance-v1".into();
    // event-2 first, on partition 0; its predecessor only later, on partition 1.
    produce(broker, &setup.topic, 0, &[balance_record("event-2", 2, 20)]).await;
    let mut consumer = start(config, BalanceProjection::new());
    consumer
        .until("the gap", |r| !for_event(r, "event-2").is_empty())
        .await;
    assert!(matches!(
        for_event(&consumer.seen, "event-2")[0].status,
        ReceiptStatus::Failed { counted: true, .. }
    ));
    assert_eq!(account_state(&pool).await, (0, 0, 0));
    produce(broker, &setup.topic, 1, &[balance_record("event-1", 1, 10)]).await;
    consumer
        .until("event-2 applied after event-1", |r| {
            settled(r, "event-2", InboxOutcome::Processed) == 1
        })
        .await;
    let receipts = consumer.stop().await;
    assert_eq!(settled(&receipts, "event-1", InboxOutcome::Processed), 1);
    assert_eq!(account_state(&pool).await, (30, 2, 2));
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        Some(1)
    );
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 1),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_through_the_forwarder_killed_once_become_one_notification_job_each() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let mut conn = pool.get_conn().await.unwrap();
    let setup = Setup::new(broker, 3);
    let forwarder = ForwarderSetup::new(&forwarder_config(
        db,
        broker,
        &schema,
        &setup.topic,
        server_id(),
    ));
    let mut process = forwarder.spawn(&[]);
    process.wait_for_log("binlog stream started", TIMEOUT).await;
    let planners = Planners::new(&setup.toml(db, broker, &schema));
    let mut planner = planners.spawn("planner", "info,outbox_inbox=debug");

    let start = db.position().await;
    let mut written: Vec<Written> = Vec::new();
    for _ in 0..15 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    planner
        .wait_for_lines(&["event processed"], 15, TIMEOUT)
        .await;
    process.kill9();
    // Rewind to before the first order, so the restart certainly publishes
    // all of them again: the consumer must meet real duplicates.
    let rewind = forwarder.command(&["checkpoint", "set", &start.to_string()]);
    assert!(rewind.status.success(), "{rewind:?}");
    let mut process = forwarder.spawn(&[]);
    process.wait_for_log("binlog stream started", TIMEOUT).await;
    for _ in 0..15 {
        written.extend(write_order(&mut conn, 1, false).await);
    }

    let ids: HashSet<String> = written.iter().map(|w| w.id.clone()).collect();
    assert_eq!(ids.len(), 30);
    let records = broker.consume_covering(&setup.topic, &ids, TIMEOUT, SETTLE);
    let distinct: HashSet<&str> = records.iter().map(|r| r.key_str()).collect();
    assert_eq!(distinct.len(), 30, "every order's event reached Kafka");
    assert!(
        records.len() >= 45,
        "the replay published the first 15 again: {}",
        records.len()
    );
    let repeats = records.len() - 30;
    planner
        .wait_for_lines(&["duplicate event skipped"], repeats, TIMEOUT)
        .await;
    planner
        .wait_for_lines(&["event processed"], 30, TIMEOUT)
        .await;
    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        planner.count_lines(&["event processed"]),
        30,
        "{}",
        planner.log()
    );
    assert_eq!(planner.count_lines(&["duplicate event skipped"]), repeats);
    assert!(planner.terminate().success());
    drop(process);

    let orders: u64 = count(&pool, "SELECT COUNT(*) FROM orders").await;
    assert_eq!(orders, 30);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        30
    );
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM consumed_event").await,
        30
    );
    let per_order: Vec<(i64, i64)> = conn
        .query(
            "SELECT o.order_id, COUNT(j.job_id) FROM orders o \
             LEFT JOIN notification_job j ON j.order_id = o.order_id GROUP BY o.order_id",
        )
        .await
        .unwrap();
    let per_order: HashMap<i64, i64> = per_order.into_iter().collect();
    assert_eq!(per_order.len(), 30);
    assert!(
        per_order.values().all(|&jobs| jobs == 1),
        "one job per order: {per_order:?}"
    );
}

/// The planner, whose first transaction loses its connection after the
/// handler is done and before COMMIT: the consumer sees a COMMIT fail and
/// cannot know whether it committed.
struct ConnectionKillingPlanner {
    db: &'static MariaDb,
    kills: Arc<AtomicUsize>,
}

impl Handler for ConnectionKillingPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        NotificationPlanner.handle(tx, event).await?;
        if self.kills.fetch_add(1, Ordering::SeqCst) == 0 {
            let id: u64 = tx
                .query_first("SELECT CONNECTION_ID()")
                .await?
                .unwrap_or_default();
            let mut root = self.db.root().await;
            root.query_drop(format!("KILL CONNECTION {id}")).await?;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_with_unknown_outcome_is_not_acknowledged_and_the_retry_resolves_it() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let mut setup = Setup::new(broker, 1);
    setup.max_attempts = 1;
    let event = new_id();
    produce(broker, &setup.topic, 0, &[order_event(&event, 11)]).await;
    let kills = Arc::new(AtomicUsize::new(0));
    let handler = ConnectionKillingPlanner {
        db,
        kills: kills.clone(),
    };
    let mut consumer = start(setup.config(db, broker, &schema), handler);
    consumer
        .until("the event settled", |r| {
            r.iter()
                .any(|r| matches!(r.status, ReceiptStatus::Settled(_)))
        })
        .await;
    let receipts = consumer.stop().await;

    let attempts = for_event(&receipts, &event);
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    match &attempts[0].status {
        // Not counted: with max_attempts = 1 a counted failure would park it.
        ReceiptStatus::Failed { error, counted, .. } => {
            assert!(error.contains("commit outcome unknown"), "{error}");
            assert!(!counted);
        }
        other => panic!("expected the unknown commit to fail the attempt, got {other:?}"),
    }
    assert_eq!(
        attempts[1].status,
        ReceiptStatus::Settled(InboxOutcome::Processed)
    );
    assert_eq!(kills.load(Ordering::SeqCst), 2);
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 1);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        1
    );
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        Some(1)
    );
}

/// The planner, failing one event's attempts while `hold` is set.
struct HeldPlanner {
    held_event: String,
    hold: Arc<AtomicBool>,
}

impl Handler for HeldPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        if event.event_id == self.held_event && self.hold.load(Ordering::SeqCst) {
            return Err(HandlerError::retry("held by the test"));
        }
        NotificationPlanner.handle(tx, event).await
    }
}

/// Runs on librdkafka's mock cluster: tansu 0.6's group coordinator never
/// hands a partition back in a rebalance. A member joins the group for
/// another topic, so the consumer's partition is revoked and assigned to it
/// again while it waits (its head is backing off): the revoke, the
/// re-assignment and the first fetched message arrive in one `recv`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_revoked_and_assigned_again_in_one_poll_loses_no_event() {
    let db = MariaDb::shared().await;
    let (schema, pool) = schema(db).await;
    // Leaked: it must outlive the consumer's final commit even when an
    // assertion fails and the consumer task is left to stop on its own.
    let cluster = Box::leak(Box::new(MockCluster::new(1).expect("mock cluster")));
    let bootstrap = cluster.bootstrap_servers();
    let setup = Setup {
        topic: unique("events"),
        group: unique("group"),
        dead_letter: unique("parked"),
        max_attempts: 50,
        // Long enough that the consumer waits in `recv` through the rebalance.
        backoff_ms: (10_000, 10_000),
        commit_interval_ms: 10_000,
    };
    let other_topic = unique("other");
    for topic in [&setup.topic, &setup.dead_letter, &other_topic] {
        cluster.create_topic(topic, 1, 1).expect("topic");
    }
    let ids: Vec<String> = (0..6).map(|_| new_id()).collect();
    let records: Vec<OutgoingRecord> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| order_event(id, i as i64 + 1))
        .collect();
    produce_to(&bootstrap, &setup.topic, 0, &records[..5]).await;

    let hold = Arc::new(AtomicBool::new(true));
    let mut config = setup.config_at(db, bootstrap.clone(), &schema);
    config
        .kafka
        .properties
        .insert("heartbeat.interval.ms".into(), "100".into());
    let mut consumer = start(
        config,
        HeldPlanner {
            held_event: ids[0].clone(),
            hold: hold.clone(),
        },
    );
    consumer
        .until("a failed attempt at the head of the partition", |r| {
            for_event(r, &ids[0])
                .iter()
                .any(|r| matches!(r.status, ReceiptStatus::Failed { .. }))
        })
        .await;

    let newcomer = {
        let bootstrap = bootstrap.clone();
        let group = setup.group.clone();
        let other_topic = other_topic.clone();
        tokio::task::spawn_blocking(move || {
            let newcomer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("group.id", &group)
                .set("session.timeout.ms", "6000")
                .set("heartbeat.interval.ms", "100")
                .create()
                .expect("consumer");
            newcomer.subscribe(&[&other_topic]).expect("subscribe");
            let deadline = std::time::Instant::now() + TIMEOUT;
            while newcomer.assignment().expect("assignment").count() == 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the newcomer was not assigned {other_topic} within {TIMEOUT:?}"
                );
                let _ = newcomer.poll(Duration::from_millis(100));
            }
            newcomer
        })
        .await
        .expect("newcomer joined")
    };
    hold.store(false, Ordering::SeqCst);
    produce_to(&bootstrap, &setup.topic, 0, &records[5..]).await;
    consumer
        .until("every event processed", |r| {
            ids.iter()
                .all(|id| settled(r, id, InboxOutcome::Processed) == 1)
        })
        .await;
    let receipts = consumer.stop().await;
    drop(newcomer);

    // The fault happened: the partition came back as a new lane (its head's
    // attempts start again at 1, long before the 10 s backoff was over).
    let head = for_event(&receipts, &ids[0]);
    assert!(
        matches!(head[0].status, ReceiptStatus::Failed { .. }) && head[0].attempt == 1,
        "{head:#?}"
    );
    let processed = head
        .iter()
        .find(|r| r.status == ReceiptStatus::Settled(InboxOutcome::Processed))
        .expect("processed");
    assert_eq!(processed.attempt, 1, "{head:#?}");
    for id in &ids {
        assert_eq!(
            settled(&receipts, id, InboxOutcome::Processed),
            1,
            "{receipts:#?}"
        );
    }
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 6);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        6
    );
    assert_eq!(
        committed_offset_at(&bootstrap, &setup.group, &setup.topic, 0),
        Some(6)
    );
}

/// The planner with a one-second lock wait, so a locked table fails its
/// insert with 1205 quickly.
struct ImpatientPlanner;

impl Handler for ImpatientPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        tx.query_drop("SET SESSION lock_wait_timeout = 1").await?;
        NotificationPlanner.handle(tx, event).await
    }
}

/// Sends one event to a consumer with `max_attempts = 2` whose database is
/// away (the caller began the outage), waits for more failed attempts than
/// that, ends the outage with `end_outage`, and checks that every failure was
/// server error `code`, none counted, nothing parked, and the event was
/// processed once.
async fn outage_is_waited_out<H: Handler + 'static>(
    setup: &Setup,
    config: InboxConfig,
    handler: H,
    pool: &Pool,
    end_outage: impl std::future::Future<Output = ()>,
    code: &str,
) {
    assert_eq!(setup.max_attempts, 2);
    let broker = Broker::shared().await;
    let id = new_id();
    produce(broker, &setup.topic, 0, &[order_event(&id, 1)]).await;
    let mut consumer = start(config, handler);
    let failed = |r: &[Receipt]| {
        for_event(r, &id)
            .iter()
            .filter(|r| matches!(r.status, ReceiptStatus::Failed { .. }))
            .count()
    };
    consumer
        .until("more failed attempts than max_attempts", |r| failed(r) > 3)
        .await;
    end_outage.await;
    consumer
        .until("the event processed", |r| {
            settled(r, &id, InboxOutcome::Processed) == 1
        })
        .await;
    let receipts = consumer.stop().await;

    let attempts = for_event(&receipts, &id);
    for attempt in &attempts[..attempts.len() - 1] {
        match &attempt.status {
            ReceiptStatus::Failed { error, counted, .. } => {
                assert!(error.contains(code), "{error}");
                assert!(!counted, "an outage says nothing about the event");
            }
            other => panic!("expected a failed attempt, got {other:?}"),
        }
    }
    assert!(
        !receipts
            .iter()
            .any(|r| matches!(r.status, ReceiptStatus::Parked { .. })),
        "{receipts:#?}"
    );
    assert_eq!(count(pool, "SELECT COUNT(*) FROM consumed_event").await, 1);
    assert_eq!(
        count(pool, "SELECT COUNT(*) FROM notification_job").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_wait_timeout_in_the_handler_is_retried_without_counting_and_never_parks() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let mut setup = Setup::new(broker, 1);
    setup.max_attempts = 2;
    // Another session holds the job table, as a long migration would: the
    // handler's insert fails with 1205.
    let mut blocker = pool.get_conn().await.expect("connect");
    blocker
        .query_drop("LOCK TABLES notification_job WRITE")
        .await
        .expect("lock");
    let unlock = async move {
        blocker.query_drop("UNLOCK TABLES").await.expect("unlock");
    };
    let config = setup.config(db, broker, &schema);
    outage_is_waited_out(&setup, config, ImpatientPlanner, &pool, unlock, "1205").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_during_a_switchover_is_waited_out_without_parking() {
    // A server of its own, switched to read-only as a switchover does (the
    // inbox row's insert fails with 1290); the consumer's account has no
    // SUPER/READ ONLY ADMIN, as an application's should not.
    let db = MariaDb::start(&[]).await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(&db).await;
    let mut root = db.root().await;
    root.query_drop(format!(
        "CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON `{schema}`.* TO 'app'@'%'; \
         SET GLOBAL read_only = 1"
    ))
    .await
    .expect("account and read-only");
    let writable = async move {
        root.query_drop("SET GLOBAL read_only = 0")
            .await
            .expect("writable again");
    };
    let mut setup = Setup::new(broker, 1);
    setup.max_attempts = 2;
    let mut config = setup.config(&db, broker, &schema);
    config.mysql.url = format!("mysql://app:app-pw@127.0.0.1:{}/{schema}", db.port);
    outage_is_waited_out(&setup, config, NotificationPlanner, &pool, writable, "1290").await;
}

/// `config` with batches of exactly `events`: the partition waits (up to
/// 5 s) until that many have arrived, so a test knows what one batch holds.
fn batches_of(mut config: InboxConfig, events: usize) -> InboxConfig {
    config.inbox.max_batch = events;
    config.inbox.max_batch_wait_ms = 5_000;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_in_the_middle_of_a_batch_is_skipped_exactly_and_the_rest_applied_once() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let setup = Setup::new(broker, 1);
    let ids: Vec<String> = (0..6).map(|_| new_id()).collect();
    // The fault: the fourth event is already in the inbox (processed before
    // a crash, say), and arrives again inside a batch.
    let mut conn = pool.get_conn().await.unwrap();
    conn.exec_drop(
        "INSERT INTO consumed_event (consumer_name, event_id) VALUES (?, ?)",
        (PLANNER, ids[3].as_str()),
    )
    .await
    .unwrap();
    let records: Vec<OutgoingRecord> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| order_event(id, 300 + i as i64))
        .collect();
    produce(broker, &setup.topic, 0, &records).await;
    let config = batches_of(setup.config(db, broker, &schema), 6);
    let mut consumer = start(config, NotificationPlanner);
    consumer
        .until("every event settled", all_settled(&ids))
        .await;
    let receipts = consumer.stop().await;

    for (i, id) in ids.iter().enumerate() {
        let attempts = for_event(&receipts, id);
        assert_eq!(attempts.len(), 1, "{attempts:#?}");
        let expected = if i == 3 {
            InboxOutcome::Duplicate
        } else {
            InboxOutcome::Processed
        };
        assert_eq!(attempts[0].status, ReceiptStatus::Settled(expected), "{i}");
        assert_eq!(attempts[0].batch, 6, "one transaction for the six: {i}");
    }
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 6);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        5
    );
    assert_eq!(
        count(
            &pool,
            &format!(
                "SELECT COUNT(*) FROM notification_job WHERE event_id = '{}'",
                ids[3]
            )
        )
        .await,
        0,
        "no job for the duplicate"
    );
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        Some(6)
    );
}

/// The planner, whose multi-row batch fails without saying why when it
/// holds `poison`, and whose single event `poison` always fails; it counts
/// how often each event was handled.
struct PoisonedPlanner {
    poison: String,
    handled: Arc<std::sync::Mutex<HashMap<String, usize>>>,
}

impl Handler for PoisonedPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        *self
            .handled
            .lock()
            .unwrap()
            .entry(event.event_id.clone())
            .or_default() += 1;
        if event.event_id == self.poison {
            return Err(HandlerError::retry("the notification template is missing"));
        }
        NotificationPlanner.handle(tx, event).await
    }

    async fn handle_batch(
        &self,
        tx: &mut Transaction<'_>,
        events: &[&InboxEvent],
    ) -> Result<(), BatchFailure> {
        if events.iter().any(|e| e.event_id == self.poison) {
            return Err(HandlerError::retry("a row of the batch was refused").into());
        }
        NotificationPlanner.handle_batch(tx, events).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failing_one_event_of_a_batch_applies_the_others_once_and_parks_only_it() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let mut setup = Setup::new(broker, 1);
    setup.max_attempts = 2;
    let ids: Vec<String> = (0..6).map(|_| new_id()).collect();
    let records: Vec<OutgoingRecord> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| order_event(id, 400 + i as i64))
        .collect();
    produce(broker, &setup.topic, 0, &records).await;
    let handled = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let handler = PoisonedPlanner {
        poison: ids[2].clone(),
        handled: handled.clone(),
    };
    let config = batches_of(setup.config(db, broker, &schema), 6);
    let mut consumer = start(config, handler);
    consumer
        .until("every event settled or parked", |r| {
            ids.iter().all(|id| {
                for_event(r, id).iter().any(|r| {
                    matches!(
                        r.status,
                        ReceiptStatus::Settled(_) | ReceiptStatus::Parked { .. }
                    )
                })
            })
        })
        .await;
    let receipts = consumer.stop().await;

    // The fault happened: the batch failed, and the poisoned event was
    // handled alone (found one by one) and failed again before it was parked.
    let poisoned = for_event(&receipts, &ids[2]);
    assert_eq!(poisoned.len(), 2, "{poisoned:#?}");
    assert!(
        matches!(
            poisoned[0].status,
            ReceiptStatus::Failed { counted: true, .. }
        ),
        "{poisoned:#?}"
    );
    assert!(
        matches!(poisoned[1].status, ReceiptStatus::Parked { .. }),
        "{poisoned:#?}"
    );
    let before: Vec<&Receipt> = ids[..2]
        .iter()
        .flat_map(|id| for_event(&receipts, id))
        .collect();
    let after: Vec<&Receipt> = ids[3..]
        .iter()
        .flat_map(|id| for_event(&receipts, id))
        .collect();
    for (receipts, batch) in [(&before, 2), (&after, 3)] {
        for receipt in receipts.iter() {
            assert_eq!(
                receipt.status,
                ReceiptStatus::Settled(InboxOutcome::Processed),
                "{receipt:#?}"
            );
            assert_eq!(receipt.batch, batch, "{receipt:#?}");
        }
    }
    assert_eq!(before.len() + after.len(), 5, "one receipt each");
    // Handled more than once (the failed batch was rolled back and tried
    // again), applied once.
    assert!(handled.lock().unwrap()[&ids[0]] >= 2);
    for (i, id) in ids.iter().enumerate() {
        let jobs = count(
            &pool,
            &format!("SELECT COUNT(*) FROM notification_job WHERE event_id = '{id}'"),
        )
        .await;
        assert_eq!(jobs, u64::from(i != 2), "event {i}");
    }
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 5);
    let parked = broker.consume(&setup.dead_letter, 1, TIMEOUT, Duration::from_millis(500));
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].key_str(), ids[2]);
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        Some(6)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_a_batchs_db_commit_and_its_offset_commit_repeats_nothing() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let mut setup = Setup::new(broker, 1);
    // No periodic commit before the kill.
    setup.commit_interval_ms = 600_000;
    let planners = Planners::new(&setup.toml(db, broker, &schema).replace(
        &format!("consumer_name = \"{PLANNER}\"\n"),
        &format!("consumer_name = \"{PLANNER}\"\nmax_batch = 30\nmax_batch_wait_ms = 5000\n"),
    ));
    let ids: Vec<String> = (0..30).map(|_| new_id()).collect();
    let records: Vec<OutgoingRecord> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| order_event(id, 500 + i as i64))
        .collect();
    produce(broker, &setup.topic, 0, &records).await;

    let mut first = planners.spawn("first", "info");
    first
        .wait_for_lines(&["event processed", "batch=30"], 30, TIMEOUT)
        .await;
    first.kill9();
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM consumed_event").await,
        30
    );
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        None,
        "the crash came before any offset commit"
    );

    let mut second = planners.spawn("second", "info");
    // The fault: all thirty arrive again.
    second
        .wait_for_lines(&["duplicate event skipped"], 30, TIMEOUT)
        .await;
    assert_eq!(
        second.count_lines(&["event processed"]),
        0,
        "{}",
        second.log()
    );
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        30
    );
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(DISTINCT event_id) FROM notification_job"
        )
        .await,
        30
    );
    assert!(second.terminate().success(), "{}", second.log());
    assert_eq!(
        committed_offset(broker, &setup.group, &setup.topic, 0),
        Some(30)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumer_groups_racing_on_the_same_batches_apply_each_event_once() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let setup = Setup::new(broker, 1);
    let ids: Vec<String> = (0..40).map(|_| new_id()).collect();
    let records: Vec<OutgoingRecord> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| order_event(id, 600 + i as i64))
        .collect();
    produce(broker, &setup.topic, 0, &records).await;
    // Two groups: each gets every event, in batches of forty, at once.
    let mut one = start(
        batches_of(setup.config(db, broker, &schema), 40),
        SlowPlanner,
    );
    let mut other_config = batches_of(setup.config(db, broker, &schema), 40);
    other_config.kafka.group_id = unique("rival");
    let mut two = start(other_config, SlowPlanner);
    one.until(
        "every event settled by the first consumer",
        all_settled(&ids),
    )
    .await;
    two.until(
        "every event settled by the second consumer",
        all_settled(&ids),
    )
    .await;
    let one = one.stop().await;
    let two = two.stop().await;

    // The race was between batches: each consumer settled events in
    // transactions of more than one.
    for receipts in [&one, &two] {
        assert!(receipts.iter().any(|r| r.batch > 1), "{receipts:#?}");
    }
    let receipts: Vec<Receipt> = one.into_iter().chain(two).collect();
    for id in &ids {
        assert_eq!(settled(&receipts, id, InboxOutcome::Processed), 1, "{id}");
        assert_eq!(settled(&receipts, id, InboxOutcome::Duplicate), 1, "{id}");
    }
    assert_one_job_per_event(&pool, 40).await;
}
