//! The few blocking HTTP requests credentials take (STS, the container
//! endpoint, the instance metadata service), on `ureq` with rustls.
//!
//! Every answer is read whole, whatever its status, so that a source can
//! say what the service replied; bodies are capped at [`MAX_BODY`] bytes.

use std::time::Duration;

/// The user agent the forwarder names itself with, in MSK tokens and in
/// its requests to STS and the metadata services.
pub const USER_AGENT: &str = concat!("outbox-forwarder/", env!("CARGO_PKG_VERSION"));

/// The most of a reply's body that is read: credentials are a few
/// kilobytes.
pub(crate) const MAX_BODY: u64 = 64 * 1024;

/// The response `ureq` returns.
type Response = ureq::http::Response<ureq::Body>;

/// A reply: its status and body.
pub(crate) struct Reply {
    pub status: u16,
    pub body: String,
}

/// A client for one source. `connect` bounds each connection attempt,
/// `total` the whole exchange. The metadata services, always on the local
/// link, are reached directly (`direct`); STS through the environment's
/// proxy (`HTTPS_PROXY`, `NO_PROXY`), as AWS's SDKs do. No redirect is
/// followed: none of these services sends one, and following one would
/// carry a token elsewhere.
pub(crate) fn agent(connect: Duration, total: Duration, direct: bool) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(connect))
        .timeout_global(Some(total))
        .user_agent(USER_AGENT);
    if direct {
        config = config.proxy(None);
    }
    ureq::Agent::new_with_config(config.build())
}

/// The reply to a request `sent`; a failure to reach the service, or to
/// read its reply, as text.
pub(crate) fn reply(sent: Result<Response, ureq::Error>) -> Result<Reply, String> {
    let mut response = sent.map_err(describe)?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_BODY)
        .read_to_string()
        .map_err(describe)?;
    Ok(Reply { status, body })
}

/// `ureq`'s error in words.
fn describe(error: ureq::Error) -> String {
    match error {
        ureq::Error::Timeout(_) => "no answer in time".to_owned(),
        ureq::Error::ConnectionFailed => "connection refused or unreachable".to_owned(),
        ureq::Error::HostNotFound => "host not found".to_owned(),
        ureq::Error::BodyExceedsLimit(_) => format!("reply longer than {MAX_BODY} bytes"),
        ureq::Error::Io(error) => error.to_string(),
        other => other.to_string(),
    }
}
