//! Names as identifiers, never as SQL: with `[outbox] tables` holding a
//! pattern, schema names come from the server, chosen by whoever may
//! create a database, and key and other column names by whoever may alter
//! an outbox table.

use harness::forwarder::reported;
use outbox_core::sql::{Ident, Qualified};

use super::*;

harness::on_both_flavors!(crafted_schema_table_and_column_names_stay_names_in_every_tool);

/// Defect: names were pasted between backticks without doubling the
/// backticks inside them, and `check` (which every `run` also does) sent
/// its probe as a text query, several statements allowed. A schema named
/// so as to close the probe's identifier made the forwarder delete another
/// team's outbox rows with the DELETE that `[retention]` grants it; a
/// crafted key column broke (or steered) `backfill`, `verify` and `prune`.
async fn crafted_schema_table_and_column_names_stay_names_in_every_tool(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..7];
    // A quote and a semicolon in the configured table name; a backtick is
    // refused there (below), not in names the server reports.
    let table = format!("o'b;{tag}");
    let victim = format!("v{tag}");
    let prober = format!("h{tag}");
    let crafted = format!("{prober}`.`{table}`;DELETE FROM {victim}.`{table}`;#");
    assert!(crafted.chars().count() <= 64, "{crafted}");
    let key = "k`;'x";
    let topic = unique("orders");
    broker.create_topic(&topic, 1);
    db.create_schema(&victim).await;
    let mut root = db.root().await;
    for schema in [&prober, &crafted] {
        root.query_drop(format!("CREATE DATABASE {}", Ident(schema)))
            .await
            .unwrap();
    }
    for schema in [&victim, &prober, &crafted] {
        let outbox = Qualified(schema, &table);
        root.query_drop(format!(
            "CREATE TABLE {outbox} LIKE {}",
            Qualified(&victim, "outbox_event")
        ))
        .await
        .unwrap();
        // `[retention]` with `*.table` needs DELETE on each of them.
        root.query_drop(format!(
            "GRANT DELETE ON {outbox} TO '{FORWARDER_USER}'@'%'"
        ))
        .await
        .unwrap();
    }
    // The crafted schema's outbox is keyed by a crafted column too.
    root.query_drop(format!(
        "ALTER TABLE {} ADD COLUMN {k} INT NOT NULL DEFAULT 7, DROP PRIMARY KEY, \
         ADD PRIMARY KEY ({k}, event_id)",
        Qualified(&crafted, &table),
        k = Ident(key)
    ))
    .await
    .unwrap();

    let config = forwarder_config(db, broker, &victim, &topic, server_id())
        .tables(vec![format!("*.{table}")])
        .section("[retention]\nolder_than_seconds = 3600\n");
    let setup = ForwarderSetup::new(&config);
    let mut forwarder = setup.spawn_streaming().await;
    let mut written = std::collections::HashSet::new();
    for schema in [&victim, &crafted] {
        for _ in 0..2 {
            let id = uuid::Uuid::new_v4().to_string();
            root.exec_drop(
                format!(
                    "INSERT INTO {} (event_id, aggregate_type, aggregate_id, event_type, payload) \
                     VALUES (?, 'order', '1', 'ORDER_ACCEPTED', '{{}}')",
                    Qualified(schema, &table)
                ),
                (&id,),
            )
            .await
            .unwrap();
            written.insert(id);
        }
    }
    let records = broker.consume_covering(&topic, &written, TIMEOUT, Duration::ZERO);
    assert_eq!(records.len(), 4);
    assert!(forwarder.terminate().success(), "{}", forwarder.log());

    let rows_of = |schema: String| {
        let sql = format!("SELECT COUNT(*) FROM {}", Qualified(&schema, &table));
        async move { db.root().await.query_first::<u64, _>(sql).await.unwrap() }
    };
    let check = setup.command(&["check"]);
    let out = output_text(&check);
    assert!(check.status.success(), "{out}");
    assert!(
        out.contains(&format!("PASS  outbox {crafted}.{table}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("PASS  retention {crafted}.{table}")),
        "{out}"
    );
    assert_eq!(rows_of(victim.clone()).await, Some(2), "{out}");

    let verify = setup.command(&["verify"]);
    let out = output_text(&verify);
    assert!(verify.status.success(), "{out}");
    assert!(out.contains("missing 0"), "{out}");
    let backfill = setup.command(&["backfill"]);
    let out = output_text(&backfill);
    assert!(backfill.status.success(), "{out}");
    assert_eq!(reported(&out, "missing from Kafka"), 0, "{out}");

    for schema in [&victim, &crafted] {
        root.query_drop(format!(
            "UPDATE {} SET created_at = NOW(6) - INTERVAL 1 HOUR",
            Qualified(schema, &table)
        ))
        .await
        .unwrap();
    }
    let prune = setup.command(&["prune", "--older-than", "10m"]);
    let out = output_text(&prune);
    assert!(prune.status.success(), "{out}");
    assert_eq!(reported(&out, "deleted"), 4, "{out}");
    assert_eq!(rows_of(crafted.clone()).await, Some(0), "{out}");

    // A configured name with a backtick is refused, naming the setting.
    setup.write(
        &config
            .outbox("columns", "{ event_id = \"event_id` FROM mysql.user #\" }")
            .to_string(),
    );
    let refused = setup.command(&["check"]);
    let out = output_text(&refused);
    assert!(!refused.status.success(), "{out}");
    assert!(
        out.contains("outbox.columns.event_id") && out.contains("backtick"),
        "{out}"
    );
}
