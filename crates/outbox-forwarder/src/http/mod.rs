//! The metrics and health listener: `GET /metrics`, `/healthz`, `/readyz`,
//! `/readyz/group`, the delivery barrier `/acked` ([`barrier`]), and
//! [`probe`], the client side of a health check.
//!
//! A deliberately small HTTP/1.1 responder (one request per connection,
//! `Connection: close`): five read-only endpoints for scrapers, probes and
//! services do not need a web framework in the forwarder's build.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use outbox_checkpoint::Checkpoint;
use outbox_core::DefiniteError;
use outbox_sink::BrokerHealth;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::metrics::{GroupState, Metrics};

pub mod barrier;

/// What readiness is judged on.
pub struct Health {
    pub metrics: Arc<Metrics>,
    pub broker: Arc<BrokerHealth>,
    /// Not ready while the lag is above this.
    pub max_lag: Duration,
    /// The checkpoint last stored, after the broker's acks: what `/acked`
    /// answers from.
    pub acked: watch::Receiver<Option<Checkpoint>>,
    /// A standby's: the group's records it follows into its store, after
    /// the active instance stored each (and the brokers acked it).
    pub adopted: watch::Receiver<Option<Checkpoint>>,
    /// The checkpoint the store held at start: `/acked` answers from it
    /// until this process stores one.
    pub stored: Option<Checkpoint>,
}

impl Health {
    /// `None` when this instance can serve its `[ha]` group: the group has
    /// a record (it started), so this one publishes or can take over.
    /// Always `None` without `[ha]`.
    fn not_serving_group(&self) -> Option<String> {
        if self.metrics.on_call.group().is_empty() {
            return None;
        }
        match self.metrics.group_state() {
            GroupState::Started => None,
            GroupState::NeverStarted => Some(
                "the [ha] group has no record on its topic: it never started, and no instance \
                 publishes until one is written; run `outbox-forwarder group start` (see \
                 docs/operations.md, OutboxForwarderGroupNotStarted)"
                    .into(),
            ),
            GroupState::Unreadable => Some(
                "the [ha] group's newest record cannot be read: no instance publishes until \
                 an operator sets the group's checkpoint (`outbox-forwarder checkpoint set`)"
                    .into(),
            ),
            GroupState::Unknown => Some("the [ha] group's topic has not been read yet".into()),
        }
    }

    /// `None` when ready, else why not.
    fn not_ready(&self) -> Option<String> {
        if self.metrics.is_standby() {
            return Some("standby: another instance of the [ha] group is active".into());
        }
        if !self.metrics.is_streaming() {
            return Some("not streaming from the binlog".into());
        }
        if self.metrics.is_share_failing() {
            return Some(
                "the last checkpoint shared with the [ha] group was not acknowledged (see \
                 outbox_forwarder_ha_share_failures_total): a takeover would start from an older one"
                    .into(),
            );
        }
        if !self.broker.is_up() {
            return Some("Kafka brokers unreachable".into());
        }
        let held = self.metrics.held_for();
        if held > self.max_lag {
            return Some(format!(
                "holding for {}s: fewer than mysql.publish_after_replicas replicas have applied \
                 the next transaction ({})",
                held.as_secs(),
                self.metrics.describe_replicas()
            ));
        }
        let lag = self.metrics.lag();
        if lag > self.max_lag {
            return Some(format!(
                "lag {}s is above {}s",
                lag.as_secs(),
                self.max_lag.as_secs()
            ));
        }
        None
    }
}

/// Connections served at once. The rest wait in the kernel's accept queue,
/// holding none of the process's file descriptors: whoever reaches the
/// port can slow the endpoints, not take the descriptors that MySQL,
/// librdkafka and the store need.
pub const MAX_CONNECTIONS: usize = 32;

/// How long a connection may take to send its request and read the answer.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest request head read; past it the request is answered as it is.
const MAX_REQUEST: usize = 8 * 1024;

/// Pause after a failed `accept` (out of descriptors, say) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Binds `listen` and serves until the task is dropped.
pub async fn bind(
    listen: SocketAddr,
    health: Health,
) -> Result<tokio::task::JoinHandle<()>, DefiniteError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| DefiniteError::Config(format!("metrics.listen {listen}: {e}")))?;
    tracing::info!(%listen, "metrics and health endpoints listening");
    Ok(tokio::spawn(serve(listener, Arc::new(health))))
}

async fn serve(listener: TcpListener, health: Arc<Health>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let waiters = Arc::new(Semaphore::new(barrier::MAX_WAITERS));
    loop {
        // A slot first, then the connection: at the cap, nothing is accepted.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: accept failed; retrying shortly");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let (health, waiters) = (health.clone(), waiters.clone());
        tokio::spawn(respond(stream, health, slot, waiters));
    }
}

/// Reads until the blank line that ends a request head (or [`MAX_REQUEST`]
/// bytes, or the peer's end), looking for it only in the bytes new since
/// the last read.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut request = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while request.len() < MAX_REQUEST {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        // The end marker may straddle two reads: look back 3 bytes.
        let from = request.len().saturating_sub(3);
        request.extend_from_slice(&buf[..n]);
        if request[from..].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    Ok(request)
}

