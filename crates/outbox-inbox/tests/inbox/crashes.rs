//! Crashes between the database commit and the offset commit: the
//! redelivery is recognised by the inbox.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivery_after_a_crash_between_db_commit_and_offset_commit_is_skipped_by_the_inbox() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_through_the_forwarder_killed_once_become_one_notification_job_each() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let EndToEnd {
        pool,
        setup,
        forwarder,
        mut process,
        mut planner,
        // Kept to the end: the planner's configuration and log.
        _planners,
        ..
    } = EndToEnd::start(db, broker, 3).await;
    let mut conn = pool.get_conn().await.unwrap();

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_a_batchs_db_commit_and_its_offset_commit_repeats_nothing() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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

    let mut first = planners.spawn("first", "info,outbox_inbox=debug");
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

    let mut second = planners.spawn("second", "info,outbox_inbox=debug");
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
    // The summary lines at `info` count the same.
    let summed = |field: &str| -> u64 {
        second
            .log()
            .lines()
            .filter(|line| line.contains("events settled since the last summary"))
            .filter_map(|line| {
                let value = line.split(&format!("{field}=")).nth(1)?;
                value.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum()
    };
    assert_eq!(
        (summed("duplicates"), summed("processed")),
        (30, 0),
        "{}",
        second.log()
    );
}
