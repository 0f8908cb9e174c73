//! What a consumer measures, in the OpenMetrics text format:
//!
//! - `outbox_inbox_commit_to_handled_seconds{consumer}`: from the event's
//!   commit on the writer's primary (the commit time in the forwarder's
//!   `binlog` header: to the millisecond on MySQL, the second on MariaDB) to the
//!   commit of the handler's transaction, by this host's clock. Each bucket
//!   keeps the trace id of its latest traced event as an exemplar, so a
//!   slow bucket leads to the trace that wrote the event. Events without
//!   the header (not from the forwarder's binlog stream) are not counted.
//! - `outbox_inbox_events_total{consumer,outcome}`: events settled,
//!   `processed` (the handler's transaction committed) or `duplicate`.
//!
//! [`serve`] answers `GET /metrics` with them (and `GET /healthz`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::error::InboxError;

/// Upper bounds of the latency buckets, in seconds: from a consumer close
/// behind its writer to one catching up after an outage.
const BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
];

/// One consumer's measures; shared by its inbox and the listener.
pub struct InboxMetrics {
    consumer: String,
    latency: Mutex<Histogram>,
    processed: AtomicU64,
    duplicates: AtomicU64,
}

/// The latest traced observation of a bucket.
#[derive(Clone)]
struct Exemplar {
    trace_id: String,
    seconds: f64,
    at_ms: u64,
}

#[derive(Default)]
struct Histogram {
    /// Per bucket (the last one is `+Inf`), the observations above the
    /// previous bound and at most its own; cumulated when rendered.
    counts: [u64; BUCKETS.len() + 1],
    exemplars: [Option<Exemplar>; BUCKETS.len() + 1],
    count: u64,
    sum: f64,
}

impl InboxMetrics {
    /// Empty measures for the consumer named `consumer`.
    pub fn new(consumer: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            latency: Mutex::default(),
            processed: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
        }
    }

    /// An event whose handler's transaction committed at `now_ms`:
    /// counted, and measured from `committed_at_ms` when it is known
    /// (`trace_id` kept as its bucket's exemplar).
    pub(crate) fn processed(
        &self,
        committed_at_ms: Option<u64>,
        trace_id: Option<&str>,
        now_ms: u64,
    ) {
        self.processed.fetch_add(1, Ordering::Relaxed);
        let Some(committed_at_ms) = committed_at_ms else {
            return;
        };
        let seconds = Duration::from_millis(now_ms.saturating_sub(committed_at_ms)).as_secs_f64();
        let bucket = BUCKETS.partition_point(|&bound| bound < seconds);
        let mut latency = self.latency.lock().expect("not poisoned");
        latency.counts[bucket] += 1;
        latency.count += 1;
        latency.sum += seconds;
        if let Some(trace_id) = trace_id {
            latency.exemplars[bucket] = Some(Exemplar {
                trace_id: trace_id.to_owned(),
                seconds,
                at_ms: now_ms,
            });
        }
    }

    /// An event found already processed.
    pub(crate) fn duplicate(&self) {
        self.duplicates.fetch_add(1, Ordering::Relaxed);
    }

    /// The measures in the OpenMetrics text format (ends with `# EOF`).
    pub fn render(&self) -> String {
        let consumer = escape(&self.consumer);
        let latency = self.latency.lock().expect("not poisoned");
        let name = "outbox_inbox_commit_to_handled_seconds";
        let mut out = format!(
            "# TYPE {name} histogram\n# UNIT {name} seconds\n# HELP {name} From the event's \
             commit on the writer's primary (its binlog header's commit time) to the commit of the handler's \
             transaction.\n"
        );
        let mut cumulative = 0;
        let bounds = BUCKETS.iter().map(|b| b.to_string()).chain(["+Inf".into()]);
        for ((count, exemplar), bound) in latency.counts.iter().zip(&latency.exemplars).zip(bounds)
        {
            cumulative += count;
            let _ = write!(
                out,
                "{name}_bucket{{consumer=\"{consumer}\",le=\"{bound}\"}} {cumulative}"
            );
            if let Some(e) = exemplar {
                let _ = write!(
                    out,
                    " # {{trace_id=\"{}\"}} {} {}.{:03}",
                    escape(&e.trace_id),
                    e.seconds,
                    e.at_ms / 1000,
                    e.at_ms % 1000
                );
            }
            out.push('\n');
        }
        let _ = writeln!(out, "{name}_sum{{consumer=\"{consumer}\"}} {}", latency.sum);
        let _ = writeln!(
            out,
            "{name}_count{{consumer=\"{consumer}\"}} {}",
            latency.count
        );
        drop(latency);
        let name = "outbox_inbox_events";
        let _ = writeln!(
            out,
            "# TYPE {name} counter\n# HELP {name} Events settled: processed (the handler's \
             transaction committed) or found already processed (duplicate)."
        );
        for (outcome, n) in [
            ("processed", &self.processed),
            ("duplicate", &self.duplicates),
        ] {
            let _ = writeln!(
                out,
                "{name}_total{{consumer=\"{consumer}\",outcome=\"{outcome}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        out.push_str("# EOF\n");
        out
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Connections answered at once; the rest wait in the accept queue.
const MAX_CONNECTIONS: usize = 32;

/// The most of a request head read; a scrape's is a few hundred bytes.
const MAX_REQUEST: usize = 8 * 1024;

/// How long a connection may take to send its request and read the answer.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds `listen` and answers `GET /metrics` from `metrics` (and
/// `GET /healthz`) until the task is dropped: one request per connection.
pub async fn serve(
    listen: SocketAddr,
    metrics: Arc<InboxMetrics>,
) -> Result<tokio::task::JoinHandle<()>, InboxError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| InboxError::Config(format!("metrics.listen {listen}: {e}")))?;
    tracing::info!(%listen, "metrics endpoint listening");
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    Ok(tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let Ok((mut stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let Ok(Ok(head)) =
                    tokio::time::timeout(CONNECTION_TIMEOUT, read_head(&mut stream)).await
                else {
                    return;
                };
                let line = String::from_utf8_lossy(&head);
                let mut parts = line.split_whitespace();
                let (status, kind, body) = match (parts.next(), parts.next()) {
                    (Some("GET"), Some("/metrics")) => (
                        "200 OK",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        metrics.render(),
                    ),
                    (Some("GET"), Some("/healthz")) => ("200 OK", "text/plain", "ok\n".into()),
                    _ => (
                        "404 Not Found",
                        "text/plain",
                        "GET /metrics or /healthz\n".into(),
                    ),
                };
                let answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ =
                    tokio::time::timeout(CONNECTION_TIMEOUT, stream.write_all(answer.as_bytes()))
                        .await;
            });
        }
    }))
}

