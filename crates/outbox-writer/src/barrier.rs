//! Waiting until the forwarder has published what a transaction wrote: a
//! service that must know its event is in Kafka before it answers (a saga
//! step, an integration test, a read-your-writes API) takes the
//! transaction's GTID after the commit ([`committed_gtid`]) and waits on
//! the forwarder's `GET /acked` ([`wait_published`]), which answers once
//! the broker has acknowledged every message of it and the checkpoint
//! past it is stored.
//!
//! ```no_run
//! # async fn place(conn: &mut mysql_async::Conn) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! // ... the transaction with its event, committed ...
//! let gtid = outbox_writer::committed_gtid(conn).await?;
//! outbox_writer::wait_published("127.0.0.1:9464", &gtid, Duration::from_secs(5)).await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::error::WriteError;

/// The longest one request to the forwarder waits; a longer wait asks again.
const ONE_REQUEST: Duration = Duration::from_secs(30);

/// The pause before asking again after a connection failed or the
/// forwarder could not tell (restarting, too many waiting).
const RETRY: Duration = Duration::from_millis(200);

/// What to wait for after the session's commit: on MariaDB the GTID of the
/// last transaction the session committed (`@@last_gtid`); on MySQL the
/// server's executed set (`@@GLOBAL.gtid_executed`), which holds it (and
/// whatever else committed before: waiting for it is a barrier on all of
/// them).
pub async fn committed_gtid(conn: &mut Conn) -> Result<String, WriteError> {
    let gtid: Option<String> = match conn.query_first("SELECT @@last_gtid").await {
        Ok(gtid) => gtid,
        // MySQL has no @@last_gtid (1193: unknown system variable).
        Err(mysql_async::Error::Server(e)) if e.code == 1193 => conn
            .query_first("SELECT @@GLOBAL.gtid_executed")
            .await
            .map_err(WriteError::Gtid)?,
        Err(e) => return Err(WriteError::Gtid(e)),
    };
    match gtid.map(|g| g.replace('\n', "")).filter(|g| !g.is_empty()) {
        Some(gtid) => Ok(gtid),
        None => Err(WriteError::NoGtid),
    }
}

/// Waits until the forwarder whose `metrics.listen` is `forwarder`
/// (`host:port`) has published every transaction up to `gtid` (a GTID, or
/// a GTID set from [`committed_gtid`]), at most `timeout`. A forwarder
/// that restarts meanwhile is asked again; the error says what it last
/// answered.
pub async fn wait_published(
    forwarder: &str,
    gtid: &str,
    timeout: Duration,
) -> Result<(), WriteError> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut why = String::from("not asked");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WriteError::NotPublished {
                gtid: gtid.to_owned(),
                waited: started.elapsed(),
                why,
            });
        }
        let wait = left.min(ONE_REQUEST);
        let asked = tokio::time::timeout(left + Duration::from_secs(2), ask(forwarder, gtid, wait));
        match asked.await {
            Ok(Ok((200, _))) => return Ok(()),
            Ok(Ok((504, body))) => why = body,
            // Asking again cannot help: a malformed or overlong request, a
            // forwarder without /acked, a checkpoint without GTIDs.
            Ok(Ok((status @ (400 | 404 | 431), body))) => {
                return Err(WriteError::NotPublished {
                    gtid: gtid.to_owned(),
                    waited: started.elapsed(),
                    why: format!("the forwarder answered {status}: {body}"),
                })
            }
            Ok(Ok((503, body))) if body.contains("carries no GTID state") => {
                return Err(WriteError::NotPublished {
                    gtid: gtid.to_owned(),
                    waited: started.elapsed(),
                    why: body,
                })
            }
            Ok(Ok((status, body))) => {
                why = format!("{status}: {body}");
                tokio::time::sleep(RETRY.min(left)).await;
            }
            Ok(Err(e)) => {
                why = format!("asking the forwarder at {forwarder}: {e}");
                tokio::time::sleep(RETRY.min(left)).await;
            }
            Err(_) => why = format!("the forwarder at {forwarder} did not answer"),
        }
    }
}

/// One `GET /acked`: the status and the body's first line.
async fn ask(forwarder: &str, gtid: &str, wait: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(forwarder).await?;
    let request = format!(
        "GET /acked?gtid={}&wait_ms={} HTTP/1.1\r\nHost: {forwarder}\r\nConnection: close\r\n\r\n",
        encoded(gtid),
        wait.as_millis()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {head:?}")))?;
    Ok((status, body.trim().to_owned()))
}

/// `text` with everything but unreserved characters percent-encoded.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gtid_set_is_encoded_for_a_query() {
        assert_eq!(encoded("0-1-42"), "0-1-42");
        assert_eq!(
            encoded("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,\nab:7"),
            "3e11fa47-71ca-11e1-9e33-c80aa9429562%3A1-5%2C%0Aab%3A7"
        );
    }
}
