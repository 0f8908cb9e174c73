//! The outbox workload the end-to-end tests write, and how they check what
//! arrived.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_core::BinlogPosition;

use crate::config::ForwarderToml;
use crate::{unique, Broker, DbServer, Flavor, ForwarderSetup, Record};

pub const SETTLE: Duration = Duration::from_secs(2);

/// An event as the test wrote it.
#[derive(Debug, Clone)]
pub struct Written {
    pub id: String,
    pub aggregate_id: String,
    pub payload: String,
}

impl Written {
    /// A new event id with the given aggregate id and payload.
    pub fn new(aggregate_id: &str, payload: &str) -> Self {
        Written {
            id: uuid::Uuid::new_v4().to_string(),
            aggregate_id: aggregate_id.to_owned(),
            payload: payload.to_owned(),
        }
    }
}

/// A forwarder configuration for `schema.outbox_event` → `topic`, with
/// short intervals so tests run fast. `{checkpoint}` is filled in by
/// [`crate::ForwarderSetup`].
pub fn forwarder_config(
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    topic: &str,
    server_id: u32,
) -> ForwarderToml {
    forwarder_config_at(&[db], broker, schema, topic, server_id)
}

/// [`forwarder_config`] with `mysql.url` listing `servers` in order (the
/// candidates of a failover).
pub fn forwarder_config_at(
    servers: &[&DbServer],
    broker: &Broker,
    schema: &str,
    topic: &str,
    server_id: u32,
) -> ForwarderToml {
    ForwarderToml::new(
        servers.iter().map(|s| s.forwarder_url()).collect(),
        broker.bootstrap(),
        broker.client_properties(),
        schema,
        topic,
        server_id,
    )
}

/// One `"key" = "value"` line of a TOML table such as `[kafka.properties]`.
pub fn property_line(key: &str, value: &str) -> String {
    format!("{key:?} = {value:?}\n")
}

/// A replica id no other forwarder of this run uses.
pub fn server_id() -> u32 {
    10_000 + (uuid::Uuid::new_v4().as_u128() % 1_000_000) as u32
}

