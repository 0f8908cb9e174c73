//! MySQL's default account plugin, caching_sha2_password, signing in with
//! nothing cached on the server: over TLS (the password sent inside it),
//! over plain TCP (encrypted with the server's RSA key), and the error a
//! user gets from a server that offers neither.

use super::*;

/// A new account of `db` with the forwarder's grants and password, signed
/// in by nobody yet (the server caches a password only at its first
/// successful sign-in), and `config` rewritten to use it.
async fn fresh_account(db: &DbServer, config: &str) -> String {
    let user = unique("sha2");
    db.execute(&[
        format!(
            "CREATE USER '{user}'@'%' IDENTIFIED WITH caching_sha2_password \
             BY '{FORWARDER_PASSWORD}'"
        ),
        format!("GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{user}'@'%'"),
    ])
    .await;
    assert_eq!(db.account_plugin(&user).await, "caching_sha2_password");
    replaced(
        config,
        &format!("//{FORWARDER_USER}:"),
        &format!("//{user}:"),
    )
}

/// `check`'s configuration for a new schema and topic on `db`.
async fn check_config(db: &DbServer) -> String {
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    db.create_schema(&schema).await;
    forwarder_config(db, broker, &schema, &topic, server_id()).to_string()
}

const TLS_REQUIRED: &str = "\n[mysql.tls]\nmode = \"required\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caching_sha2_password_signs_in_over_plain_tcp_with_the_rsa_key_and_over_tls() {
    let db = DbServer::shared(Flavor::MySql).await;
    let config = check_config(db).await;
    for tls in ["", TLS_REQUIRED] {
        let setup = ForwarderSetup::new(&(fresh_account(db, &config).await + tls));
        let check = setup.command(&["check"]);
        let text = output_text(&check);
        assert!(check.status.success(), "{text}");
        let session = check_line(&text, "mysql tls");
        let encrypted = session.contains("TLSv1.");
        assert_eq!(encrypted, !tls.is_empty(), "{session}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tls_or_an_rsa_key_caching_sha2_password_is_refused_with_what_to_set() {
    // No RSA key pair: a first sign-in is possible over TLS only.
    let db = DbServer::start(
        Flavor::MySql,
        &[
            "--caching-sha2-password-auto-generate-rsa-keys=OFF",
            "--caching-sha2-password-private-key-path=/nonexistent-private.pem",
            "--caching-sha2-password-public-key-path=/nonexistent-public.pem",
        ],
    )
    .await;
    let config = check_config(&db).await;
    let plain = ForwarderSetup::new(&fresh_account(&db, &config).await);
    let (text, line) = failed_check(&plain, "mysql connection");
    assert!(
        line.contains("(error 1045)"),
        "the server refused it: {text}"
    );
    assert!(!text.contains(FORWARDER_PASSWORD), "{text}");
    assert!(
        line.contains("caching_sha2_password") && line.contains("[mysql.tls]"),
        "names the plugin and what to set: {line}"
    );

    let tls = ForwarderSetup::new(&(fresh_account(&db, &config).await + TLS_REQUIRED));
    let check = tls.command(&["check"]);
    assert!(check.status.success(), "{}", output_text(&check));
}
