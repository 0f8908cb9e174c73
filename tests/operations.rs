//! Operability on real servers: the preflight check, the metrics and health
//! endpoints during a real run, and secrets kept out of logs.

use std::time::{Duration, Instant};

use harness::forwarder::{check_line, failed_check, refused_run};
use harness::http::{http_get, sample, wait_for_status, with_metrics};
use harness::workload::*;
use harness::{
    free_port, replaced, unique, Broker, ForwarderSetup, ForwarderToml, MariaDb, TIMEOUT,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_on_a_correct_server_and_names_what_is_wrong_on_a_misconfigured_one() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    db.create_schema(&schema).await;
    let setup = ForwarderSetup::new(&forwarder_config(db, broker, &schema, &topic, server_id()));
    let output = setup.command(&["check"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for name in [
        "binlog_format",
        "binlog_row_image",
        "binlog_row_metadata",
        "replication privileges",
        "kafka brokers",
        "idempotent producer",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("PASS") && l.contains(name)),
            "{name} passes:\n{stdout}"
        );
    }
    assert!(
        stdout.contains(&format!("PASS  outbox {schema}.outbox_event")),
        "{stdout}"
    );
    assert!(stdout.contains("PASS  kafka topic"), "{stdout}");

    // A server logging statements, without full row metadata.
    let wrong =
        MariaDb::start(&["--binlog-format=STATEMENT", "--binlog-row-metadata=MINIMAL"]).await;
    wrong.create_schema(&schema).await;
    let setup = ForwarderSetup::new(&forwarder_config(
        &wrong,
        broker,
        &schema,
        &topic,
        server_id(),
    ));
    let output = setup.command(&["check"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success());
    let line = stdout
        .lines()
        .find(|l| l.contains("binlog_format"))
        .unwrap();
    assert!(
        line.starts_with("FAIL")
            && line.contains("found: STATEMENT")
            && line.contains("expected: ROW")
            && line.contains("fix:"),
        "{line}"
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("binlog_row_metadata"))
        .unwrap();
    assert!(
        line.starts_with("FAIL") && line.contains("MINIMAL"),
        "{line}"
    );

    // `run` performs the same checks and refuses to start.
    let mut refused = setup.spawn(&[]);
    assert!(!refused.wait_exit(TIMEOUT).await.success());
    assert!(
        refused.log().contains("FAIL  binlog_format"),
        "{}",
        refused.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_scraped_during_a_run_match_what_was_delivered() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let port = free_port();
    let s = Scenario::new(db, broker, 2, |c| with_metrics(c, port)).await;
    let mut conn = s.conn(db).await;
    let Scenario { topic, setup, .. } = s;
    let mut forwarder = setup.spawn_streaming().await;
    assert_eq!(http_get(port, "/healthz").0, 200);
    wait_for_status(port, "/readyz", 200, TIMEOUT).await;

    let mut written = Vec::new();
    for _ in 0..4 {
        written.extend(write_order(&mut conn, 3, true).await);
    }
    broker.consume(&topic, 12, TIMEOUT, Duration::ZERO);
    let deadline = Instant::now() + TIMEOUT;
    let body = loop {
        let (_, body) = http_get(port, "/metrics");
        if body.contains(&format!(
            "outbox_forwarder_events_forwarded_total{{topic=\"{topic}\"}} 12"
        )) {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "counter never reached 12:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let bytes: usize = written.iter().map(|w| w.payload.len()).sum();
    assert_eq!(
        sample(&body, "outbox_forwarder_bytes_forwarded_total") as usize,
        bytes
    );
    assert_eq!(
        sample(&body, "outbox_forwarder_ack_latency_seconds_count"),
        12.0
    );
    assert_eq!(
        sample(
            &body,
            "outbox_forwarder_ack_latency_seconds_bucket{le=\"+Inf\"}"
        ),
        12.0
    );
    assert_eq!(sample(&body, "outbox_forwarder_in_flight_messages"), 0.0);
    assert_eq!(sample(&body, "outbox_forwarder_streaming"), 1.0);
    assert!(
        body.contains("outbox_forwarder_checkpoint_position{file=\"binlog."),
        "{body}"
    );
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_flips_when_the_broker_goes_away_and_back() {
    let db = MariaDb::shared().await;
    let mut broker = Broker::start(true).await;
    let port = free_port();
    let s = Scenario::new(db, &broker, 1, |c| with_metrics(c, port)).await;
    let mut conn = s.conn(db).await;
    let Scenario { topic, setup, .. } = s;
    let mut forwarder = setup.spawn_streaming().await;
    write_order(&mut conn, 1, false).await;
    broker.consume(&topic, 1, TIMEOUT, Duration::ZERO);
    wait_for_status(port, "/readyz", 200, TIMEOUT).await;

    broker.stop();
    write_order(&mut conn, 1, false).await;
    let why = wait_for_status(port, "/readyz", 503, TIMEOUT).await;
    assert!(why.contains("Kafka brokers unreachable"), "{why}");
    assert_eq!(http_get(port, "/healthz").0, 200, "alive all the same");

    broker.restart().await;
    wait_for_status(port, "/readyz", 200, TIMEOUT).await;
    assert!(forwarder.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_password_never_appears_in_logs_or_check_output() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    db.create_schema(&schema).await;
    let secret = harness::mariadb::FORWARDER_PASSWORD;
    let good = forwarder_config(db, broker, &schema, &topic, server_id()).to_string();
    assert!(
        good.contains(secret),
        "the URL under test carries the password"
    );

    // A normal run at debug level.
    let setup = ForwarderSetup::new(&good);
    let mut forwarder = setup.spawn_streaming().await;
    assert!(forwarder.terminate().success());
    let run_log = forwarder.log();

    // Failing connections: a wrong port, then a wrong password.
    let dead_port = free_port();
    let unreachable = replaced(
        &good,
        &format!(":{}\"", db.port),
        &format!(":{dead_port}\""),
    );
    let setup = ForwarderSetup::new(&unreachable);
    let mut retrying = setup.spawn(&[]);
    retrying.wait_for_log("cannot reach MySQL", TIMEOUT).await;
    let retry_log = retrying.log();
    let check = setup.command(&["check"]);
    let wrong_password = replaced(&good, secret, "n0t-the-pw-7");
    let denied = ForwarderSetup::new(&wrong_password).command(&["check"]);

    for (what, text) in [
        ("run log", run_log),
        ("retry log", retry_log),
        (
            "check output",
            String::from_utf8_lossy(&check.stdout).into_owned()
                + &String::from_utf8_lossy(&check.stderr),
        ),
        (
            "denied check",
            String::from_utf8_lossy(&denied.stdout).into_owned()
                + &String::from_utf8_lossy(&denied.stderr),
        ),
    ] {
        assert!(!text.is_empty(), "{what} is empty");
        assert!(!text.contains(secret), "{what} shows the password:\n{text}");
        assert!(
            !text.contains("n0t-the-pw-7"),
            "{what} shows the password:\n{text}"
        );
    }
}

/// `[mysql] require_durable_primary = true` added to a configuration.
fn require_durable_primary(config: ForwarderToml) -> ForwarderToml {
    config.mysql("require_durable_primary", "true")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_warns_about_a_primary_that_a_crash_can_roll_back_and_fails_when_durability_is_required(
) {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;

    // The shared server runs with innodb_flush_log_at_trx_commit=2 and
    // sync_binlog=0: a warning by default.
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let output = s.setup.command(&["check"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for (name, found) in [
        ("sync_binlog", "0"),
        ("innodb_flush_log_at_trx_commit", "2"),
    ] {
        let line = check_line(&stdout, name);
        assert!(
            line.starts_with("WARN")
                && line.contains(&format!("found: {found}"))
                && line.contains("expected: 1")
                && line.contains("already published")
                && line.contains("require_durable_primary"),
            "{line}"
        );
    }

    // A strict deployment: check fails and run refuses to start.
    let strict = Scenario::new(db, broker, 1, require_durable_primary).await;
    let (stdout, _) = failed_check(&strict.setup, "sync_binlog");
    assert!(
        check_line(&stdout, "innodb_flush_log_at_trx_commit").starts_with("FAIL"),
        "{stdout}"
    );
    let log = refused_run(&strict.setup).await;
    assert!(log.contains("FAIL  sync_binlog"), "{log}");

    // A durable primary passes the strict check.
    let durable = MariaDb::start(&["--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1"]).await;
    let strict = Scenario::new(&durable, broker, 1, require_durable_primary).await;
    let output = strict.setup.command(&["check"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for name in ["sync_binlog", "innodb_flush_log_at_trx_commit"] {
        let line = check_line(&stdout, name);
        assert!(
            line.starts_with("PASS") && line.contains("found: 1"),
            "{line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_on_an_outbox_table_named_in_another_case_on_a_case_sensitive_server() {
    let db = MariaDb::shared().await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let s = Scenario::with_schema(db, broker, 1, &schema, |c| {
        c.tables(vec![format!("{schema}.Outbox_Event")])
    })
    .await;
    let schema = &s.schema;
    let (_, line) = failed_check(&s.setup, "outbox table");
    assert!(
        line.starts_with("FAIL")
            && line.contains(&format!(
                "{schema}.Outbox_Event is not {schema}.outbox_event"
            ))
            && line.contains("lower_case_table_names=0")
            && line.contains(&format!("write outbox.tables as \"{schema}.outbox_event\"")),
        "{line}"
    );
}