/// Inserts one order and `events` outbox rows in one transaction (a
/// multi-row INSERT when `multi_row`).
pub async fn write_order(conn: &mut Conn, events: usize, multi_row: bool) -> Vec<Written> {
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    tx.query_drop(
        "INSERT INTO orders (customer, amount_cents, status) VALUES ('c', 1000, 'ACCEPTED')",
    )
    .await
    .unwrap();
    let order_id: u64 = tx.last_insert_id().unwrap();
    let written: Vec<Written> = (0..events)
        .map(|i| {
            let id = uuid::Uuid::new_v4().to_string();
            Written {
                payload: format!(r#"{{"order_id":{order_id},"line":{i},"event_id":"{id}"}}"#),
                aggregate_id: order_id.to_string(),
                id,
            }
        })
        .collect();
    insert_events(&mut tx, &written, multi_row).await;
    tx.commit().await.unwrap();
    written
}

/// Commits one order with one event every 3 ms on `conn` until `stop`,
/// or until the server goes away (a failover test kills it); returns what
/// it committed.
pub fn steady_load(
    mut conn: Conn,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Written>> {
    tokio::spawn(async move {
        let mut written = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            match try_write_order(&mut conn).await {
                Ok(event) => written.push(event),
                Err(e) => {
                    eprintln!("steady load stopped: {e}");
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        written
    })
}

/// One order and its event in one transaction, or the error that stopped it.
async fn try_write_order(conn: &mut Conn) -> Result<Written, mysql_async::Error> {
    let mut tx = conn.start_transaction(Default::default()).await?;
    tx.query_drop(
        "INSERT INTO orders (customer, amount_cents, status) VALUES ('c', 1000, 'ACCEPTED')",
    )
    .await?;
    let order_id = tx.last_insert_id().unwrap_or_default().to_string();
    let event = Written::new(&order_id, "{}");
    tx.query_drop(format!(
        "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, \
         event_version, payload) VALUES ('{}', 'order', '{order_id}', 'ORDER_ACCEPTED', 1, '{{}}')",
        event.id
    ))
    .await?;
    tx.commit().await?;
    Ok(event)
}

pub async fn insert_events<Q: Queryable>(q: &mut Q, events: &[Written], multi_row: bool) {
    let row = |e: &Written| {
        format!(
            "('{}', 'order', '{}', 'ORDER_ACCEPTED', 1, '{}')",
            e.id,
            e.aggregate_id,
            e.payload.replace('\'', "''")
        )
    };
    let head = "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, event_version, payload) VALUES ";
    if multi_row {
        let rows: Vec<String> = events.iter().map(row).collect();
        q.query_drop(format!("{head}{}", rows.join(",")))
            .await
            .unwrap();
    } else {
        for e in events {
            q.query_drop(format!("{head}{}", row(e))).await.unwrap();
        }
    }
}

/// The payload that arrived is the one written: byte for byte on MariaDB
/// (its JSON is text); on MySQL the same JSON value, as MySQL keeps JSON in
/// its binary form and renders it in its own spacing and key order.
pub fn assert_same_payload(flavor: Flavor, arrived: &[u8], written: &str, event_id: &str) {
    match flavor {
        Flavor::MariaDb => assert_eq!(
            arrived,
            written.as_bytes(),
            "payload of {event_id} byte-identical"
        ),
        Flavor::MySql => {
            let arrived: serde_json::Value = serde_json::from_slice(arrived)
                .unwrap_or_else(|e| panic!("payload of {event_id} is not JSON: {e}"));
            let written: serde_json::Value = serde_json::from_str(written).unwrap();
            assert_eq!(
                arrived, written,
                "payload of {event_id} the same JSON value"
            );
        }
    }
}

pub fn by_key(records: &[Record]) -> HashMap<String, Vec<&Record>> {
    let mut map: HashMap<String, Vec<&Record>> = HashMap::new();
    for r in records {
        map.entry(r.key_str().to_owned()).or_default().push(r);
    }
    map
}

/// The checkpoint is at or past `position` (in the same binlog).
pub fn assert_covers(checkpoint: &BinlogPosition, position: &BinlogPosition) {
    let order = checkpoint.compare(position).expect("same binlog");
    assert!(
        order.is_ge(),
        "checkpoint {checkpoint} is before {position}"
    );
}

pub fn ids(written: &[Written]) -> HashSet<String> {
    written.iter().map(|w| w.id.clone()).collect()
}

/// Every "checkpoint written" position in a forwarder log.
pub fn checkpoints_written(log: &str) -> Vec<BinlogPosition> {
    log.lines()
        .filter(|l| l.contains("checkpoint written"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("checkpoint="))
                .and_then(|p| p.parse().ok())
        })
        .collect()
}

/// How many events after the checkpoint a forwarder found in Kafka at its
/// starts (and did not publish again), from its log.
pub fn already_published(log: &str) -> usize {
    resumed_field(log, "already_published=")
}

/// The sum of `field` (e.g. `backfilled=`) over a forwarder log's
/// "resuming at ..." lines.
pub fn resumed_field(log: &str, field: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("will not be republished"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(field))
                .and_then(|n| {
                    n.trim_matches(|c: char| !c.is_ascii_digit())
                        .parse::<usize>()
                        .ok()
                })
        })
        .sum()
}

/// `(end, events)` of every "transaction read" line in a forwarder log.
pub fn transactions_read(log: &str) -> Vec<(BinlogPosition, usize)> {
    log.lines()
        .filter(|l| l.contains("transaction read"))
        .filter_map(|l| {
            let field = |name: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .map(|v| v.trim_matches(|c: char| c.is_ascii_control()).to_owned())
            };
            let end = field("end=")?.parse().ok()?;
            let events = field("events=")?.parse().ok()?;
            Some((end, events))
        })
        .collect()
}

/// A test's own schema (with the migrations), topic and forwarder setup on
/// shared or dedicated servers.
pub struct Scenario {
    pub schema: String,
    pub topic: String,
    pub setup: ForwarderSetup,
}

impl Scenario {
    /// `edit` adjusts the standard configuration of [`forwarder_config`].
    pub async fn new(
        db: &DbServer,
        broker: &Broker,
        partitions: u32,
        edit: impl Fn(ForwarderToml) -> ForwarderToml,
    ) -> Scenario {
        Self::with_schema(db, broker, partitions, &unique("shop"), edit).await
    }

    /// [`Scenario::new`] on the schema named `schema`.
    pub async fn with_schema(
        db: &DbServer,
        broker: &Broker,
        partitions: u32,
        schema: &str,
        edit: impl Fn(ForwarderToml) -> ForwarderToml,
    ) -> Scenario {
        let schema = schema.to_owned();
        let topic = unique("orders");
        broker.create_topic(&topic, partitions);
        db.create_schema(&schema).await;
        let body = edit(forwarder_config(db, broker, &schema, &topic, server_id()));
        Scenario {
            setup: ForwarderSetup::new(&body),
            schema,
            topic,
        }
    }

