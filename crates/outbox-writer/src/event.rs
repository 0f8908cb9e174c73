//! One event as the service describes it, before it becomes a row.

use mysql_async::Value;
use outbox_core::trace::TraceContext;
use serde::Serialize;

use crate::error::WriteError;
use crate::trace::current_trace_context;

/// An event to append: what happened to which aggregate, at which version,
/// with which payload, under which trace.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub(crate) event_id: String,
    pub(crate) aggregate_type: String,
    pub(crate) aggregate_id: String,
    pub(crate) event_type: String,
    pub(crate) event_version: i64,
    pub(crate) payload: Vec<u8>,
    pub(crate) trace: Option<TraceContext>,
    /// Further columns (a key, a partition or topic column), by name.
    pub(crate) columns: Vec<(String, Value)>,
}

impl NewEvent {
    /// An event whose payload is `payload` as JSON, with a new UUIDv7 id,
    /// version 1 (the migration's default) and the current trace context.
    pub fn new<T: Serialize + ?Sized>(
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        event_type: impl Into<String>,
        payload: &T,
    ) -> Result<Self, WriteError> {
        let (aggregate_type, aggregate_id, event_type) = (
            aggregate_type.into(),
            aggregate_id.into(),
            event_type.into(),
        );
        match serde_json::to_vec(payload) {
            Ok(payload) => Ok(Self::with_bytes(
                aggregate_type,
                aggregate_id,
                event_type,
                payload,
            )),
            Err(source) => Err(WriteError::Serialize {
                event_type,
                aggregate_type,
                aggregate_id,
                source,
            }),
        }
    }

    /// An event whose payload is `payload` as stored, for a table whose
    /// `payload_format` is `text` or `bytes` (Avro, Protobuf). Checked
    /// against the table's `payload_format` when appended: under `json`
    /// (the default) the bytes must be JSON, as the forwarder requires.
    pub fn with_bytes(
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        event_type: impl Into<String>,
        payload: Vec<u8>,
    ) -> Self {
        NewEvent {
            event_id: uuid::Uuid::now_v7().hyphenated().to_string(),
            aggregate_type: aggregate_type.into(),
            aggregate_id: aggregate_id.into(),
            event_type: event_type.into(),
            event_version: 1,
            payload,
            trace: current_trace_context(),
            columns: Vec::new(),
        }
    }

    /// The same event with the id `event_id` instead of a new UUIDv7 (an id
    /// derived from the request, to make a retried request idempotent).
    /// Checked against `event_id_format` when appended.
    pub fn event_id(mut self, event_id: impl Into<String>) -> Self {
        self.event_id = event_id.into();
        self
    }

    /// The aggregate's version after this event, for consumers that apply
    /// events in order.
    pub fn version(mut self, event_version: i64) -> Self {
        self.event_version = event_version;
        self
    }

    /// The same event under `trace` rather than the current context.
    pub fn trace_context(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }

    /// The same event with no trace context.
    pub fn without_trace_context(mut self) -> Self {
        self.trace = None;
        self
    }

    /// The same event with `value` in the column `name` too: the key,
    /// partition, timestamp or topic column `[outbox.columns]` names, or
    /// any column of the table's own.
    pub fn column(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.columns.push((name.into(), value.into()));
        self
    }

    /// The event's id, known before it is appended.
    pub fn id(&self) -> &str {
        &self.event_id
    }

    /// The trace context it will be written under.
    pub fn trace(&self) -> Option<&TraceContext> {
        self.trace.as_ref()
    }

    /// The payload as it will be stored.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_event_has_a_version_7_id_and_version_1() {
        let event =
            NewEvent::new("order", "1", "ORDER_ACCEPTED", &serde_json::json!({"a": 1})).unwrap();
        let id = uuid::Uuid::try_parse(event.id()).unwrap();
        assert_eq!(id.get_version_num(), 7);
        assert_eq!(event.event_version, 1);
        assert_eq!(event.payload(), br#"{"a":1}"#);
        assert_eq!(event.id().len(), 36);
    }

    #[test]
    fn ids_made_one_after_the_other_sort_in_that_order() {
        let ids: Vec<String> = (0..2000)
            .map(|_| NewEvent::with_bytes("a", "1", "T", Vec::new()).event_id)
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len());
    }

    #[test]
    fn a_payload_that_cannot_be_json_names_the_event() {
        let mut map = std::collections::HashMap::new();
        map.insert(vec![1u8], 1);
        let err = NewEvent::new("order", "7", "ORDER_ACCEPTED", &map).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ORDER_ACCEPTED of order 7"), "{text}");
        assert!(matches!(err, WriteError::Serialize { .. }));
    }

    #[test]
    #[cfg(feature = "opentelemetry")]
    fn an_event_made_inside_a_span_carries_its_context_and_one_outside_none() {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        use std::str::FromStr;

        assert_eq!(current_trace_context(), None);
        let outside = NewEvent::with_bytes("order", "1", "T", Vec::new());
        assert_eq!(outside.trace(), None);

        let span = SpanContext::new(
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
            SpanId::from_hex("b7ad6b7169203331").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_str("rojo=00f067aa0ba902b7").unwrap(),
        );
        let _attached = opentelemetry::Context::current()
            .with_remote_span_context(span)
            .attach();
        let inside = NewEvent::with_bytes("order", "1", "T", Vec::new());
        let trace = inside.trace().expect("the span's context");
        assert_eq!(
            trace.traceparent(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert_eq!(trace.tracestate(), Some("rojo=00f067aa0ba902b7"));
    }
}
