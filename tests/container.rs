//! The image, run under podman against the harness's MariaDB and broker
//! (tansu): what the Dockerfile builds is what users run (see
//! `harness::container` for what stands in for the public base images).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use harness::container::{Container, IMAGE_USER};
use harness::http::{http_get, with_metrics};
use harness::workload::*;
use harness::{free_port, Broker, DbServer, Flavor, TIMEOUT};
use outbox_checkpoint::CheckpointStore;

/// Events forwarded by the container as the image's unprivileged user on
/// a read-only root; its HEALTHCHECK (the binary's own `healthcheck`)
/// passes while it runs; SIGTERM (`podman stop`) drains and checkpoints
/// and exits 0; SIGKILL under load, then a start of the same container,
/// loses and repeats nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_forwards_stops_cleanly_on_sigterm_and_loses_and_repeats_nothing_through_a_kill()
{
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let port = free_port();
    let s = Scenario::new(db, broker, 2, |c| with_metrics(c, port)).await;
    let container = Container::run(&s.setup, &[]);
    container
        .wait_for_log_count("binlog stream started", 1, TIMEOUT)
        .await;
    // Who it runs as, and that nothing but its volume is writable.
    assert_eq!(container.inspect("{{.Config.User}}"), IMAGE_USER);
    assert_eq!(container.inspect("{{.HostConfig.ReadonlyRootfs}}"), "true");
    // An init is PID 1, reaping what a token command leaves behind; the
    // forwarder is its child.
    assert_eq!(container.exec(&["cat", "/proc/1/comm"]), "tini");
    assert!(container.healthcheck(), "{}", container.log());
    let (status, body) = http_get(port, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));

    let mut conn = s.conn(db).await;
    let mut written = write_order(&mut conn, 5, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);

    // SIGTERM: the drain and the last checkpoint, exit 0.
    assert_eq!(
        container.stop(Duration::from_secs(30)),
        0,
        "{}",
        container.log()
    );
    assert!(
        container.log().contains("stopped cleanly"),
        "{}",
        container.log()
    );
    let stored = CheckpointStore::open(&container.volume.join("checkpoint"))
        .unwrap()
        .load()
        .unwrap()
        .expect("the last checkpoint is on the volume");
    let published = broker.consume(&s.topic, written.len(), TIMEOUT, Duration::ZERO);
    for record in &published {
        let position = record.binlog_position();
        assert!(
            position.compare(&stored.position).unwrap().is_le(),
            "{position} is past the last checkpoint {}",
            stored.position
        );
    }

    // Under load: SIGKILL between checkpoints, the writes go on, the same
    // container starts again from its volume.
    container.start();
    container
        .wait_for_log_count("binlog stream started", 2, TIMEOUT)
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = steady_load(s.conn(db).await, stop.clone());
    let before_kill: HashSet<String> = broker
        .consume(&s.topic, written.len() + 50, TIMEOUT, Duration::ZERO)
        .iter()
        .map(|r| r.key_str().to_owned())
        .collect();
    assert_eq!(container.kill9(), 137, "killed by SIGKILL");
    assert_eq!(
        container.log().matches("stopped cleanly").count(),
        1,
        "only the SIGTERM stopped cleanly:\n{}",
        container.log()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    container.start();
    container
        .wait_for_log_count("resuming from the stored checkpoint", 2, TIMEOUT)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    written.extend(load.await.unwrap());
    let all = ids(&written);
    assert!(
        all.len() > before_kill.len(),
        "writes went on past the kill"
    );
    let records = broker.consume_covering(&s.topic, &all, TIMEOUT, Duration::from_secs(2));
    assert_each_once(&records, &all);
    assert_eq!(
        container.stop(Duration::from_secs(30)),
        0,
        "{}",
        container.log()
    );
}

/// The binary's `healthcheck`, as the image's HEALTHCHECK runs it: 0 while
/// `/healthz` answers, 1 when nothing listens or no listener is
/// configured (saying which); `--ready` asks `/readyz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_asks_the_running_forwarder_and_says_why_not() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let port = free_port();
    let s = Scenario::new(db, broker, 1, |c| with_metrics(c, port)).await;
    let (code, text) = healthcheck(&s.setup, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("unhealthy: GET /healthz on 127.0.0.1:{port}")),
        "{text}"
    );
    let mut forwarder = s.setup.spawn_streaming().await;
    let (code, text) = healthcheck(&s.setup, &[]);
    assert_eq!((code, text.as_str()), (0, "ok\n"));
    let mut conn = s.conn(db).await;
    let written = write_order(&mut conn, 1, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    let (code, text) = healthcheck(&s.setup, &["--ready"]);
    assert_eq!((code, text.as_str()), (0, "ready\n"));
    assert!(forwarder.terminate().success(), "{}", forwarder.log());

    let off = Scenario::new(db, broker, 1, |c| c).await;
    let (code, text) = healthcheck(&off.setup, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("sets no metrics.listen"), "{text}");
}

