//! The consumer's database connection, secured as the forwarder's is.

use harness::tls::TestPki;

use super::*;

/// Defect: the inbox's MySQL connection had no TLS settings and took its
/// password only from the URL (and built alone, its driver had no TLS).
/// With `[mysql.tls]` at `verify_identity` and the password in a file, the
/// pool signs in to an account that requires TLS, and its session is
/// encrypted; without TLS the same account is refused; plaintext to a host
/// that is not this one is refused before connecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_signs_in_over_verified_tls_with_its_password_from_a_file() {
    let pki = TestPki::generate("inbox CA");
    let (args, _copied) = pki.server_args(Flavor::MariaDb);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let db = DbServer::start(Flavor::MariaDb, &args).await;
    db.root()
        .await
        .query_drop("CREATE USER 'consumer'@'%' IDENTIFIED BY 'in-a-file' REQUIRE SSL")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("mysql-password");
    std::fs::write(&password, "in-a-file\n").unwrap();
    // The certificate names 127.0.0.1 (verified: "localhost" is refused).
    let url = format!("mysql://consumer@127.0.0.1:{}/", db.port);
    let secured = MysqlSection {
        password_file: Some(password.clone()),
        tls: toml::from_str(&format!(
            "mode = \"verify_identity\"\nca_file = {:?}",
            pki.ca().display().to_string()
        ))
        .unwrap(),
        ..MysqlSection::new(url.clone())
    };
    let pool = Pool::new(Inbox::pool_options(&secured).unwrap());
    let mut conn = pool.get_conn().await.unwrap();
    let cipher: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .unwrap();
    let cipher = cipher.map(|(_, value)| value).unwrap_or_default();
    assert!(!cipher.is_empty(), "the session is not encrypted");
    drop(conn);
    pool.disconnect().await.unwrap();

    // The same account without TLS: the server refuses it.
    let plain = MysqlSection {
        password_file: Some(password.clone()),
        ..MysqlSection::new(url)
    };
    let pool = Pool::new(Inbox::pool_options(&plain).unwrap());
    let refused = pool.get_conn().await.map(drop).unwrap_err().to_string();
    assert!(refused.contains("Access denied"), "{refused}");
    let _ = pool.disconnect().await;

    // A remote host in plaintext is refused by the configuration itself.
    let remote = MysqlSection::new("mysql://consumer@db.example:3306/shop");
    let why = Inbox::pool_options(&remote).unwrap_err();
    assert!(
        why.contains("db.example") && why.contains("allow_plaintext"),
        "{why}"
    );
    assert!(Inbox::pool_options(&MysqlSection {
        password_env: Some("X".into()),
        password_file: Some(password),
        ..MysqlSection::new("mysql://consumer@127.0.0.1:3306/shop")
    })
    .unwrap_err()
    .contains("keep one"));
}
