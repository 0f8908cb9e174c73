use super::*;
use outbox_core::BinlogPosition;
use outbox_source::server::TlsMode;

const MINIMAL: &str = r#"
    [mysql]
    url = "mysql://repl:secret@127.0.0.1:3306"
    server_id = 4201
    [kafka]
    brokers = "127.0.0.1:9092"
    topic = "outbox.{aggregate_type}"
    [checkpoint]
    path = "./data/checkpoint"
"#;

#[test]
fn a_group_bounds_how_long_a_message_may_wait_for_the_broker() {
    let with_ha = format!("{MINIMAL}\n[ha]\ngroup = \"g\"\nlease_ms = 8000\n");
    let c: ForwarderConfig = toml::from_str(&with_ha).unwrap();
    c.validate().unwrap();
    assert_eq!(c.kafka_config().properties["message.timeout.ms"], "2000");
    // A topic of the group's own: a shared one buries an idle group's
    // record under a busy group's, too deep to read in a takeover.
    assert_eq!(
        c.ha.as_ref().unwrap().checkpoint_topic,
        "outbox.forwarder.checkpoints.g"
    );
    let named = with_ha.replace(
        "lease_ms = 8000",
        "lease_ms = 8000\ncheckpoint_topic = \"cp\"",
    );
    let c: ForwarderConfig = toml::from_str(&named).unwrap();
    assert_eq!(c.ha.as_ref().unwrap().checkpoint_topic, "cp");
    let odd = with_ha.replace("group = \"g\"", "group = \"orders/eu\"");
    let c: ForwarderConfig = toml::from_str(&odd).unwrap();
    let err = c.validate().expect_err("not a topic name").to_string();
    assert!(err.contains("set ha.checkpoint_topic"), "{err}");
    let too_long = with_ha.replace(
        "[checkpoint]",
        "[kafka.properties]\n\"message.timeout.ms\" = \"0\"\n[checkpoint]",
    );
    let c: ForwarderConfig = toml::from_str(&too_long).unwrap();
    let err = c.validate().expect_err("refused");
    assert!(
        err.to_string().contains("at most ha.lease_ms / 4 = 2000"),
        "{err}"
    );
    // Without a group the producer waits as long as it takes.
    let c: ForwarderConfig = toml::from_str(MINIMAL).unwrap();
    assert!(!c
        .kafka_config()
        .properties
        .contains_key("message.timeout.ms"));
}

#[test]
fn minimal_config_gets_documented_defaults() {
    let c: ForwarderConfig = toml::from_str(MINIMAL).unwrap();
    c.validate().unwrap();
    assert_eq!(c.outbox.tables, ["*.outbox_event"]);
    assert_eq!(c.checkpoint.start, StartPosition::Latest);
    assert_eq!(c.checkpoint.flush_interval_ms, 1_000);
    assert_eq!(c.kafka.max_in_flight, 30_000);
}

#[test]
fn outbox_columns_override_only_what_they_name_and_refuse_unknown_names() {
    let text = format!("{MINIMAL}\n[outbox.columns]\nevent_id = \"id\"\npayload = \"body\"\n");
    let c: ForwarderConfig = toml::from_str(&text).unwrap();
    let columns = c.decode_config().unwrap().columns;
    assert_eq!(
        (columns.event_id.as_str(), columns.payload.as_str()),
        ("id", "body")
    );
    assert_eq!(columns.aggregate_type, "aggregate_type");
    assert_eq!(columns.key, None);
    let typo = format!("{MINIMAL}\n[outbox.columns]\nevent_idd = \"id\"\n");
    assert!(toml::from_str::<ForwarderConfig>(&typo).is_err());
}

#[test]
fn unknown_keys_are_errors() {
    let text = MINIMAL.replace("server_id = 4201", "server_id = 4201\nserverid = 1");
    assert!(toml::from_str::<ForwarderConfig>(&text).is_err());
}

#[test]
fn weakened_producer_settings_are_refused() {
    let text = format!("{MINIMAL}\n[kafka.properties]\n\"enable.idempotence\" = \"false\"\n");
    let c: ForwarderConfig = toml::from_str(&text).unwrap();
    let err = c.validate().expect_err("idempotence off must be refused");
    assert!(err.to_string().contains("enable.idempotence"), "{err}");
}

