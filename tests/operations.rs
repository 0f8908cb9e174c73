//! Operability on real servers: the preflight check, the metrics and health
//! endpoints during a real run, and secrets kept out of logs.

use std::time::{Duration, Instant};

use harness::forwarder::{check_line, failed_check, refused_run};
use harness::http::{http_get, sample, wait_for_status, with_metrics};
use harness::server::FORWARDER_USER;
use harness::workload::*;
use harness::{
    free_port, replaced, unique, Broker, DbServer, Flavor, ForwarderSetup, ForwarderToml, TIMEOUT,
};

// `check` on both flavors: the settings, privileges and statements it reads
// are named differently on MySQL 8.4+, and the MySQL account signs in with
// caching_sha2_password over plain TCP (the RSA key exchange).
harness::on_both_flavors!(
    check_passes_on_a_correct_server_and_names_what_is_wrong_on_a_misconfigured_one
);

async fn check_passes_on_a_correct_server_and_names_what_is_wrong_on_a_misconfigured_one(
    flavor: Flavor,
) {
    let db = DbServer::shared(flavor).await;
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
    let wrong = DbServer::start(
        flavor,
        &["--binlog-format=STATEMENT", "--binlog-row-metadata=MINIMAL"],
    )
    .await;
    wrong.create_schema(&schema).await;
    if flavor == Flavor::MySql {
        // Its first sign-in (below) is a full caching_sha2_password one.
        assert_eq!(
            wrong.account_plugin(FORWARDER_USER).await,
            "caching_sha2_password"
        );
    }
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
    let db = DbServer::shared(Flavor::MariaDb).await;
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

/// The descriptors `pid` holds open.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Defect: every connection to the metrics listener was accepted and held
/// for up to 5 s, without a cap: whoever reached the port could take the
/// process's descriptors, which MySQL, librdkafka and the store need.
/// Idle connections past the cap wait unaccepted; forwarding goes on
/// while they are open, and the endpoints answer once they close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_past_the_listeners_cap_take_no_descriptors_and_forwarding_goes_on() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let port = free_port();
    let s = Scenario::new(db, broker, 1, |c| with_metrics(c, port)).await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    wait_for_status(port, "/readyz", 200, TIMEOUT).await;
    let pid = forwarder.pid().unwrap();
    let before = open_descriptors(pid);

    const IDLE: usize = 300;
    let idle: Vec<_> = (0..IDLE)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = open_descriptors(pid);
    // 32 served at once, the rest unaccepted.
    assert!(
        during <= before + 40,
        "{IDLE} idle connections took {} descriptors",
        during.saturating_sub(before)
    );
    let written = write_order(&mut conn, 5, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    drop(idle);
    wait_for_status(port, "/healthz", 200, TIMEOUT).await;
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_flips_when_the_broker_goes_away_and_back() {
    let db = DbServer::shared(Flavor::MariaDb).await;
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
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    db.create_schema(&schema).await;
    let secret = harness::server::FORWARDER_PASSWORD;
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
    let db = DbServer::shared(Flavor::MariaDb).await;
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
    let durable = DbServer::start(
        Flavor::MariaDb,
        &["--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1"],
    )
    .await;
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
    let db = DbServer::shared(Flavor::MariaDb).await;
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

/// The lag alert of `deploy/prometheus/outbox-forwarder.rules.yml`, seen
/// through a real Prometheus scraping a running forwarder: the broker
/// stops while orders keep coming, the lag grows and the alert fires; the
/// broker comes back, the forwarder catches up and the alert resolves. The
/// rule's threshold and hold are scaled down from a minute and five
/// minutes to 3 and 2 seconds; its expression is the deployed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_alert_fires_through_prometheus_when_the_broker_stops_and_resolves_after() {
    use harness::prometheus::{rules_with, Prometheus};
    // A server of its own that expires binlogs after 10 days, for the
    // purge headroom.
    let db = &DbServer::start(Flavor::MariaDb, &["--binlog-expire-logs-seconds=864000"]).await;
    let mut broker = Broker::start(true).await;
    let s = Scenario::new(db, &broker, 1, |c| c).await;
    let port = free_port();
    let setup = ForwarderSetup::new(&with_metrics(
        forwarder_config(db, &broker, &s.schema, &s.topic, server_id()),
        port,
    ));
    let mut forwarder = setup.spawn_streaming().await;
    let rules = rules_with(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy/prometheus/outbox-forwarder.rules.yml"),
        &[(
            "outbox_forwarder_lag_seconds > 60 and on (instance, job) outbox_forwarder_ha_active == 1\n        for: 5m",
            "outbox_forwarder_lag_seconds > 3 and on (instance, job) outbox_forwarder_ha_active == 1\n        for: 2s",
        )],
    );
    let prometheus = Prometheus::start(&[format!("127.0.0.1:{port}")], &rules).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = steady_load(s.conn(db).await, stop.clone());
    prometheus.wait_for_scrapes(Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(prometheus.alert_state("OutboxForwarderLagHigh"), None);
    // The purge headroom, from the server's own expiry: all of it while
    // the forwarder streams, caught up, in the file being written.
    let expiry: u64 = {
        use mysql_async::prelude::Queryable;
        let mut root = db.root().await;
        root.query_first("SELECT @@binlog_expire_logs_seconds")
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(expiry, 864_000);
    let headroom = prometheus.query("outbox_forwarder_binlog_purge_headroom_seconds");
    assert_eq!(
        headroom,
        Some(864_000.0),
        "caught up in the file being written"
    );

    broker.stop();
    prometheus
        .wait_for_alert(
            "OutboxForwarderLagHigh",
            Some("firing"),
            Duration::from_secs(60),
        )
        .await;
    // The fault was real: Prometheus saw the lag past the threshold.
    let lag = prometheus
        .query("max_over_time(outbox_forwarder_lag_seconds[1m])")
        .expect("lag scraped");
    assert!(lag > 3.0, "lag {lag}");

    broker.restart().await;
    prometheus
        .wait_for_alert("OutboxForwarderLagHigh", None, Duration::from_secs(90))
        .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = load.await.unwrap();
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, SETTLE);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

/// The Debian package `scripts/package.sh --install` built and installed
/// (scripts/test.sh does, before the suite): the installed binary is this
/// build, passes `check` against the test MariaDB and broker, and its
/// systemd unit verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installed_package_is_this_build_passes_check_and_its_unit_verifies() {
    let installed = std::path::Path::new("/usr/bin/outbox-forwarder");
    assert!(
        installed.exists(),
        "the package is not installed: run scripts/test.sh, or scripts/package.sh --install"
    );
    let version = |binary: &std::path::Path| {
        let out = std::process::Command::new(binary)
            .arg("--version")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let built = version(&harness::forwarder::forwarder_binary());
    assert!(built.contains("(commit "), "{built}");
    assert_eq!(
        version(installed),
        built,
        "the installed package is this build"
    );
    let status = std::process::Command::new("dpkg-query")
        .args(["-W", "-f", "${Status} ${Version}", "outbox-forwarder"])
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.starts_with("install ok installed"), "{status}");
    for shipped in [
        "/etc/outbox-forwarder/forwarder.toml",
        "/lib/systemd/system/outbox-forwarder.service",
        "/usr/share/man/man1/outbox-forwarder.1.gz",
        "/usr/share/bash-completion/completions/outbox-forwarder",
        "/usr/share/outbox-forwarder/prometheus/outbox-forwarder.rules.yml",
        "/usr/share/outbox-forwarder/grafana/outbox-forwarder.json",
    ] {
        assert!(
            std::path::Path::new(shipped).exists(),
            "{shipped} installed"
        );
    }

    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let output = std::process::Command::new(installed)
        .args(["check", "--config"])
        .arg(&s.setup.config_path)
        .output()
        .unwrap();
    let text = harness::forwarder::output_text(&output);
    assert!(output.status.success(), "installed check:\n{text}");
    assert!(text.contains("PASS") && !text.contains("FAIL"), "{text}");

    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "/lib/systemd/system/outbox-forwarder.service"])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "systemd-analyze verify:\n{}",
        harness::forwarder::output_text(&verify)
    );
}