/// The request head: read until its blank line (`\r\n\r\n`, or a bare
/// client's `\n\n`), the peer's end or
/// [`MAX_REQUEST`] bytes, so the answer is not cut off by a reset over
/// bytes left unread.
async fn read_head(stream: &mut tokio::net::TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let ended = |head: &[u8]| {
        head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
    };
    while head.len() < MAX_REQUEST && !ended(&head) {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_are_bucketed_from_the_commit_with_the_latest_trace_as_exemplar() {
        let m = InboxMetrics::new("planner");
        let now = 1_700_000_010_000;
        m.processed(Some(now - 40), Some("aaa"), now);
        m.processed(Some(now - 30), Some("bbb"), now);
        m.processed(Some(now - 3_000), None, now);
        // Without a commit time: counted, not measured.
        m.processed(None, Some("ccc"), now);
        m.duplicate();
        let text = m.render();
        let bucket = |le: &str| {
            let prefix =
                format!("outbox_inbox_commit_to_handled_seconds_bucket{{consumer=\"planner\",le=\"{le}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .unwrap_or_else(|| panic!("no bucket {le}:\n{text}"))
                .to_owned()
        };
        assert_eq!(bucket("0.025"), "0");
        assert_eq!(bucket("0.05"), "2 # {trace_id=\"bbb\"} 0.03 1700000010.000");
        assert_eq!(bucket("2.5"), "2");
        assert_eq!(bucket("5"), "3");
        assert_eq!(bucket("+Inf"), "3");
        assert!(
            text.contains("outbox_inbox_commit_to_handled_seconds_count{consumer=\"planner\"} 3\n")
        );
        assert!(text
            .contains("outbox_inbox_events_total{consumer=\"planner\",outcome=\"processed\"} 4\n"));
        assert!(text
            .contains("outbox_inbox_events_total{consumer=\"planner\",outcome=\"duplicate\"} 1\n"));
        assert!(text.ends_with("# EOF\n"));
    }
}
