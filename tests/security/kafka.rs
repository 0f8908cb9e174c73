//! Kafka over TLS with SASL/SCRAM, through a TLS front that requires a
//! client certificate.

use super::*;

/// The SCRAM user of the secured broker.
const KAFKA_USER: &str = "outbox-forwarder";
const KAFKA_PASSWORD: &str = "kafka-scram-secret-8c1e";

/// A broker behind TLS (client certificate required) that requires
/// SASL/SCRAM-SHA-512, with one topic; shared by the Kafka security tests.
async fn secured_broker() -> &'static (TestPki, Broker, String) {
    static BROKER: OnceCell<(TestPki, Broker, String)> = OnceCell::const_new();
    BROKER
        .get_or_init(|| async {
            let pki = TestPki::generate("broker CA");
            let topic = unique("orders");
            let broker = Broker::start_secured(Security {
                tls: Some(&pki),
                scram_user: Some((KAFKA_USER, KAFKA_PASSWORD)),
                topics: &[(&topic, 1)],
            })
            .await;
            (pki, broker, topic)
        })
        .await
}

/// A fresh schema on the shared MariaDB and the forwarder's configuration
/// for the secured broker.
struct Secured {
    pki: &'static TestPki,
    broker: &'static Broker,
    topic: &'static str,
    /// A root connection using the schema.
    conn: mysql_async::Conn,
    config: String,
    /// Holds the password file while the forwarder runs.
    _secrets: tempfile::TempDir,
}