/// The connections a server counted (`Connections`, every attempt).
async fn connections(db: &DbServer) -> u64 {
    use mysql_async::prelude::Queryable;
    let mut root = db.root().await;
    let (_, count): (String, u64) = root
        .query_first("SHOW GLOBAL STATUS LIKE 'Connections'")
        .await
        .unwrap()
        .unwrap();
    count
}

/// Defect: `check` connected to every candidate for its connection lines,
/// and again for the resume decision. One connection each now: the lines
/// come from the decision's own probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_connects_to_each_candidate_once() {
    let primary = DbServer::start(Flavor::MariaDb, &[]).await;
    let replica = primary.start_replica().await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    primary.create_schema(&schema).await;
    // Over TCP only: on a local server the driver would otherwise open a
    // second connection, to the Unix socket, for each.
    let setup = ForwarderSetup::new(
        &forwarder_config_at(&[&primary, &replica], broker, &schema, &topic, server_id()).urls(
            [&primary, &replica]
                .iter()
                .map(|db| db.forwarder_url() + "?prefer_socket=false")
                .collect(),
        ),
    );
    // Each count is read on connections of its own: what one reading
    // costs is measured first, and taken off.
    let counts = || async { (connections(&primary).await, connections(&replica).await) };
    let start = counts().await;
    let before = counts().await;
    let output = setup.command(&["check"]);
    let after = counts().await;
    let reading = (before.0 - start.0, before.1 - start.1);
    let text = harness::forwarder::output_text(&output);
    assert!(output.status.success(), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("PASS") && l.contains("mysql connection"))
            .count(),
        2,
        "a connection line per candidate:\n{text}"
    );
    assert_eq!(
        (
            after.0 - before.0 - reading.0,
            after.1 - before.1 - reading.1
        ),
        (1, 1),
        "connections opened by check on (primary, replica):\n{text}"
    );
}

