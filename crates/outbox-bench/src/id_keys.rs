//! `--id-keys ROWS`: outbox inserts per second with random (UUIDv4) against
//! time-ordered (UUIDv7) `event_id` primary keys, as the table grows past
//! the buffer pool.
//!
//! Two durable servers of the flavor, alike (`innodb_buffer_pool_size` of
//! `--id-keys-pool-mb`, `O_DIRECT` so that a page not in the pool is read
//! from the disk, not from the kernel's cache), one per kind of id, each
//! with the migrations' outbox table. The writer library appends
//! `--id-keys-batch` events per transaction, one order row with them,
//! taking turns: a step of each kind, then the next, so that both meet the
//! same machine. Each tenth of the growth is reported: rows/s for both,
//! their ratio, the table's size against the pool, and the pages InnoDB
//! had to read from the disk.

use std::time::{Duration, Instant};

use harness::{unique, DbServer, Flavor};
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_writer::{NewEvent, Outbox, OutboxTable};

use crate::args::Args;

/// Ids of one kind on a server of their own.
struct Side {
    name: &'static str,
    random: bool,
    /// Kept running while its side is measured.
    _db: DbServer,
    conn: Conn,
    outbox: Outbox,
    written: usize,
}

/// One tenth of the growth of both tables.
struct Stage {
    rows: usize,
    rate: [f64; 2],
    table_mb: [f64; 2],
    disk_reads: [u64; 2],
}

async fn side(args: &Args, flavor: Flavor, name: &'static str, random: bool) -> Side {
    let pool = format!("--innodb-buffer-pool-size={}M", args.id_keys_pool_mb);
    let db = DbServer::start(
        flavor,
        &[
            "--innodb-flush-log-at-trx-commit=1",
            "--sync-binlog=1",
            "--innodb-flush-method=O_DIRECT",
            &pool,
        ],
    )
    .await;
    let mut conn = db.create_schema(&unique("ids")).await;
    let outbox = OutboxTable::new("outbox_event")
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap();
    Side {
        name,
        random,
        _db: db,
        conn,
        outbox,
        written: 0,
    }
}

impl Side {
    /// Appends `rows` events, `batch` per transaction; the time it took.
    async fn write(&mut self, rows: usize, batch: usize, payload: &str) -> Duration {
        let started = Instant::now();
        let mut left = rows;
        while left > 0 {
            let n = left.min(batch);
            let mut tx = self
                .conn
                .start_transaction(Default::default())
                .await
                .unwrap();
            tx.query_drop(
                "INSERT INTO orders (customer, amount_cents, status) VALUES ('b', 1, 'ACCEPTED')",
            )
            .await
            .unwrap();
            let events: Vec<NewEvent> = (0..n)
                .map(|i| {
                    let event = NewEvent::new(
                        "order",
                        (self.written + i).to_string(),
                        "ORDER_ACCEPTED",
                        &serde_json_payload(payload),
                    )
                    .unwrap();
                    match self.random {
                        true => event.event_id(uuid::Uuid::new_v4().to_string()),
                        false => event,
                    }
                })
                .collect();
            self.outbox.append_all(&mut tx, &events).await.unwrap();
            tx.commit().await.unwrap();
            self.written += n;
            left -= n;
        }
        started.elapsed()
    }

    /// The outbox table's data and index size, in MB, as fresh statistics
    /// count it.
    async fn table_mb(&mut self) -> f64 {
        self.conn
            .query_drop("ANALYZE TABLE outbox_event")
            .await
            .unwrap();
        let bytes: Option<u64> = self
            .conn
            .query_first(
                "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_event'",
            )
            .await
            .unwrap();
        bytes.unwrap_or_default() as f64 / 1e6
    }

    /// Pages InnoDB has read from the disk since it started.
    async fn disk_reads(&mut self) -> u64 {
        let row: Option<(String, u64)> = self
            .conn
            .query_first("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_reads'")
            .await
            .unwrap();
        row.map(|(_, n)| n).unwrap_or_default()
    }
}

fn serde_json_payload(text: &str) -> serde_json::Value {
    serde_json::json!({ "customer": "bench", "note": text })
}

/// `--id-keys`: both kinds of id, in turn, up to `args.id_keys` rows each.
pub async fn id_keys(args: &Args, flavor: Flavor) {
    let rows = args.id_keys.unwrap_or_default();
    let batch = args.id_keys_batch.max(1);
    eprintln!("starting two {flavor:?} servers for the id benchmark");
    let mut sides = [
        side(args, flavor, "UUIDv4", true).await,
        side(args, flavor, "UUIDv7", false).await,
    ];
    let payload = "x".repeat(args.payload_bytes.saturating_sub(40));
    // Steps small enough that the turns interleave finely.
    let step = (rows / 100).max(batch);
    let stage_rows = (rows / 10).max(step);
    let mut stages = Vec::new();
    let mut reads_before = [0u64; 2];
    for (i, side) in sides.iter_mut().enumerate() {
        reads_before[i] = side.disk_reads().await;
    }
    let mut done = 0;
    while done < rows {
        let until = (done + stage_rows).min(rows);
        let mut took = [Duration::ZERO; 2];
        while done < until {
            let n = step.min(until - done);
            // Which kind goes first alternates.
            let order = if (done / step).is_multiple_of(2) {
                [0, 1]
            } else {
                [1, 0]
            };
            for i in order {
                took[i] += sides[i].write(n, batch, &payload).await;
            }
            done += n;
        }
        let mut stage = Stage {
            rows: done,
            rate: [0.0; 2],
            table_mb: [0.0; 2],
            disk_reads: [0; 2],
        };
        for (i, side) in sides.iter_mut().enumerate() {
            stage.rate[i] = stage_len(&stages, done) as f64 / took[i].as_secs_f64();
            stage.table_mb[i] = side.table_mb().await;
            let reads = side.disk_reads().await;
            stage.disk_reads[i] = reads - reads_before[i];
            reads_before[i] = reads;
        }
        eprintln!(
            "{} rows each: {:.0} and {:.0} rows/s",
            stage.rows, stage.rate[0], stage.rate[1]
        );
        stages.push(stage);
    }
    print_id_keys(args, flavor, batch, &sides, &stages);
}

/// Rows written in the stage ending at `done`.
fn stage_len(stages: &[Stage], done: usize) -> usize {
    done - stages.last().map_or(0, |s| s.rows)
}

fn print_id_keys(args: &Args, flavor: Flavor, batch: usize, sides: &[Side; 2], stages: &[Stage]) {
    println!(
        "\noutbox inserts by kind of event_id, {flavor:?}, durable (innodb_flush_log_at_trx_commit=1, \
         sync_binlog=1), O_DIRECT, buffer pool {} MB, {batch} events + 1 order per transaction, \
         one writer per server, ~{} B payload",
        args.id_keys_pool_mb, args.payload_bytes
    );
    println!(
        "{:>10} | {:>10} {:>10} {:>7} | {:>9} {:>9} | {:>11} {:>11}",
        "rows each",
        format!("{} /s", sides[0].name),
        format!("{} /s", sides[1].name),
        "v7/v4",
        "v4 MB",
        "v7 MB",
        "v4 disk rd",
        "v7 disk rd"
    );
    for s in stages {
        println!(
            "{:>10} | {:>10.0} {:>10.0} {:>7.2} | {:>9.1} {:>9.1} | {:>11} {:>11}",
            s.rows,
            s.rate[0],
            s.rate[1],
            s.rate[1] / s.rate[0],
            s.table_mb[0],
            s.table_mb[1],
            s.disk_reads[0],
            s.disk_reads[1]
        );
    }
}
