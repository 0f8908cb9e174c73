//! The trace context an event is written under when the caller gives none.

use outbox_core::trace::TraceContext;

/// The context of the current OpenTelemetry span, when there is a valid
/// one (feature `opentelemetry`); `None` without the feature or outside
/// any span.
#[cfg(feature = "opentelemetry")]
pub fn current_trace_context() -> Option<TraceContext> {
    use opentelemetry::trace::TraceContextExt;

    let context = opentelemetry::Context::current();
    let span = context.span();
    let span = span.span_context();
    if !span.is_valid() {
        return None;
    }
    let state = span.trace_state().header();
    let state = (!state.is_empty()).then_some(state.as_str());
    let context = |state| {
        TraceContext::from_ids(
            span.trace_id().to_bytes(),
            span.span_id().to_bytes(),
            span.is_sampled(),
            state,
        )
    };
    // A tracestate the recommendation does not allow (too long) is left
    // out rather than losing the traceparent with it.
    match context(state)? {
        Ok(context) => Some(context),
        Err(_) => context(None)?.ok(),
    }
}

/// The context of the current OpenTelemetry span, when there is a valid
/// one (feature `opentelemetry`); `None` without the feature or outside
/// any span.
#[cfg(not(feature = "opentelemetry"))]
pub fn current_trace_context() -> Option<TraceContext> {
    None
}

#[cfg(all(test, feature = "opentelemetry"))]
mod tests {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use std::str::FromStr;

    use crate::NewEvent;

    #[test]
    fn an_event_made_inside_a_span_carries_its_context_and_one_outside_none() {
        assert_eq!(super::current_trace_context(), None);
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