    /// Lets the forwarder's user delete from the scenario's outbox table
    /// (`prune`, `[retention]`).
    pub async fn grant_delete(&self, db: &DbServer) {
        let mut root = db.root().await;
        root.query_drop(format!(
            "GRANT DELETE ON `{}`.outbox_event TO 'forwarder'@'%'",
            self.schema
        ))
        .await
        .unwrap();
    }

    /// A root connection using the scenario's schema.
    pub async fn conn(&self, db: &DbServer) -> Conn {
        let mut conn = db.root().await;
        conn.query_drop(format!("USE `{}`", self.schema))
            .await
            .unwrap();
        conn
    }
}

/// The `published_by` header of a record (the instance of an `[ha]` group).
pub fn published_by(record: &Record) -> &str {
    record
        .headers
        .get("published_by")
        .map(String::as_str)
        .unwrap_or_default()
}

/// Per partition in offset order: once `later` has published, `earlier`
/// never again. Returns how many records follow `later`'s first.
pub fn assert_one_after_the_other(records: &[Record], earlier: &str, later: &str) -> usize {
    let mut partitions: BTreeMap<i32, Vec<&Record>> = BTreeMap::new();
    for r in records {
        partitions.entry(r.partition).or_default().push(r);
    }
    let mut after = 0;
    for (partition, mut rs) in partitions {
        rs.sort_by_key(|r| r.offset);
        let Some(first) = rs.iter().position(|r| published_by(r) == later) else {
            continue;
        };
        let late: Vec<i64> = rs[first..]
            .iter()
            .filter(|r| published_by(r) == earlier)
            .map(|r| r.offset)
            .collect();
        assert!(
            late.is_empty(),
            "partition {partition}: {earlier} published at offsets {late:?} after {later}'s first message"
        );
        after += rs.len() - first;
    }
    after
}

/// The event ids in `schema`'s outbox table on `db`.
pub async fn event_ids_in(db: &DbServer, schema: &str) -> HashSet<String> {
    let mut conn = db.root().await;
    conn.query_map(
        format!("SELECT event_id FROM `{schema}`.outbox_event"),
        |id: String| id,
    )
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// Rotates the binlog twice and purges every file but the newest,
/// repeating the purge until the server lets the files go (MariaDB keeps
/// a file until InnoDB no longer needs it for recovery); returns the
/// newest file, now the oldest the server has.
pub async fn purge_all_but_the_newest_binlog(db: &DbServer, conn: &mut Conn) -> String {
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let newest = db.position().await.file;
    let deadline = std::time::Instant::now() + crate::TIMEOUT;
    loop {
        conn.query_drop(format!("PURGE BINARY LOGS TO '{newest}'"))
            .await
            .unwrap();
        // MySQL adds an `Encrypted` column to the name and size.
        let oldest: mysql_async::Row = conn.query_first("SHOW BINARY LOGS").await.unwrap().unwrap();
        let oldest: String = oldest.get(0).unwrap();
        if oldest == newest {
            return newest;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{oldest} was never purged"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Inserts `n` outbox rows created at `created_at` with the binlog off for
/// the session: rows the forwarder can never read, as if their binlog was
/// lost. Returns them.
pub async fn insert_unlogged(conn: &mut Conn, n: usize, created_at: &str) -> Vec<Written> {
    let written: Vec<Written> = (0..n)
        .map(|i| Written::new(&format!("u{i}"), &format!(r#"{{"line":{i}}}"#)))
        .collect();
    conn.query_drop("SET SESSION sql_log_bin = 0")
        .await
        .unwrap();
    for chunk in written.chunks(1000) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|e| {
                format!(
                    "('{}', 'order', '{}', 'ORDER_ACCEPTED', 1, '{}', '{created_at}')",
                    e.id, e.aggregate_id, e.payload
                )
            })
            .collect();
        conn.query_drop(format!(
            "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, \
             event_version, payload, created_at) VALUES {}",
            rows.join(",")
        ))
        .await
        .unwrap();
    }
    conn.query_drop("SET SESSION sql_log_bin = 1")
        .await
        .unwrap();
    written
}

/// Asserts every id of `ids` is among `records` exactly once; returns how
/// many records there are.
pub fn assert_each_once(records: &[Record], ids: &HashSet<String>) -> usize {
    let keyed = by_key(records);
    let missing: Vec<&String> = ids.iter().filter(|id| !keyed.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} ids missing, e.g. {:?}",
        missing.len(),
        missing.first()
    );
    let repeated: Vec<(&String, usize)> = keyed
        .iter()
        .filter(|(_, rs)| rs.len() > 1)
        .map(|(id, rs)| (id, rs.len()))
        .collect();
    assert!(
        repeated.is_empty(),
        "{} ids repeated, e.g. {:?}",
        repeated.len(),
        repeated.first()
    );
    records.len()
}
