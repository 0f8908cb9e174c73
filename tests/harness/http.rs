//! The forwarder's HTTP endpoints (metrics, health), as the tests read them.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// `GET path` on 127.0.0.1:`port`: (status code, body), or why not.
pub fn try_http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not HTTP: {response:?}")))?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    Ok((
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    ))
}

/// A chunked HTTP/1.1 body, joined.
fn dechunk(mut body: &str) -> String {
    let mut joined = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        joined.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    joined
}

pub fn http_get(port: u16, path: &str) -> (u16, String) {
    try_http_get(port, path).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Waits until `GET path` answers `status`; returns the body.
pub async fn wait_for_status(port: u16, path: &str, status: u16, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let answer = try_http_get(port, path);
        if let Ok((got, body)) = &answer {
            if *got == status {
                return body.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{path} answers {answer:?} after {timeout:?}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of one sample line `name{labels} value` in a metrics body.
pub fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("no {series} in:\n{body}"))
        .parse()
        .unwrap()
}

/// `config` with the metrics listener on `port`.
pub fn with_metrics(config: crate::ForwarderToml, port: u16) -> crate::ForwarderToml {
    config.section(&format!(
        "[metrics]\nlisten = \"127.0.0.1:{port}\"\nready_max_lag_seconds = 30\n"
    ))
}
