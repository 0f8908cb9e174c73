//! The backlog: outbox events written while the forwarder is stopped.

use std::time::{Duration, Instant};

use harness::DbServer;
use mysql_async::prelude::Queryable;

pub(crate) fn payload(order: usize, size: usize) -> String {
    let head =
        format!(r#"{{"order_id":{order},"customer":"c-{order}","amount_cents":4200,"pad":""#);
    let pad = size.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad))
}

/// One transaction of the benchmark's load: an order of `customer` and its
/// outbox event `id`, with a payload of about `size` bytes.
pub(crate) fn order_transaction(customer: &str, id: &str, order: usize, size: usize) -> String {
    format!(
        "START TRANSACTION; \
         INSERT INTO orders (customer, amount_cents, status) VALUES ('{customer}', 4200, 'ACCEPTED'); \
         INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('{id}', 'order', '{order}', 'ORDER_ACCEPTED', '{}'); COMMIT",
        payload(order, size)
    )
}

/// Writes `n` transactions (an order and its outbox event) over `writers`
/// connections; returns the ids in commit order per writer.
pub(crate) async fn write_backlog(db: &DbServer, schema: &str, n: usize, size: usize) -> Duration {
    const WRITERS: usize = 4;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut conn = db.root().await;
        conn.query_drop(format!("USE `{schema}`")).await.unwrap();
        let share = n / WRITERS + usize::from(w < n % WRITERS);
        tasks.push(tokio::spawn(async move {
            for i in 0..share {
                let order = w * 10_000_000 + i;
                let id = uuid::Uuid::new_v4();
                conn.query_drop(order_transaction(
                    &format!("c-{order}"),
                    &id.to_string(),
                    order,
                    size,
                ))
                .await
                .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    started.elapsed()
}

pub(crate) fn rate(events: usize, took: Duration) -> f64 {
    events as f64 / took.as_secs_f64()
}
