//! The metrics and health listener: `GET /metrics`, `/healthz`, `/readyz`,
//! and [`probe`], the client side of a health check.
//!
//! A deliberately small HTTP/1.1 responder (one request per connection,
//! `Connection: close`): three read-only endpoints for scrapers and probes
//! do not need a web framework in the forwarder's build.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::DefiniteError;
use outbox_sink::BrokerHealth;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::Metrics;

/// What readiness is judged on.
pub struct Health {
    pub metrics: Arc<Metrics>,
    pub broker: Arc<BrokerHealth>,
    /// Not ready while the lag is above this.
    pub max_lag: Duration,
}

impl Health {
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

/// Binds `listen` and serves until the task is dropped.
pub async fn bind(
    listen: SocketAddr,
    health: Health,
) -> Result<tokio::task::JoinHandle<()>, DefiniteError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| DefiniteError::Config(format!("metrics.listen {listen}: {e}")))?;
    tracing::info!(%listen, "metrics and health endpoints listening");
    let health = Arc::new(health);
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let health = health.clone();
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), respond(stream, &health)).await;
            });
        }
    }))
}

async fn respond(mut stream: TcpStream, health: &Health) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&request);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4",
            health.metrics.render(),
        ),
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_string()),
        ("GET", "/readyz") => match health.not_ready() {
            None => ("200 OK", "text/plain", "ready\n".to_string()),
            Some(why) => (
                "503 Service Unavailable",
                "text/plain",
                format!("not ready: {why}\n"),
            ),
        },
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
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
