//! TLS to MariaDB and MySQL in each verification mode, and accounts that require
//! TLS or a client certificate.

use super::*;

/// The account that must present a client certificate signed by the CA.
const X509_USER: &str = "forwarder_x509";

/// A server of `flavor` serving TLS with a certificate for 127.0.0.1,
/// shared by the tests of this file; each test uses its own schema and
/// topic.
async fn tls_server(flavor: Flavor) -> &'static (TestPki, DbServer) {
    type Served = (TestPki, DbServer);
    static MARIADB: OnceCell<Served> = OnceCell::const_new();
    static MYSQL: OnceCell<Served> = OnceCell::const_new();
    let cell = match flavor {
        Flavor::MariaDb => &MARIADB,
        Flavor::MySql => &MYSQL,
    };
    cell.get_or_init(|| async {
        let pki = TestPki::generate("server CA");
        let (args, copied) = pki.server_args(flavor);
        // Inside MySQL's root, as long as the server runs (to the end
        // of the test process; the next one sweeps it).
        std::mem::forget(copied);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let db = DbServer::start(flavor, &args).await;
        let mut root = db.root().await;
        root.query_drop(format!("ALTER USER '{FORWARDER_USER}'@'%' REQUIRE SSL"))
            .await
            .unwrap();
        root.query_drop(format!(
            "CREATE USER '{X509_USER}'@'%' IDENTIFIED BY '{FORWARDER_PASSWORD}' REQUIRE X509"
        ))
        .await
        .unwrap();
        root.query_drop(format!(
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{X509_USER}'@'%'"
        ))
        .await
        .unwrap();
        (pki, db)
    })
    .await
}

// The verification modes on both flavors: MySQL serves its certificate
// from its own TLS stack, and its account signs in with
// caching_sha2_password over the verified channel.
harness::on_both_flavors!(
    verify_identity_with_the_servers_ca_streams_events_end_to_end,
    verify_ca_with_another_ca_refuses_the_servers_certificate,
    verify_identity_refuses_a_host_name_the_certificate_does_not_carry,
);

/// `[mysql.tls]` with `mode` and, when given, `ca_file`.
fn tls_section(mode: &str, ca: Option<&std::path::Path>) -> String {
    let mut section = format!("\n[mysql.tls]\nmode = \"{mode}\"\n");
    if let Some(ca) = ca {
        section += &format!("ca_file = {:?}\n", ca.display().to_string());
    }
    section
}