/// Reads a request (in [`CONNECTION_TIMEOUT`]), answers it and closes the
/// connection; a barrier that waits gives its listener slot back and
/// waits in one of its own.
async fn respond(
    mut stream: TcpStream,
    health: Arc<Health>,
    slot: OwnedSemaphorePermit,
    waiters: Arc<Semaphore>,
) {
    let Ok(Ok(request)) = tokio::time::timeout(CONNECTION_TIMEOUT, read_head(&mut stream)).await
    else {
        return;
    };
    if request.len() >= MAX_REQUEST && !request.windows(4).any(|w| w == b"\r\n\r\n") {
        // Cut short, a query could read as another one (a shorter GTID set).
        let long = "the request is longer than the listener reads\n";
        answer(
            stream,
            "431 Request Header Fields Too Large",
            "text/plain",
            long,
        )
        .await;
        return;
    }
    let line = String::from_utf8_lossy(&request);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/acked") => match barrier::ask(query) {
            Ok(ask) => {
                let waiting = match ask.wait.is_zero() {
                    true => None,
                    false => match waiters.try_acquire_owned() {
                        Ok(waiting) => Some(waiting),
                        Err(_) => {
                            let busy = "too many barrier requests are waiting: ask again shortly\n";
                            answer(stream, "503 Service Unavailable", "text/plain", busy).await;
                            return;
                        }
                    },
                };
                if waiting.is_some() {
                    drop(slot);
                }
                let (status, body) = barrier::answer(&health, ask).await;
                answer(stream, status, "text/plain", &body).await;
                return;
            }
            Err(why) => ("400 Bad Request", "text/plain", format!("{why}\n")),
        },
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4",
            health.metrics.render(),
        ),
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_string()),
        // Ready to serve in the group: publishing, or able to take over.
        // What a rollout of an [ha] group waits on.
        ("GET", "/readyz/group") => readiness(health.not_serving_group()),
        ("GET", "/readyz") => readiness(health.not_ready()),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        ),
    };
    answer(stream, status, content_type, &body).await;
}

/// Writes the response (in [`CONNECTION_TIMEOUT`]) and closes.
async fn answer(mut stream: TcpStream, status: &str, content_type: &str, body: &str) {
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// A readiness answer: 200 `ready`, or 503 with why not.
fn readiness(not_ready: Option<String>) -> (&'static str, &'static str, String) {
    match not_ready {
        None => ("200 OK", "text/plain", "ready\n".to_string()),
        Some(why) => (
            "503 Service Unavailable",
            "text/plain",
            format!("not ready: {why}\n"),
        ),
    }
}

/// `GET path` on the listener bound to `listen` (an unspecified address,
/// such as `0.0.0.0`, is reached on loopback): `Ok` with the body on a
/// 200, else why not. For container and orchestrator health checks that
/// have no HTTP client of their own.
pub fn probe(listen: SocketAddr, path: &str, timeout: Duration) -> Result<String, String> {
    let target = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), listen.port())
        }
        _ => listen,
    };
    let failed = |e: std::io::Error| format!("GET {path} on {target}: {e}");
    let mut stream = std::net::TcpStream::connect_timeout(&target, timeout).map_err(failed)?;
    stream.set_read_timeout(Some(timeout)).map_err(failed)?;
    stream.set_write_timeout(Some(timeout)).map_err(failed)?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
    )
    .map_err(failed)?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(failed)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(body.to_owned())
    } else {
        Err(format!("GET {path} on {target}: {status}: {}", body.trim()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn listening() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let health = Health {
            metrics: Arc::new(Metrics::default()),
            broker: Arc::new(BrokerHealth::default()),
            max_lag: Duration::from_secs(60),
            acked: watch::channel(None).1,
            adopted: watch::channel(None).1,
            stored: None,
        };
        tokio::spawn(serve(listener, Arc::new(health)));
        at
    }

    fn healthz(at: SocketAddr) -> Result<String, String> {
        probe(at, "/healthz", Duration::from_millis(500))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_past_the_cap_wait_unaccepted_and_the_next_is_served_once_they_close() {
        let at = listening().await;
        let idle: Vec<_> = (0..MAX_CONNECTIONS * 3)
            .map(|_| std::net::TcpStream::connect(at).unwrap())
            .collect();
        // Every slot is held by an idle connection: the probe is not accepted.
        let held = tokio::task::spawn_blocking(move || healthz(at))
            .await
            .unwrap();
        assert!(held.is_err(), "{held:?}");
        drop(idle);
        let served = tokio::task::spawn_blocking(move || healthz(at))
            .await
            .unwrap();
        assert_eq!(served.as_deref(), Ok("ok\n"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_that_never_finishes_its_request_is_closed_after_the_timeout() {
        let at = listening().await;
        let mut slow = std::net::TcpStream::connect(at).unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
        let started = std::time::Instant::now();
        let mut rest = Vec::new();
        let read = tokio::task::spawn_blocking(move || slow.read_to_end(&mut rest).map(|_| rest))
            .await
            .unwrap()
            .unwrap();
        // Closed unanswered once the time was up, its slot free again.
        assert!(read.is_empty(), "{read:?}");
        assert!(started.elapsed() >= CONNECTION_TIMEOUT - Duration::from_millis(100));
        assert!(started.elapsed() < CONNECTION_TIMEOUT * 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_head_split_across_reads_and_one_sent_byte_by_byte_are_both_answered() {
        let at = listening().await;
        let answer = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(at).unwrap();
            for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" {
                stream.write_all(&[*byte]).unwrap();
                stream.flush().unwrap();
            }
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            answer
        })
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");
    }
}