/// Parses, resolves against `env` (not the process's) and validates.
fn resolved(text: &str, env: &[(&str, &str)]) -> Result<ForwarderConfig, DefiniteError> {
    let mut c: ForwarderConfig = toml::from_str(text).unwrap();
    let env: BTreeMap<String, OsString> = env
        .iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect();
    c.resolve(&|name| env.get(name).cloned())?;
    c.validate()?;
    Ok(c)
}

fn with_mysql(extra: &str) -> String {
    MINIMAL.replace("server_id = 4201", &format!("server_id = 4201\n{extra}"))
}

fn password(c: &ForwarderConfig) -> String {
    c.mysql.url.all()[0]
        .opts()
        .unwrap()
        .pass()
        .unwrap()
        .to_owned()
}

#[test]
fn the_password_comes_from_the_named_variable() {
    let c = resolved(
        &with_mysql("password_env = \"DB_PW\""),
        &[("DB_PW", "pw from env")],
    )
    .unwrap();
    assert_eq!(password(&c), "pw from env");
    assert_eq!(password(&resolved(MINIMAL, &[]).unwrap()), "secret");
}

#[test]
fn the_password_file_loses_one_trailing_newline_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    let text = with_mysql(&format!("password_file = {:?}", file.display().to_string()));
    for (content, expected) in [
        ("pw\n", "pw"),
        ("pw\r\n", "pw"),
        ("pw", "pw"),
        (" pw \n\n", " pw \n"),
    ] {
        std::fs::write(&file, content).unwrap();
        assert_eq!(
            password(&resolved(&text, &[]).unwrap()),
            expected,
            "{content:?}"
        );
    }
    std::fs::write(&file, "\n").unwrap();
    let err = resolved(&text, &[]).err().expect("an empty password file");
    assert!(err.to_string().contains("is empty"), "{err}");
}

#[test]
fn a_missing_secret_names_the_variable_or_file_and_shows_no_secret() {
    let err = resolved(&with_mysql("password_env = \"NO_SUCH_PW\""), &[])
        .err()
        .expect("unset variable");
    let text = err.to_string();
    assert!(
        text.contains("mysql.password_env") && text.contains("NO_SUCH_PW is not set"),
        "{text}"
    );
    let err = resolved(&with_mysql("password_file = \"/nonexistent/pw\""), &[])
        .err()
        .expect("missing file");
    let text = err.to_string();
    assert!(
        text.contains("mysql.password_file: cannot read /nonexistent/pw"),
        "{text}"
    );
    let both = with_mysql("password_env = \"A\"\npassword_file = \"/b\"");
    let err = resolved(&both, &[("A", "x")]).err().expect("both set");
    assert!(err.to_string().contains("keep one"), "{err}");
}

#[test]
fn tls_options_reach_the_connection_and_conflicts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
    let section = |body: &str| format!("{MINIMAL}\n[mysql.tls]\n{body}\n");
    let ca_line = format!("ca_file = {:?}", ca.display().to_string());

    let c = resolved(&section(&format!("mode = \"verify_ca\"\n{ca_line}")), &[]).unwrap();
    assert_eq!(c.mysql.url.tls().mode, TlsMode::VerifyCa);
    assert_eq!(c.mysql.url.tls().ca_file.as_deref(), Some(ca.as_path()));
    assert!(c.mysql.url.all()[0].opts().unwrap().ssl_opts().is_some());
    assert_eq!(
        resolved(MINIMAL, &[]).unwrap().mysql.url.tls().mode,
        TlsMode::Disabled
    );

    for (body, needle) in [
        (ca_line.clone(), "ca_file is only used with"),
        (
            format!("mode = \"required\"\n{ca_line}"),
            "ca_file is only used with",
        ),
        (
            format!(
                "mode = \"verify_identity\"\nclient_cert_file = {:?}",
                ca.display().to_string()
            ),
            "client_cert_file and client_key_file go together",
        ),
        (
            "mode = \"verify_identity\"\nca_file = \"/nonexistent/ca.pem\"".into(),
            "mysql.tls.ca_file: cannot read /nonexistent/ca.pem",
        ),
    ] {
        let err = resolved(&section(&body), &[]).err().expect(&body);
        assert!(err.to_string().contains(needle), "{body}: {err}");
    }
    assert!(
        toml::from_str::<ForwarderConfig>(&section("mode = \"preferred\"")).is_err(),
        "an unknown mode is an error"
    );
}