fn healthcheck(setup: &harness::ForwarderSetup, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["healthcheck"];
    args.extend_from_slice(extra);
    let output = setup.command(&args);
    (
        output.status.code().unwrap(),
        harness::forwarder::output_text(&output),
    )
}

/// `docker-compose.yml` as users run it, by `podman-compose`: an order
/// written to the compose MySQL through its published port reaches the
/// notification planner (its `notification_job` row, once), through the
/// forwarder and the broker; the forwarder's metrics are on the published
/// port. MariaDB and tansu stand in for the mysql and Kafka images
/// (`harness::container::stand_in_images`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_file_carries_an_order_to_the_notification_planner() {
    use mysql_async::prelude::Queryable;
    let compose = harness::container::Compose::up();
    let url = format!(
        "mysql://root:root@127.0.0.1:{}/shop?prefer_socket=false",
        compose.mysql_port
    );
    // The first start runs the migrations: the tables exist once it is done.
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut conn = loop {
        if let Ok(mut conn) = mysql_async::Conn::from_url(&url).await {
            let ready: Option<u64> = conn
                .query_first(
                    "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'shop' \
                     AND TABLE_NAME = 'notification_job'",
                )
                .await
                .unwrap_or(None);
            if ready == Some(1) {
                break conn;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the compose MySQL did not come up:\n{}",
            compose.logs("mysql")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // MySQL (root/root), Kafka and the metrics on the host's loopback only.
    for (service, port) in [
        ("mysql", compose.mysql_port),
        ("kafka", compose.kafka_port),
        ("forwarder", compose.metrics_port),
    ] {
        assert_eq!(
            compose.published(service),
            [format!("127.0.0.1:{port}")],
            "{service}"
        );
    }
    // The forwarder streams (from "latest": what is written from now on).
    harness::http::wait_for_status(compose.metrics_port, "/readyz", 200, TIMEOUT).await;

    // The planner subscribed to outbox.order before it existed: the
    // forwarder creates it before the first event ([kafka.topics]), and
    // the planner finds it within seconds, not librdkafka's five minutes.
    let written = write_order(&mut conn, 1, true).await;
    let inserted = std::time::Instant::now();
    let event_id = &written[0].id;
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let jobs: Vec<(String, String)> = conn
            .exec(
                "SELECT event_id, status FROM notification_job WHERE event_id = ?",
                (event_id,),
            )
            .await
            .unwrap();
        if !jobs.is_empty() {
            assert_eq!(jobs, [(event_id.clone(), "PENDING".to_string())]);
            let waited = inserted.elapsed();
            assert!(
                waited < Duration::from_secs(10),
                "the first job came {waited:?} after its order"
            );
            let log = compose.logs("forwarder");
            assert!(log.contains("created the topic ([kafka.topics])"), "{log}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no job for {event_id}:\nforwarder:\n{}\nplanner:\n{}",
            compose.logs("forwarder"),
            compose.logs("planner")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, body) = http_get(compose.metrics_port, "/metrics");
    assert_eq!(
        harness::http::sample(
            &body,
            "outbox_forwarder_events_forwarded_total{topic=\"outbox.order\"}"
        ),
        1.0
    );
    // The planner measured the order from its commit to the job's (counted
    // just after the job's commit).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = http_get(compose.planner_port, "/metrics");
        let count = harness::http::sample(
            &body,
            "outbox_inbox_commit_to_handled_seconds_count{consumer=\"notification-planner\"}",
        );
        if count == 1.0 {
            break;
        }
        assert!(
            count == 0.0 && std::time::Instant::now() < deadline,
            "{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// deploy/kubernetes as `kubectl apply -k` runs it, played by podman
/// (`harness::kube`: one pod per instance, on the host network) against
/// the harness's MariaDB and broker (tansu), from nothing, with one
/// ConfigMap and the brokers and instance name in each pod's environment
/// (`OUTBOX_FORWARDER__...` variables): each pod's init
/// container starts the group (the first writes its first record, the
/// second finds it), both pods are ready on the readiness probe's path,
/// 500 orders written afterwards reach Kafka once each; the active pod
/// removed, the other takes over and 200 more arrive, nothing lost or
/// repeated; a new pod finds the group started and writes no first record
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_manifests_start_the_group_and_publish_through_a_pods_removal() {
    use harness::kube::KubePod;
    use harness::server::{FORWARDER_PASSWORD, FORWARDER_USER};
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    let group = harness::unique("kube");
    let group_topic = format!("outbox.forwarder.checkpoints.{group}");
    let server = server_id();
    // The configuration an operator puts in the ConfigMap: the password
    // a file of the Secret, the store on the pod's emptyDir; the brokers
    // and each pod's instance name from the pod's environment, which wins
    // over the file (whose brokers do not exist).
    let configuration = |port: u16| {
        let body = forwarder_config(db, broker, &s.schema, &s.topic, server)
            .urls(vec![format!(
                "mysql://{FORWARDER_USER}@127.0.0.1:{}",
                db.port
            )])
            .mysql(
                "password_file",
                "\"/run/secrets/outbox-forwarder/mysql-password\"",
            );
        let text = with_metrics(body, port)
            .section(&format!("[ha]\ngroup = \"{group}\"\nlease_ms = 4000\n"))
            .to_string()
            .replace("{checkpoint}", "/var/lib/outbox-forwarder/checkpoint");
        let real = format!("brokers = \"{}\"", broker.bootstrap());
        assert!(text.contains(&real), "{text}");
        text.replace(&real, "brokers = \"kafka.invalid:9092\"")
    };
    let secrets = [("mysql-password", FORWARDER_PASSWORD)];
    let ports = [free_port(), free_port(), free_port()];
    let bootstrap = broker.bootstrap();
    let play = |suffix: &str, port: u16| {
        let env = [
            ("OUTBOX_FORWARDER__KAFKA__BROKERS", bootstrap.as_str()),
            ("OUTBOX_FORWARDER__HA__INSTANCE", suffix),
        ];
        KubePod::play(suffix, &configuration(port), &secrets, &env)
    };

    let a = play("a", ports[0]);
    a.wait_for_ok(ports[0], "/readyz/group", TIMEOUT).await;
    let b = play("b", ports[1]);
    b.wait_for_ok(ports[1], "/readyz/group", TIMEOUT).await;
    // Started by an init container's `group start`, not by an instance.
    let first_records = |records: &[harness::Record]| {
        records
            .iter()
            .filter_map(|r| r.headers.get("group_started_by"))
            .cloned()
            .collect::<Vec<_>>()
    };
    let records = broker.consume(&group_topic, 1, TIMEOUT, Duration::from_secs(1));
    assert_eq!(first_records(&records), ["group start"]);

    let mut conn = s.conn(db).await;
    let mut written = Vec::new();
    for _ in 0..500 {
        written.extend(write_order(&mut conn, 1, true).await);
    }
    let records =
        broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::from_secs(1));
    assert_each_once(&records, &ids(&written));

    // The active pod goes (SIGTERM, as a deleted pod); the other takes over.
    let active = |port: u16| {
        let (_, body) = http_get(port, "/metrics");
        harness::http::sample(
            &body,
            &format!("outbox_forwarder_ha_active{{group=\"{group}\"}}"),
        )
    };
    let (gone, other, other_port) = if active(ports[0]) == 1.0 {
        (&a, &b, ports[1])
    } else {
        assert_eq!(active(ports[1]), 1.0, "one pod is active");
        (&b, &a, ports[0])
    };
    gone.down();
    assert!(!gone.exists(), "the pod is removed");
    let deadline = std::time::Instant::now() + TIMEOUT;
    while active(other_port) != 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the other pod did not take over:\n{}",
            other.logs("forwarder")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..200 {
        written.extend(write_order(&mut conn, 1, true).await);
    }
    let all = ids(&written);
    let records = broker.consume_covering(&s.topic, &all, TIMEOUT, Duration::from_secs(2));
    assert_each_once(&records, &all);

    // A new pod: its init container finds the group's record and writes
    // none; it is ready as a standby.
    let c = play("c", ports[2]);
    c.wait_for_ok(ports[2], "/readyz/group", TIMEOUT).await;
    let (_, body) = http_get(ports[2], "/metrics");
    assert_eq!(
        harness::http::sample(
            &body,
            &format!("outbox_forwarder_ha_active{{group=\"{group}\"}}")
        ),
        0.0,
        "a standby"
    );
    let records = broker.consume(&group_topic, 1, TIMEOUT, Duration::from_secs(2));
    assert_eq!(first_records(&records), ["group start"], "one first start");
    drop(c);
}
