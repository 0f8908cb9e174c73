//! Signed events: with the forwarder's `kafka.signing_key`, the consumer
//! takes only messages the forwarder signed.

use super::*;

/// Defect: the inbox deduplicated on (consumer, event id) and applied
/// event_version of whatever the topic held, so a principal that may write
/// the topic could claim a real event's id before it arrived (the real one
/// would then be dropped as a duplicate). With the signing key on both
/// sides, a forged message is parked and claims nothing, and the
/// forwarder's signed event with that id is processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_message_is_parked_and_claims_nothing_and_the_forwarders_signed_event_is_processed(
) {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let (schema, pool) = schema(db).await;
    let setup = Setup::new(broker, 1);
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("signing-key");
    std::fs::write(&key, uuid::Uuid::new_v4().simple().to_string()).unwrap();
    let forwarder = ForwarderSetup::new(
        &forwarder_config(db, broker, &schema, &setup.topic, server_id()).kafka(
            "signing_key_file",
            &format!("{:?}", key.display().to_string()),
        ),
    );
    let mut process = forwarder.spawn(&[]);
    process.wait_for_log("binlog stream started", TIMEOUT).await;

    // The forgery arrives first, with the id the real event will have.
    let id = new_id();
    produce(broker, &setup.topic, 0, &[order_event(&id, 7)]).await;
    let mut conn = pool.get_conn().await.unwrap();
    conn.exec_drop(
        "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES (?, 'order', '7', 'ORDER_ACCEPTED', '{\"order_id\":7}')",
        (&id,),
    )
    .await
    .unwrap();

    let mut config = setup.config(db, broker, &schema);
    config.kafka.signing_key_file = Some(key);
    let mut consumer = start(config, NotificationPlanner);
    consumer
        .until("the signed event processed", |r| {
            settled(r, &id, InboxOutcome::Processed) == 1
        })
        .await;
    let receipts = consumer.stop().await;
    let attempts = for_event(&receipts, &id);
    match &attempts[0].status {
        ReceiptStatus::Parked { error } => {
            assert!(error.contains("outbox_signature"), "{error}")
        }
        other => panic!("the forgery first, parked: {other:?}"),
    }
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM consumed_event").await, 1);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        1
    );
    let parked = broker.consume(&setup.dead_letter, 1, TIMEOUT, Duration::from_millis(500));
    assert_eq!(parked[0].headers["event_id"], id);
    assert!(process.terminate().success(), "{}", process.log());
}