#[test]
fn kafka_secrets_fill_properties_from_variables_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let key_pw = dir.path().join("key-pw");
    std::fs::write(&key_pw, "from-file\n").unwrap();
    let text = MINIMAL.replace(
        "topic = ",
        &format!(
            "properties_env = {{ \"sasl.password\" = \"KAFKA_PW\" }}\n\
             properties_files = {{ \"ssl.key.password\" = {:?} }}\ntopic = ",
            key_pw.display().to_string()
        ),
    );
    let c = resolved(&text, &[("KAFKA_PW", "from-env")]).unwrap();
    let client = c.kafka_config().client_config().unwrap();
    assert_eq!(client.get("sasl.password"), Some("from-env"));
    assert_eq!(client.get("ssl.key.password"), Some("from-file"));
    let shown = format!("{:?}", c.kafka_config());
    assert!(
        !shown.contains("from-env") && !shown.contains("from-file"),
        "{shown}"
    );

    let err = resolved(&text, &[]).err().expect("unset variable");
    assert!(err.to_string().contains("KAFKA_PW is not set"), "{err}");
}

#[test]
fn kafka_secrets_cannot_weaken_delivery_or_repeat_a_property() {
    let env_acks = MINIMAL.replace(
        "topic = ",
        "properties_env = { \"acks\" = \"ACKS\" }\ntopic = ",
    );
    let err = resolved(&env_acks, &[("ACKS", "1-from-env")])
        .err()
        .expect("acks=1 refused");
    let text = err.to_string();
    assert!(
        text.contains("kafka.properties_env.\"acks\" ($ACKS) is refused")
            && text.contains("acks=all"),
        "{text}"
    );
    assert!(
        !text.contains("1-from-env"),
        "the value is not shown: {text}"
    );
    assert!(resolved(&env_acks, &[("ACKS", "all")]).is_ok());

    let twice = format!(
        "{}\n[kafka.properties]\n\"sasl.password\" = \"inline\"\n",
        MINIMAL.replace(
            "topic = ",
            "properties_env = { \"sasl.password\" = \"PW\" }\ntopic = "
        )
    );
    let err = resolved(&twice, &[("PW", "x")]).err().expect("set twice");
    assert!(err.to_string().contains("more than once"), "{err}");
}

#[test]
fn start_accepts_file_pos() {
    let c: ForwarderConfig =
        toml::from_str(&MINIMAL.replace("path = ", "start = \"bin.000002:120\"\npath = ")).unwrap();
    assert_eq!(
        c.checkpoint.start,
        StartPosition::At(BinlogPosition::new("bin.000002", 120))
    );
}

/// Misspelt choices are refused when the file is read, naming the key
/// and what it accepts, not when the forwarder first needs them.
#[test]
fn misspelt_choices_are_refused_at_load_with_what_is_accepted() {
    let cases = [
        (
            "[outbox]\nevent_id_format = \"uuidv4\"\n",
            "expected `uuid` or `any`",
        ),
        (
            "[outbox]\nbad_row_policy = \"deadletter\"\n",
            "expected `fail` or `dead_letter`",
        ),
    ];
    for (section, accepted) in cases {
        let text = format!("{MINIMAL}\n{section}");
        let err = toml::from_str::<ForwarderConfig>(&text)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(accepted), "{err}");
    }
    let err = toml::from_str::<ForwarderConfig>(
        &MINIMAL.replace("path = ", "start = \"newest\"\npath = "),
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(err.contains("\"latest\" / \"earliest\""), "{err}");
    assert_eq!(StartPosition::Earliest.to_string(), "earliest");
}

mod example_file {
    use super::*;

