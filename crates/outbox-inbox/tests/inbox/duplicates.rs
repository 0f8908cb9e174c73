//! Duplicates: racing consumers and groups, and what counts as one (only
//! the inbox key).

use super::*;

// The race on both flavors: the claim is decided by the database's unique
// key under its strict sql_mode, and MySQL's errors and locks are its own.
harness::on_both_flavors!(two_consumers_racing_on_the_same_events_create_exactly_one_job_per_event);

async fn two_consumers_racing_on_the_same_events_create_exactly_one_job_per_event(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
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
    let db = DbServer::shared(Flavor::MariaDb).await;
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
    let db = DbServer::shared(Flavor::MariaDb).await;
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
    let opts = Inbox::pool_options(&MysqlSection {
        max_connections: 2,
        ..MysqlSection::new(db_url(db, &schema))
    })
    .unwrap();
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

// A server whose sql_mode is lax and a batch with a duplicate in it, on both
// flavors: the session's strictness and the batch's claims are the inbox's
// own, whatever the server.
harness::on_both_flavors!(
    over_long_event_ids_are_refused_on_every_use_of_a_connection_not_truncated_into_one,
    a_duplicate_in_the_middle_of_a_batch_is_skipped_exactly_and_the_rest_applied_once,
);

/// On a server whose global `sql_mode` is not strict (a legacy setting),
/// every inbox transaction is strict, whatever ran on its connection
/// before: the pool's reset (which also resets session variables) or,
/// with `mysql.reset_sessions = false`, a handler that loosened the mode.
///
/// Two event ids that share their first 64 characters would otherwise be
/// truncated into one inbox row, and the second event reported a duplicate
/// and never handled.
async fn over_long_event_ids_are_refused_on_every_use_of_a_connection_not_truncated_into_one(
    flavor: Flavor,
) {
    let db = DbServer::start(flavor, &["--sql-mode="]).await;
    for reset_sessions in [true, false] {
        let (schema, pool) = schema(&db).await;
        let mode: String = pool
            .get_conn()
            .await
            .unwrap()
            .query_first("SELECT @@GLOBAL.sql_mode")
            .await
            .unwrap()
            .unwrap();
        assert!(
            !mode.contains("STRICT"),
            "the server is not strict: {mode:?}"
        );
        // One connection, so every event after the first runs on the
        // connection the first one's handler loosened.
        let opts = Inbox::pool_options(&MysqlSection {
            max_connections: 1,
            reset_sessions,
            ..MysqlSection::new(db_url(&db, &schema))
        })
        .unwrap();
        let inbox = Inbox::new(Pool::new(opts), PLANNER);
        let first = planned_event(new_id(), 0);
        assert_eq!(
            inbox.process(&LAX, &first).await.unwrap(),
            InboxOutcome::Processed
        );
        let prefix = "p".repeat(64);
        for (i, id) in [format!("{prefix}-a"), format!("{prefix}-b")]
            .into_iter()
            .enumerate()
        {
            let outcome = inbox
                .process(
                    &NotificationPlanner,
                    &planned_event(id.clone(), 1 + i as i64),
                )
                .await;
            match outcome {
                Err(ProcessError::Claim { code: 1406, .. }) => {}
                other => panic!(
                    "reset_sessions = {reset_sessions}, {id}: expected a refused claim (1406), \
                     got {other:?}"
                ),
            }
        }
        assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 1);
        assert_eq!(
            count(&pool, "SELECT COUNT(*) FROM notification_job").await,
            1
        );
    }
}

/// An `ORDER_ACCEPTED` event for `order_id`, as a handler receives it.
fn planned_event(event_id: String, order_id: i64) -> InboxEvent {
    InboxEvent {
        event_id,
        event_type: Some("ORDER_ACCEPTED".into()),
        aggregate_type: Some("order".into()),
        aggregate_id: Some(order_id.to_string()),
        event_version: Some(1),
        payload: serde_json::json!({ "order_id": order_id }),
        headers: BTreeMap::new(),
        location: MessageLocation {
            topic: "t".into(),
            partition: 0,
            offset: order_id,
        },
    }
}

/// `config` with batches of exactly `events`: the partition waits (up to
/// 5 s) until that many have arrived, so a test knows what one batch holds.
pub(crate) fn batches_of(mut config: InboxConfig, events: usize) -> InboxConfig {
    config.inbox.max_batch = events;
    config.inbox.max_batch_wait_ms = 5_000;
    config
}

async fn a_duplicate_in_the_middle_of_a_batch_is_skipped_exactly_and_the_rest_applied_once(
    flavor: Flavor,
) {
    let db = DbServer::shared(flavor).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumer_groups_racing_on_the_same_batches_apply_each_event_once() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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

/// Events another producer compressed with each codec librdkafka knows
/// (gzip, snappy, lz4, zstd) are read and processed once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_compressed_with_each_codec_are_processed_once() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let setup = Setup::new(broker, 1);
    let mut events = Vec::new();
    for (n, codec) in ["gzip", "snappy", "lz4", "zstd"].into_iter().enumerate() {
        let ids: Vec<String> = (0..5).map(|_| new_id()).collect();
        let records: Vec<OutgoingRecord> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| order_event(id, 300 + 10 * n as i64 + i as i64))
            .collect();
        harness::inbox::produce_compressed(&broker.bootstrap(), &setup.topic, 0, &records, codec)
            .await;
        events.extend(ids);
    }
    let mut consumer = start(setup.config(db, broker, &schema), NotificationPlanner);
    consumer
        .until("every compressed event settled", all_settled(&events))
        .await;
    let receipts = consumer.stop().await;
    for id in &events {
        assert_eq!(settled(&receipts, id, InboxOutcome::Processed), 1, "{id}");
    }
    assert_one_job_per_event(&pool, 20).await;
}