/// [`Secured`], its SCRAM password read from a file holding `password`
/// rather than from the TOML.
async fn secured(password: &str) -> Secured {
    let (pki, broker, topic) = secured_broker().await;
    let db = DbServer::shared(Flavor::MariaDb).await;
    let schema = unique("shop");
    let conn = db.create_schema(&schema).await;
    let secrets = tempfile::tempdir().unwrap();
    let password_file = secrets.path().join("kafka-password");
    std::fs::write(&password_file, format!("{password}\n")).unwrap();
    let config = forwarder_config(db, broker, &schema, topic, server_id())
        .without_property("sasl.password")
        .kafka(
            "properties_files",
            &format!(
                "{{ \"sasl.password\" = {:?} }}",
                password_file.display().to_string()
            ),
        )
        .to_string();
    assert!(
        config.contains("\"security.protocol\" = \"sasl_ssl\""),
        "{config}"
    );
    assert!(!config.contains(KAFKA_PASSWORD), "{config}");
    Secured {
        pki,
        broker,
        topic,
        conn,
        config,
        _secrets: secrets,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_tls_with_scram_streams_events_and_keeps_the_password_out() {
    let Secured {
        broker,
        topic,
        mut conn,
        config,
        _secrets,
        ..
    } = secured(KAFKA_PASSWORD).await;
    let setup = ForwarderSetup::new(&config);

    let check = setup.command(&["check"]);
    let text = output_text(&check);
    assert!(check.status.success(), "{text}");
    assert!(
        check_line(&text, "kafka brokers").starts_with("PASS"),
        "{text}"
    );
    assert!(
        check_line(&text, "idempotent producer").starts_with("PASS"),
        "{text}"
    );
    assert!(!text.contains(KAFKA_PASSWORD), "{text}");

    let mut forwarder = setup.spawn_streaming().await;
    let written = write_order(&mut conn, 3, true).await;
    let records = broker.consume(topic, 3, TIMEOUT, SETTLE);
    assert_eq!(records.len(), 3, "each event exactly once");
    for (record, event) in records.iter().zip(&written) {
        assert_eq!(record.key_str(), event.id);
        assert_eq!(record.payload, event.payload.as_bytes());
    }
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    let log = forwarder.log();
    assert!(!log.contains(KAFKA_PASSWORD), "{log}");

    // `verify` reads the topic back through the same TLS and SCRAM settings.
    let verify = setup.command(&["verify"]);
    let text = output_text(&verify);
    assert!(verify.status.success(), "{text}");
    assert!(
        text.contains(
            "reconciliation: outbox rows 3, Kafka records 3, distinct event ids 3, missing 0"
        ),
        "{text}"
    );
    assert!(!text.contains(KAFKA_PASSWORD), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_scram_password_fails_check_and_run_refuses_to_start() {
    let wrong = "not-the-kafka-password";
    let secured = secured(wrong).await;
    let setup = ForwarderSetup::new(&secured.config);

    let (text, line) = failed_check(&setup, "kafka brokers");
    assert!(
        line.contains("SASL SCRAM authentication failed") && line.contains("sasl.username"),
        "{line}"
    );
    assert!(!text.contains(wrong), "{text}");

    // `run` stops at once instead of retrying a password forever.
    let log = refused_run(&setup).await;
    assert!(log.contains("SASL SCRAM authentication failed"), "{log}");
    assert!(!log.contains(wrong), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_tls_refuses_another_ca_and_a_missing_client_certificate() {
    let secured = secured(KAFKA_PASSWORD).await;
    let (pki, config) = (secured.pki, &secured.config);
    let other = TestPki::generate("another CA");
    let path_line = |key, path: std::path::PathBuf| property_line(key, &path.display().to_string());
    let ca_line = path_line("ssl.ca.location", pki.ca());
    let cert_line = path_line("ssl.certificate.location", pki.client_cert());
    let key_line = path_line("ssl.key.location", pki.client_key());
    assert!(
        config.contains(&ca_line) && config.contains(&cert_line),
        "{config}"
    );

    let another_ca = replaced(config, &ca_line, &path_line("ssl.ca.location", other.ca()));
    let no_client_certificate = replaced(&replaced(config, &cert_line, ""), &key_line, "");
    for (what, body, reason) in [
        ("another CA", another_ca, "certificate verify failed"),
        (
            "no client certificate",
            no_client_certificate,
            "alert certificate required",
        ),
    ] {
        let setup = ForwarderSetup::new(&body);
        let (_, line) = failed_check(&setup, "kafka brokers");
        assert!(
            line.contains(reason) && line.contains("ssl.ca.location"),
            "{what}: {line}"
        );
        let log = refused_run(&setup).await;
        assert!(log.contains(reason), "{what}: {log}");
    }
}

/// SASL/OAUTHBEARER through `kafka.oauth_token_command`, against tansu,
/// which does not offer the mechanism: the forwarder's clients run the
/// command for their token (the program's own record of its runs shows
/// it) before they ask the broker, whose refusal `check` then reports;
/// a command that fails is named, with its stderr, and the token never
/// appears. Signing in with a token succeeds only against a broker that
/// offers OAUTHBEARER, which is tested here only by configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oauth_token_command_is_run_for_a_token_and_its_failure_is_named() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let scratch = harness::scratch_dir("oauth");
    let runs = scratch.path().join("runs");
    let token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJvdXRib3gifQ.secret-signature";
    let signer = scratch.path().join("signer.sh");
    std::fs::write(
        &signer,
        format!(
            "#!/bin/sh\necho run >> {}\nif [ \"$1\" = fail ]; then echo 'signer: no AWS credentials found' >&2; exit 3; fi\n\
             echo '{{\"token\": \"{token}\", \"expires_in_seconds\": 900}}'\n",
            runs.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&signer, std::fs::Permissions::from_mode(0o755)).unwrap();
    let oauth = |argument: &str| {
        let signer = signer.display().to_string();
        let argument = argument.to_owned();
        move |c: harness::ForwarderToml| {
            c.property("security.protocol", "sasl_plaintext")
                .property("sasl.mechanism", "OAUTHBEARER")
                .kafka(
                    "oauth_token_command",
                    &format!("[{signer:?}, {argument:?}]"),
                )
        }
    };

    let s = Scenario::new(db, broker, 1, oauth("ok")).await;
    let (text, line) = failed_check(&s.setup, "kafka brokers");
    let ran = std::fs::read_to_string(&runs)
        .unwrap_or_default()
        .lines()
        .count();
    assert!(ran >= 1, "the command ran for the token:\n{text}");
    // librdkafka asks the broker only once it holds a token.
    assert!(
        line.contains("SASL OAUTHBEARER mechanism handshake failed")
            && line.contains("kafka.oauth_token_command"),
        "tansu refuses OAUTHBEARER: {line}"
    );
    assert!(
        !text.contains(token) && !text.contains("secret-signature"),
        "{text}"
    );
    // The admin client, which creates the [ha] group's topic and
    // [kafka.topics]' ones, signs in with the command too (rdkafka never
    // polls it for its token): it runs the command and asks the broker.
    let ran = || {
        std::fs::read_to_string(&runs)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let before = ran();
    let mut properties: std::collections::BTreeMap<String, String> =
        broker.client_properties().iter().cloned().collect();
    properties.insert("security.protocol".into(), "sasl_plaintext".into());
    properties.insert("sasl.mechanism".into(), "OAUTHBEARER".into());
    let command = [signer.display().to_string(), "ok".to_string()];
    let kafka = outbox_sink::KafkaConfig {
        brokers: broker.bootstrap(),
        topic: s.topic.clone(),
        dead_letter_topic: format!("{}.dlq", s.topic),
        reserved_topics: Vec::new(),
        allowed_topics: Vec::new(),
        topic_creation: None,
        signing: None,
        auth: outbox_kafka::ClientAuth::from_config(Some(&command), &[], None, &properties)
            .unwrap(),
        properties,
        partitioner: Default::default(),
        coordinate_headers: Default::default(),
    };
    let spec = outbox_sink::TopicSpec {
        partitions: 1,
        replication_factor: -1,
        configs: Default::default(),
    };
    let created = outbox_sink::create_topic(&kafka, &harness::unique("t"), &spec).await;
    assert!(created.is_err(), "tansu refuses OAUTHBEARER: {created:?}");
    assert!(
        ran() > before,
        "the admin client ran the command for its token"
    );

    let s = Scenario::new(db, broker, 1, oauth("fail")).await;
    let (text, line) = failed_check(&s.setup, "kafka brokers");
    assert!(
        line.contains(&format!(
            "Failed to acquire SASL OAUTHBEARER token: kafka.oauth_token_command {}: exit \
             status: 3; stderr (redacted): signer: no AWS credentials found",
            signer.display()
        )),
        "{text}"
    );
}

/// `kafka.aws_msk_iam`: the forwarder signs MSK's IAM token itself, with
/// credentials from the environment (AWS's chain; the token's equality with
/// AWS's own signer is `crates/outbox-aws/tests/reference.rs`'s), and
/// librdkafka takes it to the handshake, which tansu refuses (it offers no
/// OAUTHBEARER). Without credentials, the failure names the option and what
/// was looked for; neither the token nor the secret key is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msk_iam_tokens_are_signed_in_the_binary_and_taken_to_the_handshake() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| {
        // MSK listens with TLS; tansu here does not.
        c.property("security.protocol", "sasl_plaintext")
            .kafka("aws_msk_iam", "{ region = \"eu-west-1\" }")
    })
    .await;
    let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    // No instance metadata: this host is not on EC2.
    let off_ec2 = ("AWS_EC2_METADATA_DISABLED", "true");
    let check = s.setup.command_with_env(
        &["check"],
        &[
            ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", secret),
            off_ec2,
        ],
    );
    let text = output_text(&check);
    assert!(!check.status.success(), "{text}");
    let line = check_line(&text, "kafka brokers");
    // librdkafka asks the broker only once it holds a token.
    assert!(
        line.contains("SASL OAUTHBEARER mechanism handshake failed")
            && line.contains("kafka.aws_msk_iam"),
        "the token reached the handshake, which tansu refuses: {line}"
    );
    assert!(
        !text.contains(secret) && !text.contains("X-Amz-Signature"),
        "{text}"
    );

    let check = s.setup.command_with_env(&["check"], &[off_ec2]);
    let text = output_text(&check);
    let line = check_line(&text, "kafka brokers");
    assert!(
        line.contains("Failed to acquire SASL OAUTHBEARER token: kafka.aws_msk_iam: ")
            && line.contains("AWS_ACCESS_KEY_ID"),
        "{text}"
    );
}

/// SASL/GSSAPI (Kerberos), built with Cyrus SASL: librdkafka runs
/// `sasl.kerberos.kinit.cmd` for a ticket, with the keytab and principal
/// configured, before it asks the broker; tansu does not offer GSSAPI, so
/// the handshake is then refused, and `check` says so. A kinit that fails
/// is named with its exit status, before the refusal it causes. Signing in to a broker that offers
/// GSSAPI, with a KDC, is tested only by configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gssapi_runs_the_kinit_command_with_the_keytab_before_the_handshake() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let scratch = harness::scratch_dir("kerberos");
    let runs = scratch.path().join("runs");
    let kinit = scratch.path().join("kinit.sh");
    std::fs::write(
        &kinit,
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\nif [ \"$1\" = fail ]; then echo 'kinit: Keytab contains no suitable keys' >&2; exit 1; fi\n",
            runs.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&kinit, std::fs::Permissions::from_mode(0o755)).unwrap();
    let keytab = scratch.path().join("forwarder.keytab");
    let kerberos = |first: &str| {
        let command = format!(
            "{} {first} -kt %{{sasl.kerberos.keytab}} %{{sasl.kerberos.principal}}",
            kinit.display()
        );
        let keytab = keytab.display().to_string();
        move |c: harness::ForwarderToml| {
            c.property("security.protocol", "sasl_plaintext")
                .property("sasl.mechanism", "GSSAPI")
                .property("sasl.kerberos.service.name", "kafka")
                .property("sasl.kerberos.principal", "outbox-forwarder@EXAMPLE.COM")
                .property("sasl.kerberos.keytab", &keytab)
                .property("sasl.kerberos.kinit.cmd", &command)
        }
    };

    let s = Scenario::new(db, broker, 1, kerberos("ok")).await;
    let (text, line) = failed_check(&s.setup, "kafka brokers");
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    assert!(
        ran.lines().next()
            == Some(&format!("ok -kt {} outbox-forwarder@EXAMPLE.COM", keytab.display())[..]),
        "kinit ran with the keytab and principal: {ran:?}\n{text}"
    );
    assert!(
        line.contains("GSSAPI") && line.contains("Unsupported SASL mechanism"),
        "tansu refuses GSSAPI at the handshake: {line}"
    );

    let s = Scenario::new(db, broker, 1, kerberos("fail")).await;
    let (text, line) = failed_check(&s.setup, "kafka brokers");
    assert!(
        line.contains(&format!(
            "Kerberos ticket refresh failed: {} fail -kt",
            kinit.display()
        )) && line.contains("exited with code 1")
            && line.contains("fix: check sasl.kerberos.kinit.cmd"),
        "{text}"
    );
}

/// SASL/OAUTHBEARER through librdkafka's own OIDC client
/// (`sasl.oauthbearer.method = "oidc"`, built with libcurl): the client id
/// and secret are posted to the token endpoint (a local one the test
/// serves), whose token librdkafka then takes to the broker. tansu does not
/// offer the mechanism, so the handshake is refused after the token was
/// fetched; the secret never appears in `check`'s output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_client_credentials_are_posted_to_the_token_endpoint() {
    use std::io::{Read, Write};
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let secret = "oidc-client-secret-4711";
    let endpoint = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = endpoint.local_addr().unwrap().port();
    let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let claims = format!(
            r#"{{"sub":"outbox-forwarder","iat":{now},"exp":{}}}"#,
            now + 3600
        );
        let token = format!(
            "{}.{}.c2lnbmF0dXJl",
            base64url(br#"{"alg":"none","typ":"JWT"}"#),
            base64url(claims.as_bytes())
        );
        for stream in endpoint.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            // The head, then the body its Content-Length announces.
            loop {
                let n = stream.read(&mut buf).unwrap_or(0);
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| {
                            let (name, value) = l.split_once(':')?;
                            name.eq_ignore_ascii_case("content-length")
                                .then(|| value.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if body.len() >= length {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            seen.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&request).into_owned());
            let body =
                format!(r#"{{"access_token":"{token}","token_type":"bearer","expires_in":3600}}"#);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });

    let s = Scenario::new(db, broker, 1, |c| {
        c.property("security.protocol", "sasl_plaintext")
            .property("sasl.mechanism", "OAUTHBEARER")
            .property("sasl.oauthbearer.method", "oidc")
            .property("sasl.oauthbearer.client.id", "outbox-forwarder")
            .property(
                "sasl.oauthbearer.token.endpoint.url",
                &format!("http://127.0.0.1:{port}/oauth2/token"),
            )
            .kafka(
                "properties_env",
                r#"{ "sasl.oauthbearer.client.secret" = "OIDC_CLIENT_SECRET" }"#,
            )
    })
    .await;
    let check = s
        .setup
        .command_with_env(&["check"], &[("OIDC_CLIENT_SECRET", secret)]);
    let text = output_text(&check);
    assert!(!check.status.success(), "{text}");
    let line = check_line(&text, "kafka brokers");
    assert!(
        line.contains("SASL OAUTHBEARER mechanism handshake failed"),
        "the token was fetched, then the broker refused the mechanism: {line}"
    );
    let requests = requests.lock().unwrap().clone();
    let first = requests
        .first()
        .unwrap_or_else(|| panic!("no token request:\n{text}"));
    let basic = format!(
        "authorization: basic {}",
        base64(format!("outbox-forwarder:{secret}").as_bytes())
    );
    assert!(first.starts_with("POST /oauth2/token HTTP/1.1"), "{first}");
    assert!(
        first
            .to_ascii_lowercase()
            .contains(&basic.to_ascii_lowercase()),
        "{first}"
    );
    assert!(first.contains("grant_type=client_credentials"), "{first}");
    assert!(!text.contains(secret), "{text}");
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64url(bytes: &[u8]) -> String {
    base64(bytes)
        .trim_end_matches('=')
        .replace('+', "-")
        .replace('/', "_")
}

/// librdkafka's configuration errors carry the property's value: a
/// misspelt secret property (`sasl.passwrd`) is named by `check` and by
/// `run`'s refusal, and its value, a password, is shown by neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_secret_property_is_named_without_its_value() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let password = "s3cret-in-a-misspelt-property";
    let s = Scenario::new(db, broker, 1, |c| c.property("sasl.passwrd", password)).await;
    let (text, line) = failed_check(&s.setup, "kafka client");
    assert!(line.contains("sasl.passwrd"), "{line}");
    assert!(!text.contains(password), "{text}");
    let log = refused_run(&s.setup).await;
    assert!(log.contains("sasl.passwrd"), "{log}");
    assert!(!log.contains(password), "{log}");
}
