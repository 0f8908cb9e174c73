//! Compressed topics, on tansu: the forwarder publishing with each codec
//! librdkafka knows, and its readers (the read-back after kill -9,
//! `verify`) on messages another producer compressed.

use std::time::Duration;

use harness::forwarder::{output_text, reported};
use harness::workload::*;
use harness::{Broker, DbServer, Flavor, TIMEOUT};

const CODECS: [&str; 4] = ["gzip", "snappy", "lz4", "zstd"];

/// Each codec: events published compressed, a kill -9 after acks the
/// checkpoint does not cover yet, and a restart that reads the compressed
/// messages back and publishes nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forwarder_publishes_with_each_codec_and_reads_its_messages_back_after_kill_9() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    for codec in CODECS {
        // A checkpoint every 30 s: the kill leaves every message after the
        // first checkpoint to the read-back.
        let s = Scenario::new(db, broker, 2, |c| {
            c.property("compression.type", codec)
                .flush_interval_ms(30_000)
        })
        .await;
        let check = s.setup.command(&["check"]);
        let line = harness::forwarder::check_line(&output_text(&check), "kafka compression");
        assert!(
            line.starts_with("PASS") && line.contains(codec),
            "{codec}: {line}"
        );
        let mut conn = s.conn(db).await;
        let mut forwarder = s.setup.spawn_streaming().await;
        let mut written = Vec::new();
        for _ in 0..20 {
            written.extend(write_order(&mut conn, 1, false).await);
        }
        broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
        forwarder.kill9();
        let mut forwarder = s.setup.spawn(&[]);
        forwarder
            .wait_for_log("resuming from the stored checkpoint", TIMEOUT)
            .await;
        written.extend(write_order(&mut conn, 1, false).await);
        let records = broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
        assert_eq!(assert_each_once(&records, &ids(&written)), 21, "{codec}");
        let log = forwarder.log();
        let read_back = log
            .lines()
            .find(|l| l.contains("will not be republished"))
            .and_then(|l| {
                l.split("already_published=")
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("{codec}: no read-back line:\n{log}"));
        assert!(read_back >= 20, "{codec}: read back {read_back}:\n{log}");
        assert!(forwarder.terminate().success(), "{codec}");
    }
}

/// `verify` reads a topic where another producer's messages are compressed
/// with each codec, among the forwarder's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reads_messages_another_producer_compressed_with_each_codec() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    // Unset, the producer compresses with the forwarder's default.
    let check = s.setup.command(&["check"]);
    let line = harness::forwarder::check_line(&output_text(&check), "kafka compression");
    assert!(line.contains("compression.type=lz4"), "{line}");
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = write_order(&mut conn, 10, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for codec in CODECS {
        broker.fill_compressed(&s.topic, 1, 25, now_ms, codec);
    }
    let verify = s.setup.command(&["verify"]);
    let out = output_text(&verify);
    assert!(verify.status.success(), "{out}");
    assert!(out.contains("missing 0"), "{out}");
    assert!(
        reported(&out, "Kafka messages read") >= 10 + 4 * 25,
        "every message read:\n{out}"
    );
}