    #[test]
    fn the_documented_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/forwarder.toml");
        let config = ForwarderConfig::load(&path).unwrap();
        assert_eq!(config.outbox.tables, ["shop.outbox_event"]);
        assert_eq!(config.kafka.topic, "outbox.{aggregate_type}");
    }

    /// What `docker/forwarder.toml` changes in `config/forwarder.toml`: the
    /// compose services' names, the checkpoint volume, metrics on, MySQL
    /// without TLS on the project's network.
    const FOR_DOCKER: [(&str, &str); 7] = [
        (
            "url = \"mysql://repl:secret@127.0.0.1:3306\"",
            "url = \"mysql://repl:secret@mysql:3306\"",
        ),
        // The compose file's listener for its own services (the host's is
        // localhost:9092).
        ("brokers = \"127.0.0.1:9092\"", "brokers = \"kafka:29092\""),
        (
            "path = \"./data/checkpoint\"",
            "path = \"/var/lib/outbox-forwarder/checkpoint\"",
        ),
        ("listen = \"127.0.0.1:9464\"", "listen = \"0.0.0.0:9464\""),
        // MySQL in plaintext on the compose project's own network.
        ("allow_plaintext = false", "allow_plaintext = true"),
        // The example's topics are created by the forwarder, with three
        // partitions each, before their first message.
        ("# [kafka.topics]", "[kafka.topics]"),
        (
            "# partitions = 3                # required",
            "partitions = 3                # required",
        ),
    ];

    /// The container's configuration is the documented one with
    /// [`FOR_DOCKER`] applied, so it cannot fall behind it.
    /// `OUTBOX_WRITE_DOCKER_CONFIG=1` writes it.
    #[test]
    fn the_docker_config_is_the_documented_one_pointed_at_the_compose_services() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut expected = std::fs::read_to_string(root.join("config/forwarder.toml")).unwrap();
        for (from, to) in FOR_DOCKER {
            assert_eq!(expected.matches(from).count(), 1, "{from}");
            expected = expected.replace(from, to);
        }
        let docker = root.join("docker/forwarder.toml");
        if std::env::var_os("OUTBOX_WRITE_DOCKER_CONFIG").is_some() {
            std::fs::write(&docker, &expected).unwrap();
        }
        assert!(
            std::fs::read_to_string(&docker).unwrap() == expected,
            "docker/forwarder.toml is not config/forwarder.toml with {FOR_DOCKER:?}: \
             OUTBOX_WRITE_DOCKER_CONFIG=1 cargo test -p outbox-forwarder docker_config writes it"
        );
        let config = ForwarderConfig::load(&docker).unwrap();
        assert_eq!(config.kafka.brokers, "kafka:29092");
        assert!(config.metrics.listen.is_some());
    }
}

#[test]
fn message_shaping_settings_reach_the_decoder() {
    let text = format!(
        "{MINIMAL}\n[outbox]\ntombstone_on_null_payload = true\non_update = \"fail\"\non_delete = \"warn\"\n\
         [outbox.columns]\npayload_format = \"bytes\"\npartition_column = \"tenant\"\n\
         timestamp_column = \"created_at\"\ntopic_column = \"topic\"\ntraceparent = \"trace_parent\"\n\
         [outbox.headers]\ntenant = \"tenant\"\nregion = \"region_code\"\n"
    );
    let c: ForwarderConfig = toml::from_str(&text).unwrap();
    let decode = c.decode_config().unwrap();
    assert!(decode.tombstone_on_null_payload);
    assert_eq!(decode.on_update, outbox_core::ChangePolicy::Fail);
    assert_eq!(decode.on_delete, outbox_core::ChangePolicy::Warn);
    assert_eq!(
        decode.columns.payload_format,
        outbox_source::PayloadFormat::Bytes
    );
    assert_eq!(decode.columns.partition_column.as_deref(), Some("tenant"));
    assert_eq!(decode.columns.traceparent, "trace_parent");
    assert_eq!(decode.columns.tracestate, "tracestate");
    // In header-name order.
    assert_eq!(
        decode.headers,
        [
            ("region".to_string(), "region_code".to_string()),
            ("tenant".to_string(), "tenant".to_string())
        ]
    );
    let c: ForwarderConfig = toml::from_str(MINIMAL).unwrap();
    let decode = c.decode_config().unwrap();
    assert_eq!(decode.on_update, outbox_core::ChangePolicy::Ignore);
    assert!(!decode.tombstone_on_null_payload && decode.headers.is_empty());
}