/// Amazon RDS and Aurora keep binlogs for `binlog retention hours`
/// (`CALL mysql.rds_show_configuration`), NULL by default: purged as soon
/// as possible, under a forwarder that falls behind. A MariaDB server here
/// presents that interface (the procedure and its result set, as RDS
/// shows them) with retention NULL, 1 hour and 7 days.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_rds_binlog_retention_hours_and_the_purge_headroom_uses_the_smaller_limit() {
    use mysql_async::prelude::Queryable;
    // The server's own expiry: 7 days. RDS's retention decides below it.
    let db = &DbServer::start(
        Flavor::MariaDb,
        &[
            "--binlog-expire-logs-seconds=604800",
            "--binlog-row-metadata=MINIMAL",
        ],
    )
    .await;
    let broker = Broker::shared().await;
    let mut root = db.root().await;
    for statement in [
        "CREATE TABLE mysql.rds_configuration (name VARCHAR(100) PRIMARY KEY, \
         value VARCHAR(100), description VARCHAR(300))",
        "INSERT INTO mysql.rds_configuration VALUES \
         ('binlog retention hours', NULL, 'binlog retention hours specifies the duration in hours before binary logs are automatically deleted.'), \
         ('source delay', '0', 'source delay specifies replication delay in seconds between current instance and its master.'), \
         ('target delay', '0', 'target delay specifies replication delay in seconds between current instance and its future read-replica.')",
        "CREATE PROCEDURE mysql.rds_show_configuration() \
         SELECT name, value, description FROM mysql.rds_configuration",
        "SET GLOBAL binlog_row_metadata = MINIMAL",
    ] {
        root.query_drop(statement).await.unwrap();
    }
    let s = Scenario::new(db, broker, 1, |c| c).await;

    // A user without EXECUTE on the procedure is refused it; MySQL refuses
    // so whether or not the procedure exists, so a server without RDS's
    // signs (its binaries under /rdsdbbin/, or Aurora's aurora_version) is
    // taken as not RDS: the server's own expiry decides.
    let output = s.setup.command(&["check"]);
    let text = harness::forwarder::output_text(&output);
    let line = check_line(&text, "binlog retention");
    assert!(
        line.starts_with("PASS") && line.contains("binlog_expire_logs_seconds=604800 (168h)"),
        "{text}"
    );
    let metadata = check_line(&text, "binlog_row_metadata");
    assert!(
        metadata.starts_with("FAIL") && metadata.contains("my.cnf"),
        "{metadata}"
    );
    root.query_drop(format!(
        "GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration TO '{FORWARDER_USER}'@'%'"
    ))
    .await
    .unwrap();

    // RDS: a setting that is off is named in RDS's terms, the parameter group.
    let (text, _) = failed_check(&s.setup, "binlog retention");
    let metadata = check_line(&text, "binlog_row_metadata");
    assert!(
        metadata.starts_with("FAIL") && metadata.contains("DB parameter group"),
        "{metadata}"
    );
    root.query_drop("SET GLOBAL binlog_row_metadata = FULL")
        .await
        .unwrap();

    // NULL: purged as soon as possible. check fails and run refuses.
    let (text, line) = failed_check(&s.setup, "binlog retention");
    assert!(
        line.contains("binlog retention hours is NULL")
            && line.contains("CALL mysql.rds_set_configuration('binlog retention hours', 24)"),
        "{text}"
    );
    let log = refused_run(&s.setup).await;
    assert!(log.contains("FAIL  binlog retention"), "{log}");

    // 1 hour: below the default minimum of 24.
    let set = |hours: &str| {
        format!("UPDATE mysql.rds_configuration SET value = {hours} WHERE name = 'binlog retention hours'")
    };
    root.query_drop(set("'1'")).await.unwrap();
    let (text, line) = failed_check(&s.setup, "binlog retention");
    assert!(
        line.contains("binlog retention hours is 1") && line.contains("at least 24h"),
        "{text}"
    );

    // 7 days passes.
    root.query_drop(set("'168'")).await.unwrap();
    let output = s.setup.command(&["check"]);
    let text = harness::forwarder::output_text(&output);
    assert!(output.status.success(), "{text}");
    let line = check_line(&text, "binlog retention");
    assert!(
        line.starts_with("PASS") && line.contains("binlog retention hours is 168"),
        "{line}"
    );

    // 1 hour, accepted by a lower minimum: the headroom counts from the
    // smaller of RDS's hour and the server's 7 days.
    root.query_drop(set("'1'")).await.unwrap();
    assert_eq!(headroom_under_minimum(db, broker, "1").await, 3600.0);

    // NULL, with the minimum turned off: no headroom at all.
    root.query_drop(set("NULL")).await.unwrap();
    assert_eq!(headroom_under_minimum(db, broker, "0").await, 0.0);
}

