//! What a handler sees of a Kafka message: the outbox event it carries.
//!
//! The forwarder puts the identity in headers (`event_id`, `event_type`,
//! `aggregate_type`, `aggregate_id`, `event_version`) and the JSON payload in
//! the value; the key is the `event_id` too. Decoding is strict: a message
//! without an event id, with a payload that is not JSON or with a
//! non-numeric version can never be processed, so it is parked at once
//! instead of being retried.

use std::collections::BTreeMap;
use std::fmt;

use outbox_core::headers::{
    BinlogCoordinates, AGGREGATE_ID, AGGREGATE_TYPE, EVENT_ID, EVENT_TYPE, EVENT_VERSION,
    TRACEPARENT, TRACESTATE,
};
use outbox_core::trace::TraceContext;
use rdkafka::message::{Headers, Message};

/// Where a message sits in Kafka; printed as `topic/partition@offset` in
/// logs and dead-letter headers so an operator can find it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessageLocation {
    /// Topic the message was read from.
    pub topic: String,
    /// Partition within that topic; offsets are ordered only within it.
    pub partition: i32,
    /// The message's offset; the committed offset moves past it only once
    /// the message reached a final outcome.
    pub offset: i64,
}

impl fmt::Display for MessageLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

/// One outbox event as a handler receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxEvent {
    /// The stable identity the inbox deduplicates on: the `event_id` header,
    /// or the key when the header is absent.
    pub event_id: String,
    /// `event_type` header, e.g. `ORDER_ACCEPTED`; handlers filter on it.
    pub event_type: Option<String>,
    /// `aggregate_type` header, e.g. `order`.
    pub aggregate_type: Option<String>,
    /// `aggregate_id` header: which business object the event is about.
    pub aggregate_id: Option<String>,
    /// `event_version` header: the aggregate's version after this event, for
    /// [`crate::VersionedAggregate`].
    pub event_version: Option<i64>,
    /// The message value, parsed as JSON.
    pub payload: serde_json::Value,
    /// Every header as text (lossy UTF-8), for handlers that need more than
    /// the fields above.
    pub headers: BTreeMap<String, String>,
    /// Where the message was read from, for logs.
    pub location: MessageLocation,
}

/// A message that can never become an [`InboxEvent`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("message {location} cannot be decoded as an outbox event: {reason}")]
pub struct DecodeError {
    /// Where the message is.
    pub location: MessageLocation,
    /// What is wrong with it.
    pub reason: String,
}

impl MessageLocation {
    /// The location of `message`.
    pub fn of<M: Message>(message: &M) -> Self {
        MessageLocation {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
        }
    }
}

/// The message's headers as text; a repeated key keeps its last value.
pub fn header_map<M: Message>(message: &M) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    if let Some(headers) = message.headers() {
        for header in headers.iter() {
            let value = String::from_utf8_lossy(header.value.unwrap_or_default()).into_owned();
            map.insert(header.key.to_owned(), value);
        }
    }
    map
}

impl InboxEvent {
    /// Decodes `message`; see the module docs for what is refused.
    pub fn decode<M: Message>(message: &M) -> Result<Self, DecodeError> {
        let location = MessageLocation::of(message);
        let fail = |reason: String| DecodeError {
            location: location.clone(),
            reason,
        };
        let headers = header_map(message);
        let event_id = match headers.get(EVENT_ID) {
            Some(id) => id.clone(),
            None => match message.key() {
                Some(key) => String::from_utf8(key.to_vec())
                    .map_err(|_| fail("no event_id header and the key is not UTF-8".into()))?,
                None => return Err(fail("no event_id header and no key".into())),
            },
        };
        if event_id.is_empty() {
            return Err(fail("the event id is empty".into()));
        }
        let event_version = headers
            .get(EVENT_VERSION)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| fail(format!("event_version header {v:?} is not an integer")))
            })
            .transpose()?;
        let payload = match message.payload() {
            Some(bytes) => serde_json::from_slice(bytes)
                .map_err(|e| fail(format!("the payload is not JSON: {e}")))?,
            None => return Err(fail("the message has no value (a tombstone?)".into())),
        };
        Ok(InboxEvent {
            event_id,
            event_type: headers.get(EVENT_TYPE).cloned(),
            aggregate_type: headers.get(AGGREGATE_TYPE).cloned(),
            aggregate_id: headers.get(AGGREGATE_ID).cloned(),
            event_version,
            payload,
            headers,
            location,
        })
    }

    /// When the event's transaction committed on the writer's primary,
    /// milliseconds since the epoch, as the forwarder's `binlog` header (or
    /// `binlog_commit_ms`) says (`None` without it, or when it is not a
    /// number).
    pub fn committed_at_ms(&self) -> Option<u64> {
        BinlogCoordinates::commit_ms(|name| self.headers.get(name).map(String::as_str))
    }

    /// The W3C trace context the writer stored with the event (the
    /// `traceparent` and `tracestate` headers); `None` when there is none
    /// or its `traceparent` is malformed (a malformed `tracestate` alone is
    /// dropped).
    pub fn trace_context(&self) -> Option<TraceContext> {
        let parent = self.headers.get(TRACEPARENT)?;
        let state = self.headers.get(TRACESTATE).map(String::as_str);
        TraceContext::received(parent, state)
    }

    /// The span the event is handled in: `inbox_event` with the event's id,
    /// and the writer's `trace_id` and `parent_id` (its span) when the event
    /// carries a trace context, so the handler's logs join the trace that
    /// wrote the event. With the `opentelemetry` feature and a
    /// `tracing-opentelemetry` layer, the span is also, in OpenTelemetry, a
    /// child of the writer's span: a trace backend shows it under the
    /// request that wrote the event.
    pub fn span(&self) -> tracing::Span {
        let span = tracing::info_span!(
            "inbox_event",
            event_id = %self.event_id,
            trace_id = tracing::field::Empty,
            parent_id = tracing::field::Empty,
        );
        if let Some(trace) = self.trace_context() {
            span.record("trace_id", tracing::field::display(trace.trace_id()));
            span.record("parent_id", tracing::field::display(trace.parent_id()));
            #[cfg(feature = "opentelemetry")]
            set_remote_parent(&span, &trace);
        }
        span
    }
}

