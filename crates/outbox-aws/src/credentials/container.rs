//! Credentials from the container credentials endpoint: ECS gives a task
//! role's credentials at `http://169.254.170.2` and the path in
//! `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`; EKS Pod Identity, and ECS
//! elsewhere, at the whole URL in `AWS_CONTAINER_CREDENTIALS_FULL_URI`,
//! with an `Authorization` header read from
//! `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` (at each request, as EKS
//! replaces it) or given in `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
//!
//! As AWS's SDKs do, a full URL over plain HTTP must name a loopback
//! address or one of the container agents' own, so that the authorization
//! token is never sent in clear across a network.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use super::found::{from_metadata_json, Env, Found};
use crate::http;

/// ECS's credentials endpoint, which a relative URI is on.
const ECS_ENDPOINT: &str = "http://169.254.170.2";

/// The hosts a full URL over plain HTTP may name besides loopback ones:
/// ECS's agent and EKS Pod Identity's (IPv4 and IPv6).
const CONTAINER_HOSTS: [&str; 3] = ["169.254.170.2", "169.254.170.23", "fd00:ec2::23"];

/// How long connecting to the endpoint may take: it is on the local link.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the whole exchange may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Credentials from the container endpoint, when one is set.
pub(crate) fn load(env: &Env<'_>, _now: SystemTime) -> Result<Found, String> {
    let (url, variable) = if let Some(path) = env.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
        let slash = if path.starts_with('/') { "" } else { "/" };
        (
            format!("{ECS_ENDPOINT}{slash}{path}"),
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        )
    } else if let Some(url) = env.var("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
        check_full_uri(&url)?;
        (url, "AWS_CONTAINER_CREDENTIALS_FULL_URI")
    } else {
        return Ok(Found::Absent(
            "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and \
             AWS_CONTAINER_CREDENTIALS_FULL_URI are not set)"
                .to_owned(),
        ));
    };
    let authorization = authorization(env)?;

    let agent = http::agent(CONNECT_TIMEOUT, TIMEOUT, true);
    let mut request = agent.get(&url).header("Accept", "application/json");
    if let Some(authorization) = &authorization {
        request = request.header("Authorization", authorization);
    }
    let source = format!("the container credentials endpoint {url} ({variable})");
    let reply = http::reply(request.call()).map_err(|error| format!("{source}: {error}"))?;
    if reply.status != 200 {
        return Err(format!(
            "{source} answered HTTP {}{}; check the task role or the pod identity association",
            reply.status,
            error_detail(&reply.body)
        ));
    }
    from_metadata_json(&reply.body, &source).map(Found::Credentials)
}

/// The `Authorization` header's value, from its file or its variable.
fn authorization(env: &Env<'_>) -> Result<Option<String>, String> {
    let token = match env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
        Some(file) => {
            let token = std::fs::read_to_string(&file).map_err(|error| {
                format!(
                    "cannot read the container authorization token {file} \
                     (AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE): {error}"
                )
            })?;
            Some(token.trim().to_owned())
        }
        None => env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
    };
    if token
        .as_deref()
        .is_some_and(|token| token.contains(['\r', '\n']))
    {
        return Err(
            "the container authorization token has a line break inside it; \
                    check AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE)"
                .to_owned(),
        );
    }
    Ok(token.filter(|token| !token.is_empty()))
}

/// Refuses a full URL over plain HTTP to a host other than a loopback one
/// or a container agent's.
fn check_full_uri(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") {
        return Ok(());
    }
    let Some(rest) = lower.strip_prefix("http://") else {
        return Err(format!(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI {url} is not an http:// or https:// URL"
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    let allowed = host == "localhost"
        || CONTAINER_HOSTS.contains(&host)
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI {url} names {host} over plain HTTP; only a \
             loopback address, 169.254.170.2 (ECS) or 169.254.170.23 (EKS Pod Identity) is \
             taken so, or use https://"
        ))
    }
}

/// The code and message of an error the endpoint answered with (JSON
/// `{"code": ..., "message": ...}`, in either case), as `: code: message`.
fn error_detail(body: &str) -> String {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return String::new();
    };
    let field = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|name| value.get(name).and_then(serde_json::Value::as_str))
            .unwrap_or_default()
            .to_owned()
    };
    let (code, message) = (field(["code", "Code"]), field(["message", "Message"]));
    match (code.is_empty(), message.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!(": {code}"),
        (true, false) => format!(": {message}"),
        (false, false) => format!(": {code}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_uri_over_http_must_stay_local() {
        for url in [
            "https://creds.example.com/v1",
            "http://127.0.0.1:8080/creds",
            "http://127.1.2.3/creds",
            "http://localhost/creds",
            "http://[::1]:80/creds",
            "http://169.254.170.2/v2/credentials",
            "http://169.254.170.23/v1/credentials",
            "http://[fd00:ec2::23]/v1/credentials",
        ] {
            assert_eq!(check_full_uri(url), Ok(()), "{url}");
        }
        for url in [
            "http://creds.example.com/v1",
            "http://10.0.0.1/creds",
            "http://127.0.0.1.example.com/creds",
            "http://user@example.com/creds",
            "ftp://127.0.0.1/creds",
        ] {
            assert!(check_full_uri(url).is_err(), "{url}");
        }
    }

    #[test]
    fn reads_error_replies() {
        assert_eq!(
            error_detail(r#"{"code":"NoCredentialsFound","message":"no role"}"#),
            ": NoCredentialsFound: no role"
        );
        assert_eq!(error_detail("not json"), "");
    }
}
