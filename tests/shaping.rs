//! Messages shaped as consumers need them, end to end on MariaDB (and on
//! MySQL where it logs a type its own way) and the real broker: a column as
//! a header, trace context, a partition, a record timestamp and a topic
//! taken from the row, binary payloads, tombstones, and what an UPDATE or
//! DELETE of an outbox row means.

use harness::broker::Record;
use harness::workload::*;
use harness::{unique, Broker, DbServer, Flavor, ForwarderToml, TIMEOUT};
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_core::{BinlogPosition, PartitionBy};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// The migration's outbox table with the columns a team might shape
/// messages from, and a payload that may be NULL.
const SHAPING_COLUMNS: &str = "ALTER TABLE outbox_event \
    MODIFY payload JSON NULL, \
    ADD COLUMN tenant VARCHAR(64) NULL, \
    ADD COLUMN amount DECIMAL(10,2) NULL, \
    ADD COLUMN happened_at DATETIME(3) NULL, \
    ADD COLUMN elapsed TIME(2) NULL, \
    ADD COLUMN route VARCHAR(249) NULL, \
    ADD COLUMN body VARBINARY(1024) NULL";

/// A scenario on the shared servers whose outbox table has the shaping
/// columns; `edit` shapes the configuration.
async fn shaped(
    flavor: Flavor,
    partitions: u32,
    edit: impl Fn(ForwarderToml) -> ForwarderToml,
) -> (Scenario, Conn, &'static Broker) {
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, partitions, edit).await;
    let mut conn = s.conn(db).await;
    conn.query_drop(SHAPING_COLUMNS).await.unwrap();
    (s, conn, broker)
}

/// Inserts one outbox row with `columns` (name, SQL value) beside an id
/// and the required ones; returns the id.
async fn insert(conn: &mut Conn, columns: &[(&str, String)]) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    let mut names = vec!["event_id", "aggregate_type", "aggregate_id", "event_type"];
    let mut values = vec![
        format!("'{id}'"),
        "'order'".into(),
        "'1'".into(),
        "'X'".into(),
    ];
    if !columns.iter().any(|(name, _)| *name == "payload") {
        names.push("payload");
        values.push("'{}'".into());
    }
    for (name, value) in columns {
        names.push(name);
        values.push(value.clone());
    }
    conn.query_drop(format!(
        "INSERT INTO outbox_event ({}) VALUES ({})",
        names.join(", "),
        values.join(", ")
    ))
    .await
    .unwrap();
    id
}

// On both flavors: MySQL logs DECIMAL, DATETIME(3) and JSON in binary
// forms of its own, and an UPDATE of a JSON column as a partial update
// when binlog_row_value_options=PARTIAL_JSON.
harness::on_both_flavors!(
    columns_named_under_outbox_headers_become_headers_and_null_leaves_them_out,
    a_timestamp_column_sets_the_record_time,
    a_null_payload_is_a_tombstone_when_allowed,
    changed_outbox_rows_under_warn_are_logged_counted_and_passed,
    enum_and_set_columns_where_text_is_needed_are_refused_before_streaming,
    an_update_of_an_outbox_row_under_fail_stops_the_stream_before_it,
);

/// An UPDATE of outbox row `id` (its version and a field of its JSON
/// payload); on MySQL a partial JSON update, only the changed part of the
/// document in the after image, which the binlog is checked to hold.
/// Returns where the server's binlog stood before it.
async fn update_payload(flavor: Flavor, conn: &mut Conn, id: &str) -> BinlogPosition {
    if flavor == Flavor::MySql {
        conn.query_drop("SET SESSION binlog_row_value_options = 'PARTIAL_JSON'")
            .await
            .unwrap();
    }
    let db = DbServer::shared(flavor).await;
    let from = db.position().await;
    conn.query_drop(format!(
        "UPDATE outbox_event SET event_version = 2, payload = JSON_SET(payload, '$.v', 2) \
         WHERE event_id = '{id}'"
    ))
    .await
    .unwrap();
    if flavor == Flavor::MySql {
        let types = db.binlog_event_types_since(&from).await;
        assert!(
            types.iter().any(|t| t == "Update_rows_partial"),
            "a partial JSON update in the binlog: {types:?}"
        );
    }
    from
}

