//! The trace context end to end: a service writes an order through the
//! writer inside an OpenTelemetry span, the forwarder carries the event
//! (MariaDB or MySQL → tansu), and the consumer handles it in a span under
//! the same trace: `notification-planner`'s log names the trace, and in
//! OpenTelemetry (spans collected in memory) the consumer's span is a
//! child of the writer's. Prometheus, scraping the planner, gets the
//! commit-to-handled histogram with the trace id as an exemplar.

use harness::prometheus::Prometheus;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TracerProvider,
};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outbox_writer::{NewEvent, Outbox, OutboxTable};
use tracing_subscriber::layer::SubscriberExt;

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

/// Two orders through the writer of the table the forwarder reads (from
/// its configuration): one written in the writer's span, one outside any.
/// Their event ids, in that order.
async fn traced_and_untraced(pool: &Pool, forwarder: &ForwarderSetup) -> (String, String) {
    let mut conn = pool.get_conn().await.unwrap();
    let outbox = OutboxTable::from_forwarder_config_file(&forwarder.config_path)
        .unwrap()
        .open(&mut conn)
        .await
        .unwrap();
    let traced = place_order(&mut conn, &outbox, Some(writers_span())).await;
    let untraced = place_order(&mut conn, &outbox, None).await;
    (traced, untraced)
}

/// The writer's span: sampled, with a tracestate.
fn writers_span() -> SpanContext {
    SpanContext::new(
        TraceId::from_hex(TRACE_ID).unwrap(),
        SpanId::from_hex(SPAN_ID).unwrap(),
        TraceFlags::SAMPLED,
        true,
        "rojo=00f067aa0ba902b7".parse().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_written_in_a_span_is_handled_in_a_span_of_the_same_trace() {
    let db = DbServer::shared(Flavor::MariaDb).await;
    let broker = Broker::shared().await;
    let port = harness::free_port();
    let EndToEnd {
        pool,
        forwarder,
        process,
        mut planner,
        // Kept to the end: the planner's configuration and log.
        _planners,
        ..
    } = EndToEnd::start_with(
        db,
        broker,
        1,
        &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .await;
    let prometheus = Prometheus::start(&[format!("127.0.0.1:{port}")], "groups: []\n").await;
    let (traced, untraced) = traced_and_untraced(&pool, &forwarder).await;
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
    // Prometheus scrapes the planner: both events measured from their
    // commit, the traced one's trace id kept as an exemplar, and the p99
    // of "order placed to notification job created" answered.
    prometheus.wait_for_scrapes(TIMEOUT).await;
    let measured = "sum(outbox_inbox_commit_to_handled_seconds_count)";
    let deadline = std::time::Instant::now() + TIMEOUT;
    while prometheus.query(measured) != Some(2.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "{measured} is {:?}: {}",
            prometheus.query(measured),
            prometheus.targets()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let traces = prometheus.exemplar_trace_ids("outbox_inbox_commit_to_handled_seconds_bucket");
    assert_eq!(traces, [TRACE_ID], "{}", prometheus.log());
    let p99 =
        "histogram_quantile(0.99, sum by (le) (outbox_inbox_commit_to_handled_seconds_bucket))";
    let p99 = prometheus.query(p99).expect("a p99");
    assert!(p99 > 0.0 && p99 <= 60.0, "{p99}");
    assert_eq!(
        prometheus.query("sum(outbox_inbox_events_total{outcome=\"processed\"})"),
        Some(2.0)
    );
    assert!(planner.terminate().success());
    drop(process);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM notification_job").await,
        2
    );
}

harness::on_both_flavors!(in_opentelemetry_the_consumers_span_is_a_child_of_the_writers);

/// The `inbox_event` spans the consumer finished for `event_id`; at least
/// one.
fn inbox_spans<'a>(spans: &'a [SpanData], event_id: &str) -> Vec<&'a SpanData> {
    let id = Value::from(event_id.to_owned());
    let found: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "inbox_event")
        .filter(|s| {
            s.attributes
                .iter()
                .any(|kv| kv.key.as_str() == "event_id" && kv.value == id)
        })
        .collect();
    assert!(
        !found.is_empty(),
        "no inbox_event span for {event_id}: {spans:#?}"
    );
    found
}

async fn in_opentelemetry_the_consumers_span_is_a_child_of_the_writers(flavor: Flavor) {
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let Forwarding {
        schema,
        pool,
        setup,
        forwarder,
        process,
    } = Forwarding::start(db, broker, 1).await;
    let (traced, untraced) = traced_and_untraced(&pool, &forwarder).await;

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("inbox-test")));
    let mut consumer = start_traced(
        setup.config(db, broker, &schema),
        NotificationPlanner,
        subscriber.into(),
    );
    consumer
        .until(
            "both events settled",
            all_settled(&[traced.clone(), untraced.clone()]),
        )
        .await;
    consumer.stop().await;
    drop(process);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    for span in inbox_spans(&spans, &traced) {
        assert_eq!(span.span_context.trace_id().to_string(), TRACE_ID);
        assert_eq!(span.parent_span_id.to_string(), SPAN_ID);
        assert!(span.span_context.is_sampled());
        assert_eq!(
            span.span_context.trace_state().header(),
            "rojo=00f067aa0ba902b7"
        );
        assert_ne!(span.span_context.span_id().to_string(), SPAN_ID);
    }
    for span in inbox_spans(&spans, &untraced) {
        assert_ne!(span.span_context.trace_id().to_string(), TRACE_ID);
        assert_eq!(span.parent_span_id, SpanId::INVALID, "a trace of its own");
    }
    assert_one_job_per_event(&pool, 2).await;
}
