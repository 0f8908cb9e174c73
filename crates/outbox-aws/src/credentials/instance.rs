//! Credentials of the EC2 instance profile, from the instance metadata
//! service, by IMDSv2: a session token first (`PUT /latest/api/token`),
//! then the role's name and its credentials, each request carrying the
//! token. IMDSv1 (no token) is not used: instances are commonly set to
//! refuse it, and it is what SSRF attacks on metadata go through.
//!
//! The service is at `http://169.254.169.254` (`http://[fd00:ec2::254]`
//! with `AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6`), or at
//! `AWS_EC2_METADATA_SERVICE_ENDPOINT`; `AWS_EC2_METADATA_DISABLED=true`
//! skips it. Off EC2 nothing answers there, so the connection has one
//! second: a machine elsewhere learns at once that there is no instance
//! profile, which is then reported as not set up rather than as an error.

use std::time::{Duration, SystemTime};

use super::found::{from_metadata_json, Env, Found};
use crate::http;

/// The metadata service's address.
const ENDPOINT: &str = "http://169.254.169.254";

/// Its address over IPv6.
const ENDPOINT_IPV6: &str = "http://[fd00:ec2::254]";

/// Where the instance profile's role, then its credentials, are.
const CREDENTIALS_PATH: &str = "/latest/meta-data/iam/security-credentials/";

/// How long a session token lasts, in seconds: the most the service gives.
const TOKEN_TTL_SECONDS: &str = "21600";

/// How long connecting to the service may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long each exchange with it may take.
const TIMEOUT: Duration = Duration::from_secs(3);

/// The instance profile's credentials, when there is one.
pub(crate) fn load(env: &Env<'_>, _now: SystemTime) -> Result<Found, String> {
    if env
        .var("AWS_EC2_METADATA_DISABLED")
        .is_some_and(|value| value.eq_ignore_ascii_case("true"))
    {
        return Ok(Found::Absent(
            "the EC2 instance metadata service (disabled by AWS_EC2_METADATA_DISABLED)".to_owned(),
        ));
    }
    let base = match env.var("AWS_EC2_METADATA_SERVICE_ENDPOINT") {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => match env.var("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE") {
            Some(mode) if mode.eq_ignore_ascii_case("ipv6") => ENDPOINT_IPV6.to_owned(),
            _ => ENDPOINT.to_owned(),
        },
    };
    let service = format!("the EC2 instance metadata service at {base}");
    let agent = http::agent(CONNECT_TIMEOUT, TIMEOUT, true);

    let sent = agent
        .put(format!("{base}/latest/api/token"))
        .header("X-aws-ec2-metadata-token-ttl-seconds", TOKEN_TTL_SECONDS)
        .send_empty();
    let token = match http::reply(sent) {
        Ok(reply) if reply.status == 200 && !reply.body.trim().is_empty() => {
            reply.body.trim().to_owned()
        }
        Ok(reply) => {
            return Ok(Found::Absent(format!(
                "{service} (it refused an IMDSv2 session token: HTTP {})",
                reply.status
            )))
        }
        Err(error) => return Ok(Found::Absent(format!("{service} ({error})"))),
    };

    let get = |path: &str| {
        let sent = agent
            .get(format!("{base}{path}"))
            .header("X-aws-ec2-metadata-token", &token)
            .call();
        http::reply(sent).map_err(|error| format!("{service}, {path}: {error}"))
    };
    let roles = get(CREDENTIALS_PATH)?;
    match roles.status {
        200 => {}
        404 => {
            return Ok(Found::Absent(format!(
                "{service} (no instance profile is attached to this instance)"
            )))
        }
        status => {
            return Err(format!(
                "{service} answered HTTP {status} for {CREDENTIALS_PATH}; check the \
                 instance's metadata options (IMDSv2 enabled, hop limit 2 or more in a container)"
            ))
        }
    }
    let Some(role) = roles
        .body
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
    else {
        return Ok(Found::Absent(format!(
            "{service} (no instance profile is attached to this instance)"
        )));
    };
    let path = format!("{CREDENTIALS_PATH}{role}");
    let reply = get(&path)?;
    if reply.status != 200 {
        return Err(format!(
            "{service} answered HTTP {} for {path}; check the instance profile's role",
            reply.status
        ));
    }
    from_metadata_json(&reply.body, &format!("{service} (role {role})")).map(Found::Credentials)
}
