//! Passwords kept outside the configuration file, and out of the log.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_from_a_variable_or_a_file_runs_and_never_reaches_the_log() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    let mut conn = db.create_schema(&schema).await;
    // The URL's own password is wrong: only the one supplied outside can log in.
    let config = replaced(
        &forwarder_config(db, broker, &schema, &topic, server_id()).to_string(),
        &format!(":{FORWARDER_PASSWORD}@"),
        ":placeholder-not-used@",
    );
    assert!(!config.contains(FORWARDER_PASSWORD));
    let variable = unique("OUTBOX_MYSQL_PASSWORD");
    let from_env = replaced(
        &config,
        "heartbeat_ms",
        &format!("password_env = \"{variable}\"\nheartbeat_ms"),
    );
    let secrets = tempfile::tempdir().unwrap();
    let password_file = secrets.path().join("mysql-password");
    std::fs::write(&password_file, format!("{FORWARDER_PASSWORD}\n")).unwrap();
    let from_file = replaced(
        &config,
        "heartbeat_ms",
        &format!(
            "password_file = {:?}\nheartbeat_ms",
            password_file.display().to_string()
        ),
    );

    // `check` reads the same file.
    let check = ForwarderSetup::new(&from_file).command(&["check"]);
    let check_text = output_text(&check);
    assert!(check.status.success(), "{check_text}");
    assert!(!check_text.contains(FORWARDER_PASSWORD), "{check_text}");

    let mut delivered = 0;
    for (what, body, env) in [
        (
            "password_env",
            &from_env,
            vec![(variable.as_str(), FORWARDER_PASSWORD)],
        ),
        ("password_file", &from_file, vec![]),
    ] {
        let setup = ForwarderSetup::new(body);
        let mut forwarder = setup.spawn_with_env(&[], &env);
        forwarder
            .wait_for_log("binlog stream started", TIMEOUT)
            .await;
        let written = write_order(&mut conn, 1, false).await;
        delivered += 1;
        let records = broker.consume(&topic, delivered, TIMEOUT, Duration::ZERO);
        assert!(
            records.iter().any(|r| r.key_str() == written[0].id),
            "{what}: the event arrived"
        );
        assert!(forwarder.terminate().success(), "{what}");
        let log = forwarder.log();
        assert!(!log.contains(FORWARDER_PASSWORD), "{what}: {log}");
        assert!(!log.contains("placeholder-not-used"), "{what}: {log}");
    }

    // A variable that is not set stops the forwarder before it connects,
    // naming the variable.
    let log = refused_run(&ForwarderSetup::new(&from_env)).await;
    assert!(
        log.contains(&format!(
            "mysql.password_env: the environment variable {variable} is not set"
        )),
        "{log}"
    );
}