/// The purge headroom a forwarder run with `mysql.min_binlog_retention_hours
/// = minimum` reports once it has published an order's event.
async fn headroom_under_minimum(db: &DbServer, broker: &Broker, minimum: &str) -> f64 {
    let port = free_port();
    let s = Scenario::new(db, broker, 1, |c| {
        with_metrics(c, port).mysql("min_binlog_retention_hours", minimum)
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut conn = s.conn(db).await;
    let written = write_order(&mut conn, 1, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    let (_, body) = http_get(port, "/metrics");
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    sample(&body, "outbox_forwarder_binlog_purge_headroom_seconds")
}

/// Azure Database for MySQL Flexible Server deletes a binlog as soon as no
/// backup or replica holds it while `binlog_expire_logs_seconds` is 0, its
/// default; MySQL reads 0 as "never". A MySQL server here shows Azure's
/// sign, its documented `innodb_tmpdir` of `/mnt/temp`, with the expiry at
/// 0: check fails, run refuses, and with the minimum off the headroom is 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_azure_an_expiry_of_zero_purges_at_once_and_check_fails() {
    let tmpdir = harness::server::mysql_root().join("mnt/temp");
    std::fs::create_dir_all(&tmpdir).unwrap();
    let db = &DbServer::start(
        Flavor::MySql,
        &[
            "--binlog-expire-logs-seconds=0",
            "--innodb-tmpdir=/mnt/temp",
        ],
    )
    .await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;

    let (text, line) = failed_check(&s.setup, "binlog retention");
    assert!(
        line.contains("binlog_expire_logs_seconds=0 on Azure")
            && line.contains("az mysql flexible-server parameter set")
            && line.contains("--value 86400"),
        "{text}"
    );
    let log = refused_run(&s.setup).await;
    assert!(log.contains("FAIL  binlog retention"), "{log}");

    assert_eq!(headroom_under_minimum(db, broker, "0").await, 0.0);
}

/// `checkpoint reset` removes what a run stored, through the one writer,
/// and says so; a second reset says there was nothing to remove, and the
/// next run starts at `checkpoint.start` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_reset_removes_the_stored_checkpoint_and_says_when_there_was_none() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    assert!(forwarder.terminate().success());
    assert!(
        s.setup.checkpoint().is_some(),
        "the run stored a checkpoint"
    );

    let reset = s.setup.command(&["checkpoint", "reset"]);
    let text = harness::forwarder::output_text(&reset);
    assert!(reset.status.success(), "{text}");
    assert!(text.contains("checkpoint removed"), "{text}");
    assert!(s.setup.checkpoint().is_none(), "{text}");

    let again = s.setup.command(&["checkpoint", "reset"]);
    let text = harness::forwarder::output_text(&again);
    assert!(again.status.success(), "{text}");
    assert!(text.contains("no checkpoint was stored"), "{text}");
    let mut forwarder = s.setup.spawn(&[]);
    forwarder
        .wait_for_log(
            "no stored checkpoint; starting at checkpoint.start",
            TIMEOUT,
        )
        .await;
    assert!(forwarder.terminate().success());
}
