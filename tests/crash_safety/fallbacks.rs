//! Where the read-back cannot trust the topic tails: the window is
//! published again, said and counted, nothing lost.

use super::*;

/// What the restart of [`untrusted_tails_after_a_crash_publish_the_window_again`] meets.
pub(super) enum Tamper {
    /// Another producer writes a message without coordinates to the topic.
    ForeignMessage,
    /// Another forwarder writes a row of another server's binlog, whose
    /// coordinates could equal this server's.
    OtherServer,
    /// With `kafka.signing_key`, another producer copies a row's headers
    /// (server, coordinates, event id) without the key's signature.
    Unsigned,
    /// The topic's partition count differs from what the checkpoint
    /// recorded. (tansu 0.6 cannot add partitions, so the recorded count is
    /// changed instead: what the forwarder sees is the same.)
    PartitionCount,
    /// A partition ends before the offset the checkpoint recorded, as when
    /// a topic is deleted and created again (the recorded offset is moved
    /// past the end instead).
    ShorterPartition,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_shorter_than_recorded_falls_back_to_publishing_the_window_again() {
    untrusted_tails_after_a_crash_publish_the_window_again(
        Tamper::ShorterPartition,
        "ends before offset 1000, which the checkpoint recorded",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_message_in_the_topic_falls_back_to_publishing_the_window_again() {
    untrusted_tails_after_a_crash_publish_the_window_again(
        Tamper::ForeignMessage,
        "carries no binlog coordinates (a binlog header, or binlog_position and binlog_row): \
         another producer writes to the topic",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_servers_row_in_the_topic_falls_back_to_publishing_the_window_again() {
    untrusted_tails_after_a_crash_publish_the_window_again(
        Tamper::OtherServer,
        "carries a row of the binlog of 7@elsewhere:3306 instead of",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_signing_key_an_unsigned_copy_of_a_row_falls_back_to_publishing_the_window_again() {
    untrusted_tails_after_a_crash_publish_the_window_again(
        Tamper::Unsigned,
        "has no valid outbox_signature: another producer writes to the topic",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_partition_count_falls_back_to_publishing_the_window_again() {
    untrusted_tails_after_a_crash_publish_the_window_again(
        Tamper::PartitionCount,
        "has 2 partitions, the checkpoint recorded 3",
    )
    .await;
}

/// 10 events acked and not checkpointed, kill -9, `tamper`, restart: the
/// tails cannot be trusted, so the restart says why (`warning`), counts a
/// fallback, and publishes the 10 again; nothing is lost.
pub(super) async fn untrusted_tails_after_a_crash_publish_the_window_again(
    tamper: Tamper,
    warning: &str,
) {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let port = harness::free_port();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("signing-key");
    std::fs::write(&key, "a-signing-key-of-the-test-0123456789").unwrap();
    let s = Scenario::new(db, broker, 2, |c| {
        let c = harness::http::with_metrics(c.flush_interval_ms(60_000), port);
        match tamper {
            Tamper::Unsigned => c.kafka(
                "signing_key_file",
                &format!("{:?}", key.display().to_string()),
            ),
            _ => c,
        }
    })
    .await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut written = Vec::new();
    for _ in 0..10 {
        written.extend(write_order(&mut conn, 1, false).await);
    }
    let first = broker.consume(&s.topic, 10, TIMEOUT, Duration::ZERO);
    assert_eq!(first.len(), 10);
    forwarder.kill9();
    let mut extra = 0;
    match tamper {
        Tamper::ForeignMessage | Tamper::OtherServer | Tamper::Unsigned => {
            let headers = if matches!(tamper, Tamper::Unsigned) {
                let mut copied: Vec<(String, String)> = first[0]
                    .headers
                    .iter()
                    .filter(|(k, _)| *k != "outbox_signature")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                copied.push(("outbox_signature".into(), "00".repeat(32)));
                copied
            } else if matches!(tamper, Tamper::OtherServer) {
                [
                    ("binlog_position", "binlog.000001:4000"),
                    ("binlog_row", "0"),
                    ("binlog_server", "7@elsewhere:3306"),
                ]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
            } else {
                Vec::new()
            };
            let foreign = harness::inbox::OutgoingRecord {
                key: "not-an-outbox-event".into(),
                headers,
                payload: "{}".into(),
            };
            for partition in 0..2 {
                harness::inbox::produce(
                    broker,
                    &s.topic,
                    partition,
                    std::slice::from_ref(&foreign),
                )
                .await;
                extra += 1;
            }
        }
        Tamper::PartitionCount | Tamper::ShorterPartition => {
            let store =
                outbox_checkpoint::CheckpointStore::open(&s.setup.checkpoint_path()).unwrap();
            let mut checkpoint = store.load().unwrap().unwrap();
            let tails = checkpoint.tails.as_mut().expect("tails recorded");
            let read_from = tails.get_mut(&s.topic).expect("the topic's tail");
            if matches!(tamper, Tamper::PartitionCount) {
                read_from.push(0);
            } else {
                read_from[0] = 1000;
            }
            store.save(&checkpoint).unwrap();
        }
    }

    let mut forwarder = s.setup.spawn(&[]);
    forwarder.wait_for_log(warning, TIMEOUT).await;
    let log = forwarder.log();
    assert!(
        log.contains(
            "every event after it is published again, as the topic tails cannot be trusted"
        ),
        "{log}"
    );
    let metrics = harness::http::wait_for_status(port, "/metrics", 200, TIMEOUT).await;
    assert_eq!(
        harness::http::sample(&metrics, "outbox_forwarder_replay_fallbacks_total"),
        1.0
    );
    let after = write_order(&mut conn, 1, false).await;
    written.extend(after.iter().cloned());
    let records = broker.consume_covering(&s.topic, &ids(&after), TIMEOUT, SETTLE);
    let keyed = by_key(&records);
    let ours: HashSet<String> = keyed
        .keys()
        .filter(|k| *k != "not-an-outbox-event")
        .cloned()
        .collect();
    assert_eq!(ours, ids(&written), "nothing missing");
    assert_eq!(
        records.len(),
        10 * 2 + 1 + extra,
        "the window was published again"
    );
    let metrics = harness::http::wait_for_status(port, "/metrics", 200, TIMEOUT).await;
    assert_eq!(
        harness::http::sample(&metrics, "outbox_forwarder_replay_skipped_total"),
        0.0
    );
    assert!(forwarder.terminate().success());
}
