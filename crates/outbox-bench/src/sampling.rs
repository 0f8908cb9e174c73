//! Reading the forwarder's metrics and turning samples into quantiles.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Sum of `outbox_forwarder_events_forwarded_total` and the buckets of the
/// two latency histograms.
pub(crate) struct Scrape {
    pub(crate) forwarded: f64,
    /// Commit read → ack.
    pub(crate) buckets: Vec<(f64, f64)>,
    /// Handed to the producer → ack.
    pub(crate) producer: Vec<(f64, f64)>,
}

pub(crate) fn scrape(port: u16) -> Option<Scrape> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    let mut forwarded = 0.0;
    let mut buckets = Vec::new();
    let mut producer = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("outbox_forwarder_events_forwarded_total{") {
            forwarded += rest.rsplit(' ').next()?.parse::<f64>().ok()?;
            continue;
        }
        let (histogram, rest) = if let Some(rest) =
            line.strip_prefix("outbox_forwarder_ack_latency_seconds_bucket{le=\"")
        {
            (&mut buckets, rest)
        } else if let Some(rest) =
            line.strip_prefix("outbox_forwarder_producer_latency_seconds_bucket{le=\"")
        {
            (&mut producer, rest)
        } else {
            continue;
        };
        let (bound, count) = rest.split_once("\"} ")?;
        let bound = if bound == "+Inf" {
            f64::INFINITY
        } else {
            bound.parse().ok()?
        };
        histogram.push((bound, count.parse().ok()?));
    }
    Some(Scrape {
        forwarded,
        buckets,
        producer,
    })
}

/// Quantile `q` (0..1) of the latency recorded between two scrapes, by
/// linear interpolation inside the histogram bucket.
pub(crate) fn histogram_quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> f64 {
    let counts: Vec<(f64, f64)> = after
        .iter()
        .zip(before)
        .map(|((bound, a), (_, b))| (*bound, a - b))
        .collect();
    let total = counts.last().map_or(0.0, |(_, c)| *c);
    let target = q * total;
    let mut lower = (0.0, 0.0);
    for &(bound, count) in &counts {
        if count >= target {
            if bound.is_infinite() {
                return lower.0;
            }
            let share = if count > lower.1 {
                (target - lower.1) / (count - lower.1)
            } else {
                0.0
            };
            return lower.0 + (bound - lower.0) * share;
        }
        lower = (bound, count);
    }
    lower.0
}

pub(crate) fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// For each key of `sent` that `arrived`, the time between the two, sorted.
pub(crate) fn delays(
    sent: &[(String, Instant)],
    arrived: &HashMap<String, Instant>,
) -> Vec<Duration> {
    let mut delays: Vec<Duration> = sent
        .iter()
        .filter_map(|(key, at)| {
            arrived
                .get(key)
                .map(|seen| seen.saturating_duration_since(*at))
        })
        .collect();
    delays.sort();
    delays
}