async fn verify_identity_with_the_servers_ca_streams_events_end_to_end(flavor: Flavor) {
    let (pki, db) = tls_server(flavor).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    let mut conn = db.create_schema(&schema).await;
    let config = forwarder_config(db, broker, &schema, &topic, server_id())
        + &tls_section("verify_identity", Some(&pki.ca()));
    let setup = ForwarderSetup::new(&config);

    let check = setup.command(&["check"]);
    let text = output_text(&check);
    assert!(check.status.success(), "{text}");
    let tls = check_line(&text, "mysql tls");
    assert!(
        tls.starts_with("PASS") && tls.contains("mode verify_identity, TLSv1."),
        "{tls}"
    );

    let mut forwarder = setup.spawn_streaming().await;
    // One order at a time, each published before the next is written, so
    // that every event is a produce batch of its own: tansu 0.6 reports the
    // high watermark of a multi-record batch as if it held one record, and
    // `verify` below reads up to the high watermark.
    let mut written = Vec::new();
    for n in 1..=3 {
        written.extend(write_order(&mut conn, 1, false).await);
        broker.consume(&topic, n, TIMEOUT, Duration::ZERO);
    }
    let records = broker.consume(&topic, 3, TIMEOUT, SETTLE);
    assert_eq!(records.len(), 3, "each event exactly once");
    let keys: std::collections::HashSet<String> =
        records.iter().map(|r| r.key_str().to_owned()).collect();
    assert_eq!(keys, ids(&written));
    for (record, event) in records.iter().zip(&written) {
        assert_eq!(record.key_str(), event.id);
        assert_same_payload(flavor, &record.payload, &event.payload, &event.id);
    }
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    assert!(!forwarder.log().contains(FORWARDER_PASSWORD));

    // The one-shot commands connect the same way.
    let verify = setup.command(&["verify"]);
    let text = output_text(&verify);
    assert!(verify.status.success(), "{text}");
    assert!(
        text.contains(
            "reconciliation: outbox rows 3, Kafka records 3, distinct event ids 3, missing 0"
        ),
        "{text}"
    );
    let now = db.position().await;
    let set = setup.command(&["checkpoint", "set", &now.to_string()]);
    let text = output_text(&set);
    assert!(set.status.success(), "{text}");
    assert_eq!(setup.checkpoint().unwrap().position, now);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tls_the_account_requiring_ssl_is_refused_and_run_exits_non_zero() {
    let (pki, db) = tls_server(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    db.create_schema(&schema).await;
    let plain = forwarder_config(db, broker, &schema, &topic, server_id());

    // The same account and password log in once TLS is on: what is refused
    // below is the unencrypted session, nothing else.
    let with_tls =
        ForwarderSetup::new(&(plain.clone() + &tls_section("verify_ca", Some(&pki.ca()))))
            .command(&["check"]);
    assert!(with_tls.status.success(), "{}", output_text(&with_tls));

    let log = refused_run(&ForwarderSetup::new(&plain)).await;
    assert!(
        log.contains("FAIL  mysql connection")
            && log.contains(&format!("Access denied for user '{FORWARDER_USER}'"))
            && log.contains("[mysql.tls]"),
        "{log}"
    );
    assert!(!log.contains(FORWARDER_PASSWORD), "{log}");
}

async fn verify_ca_with_another_ca_refuses_the_servers_certificate(flavor: Flavor) {
    let (pki, db) = tls_server(flavor).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    db.create_schema(&schema).await;
    let plain = forwarder_config(db, broker, &schema, &topic, server_id());
    let other = TestPki::generate("another CA");

    let right = ForwarderSetup::new(&(plain.clone() + &tls_section("verify_ca", Some(&pki.ca()))))
        .command(&["check"]);
    assert!(right.status.success(), "{}", output_text(&right));

    let setup = ForwarderSetup::new(&(plain + &tls_section("verify_ca", Some(&other.ca()))));
    let (_, line) = failed_check(&setup, "mysql connection");
    assert!(
        line.contains("TLS to MySQL failed")
            && line.contains("invalid peer certificate: UnknownIssuer"),
        "{line}"
    );

    // `run` stops at once instead of retrying a certificate forever.
    let log = refused_run(&setup).await;
    assert!(
        log.contains("invalid peer certificate: UnknownIssuer") && log.contains("[mysql.tls]"),
        "{log}"
    );
}

async fn verify_identity_refuses_a_host_name_the_certificate_does_not_carry(flavor: Flavor) {
    let (pki, db) = tls_server(flavor).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    db.create_schema(&schema).await;
    // `localhost` reaches the same server, but the certificate names only 127.0.0.1.
    let by_name = replaced(
        &forwarder_config(db, broker, &schema, &topic, server_id()).to_string(),
        "@127.0.0.1:",
        "@localhost:",
    );
    for mode in ["verify_identity", "verify_ca"] {
        let setup = ForwarderSetup::new(&(by_name.clone() + &tls_section(mode, Some(&pki.ca()))));
        let check = setup.command(&["check"]);
        let text = output_text(&check);
        let line = check_line(&text, "mysql connection");
        // verify_ca should skip the name; mysql_async 0.37.1 still compares it
        // (blackbeam/mysql_async#404), which is stricter, not weaker. When an
        // upgrade fixes it, this assertion fails for verify_ca: update the
        // docs/security.md and config/forwarder.toml then.
        assert!(
            line.starts_with("FAIL")
                && line.contains("certificate not valid for name \"localhost\""),
            "{mode}: {line}"
        );
    }
    // `required` encrypts without checking the certificate at all.
    let setup = ForwarderSetup::new(&(by_name + &tls_section("required", None)));
    let check = setup.command(&["check"]);
    let text = output_text(&check);
    assert!(check.status.success(), "{text}");
    assert!(
        check_line(&text, "mysql tls").contains("mode required, TLSv1."),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_satisfies_an_account_requiring_x509() {
    let (pki, db) = tls_server(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    db.create_schema(&schema).await;
    let config = replaced(
        &forwarder_config(db, broker, &schema, &topic, server_id()).to_string(),
        &format!("//{FORWARDER_USER}:"),
        &format!("//{X509_USER}:"),
    ) + &tls_section("verify_identity", Some(&pki.ca()));

    let without = ForwarderSetup::new(&config).command(&["check"]);
    let text = output_text(&without);
    let line = check_line(&text, "mysql connection");
    assert!(
        line.starts_with("FAIL") && line.contains(&format!("Access denied for user '{X509_USER}'")),
        "{line}"
    );

    let with = ForwarderSetup::new(&format!(
        "{config}client_cert_file = {:?}\nclient_key_file = {:?}\n",
        pki.client_cert().display().to_string(),
        pki.client_key().display().to_string()
    ))
    .command(&["check"]);
    let text = output_text(&with);
    assert!(with.status.success(), "{text}");
    assert!(
        check_line(&text, "mysql connection").starts_with("PASS")
            && check_line(&text, "mysql connection").contains(X509_USER),
        "{text}"
    );
}
