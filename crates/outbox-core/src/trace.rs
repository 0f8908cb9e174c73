//! The W3C trace context (`traceparent`, `tracestate`) an event carries
//! from the request that wrote it to the consumer that handles it.
//!
//! The writer stores both in the outbox row, the forwarder copies them into
//! the message's headers byte for byte, and the inbox handles each event
//! in a span carrying the same trace id. Only the version-00 form is accepted, as the
//! recommendation (<https://www.w3.org/TR/trace-context/>) defines it:
//! `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lowercase,
//! neither id all zeros.

use std::fmt;

use crate::hex::hex;

/// A valid trace context; see the module docs for what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

/// Why a `traceparent` or `tracestate` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceContextError {
    #[error(
        "traceparent {0:?} is not `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>` \
         in lowercase with nonzero ids"
    )]
    Traceparent(String),
    #[error(
        "tracestate of {0} bytes is longer than the 512 the trace context allows, \
         or holds a character that is not printable ASCII"
    )]
    Tracestate(usize),
}

/// The longest `tracestate` the recommendation allows.
pub const MAX_TRACESTATE_LEN: usize = 512;

/// The length of a version-00 `traceparent`.
pub const TRACEPARENT_LEN: usize = 55;

impl TraceContext {
    /// `traceparent` and `tracestate` as read from headers or columns; an
    /// empty `tracestate` is none.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self, TraceContextError> {
        if !is_valid_traceparent(traceparent) {
            return Err(TraceContextError::Traceparent(traceparent.to_owned()));
        }
        let tracestate = tracestate.filter(|s| !s.is_empty());
        if let Some(state) = tracestate {
            let printable = state.bytes().all(|b| (0x20..0x7f).contains(&b));
            if state.len() > MAX_TRACESTATE_LEN || !printable {
                return Err(TraceContextError::Tracestate(state.len()));
            }
        }
        Ok(TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.map(str::to_owned),
        })
    }

    /// `traceparent` and `tracestate` as a receiver takes them: no context
    /// when the `traceparent` is not valid, and one without a `tracestate`
    /// that is not (the recommendation's rule: a bad `tracestate` must not
    /// cost the `traceparent`).
    pub fn received(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        match Self::parse(traceparent, tracestate) {
            Ok(context) => Some(context),
            Err(TraceContextError::Tracestate(_)) => Self::parse(traceparent, None).ok(),
            Err(TraceContextError::Traceparent(_)) => None,
        }
    }

    /// The context of the span `span_id` in trace `trace_id`, as a tracer
    /// hands them out; `None` when either id is all zeros (no span).
    pub fn from_ids(
        trace_id: [u8; 16],
        span_id: [u8; 8],
        sampled: bool,
        tracestate: Option<&str>,
    ) -> Option<Result<Self, TraceContextError>> {
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        let traceparent = format!(
            "00-{}-{}-{:02x}",
            hex(&trace_id),
            hex(&span_id),
            u8::from(sampled)
        );
        Some(Self::parse(&traceparent, tracestate))
    }

    /// The `traceparent` value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` value, when there is one.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace's id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The id of the span that wrote the event: 16 lowercase hex digits.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// Whether the writer's trace was sampled (the flags' lowest bit).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent)
    }
}

fn is_valid_traceparent(value: &str) -> bool {
    let lower_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    let parts: Vec<&str> = value.split('-').collect();
    let [version, trace_id, parent_id, flags] = parts[..] else {
        return false;
    };
    value.len() == TRACEPARENT_LEN
        && version == "00"
        && trace_id.len() == 32
        && parent_id.len() == 16
        && flags.len() == 2
        && [trace_id, parent_id, flags].into_iter().all(lower_hex)
        && nonzero(trace_id)
        && nonzero(parent_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_recommendations_example_parses_into_its_parts() {
        let context = TraceContext::parse(PARENT, Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.parent_id(), "00f067aa0ba902b7");
        assert!(context.sampled());
        assert_eq!(context.tracestate(), Some("congo=t61rcWkgMzE"));
        assert_eq!(context.traceparent(), PARENT);
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        let refused = [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
        ];
        for value in refused {
            assert_eq!(
                TraceContext::parse(value, None),
                Err(TraceContextError::Traceparent(value.into())),
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_tracestate_past_the_limit_is_refused_and_an_empty_one_is_none() {
        let long = "a=".to_owned() + &"b".repeat(MAX_TRACESTATE_LEN);
        assert_eq!(
            TraceContext::parse(PARENT, Some(&long)),
            Err(TraceContextError::Tracestate(long.len()))
        );
        let context = TraceContext::parse(PARENT, Some("")).unwrap();
        assert_eq!(context.tracestate(), None);
    }

    #[test]
    fn a_receiver_drops_a_bad_tracestate_and_keeps_the_traceparent() {
        let long = "a=".to_owned() + &"b".repeat(MAX_TRACESTATE_LEN);
        let kept = TraceContext::received(PARENT, Some(&long)).unwrap();
        assert_eq!((kept.traceparent(), kept.tracestate()), (PARENT, None));
        let both = TraceContext::received(PARENT, Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(both.tracestate(), Some("congo=t61rcWkgMzE"));
        assert_eq!(
            TraceContext::received("00-zz", Some("congo=t61rcWkgMzE")),
            None
        );
    }

    #[test]
    fn ids_from_a_tracer_make_the_same_traceparent() {
        let trace_id = 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736u128.to_be_bytes();
        let span_id = 0x00f0_67aa_0ba9_02b7u64.to_be_bytes();
        let context = TraceContext::from_ids(trace_id, span_id, true, None)
            .unwrap()
            .unwrap();
        assert_eq!(context.traceparent(), PARENT);
        let unsampled = TraceContext::from_ids(trace_id, span_id, false, None)
            .unwrap()
            .unwrap();
        assert!(!unsampled.sampled());
        assert!(TraceContext::from_ids([0; 16], span_id, true, None).is_none());
    }
}