fn keyed(records: &[Record]) -> HashMap<String, &Record> {
    let map: HashMap<String, &Record> = records
        .iter()
        .map(|r| (r.key_str().to_owned(), r))
        .collect();
    assert_eq!(map.len(), records.len(), "no duplicates");
    map
}

async fn columns_named_under_outbox_headers_become_headers_and_null_leaves_them_out(
    flavor: Flavor,
) {
    let (s, mut conn, broker) = shaped(flavor, 1, |c| {
        c.section(
            "[outbox.headers]\ntenant = \"tenant\"\namount = \"amount\"\nhappened = \"happened_at\"\n\
             elapsed = \"elapsed\"",
        )
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let full = insert(
        &mut conn,
        &[
            ("tenant", "'acme-eu'".into()),
            ("amount", "-12.50".into()),
            ("happened_at", "'2024-05-06 07:08:09.123'".into()),
            // Negative, with a fraction in hundredths: a value
            // mysql_common 0.37 misreads.
            ("elapsed", "'-838:59:58.99'".into()),
        ],
    )
    .await;
    let bare = insert(&mut conn, &[]).await;

    let records = broker.consume(&s.topic, 2, TIMEOUT, SETTLE);
    let records = keyed(&records);
    let headers = &records[&full].headers;
    assert_eq!(headers["tenant"], "acme-eu");
    assert_eq!(headers["amount"], "-12.50");
    assert_eq!(headers["happened"], "2024-05-06 07:08:09.123000");
    assert_eq!(headers["elapsed"], "-838:59:58.990000");
    assert_eq!(headers["event_id"], full, "the fixed headers stay");
    let headers = &records[&bare].headers;
    for absent in ["tenant", "amount", "happened", "elapsed"] {
        assert!(!headers.contains_key(absent), "{absent}: {headers:?}");
    }
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_columns_become_w3c_headers_byte_for_byte() {
    let (s, mut conn, broker) = shaped(Flavor::MariaDb, 1, |c| c).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let state = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
    let traced = insert(
        &mut conn,
        &[
            ("traceparent", format!("'{parent}'")),
            ("tracestate", format!("'{state}'")),
        ],
    )
    .await;
    let untraced = insert(&mut conn, &[]).await;

    let records = broker.consume(&s.topic, 2, TIMEOUT, SETTLE);
    let records = keyed(&records);
    assert_eq!(records[&traced].headers["traceparent"], parent);
    assert_eq!(records[&traced].headers["tracestate"], state);
    assert!(!records[&untraced].headers.contains_key("traceparent"));
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_column_places_each_row_where_its_value_hashes() {
    const PARTITIONS: u32 = 4;
    let (s, mut conn, broker) = shaped(Flavor::MariaDb, PARTITIONS, |c| {
        c.section("[outbox.columns]\npartition_column = \"tenant\"")
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut tenant_of = HashMap::new();
    for i in 0..40 {
        let tenant = format!("tenant-{}", i % 8);
        let id = insert(&mut conn, &[("tenant", format!("'{tenant}'"))]).await;
        tenant_of.insert(id, tenant);
    }

    let records = broker.consume(&s.topic, 40, TIMEOUT, SETTLE);
    let mut partitions_of: HashMap<&str, BTreeSet<i32>> = HashMap::new();
    for (id, record) in keyed(&records) {
        let tenant = &tenant_of[&id];
        let expected = outbox_sink::partition_for(
            &PartitionBy::Hash(tenant.clone().into_bytes()),
            4,
            Default::default(),
        )
        .unwrap();
        assert_eq!(record.partition, expected, "{tenant}");
        partitions_of
            .entry(tenant)
            .or_default()
            .insert(record.partition);
    }
    let used: BTreeSet<i32> = partitions_of.values().flatten().copied().collect();
    assert!(
        used.len() > 1,
        "8 tenants over {PARTITIONS} partitions: {used:?}"
    );
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

async fn a_timestamp_column_sets_the_record_time(flavor: Flavor) {
    let (s, mut conn, broker) = shaped(flavor, 1, |c| {
        c.section("[outbox.columns]\ntimestamp_column = \"happened_at\"")
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let dated = insert(
        &mut conn,
        &[("happened_at", "'2024-05-06 07:08:09.123'".into())],
    )
    .await;
    let undated = insert(&mut conn, &[]).await;

    let records = broker.consume(&s.topic, 2, TIMEOUT, SETTLE);
    let records = keyed(&records);
    // 2024-05-06 07:08:09.123 read as UTC.
    assert_eq!(records[&dated].timestamp, Some(1_714_979_289_123));
    // Without a value, the producer's time, as before.
    let now = outbox_core::epoch_ms() as i64;
    let produced = records[&undated].timestamp.unwrap();
    assert!((now - produced).abs() < 60_000, "{produced} vs {now}");
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bytes_payload_arrives_identical() {
    let (s, mut conn, broker) = shaped(Flavor::MariaDb, 1, |c| {
        c.section("[outbox.columns]\npayload = \"body\"\npayload_format = \"bytes\"")
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;
    // A Protobuf-like value: field tags, varints, every byte value, no
    // valid UTF-8.
    let mut body = vec![0x08, 0x96, 0x01, 0x12, 0x07];
    body.extend(b"testing");
    body.extend((0..=255u8).rev());
    let hex: String = body.iter().map(|b| format!("{b:02x}")).collect();
    let id = insert(&mut conn, &[("body", format!("X'{hex}'"))]).await;

    let records = broker.consume(&s.topic, 1, TIMEOUT, SETTLE);
    assert_eq!(records[0].key_str(), id);
    assert_eq!(records[0].payload, body);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

async fn a_null_payload_is_a_tombstone_when_allowed(flavor: Flavor) {
    let (s, mut conn, broker) =
        shaped(flavor, 1, |c| c.outbox("tombstone_on_null_payload", "true")).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let deleted = insert(&mut conn, &[("payload", "NULL".into())]).await;
    let kept = insert(&mut conn, &[("payload", "'{\"n\":1}'".into())]).await;

    let records = broker.consume(&s.topic, 2, TIMEOUT, SETTLE);
    let records = keyed(&records);
    assert!(records[&deleted].tombstone, "no value at all");
    assert_eq!(records[&deleted].headers["event_id"], deleted);
    assert!(!records[&kept].tombstone);
    assert_same_payload(flavor, &records[&kept].payload, "{\"n\":1}", &kept);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_column_routes_its_row_and_null_keeps_the_template() {
    let broker = Broker::shared().await;
    let own_topic = unique("invoices");
    broker.create_topic(&own_topic, 1);
    // The scenario's own topic (orders_…) and the row's.
    let (s, mut conn, broker) = shaped(Flavor::MariaDb, 1, |c| {
        c.kafka("allowed_topics", "[\"orders_*\", \"invoices_*\"]")
            .section("[outbox.columns]\ntopic_column = \"route\"")
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let routed = insert(&mut conn, &[("route", format!("'{own_topic}'"))]).await;
    let templated = insert(&mut conn, &[]).await;

    let in_own = broker.consume(&own_topic, 1, TIMEOUT, SETTLE);
    assert_eq!(in_own.len(), 1);
    assert_eq!(in_own[0].key_str(), routed);
    let in_template = broker.consume(&s.topic, 1, TIMEOUT, SETTLE);
    assert_eq!(in_template.len(), 1);
    assert_eq!(in_template[0].key_str(), templated);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

/// Defect: a row's topic could be any legal name but `__*`, the
/// dead-letter topic and the group's own: by its topic column (or
/// `outbox.{aggregate_type}`) a row wrote into another group's checkpoint
/// topic (that group would resume from a forged checkpoint), into a system
/// topic such as `_schemas`, or anywhere else. Those, and any topic
/// `kafka.allowed_topics` (here: the template's own) does not list, are
/// bad rows: under the dead-letter policy they are parked, and nothing
/// reaches the topics they named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_cannot_write_another_groups_checkpoint_topic_a_system_topic_or_an_unlisted_one() {
    let dead_letters = unique("dead");
    let named = [
        format!("outbox.forwarder.checkpoints.{}", unique("payments")),
        format!("_{}", unique("schemas")),
        unique("invoices"),
    ];
    let (s, mut conn, broker) = shaped(Flavor::MariaDb, 1, |c| {
        c.outbox("bad_row_policy", "\"dead_letter\"")
            .kafka("dead_letter_topic", &format!("{dead_letters:?}"))
            .section("[outbox.columns]\ntopic_column = \"route\"")
    })
    .await;
    for topic in named.iter().chain([&dead_letters]) {
        broker.create_topic(topic, 1);
    }
    let mut forwarder = s.setup.spawn_streaming().await;
    let mut refused = BTreeSet::new();
    for topic in &named {
        refused.insert(insert(&mut conn, &[("route", format!("'{topic}'"))]).await);
    }
    let after = insert(&mut conn, &[]).await;

    let records = broker.consume(&s.topic, 1, TIMEOUT, SETTLE);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key_str(), after, "the stream went on");
    let dead = broker.consume(&dead_letters, 3, TIMEOUT, SETTLE);
    let parked: BTreeSet<String> = dead.iter().map(|r| r.headers["event_id"].clone()).collect();
    assert_eq!(parked, refused);
    for (record, topic) in dead.iter().zip(&named) {
        assert!(
            record.headers["error"].contains(topic.as_str()),
            "{:?}",
            record.headers
        );
    }
    assert!(
        dead[2].headers["error"].contains("kafka.allowed_topics"),
        "{:?}",
        dead[2].headers
    );
    for topic in &named {
        assert!(
            broker.consume(topic, 0, SETTLE, SETTLE).is_empty(),
            "{topic}"
        );
    }
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

/// Under `warn`, an UPDATE and a DELETE of outbox rows publish nothing,
/// are named in the log and counted, and the stream goes on.
async fn changed_outbox_rows_under_warn_are_logged_counted_and_passed(flavor: Flavor) {
    let metrics_port = harness::free_port();
    let (s, mut conn, broker) = shaped(flavor, 1, |c| {
        let c = c
            .outbox("on_update", "\"warn\"")
            .outbox("on_delete", "\"warn\"");
        harness::http::with_metrics(c, metrics_port)
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let first = insert(&mut conn, &[]).await;
    update_payload(flavor, &mut conn, &first).await;
    conn.query_drop(format!(
        "DELETE FROM outbox_event WHERE event_id = '{first}'"
    ))
    .await
    .unwrap();
    let after = insert(&mut conn, &[]).await;

    let records = broker.consume(&s.topic, 2, TIMEOUT, SETTLE);
    let ids: BTreeSet<&str> = records.iter().map(Record::key_str).collect();
    assert_eq!(ids, BTreeSet::from([first.as_str(), after.as_str()]));
    let log = forwarder.log();
    for change in ["UPDATE of outbox rows", "DELETE of outbox rows"] {
        let line = log
            .lines()
            .find(|l| l.contains(change))
            .unwrap_or_else(|| panic!("{change} in:\n{log}"));
        assert!(line.contains(&first) && line.contains("binlog."), "{line}");
    }
    let (_, metrics) = harness::http::http_get(metrics_port, "/metrics");
    assert_eq!(
        harness::http::sample(&metrics, "outbox_forwarder_outbox_rows_changed_total"),
        2.0
    );
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

/// A partition number the topic lacks is a bad row of the sink: under the
/// dead-letter policy it goes to the dead-letter topic with the reason and
/// its shape, and the stream goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_the_topic_lacks_goes_to_the_dead_letter_topic_under_that_policy() {
    let dead_letters = unique("dead");
    let (s, mut conn, broker) = shaped(Flavor::MariaDb, 2, |c| {
        c.outbox("bad_row_policy", "\"dead_letter\"")
            .kafka("dead_letter_topic", &format!("{dead_letters:?}"))
            .section("[outbox.columns]\npartition_column = \"shard\"")
    })
    .await;
    broker.create_topic(&dead_letters, 1);
    conn.query_drop("ALTER TABLE outbox_event ADD COLUMN shard INT NULL")
        .await
        .unwrap();
    let mut forwarder = s.setup.spawn_streaming().await;
    let placed = insert(&mut conn, &[("shard", "1".into())]).await;
    let beyond = insert(&mut conn, &[("shard", "7".into())]).await;
    let after = insert(&mut conn, &[]).await;

    let records = broker.consume(&s.topic, 2, TIMEOUT, SETTLE);
    let records = keyed(&records);
    assert_eq!(records[&placed].partition, 1);
    assert!(records.contains_key(&after), "the stream went on");
    assert!(!records.contains_key(&beyond));
    let dead = broker.consume(&dead_letters, 1, TIMEOUT, SETTLE);
    assert_eq!(dead[0].headers["event_id"], beyond);
    assert!(
        dead[0].headers["error"].contains("partition 7"),
        "{:?}",
        dead[0].headers
    );
    let row: serde_json::Value = serde_json::from_slice(&dead[0].payload).unwrap();
    assert_eq!(row["partition"], 7);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

/// The binlog holds an ENUM's index and a SET's bitmap, not their text:
/// mapped to a header or a topic, their messages would carry numbers. check
/// names both, and run refuses before streaming.
async fn enum_and_set_columns_where_text_is_needed_are_refused_before_streaming(flavor: Flavor) {
    let (s, mut conn, _) = shaped(flavor, 1, |c| {
        c.section("[outbox.headers]\nregion = \"region\"\ntags = \"tags\"")
    })
    .await;
    conn.query_drop(
        "ALTER TABLE outbox_event ADD COLUMN region ENUM('eu', 'us') NULL, \
         ADD COLUMN tags SET('vip', 'new') NULL",
    )
    .await
    .unwrap();
    let (text, line) =
        harness::forwarder::failed_check(&s.setup, &format!("outbox {}.outbox_event", s.schema));
    for column in [
        "`region` (header region) is enum",
        "`tags` (header tags) is set",
    ] {
        assert!(
            line.contains(column) && line.contains("the binlog holds its index"),
            "{column}: {line}\n{text}"
        );
    }
    let log = harness::forwarder::refused_run(&s.setup).await;
    assert!(log.contains("`region` (header region) is enum"), "{log}");
}

/// Under `fail` (the default), an UPDATE of an outbox row stops the
/// forwarder, naming the row and where it is, with the checkpoint before
/// it; on MySQL a partial JSON update, whose after image holds only the
/// changed part of the document.
async fn an_update_of_an_outbox_row_under_fail_stops_the_stream_before_it(flavor: Flavor) {
    let (s, mut conn, broker) = shaped(flavor, 1, |c| c.outbox("on_update", "\"fail\"")).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let first = insert(&mut conn, &[]).await;
    broker.consume(&s.topic, 1, TIMEOUT, Duration::ZERO);
    let from = update_payload(flavor, &mut conn, &first).await;
    let after = insert(&mut conn, &[]).await;
    let status = forwarder.wait_exit(TIMEOUT).await;
    let log = forwarder.log();
    assert_eq!(status.code(), Some(2), "{log}");
    let line = log
        .lines()
        .find(|l| l.contains("error:") && l.contains("UPDATE"))
        .unwrap_or_else(|| panic!("the refusal in:\n{log}"));
    assert!(
        line.contains(&first) && line.contains("on_update") && line.contains("binlog."),
        "{line}"
    );
    let checkpoint = s.setup.checkpoint().unwrap().position;
    assert!(
        checkpoint.compare(&from).is_some_and(|o| o.is_le()),
        "checkpoint {checkpoint} stays before the update at {from}"
    );
    let records = broker.consume(&s.topic, 1, TIMEOUT, SETTLE);
    assert!(
        records.iter().all(|r| r.key_str() != after),
        "nothing after the update is published"
    );
}

/// Defect: under `prefix.{aggregate_type}`, a new aggregate type's topic
/// did not exist on a broker that does not create topics on produce
/// (tansu, most managed services): its first event waited unacknowledged,
/// the session restarting every 30 s, until someone created the topic.
/// With `[kafka.topics]` the forwarder creates it, with the partitions
/// configured, before its first message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_kafka_topics_a_new_aggregate_types_topic_is_created_with_the_configured_partitions() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let schema = unique("shop");
    let prefix = unique("t");
    let mut conn = db.create_schema(&schema).await;
    let config = forwarder_config(
        db,
        broker,
        &schema,
        &format!("{prefix}.{{aggregate_type}}"),
        server_id(),
    )
    .section("[kafka.topics]\npartitions = 3\n");
    let setup = harness::ForwarderSetup::new(&config);
    let mut forwarder = setup.spawn_streaming().await;
    let topic = format!("{prefix}.order");
    let partitions = |topic: &str| -> usize {
        let client: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .create()
            .unwrap();
        let metadata = client
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        metadata.topics()[0].partitions().len()
    };
    assert_eq!(partitions(&topic), 0, "{topic} does not exist yet");

    let written = write_order(&mut conn, 6, true).await;
    let records = broker.consume_covering(&topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert_eq!(records.len(), 6);
    assert_eq!(partitions(&topic), 3);
    assert!(
        forwarder
            .log()
            .contains("created the topic ([kafka.topics])"),
        "{}",
        forwarder.log()
    );
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

/// Defect: the table tools' Kafka window began at the selected rows'
/// creation time less the margin, but under `timestamp_column` a message
/// carries its row's own time: rows stamped older than their creation lay
/// before the window, and `verify` called them missing. The window now
/// begins at the oldest stamp too. (A search for the window's start that
/// finds the stamps out of order reads the partition whole; without the
/// broker's time index, under `timestamp_column`, it is read whole too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_tools_find_messages_stamped_with_the_rows_own_older_times() {
    let (s, mut conn, broker) = shaped(Flavor::MariaDb, 1, |c| {
        c.section("[outbox.columns]\ntimestamp_column = \"happened_at\"")
    })
    .await;
    let mut forwarder = s.setup.spawn_streaming().await;
    for _ in 0..40 {
        insert(
            &mut conn,
            &[("happened_at", "NOW(3) - INTERVAL 3 DAY".into())],
        )
        .await;
    }
    insert(&mut conn, &[("happened_at", "NOW(3)".into())]).await;
    let records = broker.consume(&s.topic, 41, TIMEOUT, SETTLE);
    assert_eq!(records.len(), 41);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());

    // Forty messages stamped three days before their rows were created.
    let verify = s.setup.command(&["verify"]);
    let out = harness::forwarder::output_text(&verify);
    assert!(verify.status.success(), "{out}");
    assert!(out.contains("outbox rows 41,"), "{out}");
    assert!(out.contains("missing 0"), "{out}");
}