#[test]
fn a_header_the_forwarder_sets_itself_cannot_come_from_a_column() {
    // `backfill` marked every message as published from the table: a
    // kill -9 then republished the whole window without a word.
    for reserved in [
        "binlog_gtid",
        "Event_Id",
        "traceparent",
        "published_by",
        "backfill",
        "backfill_before",
        "backfill_before_gtid",
    ] {
        let text = format!("{MINIMAL}\n[outbox.headers]\n{reserved} = \"x\"\n");
        let c: ForwarderConfig = toml::from_str(&text).unwrap();
        let err = c.decode_config().unwrap_err().to_string();
        assert!(err.contains("sets itself"), "{reserved}: {err}");
    }
}

#[test]
fn retention_needs_deletes_ignored_and_takes_its_defaults() {
    let text = format!("{MINIMAL}\n[retention]\nolder_than_seconds = 604800\n");
    let c: ForwarderConfig = toml::from_str(&text).unwrap();
    c.validate().unwrap();
    let retention = c.retention.as_ref().unwrap();
    assert_eq!(retention.interval_seconds, 3_600);
    assert_eq!(retention.batch, 1_000);
    assert_eq!(retention.time_column, "created_at");

    let warned = format!(
        "{MINIMAL}\n[outbox]\non_delete = \"warn\"\n[retention]\nolder_than_seconds = 60\n"
    );
    let c: ForwarderConfig = toml::from_str(&warned).unwrap();
    let error = c.validate().unwrap_err().to_string();
    assert!(error.contains("on_delete = \"ignore\""), "{error}");
}

