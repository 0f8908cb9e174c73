//! The trace context end to end: a service writes an order through the
//! writer inside an OpenTelemetry span, the forwarder carries the event
//! (MariaDB → tansu), and `notification-planner` handles it in a span
//! under the same trace.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use outbox_writer::{NewEvent, Outbox, OutboxTable};

use super::*;

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const SPAN_ID: &str = "b7ad6b7169203331";

/// One order and its event, in one transaction; the event made while
/// `span` (if any) is the current span.
async fn place_order(
    conn: &mut mysql_async::Conn,
    outbox: &Outbox,
    span: Option<SpanContext>,
) -> String {
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    tx.exec_drop(
        "INSERT INTO orders (customer, amount_cents, status) VALUES ('ada', 4200, 'ACCEPTED')",
        (),
    )
    .await
    .unwrap();
    let order_id = tx.last_insert_id().unwrap();
    let event = {
        let _current = span.map(|s| {
            opentelemetry::Context::current()
                .with_remote_span_context(s)
                .attach()
        });
        NewEvent::new(
            "order",
            order_id.to_string(),
            "ORDER_ACCEPTED",
            &serde_json::json!({"order_id": order_id}),
        )
        .unwrap()
    };
    outbox.append(&mut tx, &event).await.unwrap();
    tx.commit().await.unwrap();
    event.id().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_written_in_a_span_is_handled_in_a_span_of_the_same_trace() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let EndToEnd {
        pool,
        forwarder,
        process,
        mut planner,
        // Kept to the end: the planner's configuration and log.
        _planners,
        ..
    } = EndToEnd::start(db, broker, 1).await;
    let mut conn = pool.get_conn().await.unwrap();
    let outbox = OutboxTable::from_forwarder_config_file(&forwarder.config_path)
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap();

    let span = SpanContext::new(
        TraceId::from_hex(TRACE_ID).unwrap(),
        SpanId::from_hex(SPAN_ID).unwrap(),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let traced = place_order(&mut conn, &outbox, Some(span)).await;
    let untraced = place_order(&mut conn, &outbox, None).await;
    planner
        .wait_for_lines(&["event processed"], 2, TIMEOUT)
        .await;
    let log = planner.log();
    let line = |id: &str| {
        log.lines()
            .find(|l| l.contains("event processed") && l.contains(id))
            .unwrap_or_else(|| panic!("no line for {id}:\n{log}"))
            .to_owned()
    };
    let traced_line = line(&traced);
    assert!(
        traced_line.contains(&format!(
            "inbox_event{{event_id={traced} trace_id={TRACE_ID} parent_id={SPAN_ID}}}"
        )),
        "{traced_line}"
    );
    let untraced_line = line(&untraced);
    assert!(
        untraced_line.contains(&format!("inbox_event{{event_id={untraced}}}")),
        "{untraced_line}"
    );
    assert!(planner.terminate().success());
    drop(process);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        2
    );
}