/// Makes the writer's span `trace` the OpenTelemetry parent of `span`.
#[cfg(feature = "opentelemetry")]
fn set_remote_parent(span: &tracing::Span, trace: &TraceContext) {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    // Both are valid hex: TraceContext checked them.
    let (Ok(trace_id), Ok(span_id)) = (
        TraceId::from_hex(trace.trace_id()),
        SpanId::from_hex(trace.parent_id()),
    ) else {
        return;
    };
    let flags = match trace.sampled() {
        true => TraceFlags::SAMPLED,
        false => TraceFlags::default(),
    };
    // A tracestate OpenTelemetry does not take is dropped, as the
    // recommendation says; the parent stays.
    let state = trace
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let parent = SpanContext::new(trace_id, span_id, flags, true, state);
    let parent = opentelemetry::Context::new().with_remote_span_context(parent);
    // Refused only where the service has no OpenTelemetry layer (or the
    // span is filtered out): then there is no trace to join.
    let _ = span.set_parent(parent);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};

    fn message(key: Option<&str>, payload: Option<&str>, headers: &[(&str, &str)]) -> OwnedMessage {
        let mut owned = OwnedHeaders::new();
        for (k, v) in headers {
            owned = owned.insert(Header {
                key: k,
                value: Some(*v),
            });
        }
        OwnedMessage::new(
            payload.map(|p| p.as_bytes().to_vec()),
            key.map(|k| k.as_bytes().to_vec()),
            "orders".into(),
            Timestamp::NotAvailable,
            2,
            17,
            Some(owned),
        )
    }

    #[test]
    fn headers_give_identity_version_and_the_payload_is_parsed() {
        let m = message(
            Some("e-1"),
            Some(r#"{"order_id":7}"#),
            &[
                ("event_id", "e-1"),
                ("event_type", "ORDER_ACCEPTED"),
                ("aggregate_type", "order"),
                ("aggregate_id", "7"),
                ("event_version", "3"),
            ],
        );
        let e = InboxEvent::decode(&m).unwrap();
        assert_eq!(e.event_id, "e-1");
        assert_eq!(e.event_type.as_deref(), Some("ORDER_ACCEPTED"));
        assert_eq!(e.aggregate_id.as_deref(), Some("7"));
        assert_eq!(e.event_version, Some(3));
        assert_eq!(e.payload["order_id"], 7);
        assert_eq!(e.headers.len(), 5);
        assert_eq!(e.location.to_string(), "orders/2@17");
    }

    #[test]
    fn the_key_stands_in_for_a_missing_event_id_header() {
        let e = InboxEvent::decode(&message(Some("k-9"), Some("{}"), &[])).unwrap();
        assert_eq!(e.event_id, "k-9");
        assert_eq!(e.event_version, None);
    }

    #[test]
    fn undecodable_messages_say_where_and_why() {
        let cases = [
            (message(None, Some("{}"), &[]), "no key"),
            (message(Some("k"), Some("not json"), &[]), "not JSON"),
            (message(Some("k"), None, &[]), "no value"),
            (
                message(Some("k"), Some("{}"), &[("event_version", "two")]),
                "not an integer",
            ),
        ];
        for (m, why) in cases {
            let err = InboxEvent::decode(&m).unwrap_err().to_string();
            assert!(err.contains("orders/2@17") && err.contains(why), "{err}");
        }
    }

    #[test]
    fn the_trace_context_comes_from_the_headers_and_a_malformed_one_is_none() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let traced = message(
            Some("e1"),
            Some("{}"),
            &[("traceparent", parent), ("tracestate", "congo=t61rcWkgMzE")],
        );
        let trace = InboxEvent::decode(&traced)
            .unwrap()
            .trace_context()
            .unwrap();
        assert_eq!(trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace.parent_id(), "00f067aa0ba902b7");
        assert_eq!(trace.tracestate(), Some("congo=t61rcWkgMzE"));

        let malformed = message(Some("e2"), Some("{}"), &[("traceparent", "00-zz")]);
        assert_eq!(
            InboxEvent::decode(&malformed).unwrap().trace_context(),
            None
        );
        let untraced = message(Some("e3"), Some("{}"), &[]);
        assert_eq!(InboxEvent::decode(&untraced).unwrap().trace_context(), None);
    }

    #[test]
    fn a_tracestate_that_is_not_valid_is_dropped_and_the_traceparent_kept() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let long = format!("rojo={}", "a".repeat(600));
        for state in [long.as_str(), "rojo=\u{1}x"] {
            let traced = message(
                Some("e4"),
                Some("{}"),
                &[("traceparent", parent), ("tracestate", state)],
            );
            let trace = InboxEvent::decode(&traced).unwrap().trace_context();
            let trace = trace.expect("the traceparent is valid");
            assert_eq!(trace.traceparent(), parent);
            assert_eq!(trace.tracestate(), None);
        }
    }
}