/// Every key each section of the configuration accepts (as its structs
/// list them when refusing an unknown one) is documented in
/// `config/forwarder.toml`, set or commented out, in its own section.
#[test]
fn the_documented_file_names_every_key_the_configuration_accepts() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let documented = std::fs::read_to_string(root.join("config/forwarder.toml")).unwrap();
    // section → what it needs besides MINIMAL to be read at all.
    let sections: [(&str, &str); 11] = [
        ("mysql", ""),
        ("mysql.tls", ""),
        ("outbox", ""),
        ("outbox.columns", ""),
        ("kafka", ""),
        ("checkpoint", ""),
        ("retry", ""),
        ("ha", "group = \"g\"\n"),
        ("retention", "older_than_seconds = 60\n"),
        ("metrics", ""),
        ("", ""),
    ];
    let mut missing = Vec::new();
    for (section, needs) in sections {
        let probe = "zz_not_a_key = 1\n";
        let text = if section.is_empty() {
            format!("{probe}{MINIMAL}")
        } else if MINIMAL.contains(&format!("[{section}]\n")) {
            MINIMAL.replace(
                &format!("[{section}]\n"),
                &format!("[{section}]\n{probe}{needs}"),
            )
        } else {
            format!("{MINIMAL}\n[{section}]\n{probe}{needs}")
        };
        let error = toml::from_str::<ForwarderConfig>(&text)
            .err()
            .unwrap_or_else(|| panic!("[{section}] took an unknown key"))
            .to_string();
        let expected = error
            .split("expected")
            .nth(1)
            .unwrap_or_else(|| panic!("[{section}]: {error}"));
        let keys: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        assert!(!keys.is_empty(), "[{section}]: {error}");
        // The section's text: from its header (set or commented out) to
        // the next header.
        let body = if section.is_empty() {
            documented.split("\n[").next().unwrap().to_owned()
        } else {
            let header = documented
                .find(&format!("\n[{section}]\n"))
                .or_else(|| documented.find(&format!("\n# [{section}]\n")))
                .unwrap_or_else(|| panic!("no [{section}] in config/forwarder.toml"));
            let rest = &documented[header + 1..];
            let rest = &rest[rest.find('\n').unwrap() + 1..];
            let end = rest
                .find("\n[")
                .into_iter()
                .chain(rest.find("\n# ["))
                .min()
                .unwrap_or(rest.len());
            rest[..end].to_owned()
        };
        for key in keys {
            let named = body.lines().any(|line| {
                let line = line.trim_start_matches('#').trim_start();
                line.strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            });
            // A table of its own is documented by its header.
            let table = if section.is_empty() {
                format!("[{key}]")
            } else {
                format!("[{section}.{key}]")
            };
            if !named && !documented.contains(&table) {
                missing.push(format!("[{section}] {key}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "config/forwarder.toml does not document: {missing:?}"
    );
}

/// Defect: with `[mysql.tls] mode = "disabled"` (the default, and the
/// compose file's), a primary across the network was read in plaintext:
/// caching_sha2_password's full sign-in takes the server's RSA key
/// unauthenticated, and the binlog carries every table's rows.
#[test]
fn plaintext_to_a_primary_that_is_not_on_this_host_is_refused_unless_allowed() {
    let remote = MINIMAL.replace("@127.0.0.1:3306", "@db.example:3306");
    let Err(err) = resolved(&remote, &[]) else {
        panic!("plaintext to db.example was accepted");
    };
    let err = err.to_string();
    assert!(
        err.contains("db.example")
            && err.contains("verify_identity")
            && err.contains("allow_plaintext"),
        "{err}"
    );
    // A second candidate across the network is refused as well.
    let second = MINIMAL.replace(
        "url = \"mysql://repl:secret@127.0.0.1:3306\"",
        "url = [\"mysql://repl:secret@127.0.0.1:3306\", \"mysql://repl:secret@10.0.0.7:3306\"]",
    );
    assert!(resolved(&second, &[]).is_err());
    let allowed = remote.replace("[kafka]", "[mysql.tls]\nallow_plaintext = true\n[kafka]");
    resolved(&allowed, &[]).unwrap();
    let encrypted = remote.replace(
        "[kafka]",
        "[mysql.tls]\nmode = \"verify_identity\"\n[kafka]",
    );
    resolved(&encrypted, &[]).unwrap();
    for local in ["@localhost:3306", "@[::1]:3306", "@127.0.0.2:3306"] {
        resolved(&MINIMAL.replace("@127.0.0.1:3306", local), &[]).unwrap();
    }
}

#[test]
fn a_lock_suffix_is_part_of_the_lock_name_which_must_fit_the_server() {
    let with_ha = |extra: &str| format!("{MINIMAL}\n[ha]\ngroup = \"orders\"\n{extra}");
    let c: ForwarderConfig = toml::from_str(&with_ha("")).unwrap();
    assert_eq!(
        c.ha.as_ref().unwrap().lock_name(),
        "outbox-forwarder/orders"
    );
    let c: ForwarderConfig = toml::from_str(&with_ha("lock_suffix = \"k3y\"")).unwrap();
    c.validate().unwrap();
    assert_eq!(
        c.ha.as_ref().unwrap().lock_name(),
        "outbox-forwarder/orders/k3y"
    );
    let long = format!("lock_suffix = \"{}\"", "x".repeat(60));
    let c: ForwarderConfig = toml::from_str(&with_ha(&long)).unwrap();
    let Err(err) = c.validate() else {
        panic!("a 83-character lock name was accepted");
    };
    assert!(err.to_string().contains("longer than 64"), "{err}");
}

/// `kafka.partitioner` reaches the producer, and the property it sets
/// cannot be set beside it.
#[test]
fn the_partitioner_is_chosen_by_its_own_key() {
    let c: ForwarderConfig = toml::from_str(MINIMAL).unwrap();
    let producer = c.kafka_config().client_config().unwrap();
    assert_eq!(producer.get("partitioner"), Some("consistent_random"));
    let java = MINIMAL.replace("brokers = ", "partitioner = \"murmur2\"\n    brokers = ");
    let c: ForwarderConfig = toml::from_str(&java).unwrap();
    assert_eq!(c.kafka.partitioner, outbox_sink::Partitioner::Murmur2);
    let producer = c.kafka_config().client_config().unwrap();
    assert_eq!(producer.get("partitioner"), Some("murmur2_random"));
    let direct = format!("{MINIMAL}\n[kafka.properties]\npartitioner = \"murmur2_random\"\n");
    let c: ForwarderConfig = toml::from_str(&direct).unwrap();
    let err = c.validate().expect_err("refused").to_string();
    assert!(err.contains("set kafka.partitioner"), "{err}");
    let unknown = MINIMAL.replace("brokers = ", "partitioner = \"fnv\"\n    brokers = ");
    assert!(toml::from_str::<ForwarderConfig>(&unknown).is_err());
}

/// The forwarder's own sections take `OUTBOX_FORWARDER__` variables, as
/// strictly as the file; `check` shows them with secrets masked.
#[test]
fn settings_come_from_the_environment_as_strictly_as_from_the_file() {
    let env = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    let settings = outbox_core::settings::parse::<ForwarderConfig>(
        MINIMAL,
        "forwarder.toml",
        ENV_PREFIX,
        env(&[
            (
                "OUTBOX_FORWARDER__KAFKA__BROKERS",
                "kafka-0.prod:9092,kafka-1.prod:9092",
            ),
            ("OUTBOX_FORWARDER__KAFKA__MAX_IN_FLIGHT", "500"),
            (
                "OUTBOX_FORWARDER__KAFKA__PROPERTIES__SASL.PASSWORD",
                "hunter2",
            ),
            ("OUTBOX_FORWARDER__KAFKA__PARTITIONER", "murmur2"),
            (
                "OUTBOX_FORWARDER__OUTBOX__TABLES",
                r#"["shop.outbox_event"]"#,
            ),
            ("OUTBOX_INBOX__KAFKA__BROKERS", "not ours"),
        ]),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let c = settings.config;
    assert_eq!(c.kafka.brokers, "kafka-0.prod:9092,kafka-1.prod:9092");
    assert_eq!(c.kafka.max_in_flight, 500);
    assert_eq!(c.kafka.properties["sasl.password"], "hunter2");
    assert_eq!(c.kafka.partitioner, outbox_sink::Partitioner::Murmur2);
    assert_eq!(c.outbox.tables, ["shop.outbox_event"]);
    assert_eq!(c.mysql.server_id, 4201, "the file's other settings stay");
    let shown = format!("{:?}", settings.overrides);
    assert!(!shown.contains("hunter2"), "{shown}");
    assert_eq!(settings.overrides.len(), 5);

    let refused = |pairs: &[(&str, &str)]| match outbox_core::settings::parse::<ForwarderConfig>(
        MINIMAL,
        "f",
        ENV_PREFIX,
        env(pairs),
    ) {
        Ok(_) => panic!("{pairs:?} taken"),
        Err(why) => why,
    };
    let unknown = refused(&[("OUTBOX_FORWARDER__KAFKA__BROKER", "x:9092")]);
    assert!(
        unknown.starts_with("OUTBOX_FORWARDER__KAFKA__BROKER "),
        "{unknown}"
    );
    let typed = refused(&[("OUTBOX_FORWARDER__MYSQL__SERVER_ID", "-1")]);
    assert!(
        typed.starts_with("OUTBOX_FORWARDER__MYSQL__SERVER_ID "),
        "{typed}"
    );
}

/// `mysql.aws_iam` signs in with a token sent in clear text: no password of
/// its own, a user, and off this host a verified TLS channel whatever
/// `allow_plaintext` says.
#[test]
fn iam_sign_in_needs_a_user_no_password_and_verified_tls_off_this_host() {
    let with = |url: &str, tls: &str| {
        let text = MINIMAL
            .replace(
                "url = \"mysql://repl:secret@127.0.0.1:3306\"",
                &format!("url = \"{url}\"\n    aws_iam = {{ region = \"eu-west-1\" }}"),
            )
            .replace("[kafka]", &format!("{tls}\n    [kafka]"));
        let mut c: ForwarderConfig = toml::from_str(&text).unwrap();
        c.resolve(&|_| None).map(|_| ())
    };
    let refused = |url: &str, tls: &str| match with(url, tls) {
        Ok(()) => panic!("{url} {tls} taken"),
        Err(why) => why.to_string(),
    };
    with("mysql://repl@127.0.0.1:3306", "").unwrap();
    let remote = "mysql://repl@db.abc.eu-west-1.rds.amazonaws.com:3306";
    with(remote, "[mysql.tls]\n    mode = \"verify_identity\"").unwrap();
    for tls in [
        "[mysql.tls]\n    mode = \"required\"",
        "[mysql.tls]\n    allow_plaintext = true",
    ] {
        assert!(refused(remote, tls).contains("clear text"), "{tls}");
    }
    assert!(refused("mysql://repl:pw@127.0.0.1:3306", "").contains("remove the password"));
    assert!(refused("mysql://127.0.0.1:3306", "").contains("names no user"));
}
