//! Order per aggregate: versions, gaps across partitions, a partition
//! revoked and assigned again.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioned_apply_rejects_a_gap_recovers_skips_the_duplicate_and_rejects_the_stale_copy() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let (schema, pool) = schema(db).await;
    pool.get_conn()
        .await
        .unwrap()
        .query_drop("INSERT INTO account (account_id, balance, version) VALUES ('order-42', 0, 0)")
        .await
        .unwrap();
    let inbox = Inbox::new(
        Pool::new(
            Inbox::pool_options(&MysqlSection {
                max_connections: 2,
                ..MysqlSection::new(db_url(db, &schema))
            })
            .unwrap(),
        ),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_gap_waits_on_its_partition_while_the_predecessor_arrives_on_another() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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

/// Runs on librdkafka's mock cluster: tansu 0.6's group coordinator never
/// hands a partition back in a rebalance. A member joins the group for
/// another topic, so the consumer's partition is revoked and assigned to it
/// again while it waits (its head is backing off): the revoke, the
/// re-assignment and the first fetched message arrive in one `recv`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_revoked_and_assigned_again_in_one_poll_loses_no_event() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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

    // The fault happened: the partition came back as a new lane, so its
    // head's attempts started again at 1 long before the 10 s backoff was
    // over. A new lane's first attempt may still have met the hold (the
    // re-assignment can be served before the test lets go, and the group
    // may rebalance more than once), so it is a second attempt numbered 1
    // that shows the fault, whatever its outcome: within one lane the
    // attempts of an event only count up.
    let head = for_event(&receipts, &ids[0]);
    assert!(
        matches!(head[0].status, ReceiptStatus::Failed { .. }) && head[0].attempt == 1,
        "{head:#?}"
    );
    assert!(
        head.iter().filter(|r| r.attempt == 1).count() >= 2,
        "the head was tried afresh in a new lane: {head:#?}"
    );
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
