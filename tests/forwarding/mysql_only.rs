//! What only MySQL writes into its binlog, forwarded end to end: compressed
//! transaction payloads, tagged GTIDs, and a server with GTIDs off (resumed
//! by file:pos, recognised by its `server_uuid`).

use super::*;

/// A MySQL server of its own with GTIDs off, and `extra` options.
async fn gtids_off(extra: &[&str]) -> DbServer {
    let mut args = vec!["--gtid-mode=OFF", "--enforce-gtid-consistency=OFF"];
    args.extend_from_slice(extra);
    DbServer::start(Flavor::MySql, &args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_in_compressed_payloads_are_decompressed_and_forwarded_exactly_once() {
    let db = DbServer::shared(Flavor::MySql).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let from = db.position().await;

    conn.query_drop("SET SESSION binlog_transaction_compression = ON")
        .await
        .unwrap();
    let mut written = Vec::new();
    for i in 0..10 {
        written.extend(write_order(&mut conn, 1 + i % 3, i % 2 == 0).await);
    }
    // A transaction larger than a compressed chunk, then one uncompressed
    // after the compressed ones.
    let big = Written::new("big", &format!(r#"{{"blob":"{}"}}"#, "y".repeat(300_000)));
    insert_events(&mut conn, std::slice::from_ref(&big), false).await;
    written.push(big);
    conn.query_drop("SET SESSION binlog_transaction_compression = OFF")
        .await
        .unwrap();
    written.extend(write_order(&mut conn, 2, true).await);
    let written_up_to = db.position().await;

    // The server did compress them: 11 payload events.
    let types = db.binlog_event_types_since(&from).await;
    let payloads = types.iter().filter(|t| *t == "Transaction_payload").count();
    assert_eq!(
        payloads, 11,
        "compressed transactions in the binlog: {types:?}"
    );

    let records = broker.consume(&s.topic, written.len(), TIMEOUT, SETTLE);
    assert_eq!(assert_each_once(&records, &ids(&written)), written.len());
    let keyed = by_key(&records);
    for w in &written {
        assert_same_payload(Flavor::MySql, &keyed[&w.id][0].payload, &w.payload, &w.id);
    }
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    assert_covers(&s.setup.checkpoint().unwrap().position, &written_up_to);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagged_gtid_transactions_are_forwarded_and_resumed_from_by_their_tag() {
    let db = DbServer::shared(Flavor::MySql).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;

    let tagged = |on: bool| {
        if on {
            "SET gtid_next = 'AUTOMATIC:outbox'"
        } else {
            "SET gtid_next = 'AUTOMATIC'"
        }
    };
    let mut written = Vec::new();
    conn.query_drop(tagged(true)).await.unwrap();
    for _ in 0..3 {
        written.extend(write_order(&mut conn, 2, true).await);
    }
    conn.query_drop(tagged(false)).await.unwrap();
    written.extend(write_order(&mut conn, 1, false).await);
    let executed = db.gtid_binlog_pos().await;
    assert!(
        executed.contains(":outbox:"),
        "the server recorded tagged GTIDs: {executed}"
    );
    let records = broker.consume(&s.topic, written.len(), TIMEOUT, Duration::ZERO);
    assert_eq!(assert_each_once(&records, &ids(&written)), 7);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    let checkpoint = s.setup.checkpoint().unwrap();
    let gtid = checkpoint.gtid.expect("a GTID state in the checkpoint");
    assert!(
        gtid.to_string().contains(":outbox:"),
        "the checkpoint's GTID set keeps the tag: {gtid}"
    );

    // Written while stopped, tagged: the next start asks the server for
    // what follows a set with a tag in it, and gets exactly that.
    conn.query_drop(tagged(true)).await.unwrap();
    let mut after = Vec::new();
    for _ in 0..2 {
        after.extend(write_order(&mut conn, 1, false).await);
    }
    conn.query_drop(tagged(false)).await.unwrap();
    let mut forwarder = s.setup.spawn(&[]);
    forwarder
        .wait_for_log("resuming from the stored checkpoint", TIMEOUT)
        .await;
    written.extend(after.iter().cloned());
    let records = broker.consume_covering(&s.topic, &ids(&after), TIMEOUT, SETTLE);
    assert_eq!(assert_each_once(&records, &ids(&written)), 9);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_gtids_off_a_restart_resumes_by_file_and_position_on_the_same_server_uuid() {
    let db = &gtids_off(&[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 2, |c| c).await;
    let mut conn = s.conn(db).await;
    let server_uuid = db.server_uuid().await;

    let mut forwarder = s.setup.spawn_streaming().await;
    let mut written = Vec::new();
    for _ in 0..5 {
        written.extend(write_order(&mut conn, 2, false).await);
    }
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    let checkpoint = s.setup.checkpoint().unwrap();
    assert_eq!(checkpoint.gtid, None, "no GTIDs to record");
    assert_eq!(
        checkpoint.source.server_uuid.as_deref(),
        Some(&*server_uuid)
    );
    assert_covers(&checkpoint.position, &db.position().await);

    // Written while stopped, across a rotation.
    let mut after = Vec::new();
    after.extend(write_order(&mut conn, 1, false).await);
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    after.extend(write_order(&mut conn, 3, true).await);
    let mut forwarder = s.setup.spawn(&[]);
    forwarder
        .wait_for_log("resuming from the stored checkpoint", TIMEOUT)
        .await;
    written.extend(after.iter().cloned());
    let records = broker.consume_covering(&s.topic, &ids(&after), TIMEOUT, SETTLE);
    assert_eq!(assert_each_once(&records, &ids(&written)), 14);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    assert_covers(
        &s.setup.checkpoint().unwrap().position,
        &db.position().await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_gtids_off_a_reset_of_the_binary_logs_past_the_checkpoints_file_is_refused_naming_it()
{
    let db = &gtids_off(&[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = write_order(&mut conn, 3, true).await;
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let mut more = write_order(&mut conn, 2, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    broker.consume_covering(&s.topic, &ids(&more), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    let checkpoint = s.setup.checkpoint().unwrap();
    assert_eq!(checkpoint.position.file, "binlog.000002");

    // The binlog starts again at binlog.000001: the checkpoint's file is
    // gone. (A checkpoint in binlog.000001 itself would now point into the
    // new file's events.)
    conn.query_drop("RESET BINARY LOGS AND GTIDS")
        .await
        .unwrap();
    more.extend(write_order(&mut conn, 1, false).await);
    assert_eq!(db.position().await.file, "binlog.000001");

    let log = harness::forwarder::refused_run(&s.setup).await;
    assert!(
        log.contains(&checkpoint.position.to_string()),
        "names the position:\n{log}"
    );
    assert_eq!(
        s.setup.checkpoint().unwrap(),
        checkpoint,
        "checkpoint untouched"
    );
}

/// Defect: with GTIDs off, a server is named by `server_uuid` alone, and a
/// reset of the binary logs starts `binlog.000001` again: a checkpoint in
/// the first file then named a position inside the new file's events, and
/// the stream started there. The file's FORMAT_DESCRIPTION time, recorded
/// with the checkpoint, tells the new file from the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_gtids_off_a_reset_of_the_binary_logs_under_the_checkpoints_file_is_refused() {
    let db = &gtids_off(&[]).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = write_order(&mut conn, 3, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    let checkpoint = s.setup.checkpoint().unwrap();
    assert_eq!(checkpoint.position.file, "binlog.000001");
    assert!(
        checkpoint.file_created_at.is_some(),
        "the file's creation time is recorded"
    );

    // Written while stopped, then the binlog reset (a second later, so
    // the new file's time differs), and written again until the new
    // binlog.000001 is longer than the checkpoint's position.
    write_order(&mut conn, 2, true).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    conn.query_drop("RESET BINARY LOGS AND GTIDS")
        .await
        .unwrap();
    while db.position().await.pos <= checkpoint.position.pos + 1_000 {
        write_order(&mut conn, 5, true).await;
    }
    assert_eq!(
        db.position().await.file,
        checkpoint.position.file,
        "the fault: the checkpoint's file name is there again"
    );

    let log = harness::forwarder::refused_run(&s.setup).await;
    assert!(
        log.contains(&checkpoint.position.to_string()) && log.contains("was reset"),
        "names the position and the reset:\n{log}"
    );
    assert_eq!(
        s.setup.checkpoint().unwrap(),
        checkpoint,
        "checkpoint untouched"
    );
}

/// MySQL's expiry setting (`binlog_expire_logs_seconds`, its default 30
/// days) is what the purge headroom counts down from: the metric while
/// streaming, and `check`'s warning for a checkpoint whose file expires
/// within a day (here by file:pos, GTIDs off). Below
/// `mysql.min_binlog_retention_hours`, check fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_headroom_counts_down_from_binlog_expire_logs_seconds() {
    let db = &gtids_off(&["--binlog-expire-logs-seconds=7200"]).await;
    let broker = Broker::shared().await;
    let port = harness::free_port();
    // Two hours is below the default minimum of a day: check fails.
    let strict = Scenario::new(db, broker, 1, |c| c).await;
    let (text, line) = harness::forwarder::failed_check(&strict.setup, "binlog retention");
    assert!(
        line.contains("binlog_expire_logs_seconds=7200 (2h)") && line.contains("at least 24h"),
        "{text}"
    );
    let s = Scenario::new(db, broker, 1, |c| {
        harness::http::with_metrics(c, port).mysql("min_binlog_retention_hours", "1")
    })
    .await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    let written = write_order(&mut conn, 3, true).await;
    broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::ZERO);
    // Caught up in the file being written: all of it.
    let (_, body) = harness::http::http_get(port, "/metrics");
    assert_eq!(
        harness::http::sample(&body, "outbox_forwarder_binlog_purge_headroom_seconds"),
        7200.0
    );
    assert!(forwarder.terminate().success(), "{}", forwarder.log());

    let check = s.setup.command(&["check"]);
    let text = harness::forwarder::output_text(&check);
    let line = harness::forwarder::check_line(&text, "checkpoint binlog");
    let hours: u64 = line
        .split("expiry purges it in at most ")
        .nth(1)
        .and_then(|rest| rest.split('h').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        line.starts_with("WARN") && hours <= 2 && line.contains("binlog_expire_logs_seconds"),
        "{line}"
    );
}

/// MySQL's binary JSON published as JSON text the server agrees with: a
/// corpus of documents (nested objects and arrays, every scalar type, the
/// large storage format, unicode and escapes, empty containers and bare
/// scalars, and MySQL's own types inside JSON: DECIMAL, DATE, DATETIME,
/// TIME, TIMESTAMP, binary) inserted by the server's JSON functions; each
/// message's payload is the same JSON value as the server's
/// `CAST(payload AS CHAR)` of its row, compact with the keys in byte order,
/// and byte for byte the server's text where the key orders agree (numbers
/// as printed: a DECIMAL keeps every digit of its scale).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_json_is_published_as_the_json_the_server_prints() {
    let db = DbServer::shared(Flavor::MySql).await;
    let broker = Broker::shared().await;
    let s = Scenario::new(db, broker, 1, |c| c).await;
    let mut conn = s.conn(db).await;
    let mut forwarder = s.setup.spawn_streaming().await;
    conn.query_drop("SET SESSION cte_max_recursion_depth = 10000")
        .await
        .unwrap();
    // A TIMESTAMP inside JSON comes from a TIMESTAMP column (the
    // TIMESTAMP() function makes a DATETIME).
    conn.query_drop(
        "CREATE TABLE json_source (ts TIMESTAMP(6) NOT NULL); \
         INSERT INTO json_source VALUES ('2024-03-01 00:00:00.250000')",
    )
    .await
    .unwrap();
    // (expression, whether the server's text with its separators' spaces
    // removed is the payload byte for byte: keys of one length, or none).
    let corpus = [
        ("JSON_OBJECT('a', 1, 'b', JSON_ARRAY(1, 2.5, 'x', TRUE, FALSE, NULL), \
         'nested', JSON_OBJECT('k', JSON_OBJECT('deeper', JSON_ARRAY(JSON_OBJECT(), JSON_ARRAY()))))", false),
        ("JSON_ARRAY(0, -1, 32767, -32768, 32768, 2147483647, -2147483648, 2147483648, \
         9223372036854775807, -9223372036854775808, 18446744073709551615)", true),
        ("JSON_ARRAY(0.5, -1.25e-300, 1e300, 3.141592653589793, CAST(1e20 AS DOUBLE))", false),
        ("JSON_OBJECT('text', 'naïve café ☕ 你好 🎉', 'ctl', CONCAT('a', CHAR(1 USING utf8mb4), 'b', \
         CHAR(10 USING utf8mb4), CHAR(127 USING utf8mb4), 'c\"\\\\'), 'é', 'key', '', 'empty key')", false),
        ("JSON_OBJECT('a', CAST(1234.50 AS DECIMAL(10,2)), 'b', CAST(-0.001 AS DECIMAL(10,3)), \
         'c', CAST(12345678901234567890.123456789 AS DECIMAL(40,9)), 'd', CAST(0 AS DECIMAL(5,2)), \
         'e', CAST('2024-02-29' AS DATE), 'f', CAST('2024-02-29 13:14:15.123456' AS DATETIME(6)), \
         'g', CAST('-838:59:59' AS TIME), 'h', CAST('01:02:03.5' AS TIME(1)), \
         'i', (SELECT ts FROM json_source), 'j', CAST(7 AS DECIMAL(30,0)))", true),
        ("JSON_ARRAY(x'cafe', CAST('bytes' AS BINARY))", true),
        ("(SELECT JSON_ARRAYAGG(JSON_OBJECT('n', n, 's', REPEAT('x', 20))) FROM \
         (WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 5000) \
         SELECT n FROM seq) AS t)", true),
        ("JSON_ARRAY()", true),
        ("JSON_OBJECT()", true),
        ("CAST('\"just text\"' AS JSON)", true),
        ("CAST('42' AS JSON)", true),
        ("CAST('null' AS JSON)", true),
        ("JSON_OBJECT('bb', 1, 'a', 2, 'ccc', 3, 'B', 4)", false),
    ];
    let mut ids = Vec::new();
    for (expression, _) in corpus {
        let id = Written::new("json", "{}").id;
        conn.exec_drop(
            format!(
                "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, \
                 payload) SELECT ?, 'order', 'json', 'ORDER_ACCEPTED', {expression}"
            ),
            (&id,),
        )
        .await
        .unwrap_or_else(|e| panic!("{expression}: {e}"));
        ids.push(id);
    }
    let expected: HashSet<String> = ids.iter().cloned().collect();
    let records = broker.consume(&s.topic, ids.len(), TIMEOUT, SETTLE);
    assert_eq!(
        assert_each_once(&records, &expected),
        ids.len(),
        "{}",
        forwarder.log()
    );
    let keyed = by_key(&records);
    for (id, (expression, exact)) in ids.iter().zip(corpus) {
        let printed: String = conn
            .exec_first(
                "SELECT CAST(payload AS CHAR) FROM outbox_event WHERE event_id = ?",
                (id,),
            )
            .await
            .unwrap()
            .unwrap();
        let payload = &keyed[id][0].payload;
        let published: serde_json::Value = serde_json::from_slice(payload)
            .unwrap_or_else(|e| panic!("{expression}: {e}: {}", String::from_utf8_lossy(payload)));
        let server: serde_json::Value = serde_json::from_str(&printed).unwrap();
        assert_eq!(
            published,
            server,
            "{expression}\npublished {}\nserver    {printed}",
            String::from_utf8_lossy(payload)
        );
        if exact {
            assert_eq!(
                String::from_utf8_lossy(payload),
                without_separator_spaces(&printed),
                "{expression}"
            );
        }
    }
    // Compact, keys in byte order.
    let last = &keyed[ids.last().unwrap()][0].payload;
    assert_eq!(
        String::from_utf8_lossy(last),
        r#"{"B":4,"a":2,"bb":1,"ccc":3}"#
    );
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
}

/// The server's JSON text without the spaces it puts after `,` and `:`
/// (those outside strings).
fn without_separator_spaces(text: &str) -> String {
    let (mut out, mut in_string, mut escaped) = (String::new(), false, false);
    for c in text.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            ' ' if !in_string => continue,
            _ => {}
        }
        out.push(c);
    }
    out
}
