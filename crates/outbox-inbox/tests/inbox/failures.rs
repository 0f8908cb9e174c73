//! Failures: handler errors, parked events, outages waited out, unknown
//! commit outcomes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_keeps_failing_is_parked_with_its_error_and_the_partition_goes_on() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failure_leaves_no_inbox_row_and_the_event_is_processed_on_retry() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_with_unknown_outcome_is_not_acknowledged_and_the_retry_resolves_it() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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

/// Sends one event to a consumer with `max_attempts = 2` whose database is
/// away (the caller began the outage), waits for more failed attempts than
/// that, ends the outage with `end_outage`, and checks that every failure was
/// server error `code`, none counted, nothing parked, and the event was
/// processed once.
pub(crate) async fn outage_is_waited_out<H: Handler + 'static>(
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
    let db = DbServer::shared(Flavor::MariaDb).await;
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
    outage_is_waited_out(&setup, config, IMPATIENT, &pool, unlock, "1205").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_during_a_switchover_is_waited_out_without_parking() {
    // A server of its own, switched to read-only as a switchover does (the
    // inbox row's insert fails with 1290); the consumer's account has no
    // SUPER/READ ONLY ADMIN, as an application's should not.
    let db = DbServer::start(Flavor::MariaDb, &[]).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failing_one_event_of_a_batch_applies_the_others_once_and_parks_only_it() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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
