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
    let parent = TraceContext::from_ids(
        span.trace_id().to_bytes(),
        span.span_id().to_bytes(),
        span.is_sampled(),
        None,
    )?
    .ok()?;
    // A tracestate the recommendation does not allow (too long) is left
    // out rather than losing the traceparent with it.
    TraceContext::received(parent.traceparent(), Some(&span.trace_state().header()))
}

/// The context of the current OpenTelemetry span, when there is a valid
/// one (feature `opentelemetry`); `None` without the feature or outside
/// any span.
#[cfg(not(feature = "opentelemetry"))]
pub fn current_trace_context() -> Option<TraceContext> {
    None
}
